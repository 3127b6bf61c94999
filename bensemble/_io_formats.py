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
from pathlib import Path
from typing import IO

import numpy as np
import torch

__all__ = ["InputError", "read_csv", "read_npy", "read_npz", "read_pt", "to_native_tensor"]

_INT_LITERAL = re.compile(r"[+-]?\d+")
# Python's float() also takes "1_000" and " 0x1p3"-like forms; a table cell may not.
_FLOAT_LITERAL = re.compile(
    r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf|infinity|nan)", re.IGNORECASE
)
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


class InputError(ValueError):
    """Bad input file or content; ``str(error)`` is a single line fit for a command-line error."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


def _memory_bytes() -> int:
    """Physical memory of this machine (a generous 1 TiB when the OS does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):  # pragma: no cover - non-POSIX
        return 2**40


def _check_npy_header(stream: IO[bytes], size: int, where: str) -> None:
    """Parse a ``.npy`` header from ``stream`` and refuse sizes the data cannot back.

    Args:
        stream: Positioned at the start of the ``.npy`` content.
        size: Bytes of the whole ``.npy`` content (file size, or the archive member's size).
        where: ``"`predictions` file p.npy"``-like prefix for messages.
    """
    try:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(stream)
        else:
            shape, _, dtype = np.lib.format.read_array_header_2_0(stream)
        header_end = stream.tell()
    except Exception as exc:  # noqa: BLE001 - numpy raises ValueError/EOFError/SyntaxError/...
        raise InputError(f"{where} has no valid .npy header ({exc})") from None
    if dtype.hasobject:
        raise InputError(
            f"{where} holds a pickled object array, which is not trusted (save a numeric array)"
        )
    count = math.prod(int(d) for d in shape)
    claimed = count * dtype.itemsize
    present = size - header_end
    if claimed > present:
        raise InputError(
            f"{where} is truncated or corrupt: its header claims shape {tuple(shape)} "
            f"({count} values, {claimed} bytes) but only {max(present, 0)} bytes follow it"
        )
    memory = _memory_bytes()
    if claimed > memory:
        raise InputError(
            f"{where} is too large to load: its header claims shape {tuple(shape)} "
            f"({claimed} bytes) and this machine has {memory} bytes of memory"
        )


def read_npy(path: Path, name: str) -> np.ndarray:
    """One array from a ``.npy`` file (header checked first, ``allow_pickle=False``)."""
    where = f"`{name}` file {path}"
    with open(path, "rb") as handle:
        magic = handle.read(6)
        if magic[:2] == b"PK":  # an .npz archive saved under a .npy name
            raise InputError(f"{where} is an .npz archive; rename it to .npz")
        if magic != b"\x93NUMPY":
            raise InputError(
                f"{where} is not a .npy file (no NumPy header; a pickle is not trusted)"
            )
        handle.seek(0)
        _check_npy_header(handle, os.fstat(handle.fileno()).st_size, where)
    try:
        return np.load(path, allow_pickle=False)
    except Exception as exc:  # noqa: BLE001 - corrupt content: many numpy exception types
        raise InputError(f"{where} is not a valid .npy file ({_brief(exc)})") from None


def read_npz(path: Path, key: str | None, name: str) -> np.ndarray:
    """One array from an ``.npz`` archive (``key`` picks it; header checked first)."""
    where = f"`{name}` file {path}"
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        with open(path, "rb") as handle:
            magic = handle.read(6)
        if magic == b"\x93NUMPY":
            raise InputError(f"{where} is a plain .npy array; rename it to .npy") from None
        raise InputError(f"{where} is not a valid .npz archive ({_brief(exc)})") from None
    with archive:
        members = {n[:-4]: n for n in archive.namelist() if n.endswith(".npy")}
        if key is None:
            if len(members) != 1:
                listed = ", ".join(members) if members else "none"
                raise InputError(
                    f"{where} holds {len(members)} arrays ({listed}); choose one with {path}:KEY"
                )
            key = next(iter(members))
        elif key not in members:
            raise InputError(f"{where} has no array {key!r} (it holds: {', '.join(members)})")
        where = f"`{name}` array {key!r} in {path}"
        try:
            info = archive.getinfo(members[key])
            with archive.open(info) as stream:
                _check_npy_header(stream, info.file_size, where)
            with archive.open(info) as stream:
                return np.lib.format.read_array(stream, allow_pickle=False)
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001 - zlib.error, BadZipFile, EOFError, ValueError...
            raise InputError(f"{where} is unreadable ({_brief(exc)})") from None


def _brief(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


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
    needed = t.numel() * max(t.element_size(), 8)
    memory = _memory_bytes()
    if needed > memory:
        raise InputError(
            f"{where} holds a tensor of shape {tuple(t.shape)} ({t.numel()} values), which needs "
            f"{needed} bytes in float64 and this machine has {memory} bytes of memory"
        )


def _is_unsigned(dtype: torch.dtype) -> bool:
    return dtype in {getattr(torch, n, None) for n in ("uint16", "uint32", "uint64")} - {None}


def read_pt(path: Path, key: str | None, name: str) -> torch.Tensor:
    """One tensor from a ``.pt``/``.pth`` file (``torch.load(weights_only=True)``)."""
    where = f"`{name}` file {path}"
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
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
    if isinstance(obj, torch.Tensor):
        if key is not None:
            raise InputError(f"{where} holds a single tensor, not a dict with {key!r}")
        return _check_dense(obj, where)
    if isinstance(obj, dict):
        tensors = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}
        listed = ", ".join(map(str, tensors)) or "none"
        if key is not None:
            if key not in tensors:
                raise InputError(f"{where} has no tensor {key!r} (its tensors: {listed})")
            return _check_dense(tensors[key], where)
        if len(tensors) != 1:
            raise InputError(
                f"{where} holds a dict with {len(tensors)} tensors ({listed}); "
                f"choose one with {path}:KEY"
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


def read_csv(path: Path, name: str) -> np.ndarray:
    """A header-less comma-separated table: int64 if every cell is an integer, else float64."""
    where = f"`{name}` file {path}"
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{where} could not be read as text ({_brief(exc)})") from None
    rows: list[list[str]] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if rows and len(cells) != len(rows[0]):
            raise InputError(
                f"{where} line {lineno} has {len(cells)} columns, expected {len(rows[0])} "
                "like the first line"
            )
        rows.append(cells)
    if not rows:
        raise InputError(f"{where} is empty")
    flat = [c for row in rows for c in row]
    if all(_INT_LITERAL.fullmatch(c) for c in flat):
        values = [int(c) for c in flat]
        bad = next((c for c, v in zip(flat, values) if not _INT64_MIN <= v <= _INT64_MAX), None)
        if bad is not None:
            raise InputError(f"{where} holds the integer {bad}, which does not fit in 64 bits")
        return np.array(values, dtype=np.int64).reshape(len(rows), -1)
    bad = next((c for c in flat if not _FLOAT_LITERAL.fullmatch(c)), None)
    if bad is not None:
        raise InputError(
            f"{where} must be a header-less table of numbers separated by commas "
            f"(found {bad[:30]!r})"
        )
    return np.array([float(c) for c in flat], dtype=np.float64).reshape(len(rows), -1)


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
