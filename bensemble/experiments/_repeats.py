"""Repeats of an experiment and their mean +- sd, for the reproductions (``bensemble reproduce``).

* :func:`repeat_seeds` - the seeds of the repetitions;
* :func:`mean_sd`, :func:`aggregate` - mean and sample sd over repeats, per condition;
* :func:`display_rows` - ``"mean ± sd"`` text for printing; :func:`columns_of` - one column.

Re-exported by :mod:`bensemble.experiments._common`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bensemble._options import check_count, check_seed
from bensemble.reporting.report import format_value

__all__ = [
    "SD_SUFFIX",
    "aggregate",
    "columns_of",
    "display_rows",
    "mean_sd",
    "repeat_seeds",
]

SD_SUFFIX = " sd"


def repeat_seeds(seed: int, repeats: int) -> list[int]:
    """Seeds of ``repeats`` independent repetitions: ``seed, seed + 1, ...``."""
    repeats = check_count(repeats, "repeats", "repeat_seeds")
    seed = check_seed(seed, "seed", "repeat_seeds", span=repeats)
    return [seed + r for r in range(repeats)]


def mean_sd(values: Iterable[float | None]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (divisor ``n - 1``) of the non-missing values.

    ``None`` and NaN are skipped; the sd is ``None`` with fewer than two values and the mean is
    NaN with none.
    """
    kept = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not kept:
        return float("nan"), None
    mean = math.fsum(kept) / len(kept)
    if len(kept) < 2:
        return mean, None
    var = math.fsum((v - mean) ** 2 for v in kept) / (len(kept) - 1)
    return mean, math.sqrt(var)


def aggregate(
    records: Sequence[Mapping[str, Any]], keys: Sequence[str], values: Sequence[str]
) -> list[dict[str, Any]]:
    """Mean (and sd) of ``values`` over the records that share ``keys``, in first-seen order.

    Every other column is taken from the first record of its group. When some group has more
    than one record, each value column ``c`` gets a companion ``"c sd"`` placed right after it.

    Args:
        records: one dict per (condition, repeat).
        keys: columns identifying a condition (e.g. ``["method"]``).
        values: numeric columns to average.

    Returns:
        One row per condition.
    """
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for record in records:
        groups.setdefault(tuple(record[k] for k in keys), []).append(record)
    with_sd = any(len(g) > 1 for g in groups.values())
    rows = []
    for group in groups.values():
        row: dict[str, Any] = {}
        for column, value in group[0].items():
            if column in values:
                mean, sd = mean_sd(r.get(column) for r in group)
                row[column] = mean
                if with_sd:
                    row[column + SD_SUFFIX] = sd
            else:
                row[column] = value
        rows.append(row)
    return rows


def display_rows(rows: Sequence[Mapping[str, Any]], digits: int = 4) -> list[dict[str, Any]]:
    """Rows for printing: each ``c`` with a ``"c sd"`` companion becomes ``"mean ± sd"`` text."""
    shown = []
    for row in rows:
        out: dict[str, Any] = {}
        for column, value in row.items():
            if column.endswith(SD_SUFFIX) and column[: -len(SD_SUFFIX)] in row:
                continue
            sd_key = column + SD_SUFFIX
            if sd_key in row and row[sd_key] is not None:
                out[column] = f"{format_value(value, digits)} ± {format_value(row[sd_key], digits)}"
            else:
                out[column] = value
        shown.append(out)
    return shown


def columns_of(rows: Sequence[Mapping[str, Any]], column: str) -> list[Any]:
    """One column of ``rows`` as a list (missing -> ``None``)."""
    return [row.get(column) for row in rows]
