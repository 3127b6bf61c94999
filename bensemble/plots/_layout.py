"""Small drawing helpers shared by the displays (matplotlib is imported inside functions only).

* :func:`diagonal` draws the reference line ``y = x`` once per Axes: a second display drawn on
  the same Axes finds the first one's line (by its ``gid``) and only widens it.
* :func:`marker_handle` is a legend proxy of normal size for a scatter whose marker areas encode
  a weight (the legend would otherwise copy the largest marker).
* :func:`place_legend` draws (or redraws) the legend with the documented placement.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "DIAGONAL_GID",
    "DIAGONAL_LABEL",
    "OUTSIDE",
    "diagonal",
    "diagonal_extent",
    "marker_handle",
    "place_legend",
]

#: ``gid`` of the ``y = x`` reference line; one per Axes.
DIAGONAL_GID = "bensemble-diagonal"
#: Legend entry of the reference line.
DIAGONAL_LABEL = "Perfect calibration"
#: Marker size (points) of legend proxies, matplotlib's default line marker size.
LEGEND_MARKER_SIZE = 7.0


def diagonal(ax: Any, low: float, high: float) -> Any:
    """The ``y = x`` line of ``ax`` over ``[low, high]``: drawn once, widened on later calls.

    Returns:
        The Line2D (the same object on every call for one Axes).
    """
    for line in ax.lines:
        if line.get_gid() == DIAGONAL_GID:
            x = line.get_xdata()
            lo, hi = min(low, float(min(x))), max(high, float(max(x)))
            line.set_data([lo, hi], [lo, hi])
            return line
    (line,) = ax.plot(
        [low, high],
        [low, high],
        linestyle="--",
        color="gray",
        linewidth=1.0,
        label=DIAGONAL_LABEL,
        gid=DIAGONAL_GID,
        zorder=1,
    )
    return line


def diagonal_extent(ax: Any) -> tuple[float, float] | None:
    """``(low, high)`` of the reference line already on ``ax``, or None."""
    for line in ax.lines:
        if line.get_gid() == DIAGONAL_GID:
            x = line.get_xdata()
            return float(min(x)), float(max(x))
    return None


def marker_handle(color: Any, label: str, marker: str = "o") -> Any:
    """A legend proxy: one marker of normal size in ``color``."""
    from matplotlib.lines import Line2D

    return Line2D(
        [],
        [],
        linestyle="none",
        marker=marker,
        markersize=LEGEND_MARKER_SIZE,
        markerfacecolor=color,
        markeredgecolor="black",
        markeredgewidth=0.5,
        alpha=0.8,
        label=label,
    )


#: ``legend_loc`` value that puts the legend outside the Axes, to its right (top-aligned).
OUTSIDE = "outside"


def place_legend(ax: Any, loc: str | None, extra: list | None = None, **kwargs: Any) -> Any:
    """Draw the legend of ``ax`` at ``loc`` (None: remove it), handles deduplicated by label.

    ``loc`` is any matplotlib legend location, or ``"outside"``: right of the Axes, aligned with
    its top, where it cannot cover data (constrained layout makes room for it).

    ``extra`` handles (e.g. :func:`marker_handle` proxies) are kept across calls on one Axes,
    so several displays drawn on the same Axes share one legend.
    """
    stored = getattr(ax, "_bensemble_legend_extra", [])
    stored = [h for h in stored if h.get_label() not in {e.get_label() for e in extra or []}]
    stored += list(extra or [])
    ax._bensemble_legend_extra = stored
    if loc is None:
        if ax.get_legend() is not None:
            ax.get_legend().remove()
        return None
    handles, labels = ax.get_legend_handles_labels()
    unique: dict[str, Any] = {}
    for handle, label in zip(handles + stored, labels + [h.get_label() for h in stored]):
        if label and not label.startswith("_"):
            unique.setdefault(label, handle)
    # the diagonal's entry last, after the data
    if DIAGONAL_LABEL in unique:
        unique[DIAGONAL_LABEL] = unique.pop(DIAGONAL_LABEL)
    if loc == OUTSIDE:
        kwargs = {"bbox_to_anchor": (1.02, 1.0), "borderaxespad": 0.0, **kwargs}
        loc = "upper left"
    return ax.legend(list(unique.values()), list(unique), loc=loc, **kwargs)
