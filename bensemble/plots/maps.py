"""Maps of per-point quantities on the toy grid, side by side (the paper's figures 2 and 6).

The figure exists to compare a method's reported ``EU(x)`` with its members' actual squared
error ``E_h[(eta(x) - h(x))^2]``, so panels can be **grouped**: every panel of a group shares one
colour scale (``vmin``/``vmax`` over the group) and one colour bar, and a difference in colour is
a difference in value; the scale starts at 0 (both quantities are non-negative), so a pale
panel is a small value, not the smallest of its group. :func:`toy_map_pairs` builds the usual
panels and groups for several methods, with mathtext titles.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from bensemble._validation import (
    as_float_tensor,
    as_labels,
    check_bool,
    check_positive,
    check_positive_int,
)

__all__ = ["EU_TITLE", "REPORTED_EU_TITLE", "SQUARED_ERROR_TITLE", "plot_toy_maps", "toy_map_pairs"]

#: Mathtext titles of the two maps of a pair (matplotlib renders ``$...$`` as mathematics).
EU_TITLE = r"$\mathrm{EU}(x) = \mathrm{Var}_h\,h(x)$"
REPORTED_EU_TITLE = r"reported $\mathrm{EU}(x)$"
SQUARED_ERROR_TITLE = r"$\mathbb{E}_h[(\eta(x) - h(x))^2]$"


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


def toy_map_pairs(
    eu: Mapping[str, Any], squared_error: Mapping[str, Any], *, reported: Sequence[str] = ()
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Panels and pairs for :func:`plot_toy_maps`: each method's EU beside its squared error.

    Args:
        eu: method -> ``[n * n]`` EU map (a member variance, or the method's reported EU).
        squared_error: method -> ``[n * n]`` members' ``E_h[(eta - h)^2]``; same keys as ``eu``.
        reported: methods whose ``eu`` is their own reported EU (the paper's illustrative
            methods, fig. 2(a)); their EU panel is titled "reported EU(x)".

    Returns:
        ``(panels, groups)``: two-line titles ``"<method>\n<EU title>"`` and
        ``"<method>\n<error title>"`` in the methods' order, and one pair of titles per method.
    """
    fn = "toy_map_pairs"
    if not isinstance(eu, Mapping) or not isinstance(squared_error, Mapping):
        raise ValueError(f"{fn}: `eu` and `squared_error` must be mappings of method -> values")
    if list(eu) != list(squared_error):
        raise ValueError(
            f"{fn}: `squared_error` must have the methods of `eu`, in order "
            f"(got {list(squared_error)} and {list(eu)})"
        )
    unknown = [m for m in reported if m not in eu]
    if unknown:
        raise ValueError(f"{fn}: `reported` must name methods of `eu` (got {unknown})")
    panels: dict[str, Any] = {}
    groups = []
    for method in eu:
        left = f"{method}\n{REPORTED_EU_TITLE if method in reported else EU_TITLE}"
        right = f"{method}\n{SQUARED_ERROR_TITLE}"
        panels[left], panels[right] = eu[method], squared_error[method]
        groups.append((left, right))
    return panels, groups


def _check_groups(groups: Any, titles: list[str], fn: str) -> list[list[str]]:
    if isinstance(groups, (str, bytes)) or not isinstance(groups, Sequence):
        raise ValueError(f"{fn}: `groups` must be a sequence of sequences of panel titles")
    seen: set[str] = set()
    out = []
    for group in groups:
        if isinstance(group, (str, bytes)) or not isinstance(group, Sequence) or not group:
            raise ValueError(
                f"{fn}: `groups` must hold non-empty sequences of panel titles (got {group!r})"
            )
        for title in group:
            if title not in titles:
                raise ValueError(f"{fn}: `groups` must name panels of `panels` (got {title!r})")
            if title in seen:
                raise ValueError(f"{fn}: `groups` must name each panel once (got {title!r} twice)")
            seen.add(title)
        out.append([str(t) for t in group])
    return out


def plot_toy_maps(
    grid_x: Any,
    panels: Mapping[str, Any],
    *,
    ncols: int | None = None,
    cmap: str = "viridis",
    shared_scale: bool = False,
    groups: Sequence[Sequence[str]] | None = None,
    points: Any = None,
    point_labels: Any = None,
    panel_size: float = 4.0,
) -> Any:
    r"""Maps of per-point quantities on a regular 2-D grid, side by side (figures 2/6).

    For example ``{r"$\mathrm{EU}(x)$": eu, r"$\mathbb{E}_h[(\eta - h)^2]$": err}`` on the points
    of :func:`bensemble.datasets.make_toy_grid` with ``groups=[[...both titles...]]``;
    :func:`toy_map_pairs` builds the panels and pairs for several methods.

    Layout: panels fill the rows left to right, groups first (in their order, each group
    contiguous), then the ungrouped panels. A group keeps one row when ``ncols`` is a multiple
    of its size (e.g. pairs with an even ``ncols``).

    Args:
        grid_x: ``[n * n, 2]`` grid points, row-major with ``x1`` varying fastest.
        panels: title -> values ``[n * n]`` (or ``[n, n]``), one image per entry. Titles may use
            mathtext (``$...$``).
        ncols: panels per row (default: all in one row).
        cmap: matplotlib colormap name.
        shared_scale: one colour scale and one colour bar for every panel.
        groups: panels that share a colour scale (``vmin``/``vmax`` over the group) and one
            colour bar, e.g. each method's EU and squared-error maps; a panel in no group gets
            its own scale and colour bar. Not together with ``shared_scale``.
        points: optional ``[P, 2]`` points (e.g. the training set) drawn on every panel.
        point_labels: optional ``[P]`` integer labels colouring ``points``.
        panel_size: inches per panel.

    Returns:
        The matplotlib Figure: one Axes with an image per panel, then one colour-bar Axes per
        group (per panel without ``groups``).
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
    titles = list(images)
    if groups is not None and shared_scale:
        raise ValueError(f"{fn}: `groups` and `shared_scale=True` cannot both be set")
    if shared_scale:
        layout = [titles]
    else:
        layout = _check_groups(groups, titles, fn) if groups is not None else []
        grouped = {t for g in layout for t in g}
        layout += [[t] for t in titles if t not in grouped]
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
        nrows,
        ncols,
        figsize=(panel_size * ncols, panel_size * nrows * 0.85),
        squeeze=False,
        layout="constrained",
    )
    extent = (float(x1[0]), float(x1[-1]), float(x2[0]), float(x2[-1]))
    flat = list(axes.flat)
    position = 0
    for group in layout:
        vmin = min(0.0, *(float(images[t].min()) for t in group))  # colour bars start at 0
        vmax = max(float(images[t].max()) for t in group)
        group_axes = flat[position : position + len(group)]
        position += len(group)
        for ax, title in zip(group_axes, group):
            shown = ax.imshow(
                images[title],
                origin="lower",
                extent=extent,
                cmap=cmap,
                vmin=vmin,
                vmax=vmax,
                aspect="equal",
            )
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
        fig.colorbar(shown, ax=group_axes, fraction=0.046, pad=0.02, shrink=0.9)
    for ax in flat[count:]:
        ax.set_visible(False)
    return fig
