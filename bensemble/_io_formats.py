"""The file readers behind :mod:`bensemble.io`: one per format, each trusting nothing.

Every reader returns a numpy array or a torch tensor exactly as stored, or raises
:class:`InputError` with one line naming the file and the problem. Nothing is unpickled. Before
any ``.npy`` array (alone, or inside an ``.npz`` archive) is read, its header is parsed on its own
and the size it claims is compared with the bytes actually present and with the machine's
memory, so a 200-byte file claiming 1e11 values is refused without allocating anything.
"""

from __future__ import annotations

import math
import os
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np
import torch

from bensemble._io_files import (
    InputError,
    brief,
    check_fits_memory,
    describe,
    open_checked,
)
from bensemble._terminal import printable_name

__all__ = [
    "InputError",
    "NpyHeader",
    "parse_npy_header",
    "read_npy",
    "read_npz",
    "read_pt",
    "to_native_tensor",
]

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
#: torch dtypes a file may hold (bool is refused later, where it is not a number).
_REAL_DTYPES = {
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.bool,
}


@dataclass(frozen=True)
class NpyHeader:
    """What a ``.npy`` header says: ``shape``, ``fortran_order``, ``dtype`` and where the data
    starts (``data_offset`` bytes from the start of the ``.npy`` content)."""

    shape: tuple[int, ...]
    fortran_order: bool
    dtype: np.dtype
    data_offset: int

    @property
    def nbytes(self) -> int:
        """Bytes of data the header claims."""
        return math.prod(self.shape) * self.dtype.itemsize


def parse_npy_header(stream: IO[bytes], size: int, where: str) -> NpyHeader:
    """Parse a ``.npy`` header from ``stream`` and refuse data the header does not describe.

    The bytes after the header must be exactly those of the array it describes: fewer is a
    truncated file, more is a file whose header was changed or whose tail belongs to something
    else (numpy itself would read the first part and ignore the rest). Object arrays (pickles)
    are refused. Nothing is allocated.

    Args:
        stream: Positioned at the start of the ``.npy`` content.
        size: Bytes of the whole ``.npy`` content (file size, or the archive member's size).
        where: ``"`predictions` file p.npy"``-like prefix for messages.
    """
    start = stream.tell()
    try:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
        header_end = stream.tell() - start
    except Exception as exc:  # noqa: BLE001 - numpy raises ValueError/EOFError/SyntaxError/...
        raise InputError(f"{where} has no valid .npy header ({brief(exc)})") from None
    shape = tuple(int(d) for d in shape)
    if any(d < 0 for d in shape):
        raise InputError(f"{where} has no valid .npy header (negative shape {shape})")
    if dtype.hasobject:
        raise InputError(
            f"{where} holds a pickled object array, which is not trusted (save a numeric array)"
        )
    header = NpyHeader(shape, bool(fortran), dtype, header_end)
    claimed, present = header.nbytes, size - header_end
    if claimed > present:
        raise InputError(
            f"{where} is truncated or corrupt: its header claims shape {shape} "
            f"({math.prod(shape)} values, {claimed} bytes) but only {max(present, 0)} bytes "
            "follow it"
        )
    if claimed < present:
        raise InputError(
            f"{where} is corrupt: its header claims shape {shape} ({claimed} bytes) but "
            f"{present} bytes follow it; {present - claimed} bytes are not described by the "
            "header (save the array again with numpy.save)"
        )
    return header


def _check_npy_header(stream: IO[bytes], size: int, where: str) -> NpyHeader:
    """:func:`parse_npy_header`, then the claimed size against the machine's memory."""
    header = parse_npy_header(stream, size, where)
    check_fits_memory(header.nbytes, where, f"its header claims shape {header.shape}")
    return header


def _check_npy_file(handle: IO[bytes], where: str) -> NpyHeader:
    """Check that the open file ``handle`` is a ``.npy`` file (not an ``.npz`` archive under a
    ``.npy`` name, not a pickle) whose header fits its size and the machine's memory
    (:func:`_check_npy_header`); the handle is left after the header."""
    handle.seek(0)
    magic = handle.read(6)
    if magic[:2] == b"PK":  # an .npz archive saved under a .npy name
        raise InputError(f"{where} is an .npz archive; rename it to .npz")
    if magic != b"\x93NUMPY":
        raise InputError(f"{where} is not a .npy file (no NumPy header; a pickle is not trusted)")
    handle.seek(0)
    return _check_npy_header(handle, os.fstat(handle.fileno()).st_size, where)


def read_npy(path: Path, name: str) -> np.ndarray:
    """One array from a ``.npy`` file (header checked first, ``allow_pickle=False``).

    The array is read from the handle whose header was checked, so a file swapped for another
    in between cannot slip past the checks.
    """
    where = describe(f"`{name}` file", path)
    with open_checked(path, where) as handle:
        _check_npy_file(handle, where)
        handle.seek(0)
        try:
            return np.lib.format.read_array(handle, allow_pickle=False)
        except Exception as exc:  # noqa: BLE001 - corrupt content: many numpy exception types
            raise InputError(f"{where} is not a valid .npy file ({brief(exc)})") from None


def read_npz(path: Path, key: str | None, name: str) -> np.ndarray:
    """One array from an ``.npz`` archive (``key`` picks it; header checked first)."""
    where = describe(f"`{name}` file", path)
    handle = open_checked(path, where)
    try:
        archive = zipfile.ZipFile(handle)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        handle.seek(0)
        magic = handle.read(6)
        handle.close()
        if magic == b"\x93NUMPY":
            raise InputError(f"{where} is a plain .npy array; rename it to .npy") from None
        raise InputError(f"{where} is not a valid .npz archive ({brief(exc)})") from None
    with handle, archive:
        members = {n[:-4]: n for n in archive.namelist() if n.endswith(".npy")}
        if key is None:
            if len(members) != 1:
                listed = printable_name(", ".join(members)) if members else "none"
                raise InputError(
                    f"{where} holds {len(members)} arrays ({listed}); choose one with "
                    f"{printable_name(path)}:KEY"
                )
            key = next(iter(members))
        elif key not in members:
            listed, shown = printable_name(", ".join(members)), printable_name(repr(key))
            raise InputError(f"{where} has no array {shown} (it holds: {listed})")
        where = f"`{name}` array {printable_name(repr(key))} in {printable_name(path)}"
        try:
            info = archive.getinfo(members[key])
            with archive.open(info) as stream:
                _check_npy_header(stream, info.file_size, where)
            with archive.open(info) as stream:
                return np.lib.format.read_array(stream, allow_pickle=False)
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001 - zlib.error, BadZipFile, EOFError, ValueError...
            raise InputError(f"{where} is unreadable ({brief(exc)})") from None


def _check_dense(t: torch.Tensor, where: str) -> torch.Tensor:
    """A dense, strided, real tensor with data; anything else is refused."""
    if t.is_nested:
        kind = "a nested tensor"
    elif t.layout != torch.strided:
        kind = f"a tensor with layout {t.layout}"
    elif t.is_meta or t.device.type == "meta":
        kind = "a meta tensor, which holds no values"
    elif t.is_quantized:
        kind = f"a quantized tensor ({t.dtype})"
    elif t.is_complex():
        raise InputError(f"{where} must hold real numbers (got dtype {t.dtype})")
    elif t.dtype not in _REAL_DTYPES and not _is_unsigned(t.dtype):
        raise InputError(f"{where} must hold numbers (got unsupported dtype {t.dtype})")
    else:
        _check_memory(t, where)
        return t
    raise InputError(f"{where} must hold a dense (strided) tensor of numbers (got {kind})")


def _check_memory(t: torch.Tensor, where: str) -> None:
    """Refuse a tensor whose values (as float64, as they will be used) exceed the memory.

    A saved tensor can be a broadcast view: ``torch.zeros(1).expand(10**6, 10**5, 2)`` is stored
    in a few hundred bytes but claims 2e11 values, which any later copy would try to allocate.
    """
    check_fits_memory(
        t.numel() * max(t.element_size(), 8),
        where,
        f"it holds a tensor of shape {tuple(t.shape)} ({t.numel()} values, in float64)",
    )


def _is_unsigned(dtype: torch.dtype) -> bool:
    return dtype in {getattr(torch, n, None) for n in ("uint16", "uint32", "uint64")} - {None}


def read_pt(path: Path, key: str | None, name: str) -> torch.Tensor:
    """One tensor from a ``.pt``/``.pth`` file (``torch.load(weights_only=True)``)."""
    where = describe(f"`{name}` file", path)
    with open_checked(path, where) as handle:
        size = os.fstat(handle.fileno()).st_size
        check_fits_memory(size, where, f"it is loaded whole and holds {size} bytes")
        obj = _torch_load(handle, where)
    return _one_tensor(obj, key, where, path)


def _torch_load(handle: IO[bytes], where: str) -> object:
    """``torch.load(weights_only=True)`` of an open file, its failures as one-line errors."""
    try:
        return torch.load(handle, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises UnpicklingError/RuntimeError/...
        match = re.search(r"Unsupported global: GLOBAL (\S+)", str(exc))
        if match:
            raise InputError(
                f"{where} needs pickle to load {match.group(1)}, which is not trusted "
                "(torch.load(weights_only=True) refused it); save plain tensors with "
                "torch.save(tensor, path)"
            ) from None
        raise InputError(
            f"{where} is not a valid .pt file (torch.load(weights_only=True) could not read it)"
        ) from None


def _one_tensor(obj: object, key: str | None, where: str, path: Path) -> torch.Tensor:
    """The tensor ``key`` picks from what a ``.pt`` file held (or its only one)."""
    if isinstance(obj, torch.Tensor):
        if key is not None:
            shown = printable_name(repr(key))
            raise InputError(f"{where} holds a single tensor, not a dict with {shown}")
        return _check_dense(obj, where)
    if isinstance(obj, dict):
        tensors = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}
        listed = printable_name(", ".join(map(str, tensors))) or "none"
        if key is not None:
            if key not in tensors:
                shown = printable_name(repr(key))
                raise InputError(f"{where} has no tensor {shown} (its tensors: {listed})")
            return _check_dense(tensors[key], where)
        if len(tensors) != 1:
            raise InputError(
                f"{where} holds a dict with {len(tensors)} tensors ({listed}); "
                f"choose one with {printable_name(path)}:KEY"
            )
        return _check_dense(next(iter(tensors.values())), where)
    if isinstance(obj, (list, tuple)) and obj and all(isinstance(t, torch.Tensor) for t in obj):
        parts = [_check_dense(t, where) for t in obj]
        shapes = {tuple(t.shape) for t in parts}
        dtypes = {t.dtype for t in parts}
        if len(shapes) != 1 or len(dtypes) != 1:
            got = ", ".join(str(s) for s in sorted(shapes)) + "; " + ", ".join(map(str, dtypes))
            raise InputError(
                f"{where} holds a list of tensors with different shapes or dtypes ({got})"
            )
        stacked = torch.empty((), dtype=parts[0].dtype).expand(len(parts), *shapes.pop())
        _check_memory(stacked, where)  # torch.stack allocates the whole [M, ...] tensor
        return torch.stack(parts)
    raise InputError(
        f"{where} must hold a tensor, a dict of tensors or a list of tensors "
        f"(got {type(obj).__name__})"
    )


def to_native_tensor(data: np.ndarray | torch.Tensor, where: str) -> torch.Tensor:
    """A CPU tensor in a dtype torch supports natively, converting what can be converted.

    Non-native byte order and ``longdouble`` are converted (to native order, to float64);
    unsigned integers wider than 8 bits become int64 when every value fits, else are refused.
    Complex, string, structured, datetime and object data are refused.
    """
    if isinstance(data, torch.Tensor):
        if _is_unsigned(data.dtype):
            data = data.to(torch.int64) if _fits_int64(data) else _too_big(data, where)
        return data.detach().cpu()
    kind = data.dtype.kind
    if kind == "c":
        raise InputError(f"{where} must hold real numbers (got dtype {data.dtype})")
    if kind not in "biuf" or data.dtype.hasobject:
        raise InputError(f"{where} must hold numbers (got dtype {data.dtype})")
    if not data.dtype.isnative:
        data = data.astype(data.dtype.newbyteorder("="))
    if kind == "f" and data.dtype.itemsize > 8:
        data = data.astype(np.float64)
    if kind == "u" and data.dtype.itemsize > 1:
        if data.size and data.max() > _INT64_MAX:
            raise InputError(
                f"{where} holds the value {int(data.max())}, which does not fit in a signed "
                "64-bit integer"
            )
        data = data.astype(np.int64)
    if not data.flags.c_contiguous:
        data = data.copy(order="C")  # np.ascontiguousarray would turn a 0-d array into 1-d
    return torch.from_numpy(data)


def _fits_int64(t: torch.Tensor) -> bool:
    return t.numel() == 0 or int(t.max()) <= _INT64_MAX


def _too_big(t: torch.Tensor, where: str) -> torch.Tensor:
    raise InputError(
        f"{where} holds the value {int(t.max())}, which does not fit in a signed 64-bit integer"
    )
