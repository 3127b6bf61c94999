"""Readers for the vision data sets of the paper, from files the user already has.

Nothing is downloaded: each reader parses the files of a folder, validating them before it
allocates anything large.

* MNIST / Fashion-MNIST: the four IDX files (``train-images-idx3-ubyte``, ...), gzipped or not
  (:func:`read_idx`, :func:`load_idx_dataset`).
* CIFAR-10, binary version: ``data_batch_1.bin`` ... ``data_batch_5.bin`` and
  ``test_batch.bin``, records of 3,073 bytes (one label byte, then 3x32x32 pixels) -
  :func:`read_cifar10_bin`.
* CIFAR-10, python version: ``data_batch_1`` ... ``data_batch_5`` and ``test_batch``, pickles of
  a dict ``{b"data": uint8 [N, 3072], b"labels": [N] ints, ...}``. They are read by
  :func:`read_cifar10_pickle` with a *restricted* unpickler: the only globals it admits are
  numpy's array and dtype reconstruction functions, so a payload that would call anything else
  (``os.system`` through ``__reduce__``, ...) raises ``ValueError`` before it runs.

Every loader returns ``{"train": (images, labels), "test": (images, labels)}`` with images
``[N, C, S, S]`` float32 in [0, 1] and labels ``[N]`` int64. A missing file raises
``FileNotFoundError`` naming it; a malformed one raises ``ValueError``.
"""

from __future__ import annotations

import gzip
import io
import os
from pathlib import Path

import numpy as np
import torch

from bensemble._io_files import check_fits_memory
from bensemble._terminal import printable_name
from bensemble.datasets._cifar_pickle import read_cifar10_pickle
from bensemble.datasets._files import open_dataset_file

__all__ = [
    "CIFAR10_CLASSES",
    "CIFAR10_RECORD",
    "MNIST_FILES",
    "load_cifar10",
    "load_idx_dataset",
    "load_mnist",
    "read_cifar10_bin",
    "read_cifar10_pickle",
    "read_idx",
]

#: split -> (images file, labels file), without the optional ``.gz``.
MNIST_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
CIFAR10_CLASSES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)
#: Bytes per record of CIFAR-10's binary version: 1 label + 3 x 32 x 32 pixels.
CIFAR10_RECORD = 1 + 3 * 32 * 32
_CIFAR_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))
_CIFAR_TEST = ("test_batch",)

#: IDX type codes -> big-endian numpy dtypes.
_IDX_DTYPES = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
#: deflate cannot expand by more than ~1032:1; a header claiming more is corrupt.
_MAX_DEFLATE_RATIO = 1100


def _read_exact(stream: io.BufferedIOBase, n: int) -> bytes:
    data = stream.read(n)
    return data if data is not None else b""


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an IDX file (the MNIST format), gzipped or not, into a numpy array.

    Layout: two zero bytes, a type code (0x08 unsigned byte, 0x09 signed byte, 0x0B int16,
    0x0C int32, 0x0D float32, 0x0E float64), the number of dimensions ``d``, then ``d``
    big-endian uint32 sizes and the values in row-major order. A gzip stream is recognised by
    its magic bytes, whatever the file name. The header is read and checked first; the payload
    is read only if the file's size agrees with it (for a gzip stream: if the claimed size is
    reachable by deflate from the compressed size, and then exactly that many bytes follow).

    Args:
        path: the file.

    Returns:
        An array of the stored shape, in native byte order.

    Raises:
        ValueError: the file is not a well-formed IDX file (bad magic, unknown type code,
            truncated header, size mismatch).
    """
    fn = "read_idx"
    with open_dataset_file(path, fn) as (raw_file, size, shown, where):
        compressed = raw_file.read(2) == b"\x1f\x8b"
        raw_file.seek(0)
        stream = gzip.GzipFile(fileobj=raw_file) if compressed else raw_file
        try:
            head = _read_exact(stream, 4)
            if len(head) < 4 or head[0] != 0 or head[1] != 0:
                raise ValueError(
                    f"{fn}: `path` must be an IDX file (got {shown}: bad magic number)"
                )
            code, ndim = head[2], head[3]
            if code not in _IDX_DTYPES:
                raise ValueError(
                    f"{fn}: `path` must be an IDX file (got {shown}: type code {code:#04x})"
                )
            dims = _read_exact(stream, 4 * ndim)
            if len(dims) < 4 * ndim:
                raise ValueError(
                    f"{fn}: `path` must be an IDX file (got {shown}: truncated header)"
                )
            shape = tuple(int(s) for s in np.frombuffer(dims, dtype=">u4"))
            dtype = _IDX_DTYPES[code]
            header = 4 + 4 * ndim
            body = int(np.prod(shape, dtype=object)) * dtype.itemsize
            expected = header + body
            if not compressed and size != expected:
                raise ValueError(
                    f"{fn}: `path` must hold {expected} bytes for shape {list(shape)} "
                    f"(got {shown}: {size} bytes)"
                )
            if compressed and expected > size * _MAX_DEFLATE_RATIO + 1024:
                raise ValueError(
                    f"{fn}: `path` must hold {expected} bytes for shape {list(shape)} "
                    f"(got {shown}: a {size}-byte gzip stream cannot hold that many)"
                )
            # the payload and its native-order copy
            check_fits_memory(2 * body, where, f"its header claims shape {list(shape)}")
            payload = _read_exact(stream, body + 1) if compressed else _read_exact(stream, body)
            if len(payload) != body:
                got = header + len(payload) if len(payload) <= body else f"more than {expected}"
                raise ValueError(
                    f"{fn}: `path` must hold {expected} bytes for shape {list(shape)} "
                    f"(got {shown}: {got} bytes)"
                )
        except (OSError, EOFError, gzip.BadGzipFile) as err:
            raise ValueError(
                f"{fn}: `path` must be a readable IDX file (got {shown}: {err})"
            ) from None
        finally:
            if compressed:
                stream.close()
    data = np.frombuffer(payload, dtype=dtype).reshape(shape)
    return data.astype(dtype.newbyteorder("="))


def _find(folder: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def _as_images(images: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(images.astype(np.float32) / 255.0)


def _check_labels(labels: np.ndarray, n: int, what: str, fn: str) -> torch.Tensor:
    if labels.dtype.kind not in "iu":  # a float label is refused, never truncated
        raise ValueError(f"{fn}: `{what}` labels must be integers (got dtype {labels.dtype})")
    if labels.ndim != 1 or labels.shape[0] != n:
        raise ValueError(f"{fn}: `{what}` labels must have shape [{n}] (got {list(labels.shape)})")
    if labels.size and (labels.min() < 0 or labels.max() > 9):
        raise ValueError(
            f"{fn}: `{what}` labels must lie in 0..9 (got {labels.min()}..{labels.max()})"
        )
    return torch.from_numpy(labels.astype(np.int64))


def load_idx_dataset(
    data_dir: str | os.PathLike, *, name: str = "MNIST"
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """The MNIST-format splits of ``data_dir`` (the four IDX files of :data:`MNIST_FILES`).

    Images are ``[N, 1, S, S]`` float32 in [0, 1] (uint8 / 255), labels ``[N]`` int64.

    Raises:
        FileNotFoundError: a file is missing (named in the message).
        ValueError: a file is not a valid IDX file, images are not uint8 ``[N, S, S]``, or
            images and labels disagree.
    """
    fn = f"load_{name.lower().replace('-', '_')}"
    folder = Path(data_dir)
    out = {}
    for split, stems in MNIST_FILES.items():
        paths = [_find(folder, stem) for stem in stems]
        missing = [stem for stem, p in zip(stems, paths) if p is None]
        if missing:
            raise FileNotFoundError(
                f"{name} not found: {printable_name(folder)} lacks {missing[0]}[.gz]"
            )
        images, labels = (read_idx(p) for p in paths)
        if images.ndim != 3 or images.dtype != np.uint8 or images.shape[1] != images.shape[2]:
            raise ValueError(
                f"{fn}: `{split}` images must be uint8 [N, S, S] "
                f"(got {images.dtype} {list(images.shape)})"
            )
        y = _check_labels(labels, images.shape[0], split, fn)
        out[split] = (_as_images(images)[:, None], y)
    return out


def load_mnist(data_dir: str | os.PathLike) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """MNIST from its four IDX files in ``data_dir`` (see :func:`load_idx_dataset`)."""
    return load_idx_dataset(data_dir, name="MNIST")


# ----------------------------------------------------------------------------- CIFAR-10
def read_cifar10_bin(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """One batch of CIFAR-10's binary version: ``(images uint8 [N, 3, 32, 32], labels [N])``.

    The file is ``N`` records of :data:`CIFAR10_RECORD` (3,073) bytes: a label byte in 0..9,
    then the 1,024 red, 1,024 green and 1,024 blue values of a 32x32 image, row-major. The
    size is checked (a positive multiple of 3,073) before the file is read.

    Raises:
        ValueError: the size is not a positive multiple of 3,073, or a label byte exceeds 9.
    """
    fn = "read_cifar10_bin"
    with open_dataset_file(path, fn) as (handle, size, shown, where):
        if size == 0 or size % CIFAR10_RECORD:
            raise ValueError(
                f"{fn}: `path` must hold a positive multiple of {CIFAR10_RECORD} bytes "
                f"(got {shown}: {size} bytes)"
            )
        check_fits_memory(2 * size, where, f"it holds {size // CIFAR10_RECORD} records")  # + copy
        records = np.fromfile(handle, dtype=np.uint8, count=size)
    if records.size != size:
        raise ValueError(f"{fn}: `path` was truncated while being read (got {shown})")
    records = records.reshape(-1, CIFAR10_RECORD)
    labels = records[:, 0]
    if labels.max() > 9:
        raise ValueError(f"{fn}: `path` labels must lie in 0..9 (got {shown}: {labels.max()})")
    return records[:, 1:].reshape(-1, 3, 32, 32).copy(), labels.astype(np.int64)


def load_cifar10(data_dir: str | os.PathLike) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """CIFAR-10 from ``data_dir``: the binary version if present, else the python version.

    The binary version is ``data_batch_1.bin`` ... ``data_batch_5.bin`` and ``test_batch.bin``
    (also found in a ``cifar-10-batches-bin/`` sub-folder); the python version is
    ``data_batch_1`` ... ``data_batch_5`` and ``test_batch`` (or ``cifar-10-batches-py/``).
    Images are ``[N, 3, 32, 32]`` float32 in [0, 1], labels ``[N]`` int64.

    Raises:
        FileNotFoundError: neither version is complete (the message names a missing file).
        ValueError: a file is malformed.
    """
    root = Path(data_dir)
    names = (*_CIFAR_TRAIN, *_CIFAR_TEST)
    candidates = [
        (root, ".bin", read_cifar10_bin),
        (root / "cifar-10-batches-bin", ".bin", read_cifar10_bin),
        (root, "", read_cifar10_pickle),
        (root / "cifar-10-batches-py", "", read_cifar10_pickle),
    ]
    for folder, suffix, reader in candidates:
        if all((folder / f"{n}{suffix}").is_file() for n in names):
            out = {}
            for split, stems in (("train", _CIFAR_TRAIN), ("test", _CIFAR_TEST)):
                parts = [reader(folder / f"{n}{suffix}") for n in stems]
                images = np.concatenate([p[0] for p in parts])
                labels = np.concatenate([p[1] for p in parts])
                out[split] = (_as_images(images), torch.from_numpy(labels))
            return out
    missing = next(n for n in names if not (root / f"{n}.bin").is_file())
    raise FileNotFoundError(
        f"CIFAR-10 not found: {printable_name(root)} lacks {missing}.bin (binary version) and "
        "its python version (data_batch_1..5, test_batch)"
    )
