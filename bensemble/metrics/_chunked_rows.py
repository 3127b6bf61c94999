"""Reading member predictions from a (memory-mapped) array a block of rows at a time.

:func:`open_memmap` opens a ``.npy`` file without reading it; :class:`MemberRows` turns any block
of its rows into validated float64 probabilities exactly as the in-memory loader
(:func:`bensemble.io.load_predictions`) would, and drops the file pages it has read from the
process's resident set as it goes (:mod:`bensemble.metrics.streaming_eval` builds on it).
"""

from __future__ import annotations

import mmap
import os
from typing import Any

import numpy as np
import torch

from bensemble._validation import SUM_TOLERANCE, as_logits, as_member_stack, check_bool

__all__ = ["MemberRows", "open_memmap"]

#: Pages read from a memory-mapped file are dropped from the resident set after this many bytes.
_RELEASE_BYTES = 64 << 20


def open_memmap(path: str | os.PathLike) -> np.ndarray:
    """``np.load(path, mmap_mode="r")`` of a ``.npy`` file (no data is read yet)."""
    fn = "open_memmap"
    try:
        return np.load(os.fspath(path), mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ValueError(
            f"{fn}: `path` must be a readable .npy file (got {path!s}: {exc})"
        ) from None


def _release(array: Any) -> None:
    """Drop the pages of a memory-mapped array that this process has read from its resident set
    (``madvise(MADV_DONTNEED)``; the data stays on disk), so the resident memory of a pass over a
    file stays bounded by a chunk. A no-op for arrays that are not memory-mapped."""
    while array is not None and not isinstance(array, np.memmap):
        array = getattr(array, "base", None)
    handle = getattr(array, "_mmap", None)
    if handle is not None and hasattr(mmap, "MADV_DONTNEED"):
        handle.madvise(mmap.MADV_DONTNEED)


class MemberRows:
    """Validated float64 member probabilities ``[M, b, K]`` read from an array on demand.

    Each read converts the rows to float64 (big-endian data included), applies the softmax with
    ``from_logits`` and checks them exactly as the in-memory loader does (float16 rows against
    the half-precision tolerance, then renormalised in float64). ``on_simplex`` records whether
    every row read so far already lay on the simplex (the "logits look like probabilities"
    warning of ``--logits``).

    Args:
        source: ``[M, N, K]`` or ``[N, K]`` array (typically :func:`open_memmap`).
        from_logits: the array holds logits.
        name, fn: the argument and function named in error messages.
    """

    def __init__(self, source: Any, *, from_logits: bool, name: str, fn: str) -> None:
        shape = tuple(getattr(source, "shape", ()))
        if len(shape) not in (2, 3) or 0 in shape:
            raise ValueError(
                f"{fn}: `{name}` must be an array [M, N, K] or [N, K] (got shape {shape})"
            )
        dtype = np.dtype(getattr(source, "dtype", np.float64))
        if dtype.kind not in "fiu":
            raise ValueError(
                f"{fn}: `{name}` must hold probabilities or logits (got dtype {dtype})"
            )
        self.source = source if len(shape) == 3 else source[None]
        self.m, self.n, self.k = (int(s) for s in self.source.shape)
        if self.k < 2:
            raise ValueError(f"{fn}: `{name}` must have at least 2 classes (got shape {shape})")
        self.from_logits = check_bool(from_logits, "from_logits", fn)
        self.name, self.fn = name, fn
        self.half = dtype == np.float16
        self.on_simplex = True
        self._unreleased = 0

    def _convert(self, raw: np.ndarray) -> torch.Tensor:
        # C order whatever the view (a transposed [N, M, K] file): reductions over members then
        # sum in the same order as over a contiguous in-memory stack
        t = torch.from_numpy(np.array(raw, dtype=np.float64, order="C"))
        self._unreleased += t.numel() * 8
        name, fn = self.name, self.fn
        if self.from_logits:
            if self.on_simplex:
                self.on_simplex = _on_simplex(t, 1e-2 if self.half else SUM_TOLERANCE)
            return torch.softmax(as_logits(t, name, fn, ndim=3, min_classes=2), dim=-1)
        source = torch.float16 if self.half else None
        p = as_member_stack(t, name, fn, source_dtype=source)
        return p / p.sum(-1, keepdim=True) if self.half else p

    def slice(self, start: int, stop: int) -> torch.Tensor:
        """Rows ``start:stop`` as ``[M, b, K]`` float64 probabilities."""
        return self._convert(self.source[:, start:stop])

    def take(self, rows: Any) -> torch.Tensor:
        """Rows ``rows`` (distinct indices) in that order, read in ascending order."""
        rows = np.asarray(rows, dtype=np.int64)
        order = np.argsort(rows, kind="stable")
        p = self._convert(self.source[:, rows[order]])
        out = torch.empty_like(p)
        out[:, torch.from_numpy(order)] = p
        return out

    def release(self, force: bool = False) -> None:
        """Drop the file pages read so far from the resident set (after every 64 MiB read)."""
        if force or self._unreleased >= _RELEASE_BYTES:
            self._unreleased = 0
            _release(self.source)


def _on_simplex(t: torch.Tensor, tolerance: float) -> bool:
    """Every row in [0, 1], summing to 1 within ``tolerance`` (as the in-memory loader checks)."""
    if not bool(torch.isfinite(t).all()) or float(t.min()) < 0.0 or float(t.max()) > 1.0:
        return False
    return float((t.sum(-1) - 1.0).abs().max()) <= tolerance
