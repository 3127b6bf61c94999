"""A ``.npy`` file of predictions as an ``[M, N, K]`` array that reads rows from disk on demand.

:class:`NpyRows` puts :func:`bensemble.io.open_npy_chunks` (positioned reads, no memory map: a
file truncated or resized while it is read raises an :class:`~bensemble.io.InputError` naming
it, never a ``SIGBUS``) behind the indexing the row reader uses
(:class:`~bensemble.metrics._chunked_rows.MemberRows`): ``x[:, a:b]`` reads samples ``a:b`` and
``x[:, rows]`` the given samples, as ``[M, b, K]`` arrays in memory. The stored layouts:

* ``[M, N, K]`` - one read along the sample axis (``M`` positioned reads);
* ``[N, M, K]`` (``--members-axis 1``) - one read of ``N`` rows, members moved first;
* ``[N, K]`` - one model, a member axis added;
* ``[M * N, K]`` (``--members M``) - member ``m``'s rows ``m * N + a .. m * N + b`` each.

Where the library has no such reader (:func:`available`), the engine memory-maps the file
instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["NpyRows", "available"]


def available() -> bool:
    """Whether :mod:`bensemble.io` reads ``.npy`` files in chunks."""
    from bensemble import io

    return hasattr(io, "open_npy_chunks")


class NpyRows:
    """``[M, N, K]`` view of a chunk reader (module docstring).

    Args:
        chunks: an open :class:`~bensemble.io.NpyChunks`.
        members: ``M`` of a stacked 2-D ``[M * N, K]`` table (``None``: not stacked).
        members_axis: 1 for a 3-D file stored ``[N, M, K]``.
    """

    def __init__(self, chunks: Any, *, members: int | None = None, members_axis: int = 0) -> None:
        self.chunks = chunks
        self.dtype = chunks.dtype
        shape = tuple(chunks.shape)
        self.stacked = members
        self.stacked_n = 0
        if members is not None:
            self.shape = (members, shape[0] // members, shape[1])
            self.stacked_n = shape[0] // members  # rows per member in the file
            self.layout = "stacked"
        elif len(shape) == 2:
            self.shape = (1, *shape)
            self.layout = "single"
        elif members_axis == 1:
            self.shape = (shape[1], shape[0], shape[2])
            self.layout = "samples-first"
        else:
            self.shape = shape
            self.layout = "members-first"
        self.ndim = 3
        self.offset = 0  # the first sample of this view (window)

    def window(self, start: int, stop: int) -> NpyRows:
        """The samples ``start:stop`` as an ``[M, stop - start, K]`` view (nothing read)."""
        import copy

        view = copy.copy(self)
        view.offset = self.offset + start
        view.shape = (self.shape[0], stop - start, self.shape[2])
        return view

    def __getitem__(self, index: Any) -> np.ndarray:
        if not (isinstance(index, tuple) and len(index) == 2 and index[0] == slice(None)):
            raise IndexError(f"NpyRows reads [:, rows] only (got {index!r})")
        rows = index[1]
        if isinstance(rows, slice):
            start, stop, _ = rows.indices(self.shape[1])
            return self._read(self.offset + start, self.offset + stop)
        return self._take(np.asarray(rows, dtype=np.int64) + self.offset)

    def _read(self, start: int, stop: int) -> np.ndarray:
        c = self.chunks
        if self.layout == "members-first":
            return c.read(start, stop, axis=1)
        if self.layout == "samples-first":
            return np.moveaxis(c.read(start, stop, axis=0), 1, 0)
        if self.layout == "single":
            return c.read(start, stop, axis=0)[None]
        n = self.stacked_n
        return np.stack([c.read(m * n + start, m * n + stop, axis=0) for m in range(self.shape[0])])

    def _take(self, rows: np.ndarray) -> np.ndarray:
        c = self.chunks
        if self.layout == "members-first":
            return c.take(rows, axis=1)
        if self.layout == "samples-first":
            return np.moveaxis(c.take(rows, axis=0), 1, 0)
        if self.layout == "single":
            return c.take(rows, axis=0)[None]
        n = self.stacked_n
        return np.stack([c.take(rows + m * n, axis=0) for m in range(self.shape[0])])
