"""``bensemble reproduce all [--quick] [--data-dir DIR]``: every offline experiment and one index.

Runs ``toy``, ``size``, ``noise``, ``binning``, ``digits`` and ``fig1``; ``fashion`` only when its
files are installed (``make data``); ``mnist`` and ``cifar10`` only with ``--data-dir DIR`` (DIR, or
its sub-folders ``mnist/`` and ``cifar10/``, holding their files). Then writes ``OUT/index.md``:
per experiment, links to every table and figure, and a verdict table - the paper's value beside
ours and a verdict computed with the tolerances below (:func:`verdict`).

Verdicts:

* **holds**: a number the paper states, and ours within ``max(ABS_TOL, REL_TOL * |paper|)`` of it
  (``ABS_TOL`` = 0.02: the paper prints two decimals and its one-vs-all values vary by about that
  much across tasks; ``REL_TOL`` = 0.3, for ratios such as the noise experiment's "about 10x");
* **differs**: a number the paper states, and ours outside that tolerance;
* **not comparable**: the paper states no number (a plot only, ``n/a``, text), or the number is
  from another setting (``digits`` and ``fashion`` print MNIST's table 1 for scale).

For the one-vs-all runs a ranking line compares the order of the nine methods' mean EECE with the
paper's (Spearman's rho; **holds** when rho >= ``RANK_RHO`` = 0.6), which is meaningful across data
sets where the values are not.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from bensemble.app.report import atomic_write_text, markdown_table
from bensemble.experiments._common import ExperimentResult, Printer, RunOptions, Stopwatch
from bensemble.experiments.reproduce import DataUnavailableError, runner

__all__ = ["ABS_TOL", "RANK_RHO", "REL_TOL", "OFFLINE", "run", "verdict", "verdict_rows"]

ABS_TOL = 0.02
REL_TOL = 0.3
RANK_RHO = 0.6
#: Experiments that need no files, in running order.
OFFLINE = ("toy", "size", "noise", "binning", "digits", "fig1")
#: One-vs-all runs whose paper column is another data set's (MNIST's table 1).
STAND_INS = ("digits", "fashion")
ONE_VS_ALL = ("digits", "fashion", "mnist", "cifar10")


def _number(value: Any) -> Any:
    """``"~10"`` / ``"about 10"`` -> 10.0 (the paper's approximate numbers); else unchanged."""
    if isinstance(value, str):
        text = value.strip().removeprefix("~").removeprefix("about").strip()
        try:
            return float(text)
        except ValueError:
            return value
    return value


def verdict(ours: Any, paper: Any, *, comparable: bool = True) -> str:
    """``"holds"`` / ``"differs"`` / ``"not comparable"`` for one value (see the module doc).

    The paper's value may be approximate text (``"~10"``), read as its number.
    """
    paper = _number(paper)
    numeric = all(
        isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)
        for v in (ours, paper)
    )
    if not comparable or not numeric:
        return "not comparable"
    return "holds" if abs(ours - paper) <= max(ABS_TOL, REL_TOL * abs(paper)) else "differs"


def _spearman(a: Sequence[float], b: Sequence[float]) -> float:
    def ranks(v: Sequence[float]) -> list[float]:
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2.0
            i = j + 1
        return r

    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    den = math.sqrt(sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb))
    return cov / den if den else float("nan")


def _label(row: Mapping[str, Any]) -> str:
    first = next(iter(row), None)
    return "-" if first is None else f"{first} = {row[first]}"


def _match(row: Mapping[str, Any], target: str) -> str | None:
    """The column of ``row`` that ``"paper <target>"`` is compared with."""
    if target in row:
        return target
    lower = {k.lower(): k for k in row if not k.startswith("paper")}
    if target.lower() in lower:
        return lower[target.lower()]
    return next((k for k in row if k.startswith(target) and not k.endswith(" sd")), None)


_FINDING_COLUMNS = ("row", "quantity", "paper", "ours", "verdict")


def verdict_rows(name: str, tables: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[dict]:
    """The verdict table of one experiment's result tables.

    Every column ``"paper X"`` is paired with ``X`` (exact, then case-insensitive, then the
    first column that starts with ``X``) in the same row; a row that carries its own
    ``verdict`` (``row``, ``quantity``, ``paper``, ``ours``, ``verdict``) is copied.
    One-vs-all runs are compared on their summary (means over tasks), plus the EECE ranking.
    """
    comparable = name not in STAND_INS
    out = []
    chosen = {"summary": tables["summary"]} if "summary" in tables else tables
    for table, rows in chosen.items():
        for row in rows:
            if "verdict" in row:  # a finding the experiment judged itself
                out.append({"table": table, **{k: row.get(k) for k in _FINDING_COLUMNS}})
                continue
            for key, paper in row.items():
                if not key.startswith("paper ") or key == "paper finding":
                    continue
                target = key[len("paper ") :]
                match = _match(row, target)
                ours = row.get(match) if match else None
                out.append({
                    "table": table, "row": _label(row), "quantity": match or target,
                    "paper": paper, "ours": ours,
                    "verdict": verdict(ours, paper, comparable=comparable),
                })  # fmt: skip
    if name in ONE_VS_ALL and "summary" in tables:
        summary = tables["summary"]
        rho = _spearman([r["eece"] for r in summary], [r["paper eece"] for r in summary])
        out.append({
            "table": "summary", "row": "ranking of the nine methods",
            "quantity": "Spearman rho of mean EECE vs the paper's", "paper": 1.0, "ours": rho,
            "verdict": "holds" if rho >= RANK_RHO else "differs",
        })  # fmt: skip
    return out


def _plan(options: RunOptions) -> list[tuple[str, dict[str, Any]]]:
    from bensemble.datasets.vision import load_cifar10, load_idx_dataset
    from bensemble.experiments.fashion import DATA_DIR

    plan: list[tuple[str, dict[str, Any]]] = [(n, {}) for n in OFFLINE]
    if any((Path(DATA_DIR) / f"train-images-idx3-ubyte{s}").is_file() for s in ("", ".gz")):
        plan.append(("fashion", {"data_dir": DATA_DIR}))
    data_dir = options.extra.get("data_dir")
    if data_dir:
        for name, loader, sub in (("mnist", load_idx_dataset, "mnist"),
                                  ("cifar10", load_cifar10, "cifar10")):  # fmt: skip
            for folder in (Path(data_dir), Path(data_dir) / sub):
                try:
                    loader(folder)
                except (FileNotFoundError, ValueError):
                    continue
                plan.append((name, {"data_dir": str(folder)}))
                break
    return plan


def _index(results: list[tuple[str, ExperimentResult | str]], out: Path) -> str:
    lines = [
        "# bensemble reproduce all: index",
        "",
        f"Verdicts: **holds** when ours is within max({ABS_TOL}, {REL_TOL} x |paper|) of a "
        "number the paper states; **differs** otherwise; **not comparable** when the paper "
        "gives no number or the number belongs to another data set (digits and Fashion-MNIST "
        f"are compared with MNIST's table 1). One-vs-all rankings hold at Spearman rho >= "
        f"{RANK_RHO}.",
        "",
    ]
    for name, result in results:
        lines += [f"## {name}", ""]
        if isinstance(result, str):
            lines += [f"Skipped: {result}", ""]
            continue
        lines.append(f"{result.elapsed:.1f} s. Files:")
        for path in result.files:
            if path.suffix in (".md", ".png"):
                rel = path.resolve().relative_to(out.resolve()).as_posix()
                lines.append(f"- [{rel}]({rel})")
        rows = verdict_rows(name, result.tables)
        lines.append("")
        if rows:
            cols = ["table", "row", "quantity", "paper", "ours", "verdict"]
            lines += [markdown_table(rows, cols, 4).rstrip(), ""]
    return "\n".join(lines) + "\n"


def run(options: RunOptions) -> ExperimentResult:
    """Run every available experiment into ``options.out`` and write ``index.md`` there."""
    watch, printer = Stopwatch(), Printer()
    out = Path(options.out)
    plan = _plan(options)
    printer(f"all: running {', '.join(n for n, _ in plan)}{' (quick)' if options.quick else ''}")
    results: list[tuple[str, ExperimentResult | str]] = []
    for name, extra in plan:
        sub = replace(options, extra={**options.extra, **extra})
        try:
            results.append((name, runner(name)(sub)))
        except DataUnavailableError as err:
            results.append((name, str(err)))
    if not any(n == "fashion" for n, _ in plan):
        results.append(("fashion", "Fashion-MNIST is not installed (`make data`)"))
    if not options.extra.get("data_dir"):
        results.append(("mnist, cifar10", "not available offline: pass --data-dir DIR"))
    index = out / "index.md"
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(index, _index(results, out))
    printer(f"all: {watch.elapsed:.1f} s elapsed; index written to {index}")
    tables = {
        f"{name}_verdicts": verdict_rows(name, r.tables)
        for name, r in results
        if isinstance(r, ExperimentResult)
    }
    return ExperimentResult("all", tables, [index], watch.elapsed, printer.text)
