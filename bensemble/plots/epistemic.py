"""Epistemic reliability diagram and 2-D maps of per-point quantities on the toy grid.

Compute, then draw: :func:`bensemble.metrics.expected_epistemic_calibration_error` with
``return_details=True`` gives per-bin reported EU (``trust``) and the members' actual squared
error; :class:`EpistemicReliabilityDisplay` stores those arrays and draws them. A perfectly
epistemically calibrated model puts every bin on the diagonal.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from bensemble._validation import (
    as_float_tensor,
    as_labels,
    as_member_stack,
    check_bool,
    check_option,
    check_positive,
    check_positive_int,
    to_tensor,
)
from bensemble.metrics.epistemic import EECEDetails, expected_epistemic_calibration_error

__all__ = [
    "EpistemicReliabilityDisplay",
    "plot_epistemic_reliability_diagram",
    "plot_toy_maps",
]

SCALES = ("linear", "log")


class EpistemicReliabilityDisplay:
    """Epistemic reliability diagram: per bin, reported EU against the members' squared error.

    ``x = trust_m`` (mean reported EU in the bin), ``y = mean_h (acc_m - conf[h, m])^2``; the
    diagonal is perfect epistemic calibration, and the EECE is the weighted mean vertical distance
    to it. Marker area follows the bin weight ``|B_m| / N``.

    Args:
        trust: ``[M]`` reported EU per bin (NaN for an empty bin).
        squared_error: ``[M]`` members' squared error per bin.
        counts: ``[M]`` points per bin.
        value: the EECE shown in the legend.
        name: label of the markers.

    Attributes:
        ax_: the Axes drawn on (after :meth:`plot`).
        figure_: its Figure.
        scatter_: the PathCollection of the bins.

    Example:
        >>> import matplotlib, torch
        >>> matplotlib.use("Agg")
        >>> p = torch.tensor([[0.2, 0.2, 0.9, 0.9], [0.4, 0.4, 0.7, 0.7]])
        >>> d = EpistemicReliabilityDisplay.from_member_probs(p, torch.tensor([0, 1, 1, 1]),
        ...                                                   n_bins=2, seed=0, binary=True)
        >>> d.counts.tolist()
        [2.0, 2.0]
        >>> d.plot().ax_.get_xlabel()
        'Reported epistemic uncertainty (mean EU in the bin)'
    """

    def __init__(
        self,
        trust: torch.Tensor,
        squared_error: torch.Tensor,
        counts: torch.Tensor,
        *,
        value: float | None = None,
        name: str | None = None,
    ) -> None:
        fn = "EpistemicReliabilityDisplay"
        shape = None
        for arg, array in (("trust", trust), ("squared_error", squared_error), ("counts", counts)):
            # NaN marks an empty bin in trust / squared_error, so only the shape is checked
            t = as_float_tensor(array, arg, fn, ndim=1, dtype=None, finite=False)
            if shape is not None and t.shape != shape:
                raise ValueError(
                    f"{fn}: `{arg}` must have the shape of `trust` {tuple(shape)} "
                    f"(got {tuple(t.shape)})"
                )
            shape = t.shape
        if value is not None:
            value = check_positive(value, "value", fn, allow_zero=True)
        self.trust = trust
        self.squared_error = squared_error
        self.counts = counts
        self.value = value
        self.name = name

    @classmethod
    def from_details(
        cls, details: EECEDetails, *, class_index: int | None = None, name: str | None = None
    ) -> EpistemicReliabilityDisplay:
        """From :class:`~bensemble.metrics.epistemic.EECEDetails`.

        For "classwise" details (``[K, M]`` fields) ``class_index=k`` shows class ``k``; ``None``
        pools the bins of every class (their weights then sum to 1 over all classes, and the
        weighted mean distance to the diagonal is the classwise EECE).
        """
        fn = "EpistemicReliabilityDisplay.from_details"
        if not isinstance(details, EECEDetails):
            raise ValueError(
                f"{fn}: `details` must be an EECEDetails, from "
                f"expected_epistemic_calibration_error(..., return_details=True) "
                f"(got {type(details).__name__})"
            )
        trust, sq, counts, value = (
            details.trust,
            details.squared_error,
            details.counts,
            details.value,
        )
        if details.counts.ndim == 2:
            n_classes = details.counts.shape[0]
            if class_index is not None:
                if (
                    isinstance(class_index, bool)
                    or not isinstance(class_index, (int, np.integer))
                    or not 0 <= int(class_index) < n_classes
                ):
                    raise ValueError(
                        f"{fn}: `class_index` must be in [0, {n_classes - 1}] (got {class_index!r})"
                    )
                k = int(class_index)
                trust, sq, counts = trust[k], sq[k], counts[k]
                value = float(details.per_class[k])
            else:
                trust, sq, counts = trust.reshape(-1), sq.reshape(-1), counts.reshape(-1)
        elif class_index is not None:
            raise ValueError(f"{fn}: `class_index` must be None for binary details")
        return cls(trust, sq, counts, value=value, name=name)

    @classmethod
    def from_member_probs(
        cls,
        member_probs: Any,
        labels: Any,
        n_bins: int = 100,
        *,
        class_index: int | None = None,
        name: str | None = None,
        binary: bool = False,
        **eece_kwargs: Any,
    ) -> EpistemicReliabilityDisplay:
        """Compute the EECE details of ``member_probs [H, N, K]`` (binary positive-class
        members ``[H, N]`` with ``binary=True``; a 2-D array is an error without it) and wrap
        them; ``eece_kwargs`` go to
        :func:`~bensemble.metrics.expected_epistemic_calibration_error`."""
        fn = "EpistemicReliabilityDisplay.from_member_probs"
        t = to_tensor(member_probs, "member_probs", fn)
        as_member_stack(t, "member_probs", fn, binary=binary, dtype=None)
        details = expected_epistemic_calibration_error(
            t, labels, n_bins, return_details=True, binary=binary, **eece_kwargs
        )
        return cls.from_details(details, class_index=class_index, name=name)

    @property
    def weights(self) -> torch.Tensor:
        """``[M]`` bin weights (fraction of the points)."""
        return self.counts / self.counts.sum()

    def plot(
        self,
        ax: Any = None,
        *,
        scale: str = "linear",
        max_marker_size: float = 300.0,
        **kwargs: Any,
    ) -> EpistemicReliabilityDisplay:
        """Draw the bins as markers and the diagonal; returns ``self``.

        Args:
            ax: Axes to draw on (``None``: a new figure).
            scale: ``"linear"`` or ``"log"`` (log-log; bins with a zero coordinate are left out).
            max_marker_size: marker area of the heaviest bin (area is proportional to weight).
            **kwargs: passed to ``Axes.scatter``.
        """
        import matplotlib.pyplot as plt

        check_option(scale, "scale", SCALES, "EpistemicReliabilityDisplay.plot")
        check_positive(max_marker_size, "max_marker_size", "EpistemicReliabilityDisplay.plot")
        if ax is None:
            fig, ax = plt.subplots(figsize=(5, 5))
        else:
            fig = ax.figure
        keep = self.counts > 0
        if scale == "log":
            keep &= (self.trust > 0) & (self.squared_error > 0)
        x = self.trust[keep].cpu().numpy()
        y = self.squared_error[keep].cpu().numpy()
        w = self.weights[keep]
        sizes = (max_marker_size * w / w.max()).cpu().numpy() if w.numel() else []
        label = self.name or "bins"
        if self.value is not None:
            label = f"{label} (EECE = {self.value:.4f})"
        style = {"alpha": 0.6, "edgecolors": "black", "linewidths": 0.5, "label": label, **kwargs}
        self.scatter_ = ax.scatter(x, y, s=sizes, **style)
        top = max(float(x.max()) if len(x) else 0.0, float(y.max()) if len(y) else 0.0)
        top = top * 1.05 if top > 0 else 1.0
        if scale == "log":
            bottom = min(float(x.min()), float(y.min())) / 1.5 if len(x) else 1e-6
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.plot([bottom, top], [bottom, top], "--", color="gray", label="Perfect")
            ax.set_xlim(bottom, top)
            ax.set_ylim(bottom, top)
        else:
            ax.plot([0, top], [0, top], "--", color="gray", label="Perfect")
            ax.set_xlim(0, top)
            ax.set_ylim(0, top)
        ax.set_xlabel("Reported epistemic uncertainty (mean EU in the bin)")
        ax.set_ylabel(r"Members' squared error $\mathrm{mean}_h(\mathrm{acc} - \mathrm{conf}_h)^2$")
        ax.set_title("Epistemic reliability diagram")
        ax.legend(loc="upper left")
        self.ax_ = ax
        self.figure_ = fig
        return self


def plot_epistemic_reliability_diagram(
    member_probs: Any,
    labels: Any,
    n_bins: int = 100,
    *,
    class_index: int | None = None,
    scale: str = "linear",
    binary: bool = False,
    **eece_kwargs: Any,
) -> Any:
    """Epistemic reliability diagram of member predictions as a Figure.

    A thin shell over :meth:`EpistemicReliabilityDisplay.from_member_probs` and
    :meth:`EpistemicReliabilityDisplay.plot`; ``eece_kwargs`` (``seed``, ``eu``, ``bins``, ...)
    go to :func:`~bensemble.metrics.expected_epistemic_calibration_error`. ``member_probs`` is
    ``[H, N, K]``, or binary positive-class members ``[H, N]`` with ``binary=True``.

    Returns:
        The matplotlib Figure.
    """
    display = EpistemicReliabilityDisplay.from_member_probs(
        member_probs, labels, n_bins, class_index=class_index, binary=binary, **eece_kwargs
    )
    return display.plot(scale=scale).figure_


def _grid_axes(grid_x: torch.Tensor, fn: str) -> tuple[int, torch.Tensor, torch.Tensor]:
    """Side ``n`` and the two axes of a row-major ``n x n`` grid with ``x1`` varying fastest."""
    g = grid_x.shape[0]
    n = math.isqrt(g)
    if grid_x.shape[1] != 2 or n * n != g or n < 2:
        raise ValueError(
            f"{fn}: `grid_x` must be an n x n grid of 2-D points, shape [n * n, 2] "
            f"(got shape {list(grid_x.shape)})"
        )
    x1 = grid_x[:n, 0]
    x2 = grid_x[::n, 1]
    regular = torch.allclose(grid_x[:, 0], x1.repeat(n)) and torch.allclose(
        grid_x[:, 1], x2.repeat_interleave(n)
    )
    if not regular:
        raise ValueError(
            f"{fn}: `grid_x` must be ordered row-major with x1 varying fastest, as "
            "bensemble.datasets.make_toy_grid returns it (got another order)"
        )
    return n, x1, x2


def plot_toy_maps(
    grid_x: Any,
    panels: Mapping[str, Any],
    *,
    ncols: int | None = None,
    cmap: str = "viridis",
    shared_scale: bool = False,
    points: Any = None,
    point_labels: Any = None,
    panel_size: float = 4.0,
) -> Any:
    """Maps of per-point quantities on a regular 2-D grid, side by side (the paper's figures 2/6).

    For example ``{"EU(x)": eu, "E_h[(eta - h)^2]": ((eta - p) ** 2).mean(0)}`` on the points of
    :func:`bensemble.datasets.make_toy_grid`.

    Args:
        grid_x: ``[n * n, 2]`` grid points, row-major with ``x1`` varying fastest.
        panels: title -> values ``[n * n]`` (or ``[n, n]``), one image per entry, in order.
        ncols: panels per row (default: all in one row).
        cmap: matplotlib colormap name.
        shared_scale: one colour scale for every panel (else one per panel).
        points: optional ``[P, 2]`` points (e.g. the training set) drawn on every panel.
        point_labels: optional ``[P]`` integer labels colouring ``points``.
        panel_size: inches per panel.

    Returns:
        The matplotlib Figure (one Axes with an image and a colour bar per panel).
    """
    import matplotlib.pyplot as plt

    fn = "plot_toy_maps"
    shared_scale = check_bool(shared_scale, "shared_scale", fn)
    panel_size = check_positive(panel_size, "panel_size", fn)
    gx = as_float_tensor(grid_x, "grid_x", fn, ndim=2)
    n, x1, x2 = _grid_axes(gx, fn)
    if not isinstance(panels, Mapping) or len(panels) == 0:
        raise ValueError(f"{fn}: `panels` must be a non-empty mapping of title -> values")
    images = {}
    for title, values in panels.items():
        v = as_float_tensor(values, f"panels[{title!r}]", fn, ndim=(1, 2))
        if v.numel() != n * n:
            raise ValueError(
                f"{fn}: `panels[{title!r}]` must hold one value per grid point ({n * n}) "
                f"(got shape {list(v.shape)})"
            )
        images[str(title)] = v.reshape(n, n).cpu().numpy()
    pts = labels = None
    if points is not None:
        pts = as_float_tensor(points, "points", fn, ndim=2)
        if pts.shape[1] != 2:
            raise ValueError(f"{fn}: `points` must have shape [P, 2] (got {list(pts.shape)})")
        if point_labels is not None:
            labels = as_labels(point_labels, "point_labels", fn, n=pts.shape[0]).cpu().numpy()
        pts = pts.cpu().numpy()
    count = len(images)
    if ncols is not None:
        ncols = check_positive_int(ncols, "ncols", fn)
    ncols = count if ncols is None else min(ncols, count)
    nrows = -(-count // ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(panel_size * ncols, panel_size * nrows * 0.85), squeeze=False
    )
    vmin = vmax = None
    if shared_scale:
        vmin = min(float(im.min()) for im in images.values())
        vmax = max(float(im.max()) for im in images.values())
    extent = (float(x1[0]), float(x1[-1]), float(x2[0]), float(x2[-1]))
    for ax, (title, image) in zip(axes.flat, images.items()):
        shown = ax.imshow(
            image, origin="lower", extent=extent, cmap=cmap, vmin=vmin, vmax=vmax, aspect="equal"
        )
        fig.colorbar(shown, ax=ax, fraction=0.046, pad=0.04)
        if pts is not None:
            ax.scatter(
                pts[:, 0],
                pts[:, 1],
                c=labels if labels is not None else "white",
                cmap="coolwarm" if labels is not None else None,
                edgecolors="black",
                s=20,
            )
            ax.set_xlim(extent[0], extent[1])
            ax.set_ylim(extent[2], extent[3])
        ax.set_title(title)
        ax.set_xlabel("$x_1$")
        ax.set_ylabel("$x_2$")
    for ax in list(axes.flat)[count:]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig
