"""Small line and bar figures of the reproductions (matplotlib imported inside the functions).

Every figure takes a ``caption``: the scoring convention it used (or that none applies) and
any note a reader needs, printed under the axes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["bar_figure", "line_figure"]


def line_figure(
    series: Mapping[str, tuple[Sequence[float], Sequence[float], Sequence[float | None] | None]],
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    logx: bool = False,
    logy: bool = False,
    reference: Mapping[str, tuple[Sequence[float], Sequence[float]]] | None = None,
    caption: str = "",
) -> Any:
    """Lines with optional error bars, plus optional reference markers (the paper's values).

    Args:
        series: label -> ``(x, y, yerr or None)``.
        xlabel, ylabel, title: axis labels and title.
        logx, logy: log-scaled axes.
        reference: label -> ``(x, y)`` drawn as hollow markers.
        caption: text under the axes.

    Returns:
        The matplotlib Figure.
    """
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    for label, (x, y, err) in series.items():
        yerr = None
        if err is not None and any(e is not None for e in err):
            yerr = [0.0 if e is None else float(e) for e in err]
        ax.errorbar(list(x), list(y), yerr=yerr, marker="o", capsize=3, label=label)
    for label, (x, y) in (reference or {}).items():
        ax.plot(
            list(x),
            list(y),
            linestyle="none",
            marker="s",
            markersize=9,
            markerfacecolor="none",
            color="black",
            label=label,
        )
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _captioned(fig, caption)


def _captioned(fig: Any, caption: str) -> Any:
    """``fig`` laid out with ``caption`` (wrapped) under its axes."""
    import textwrap

    if caption:
        width = int(fig.get_figwidth() * 14)
        text = "\n".join(textwrap.wrap(caption, width))
        fig.text(0.01, 0.005, text, fontsize=7, va="bottom", ha="left", color="dimgray")
        lines = text.count("\n") + 1
        fig.tight_layout(rect=(0, 0.035 * lines + 0.01, 1, 1))
    else:
        fig.tight_layout()
    return fig


def bar_figure(
    categories: Sequence[str],
    bars: Mapping[str, tuple[Sequence[float], Sequence[float | None] | None]],
    *,
    ylabel: str,
    title: str,
    caption: str = "",
) -> Any:
    """Grouped bars per category: label -> ``(heights, errors or None)``; NaN heights are gaps.

    ``caption`` is printed under the axes.
    """
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(categories) + 2), 4.2))
    width = 0.8 / max(len(bars), 1)
    for i, (label, (heights, err)) in enumerate(bars.items()):
        xs = [j + (i - (len(bars) - 1) / 2) * width for j in range(len(categories))]
        yerr = None
        if err is not None and any(e is not None for e in err):
            yerr = [0.0 if e is None else float(e) for e in err]
        ax.bar(xs, [float(h) for h in heights], width=width, yerr=yerr, capsize=2, label=label)
    ax.set_xticks(range(len(categories)))
    ax.set_xticklabels(categories, rotation=35, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend()
    return _captioned(fig, caption)
