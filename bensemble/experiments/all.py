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

``--reuse`` runs nothing: the index is built from the reports that earlier
``bensemble reproduce NAME --out OUT`` runs left in ``OUT`` (:func:`load_report`), so the long runs
can be made one at a time (or on two cores at once) and indexed at the end.

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

from bensemble.experiments._common import ExperimentResult, Printer, RunOptions, Stopwatch
from bensemble.experiments.findings import RANK_RHO, finding_rows, spearman
from bensemble.experiments.reproduce import DataUnavailableError, runner
from bensemble.reporting.report import atomic_write_text, markdown_table

__all__ = [
    "ABS_TOL",
    "OFFLINE",
    "RANK_RHO",
    "REL_TOL",
    "load_report",
    "run",
    "verdict",
    "verdict_rows",
]

ABS_TOL = 0.02
REL_TOL = 0.3
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


def _copied(table: str, row: Mapping[str, Any]) -> dict[str, Any]:
    """A row that carries its own verdict; toy's ``finding`` rows name the finding."""
    out = {"table": table, **{k: row.get(k) for k in _FINDING_COLUMNS}, "finding": True}
    if out["row"] is None and "finding" in row:
        out.update(row=row["finding"], quantity="finding", paper="yes (text)")
    return out


def verdict_rows(name: str, tables: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[dict]:
    """The verdict table of one experiment's result tables.

    Every column ``"paper X"`` is paired with ``X`` (exact, then case-insensitive, then the
    first column that starts with ``X``) in the same row; a row that carries its own
    ``verdict`` (``row``, ``quantity``, ``paper``, ``ours``, ``verdict``, or toy's ``finding``,
    ``ours``, ``verdict``) is copied. One-vs-all runs are compared on their summary (means over
    tasks) and their Likelihood variants, plus the EECE ranking (Spearman's rho) and the
    orderings of :mod:`bensemble.experiments.findings`, which also measures the size and noise
    trends and the binning minimum.
    """
    comparable = name not in STAND_INS
    out = []
    summary = tables.get("summary") or tables.get(f"{name}_summary")
    if name in ONE_VS_ALL and summary:
        chosen = {"summary": summary}
        if tables.get("likelihood_variants"):
            chosen["likelihood_variants"] = tables["likelihood_variants"]
    else:
        chosen = dict(tables)
    for table, rows in chosen.items():
        for row in rows:
            if "verdict" in row:  # a finding the experiment judged itself
                out.append(_copied(table, row))
                continue
            label = (
                f"Likelihood supports={row.get('supports')}, eu={row.get('eu')}"
                if table == "likelihood_variants"
                else _label(row)
            )
            for key, paper in row.items():
                if not key.startswith("paper ") or key == "paper finding":
                    continue
                target = key[len("paper ") :]
                match = _match(row, target)
                ours = row.get(match) if match else None
                out.append({
                    "table": table, "row": label, "quantity": match or target,
                    "paper": paper, "ours": ours,
                    "verdict": verdict(ours, paper, comparable=comparable),
                })  # fmt: skip
    if name in ONE_VS_ALL and summary:
        rho = spearman([r["eece"] for r in summary], [r["paper eece"] for r in summary])
        out.append({
            "table": "summary", "row": "ranking of the nine methods",
            "quantity": "Spearman rho of mean EECE vs the paper's", "paper": 1.0, "ours": rho,
            "verdict": "holds" if rho >= RANK_RHO else "differs", "finding": True,
        })  # fmt: skip
    table = "summary" if name in ONE_VS_ALL else name
    out += [{"table": table, **row, "finding": True} for row in finding_rows(name, tables)]
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


def load_report(folder: Path, name: str) -> ExperimentResult:
    """An experiment's result read back from its report folder (``summary.json`` and tables).

    Table names are the JSON files' stems (a one-vs-all run's ``<name>_summary`` is read as its
    ``summary``); the elapsed time and files are the ones ``summary.json`` records.

    Raises:
        FileNotFoundError: ``folder`` holds no ``summary.json``.
        ValueError: ``summary.json`` is for another experiment, or a table file is malformed.
    """
    import json

    summary = json.loads((folder / "summary.json").read_text())
    if summary.get("experiment") != name:
        raise ValueError(
            f"reproduce all: {folder / 'summary.json'} is a report of "
            f"{summary.get('experiment')!r}, not {name!r}"
        )
    tables: dict[str, list[dict[str, Any]]] = {}
    files = [folder / f for f in summary.get("files", [])]
    for path in files:
        if path.suffix != ".json" or path.name == "summary.json":
            continue
        rows = json.loads(path.read_text()).get("rows")
        if not isinstance(rows, list):
            raise ValueError(f"reproduce all: {path} holds no table rows")
        key = path.stem.removeprefix(f"{name}_") if name in ONE_VS_ALL else path.stem
        tables[key] = rows
    elapsed = float(summary.get("elapsed_s", float("nan")))
    return ExperimentResult(name, tables, files, elapsed, "")


def _options_line(result: ExperimentResult) -> str:
    import json

    path = next((p for p in result.files if p.name == "summary.json"), None)
    if path is None or not path.is_file():
        return ""
    options = json.loads(path.read_text()).get("options") or {}
    extra = ", ".join(f"{k}={v}" for k, v in (options.get("extra") or {}).items())
    return (
        f" Options: seed {options.get('seed')}, repeats {options.get('repeats') or 'default'}"
        f"{', quick' if options.get('quick') else ''}{', ' + extra if extra else ''}."
    )


_COLUMNS = ["table", "row", "quantity", "paper", "ours", "verdict"]


def _index(results: list[tuple[str, ExperimentResult | str]], out: Path) -> str:
    lines = [
        "# bensemble reproduce all: index",
        "",
        f"Verdicts: **holds** when ours is within max({ABS_TOL}, {REL_TOL} x |paper|) of a "
        "number the paper states; **differs** otherwise; **not comparable** when the paper "
        "gives no number or the number belongs to another data set (digits and Fashion-MNIST "
        f"are compared with MNIST's table 1). One-vs-all rankings hold at Spearman rho >= "
        f"{RANK_RHO}; the orderings and trends are measured by the rules of "
        "`bensemble.experiments.findings`.",
        "",
    ]
    findings = [
        {"experiment": name, **row}
        for name, result in results
        if isinstance(result, ExperimentResult)
        for row in verdict_rows(name, result.tables)
        if row.get("finding")
    ]
    if findings:
        cols = ["experiment", "row", "paper", "ours", "verdict"]
        lines += ["## The paper's findings", "", markdown_table(findings, cols, 4).rstrip(), ""]
    for name, result in results:
        lines += [f"## {name}", ""]
        if isinstance(result, str):
            lines += [f"Skipped: {result}", ""]
            continue
        lines.append(f"{result.elapsed:.1f} s.{_options_line(result)} Files:")
        for path in result.files:
            if path.suffix in (".md", ".png"):
                rel = path.resolve().relative_to(out.resolve()).as_posix()
                lines.append(f"- [{rel}]({rel})")
        rows = verdict_rows(name, result.tables)
        lines.append("")
        if rows:
            lines += [markdown_table(rows, _COLUMNS, 4).rstrip(), ""]
    return "\n".join(lines) + "\n"


def _reused(options: RunOptions, plan: list[tuple[str, dict[str, Any]]]) -> list[tuple]:
    """``--reuse``: every planned experiment's report already in ``options.out``."""
    results: list[tuple[str, ExperimentResult | str]] = []
    for name, _ in plan:
        folder = Path(options.out) / name
        try:
            results.append((name, load_report(folder, name)))
        except FileNotFoundError:
            results.append((name, f"no report in {folder} (run `bensemble reproduce {name}`)"))
    return results


def run(options: RunOptions) -> ExperimentResult:
    """Run every available experiment into ``options.out`` and write ``index.md`` there.

    With ``options.extra["reuse"]`` nothing runs: the index is built from the reports that
    earlier ``bensemble reproduce NAME --out OUT`` runs left in ``OUT`` (the same tables, so
    the same verdicts, as a full ``reproduce all``).
    """
    watch, printer = Stopwatch(), Printer()
    out = Path(options.out)
    plan = _plan(options)
    reuse = bool(options.extra.get("reuse"))
    verb = "indexing the reports of" if reuse else "running"
    printer(f"all: {verb} {', '.join(n for n, _ in plan)}{' (quick)' if options.quick else ''}")
    results: list[tuple[str, ExperimentResult | str]] = []
    if reuse:
        results = _reused(options, plan)
    for name, extra in [] if reuse else plan:
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
