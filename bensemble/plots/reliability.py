"""The classic reliability diagram: per-bin accuracy against confidence, Wilson intervals, counts.

Compute, then draw: :func:`bensemble.metrics.binned_calibration_stats` reduces the predictions to
per-bin sums (:class:`~bensemble.metrics.calibration.CalibrationBins`), :func:`wilson_interval`
adds a confidence interval for each bin's accuracy, and :class:`ReliabilityDisplay` only stores
and draws those arrays.
"""

from __future__ import annotations

from typing import Any

import torch

from bensemble._validation import (
    as_float_tensor,
    as_labels,
    as_probs,
    check_bool,
    check_probability,
)
from bensemble.metrics.calibration import (
    CalibrationBins,
    binned_calibration_stats,
    calibration_error_from_bins,
)
from bensemble.plots._display import Display
from bensemble.plots._layout import diagonal, place_legend

__all__ = ["wilson_interval", "ReliabilityDisplay", "plot_reliability_diagram"]

_F64 = torch.float64


def wilson_interval(
    successes: Any, counts: Any, confidence_level: float = 0.95
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Wilson score interval for binomial proportions, elementwise.

    With ``p = s / n`` and ``z`` the ``(1 + level) / 2`` normal quantile:

    .. math:: \frac{p + z^2 / (2n)}{1 + z^2 / n} \pm
              \frac{z}{1 + z^2 / n}\sqrt{\frac{p (1 - p)}{n} + \frac{z^2}{4 n^2}}

    Args:
        successes: ``[B]`` number of successes per bin (e.g. ``CalibrationBins.sum_correct``).
        counts: ``[B]`` number of trials per bin; an empty bin (0 trials) gets NaN bounds.
        confidence_level: coverage of the interval, in ``(0, 1)``.

    Returns:
        ``(lower, upper)``, float64 ``[B]`` each, inside ``[0, 1]``.

    Example:
        >>> lo, hi = wilson_interval([5.0], [10.0])
        >>> round(float(lo[0]), 4), round(float(hi[0]), 4)
        (0.2366, 0.7634)
    """
    fn = "wilson_interval"
    s = as_float_tensor(successes, "successes", fn, ndim=1)
    n = as_float_tensor(counts, "counts", fn, ndim=1).to(s.device)
    level = check_probability(confidence_level, "confidence_level", fn)
    if s.shape != n.shape:
        raise ValueError(
            f"{fn}: `successes` and `counts` must have the same shape "
            f"(got {list(s.shape)} and {list(n.shape)})"
        )
    if bool((n < 0).any()) or bool((s < 0).any()) or bool((s > n).any()):
        raise ValueError(f"{fn}: `successes` must lie in [0, counts] (got values outside)")
    z = float(torch.special.ndtri(torch.tensor((1.0 + level) / 2.0, dtype=_F64)))
    z2 = z * z
    safe_n = n.clamp_min(1.0)
    p = s / safe_n
    denom = 1.0 + z2 / safe_n
    centre = (p + z2 / (2.0 * safe_n)) / denom
    half = (z / denom) * torch.sqrt(p * (1.0 - p) / safe_n + z2 / (4.0 * safe_n * safe_n))
    nan = torch.full_like(p, float("nan"))
    # The bounds are exactly 0 at s = 0 and exactly 1 at s = n; pin them against rounding.
    lower = torch.where(s > 0, (centre - half).clamp(0.0, 1.0), torch.zeros_like(p))
    upper = torch.where(s < n, (centre + half).clamp(0.0, 1.0), torch.ones_like(p))
    lower = torch.where(n > 0, lower, nan)
    upper = torch.where(n > 0, upper, nan)
    return lower, upper


class ReliabilityDisplay(Display):
    """Reliability diagram: accuracy against mean confidence per bin, with counts.

    Holds a :class:`~bensemble.metrics.calibration.CalibrationBins` and its Wilson intervals
    unchanged; :meth:`plot` only draws them. Build it with :meth:`from_predictions` (top-label of
    ``[N, K]`` probabilities) or :meth:`from_confidences` (any 1-D confidence against 0/1
    outcomes, e.g. the positive-class mean prediction of a binary task against its labels).

    Args:
        bins: per-bin statistics from :func:`bensemble.metrics.binned_calibration_stats`.
        lower: ``[B]`` lower Wilson bound of each bin's accuracy (NaN for an empty bin).
        upper: ``[B]`` upper Wilson bound.
        confidence_level: level of the intervals.
        name: label of the curve (the legend also shows the ECE).

    Attributes:
        ax_: Axes of the diagram (after :meth:`plot`).
        counts_ax_: Axes of the count bars, a separate panel (None without one).
        figure_: the Figure.
        errorbar_: the drawn ErrorbarContainer.
        diagonal_: the ``y = x`` Line2D (shared by every display drawn on ``ax_``).
        bars_: the BarContainer of the counts (None when no count panel was drawn).

    Example:
        >>> import matplotlib
        >>> matplotlib.use("Agg")
        >>> d = ReliabilityDisplay.from_confidences([0.2, 0.7, 0.9, 1.0], [0, 1, 0, 1], n_bins=2)
        >>> d.bins.counts.tolist()
        [1.0, 3.0]
        >>> d.plot().ax_.get_ylabel()
        'Accuracy'
    """

    # the constructor's arguments, kept unchanged (after validation) by ``_store``
    bins: CalibrationBins
    lower: torch.Tensor
    upper: torch.Tensor
    confidence_level: float
    name: str | None

    def __init__(
        self,
        bins: CalibrationBins,
        lower: torch.Tensor,
        upper: torch.Tensor,
        *,
        confidence_level: float = 0.95,
        name: str | None = None,
    ) -> None:
        fn = "ReliabilityDisplay"
        if not isinstance(bins, CalibrationBins):
            raise ValueError(f"{fn}: `bins` must be a CalibrationBins (got {type(bins).__name__})")
        for arg, value in (("lower", lower), ("upper", upper)):
            t = as_float_tensor(value, arg, fn, ndim=1, dtype=None, finite=False)
            if t.shape[0] != bins.n_bins:
                raise ValueError(
                    f"{fn}: `{arg}` must have one value per bin ({bins.n_bins}) "
                    f"(got shape {tuple(t.shape)})"
                )
        check_probability(confidence_level, "confidence_level", fn)
        self._store(
            bins=bins, lower=lower, upper=upper, confidence_level=confidence_level, name=name
        )

    @classmethod
    def from_confidences(
        cls,
        confidences: Any,
        correct: Any,
        *,
        n_bins: int = 15,
        binning: str = "uniform",
        confidence_level: float = 0.95,
        name: str | None = None,
    ) -> ReliabilityDisplay:
        """From 1-D confidences ``[N]`` and 0/1 outcomes ``[N]`` (see
        :func:`bensemble.metrics.binned_calibration_stats` for the bins)."""
        bins = binned_calibration_stats(confidences, correct, n_bins, binning)
        lower, upper = wilson_interval(bins.sum_correct, bins.counts, confidence_level)
        return cls(bins, lower, upper, confidence_level=confidence_level, name=name)

    @classmethod
    def from_predictions(
        cls,
        probs: Any,
        labels: Any,
        *,
        n_bins: int = 15,
        binning: str = "uniform",
        from_logits: bool = False,
        confidence_level: float = 0.95,
        name: str | None = None,
    ) -> ReliabilityDisplay:
        """Top-label diagram of ``probs [N, K]`` (confidence ``max_k p``, correct when the argmax
        equals ``labels [N]``), binned like
        :func:`bensemble.metrics.expected_calibration_error`."""
        fn = "ReliabilityDisplay.from_predictions"
        p = as_probs(probs, "probs", fn, from_logits=from_logits, dtype=None)
        y = as_labels(labels, "labels", fn, n=p.shape[0], num_classes=p.shape[1], device=p.device)
        confidence, prediction = p.max(dim=1)
        return cls.from_confidences(
            confidence,
            prediction == y,
            n_bins=n_bins,
            binning=binning,
            confidence_level=confidence_level,
            name=name,
        )

    @property
    def ece(self) -> float:
        """The ECE of the stored bins."""
        return calibration_error_from_bins(self.bins)

    def plot(
        self,
        ax: Any = None,
        *,
        show_counts: bool = True,
        counts_ax: Any = None,
        legend_loc: str | None = "free",
        **kwargs: Any,
    ) -> ReliabilityDisplay:
        """Draw the diagram; returns ``self``.

        Layout: with ``ax=None`` the display makes its own figure, the diagram above a separate
        count panel (a quarter of the height, sharing the confidence axis). With a given ``ax``
        nothing is drawn over it: the counts go to ``counts_ax`` when one is given (e.g. an Axes
        below ``ax``), else they are left out. The diagonal ``y = x`` ("Perfect calibration")
        is drawn once per Axes, so several displays can share one ``ax`` (each adds its markers
        and its legend entry).

        Args:
            ax: Axes to draw on (``None``: a new figure).
            show_counts: draw the per-bin counts as bars (where there is a panel for them).
            counts_ax: Axes for the count bars when ``ax`` is given.
            legend_loc: where the legend goes: ``"free"`` (default: the figure is drawn once and
                the first inside place, upper left, lower right, then the other corners and
                edges, whose legend box touches no marker, error bar or curve is kept, else the
                legend goes right of the Axes; the upper left is free for an overconfident
                model),
                ``"outside"`` (right of the Axes), any matplotlib ``loc``, or ``None``.
            **kwargs: passed to ``Axes.errorbar`` for the accuracy markers.
        """
        import matplotlib.pyplot as plt

        fn = "ReliabilityDisplay.plot"
        show_counts = check_bool(show_counts, "show_counts", fn)
        if counts_ax is not None and ax is None:
            raise ValueError(f"{fn}: `counts_ax` needs `ax` (got ax=None, which makes a figure)")
        if ax is None:
            _, axes = plt.subplots(
                2 if show_counts else 1,
                1,
                sharex=True,
                squeeze=False,
                gridspec_kw={"height_ratios": [3, 1]} if show_counts else None,
                figsize=(5, 6) if show_counts else (5, 5),
                layout="constrained",
            )
            ax = axes[0, 0]
            counts_ax = axes[1, 0] if show_counts else None
        else:
            if counts_ax is ax:
                raise ValueError(f"{fn}: `counts_ax` must be another Axes than `ax`")
            if not show_counts:
                counts_ax = None
        b = self.bins
        filled = b.counts > 0
        x = b.mean_confidence[filled].cpu().numpy()
        acc = b.accuracy[filled].cpu().numpy()
        lower = self.lower[filled].cpu().numpy()
        upper = self.upper[filled].cpu().numpy()
        label = f"{self.name + ' ' if self.name else ''}(ECE = {self.ece:.4f})"
        style = {"fmt": "o-", "capsize": 3, "label": label, **kwargs}
        yerr = [(acc - lower).clip(min=0.0), (upper - acc).clip(min=0.0)]
        self.errorbar_ = ax.errorbar(x, acc, yerr=yerr, **style)
        self.diagonal_ = diagonal(ax, 0.0, 1.0)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_ylabel("Accuracy")
        ax.set_title(f"Reliability diagram ({self.confidence_level:.0%} Wilson intervals)")
        self.bars_ = None
        if counts_ax is not None:
            edges = b.edges.cpu().numpy()
            shared = len(counts_ax.patches) > 0  # another display's bars are there already
            self.bars_ = counts_ax.bar(
                edges[:-1],
                b.counts.cpu().numpy(),
                width=edges[1:] - edges[:-1],
                align="edge",
                alpha=0.45 if shared else 1.0,
                edgecolor="black",
                linewidth=0.5,
                color=self.errorbar_.lines[0].get_color() if shared else "tab:gray",
            )
            counts_ax.set_xlim(0, 1)
            counts_ax.set_ylabel("Count")
            counts_ax.set_xlabel("Confidence")
            # a panel sharing the confidence axis carries its label alone
            shared_x = counts_ax.get_shared_x_axes().joined(ax, counts_ax)
            ax.set_xlabel("" if shared_x else "Confidence")
        else:
            ax.set_xlabel("Confidence")
        # last: a "free" placement lays out the finished figure (counts panel and labels)
        place_legend(ax, legend_loc, fontsize="small")
        self.counts_ax_ = counts_ax
        self._drawn_on(ax)
        return self


def plot_reliability_diagram(
    probs: Any,
    labels: Any,
    n_bins: int = 15,
    *,
    binning: str = "uniform",
    from_logits: bool = False,
    confidence_level: float = 0.95,
) -> Any:
    """Top-label reliability diagram of ``probs [N, K]`` against ``labels [N]`` as a Figure.

    A thin shell over :meth:`ReliabilityDisplay.from_predictions` and
    :meth:`ReliabilityDisplay.plot`.

    Returns:
        The matplotlib Figure (diagram above the per-bin counts).
    """
    display = ReliabilityDisplay.from_predictions(
        probs,
        labels,
        n_bins=n_bins,
        binning=binning,
        from_logits=from_logits,
        confidence_level=confidence_level,
    )
    return display.plot().figure_
