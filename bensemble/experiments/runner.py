"""One runner for every reproduction: an experiment is declared as an :class:`ExperimentSpec`.

A spec says what an experiment is - its settings (``configure``: the options checked into a
config before anything trains), the conditions it sweeps, how one condition is measured on one
repeat, its tables, its verdicts against the paper and its figures - and :func:`run_spec` runs
any of them the same way:

1. ``config = spec.configure(options)`` (every option checked first);
2. for every repeat seed (``seed, seed + 1, ...``): ``context = spec.prepare(config, seed)``
   (data, an auto-encoder, ...) and, for every condition, ``spec.measure(config, context,
   condition, seed)`` -> records (one dict per measured row), under one intra-op thread with a
   progress bar;
3. every :class:`Table` of the spec built from the records, printed and written with the
   scoring convention in its caption; the records themselves (``<name>_repeats``), and the
   verdicts (``<name>_verdicts``, :mod:`bensemble.experiments.verdicts`) computed from them by
   ``spec.verdicts(config, records)`` - a pure function, so ``reproduce all --reuse`` recomputes
   the verdicts of a stored report with today's rule;
4. the figures, then ``summary.json`` and the folder swap (:func:`~bensemble.experiments.
   _common.finish`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bensemble.experiments._common import (
    ExperimentResult,
    Printer,
    RunOptions,
    Stopwatch,
    aggregate,
    finish,
    progress_bar,
    repeat_seeds,
    single_thread,
)
from bensemble.experiments.illustrative import Convention
from bensemble.experiments.verdicts import rule_text

__all__ = [
    "VERDICT_COLUMNS",
    "ExperimentConfig",
    "ExperimentSpec",
    "Table",
    "by",
    "run_spec",
    "verdict_row",
]

Records = Sequence[Mapping[str, Any]]
#: Columns of every verdict table.
VERDICT_COLUMNS = ("row", "quantity", "paper", "ours", "95% interval", "verdict", "note")


@dataclass(frozen=True)
class ExperimentConfig:
    """What every experiment's config holds (each experiment adds its own fields).

    Attributes:
        quick: tiny settings (its verdicts are never comparable).
        convention: how illustrative methods are scored (``--trust``, ``--clip``).
    """

    quick: bool
    convention: Convention

    def header(self) -> str:
        """The settings in words (printed first); each experiment's config says its own."""
        return type(self).__name__


@dataclass(frozen=True)
class Table:
    """A table of an experiment's report, built from the records.

    Attributes:
        name: file stem in the report folder.
        title: its caption (the runner adds the experiment's name and convention).
        build: ``(records, config) -> rows``.
        digits: significant digits when printed.
    """

    name: str
    title: str
    build: Callable[[Records, Any], list[dict[str, Any]]]
    digits: int = 4


def by(
    keys: Sequence[str],
    values: Sequence[str],
    *,
    where: Callable[[Mapping[str, Any]], bool] | None = None,
    paper: Callable[[dict[str, Any], Any], Mapping[str, Any]] | None = None,
) -> Callable[[Records, Any], list[dict[str, Any]]]:
    """A :attr:`Table.build`: mean (and sd) of ``values`` over the repeats sharing ``keys``.

    Args:
        keys: columns naming a condition.
        values: the averaged columns (each gets its ``" sd"`` companion).
        where: keep only the records it accepts.
        paper: ``(row, config) -> columns`` added to each row (the paper's values).
    """

    def build(records: Records, config: Any) -> list[dict[str, Any]]:
        kept = [r for r in records if where is None or where(r)]
        columns = [*keys, *values]
        rows = aggregate([{c: r.get(c) for c in columns} for r in kept], keys, values)
        if paper is not None:
            rows = [{**row, **paper(row, config)} for row in rows]
        return rows

    return build


def verdict_row(row: str, quantity: str, paper: Any, verdict: Any) -> dict[str, Any]:
    """One row of a verdict table (:data:`VERDICT_COLUMNS`)."""
    text = paper.text if hasattr(paper, "text") else paper
    return {"row": row, "quantity": quantity, "paper": text, **verdict.fields()}


@dataclass(frozen=True)
class ExperimentSpec:
    """An experiment of the paper, as data (see the module docstring).

    Attributes:
        name: the ``bensemble reproduce`` name (and report folder).
        description: one line for the command's help.
        configure: ``options -> config`` (an :class:`ExperimentConfig`, which describes its
            settings with ``header()``), checking every option.
        conditions: ``config -> conditions`` measured in every repeat.
        measure: ``(config, context, condition, seed) -> records``; a record's ``note`` (text
            or ``None``) is printed once under the tables and not stored.
        prepare: ``(config, seed) -> context`` shared by a repeat's conditions.
        tables: the report's tables.
        verdicts: ``(config, records) -> verdict rows`` (:func:`verdict_row`).
        figures: ``(report, tables, config, first repeat's context)``, drawing the figures.
        notes: ``config -> lines`` printed under the tables.
        default_repeats: repeats when ``--repeats`` is not given (1 with ``--quick``).
        illustrative: whether it scores illustrative methods (the convention applies).
    """

    name: str
    description: str
    configure: Callable[[RunOptions], Any]
    conditions: Callable[[Any], Sequence[Any]]
    measure: Callable[[Any, Any, Any, int], list[dict[str, Any]]]
    prepare: Callable[[Any, int], Any] = lambda config, seed: None
    tables: tuple[Table, ...] = ()
    verdicts: Callable[[Any, Records], list[dict[str, Any]]] = lambda config, records: []
    figures: Callable[[Any, dict, Any, Any], None] | None = None
    notes: Callable[[Any], Sequence[str]] = lambda config: ()
    default_repeats: int = 1
    illustrative: bool = False

    def caption(self, config: Any) -> str:
        """The scoring convention, as every caption of this experiment states it."""
        if self.illustrative:
            return config.convention.caption
        return "no illustrative method: the convention does not apply"


def _measure_all(spec: ExperimentSpec, config: Any, options: RunOptions, repeats: int):
    """Every repeat and condition: the records (with ``seed``), notes, first context."""
    records: list[dict[str, Any]] = []
    notes: list[str] = []
    conditions = list(spec.conditions(config))
    jobs = [(s, c) for s in repeat_seeds(options.seed, repeats) for c in conditions]
    first = context = None
    current = None
    with single_thread():
        for seed, condition in progress_bar(jobs, desc=spec.name, enabled=options.progress):
            if seed != current:
                current, context = seed, spec.prepare(config, seed)
                first = context if first is None else first
            for record in spec.measure(config, context, condition, seed):
                note = record.pop("note", None)
                if note and note not in notes:
                    notes.append(note)
                records.append({"seed": seed, **record})
    return records, notes, first


def run_spec(spec: ExperimentSpec, options: RunOptions) -> ExperimentResult:
    """Run ``spec`` with ``options``: measure, tabulate, judge, draw, write (module doc)."""
    config = spec.configure(options)
    watch, printer = Stopwatch(), Printer()
    repeats = options.n_repeats(spec.default_repeats)
    report = options.report(spec.name)
    caption = spec.caption(config)
    printer(
        f"{spec.name}: {config.header()}; {repeats} repeat(s), seed {options.seed}"
        f"{' (quick settings)' if config.quick else ''}; {caption}"
    )
    records, notes, first = _measure_all(spec, config, options, repeats)
    tables: dict[str, list[dict[str, Any]]] = {}
    for table in spec.tables:
        rows = table.build(records, config)
        title = f"{spec.name}: {table.title} [{caption}]"
        printer.table(rows, title, digits=table.digits)
        report.add_table(table.name, rows, title=title)
        tables[table.name] = rows
    verdicts = spec.verdicts(config, records)
    if verdicts:
        title = f"{spec.name}: the paper's values and findings against ours"
        printer.table(verdicts, title)
        printer(rule_text())
        report.add_table(f"{spec.name}_verdicts", verdicts, title=title)
        tables[f"{spec.name}_verdicts"] = verdicts
    report.add_table(f"{spec.name}_repeats", records, title=f"{spec.name}: every repeat's scores")
    for note in [*notes, *spec.notes(config)]:
        printer(f"note: {note}")
    if spec.figures is not None:
        spec.figures(report, tables, config, first)
    return finish(spec.name, report, tables, watch, printer, options)
