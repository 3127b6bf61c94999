"""Argument checks of the report kit: tables, numbers of decimals, page parts, file writers.

Every refusal is a ``ValueError`` of the library's shape, "``fn``: ``argument`` must
<expectation> (got <what came>)", raised before anything is written or rendered, instead of a
``TypeError`` / ``AttributeError`` from deep inside the formatting.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "MAX_DIGITS",
    "check_columns",
    "check_digits",
    "check_items",
    "check_mapping",
    "check_path",
    "check_rows",
]

#: Most decimals a table cell may ask for (a float64 carries about 17 significant digits; the
#: bound also keeps a cell from allocating what a count merely claims).
MAX_DIGITS = 20


def check_digits(digits: Any, fn: str, name: str = "digits") -> int:
    """An int in ``[0, MAX_DIGITS]``."""
    if isinstance(digits, bool) or not isinstance(digits, int) or not 0 <= digits <= MAX_DIGITS:
        raise ValueError(f"{fn}: `{name}` must be an int in [0, {MAX_DIGITS}] (got {digits!r})")
    return digits


def check_items(
    value: Any, name: str, fn: str, kind: type | None = None, what: str = "items"
) -> list[Any]:
    """A list of the items of a sequence (not a str, bytes or mapping), each a ``kind``
    (``what`` describes the items in the message)."""
    what = f"{kind.__name__} objects" if kind is not None else what
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise ValueError(
            f"{fn}: `{name}` must be a sequence of {what} (got {type(value).__name__}; wrap a "
            "single one in a list)"
        )
    items = list(value)
    if kind is not None:
        bad = [type(item).__name__ for item in items if not isinstance(item, kind)]
        if bad:
            raise ValueError(f"{fn}: `{name}` must hold only {what} (got {bad[0]})")
    return items


def check_rows(rows: Any, fn: str, name: str = "rows") -> list[Mapping[str, Any]]:
    """A list of rows, each a mapping column -> value."""
    what = "mappings column -> value"
    items = check_items(rows, name, fn, what=what)
    bad = [type(row).__name__ for row in items if not isinstance(row, Mapping)]
    if bad:
        raise ValueError(f"{fn}: `{name}` must be a sequence of {what} (got a row of {bad[0]})")
    return items


def check_columns(columns: Any, fn: str) -> list[Any] | None:
    """``None`` (every column, in first-seen order) or a sequence of column names."""
    return None if columns is None else check_items(columns, "columns", fn, what="column names")


def check_mapping(value: Any, name: str, fn: str) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{fn}: `{name}` must be a mapping (got {type(value).__name__})")
    return value


def check_path(path: Any, name: str, fn: str) -> str:
    """A file system path given as text (``str`` or ``os.PathLike``), not empty."""
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"{fn}: `{name}` must be a path (got {type(path).__name__})")
    text = os.fspath(path)
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{fn}: `{name}` must name a file or folder as text (got {path!r})")
    return text
