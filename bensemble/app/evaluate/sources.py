"""Load: the predictions and labels of an evaluation as one row source, whatever they came as.

A :class:`ShardSpec` says how to open one piece of the data: an in-memory array (a torch tensor
or a numpy array) or a file (``.npy`` memory-mapped, ``.npz``, ``.pt``/``.pth`` with
``weights_only=True``, ``.csv``; nothing is ever unpickled). :class:`Predictions` puts the shards
end to end along the sample axis and reads any range or set of global rows as validated float64
probabilities ``[M, b, K]`` (softmax per read with ``from_logits``), a chunk at a time: a
memory-mapped ``.npy`` is never loaded as a whole, and the pages read are dropped from the
resident set as the reading goes on (:class:`~bensemble.metrics._chunked_rows.MemberRows`). The
other formats are read into memory in their stored dtype (not float64) and converted per chunk.

Labels are held in memory in the narrowest integer type that holds ``K - 1`` (one byte per sample
for ``K <= 127``); a ``.npy`` label file is checked and narrowed a chunk at a time.

Specs are small and picklable: a worker process or a Ray task reopens its shards from them
(files are opened again, never sent), and :meth:`Predictions.task` cuts a global row range out
of the whole for one worker.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bensemble import _validation as V
from bensemble.io import InputError, load_array, load_labels, split_key
from bensemble.metrics._chunked_rows import MemberRows

__all__ = ["Predictions", "ShardSpec", "expand_paths", "read_labels"]

_GLOB = ("*", "?", "[")


def expand_paths(patterns: list[str], name: str) -> list[str]:
    """Each path as given, or for a pattern (``*``, ``?``, ``[``) that is not itself a file the
    files it matches, sorted; a pattern matching nothing is an :class:`InputError`."""
    out: list[str] = []
    for text in patterns:
        file, key = split_key(text)
        if key is None and not file.exists() and any(c in str(text) for c in _GLOB):
            matches = sorted(p for p in glob.glob(str(text)) if os.path.isfile(p))
            if not matches:
                raise InputError(
                    f"`{name}` file {text} does not exist, and as a pattern it matches no file"
                )
            out += matches
        else:
            out.append(str(text))
    return out


@dataclass(frozen=True)
class ShardSpec:
    """One shard: ``array`` (in memory) or the file ``path`` (``file.npz:key`` allowed).

    Attributes:
        path: the file, or ``None`` for an in-memory ``array``.
        array: ``[M, N, K]`` / ``[N, K]`` array (a numpy array or a CPU tensor), or ``None``.
        members: read a 2-D ``[M * N, K]`` table as ``M`` members (member-major).
        members_axis: 0 for ``[M, N, K]``, 1 for ``[N, M, K]``.
        name: the argument named in messages (``"predictions"``, ``"member_probs"``).
        where: what starts a message about this shard (a file name or a function).
    """

    path: str | None = None
    array: Any = None
    members: int | None = None
    members_axis: int = 0
    name: str = "member_probs"
    where: str = "evaluate_predictions"

    def open(self) -> tuple[Any, bool]:
        """The shard as an ``[M, N, K]`` or ``[N, K]`` array view (nothing converted yet), and
        whether it was stored in half precision (float16 / bfloat16: checked at its tolerance)."""
        array = self.array if self.path is None else _open_file(self.path, self.name)
        low = getattr(array, "dtype", None) in (torch.float16, torch.bfloat16, np.float16)
        if isinstance(array, torch.Tensor):
            array = _tensor_as_numpy(array)
        elif not hasattr(array, "shape") or not hasattr(array, "dtype"):
            array = np.asarray(V.to_tensor(array, self.name, self.where).numpy())
        shape = tuple(array.shape)
        members = None
        if self.members is not None:
            members = V.check_positive_int(self.members, "members", self.where)
            if len(shape) != 2:
                raise InputError(
                    f"{self.where}: `{self.name}` must be a 2-D [M*N, K] table when `members` is "
                    f"given (got shape {shape})"
                )
            if shape[0] % members:
                raise InputError(
                    f"{self.where}: `{self.name}` has {shape[0]} rows, which is not a multiple of "
                    f"members={members}"
                )
        elif len(shape) not in (2, 3):
            raise InputError(
                f"{self.where}: `{self.name}` must be 2-D [N, K] or 3-D [M, N, K] (got shape "
                f"{shape})"
            )
        if hasattr(array, "read") and hasattr(array, "take"):  # a chunk reader: read on demand
            from bensemble.app.evaluate.npy_rows import NpyRows

            view = NpyRows(array, members=members, members_axis=self.members_axis)
            return view, bool(array.dtype == np.float16)
        if members is not None:
            array = array.reshape(members, shape[0] // members, shape[1])
        if array.ndim == 3 and self.members_axis == 1:
            array = array.transpose(1, 0, 2)
        return array, bool(low)


def _tensor_as_numpy(t: torch.Tensor) -> np.ndarray:
    """A CPU numpy view of a tensor (bfloat16 as float32: numpy has no bfloat16)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.dtype == torch.bfloat16:
        t = t.to(torch.float32)
    if t.dtype == torch.bool or t.is_complex():
        raise InputError(f"predictions must hold probabilities or logits (got dtype {t.dtype})")
    return t.numpy()


def _open_file(path: str, name: str) -> Any:
    """A ``.npy`` (or an uncompressed ``.npz`` member) read in chunks where :mod:`bensemble.io`
    can (:mod:`~bensemble.app.evaluate.npy_rows`), else memory-mapped (header checked first); any
    other format loaded (its stored dtype)."""
    from bensemble.app.evaluate import npy_rows

    file, key = split_key(path)
    suffix = file.suffix.lower()
    if npy_rows.available() and suffix in (".npy", ".npz"):
        from bensemble import io

        try:
            return io.open_npy_chunks(path, name=name)
        except InputError as exc:
            if suffix == ".npy" or "cannot be read in chunks" not in str(exc):
                raise
    elif key is None and suffix == ".npy":
        return _open_npy(file, name)
    t = load_array(path, name=name)
    if t.dtype == torch.bool:
        raise InputError(f"`{name}` file {file} must hold probabilities or logits (got bool)")
    return t


def _open_npy(file: Path, name: str) -> np.ndarray:
    from bensemble._io_formats import _check_npy_file

    where = f"`{name}` file {file}"
    if not file.is_file():
        what = "does not exist" if not file.exists() else "is not a file"
        raise InputError(f"{where} {what}")
    with open(file, "rb") as handle:
        _check_npy_file(handle, where)
    try:
        return np.load(file, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise InputError(f"{where} is not a readable .npy file ({exc})") from None


class Predictions:
    """Shards end to end along the sample axis, read as one row source (module docstring).

    Args:
        specs: the shards, in order.
        labels: ``[N]`` integer labels of all those rows, in order (checked by
            :func:`read_labels` or :func:`~bensemble._validation.as_labels`), or ``None`` to
            give them later (:meth:`set_labels`, once the shards' sizes are known).
        from_logits: the shards hold logits.
        ranges: per shard, the local rows ``(a, b)`` this source covers (``None``: all of them).
        start: the global number of this source's first row.
        transform: a picklable map applied to every read ``[M, b, K]`` (row by row, e.g. a
            fitted :class:`~bensemble.calibration.EpistemicRecalibrator`), or ``None``.
    """

    def __init__(
        self,
        specs: list[ShardSpec],
        labels: torch.Tensor | None,
        *,
        from_logits: bool,
        ranges: list[tuple[int, int]] | None = None,
        start: int = 0,
        transform: Any = None,
    ) -> None:
        self.specs = list(specs)
        self.transform = transform
        self.from_logits = bool(from_logits)
        self.parts, self.low_precision = [], False
        for i, spec in enumerate(self.specs):
            array, low = spec.open()
            if ranges is not None:
                a, b = ranges[i]
                if hasattr(array, "window"):  # a chunk reader: still nothing read
                    array = array.window(a, b)
                else:  # a view of an array or a memory map
                    array = array[a:b] if array.ndim == 2 else array[:, a:b]
            self.low_precision |= low
            rows = MemberRows(array, from_logits=from_logits, name=spec.name, fn=spec.where)
            rows.half = rows.half or low
            self.parts.append(rows)
        first = self.parts[0]
        self.m, self.k = first.m, first.k
        for spec, part in zip(self.specs, self.parts, strict=True):
            if (part.m, part.k) != (self.m, self.k):
                raise InputError(
                    f"{spec.where}: `{spec.name}` shards must share M members and K classes "
                    f"(got [{part.m}, N, {part.k}] after [{self.m}, N, {self.k}])"
                )
        self.offsets = np.concatenate([[0], np.cumsum([p.n for p in self.parts])]).astype(np.int64)
        self.n = int(self.offsets[-1])
        self.start = int(start)
        self.labels = torch.empty(0, dtype=torch.int64)
        if labels is not None:
            self.set_labels(labels)

    @property
    def sizes(self) -> list[int]:
        """Rows of each shard."""
        return [p.n for p in self.parts]

    def set_labels(self, labels: torch.Tensor) -> None:
        """The ``[N]`` labels of these rows (checked by the caller; their count here)."""
        if labels.shape[0] != self.n:
            raise InputError(
                f"`labels` must have the same length as the predictions ({self.n}) (got "
                f"{labels.shape[0]})"
            )
        self.labels = labels

    def task(self, start: int, stop: int) -> dict[str, Any]:
        """What :class:`Predictions` needs to open the rows ``start:stop`` of this source
        elsewhere (a worker): small and picklable (files are reopened, arrays sent as they are)."""
        specs, ranges = [], []
        for i, spec in enumerate(self.specs):
            lo, hi = int(self.offsets[i]), int(self.offsets[i + 1])
            a, b = max(start, lo), min(stop, hi)
            if a < b:
                specs.append(spec)
                ranges.append((a - lo, b - lo))
        return {
            "specs": specs,
            "labels": self.labels[start:stop].clone(),
            "from_logits": self.from_logits,
            "ranges": ranges,
            "start": self.start + start,
            "transform": self.transform,
        }

    @property
    def on_simplex(self) -> bool:
        """Every row read so far already lay on the probability simplex (``--logits`` warns)."""
        return all(p.on_simplex for p in self.parts)

    def slice(self, start: int, stop: int) -> torch.Tensor:
        """Rows ``start:stop`` as ``[M, b, K]`` float64 probabilities."""
        start, stop = max(0, start), min(stop, self.n)
        pieces = []
        first = int(np.searchsorted(self.offsets, start, side="right")) - 1
        for i in range(max(first, 0), len(self.parts)):
            lo, hi = int(self.offsets[i]), int(self.offsets[i + 1])
            if lo >= stop:
                break
            pieces.append(self.parts[i].slice(max(start, lo) - lo, min(stop, hi) - lo))
        return self._mapped(pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=1))

    def _mapped(self, p: torch.Tensor) -> torch.Tensor:
        return p if self.transform is None else self.transform(p).to(torch.float64)

    def take(self, rows: Any) -> torch.Tensor:
        """The distinct global ``rows`` in that order, as ``[M, len(rows), K]`` float64."""
        rows = np.asarray(rows, dtype=np.int64)
        if len(self.parts) == 1:
            return self._mapped(self.parts[0].take(rows))
        shard = np.searchsorted(self.offsets, rows, side="right") - 1
        out = torch.empty(self.m, rows.shape[0], self.k, dtype=torch.float64)
        for i in np.unique(shard):
            where = np.flatnonzero(shard == i)
            out[:, torch.from_numpy(where)] = self.parts[i].take(rows[where] - self.offsets[i])
        return self._mapped(out)

    def label_slice(self, start: int, stop: int) -> torch.Tensor:
        return self.labels[start:stop].to(torch.int64)

    def label_take(self, rows: Any) -> torch.Tensor:
        return self.labels[torch.as_tensor(np.asarray(rows, dtype=np.int64))].to(torch.int64)

    def release(self, force: bool = False) -> None:
        """Drop the file pages read so far from the resident set (see ``MemberRows.release``)."""
        for part in self.parts:
            part.release(force)


def compact_labels(labels: torch.Tensor, k: int) -> torch.Tensor:
    """Labels in the narrowest signed integer type that holds ``k - 1``."""
    for dtype in (torch.int8, torch.int16, torch.int32):
        if k - 1 <= torch.iinfo(dtype).max:
            return labels.to(dtype)
    return labels.to(torch.int64)


def read_labels(paths: list[str], sizes: list[int], k: int, *, block: int) -> torch.Tensor:
    """The labels of every shard, narrowed (:func:`compact_labels`): one file of ``sum(sizes)``
    labels, or one file per shard of ``sizes[i]`` labels each, in shard order."""
    total = sum(sizes)
    if len(paths) not in (1, len(sizes)):
        raise InputError(
            f"--labels must be one file for all {len(sizes)} prediction shards or one per shard "
            f"(got {len(paths)} files)"
        )
    counts = [total] if len(paths) == 1 else sizes
    parts = [_read_one(p, n, k, block) for p, n in zip(paths, counts, strict=True)]
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def _read_one(path: str, n: int, k: int, block: int) -> torch.Tensor:
    file, key = split_key(path)
    fn = str(file)
    if key is not None or file.suffix.lower() != ".npy" or not file.is_file():
        return compact_labels(load_labels(path, n=n, num_classes=k, fn=fn), k)
    array = _open_npy(file, "labels")
    if array.ndim == 2 and 1 in array.shape:
        array = array.reshape(-1)
    if array.dtype.kind == "f":
        load_labels(path, n=n, num_classes=k, fn=fn)  # its message for float labels
    if array.ndim != 1 or array.shape[0] != n:
        return compact_labels(load_labels(path, n=n, num_classes=k, fn=fn), k)
    out = compact_labels(torch.empty(0, dtype=torch.int64), k).new_empty(n)
    for start in range(0, n, max(block, 1 << 16)):
        piece = np.array(array[start : start + max(block, 1 << 16)])
        try:
            t = V.as_labels(piece, "labels", fn, num_classes=k)
        except ValueError as exc:
            raise InputError(str(exc)) from None
        out[start : start + t.shape[0]] = t.to(out.dtype)
    return out
