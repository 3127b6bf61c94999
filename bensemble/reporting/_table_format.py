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

__all__ = ["format_table", "format_value", "markdown_table", "table_columns", "to_json"]


def _plain(value: Any) -> Any:
    """numpy / torch scalars -> Python scalars; everything else unchanged."""
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 0) == 0:
        try:
            return value.item()
        except (TypeError, ValueError):  # pragma: no cover - exotic scalar types
            return value
    return value


def format_value(value: Any, digits: int = 4) -> str:
    """One table cell: floats to ``digits`` decimals, ``None``/NaN as ``-``, others as ``str``."""
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
    """The union of the rows' keys, in first-seen order."""
    columns: dict[str, None] = {}
    for row in rows:
        for key in row:
            columns.setdefault(str(key), None)
    return list(columns)


def _is_number(value: Any) -> bool:
    value = _plain(value)
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _cells(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None, digits: int
) -> tuple[list[str], list[list[str]], list[bool]]:
    cols = list(columns) if columns is not None else table_columns(rows)
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
    if not rows:
        return "(no rows)"
    cols, body, numeric = _cells(rows, columns, digits)
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
    if not rows:
        return "_(no rows)_\n"
    cols, body, numeric = _cells(rows, columns, digits)

    def esc(cell: str) -> str:
        return cell.replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(esc(c) for c in cols) + " |"]
    out.append("|" + "|".join("---:" if num else ":---" for num in numeric) + "|")
    out += ["| " + " | ".join(esc(c) for c in r) + " |" for r in body]
    return "\n".join(out) + "\n"


def _json_safe(value: Any) -> Any:
    """Recursively make ``value`` strict-JSON serialisable (non-finite floats -> ``None``)."""
    value = _plain(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if hasattr(value, "tolist"):  # numpy arrays / tensors
        return _json_safe(value.tolist())
    return value


def to_json(value: Any, indent: int | None = 2) -> str:
    """Strict JSON text (no NaN/Infinity tokens) for nested dicts/lists of scalars."""
    return json.dumps(_json_safe(value), indent=indent, allow_nan=False)
