"""Epistemic reliability diagram (the toy-grid maps moved to :mod:`bensemble.plots.maps`).

Compute, then draw: :func:`bensemble.metrics.expected_epistemic_calibration_error` with
``return_details=True`` gives per-bin reported EU (``trust``) and the members' actual squared
error; :class:`EpistemicReliabilityDisplay` stores those arrays and draws them. A perfectly
epistemically calibrated model puts every bin on the diagonal.

Scale: EU and squared errors of a good model sit close to 0, so on linear axes most bins crowd
into the bottom-left corner. ``scale="auto"`` (the default) draws log-log axes when **more than
half of the points (by bin weight) lie in bins whose two coordinates are both below 1/10 of the
largest coordinate** (:data:`AUTO_LOG_FRACTION`), unless bins with a zero coordinate (which log
axes cannot show) carry 10% of the points or more (:data:`AUTO_LOG_MAX_HIDDEN`); see
:func:`auto_scale`.
"""

from __future__ import annotations

from typing import Any

import torch

from bensemble._validation import (
    as_float_tensor,
    as_member_stack,
    check_option,
    check_positive,
    check_positive_int,
    to_tensor,
)
from bensemble.metrics._eece_legacy import LEGACY_KEYWORDS
from bensemble.metrics.binning import Binning, KMeansBinning
from bensemble.metrics.epistemic import EECEDetails, expected_epistemic_calibration_error
from bensemble.plots._classes import DEFAULT_MAX_CLASSES, ClasswiseView, select_details
from bensemble.plots._display import Display, check_vectors_of_one_shape
from bensemble.plots._layout import (
    check_limits,
    diagonal,
    diagonal_extent,
    keep_axes_size,
    legend_columns,
    marker_handle,
    place_legend,
)
from bensemble.plots.maps import plot_toy_maps

__all__ = [
    "AUTO_LOG_FRACTION",
    "AUTO_LOG_MAX_HIDDEN",
    "EpistemicReliabilityDisplay",
    "auto_scale",
    "plot_epistemic_reliability_diagram",
    "plot_toy_maps",
]

SCALES = ("auto", "linear", "log")
#: ``scale="auto"`` picks log when most points sit below this fraction of the largest value.
AUTO_LOG_FRACTION = 0.1
#: ... unless bins that log axes cannot show (a zero coordinate) hold at least this share.
AUTO_LOG_MAX_HIDDEN = 0.1


class EpistemicReliabilityDisplay(Display):
    """Epistemic reliability diagram: per bin, reported EU against the members' squared error.

    ``x = trust_m`` (mean reported EU in the bin), ``y = mean_h (acc_m - conf[h, m])^2``; the
    diagonal is perfect epistemic calibration, and the EECE is the weighted mean vertical distance
    to it. Marker area follows the bin weight ``|B_m| / N``; the legend shows a marker of normal
    size. Pooled classwise details carry the class of each bin (``classes``) and are drawn with
    one colour per class.

    Args:
        trust: ``[M]`` reported EU per bin (NaN for an empty bin).
        squared_error: ``[M]`` members' squared error per bin.
        counts: ``[M]`` points per bin.
        value: the EECE shown in the legend.
        name: label of the markers.
        classes: optional ``[M]`` class index of each bin (pooled classwise details).
        class_support: optional ``[K]`` points labelled with each class (what chooses the
            classes drawn when there are more than ``max_classes``; :meth:`from_details` sets it).

    Attributes:
        ax_: the Axes drawn on (after :meth:`plot`).
        figure_: its Figure.
        scatter_: the PathCollection of the bins (one, coloured by class in the classwise view).
        scale_: the scale drawn, ``"linear"`` or ``"log"`` (what ``"auto"`` chose).
        n_hidden_: filled bins left out because log axes cannot show a zero coordinate.
        shown_classes_: the classes drawn (classwise view; all of them up to ``max_classes``).
        class_note_: the line the figure carries when only some classes are drawn, else None.
        diagonal_: the ``y = x`` Line2D (one per Axes, shared by displays drawn on it).
        legend_handles_: the legend entries of this display (normal-size marker proxies: one
            per class in the classwise view, then the name and EECE; then the diagonal).

    Example:
        >>> import matplotlib, torch
        >>> matplotlib.use("Agg")
        >>> p = torch.tensor([[0.2, 0.2, 0.9, 0.9], [0.4, 0.4, 0.7, 0.7]])
        >>> d = EpistemicReliabilityDisplay.from_member_probs(p, torch.tensor([0, 1, 1, 1]),
        ...                                                   n_bins=2, seed=0, binary=True)
        >>> d.counts.tolist()
        [2.0, 2.0]
        >>> d.plot().ax_.get_xlabel()
        'Reported EU (bin mean)'
    """

    # the constructor's arguments, kept unchanged (after validation) by ``_store``
    trust: torch.Tensor
    squared_error: torch.Tensor
    counts: torch.Tensor
    value: float | None
    name: str | None
    classes: torch.Tensor | None
    class_support: torch.Tensor | None

    def __init__(
        self,
        trust: torch.Tensor,
        squared_error: torch.Tensor,
        counts: torch.Tensor,
        *,
        value: float | None = None,
        name: str | None = None,
        classes: torch.Tensor | None = None,
        class_support: torch.Tensor | None = None,
    ) -> None:
        fn = "EpistemicReliabilityDisplay"
        # NaN marks an empty bin in trust / squared_error, so only the shape is checked
        arrays = {"trust": trust, "squared_error": squared_error, "counts": counts}
        shape = check_vectors_of_one_shape(fn, arrays, finite=False)
        if value is not None:
            value = check_positive(value, "value", fn, allow_zero=True)
        if classes is not None:
            c = as_float_tensor(classes, "classes", fn, ndim=1, dtype=None)
            if c.shape != shape or bool((c < 0).any()) or bool((c != c.round()).any()):
                raise ValueError(
                    f"{fn}: `classes` must hold one class index >= 0 per bin, shape "
                    f"{tuple(shape)} (got shape {tuple(c.shape)})"
                )
            classes = c.long()
        if class_support is not None:
            class_support = as_float_tensor(class_support, "class_support", fn, ndim=1, dtype=None)
        self._store(classes=classes, class_support=class_support, value=value, name=name, **arrays)

    @classmethod
    def from_details(
        cls, details: EECEDetails, *, class_index: int | None = None, name: str | None = None
    ) -> EpistemicReliabilityDisplay:
        """From :class:`~bensemble.metrics.epistemic.EECEDetails`.

        For "classwise" details (``[K, M]`` fields) ``class_index=k`` shows class ``k``; ``None``
        pools the bins of every class (their weights then sum to 1 over all classes, and the
        weighted mean distance to the diagonal is the classwise EECE) and records each bin's
        class in ``classes``, so :meth:`plot` draws one colour per class.
        """
        fn = "EpistemicReliabilityDisplay.from_details"
        if not isinstance(details, EECEDetails):
            raise ValueError(
                f"{fn}: `details` must be an EECEDetails, from "
                f"expected_epistemic_calibration_error(..., return_details=True) "
                f"(got {type(details).__name__})"
            )
        trust, sq, counts, value, classes, support = select_details(details, class_index, fn)
        return cls(
            trust, sq, counts, value=value, name=name, classes=classes, class_support=support
        )

    @classmethod
    def from_member_probs(
        cls,
        member_probs: Any,
        labels: Any,
        binning: Binning | None = None,
        *,
        class_index: int | None = None,
        name: str | None = None,
        binary: bool = False,
        **eece_kwargs: Any,
    ) -> EpistemicReliabilityDisplay:
        """Compute the EECE details of ``member_probs [H, N, K]`` (binary positive-class
        members ``[H, N]`` with ``binary=True``; a 2-D array is an error without it) with
        ``binning`` and wrap them.

        ``binning`` is a :mod:`~bensemble.metrics.binning` binning (default
        ``KMeansBinning(n_bins=min(100, N))``), fitted on these points unless fitted already;
        ``eece_kwargs`` (``multiclass``, ``eu``) go to
        :func:`~bensemble.metrics.expected_epistemic_calibration_error`. The keyword arguments
        of bensemble 0.3 (an ``n_bins`` in the ``binning`` slot, ``seed``, ``bins``, ...) still
        work there, deprecated."""
        fn = "EpistemicReliabilityDisplay.from_member_probs"
        t = to_tensor(member_probs, "member_probs", fn)
        as_member_stack(t, "member_probs", fn, binary=binary, dtype=None)
        binning = _default_binning(binning, eece_kwargs, n_points=t.shape[1])
        details = expected_epistemic_calibration_error(
            t, labels, binning, return_details=True, binary=binary, **eece_kwargs
        )
        return cls.from_details(details, class_index=class_index, name=name)

    @property
    def weights(self) -> torch.Tensor:
        """``[M]`` bin weights (fraction of the points)."""
        return self.counts / self.counts.sum()

    def _filled(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(trust, squared_error, weight)`` of the filled bins, float64."""
        keep = self.counts > 0
        w = self.weights[keep].to(torch.float64)
        return self.trust[keep].to(torch.float64), self.squared_error[keep].to(torch.float64), w

    def extent(self, scale: str) -> tuple[float, float]:
        """Axis limits ``(low, high)`` (both axes) that show every drawable bin at ``scale``."""
        check_option(scale, "scale", SCALES[1:], "EpistemicReliabilityDisplay.extent")
        x, y, _ = self._filled()
        values = torch.cat([x, y])
        if scale == "log":
            values = values[values > 0]
            if values.numel() == 0:
                return 1e-6, 1.0
            return float(values.min()) / 1.5, float(values.max()) * 1.5
        top = float(values.max()) if values.numel() else 0.0
        return 0.0, top * 1.05 if top > 0 else 1.0

    def plot(
        self,
        ax: Any = None,
        *,
        scale: str = "auto",
        limits: tuple[float, float] | None = None,
        max_marker_size: float = 300.0,
        legend_loc: str | None = "free",
        max_classes: int | None = DEFAULT_MAX_CLASSES,
        **kwargs: Any,
    ) -> EpistemicReliabilityDisplay:
        """Draw the bins as markers and the diagonal; returns ``self``.

        Several displays may share one ``ax`` (e.g. before / after scaling): the diagonal is
        drawn once and widened, the limits grow to show every display, and the scale of the
        first display is kept. For side-by-side panels on shared axes use
        :func:`plot_epistemic_reliability_panels`.

        Args:
            ax: Axes to draw on (``None``: a new figure).
            scale: ``"auto"`` (log-log when the mass sits near zero, the rule of
                :func:`auto_scale`), ``"linear"`` or ``"log"`` (bins with a zero coordinate are
                left out and counted in ``n_hidden_``).
            limits: ``(low, high)`` for both axes (default: :meth:`extent`).
            max_marker_size: marker area of the heaviest bin (area is proportional to weight).
            legend_loc: where the legend goes: ``"free"`` (default: the figure is drawn once
                and the first inside place, upper left, lower right, then the other corners and
                edges, whose legend box touches no bin marker is kept, else right of the Axes),
                ``"outside"`` (right of the Axes, top aligned), any matplotlib ``loc``, or
                ``None`` (no legend). The legend shows markers of normal size, whatever the
                bins' areas. On a figure the display creates, a legend outside widens the
                figure instead of shrinking the diagram, and nothing is cut off.
            max_classes: classwise view - the most classes drawn (default 10): beyond, the
                classes with the largest support, said in the title (``None``: every class).
            **kwargs: passed to ``Axes.scatter``.
        """
        import matplotlib.pyplot as plt

        fn = "EpistemicReliabilityDisplay.plot"
        check_option(scale, "scale", SCALES, fn)
        check_positive(max_marker_size, "max_marker_size", fn)
        if max_classes is not None:
            max_classes = check_positive_int(max_classes, "max_classes", fn)
        made = ax is None
        if ax is None:
            wide = legend_loc == "outside"  # room for the legend right of the square diagram
            _, ax = plt.subplots(figsize=(7.5 if wide else 5.5, 5), layout="constrained")
            ax.set_anchor("W" if wide else "C")  # wide: the legend takes the slack
        previous = diagonal_extent(ax)  # another display is on this Axes already
        if scale == "auto":
            scale = ax.get_xscale() if previous is not None else auto_scale(self)
        if limits is None:
            limits = self.extent(scale)
            if previous is not None:
                limits = (min(limits[0], previous[0]), max(limits[1], previous[1]))
        else:
            limits = check_limits(limits, scale, fn)
        keep = self.counts > 0
        shown = keep & (self.trust > 0) & (self.squared_error > 0) if scale == "log" else keep
        self.n_hidden_ = int(keep.sum() - shown.sum())
        by_class = self.classes is not None and not ({"c", "color"} & set(kwargs))
        self.shown_classes_, self.class_note_ = None, None
        if by_class:
            view = ClasswiseView(self.classes, self.class_support, max_classes)
            self.shown_classes_, self.class_note_ = view.drawn, view.note
            shown = shown & view.mask
        x = self.trust[shown].cpu().numpy()
        y = self.squared_error[shown].cpu().numpy()
        w = self.weights[shown]
        sizes = (max_marker_size * w / w.max()).cpu().numpy() if w.numel() else []
        label = self.name or "bins"
        if self.value is not None:
            label = f"{label} (EECE = {self.value:.4f})"
        style = {"alpha": 0.6, "edgecolors": "black", "linewidths": 0.5, **kwargs}
        label = style.pop("label", label)  # a given label names the legend's proxy marker
        handles = []
        if by_class:
            style["c"] = view.colours(self.classes[shown])
            handles = [*view.handles(), marker_handle("none", label)]
        self.scatter_ = ax.scatter(x, y, s=sizes, label="_bins", **style)
        if not by_class:
            face = self.scatter_.get_facecolors()
            handles = [marker_handle(face[0] if len(face) else "C0", label)]
        if scale == "log":
            ax.set_xscale("log")
            ax.set_yscale("log")
        self.diagonal_ = diagonal(ax, *limits)
        ax.set_xlim(*limits)
        ax.set_ylim(*limits)
        ax.set_box_aspect(1)  # square: the diagonal at 45 degrees
        ax.set_xlabel("Reported EU (bin mean)")
        ax.set_ylabel(r"Squared error $\mathrm{mean}_h(\mathrm{acc} - \mathrm{conf}_h)^2$")
        title = "Epistemic reliability diagram"
        if self.class_note_:
            title += f"\n{self.class_note_}"
        if self.n_hidden_:
            title += f"\n({self.n_hidden_} bin(s) with a zero value not shown on log axes)"
        ax.set_title(title, fontsize="medium")
        self.legend_handles_ = [*handles, self.diagonal_]
        place_legend(ax, legend_loc, handles, ncols=legend_columns(len(self.legend_handles_)))
        if made and legend_loc is not None:
            # our figure: a long legend widens it, never shrinks the diagram
            keep_axes_size(ax)
        self.scale_ = scale
        self._drawn_on(ax)
        return self


#: Bins of the displays' default binning.
DEFAULT_N_BINS = 100


def _default_binning(binning: Any, eece_kwargs: dict[str, Any], *, n_points: int) -> Any:
    """``KMeansBinning(n_bins=min(100, N))`` unless a binning (or, deprecated, an ``n_bins``) is
    given; with deprecated EECE keywords and no binning, the old default ``n_bins=100`` (so that
    the old calls give their old numbers), at most one bin per point either way."""
    if binning is not None or "n_bins" in eece_kwargs:
        return binning  # an n_bins keyword (deprecated) fills the slot itself
    n_bins = max(1, min(DEFAULT_N_BINS, int(n_points)))
    if set(eece_kwargs) & set(LEGACY_KEYWORDS):
        return n_bins
    return KMeansBinning(n_bins=n_bins)


def auto_scale(display: EpistemicReliabilityDisplay) -> str:
    """The scale ``scale="auto"`` draws: ``"log"`` where the mass sits near zero, else linear.

    Log when the bins whose two coordinates are both at most :data:`AUTO_LOG_FRACTION` of the
    largest coordinate hold more than half of the points, and the bins with a zero coordinate
    (not drawable on log axes) hold less than :data:`AUTO_LOG_MAX_HIDDEN` of them.
    """
    x, y, w = display._filled()
    if w.numel() == 0:
        return "linear"
    top = float(torch.maximum(x, y).max())
    if not top > 0:
        return "linear"
    near = float(w[torch.maximum(x, y) <= AUTO_LOG_FRACTION * top].sum())
    hidden = float(w[(x <= 0) | (y <= 0)].sum())
    return "log" if near > 0.5 and hidden < AUTO_LOG_MAX_HIDDEN else "linear"


def plot_epistemic_reliability_diagram(
    member_probs: Any,
    labels: Any,
    binning: Binning | None = None,
    *,
    class_index: int | None = None,
    scale: str = "auto",
    binary: bool = False,
    **eece_kwargs: Any,
) -> Any:
    """Epistemic reliability diagram of member predictions as a Figure.

    ``scale`` is ``"auto"`` (log where the mass sits near zero, see :func:`auto_scale`),
    ``"linear"`` or ``"log"``; classwise details without ``class_index`` are drawn with one
    colour per class.

    A thin shell over :meth:`EpistemicReliabilityDisplay.from_member_probs` (``binning``:
    default ``KMeansBinning(n_bins=min(100, N))``) and :meth:`EpistemicReliabilityDisplay.plot`;
    ``eece_kwargs`` (``multiclass``, ``eu``) go to
    :func:`~bensemble.metrics.expected_epistemic_calibration_error`. ``member_probs`` is
    ``[H, N, K]``, or binary positive-class members ``[H, N]`` with ``binary=True``.

    Returns:
        The matplotlib Figure.
    """
    display = EpistemicReliabilityDisplay.from_member_probs(
        member_probs, labels, binning, class_index=class_index, binary=binary, **eece_kwargs
    )
    return display.plot(scale=scale).figure_
