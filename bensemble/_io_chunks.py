"""Reading a ``.npy`` array (or an uncompressed ``.npz`` member) a block at a time, with
positioned reads instead of a memory map.

A memory map turns every read into a page fault: when the file shrinks underneath (another
process truncates or rewrites it), touching a page past the new end kills the process with
SIGBUS, which Python cannot catch. :class:`NpyChunks` reads with ``os.preadv`` into the array it
returns (no intermediate copy): a file that shrinks gives a short read, reported as one
:class:`~bensemble._io_files.InputError` naming the file, and the size is compared with the
size seen at opening before every read, so a file that grew or shrank is refused even where the
rows read are still intact. Positioned reads share no file offset, so threads, forked worker
processes and repeated passes may read from one object; pickling it (for a process pool or Ray)
reopens the file by name and checks that it is the same file (device, inode, size, mtime).

Rows of the result are read in ascending file order; memory holds the result and, when the
requested rows are scattered, at most :data:`SPAN_BYTES` more. Opening reads only the header
(:func:`bensemble.io.open_npy_chunks` is the public entry).
"""

from __future__ import annotations

import math
import os
import struct
import zipfile
from pathlib import Path
from typing import IO, Any

import numpy as np

from bensemble._io_files import (
    InputError,
    check_fits_memory,
    describe,
    memory_bytes,
    open_checked,
)
from bensemble._io_formats import NpyHeader, parse_npy_header
from bensemble._terminal import printable_name

__all__ = ["SPAN_BYTES", "NpyChunks", "open_chunks"]

#: Bytes read beyond the wanted rows at most at once (between scattered rows, or columns).
SPAN_BYTES = 8 << 20
#: Unwanted bytes between two wanted rows that are read through rather than skipped.
_GAP_BYTES = 4096
_LOCAL_HEADER = struct.Struct("<4s5H3L2H")


class NpyChunks:
    """An array on disk, read a block at a time (see the module docstring).

    Attributes:
        path: The file (the archive for an ``.npz`` member); ``key``: the member or ``None``.
        shape, ndim, size, nbytes: As for the array in memory.
        dtype: The dtype of what :meth:`read` returns: the stored one in native byte order.
        fortran_order: The file stores the array column-major (results are still C order).
    """

    def __init__(
        self, handle: IO[bytes], header: NpyHeader, offset: int, where: str, ident: tuple
    ) -> None:
        self._handle, self._where, self._ident = handle, where, ident
        self._fd = handle.fileno()
        self._offset = offset  # absolute byte offset of the first value
        self._file_size = ident[2]
        self._stored = header.dtype
        self.dtype = header.dtype.newbyteorder("=")
        self.shape = header.shape
        self.ndim, self.size = len(self.shape), math.prod(self.shape)
        self.nbytes = header.nbytes
        self.fortran_order = header.fortran_order
        self._storage = self.shape[::-1] if self.fortran_order else self.shape
        self._memory = memory_bytes()
        self.path, self.key, self.name = Path(ident[4]), ident[5], ident[6]

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Close the file (reads then raise ``ValueError``); closing twice is harmless."""
        self._handle.close()

    def __enter__(self) -> NpyChunks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return self.shape[0] if self.shape else 0

    def __repr__(self) -> str:
        return f"NpyChunks({printable_name(self.path)!r}, shape={self.shape}, dtype={self.dtype})"

    def __reduce__(self) -> tuple:
        return (_reopen, (self._ident,))

    # ------------------------------------------------------------------ reading
    def read(
        self, start: int, stop: int, *, axis: int = 0, out: np.ndarray | None = None
    ) -> np.ndarray:
        """``array[..., start:stop, ...]`` along ``axis`` as a C-ordered array in memory.

        Args:
            start, stop: Non-negative ints; ``stop`` past the end is clipped, as in slicing.
            axis: The axis ``start:stop`` applies to.
            out: A C-contiguous array of :attr:`dtype` and exactly the result's shape to read
                into (reused from chunk to chunk, no fresh pages are faulted in per read);
                ``None``: a new array.

        Returns:
            A writable, C-contiguous array of :attr:`dtype` (native byte order): ``out`` when
            given.

        Raises:
            InputError: The file changed size since it was opened, or a read came back short
                (the file was truncated while being read).
            ValueError: Bad ``start``/``stop``/``axis``, or this object was closed.
        """
        axis = self._axis(axis)
        start, stop = _bound(start, "start"), _bound(stop, "stop")
        stop = min(stop, self.shape[axis])
        start = min(start, stop)
        out_shape = self.shape[:axis] + (stop - start,) + self.shape[axis + 1 :]
        if out is not None:
            _check_out(out, out_shape, self.dtype)
        elif math.prod(out_shape) * self.dtype.itemsize > self._memory:
            check_fits_memory(
                math.prod(out_shape) * self.dtype.itemsize, self._where, f"a read of {out_shape}"
            )
        self._check_size()
        s_axis = self.ndim - 1 - axis if self.fortran_order else axis
        storage = self._storage[:s_axis] + (stop - start,) + self._storage[s_axis + 1 :]
        if out is not None and not self.fortran_order:
            buffer = out.view(self._stored)  # same bytes; swapped in place below if needed
        else:
            buffer = np.empty(storage, dtype=self._stored)
        if buffer.size:
            self._read_storage(buffer, start, stop, s_axis)
        if not self._stored.isnative:
            buffer = buffer.byteswap(inplace=True).view(self.dtype)
        if self.fortran_order:
            buffer = buffer.T
        if out is None:
            return np.ascontiguousarray(buffer)
        if self.fortran_order:
            out[...] = buffer
        return out

    def take(self, indices: Any, *, axis: int = 0) -> np.ndarray:
        """``np.take(array, indices, axis)``: the rows ``indices`` along ``axis``, in that order.

        Rows are read in ascending order; nearby rows (less than 4 KiB apart) are read as one
        span, spans are at most :data:`SPAN_BYTES` long.

        Args:
            indices: 1-D integer indices in ``[0, shape[axis])``, any order, repeats allowed.
            axis: The axis they index.

        Raises:
            InputError: As :meth:`read`.
            ValueError: Indices that are not 1-D integers or fall outside the axis.
        """
        axis = self._axis(axis)
        idx = np.asarray(indices)
        if idx.ndim != 1 or idx.dtype.kind not in "iu":
            raise ValueError(
                f"NpyChunks.take: `indices` must be a 1-D array of integers (got dtype "
                f"{idx.dtype}, shape {idx.shape})"
            )
        n = self.shape[axis]
        if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= n):
            bad = int(idx.min()) if int(idx.min()) < 0 else int(idx.max())
            raise ValueError(
                f"NpyChunks.take: `indices` must lie in [0, {n - 1}] (got {bad}) for axis {axis}"
            )
        out_shape = self.shape[:axis] + (idx.size,) + self.shape[axis + 1 :]
        out = np.empty(out_shape, dtype=self.dtype)
        if out.size == 0:
            return out
        order = np.argsort(idx, kind="stable")
        rows = idx[order].astype(np.int64)
        row_bytes = max(1, self.nbytes // max(n, 1))
        new_span = np.diff(rows) > max(1, _GAP_BYTES // row_bytes)
        span = np.concatenate([[0], np.cumsum(new_span)])
        first = rows[np.concatenate([[0], np.flatnonzero(new_span) + 1])]
        piece = (rows - first[span]) // max(1, SPAN_BYTES // row_bytes)  # split long spans
        change = np.flatnonzero((np.diff(span) != 0) | (np.diff(piece) != 0)) + 1
        bounds = np.concatenate([[0], change, [rows.size]])
        lead = (slice(None),) * axis
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            low = int(rows[a])
            block = self.read(low, int(rows[b - 1]) + 1, axis=axis)
            out[lead + (order[a:b],)] = np.take(block, rows[a:b] - low, axis=axis)
        return out

    # ------------------------------------------------------------------ internals
    def _axis(self, axis: Any) -> int:
        if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
            raise ValueError(f"NpyChunks: `axis` must be an int (got {axis!r})")
        if not -self.ndim <= int(axis) < self.ndim:
            raise ValueError(
                f"NpyChunks: `axis` must lie in [{-self.ndim}, {self.ndim - 1}] (got {axis})"
            )
        return int(axis) % self.ndim

    def _check_size(self) -> None:
        if self._handle.closed:
            raise ValueError(f"NpyChunks: {self._where} was closed")
        now = os.fstat(self._fd).st_size
        if now != self._file_size:
            raise InputError(
                f"{self._where} changed while being read: it held {self._file_size} bytes when "
                f"opened and holds {now} now"
            )

    def _read_storage(self, buffer: np.ndarray, start: int, stop: int, s_axis: int) -> None:
        """Fill ``buffer`` (storage order) with rows ``start:stop`` of storage axis ``s_axis``."""
        outer = math.prod(self._storage[:s_axis])
        along = self._storage[s_axis]
        inner = math.prod(self._storage[s_axis + 1 :]) * self._stored.itemsize
        piece = (stop - start) * inner
        raw = memoryview(buffer.reshape(-1).view(np.uint8))
        if outer == 1 or stop - start == along:  # one contiguous range
            self._pread(raw, self._offset + start * inner)
            return
        row = along * inner
        if row - piece > max(piece, _GAP_BYTES):  # one read per outer index
            first = self._offset + start * inner
            for o in range(outer):
                self._pread(raw[o * piece : (o + 1) * piece], first + o * row)
            return
        per = max(1, SPAN_BYTES // row)  # small gaps: whole rows, a few at a time, then sliced
        scratch = np.empty((min(per, outer), row), dtype=np.uint8)
        target = np.frombuffer(raw, dtype=np.uint8).reshape(outer, piece)
        for o in range(0, outer, per):
            count = min(per, outer - o)
            self._pread(memoryview(scratch[:count].reshape(-1)), self._offset + o * row)
            target[o : o + count] = scratch[:count, start * inner : start * inner + piece]

    def _pread(self, view: memoryview, offset: int) -> None:
        done = 0
        while done < len(view):
            try:
                got = _pread_into(self._fd, view[done:], offset + done)
            except OSError as exc:
                raise InputError(f"{self._where} could not be read ({exc})") from None
            if got == 0:
                try:
                    now = os.fstat(self._fd).st_size
                except OSError:  # pragma: no cover - fd closed under us
                    now = -1
                raise InputError(
                    f"{self._where} was truncated while being read: {len(view)} bytes were "
                    f"expected at byte {offset} but the file ended after {done} "
                    f"(it held {self._file_size} bytes when opened and holds {now} now)"
                )
            done += got


def _check_out(out: Any, shape: tuple[int, ...], dtype: np.dtype) -> None:
    if (
        not isinstance(out, np.ndarray)
        or out.shape != shape
        or out.dtype != dtype
        or not out.flags.c_contiguous
        or not out.flags.writeable
    ):
        got = f"{out.dtype} {out.shape}" if isinstance(out, np.ndarray) else type(out).__name__
        raise ValueError(
            f"NpyChunks.read: `out` must be a writable C-contiguous {dtype} array of shape "
            f"{shape} (got {got})"
        )


def _pread_into(fd: int, view: memoryview, offset: int) -> int:
    """Read into ``view`` at ``offset`` without moving the file offset; bytes read."""
    if hasattr(os, "preadv"):
        return os.preadv(fd, [view], offset)
    data = os.pread(fd, len(view), offset)  # pragma: no cover - platforms without preadv
    view[: len(data)] = data  # pragma: no cover
    return len(data)  # pragma: no cover


def _bound(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"NpyChunks.read: `{name}` must be an int >= 0 (got {value!r})")
    return int(value)


def _identity(handle: IO[bytes], path: Path, key: str | None, name: str) -> tuple:
    info = os.fstat(handle.fileno())
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, str(path), key, name)


def _check_numeric(header: NpyHeader, where: str) -> None:
    if header.dtype.kind not in "biuf" or header.dtype.fields is not None:
        raise InputError(f"{where} must hold numbers (got dtype {header.dtype})")


def open_chunks(path: Path, key: str | None, name: str) -> NpyChunks:
    """An :class:`NpyChunks` of ``path`` (``.npy``, or member ``key`` of an ``.npz``)."""
    where = describe(f"`{name}` file", path)
    handle = open_checked(path, where)
    try:
        size = os.fstat(handle.fileno()).st_size
        if path.suffix.lower() == ".npz":
            header, offset, where = _npz_member(handle, size, key, path, name)
        else:
            if handle.read(6) != b"\x93NUMPY":
                raise InputError(f"{where} is not a .npy file (no NumPy header)")
            handle.seek(0)
            header = parse_npy_header(handle, size, where)
            offset = header.data_offset
        _check_numeric(header, where)
        return NpyChunks(handle, header, offset, where, _identity(handle, path, key, name))
    except BaseException:
        handle.close()
        raise


def _npz_member(
    handle: IO[bytes], size: int, key: str | None, path: Path, name: str
) -> tuple[NpyHeader, int, str]:
    """Header and absolute data offset of an uncompressed ``.npz`` member."""
    where = describe(f"`{name}` file", path)
    try:
        archive = zipfile.ZipFile(handle)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        raise InputError(f"{where} is not a valid .npz archive ({exc})") from None
    members = {n[:-4]: n for n in archive.namelist() if n.endswith(".npy")}
    if key is None and len(members) != 1:
        listed = printable_name(", ".join(members)) or "none"
        raise InputError(f"{where} holds {len(members)} arrays ({listed}); choose one with :KEY")
    key = next(iter(members)) if key is None else key
    if key not in members:
        raise InputError(f"{where} has no array {printable_name(repr(key))}")
    info = archive.getinfo(members[key])
    where = f"`{name}` array {printable_name(repr(key))} in {printable_name(path)}"
    if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 1:
        raise InputError(
            f"{where} is compressed (numpy.savez_compressed), so it cannot be read in chunks; "
            "save it with numpy.save (or numpy.savez), or read it whole"
        )
    handle.seek(info.header_offset)
    local = handle.read(_LOCAL_HEADER.size)
    if len(local) < _LOCAL_HEADER.size or local[:4] != b"PK\x03\x04":
        raise InputError(f"{where} is not a valid .npz member (no local file header)")
    fields = _LOCAL_HEADER.unpack(local)
    start = info.header_offset + _LOCAL_HEADER.size + fields[-2] + fields[-1]
    if start + info.file_size > size:
        raise InputError(f"{where} is truncated: the archive ends inside it")
    handle.seek(start)
    header = parse_npy_header(handle, info.file_size, where)
    return header, start + header.data_offset, where


def _reopen(ident: tuple) -> NpyChunks:
    """Unpickling: open the file again and check it is the one that was pickled."""
    *stat_part, path, key, name = ident
    chunks = open_chunks(Path(path), key, name)
    if tuple(chunks._ident[:4]) != tuple(stat_part):
        chunks.close()
        raise InputError(
            f"{describe(f'`{name}` file', path)} changed since it was opened (another file now "
            "has its name, or it was rewritten)"
        )
    return chunks
