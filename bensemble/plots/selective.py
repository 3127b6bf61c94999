"""Risk-coverage curve for selective prediction (compute with bensemble.metrics, then draw)."""

from __future__ import annotations

from typing import Any

import torch

from bensemble._validation import (
    as_float_tensor,
    as_labels,
    as_member_stack,
    check_bool,
    check_positive,
    check_probability,
    to_tensor,
)
from bensemble.metrics._selective_inputs import selective_inputs
from bensemble.metrics.selective import aurc, risk_coverage_curve, selective_confidence
from bensemble.plots._display import Display, check_vectors_of_one_shape
from bensemble.plots._layout import place_legend

__all__ = ["RiskCoverageDisplay", "oracle_risk", "plot_risk_coverage"]


class RiskCoverageDisplay(Display):
    """Risk-coverage curve: selective risk against coverage as the confidence threshold drops.

    Holds the output of :func:`bensemble.metrics.risk_coverage_curve` unchanged; :meth:`plot`
    only draws it. Build it with :meth:`from_predictions` or :meth:`from_ensemble`.

    Args:
        coverage: coverage at each threshold ``[G]``.
        risk: selective risk at each threshold ``[G]``.
        thresholds: the distinct confidences, decreasing ``[G]``.
        aurc: area under the curve (:func:`bensemble.metrics.aurc`), shown in the legend.
        name: label of the curve.

    Attributes:
        ax_: the matplotlib Axes drawn on (after :meth:`plot`).
        figure_: its Figure.
        line_: the drawn Line2D.
        oracle_line_, random_line_: the reference curves (see :meth:`plot`).

    Example:
        >>> import matplotlib
        >>> matplotlib.use("Agg")
        >>> d = RiskCoverageDisplay.from_predictions([0.9, 0.8, 0.7], [1, 0, 1]).plot()
        >>> d.ax_.get_xlabel()
        'Coverage'
    """

    # the constructor's arguments, kept unchanged (after validation) by ``_store``
    coverage: torch.Tensor
    risk: torch.Tensor
    thresholds: torch.Tensor
    aurc: float | None
    name: str | None

    def __init__(
        self,
        coverage: torch.Tensor,
        risk: torch.Tensor,
        thresholds: torch.Tensor,
        *,
        aurc: float | None = None,
        name: str | None = None,
    ) -> None:
        fn = "RiskCoverageDisplay"
        curve = {"coverage": coverage, "risk": risk, "thresholds": thresholds}
        check_vectors_of_one_shape(fn, curve)
        if aurc is not None:
            aurc = check_positive(aurc, "aurc", fn, allow_zero=True)
        self._store(aurc=aurc, name=name, **curve)

    @classmethod
    def from_predictions(
        cls,
        confidence: Any = None,
        correct: Any = None,
        *,
        name: str | None = None,
        probs: Any = None,
        labels: Any = None,
    ) -> RiskCoverageDisplay:
        """Compute the curve from confidences ``[N]`` and 0/1 correctness ``[N]``, or from
        ``(probs [N, K], labels [N])`` (positionally by shape, or by keyword), as
        :func:`bensemble.metrics.risk_coverage_curve` takes them."""
        c, ok = selective_inputs(
            "RiskCoverageDisplay.from_predictions", confidence, correct, probs, labels
        )
        coverage, risk, thresholds = risk_coverage_curve(c, ok)
        return cls(coverage, risk, thresholds, aurc=aurc(c, ok), name=name)

    @classmethod
    def from_ensemble(
        cls,
        member_probs: Any,
        labels: Any,
        *,
        confidence: str = "max_probability",
        name: str | None = None,
        binary: bool = False,
    ) -> RiskCoverageDisplay:
        """Curve of the mean prediction of ``member_probs [M, N, K]`` against ``labels [N]``.

        ``confidence`` is a method of :func:`bensemble.metrics.selective_confidence`; correctness
        is the argmax of the mean prediction. ``binary=True`` reads a 2-D ``member_probs`` as
        binary positive-class members ``[M, N]`` (a 2-D array is an error without it).
        """
        fn = "RiskCoverageDisplay.from_ensemble"
        # validated in the input's dtype, so float16 data keeps its own row-sum tolerance
        p = as_member_stack(
            to_tensor(member_probs, "member_probs", fn), fn=fn, binary=binary, dtype=None
        )
        conf = selective_confidence(p, confidence, binary=binary)
        p = p.to(torch.float64)
        if binary:
            p = torch.stack([1.0 - p, p], dim=-1)
        mean = p.mean(dim=0)
        y = as_labels(labels, "labels", fn, n=mean.shape[0], num_classes=mean.shape[1])
        correct = (mean.argmax(dim=-1) == y.to(mean.device)).to(torch.float64)
        return cls.from_predictions(conf, correct, name=name or confidence)

    @property
    def error_rate(self) -> float:
        """Overall error rate: the selective risk at full coverage (the last point)."""
        return float(self.risk[-1])

    def plot(
        self,
        ax: Any = None,
        *,
        name: str | None = None,
        show_oracle: bool = True,
        show_random: bool = True,
        legend_loc: str | None = "free",
        **kwargs: Any,
    ) -> RiskCoverageDisplay:
        """Draw selective risk against coverage, one vertex per threshold.

        Two reference curves frame it (drawn once per Axes, so several displays of the same
        predictions can share one ``ax``): the **oracle** (:func:`oracle_risk`: every error
        rejected first, the best achievable risk at each coverage given the error rate ``e``:
        0 up to coverage ``1 - e``, then ``(c - 1 + e) / c``) and **random** rejection (a
        constant risk ``e``).

        Args:
            ax: matplotlib Axes; a new figure is created when None.
            name: legend label (overrides the one given at construction).
            show_oracle: draw the oracle curve.
            show_random: draw the random-rejection line.
            legend_loc: ``"free"`` (default: the first inside corner, upper left first, whose
                legend box touches no curve, else right of the Axes), ``"outside"``, any
                matplotlib ``loc``, or ``None`` (no legend).
            **kwargs: passed to ``Axes.plot``.

        Returns:
            ``self`` with ``ax_``, ``figure_`` and ``line_`` set (``oracle_line_`` and
            ``random_line_`` too: the reference Line2Ds, None when not drawn).
        """
        import matplotlib.pyplot as plt

        fn = "RiskCoverageDisplay.plot"
        show_oracle = check_bool(show_oracle, "show_oracle", fn)
        show_random = check_bool(show_random, "show_random", fn)
        if ax is None:
            _, ax = plt.subplots(layout="constrained")
        label = name if name is not None else self.name
        if self.aurc is not None:
            label = f"{label} (AURC {self.aurc:.4f})" if label else f"AURC {self.aurc:.4f}"
        (self.line_,) = ax.plot(
            self.coverage.cpu().numpy(), self.risk.cpu().numpy(), label=label, **kwargs
        )
        e = self.error_rate
        self.oracle_line_ = self.random_line_ = None
        if show_oracle:
            coverage = torch.linspace(0.0, 1.0, 201, dtype=torch.float64)[1:]
            coverage = torch.cat([coverage, torch.tensor([1.0 - e], dtype=torch.float64)])
            coverage = coverage[coverage > 0].unique()
            self.oracle_line_ = _reference(
                ax, "oracle", coverage.numpy(), oracle_risk(coverage, e).numpy(), ":", "black"
            )
        if show_random:
            self.random_line_ = _reference(ax, "random", [0.0, 1.0], [e, e], "--", "gray")
        ax.set_xlabel("Coverage")
        ax.set_ylabel("Selective risk")
        ax.set_xlim(0.0, 1.0)
        top = max(float(self.risk.max()) if self.risk.numel() else 0.0, e)
        ax.set_ylim(0.0, max(ax.get_ylim()[1], 1.08 * top if top > 0 else 1.0))
        place_legend(ax, legend_loc if (label or show_oracle or show_random) else None)
        self._drawn_on(ax)
        return self


#: Legend entries (and ``gid``) of the two reference curves.
REFERENCE_LABELS = {"oracle": "oracle (errors rejected first)", "random": "random rejection"}


def _reference(ax: Any, kind: str, x: Any, y: Any, style: str, color: str) -> Any:
    """Draw a reference curve once per Axes (a second display reuses the first one's line)."""
    gid = f"bensemble-{kind}"
    for line in ax.lines:
        if line.get_gid() == gid:
            return line
    (line,) = ax.plot(
        x, y, linestyle=style, color=color, linewidth=1.0, label=REFERENCE_LABELS[kind], gid=gid
    )
    return line


def oracle_risk(coverage: Any, error_rate: float) -> torch.Tensor:
    """Best achievable selective risk at each coverage when a fraction ``error_rate`` is wrong.

    An oracle rejects the errors first: the risk is 0 up to coverage ``1 - e``, then
    ``(c - (1 - e)) / c``.

    Args:
        coverage: ``[G]`` coverages in ``(0, 1]``.
        error_rate: overall error rate ``e`` in ``[0, 1]``.

    Returns:
        float64 ``[G]``.

    Example:
        >>> oracle_risk([0.5, 0.75, 1.0], 0.5).tolist()
        [0.0, 0.3333333333333333, 0.5]
    """
    fn = "oracle_risk"
    c = as_float_tensor(coverage, "coverage", fn, ndim=1)
    e = check_probability(error_rate, "error_rate", fn, open_interval=False)
    if bool(((c <= 0) | (c > 1)).any()):
        raise ValueError(f"{fn}: `coverage` must lie in (0, 1] (got values outside)")
    return ((c - (1.0 - e)).clamp_min(0.0) / c).to(torch.float64)


def plot_risk_coverage(
    confidence: Any = None,
    correct: Any = None,
    *,
    name: str | None = None,
    probs: Any = None,
    labels: Any = None,
) -> Any:
    """Risk-coverage curve of ``confidence [N]`` against 0/1 ``correct [N]`` (or of
    ``(probs [N, K], labels [N])``) as a Figure.

    A thin shell over :meth:`RiskCoverageDisplay.from_predictions` and
    :meth:`RiskCoverageDisplay.plot`.

    Returns:
        The matplotlib Figure.
    """
    display = RiskCoverageDisplay.from_predictions(
        confidence, correct, name=name, probs=probs, labels=labels
    )
    return display.plot().figure_
