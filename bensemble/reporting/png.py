"""Figures as PNG bytes, drawn once: the report folder's ``.png`` files and the images
embedded in ``report.html`` are the same bytes.

:func:`draw_figures` draws named figures to PNG bytes in memory (a figure that fails to draw is
left out and named, never costing the numbers); :class:`PngBytes` hands ready bytes to
:meth:`~bensemble.reporting.report.Report.add_figure`. matplotlib is imported on first use.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

__all__ = ["PngBytes", "draw_figures", "png_bytes"]


def png_bytes(fig: Any, dpi: int = 120) -> bytes:
    """The figure as PNG bytes (drawn once; the file and the HTML share them)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


class PngBytes:
    """Hands ready PNG bytes to :meth:`Report.add_figure` (which calls ``savefig``)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def savefig(self, handle: Any, **_: Any) -> None:
        handle.write(self.data)


def draw_figures(makers: dict[str, Callable[[], Any]]) -> tuple[dict[str, bytes], list[str]]:
    """Figures keyed by file stem, as PNG bytes drawn in memory (nothing is written).

    A figure that fails to draw is left out; the second item lists why, one line each. Every
    figure the makers open is closed.
    """
    import matplotlib.pyplot as plt

    figs: dict[str, bytes] = {}
    problems: list[str] = []
    for name, make in makers.items():
        before = set(plt.get_fignums())
        try:
            figs[name] = png_bytes(make())
        except Exception as exc:  # noqa: BLE001 - a figure must not cost the user the numbers
            problems.append(
                f"{name}.png left out ({type(exc).__name__}: {' '.join(str(exc).split())})"
            )
        finally:
            for number in set(plt.get_fignums()) - before:
                plt.close(number)
    return figs, problems
