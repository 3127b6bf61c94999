"""The ``.csv`` reader behind :mod:`bensemble.io`: a header-less table of numbers, read in bounded
memory.

The file is read 1 MiB of text at a time and every block's cells are converted to numbers at
once, so memory holds the numbers read so far (8 bytes each) and one block of text, never the
whole text or a Python object per cell: a file with one line of 10^9 cells is read like any
other. The values read so far are compared with the machine's memory after every block, and
the file is refused (:class:`~bensemble._io_files.InputError`) once they would not fit.

A table whose every cell is an integer literal (``3``, ``-1``) is int64 (a literal beyond
64 bits is refused); any other table is float64. A cell is a decimal literal (``1.5``, ``-2e-3``,
``inf``, ``nan``); Python's other forms (``1_000``, ``0x10``) and empty cells are refused, and
every row must have as many cells as the first. Lines holding only whitespace are skipped.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from bensemble._io_files import InputError, brief, check_fits_memory, describe, open_checked

__all__ = ["read_csv"]

_INT_LITERAL = re.compile(r"[+-]?[0-9]+")
# Python's float() also takes "1_000" and " 0x1p3"-like forms; a table cell may not.
_FLOAT_LITERAL = re.compile(
    r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)", re.IGNORECASE
)
_INT64 = np.iinfo(np.int64)
#: Characters of text read per block.
BLOCK_CHARS = 1 << 20
#: Longest cell accepted (no number is written with more characters).
MAX_CELL_CHARS = 1 << 16


class _Table:
    """Cells converted block by block, with the row structure checked as they come."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.blocks: list[np.ndarray] = []
        self.all_int = True  # every cell so far is an integer literal
        self.too_big: str | None = None  # the first integer literal beyond int64
        self.values = 0
        self.columns: int | None = None
        self.rows = 0

    def end_row(self, cells: int, lineno: int) -> None:
        if self.columns is None:
            self.columns = cells
        elif cells != self.columns:
            raise InputError(
                f"{self.where} line {lineno} has {cells} columns, expected {self.columns} "
                "like the first line"
            )
        self.rows += 1

    def add(self, cells: list[str]) -> None:
        """Convert one block's cells (already stripped) to numbers."""
        if not cells:
            return
        self.values += len(cells)
        # the numbers so far, and their float64 copy when the table is joined at the end
        check_fits_memory(16 * self.values, self.where, f"it holds more than {self.values} values")
        if self.all_int and all(map(_INT_LITERAL.fullmatch, cells)):
            try:
                self.blocks.append(np.fromiter(map(int, cells), np.int64, len(cells)))
                return
            except OverflowError:
                if self.too_big is None:
                    self.too_big = next(c for c in cells if not _INT64.min <= int(c) <= _INT64.max)
        elif not all(map(_FLOAT_LITERAL.fullmatch, cells)):
            bad = next(c for c in cells if not _FLOAT_LITERAL.fullmatch(c))
            raise InputError(
                f"{self.where} must be a header-less table of numbers separated by commas "
                f"(found {bad[:30]!r})"
            )
        else:
            self.all_int = self.all_int and all(map(_INT_LITERAL.fullmatch, cells))
        self.blocks.append(np.fromiter(map(float, cells), np.float64, len(cells)))

    def array(self) -> np.ndarray:
        if not self.rows:
            raise InputError(f"{self.where} is empty")
        if self.all_int and self.too_big is not None:
            raise InputError(
                f"{self.where} holds the integer {self.too_big[:40]}, which does not fit in 64 bits"
            )
        dtype = np.int64 if self.all_int else np.float64
        flat = np.concatenate([b.astype(dtype, copy=False) for b in self.blocks])
        return flat.reshape(self.rows, -1)


def _blocks(text: io.TextIOBase) -> Iterator[str]:
    while block := text.read(BLOCK_CHARS):
        yield block


def read_csv(path: Path, name: str) -> np.ndarray:
    """A header-less comma-separated table: int64 if every cell is an integer, else float64."""
    where = describe(f"`{name}` file", path)
    with open_checked(path, where) as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8-sig", newline=None)
        try:
            return _parse(text, where)
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"{where} could not be read as text ({brief(exc)})") from None
        finally:
            text.detach()


def _parse(text: io.TextIOBase, where: str) -> np.ndarray:
    table = _Table(where)
    pending = ""  # the unfinished cell at the end of the previous block
    row_cells = 0  # cells of the unfinished row so far
    row_blank = True  # the unfinished row holds only whitespace so far
    lineno = 1
    for block in _blocks(text):
        lines = (pending + block).split("\n")
        last = lines.pop()  # unfinished line (the whole block when it holds no newline)
        cells: list[str] = []
        for line in lines:
            if row_blank and not line.strip():
                row_cells, lineno = 0, lineno + 1  # a blank line
                continue
            parts = line.split(",")
            cells.extend(map(str.strip, parts))
            table.end_row(row_cells + len(parts), lineno)
            row_cells, row_blank, lineno = 0, True, lineno + 1
        parts = last.split(",")
        pending = parts.pop()
        if parts:
            row_blank = False
            row_cells += len(parts)
            cells.extend(map(str.strip, parts))
        elif pending.strip():
            row_blank = False
        if len(pending) > MAX_CELL_CHARS:
            raise InputError(f"{where} holds a cell longer than {MAX_CELL_CHARS} characters")
        table.add(cells)
    if not (row_blank and not pending.strip()):
        table.add([pending.strip()])
        table.end_row(row_cells + 1, lineno)
    return table.array()
