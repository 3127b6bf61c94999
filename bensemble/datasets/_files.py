"""Opening a dataset file: the checked handle, its size and the names its messages use."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, NamedTuple

from bensemble._io_files import open_checked
from bensemble._terminal import printable_name

__all__ = ["DatasetFile", "open_dataset_file"]


class DatasetFile(NamedTuple):
    """An open dataset file: ``handle``, its ``size`` in bytes when opened, its printable name
    ``shown`` and ``where`` (``"<fn>: `path` <shown>"``), the start of a message about it."""

    handle: IO[bytes]
    size: int
    shown: str
    where: str


@contextmanager
def open_dataset_file(path: str | os.PathLike, fn: str) -> Iterator[DatasetFile]:
    """``path`` opened for binary reading by the reader ``fn`` (refused as
    :func:`bensemble._io_files.open_checked` refuses), closed when the block ends."""
    shown = printable_name(Path(path))
    where = f"{fn}: `path` {shown}"
    with open_checked(path, where) as handle:
        yield DatasetFile(handle, os.fstat(handle.fileno()).st_size, shown, where)
