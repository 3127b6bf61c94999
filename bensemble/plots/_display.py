"""The base every display class shares: where its :meth:`plot` drew.

A display stores what a metric computed and draws it on request; after ``plot`` it exposes the
Axes (``ax_``) and the Figure (``figure_``) it drew on, both ``None`` before the first draw.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Display"]


class Display:
    """Base of the display classes: ``ax_`` / ``figure_`` are ``None`` until :meth:`plot` runs.

    Example:
        >>> import matplotlib
        >>> matplotlib.use("Agg")
        >>> import matplotlib.pyplot as plt
        >>> d = Display()
        >>> d.ax_ is None and d.figure_ is None
        True
        >>> _, ax = plt.subplots()
        >>> d._drawn_on(ax)
        >>> d.figure_ is ax.figure
        True
    """

    #: Axes of the last :meth:`plot` (``None`` before the first).
    ax_: Any = None
    #: Figure of ``ax_`` (``None`` before the first :meth:`plot`).
    figure_: Any = None

    def _drawn_on(self, ax: Any) -> None:
        """Record the Axes :meth:`plot` drew on, and its Figure."""
        self.ax_, self.figure_ = ax, ax.figure
