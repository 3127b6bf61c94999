"""Text forms of report values: table cells, aligned and Markdown tables, strict JSON.

Used by :class:`~bensemble.reporting.report.Report` (which re-exports the public functions from
:mod:`bensemble.reporting.report`) and by :mod:`bensemble.reporting.html`. Text cells and column
names of the aligned and Markdown tables have their control and bidirectional characters written
as visible escapes (:func:`bensemble._terminal.printable_name`), so a file name in a cell cannot
recolour the terminal or reorder the line; CSV and JSON keep the values as they are.

Example:
    >>> print(markdown_table([{"method": "ensemble", "nll": 0.25, "n": 400}]))
    | method | nll | n |
    |:---|---:|---:|
    | ensemble | 0.2500 | 400 |
    <BLANKLINE>
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bensemble._terminal import printable_name
from bensemble.reporting._checks import check_columns, check_digits, check_rows

__all__ = [
    "format_table",
    "format_value",
    "json_text",
    "markdown_table",
    "table_columns",
    "to_json",
]


def _plain(value: Any) -> Any:
    """numpy / torch scalars -> Python scalars; everything else unchanged."""
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 0) == 0:
        try:
            return value.item()
        except (TypeError, ValueError):  # pragma: no cover - exotic scalar types
            return value
    return value


def format_value(value: Any, digits: int = 4) -> str:
    """One table cell: floats to ``digits`` decimals, ``None``/NaN as ``-``, others as ``str``.

    Example:
        >>> format_value(0.123456), format_value(float("nan")), format_value(float("-inf"))
        ('0.1235', '-', '-inf')
    """
    check_digits(digits, "format_value")
    value = _plain(value)
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return f"{value:.{digits}f}"
    return str(value)


def table_columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The union of the rows' keys, in first-seen order.

    Example:
        >>> table_columns([{"method": "a", "ece": 0.1}, {"method": "b", "nll": 0.3}])
        ['method', 'ece', 'nll']
    """
    columns: dict[str, None] = {}
    for row in check_rows(rows, "table_columns"):
        for key in row:
            columns.setdefault(str(key), None)
    return list(columns)


def _is_number(value: Any) -> bool:
    value = _plain(value)
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _cells(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str] | None,
    digits: int,
    fn: str = "format_table",
) -> tuple[list[str], list[list[str]], list[bool]]:
    rows, columns = check_rows(rows, fn), check_columns(columns, fn)
    check_digits(digits, fn)
    cols = columns if columns is not None else table_columns(rows)
    body = [[printable_name(format_value(row.get(c), digits)) for c in cols] for row in rows]
    numeric = [
        all(_is_number(row.get(c)) or row.get(c) is None for row in rows)
        and any(_is_number(row.get(c)) for row in rows)
        for c in cols
    ]
    return [printable_name(str(c)) for c in cols], body, numeric


def format_table(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None, digits: int = 4
) -> str:
    """Rows of dicts as an aligned plain-text table (numbers right-aligned, text left-aligned).

    Args:
        rows: One dict per row; a missing key is shown as ``-``.
        columns: Column order; default is :func:`table_columns`.
        digits: Decimals for floats.
    """
    cols, body, numeric = _cells(rows, columns, digits, "format_table")
    if not body:
        return "(no rows)"
    widths = [max(len(c), *(len(r[j]) for r in body)) for j, c in enumerate(cols)]

    def line(cells: Iterable[str]) -> str:
        parts = [
            cell.rjust(w) if num else cell.ljust(w) for cell, w, num in zip(cells, widths, numeric)
        ]
        return "  ".join(parts).rstrip()

    out = [line(cols), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in body]
    return "\n".join(out)


def markdown_table(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None, digits: int = 4
) -> str:
    """Rows of dicts as a GitHub-flavoured Markdown table (numeric columns right-aligned)."""
    cols, body, numeric = _cells(rows, columns, digits, "markdown_table")
    if not body:
        return "_(no rows)_\n"

    def esc(cell: str) -> str:
        return cell.replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(esc(c) for c in cols) + " |"]
    out.append("|" + "|".join("---:" if num else ":---" for num in numeric) + "|")
    out += ["| " + " | ".join(esc(c) for c in r) + " |" for r in body]
    return "\n".join(out) + "\n"


_JSON_TYPES = "dicts, lists, tuples, str, numbers, bools, None, paths and numpy / torch arrays"


def _json_safe(value: Any, where: str, inside: frozenset[int] = frozenset()) -> Any:
    """Recursively make ``value`` strict-JSON serialisable (non-finite floats -> ``None``);
    ``inside``: the containers on the way here (one of them again is a circular reference)."""
    value = _plain(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (Mapping, list, tuple)):
        if id(value) in inside:
            raise ValueError(f"{where} must not contain itself (got a circular reference)")
        inside = inside | {id(value)}
        if isinstance(value, Mapping):
            return {str(k): _json_safe(v, where, inside) for k, v in value.items()}
        return [_json_safe(v, where, inside) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if hasattr(value, "tolist"):  # numpy arrays / tensors
        return _json_safe(value.tolist(), where, inside)
    if value is not None and not isinstance(value, (str, int, float)):
        raise ValueError(f"{where} must hold only {_JSON_TYPES} (got a {type(value).__name__})")
    return value


def json_text(value: Any, indent: int | None, fn: str, name: str) -> str:
    """:func:`to_json` with the message naming ``fn`` and the argument ``name``."""
    if indent is not None and (isinstance(indent, bool) or not isinstance(indent, int)):
        raise ValueError(f"{fn}: `indent` must be an int or None (got {indent!r})")
    return json.dumps(_json_safe(value, f"{fn}: `{name}`"), indent=indent, allow_nan=False)


def to_json(value: Any, indent: int | None = 2) -> str:
    """Strict JSON text (no NaN/Infinity tokens) for nested dicts/lists of scalars.

    Non-finite floats become ``null``; numpy / torch scalars and arrays their values; paths
    their text. Anything else (a set, an arbitrary object, a circular reference) is refused
    with a ``ValueError`` naming ``value``.

    Example:
        >>> to_json({"ece": float("nan"), "n": 3}, indent=None)
        '{"ece": null, "n": 3}'
    """
    return json_text(value, indent, "to_json", "value")
