"""Small drawing helpers shared by the displays (matplotlib is imported inside functions only).

* :func:`diagonal` draws the reference line ``y = x`` once per Axes: a second display drawn on
  the same Axes finds the first one's line (by its ``gid``) and only widens it.
* :func:`marker_handle` is a legend proxy of normal size for a scatter whose marker areas encode
  a weight (the legend would otherwise copy the largest marker).
* :func:`place_legend` draws (or redraws) the legend with the documented placement.
* :func:`keep_axes_size` widens a figure the display made itself until nothing is cut off and
  the Axes are as large as before the legend came (a long legend never shrinks the diagram).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "DIAGONAL_GID",
    "DIAGONAL_LABEL",
    "FREE",
    "OUTSIDE",
    "axes_side",
    "check_limits",
    "data_boxes",
    "diagonal",
    "diagonal_extent",
    "keep_axes_size",
    "lay_out",
    "legend_columns",
    "legend_inside",
    "legend_overlaps_data",
    "marker_handle",
    "place_legend",
    "side_without_legend",
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
#: ``legend_loc`` value: the first free inside corner of :data:`FREE_CANDIDATES`, else outside.
FREE = "free"
#: Inside locations tried by ``"free"``, in order.
FREE_CANDIDATES = (
    "upper left",
    "lower right",
    "upper right",
    "lower left",
    "center left",
    "center right",
    "upper center",
    "lower center",
)


def place_legend(ax: Any, loc: str | None, extra: list | None = None, **kwargs: Any) -> Any:
    """Draw the legend of ``ax`` at ``loc`` (None: remove it), handles deduplicated by label.

    ``loc`` is any matplotlib legend location, ``"outside"``: right of the Axes, aligned with
    its top, where it cannot cover data (constrained layout makes room for it), or ``"free"``:
    the figure is drawn once and the first place of :data:`FREE_CANDIDATES` whose legend box
    touches no data (:func:`legend_overlaps_data`: markers, error bars, curves, bars; the
    ``y = x`` reference line does not count) is kept, else ``"outside"``.

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
    # reference lines (the diagonal, oracle / random curves: gid "bensemble-*") last
    for label in [k for k, h in unique.items() if _is_reference(h)]:
        unique[label] = unique.pop(label)
    args = (list(unique.values()), list(unique))
    if loc == FREE:
        # lay the figure out so the boxes are final (the layout engine alone: no drawing)
        bare = ax.get_legend() is None
        lay_out(ax.figure)
        if bare:  # the side before the legend, for keep_axes_size (no layout of its own)
            box = ax.get_window_extent()
            ax._bensemble_bare_side = float(min(box.width, box.height))
        for candidate in FREE_CANDIDATES:
            legend = ax.legend(*args, loc=candidate, **kwargs)
            if not legend_overlaps_data(ax):
                return legend
        loc = OUTSIDE
    if loc == OUTSIDE:
        kwargs = {"bbox_to_anchor": (1.02, 1.0), "borderaxespad": 0.0, **kwargs}
        loc = "upper left"
    return ax.legend(*args, loc=loc, **kwargs)


def data_boxes(ax: Any, *, include_reference: bool = False) -> list:
    """Display-coordinate boxes and paths of the data drawn on ``ax`` (call after a draw).

    Returns:
        A list of ``("box", Bbox)`` for markers and bars and ``("path", Path)`` for lines and
        error-bar segments; the ``y = x`` reference line is left out unless
        ``include_reference``.
    """
    from matplotlib.collections import LineCollection, PathCollection
    from matplotlib.patches import Rectangle
    from matplotlib.transforms import Bbox

    out: list = []
    renderer = ax.figure.canvas.get_renderer()
    for line in ax.lines:
        if not line.get_visible() or (line.get_gid() == DIAGONAL_GID and not include_reference):
            continue
        path = line.get_transform().transform_path(line.get_path())
        if line.get_linestyle() not in ("None", "none", "", " ") and len(path.vertices) > 1:
            out.append(("path", path))
        if line.get_marker() not in (None, "None", "none", "", " "):
            half = line.get_markersize() * ax.figure.dpi / 72.0 / 2.0
            for x, y in path.vertices:
                out.append(("box", Bbox([[x - half, y - half], [x + half, y + half]])))
    for coll in ax.collections:
        if not coll.get_visible():
            continue
        if isinstance(coll, LineCollection):
            transform = coll.get_transform()
            out += [("path", transform.transform_path(p)) for p in coll.get_paths()]
        elif isinstance(coll, PathCollection) and len(coll.get_offsets()):
            offsets = coll.get_offset_transform().transform(coll.get_offsets())
            sizes = coll.get_sizes()
            for i, (x, y) in enumerate(offsets):
                size = sizes[i % len(sizes)] if len(sizes) else 36.0
                half = (size**0.5) * ax.figure.dpi / 72.0 / 2.0
                out.append(("box", Bbox([[x - half, y - half], [x + half, y + half]])))
        else:
            out.append(("box", coll.get_window_extent(renderer)))
    out += [("box", p.get_window_extent(renderer)) for p in ax.patches if isinstance(p, Rectangle)]
    return out


def legend_overlaps_data(ax: Any, *, include_reference: bool = False) -> bool:
    """Whether the legend box of ``ax`` touches any of :func:`data_boxes` (after a draw)."""
    legend = ax.get_legend()
    if legend is None:
        return False
    box = legend.get_window_extent(ax.figure.canvas.get_renderer())
    for kind, item in data_boxes(ax, include_reference=include_reference):
        if kind == "box" and box.overlaps(item):
            return True
        if kind == "path" and item.intersects_bbox(box, filled=False):
            return True
    return False


def _is_reference(handle: Any) -> bool:
    """A reference line of ours (gid ``bensemble-*``: the diagonal, oracle, random)."""
    get_gid = getattr(handle, "get_gid", None)
    return callable(get_gid) and str(get_gid() or "").startswith("bensemble-")


#: Legend rows per column before :func:`legend_columns` starts a new column.
LEGEND_ROWS = 14


def legend_columns(n_entries: int, rows: int = LEGEND_ROWS) -> int:
    """Columns for ``n_entries`` legend entries, at most ``rows`` per column."""
    return max(1, -(-n_entries // rows))


def lay_out(fig: Any) -> None:
    """Lay ``fig`` out as a draw would: its layout engine, then every Axes' aspect (no drawing;
    without an engine, a draw without rendering)."""
    engine = fig.get_layout_engine()
    if engine is None or not callable(getattr(engine, "execute", None)):
        fig.draw_without_rendering()
        return
    engine.execute(fig)
    for ax in fig.axes:
        ax.apply_aspect()


def axes_side(ax: Any) -> float:
    """The smaller side of ``ax`` in pixels, after laying the figure out."""
    lay_out(ax.figure)
    box = ax.get_window_extent()
    return float(min(box.width, box.height))


def side_without_legend(ax: Any) -> float | None:
    """The smaller side ``ax`` would have without its legend, read off the current layout
    (call right after one), or None when the legend may have changed it.

    A legend inside the Axes changes no margin: the side is the current one. A legend right of
    the Axes and within their height (``"outside"``) changes the horizontal margins only: when
    the Axes are limited by the height of their layout box (a square in a wider box), the side
    is that height, legend or not.
    """
    legend = ax.get_legend()
    box = ax.get_window_extent()
    now = float(min(box.width, box.height))
    if legend is None or not legend.get_visible() or not legend.get_in_layout():
        return now
    if legend_inside(ax):
        return now
    drawn = legend.get_window_extent(ax.figure.canvas.get_renderer())
    within_height = drawn.y0 >= box.y0 - 0.5 and drawn.y1 <= box.y1 + 0.5
    cell = ax.get_position(original=True)
    width, height = cell.width * ax.figure.bbox.width, cell.height * ax.figure.bbox.height
    if within_height and drawn.x0 >= box.x1 and width >= height and abs(now - height) < 0.5:
        return now
    return None


def legend_inside(ax: Any) -> bool:
    """Whether ``ax`` has a legend lying inside the Axes, within half a pixel (after a layout);
    such a legend moves no margin of a constrained layout."""
    legend = ax.get_legend()
    if legend is None:
        return False
    drawn = legend.get_window_extent(ax.figure.canvas.get_renderer())
    box = ax.get_window_extent()
    return (
        drawn.x0 >= box.x0 - 0.5
        and drawn.x1 <= box.x1 + 0.5
        and drawn.y0 >= box.y0 - 0.5
        and drawn.y1 <= box.y1 + 0.5
    )


def keep_axes_size(ax: Any, side: float | None = None, *, max_steps: int = 6) -> None:
    """Widen ``ax``'s figure (one the display created) until nothing drawn lies outside it and
    the smaller side of ``ax`` is back to ``side`` pixels (its size before the legend), within
    half a pixel. Stops when a step no longer helps (e.g. the Axes are limited by the height).

    ``side=None`` (call after placing the legend): the side without the legend, as
    :func:`place_legend`'s ``"free"`` layout measured it, else read off the first layout where
    :func:`side_without_legend` can (no extra layout), else measured by a layout with the
    legend left out of it. The figure is always left laid out at its final
    size (the last step is a layout pass).
    """
    fig = ax.figure
    if side is None:  # measured by place_legend's "free" layout, before the legend came
        side = ax.__dict__.pop("_bensemble_bare_side", None)
    previous = -1.0
    for _ in range(max_steps):
        now = axes_side(ax)
        if side is None:
            side = side_without_legend(ax)
            if side is None:  # measure: a layout without the legend, then back with it
                legend = ax.get_legend()
                legend.set_in_layout(False)
                try:
                    side = axes_side(ax)
                finally:
                    legend.set_in_layout(True)
                now = axes_side(ax)
        tight = fig.get_tightbbox()
        width, height = fig.get_size_inches()
        overflow = max(0.0, tight.x1 - width) + max(0.0, -tight.x0)
        deficit = max(0.0, side - now - 0.5) / fig.dpi
        if overflow < 0.01 and deficit == 0.0:
            return
        if deficit > 0.0 and now <= previous + 0.5 and overflow < 0.01:
            return  # the width is no longer what limits the Axes
        previous = now
        fig.set_size_inches(width + overflow + deficit + 0.02, height)
    axes_side(ax)  # out of steps: lay the figure out at the size it was left at


def check_limits(limits: Any, scale: str, fn: str) -> tuple[float, float]:
    """``limits`` of a square diagram as ``(low, high)`` floats, ``0 < low`` on log axes."""
    ok = isinstance(limits, (tuple, list)) and len(limits) == 2
    low, high = (float(limits[0]), float(limits[1])) if ok else (0.0, 0.0)
    if not ok or not (low < high) or (scale == "log" and low <= 0):
        need = "0 < low < high" if scale == "log" else "low < high"
        raise ValueError(f"{fn}: `limits` must be a pair (low, high) with {need} (got {limits!r})")
    return low, high
