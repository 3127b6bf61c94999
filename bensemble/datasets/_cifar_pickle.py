"""CIFAR-10's python version: pickled batches read with a restricted unpickler.

A batch is a pickle of a dict ``{b"data": uint8 [N, 3072], b"labels": [N] ints, ...}``. The
unpickler admits only numpy's array and dtype reconstruction, in the form numpy writes it, so a
payload that would call anything else (``os.system`` through ``__reduce__``, ...) or make numpy
allocate a size it merely claims raises ``ValueError`` before it runs; the labels' structure (a
flat list of Python ints) is checked before anything converts them.
"""

from __future__ import annotations

import os
import pickle

import numpy as np

from bensemble._io_files import check_fits_memory
from bensemble.datasets._files import open_dataset_file

__all__ = ["MAX_PICKLED_ARRAYS", "read_cifar10_pickle"]

#: The only globals a CIFAR-10 python pickle may name: numpy's array / dtype reconstruction.
_RECONSTRUCT = frozenset(
    {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct")}
)
_FROMBUFFER = frozenset(
    {("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer")}
)
_PICKLE_GLOBALS = _RECONSTRUCT | _FROMBUFFER | {("numpy", "ndarray"), ("numpy", "dtype")}
#: Arrays a batch pickle may build (``data``, and ``labels`` where saved as an array).
MAX_PICKLED_ARRAYS = 4
#: Stands for ``numpy.ndarray`` in a pickle: accepted as ``_reconstruct``'s first argument only,
#: never callable (``ndarray(shape)`` would allocate whatever shape the file claims).
_NDARRAY = object()


def _latin1_bytes(text: str, encoding: str = "latin1") -> bytes:
    """Stand-in for ``_codecs.encode`` (how protocol-2 pickles from Python 3 store bytes)."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError("_codecs.encode is allowed only as (str, 'latin1')")
    return text.encode("latin1")


class _RestrictedUnpickler(pickle.Unpickler):
    """Admits only :data:`_PICKLE_GLOBALS`; every other global is refused before it is loaded.

    ``_codecs.encode`` (protocol-2 pickles written by Python 3 store ``bytes`` through it) is
    replaced by :func:`_latin1_bytes`, which only turns a str into latin-1 bytes. numpy's array
    reconstruction is admitted only in the form numpy writes (``_reconstruct(ndarray, (0,),
    dtype)``, then the state whose bytes are in the file, or ``_frombuffer`` of bytes in the
    file), at most :data:`MAX_PICKLED_ARRAYS` times, so no array larger than the file's own bytes
    is allocated and a memo cannot multiply one.
    """

    arrays = 0

    def find_class(self, module: str, name: str):  # noqa: D102
        if (module, name) == ("_codecs", "encode"):
            return _latin1_bytes
        if (module, name) == ("numpy", "ndarray"):
            return _NDARRAY
        if (module, name) in _RECONSTRUCT | _FROMBUFFER:
            return self._counted(super().find_class(module, name), (module, name) in _RECONSTRUCT)
        if (module, name) in _PICKLE_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"global {module}.{name} is not allowed")

    def _counted(self, build, reconstruct: bool):
        def guarded(*args):
            self.arrays += 1
            if self.arrays > MAX_PICKLED_ARRAYS:
                raise pickle.UnpicklingError(f"more than {MAX_PICKLED_ARRAYS} arrays")
            if reconstruct:
                if len(args) != 3 or args[0] is not _NDARRAY or tuple(args[1]) != (0,):
                    raise pickle.UnpicklingError(
                        "numpy array reconstruction is allowed only as numpy writes it"
                    )
                return build(np.ndarray, (0,), args[2])
            return build(*args)

        return guarded

    def persistent_load(self, pid):  # noqa: D102
        raise pickle.UnpicklingError("persistent ids are not allowed")


def _key(batch: dict, name: str):
    for key in (name.encode(), name):
        if key in batch:
            return batch[key]
    return None


def read_cifar10_pickle(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """One batch of CIFAR-10's python version, read with a restricted unpickler.

    The pickle must be a dict with ``data`` (uint8 ``[N, 3072]``) and ``labels`` (``N`` ints in
    0..9), keys as bytes (Python 2 pickles) or str; other keys (``batch_label``,
    ``filenames``) are ignored. Only numpy's array reconstruction may be named by the pickle:
    any other global (``os.system``, ``builtins.eval``, ...) makes it raise ``ValueError``
    without calling anything.

    Returns:
        ``(images uint8 [N, 3, 32, 32], labels int64 [N])``.

    Raises:
        ValueError: the file is not such a pickle, or names a forbidden global.
    """
    fn = "read_cifar10_pickle"
    with open_dataset_file(path, fn) as (f, size, shown, where):
        # the file's bytes, each array built from them, and the images' copy
        check_fits_memory((MAX_PICKLED_ARRAYS + 2) * size, where, f"it holds {size} bytes")
        try:
            batch = _RestrictedUnpickler(f, encoding="bytes").load()
        except Exception as err:  # any unpickling failure is a malformed / hostile file
            raise ValueError(
                f"{fn}: `path` must be a CIFAR-10 python batch (got {shown}: {err})"
            ) from None
    if not isinstance(batch, dict):
        raise ValueError(f"{fn}: `path` must hold a dict (got {shown}: {type(batch).__name__})")
    data, labels = _key(batch, "data"), _key(batch, "labels")
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2:
        raise ValueError(f"{fn}: `path` must hold `data` as a uint8 [N, 3072] array (got {shown})")
    if data.shape[1] != 3072:
        raise ValueError(
            f"{fn}: `path` must hold `data` of shape [N, 3072] (got {shown}: {list(data.shape)})"
        )
    y = _flat_labels(labels, data.shape[0], shown, fn)
    return data.reshape(-1, 3, 32, 32).copy(), y


def _flat_labels(labels: object, n: int, shown: str, fn: str) -> np.ndarray:
    """``labels`` as int64 ``[n]`` once its structure is checked: a flat list (or tuple) of
    exactly ``n`` Python ints in 0..9, or a 1-D integer array. Nothing is converted before the
    check, so a nested list (which a pickle's memo can make enormous once expanded), a float
    (which conversion would truncate), a bool or any other object is refused as it is."""
    if isinstance(labels, np.ndarray):
        if labels.ndim != 1 or labels.dtype.kind not in "iu" or labels.shape[0] != n:
            raise ValueError(
                f"{fn}: `path` must hold `labels` as a flat list of {n} integers (got {shown}: "
                f"a {labels.dtype} array of shape {list(labels.shape)})"
            )
        if labels.size and (labels.min() < 0 or labels.max() > 9):
            raise ValueError(
                f"{fn}: `path` labels must lie in 0..9 (got {shown}: "
                f"{labels.min()}..{labels.max()})"
            )
        return labels.astype(np.int64)
    if not isinstance(labels, (list, tuple)):
        raise ValueError(
            f"{fn}: `path` must hold `labels` as a flat list of integers (got {shown}: "
            f"{type(labels).__name__})"
        )
    if len(labels) != n:
        raise ValueError(
            f"{fn}: `path` labels must have shape [{n}] (got {shown}: [{len(labels)}])"
        )
    kinds = set(map(type, labels))
    if not kinds <= {int}:
        other = sorted(k.__name__ for k in kinds - {int})
        raise ValueError(
            f"{fn}: `path` must hold `labels` as a flat list of integers (got {shown}: "
            f"{', '.join(other)} items; a float label is refused, never truncated)"
        )
    if labels and (min(labels) < 0 or max(labels) > 9):
        raise ValueError(
            f"{fn}: `path` labels must lie in 0..9 (got {shown}: {min(labels)}..{max(labels)})"
        )
    return np.fromiter(labels, dtype=np.int64, count=n)
