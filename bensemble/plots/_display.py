"""The base every display class shares: what it holds and where its :meth:`plot` drew.

A display stores what a metric computed and draws it on request; after ``plot`` it exposes the
Axes (``ax_``) and the Figure (``figure_``) it drew on, both ``None`` before the first draw.
"""

from __future__ import annotations

from typing import Any

import torch

from bensemble._validation import as_float_tensor

__all__ = ["Display", "check_vectors_of_one_shape"]


def check_vectors_of_one_shape(
    fn: str, arrays: dict[str, Any], *, finite: bool = True
) -> torch.Size:
    """Check that every array of ``arrays`` (argument name -> array) is 1-D with the shape of
    the first; return that shape.

    ``finite=False`` lets NaN through (a display marking empty bins with it); the arrays are
    only read, never converted in place.

    Example:
        >>> check_vectors_of_one_shape("fn", {"x": [1.0, 2.0], "y": [3.0, 4.0]})
        torch.Size([2])
        >>> check_vectors_of_one_shape("fn", {"x": [1.0, 2.0], "y": [3.0]})
        Traceback (most recent call last):
        ...
        ValueError: fn: `y` must have the shape of `x` (2,) (got (1,))
    """
    (first, array), *rest = arrays.items()
    shape = as_float_tensor(array, first, fn, ndim=1, dtype=None, finite=finite).shape
    for arg, other in rest:
        t = as_float_tensor(other, arg, fn, ndim=1, dtype=None, finite=finite)
        if t.shape != shape:
            raise ValueError(
                f"{fn}: `{arg}` must have the shape of `{first}` {tuple(shape)} "
                f"(got {tuple(t.shape)})"
            )
    return shape


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

    def _store(self, **fields: Any) -> None:
        """Keep the constructor's (validated) inputs as attributes of the same names."""
        for name, value in fields.items():
            setattr(self, name, value)

    def _drawn_on(self, ax: Any) -> None:
        """Record the Axes :meth:`plot` drew on, and its Figure."""
        self.ax_, self.figure_ = ax, ax.figure
