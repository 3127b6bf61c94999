"""``bensemble reproduce all [--quick] [--data-dir DIR] [--reuse]``: every experiment, one index.

Runs ``toy``, ``size``, ``noise``, ``binning``, ``digits`` and ``fig1``; ``fashion`` only when its
files are installed (``make data``); ``mnist`` and ``cifar10`` only with ``--data-dir DIR`` (DIR, or
its sub-folders ``mnist/`` and ``cifar10/``, holding their files). Then writes ``OUT/index.md``:
every experiment's verdicts (the paper's value or finding beside ours, our 95% interval, the
verdict of :mod:`bensemble.experiments.verdicts`), first all together, then per experiment with
links to its tables and figures. A ``--quick`` run marks every verdict "not comparable".

``--reuse`` runs nothing: the index is built from the reports that earlier ``bensemble reproduce
NAME --out OUT`` runs left in ``OUT`` (:func:`load_report`). Their verdicts are recomputed from
the stored repeats (``<name>_repeats``) with the options the run recorded and today's rule, so
the long runs can be made one at a time and indexed at the end.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from bensemble.experiments._common import (
    DataUnavailableError,
    ExperimentResult,
    Printer,
    RunOptions,
    Stopwatch,
)
from bensemble.experiments.reproduce import EXPERIMENTS, runner
from bensemble.experiments.runner import VERDICT_COLUMNS, ExperimentSpec
from bensemble.experiments.verdicts import rule_text
from bensemble.reporting.report import atomic_write_text, markdown_table

__all__ = ["OFFLINE", "load_report", "run", "spec_of", "verdicts_of"]

#: Experiments that need no files, in running order.
OFFLINE = ("toy", "size", "noise", "binning", "digits", "fig1")


def spec_of(name: str) -> ExperimentSpec:
    """The declared spec of experiment ``name`` (``SPEC`` or ``SPECS[name]`` of its module)."""
    module = importlib.import_module(EXPERIMENTS[name][0])
    return getattr(module, "SPEC", None) or module.SPECS[name]


def verdicts_of(name: str, result: ExperimentResult, options: dict[str, Any]) -> list[dict]:
    """The verdicts of a result, recomputed from its repeats with the options it ran with."""
    records = result.tables.get(f"{name}_repeats")
    if records is None:
        return list(result.tables.get(f"{name}_verdicts", []))
    run_options = RunOptions(
        seed=options.get("seed", 0), repeats=options.get("repeats"),
        quick=bool(options.get("quick")), extra=options.get("extra") or {},
    )  # fmt: skip
    spec = spec_of(name)
    return spec.verdicts(spec.configure(run_options), records)


def _plan(options: RunOptions) -> list[tuple[str, dict[str, Any]]]:
    from bensemble.datasets.vision import load_cifar10, load_idx_dataset
    from bensemble.experiments.vision import FASHION_DIR

    plan: list[tuple[str, dict[str, Any]]] = [(n, {}) for n in OFFLINE]
    if any((Path(FASHION_DIR) / f"train-images-idx3-ubyte{s}").is_file() for s in ("", ".gz")):
        plan.append(("fashion", {"data_dir": FASHION_DIR}))
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


def _summary(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "summary.json").read_text())


def load_report(folder: Path, name: str) -> ExperimentResult:
    """An experiment's result read back from its report folder (``summary.json`` and tables).

    Raises:
        FileNotFoundError: ``folder`` holds no ``summary.json``.
        ValueError: ``summary.json`` is for another experiment, or a table file is malformed.
    """
    summary = _summary(folder)
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
        tables[path.stem] = rows
    elapsed = float(summary.get("elapsed_s", float("nan")))
    return ExperimentResult(name, tables, files, elapsed, "")


def _options_of(result: ExperimentResult) -> dict[str, Any]:
    path = next((p for p in result.files if p.name == "summary.json"), None)
    if path is None or not path.is_file():
        return {}
    return json.loads(path.read_text()).get("options") or {}


def _options_line(options: dict[str, Any]) -> str:
    extra = ", ".join(f"{k}={v}" for k, v in (options.get("extra") or {}).items())
    return (
        f" Options: seed {options.get('seed')}, repeats {options.get('repeats') or 'default'}"
        f"{', quick' if options.get('quick') else ''}{', ' + extra if extra else ''}."
    )


def _index(results: list[tuple[str, ExperimentResult | str]], out: Path) -> str:
    lines = ["# bensemble reproduce all: index", "", rule_text(), ""]
    judged = {
        name: verdicts_of(name, result, _options_of(result))
        for name, result in results
        if isinstance(result, ExperimentResult)
    }
    every = [{"experiment": name, **row} for name, rows in judged.items() for row in rows]
    if every:
        cols = ["experiment", *VERDICT_COLUMNS]
        lines += ["## Every verdict", "", markdown_table(every, cols, 4).rstrip(), ""]
    for name, result in results:
        lines += [f"## {name}", ""]
        if isinstance(result, str):
            lines += [f"Skipped: {result}", ""]
            continue
        lines.append(f"{result.elapsed:.1f} s.{_options_line(_options_of(result))} Files:")
        for path in result.files:
            if path.suffix in (".md", ".png"):
                rel = path.resolve().relative_to(out.resolve()).as_posix()
                lines.append(f"- [{rel}]({rel})")
        lines.append("")
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
    """Run every available experiment into ``options.out`` and write ``index.md`` there."""
    watch, printer = Stopwatch(), Printer()
    out = Path(options.out)
    plan = _plan(options)
    reuse = bool(options.extra.get("reuse"))
    verb = "indexing the reports of" if reuse else "running"
    printer(f"all: {verb} {', '.join(n for n, _ in plan)}{' (quick)' if options.quick else ''}")
    results: list[tuple[str, ExperimentResult | str]] = _reused(options, plan) if reuse else []
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
        f"{name}_verdicts": verdicts_of(name, r, _options_of(r))
        for name, r in results
        if isinstance(r, ExperimentResult)
    }
    return ExperimentResult("all", tables, [index], watch.elapsed, printer.text)
