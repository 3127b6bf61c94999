"""Several epistemic reliability diagrams side by side on shared axes (before / after scaling).

The panels share one scale and one set of limits, so a bin's position means the same in each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from bensemble._validation import check_option, check_positive, check_positive_int
from bensemble.plots.epistemic import SCALES, EpistemicReliabilityDisplay, auto_scale

__all__ = ["plot_epistemic_reliability_panels", "shared_handles"]

LEGENDS = ("auto", "figure", "axes", "titles")


def plot_epistemic_reliability_panels(
    displays: Mapping[str, EpistemicReliabilityDisplay] | Sequence[EpistemicReliabilityDisplay],
    *,
    axes: Any = None,
    scale: str = "auto",
    ncols: int | None = None,
    panel_size: float = 4.5,
    legend: str = "auto",
) -> Any:
    """Several epistemic reliability diagrams side by side on **shared** axes.

    Every panel gets the same scale (``"auto"`` decides on all displays' bins together, each
    display weighing equally) and the same limits (the union of their extents), so a marker's
    position means the same in every panel, e.g. before and after temperature scaling.

    Legends (``legend``): ``"figure"`` puts each panel's EECE in its title and one legend
    (classes, diagonal) below the panels; ``"axes"`` gives each panel its own legend (placed as
    ``legend_loc="free"``); ``"titles"`` only puts the EECE in the titles (compose a legend from
    the displays' ``legend_handles_``); ``"auto"`` is ``"figure"`` for a new figure and
    ``"axes"`` on given ``axes``.

    Args:
        displays: title -> display (or a sequence of displays; their titles are then kept).
        axes: optional Axes to draw on, one per display (default: a new figure).
        scale: ``"auto"``, ``"linear"`` or ``"log"`` for every panel.
        ncols: panels per row of a new figure (default: all in one row).
        panel_size: inches per panel of a new figure.
        legend: ``"auto"``, ``"figure"``, ``"axes"`` or ``"titles"`` (see above).

    Returns:
        The matplotlib Figure (each display keeps its ``ax_``).
    """
    import matplotlib.pyplot as plt

    fn = "plot_epistemic_reliability_panels"
    check_option(scale, "scale", SCALES, fn)
    check_option(legend, "legend", LEGENDS, fn)
    items = list(displays.items()) if isinstance(displays, Mapping) else [
        (None, d) for d in displays
    ]  # fmt: skip
    if not items or not all(isinstance(d, EpistemicReliabilityDisplay) for _, d in items):
        raise ValueError(f"{fn}: `displays` must be a non-empty collection of displays")
    if scale == "auto":
        pooled = EpistemicReliabilityDisplay(
            torch.cat([d.trust.to(torch.float64).cpu() for _, d in items]),
            torch.cat([d.squared_error.to(torch.float64).cpu() for _, d in items]),
            torch.cat([d.weights.to(torch.float64).cpu() / len(items) for _, d in items]),
        )
        scale = auto_scale(pooled)
    extents = [d.extent(scale) for _, d in items]
    limits = (min(e[0] for e in extents), max(e[1] for e in extents))
    made = axes is None
    if legend == "auto":
        legend = "figure" if made else "axes"
    if made:
        count = len(items)
        ncols = count if ncols is None else min(check_positive_int(ncols, "ncols", fn), count)
        nrows = -(-count // ncols)
        size = check_positive(panel_size, "panel_size", fn)
        fig, grid = plt.subplots(
            nrows, ncols, figsize=(size * ncols, size * nrows + 0.8), squeeze=False,
            sharex=True, sharey=True, layout="constrained",
        )  # fmt: skip
        axes = list(grid.flat)
        for ax in axes[count:]:
            ax.set_visible(False)
    else:
        axes = list(np.ravel(np.asarray(axes, dtype=object)))
        if len(axes) < len(items):
            raise ValueError(
                f"{fn}: `axes` must hold one Axes per display ({len(items)}) (got {len(axes)})"
            )
    for ax, (title, display) in zip(axes, items):
        display.plot(
            ax=ax, scale=scale, limits=limits, legend_loc="free" if legend == "axes" else None
        )
        if legend != "axes":  # each panel's EECE goes to its title
            value = "" if display.value is None else f" (EECE = {display.value:.4f})"
            note = f"\n{display.class_note_}" if display.class_note_ else ""
            ax.set_title(f"{title if title is not None else display.name or ''}{value}{note}")
        elif title is not None:
            ax.set_title(title)
        spec = ax.get_subplotspec()
        if made and spec is not None:  # shared axes: labels on the outer panels only
            if not spec.is_first_col():
                ax.set_ylabel("")
            if not spec.is_last_row() and any(
                other.get_visible() and other.get_subplotspec().colspan == spec.colspan
                for other in axes[axes.index(ax) + 1 :]
            ):
                ax.set_xlabel("")
    fig = axes[0].figure
    if legend == "figure":
        handles = shared_handles([d for _, d in items])
        fig.legend(
            handles=handles, loc="outside lower center", ncols=min(len(handles), 6),
            fontsize="small",
        )  # fmt: skip
    return fig


def shared_handles(displays: Sequence[EpistemicReliabilityDisplay]) -> list:
    """Legend entries common to drawn displays: the classes of the one with the most classes,
    then the diagonal (each display's name / EECE entry left out: it goes in the titles)."""
    widest = max(displays, key=lambda d: 0 if d.classes is None else int(d.classes.max()) + 1)
    return [h for h in widest.legend_handles_ if not _is_name(h, widest)]


def _is_name(handle: Any, display: EpistemicReliabilityDisplay) -> bool:
    """Whether a legend handle is the display's name / EECE entry (shown in the title)."""
    name = display.name or "bins"
    return handle.get_label().startswith(name) and "class " not in handle.get_label()
