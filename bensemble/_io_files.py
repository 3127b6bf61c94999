"""What every file reader checks before it reads: the one-line :class:`InputError`, the machine's
memory, and files whose size is not backed by data.

* :func:`memory_bytes` - the physical memory a claimed size is compared with (total, not
  "available", so a check answers the same on a busy and a quiet machine).
* :func:`check_fits_memory` - refuse ``needed`` bytes beyond it, naming the file and the size.
* :func:`hole_bytes` / :func:`check_not_sparse` - a *sparse* file (``truncate -s 100G f``,
  ``f.seek(10**11); f.write(b"x")``) claims a size its blocks do not hold: a few kilobytes on
  disk read back as gigabytes of zeros. No data set or prediction file is written that way, so a
  file whose holes make up more than half its size (and more than
  :data:`SPARSE_MIN_HOLE_BYTES`) is refused before any of it is read. Holes are found with
  ``lseek(SEEK_HOLE / SEEK_DATA)``; where the file system cannot say, nothing is refused.

Names in messages go through :func:`bensemble._terminal.printable_name`, so a file name cannot
move the cursor or reorder the line that reports it.

Foundation module (imports only :mod:`bensemble._terminal`).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import IO

from bensemble._terminal import printable_name, printable_text

__all__ = [
    "SPARSE_MIN_HOLE_BYTES",
    "InputError",
    "brief",
    "check_fits_memory",
    "check_not_sparse",
    "describe",
    "hole_bytes",
    "memory_bytes",
    "open_checked",
]

#: Holes smaller than this (in total) are tolerated whatever the file's size: some file systems
#: store runs of zero bytes as holes.
SPARSE_MIN_HOLE_BYTES = 1 << 20
#: Most hole / data extents walked per file (a file with more is judged on those seen).
_MAX_EXTENTS = 100_000


class InputError(ValueError):
    """Bad input file or content; ``str(error)`` is a single line fit for a command-line error:
    whitespace runs become one space and control / bidirectional characters are escaped."""

    def __init__(self, message: str) -> None:
        super().__init__(printable_text(message))


def describe(what: str, path: str | os.PathLike) -> str:
    """``"`predictions` file p.npy"``-like prefix of a message, the name made printable."""
    return f"{what} {printable_name(path)}"


def memory_bytes() -> int:
    """Physical memory of this machine (a generous 1 TiB when the OS does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):  # pragma: no cover - non-POSIX
        return 2**40


def check_fits_memory(needed: int, where: str, what: str) -> None:
    """Refuse ``needed`` bytes beyond :func:`memory_bytes`.

    Args:
        needed: Bytes the read would allocate.
        where: The message's subject (``describe(...)``).
        what: What claims the size (``"its header claims shape (10, 10)"``).
    """
    memory = memory_bytes()
    if needed > memory:
        raise InputError(
            f"{where} is too large to load: {what} ({needed} bytes) and this machine has "
            f"{memory} bytes of memory"
        )


def hole_bytes(fd: int, size: int) -> int:
    """Bytes of ``fd``'s first ``size`` bytes that are holes (never written, read as zeros).

    The file offset of ``fd`` is restored. 0 where the file system does not report holes.
    """
    seek_hole, seek_data = getattr(os, "SEEK_HOLE", None), getattr(os, "SEEK_DATA", None)
    if seek_hole is None or seek_data is None or size <= 0:  # pragma: no cover - platform
        return 0
    saved = os.lseek(fd, 0, os.SEEK_CUR)
    holes, position = 0, 0
    try:
        for _ in range(_MAX_EXTENTS):
            try:
                hole = os.lseek(fd, position, seek_hole)
            except OSError:  # ENXIO past the end, EINVAL where unsupported
                break
            if hole >= size:
                break
            try:
                data = os.lseek(fd, hole, seek_data)
            except OSError as exc:
                if exc.errno != errno.ENXIO:
                    break
                data = size  # a hole up to the end of the file
            holes += min(data, size) - hole
            position = data
            if position >= size:
                break
    finally:
        os.lseek(fd, saved, os.SEEK_SET)
    return holes


def check_not_sparse(fd: int, size: int, where: str) -> None:
    """Refuse a file whose holes exceed half its ``size`` and :data:`SPARSE_MIN_HOLE_BYTES`."""
    holes = hole_bytes(fd, size)
    if holes > SPARSE_MIN_HOLE_BYTES and 2 * holes > size:
        raise InputError(
            f"{where} is a sparse file: {holes} of its {size} bytes were never written (holes "
            "that read as zeros); a data file is written in full, so it is refused"
        )


def brief(exc: BaseException) -> str:
    """An exception as at most 200 characters of one line."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def open_checked(path: str | os.PathLike, where: str) -> IO[bytes]:
    """``path`` opened for binary reading; refused (:class:`InputError`) when it cannot be
    opened, is not a regular file, or is sparse (:func:`check_not_sparse`). The caller closes
    it; later checks and reads use this handle, so a file swapped for another meanwhile cannot
    slip past them."""
    flags = os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:  # O_NONBLOCK: opening a FIFO must not wait for a writer
        fd = os.open(Path(path), flags | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise InputError(f"{where} could not be opened ({brief(exc)})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"{where} is not a regular file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        check_not_sparse(fd, info.st_size, where)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
