"""Load for ``bensemble evaluate --task regression``: member predictions ``[M, N]`` (points) or
``[M, N, 2]`` (mean, variance) and real targets ``[N]``, read a chunk of points at a time.

:class:`RegressionRows` reads any range or set of points of one array as float64 ``[M, b]`` /
``[M, b, 2]``: a ``.npy`` (or an uncompressed ``.npz`` member) through
:func:`bensemble.io.open_npy_chunks` (only the header at open; positioned reads of the rows asked
for, never a memory map, never a pickle), any other file (``.pt`` with ``weights_only=True``,
``.csv``, a compressed ``.npz``) through :func:`bensemble.io.load_array`'s bounded whole-file
readers, and in-memory tensors or numpy arrays as they are. ``members_axis=1`` reads ``[N, M]``
/ ``[N, M, 2]`` layouts. Each chunk is checked by the library's input contract
(:func:`bensemble.regression._inputs.as_member_predictions`) when it is scored.

The targets are held in memory (one float64 per point) and checked once: finite, one per point.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from bensemble.io import InputError, load_array, split_key

__all__ = ["RegressionRows", "read_targets"]

_F64 = torch.float64


def _open(path: str, name: str) -> Any:
    """A chunk reader for ``.npy`` / uncompressed ``.npz``, else the whole array (a tensor)."""
    from bensemble import io

    file, _ = split_key(path)
    if file.suffix.lower() in (".npy", ".npz"):
        try:
            return io.open_npy_chunks(path, name=name)
        except InputError as exc:
            if file.suffix.lower() == ".npy" or "cannot be read in chunks" not in str(exc):
                raise
    return load_array(path, name=name)


class RegressionRows:
    """Member predictions of ``N`` points, read ``[M, b(, 2)]`` float64 on demand.

    Args:
        data: a file path (``file.npz:key`` allowed), a tensor or a numpy array, ``[M, N]`` or
            ``[M, N, 2]`` (``[N, M]`` / ``[N, M, 2]`` with ``members_axis=1``); a 1-D ``[N]``
            array is one point model.
        members_axis: 0 or 1, the axis of the members.
        name, where: the argument and what starts a message about it.
    """

    def __init__(
        self, data: Any, *, members_axis: int = 0, name: str = "predictions", where: str = ""
    ) -> None:
        self.where = where or name
        if isinstance(data, (str, os.PathLike)):
            data = _open(os.fspath(data), name)
        elif isinstance(data, torch.Tensor):
            data = data.detach().cpu()
        elif not isinstance(data, np.ndarray):
            data = np.asarray(data)
        self.chunked = hasattr(data, "read") and hasattr(data, "take")
        shape = tuple(int(s) for s in data.shape)
        dtype = getattr(data, "dtype", None)
        if dtype in (torch.bool,) or (isinstance(dtype, np.dtype) and dtype.kind not in "fiu"):
            raise InputError(f"{self.where}: `{name}` must hold real numbers (got dtype {dtype})")
        if len(shape) == 1:
            data, shape, members_axis = data[None], (1, shape[0]), 0
        if len(shape) not in (2, 3) or (len(shape) == 3 and shape[2] != 2) or 0 in shape:
            raise InputError(
                f"{self.where}: `{name}` must be member predictions [M, N] or [M, N, 2] (mean, "
                f"variance) for --task regression (got shape {shape})"
            )
        if members_axis not in (0, 1):
            raise InputError(f"{self.where}: `members_axis` must be 0 or 1 (got {members_axis})")
        self.data, self.axis = data, 1 - members_axis  # the axis of the points
        self.m = shape[members_axis]
        self.n = shape[self.axis]
        self.points = len(shape) == 2
        self.name = name

    def _tensor(self, raw: Any) -> torch.Tensor:
        t = torch.as_tensor(np.asarray(raw)) if not isinstance(raw, torch.Tensor) else raw
        t = t.to(_F64)
        return t if self.axis == 1 else t.transpose(0, 1)

    def slice(self, start: int, stop: int) -> torch.Tensor:
        """Points ``start:stop`` as float64 ``[M, b]`` or ``[M, b, 2]``."""
        if self.chunked:
            return self._tensor(self.data.read(start, stop, axis=self.axis))
        index = (slice(None), slice(start, stop)) if self.axis == 1 else (slice(start, stop),)
        return self._tensor(self.data[index])

    def take(self, rows: Any) -> torch.Tensor:
        """The points ``rows`` (1-D integer indices) in that order, float64."""
        rows = np.asarray(rows, dtype=np.int64)
        if self.chunked:
            return self._tensor(self.data.take(rows, axis=self.axis))
        if isinstance(self.data, torch.Tensor):
            return self._tensor(self.data.index_select(self.axis, torch.from_numpy(rows)))
        return self._tensor(np.take(self.data, rows, axis=self.axis))


def read_targets(value: Any, n: int, *, name: str = "labels", where: str = "") -> torch.Tensor:
    """Real targets ``[N]`` float64 (finite, one per point) from a file, tensor or array."""
    where = where or name
    if isinstance(value, (str, os.PathLike)):
        value = load_array(os.fspath(value), name=name)
    t = torch.as_tensor(np.asarray(value)) if not isinstance(value, torch.Tensor) else value
    if t.dtype == torch.bool or t.is_complex():
        raise InputError(f"{where}: `{name}` must hold real targets (got dtype {t.dtype})")
    if t.ndim == 2 and 1 in t.shape:
        t = t.reshape(-1)
    if t.ndim != 1 or t.shape[0] != n:
        raise InputError(
            f"{where}: `{name}` must be {n} real targets [N], one per point of the predictions "
            f"(got shape {tuple(t.shape)})"
        )
    t = t.detach().cpu().to(_F64)
    if not bool(torch.isfinite(t).all()):
        raise InputError(f"{where}: `{name}` must be finite (got NaN or inf)")
    return t
