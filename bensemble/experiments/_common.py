"""Shared pieces of the paper's reproductions (``bensemble reproduce``).

Every experiment is a function ``run(options) -> ExperimentResult`` that trains producers through
the public API (:mod:`bensemble.methods.zoo`, :mod:`bensemble.methods`), scores them with
:mod:`bensemble.metrics`, prints its table(s) with the paper's value beside ours and writes them
with :class:`~bensemble.reporting.report.Report`. This module holds what they share:

* :class:`RunOptions` / :class:`ExperimentResult` - what comes in and what goes out;
* :func:`repeat_seeds`, :func:`mean_sd`, :func:`aggregate` - repeats and their mean +- sd
  (defined in :mod:`bensemble.experiments._repeats`, re-exported here);
* :func:`zoo_settings` - the producers' settings, as the paper trains them (or quick);
* :func:`single_thread` - intra-op threads pinned to 1 while an experiment runs (the models are
  tiny: per-op overhead dominates and on a shared 2-core machine oversubscription costs 10x);
* :class:`Printer`, :class:`Stopwatch`, :func:`finish` - printing, timing and closing a report.

How an experiment is declared and run is :mod:`bensemble.experiments.runner`; how methods are
scored, :mod:`bensemble.experiments._scores`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bensemble import _progress
from bensemble._options import check_count, check_seed
from bensemble._validation import check_positive_int
from bensemble.experiments._repeats import (
    SD_SUFFIX,  # noqa: F401 - re-exported (the "c sd" column suffix)
    aggregate,
    columns_of,
    display_rows,
    mean_sd,
    repeat_seeds,
)
from bensemble.methods.zoo import ZooSettings
from bensemble.reporting._folder import check_out_text
from bensemble.reporting.report import Report, environment, format_table

__all__ = [
    "NA",
    "PAPER_REPEATS",
    "DataDirError",
    "DataUnavailableError",
    "ExperimentResult",
    "Printer",
    "RunOptions",
    "Stopwatch",
    "aggregate",
    "columns_of",
    "display_rows",
    "finish",
    "mean_sd",
    "progress_bar",
    "repeat_seeds",
    "single_thread",
    "zoo_settings",
]

#: Marker of a missing paper value (the text gives no number).
NA = "n/a"
#: Staged reports of the experiment now running; ``reproduce`` discards them if it fails.
OPEN_REPORTS: list[Report] = []


class DataUnavailableError(RuntimeError):
    """Raised by an experiment whose data files are missing; the message says how to get them."""


class DataDirError(DataUnavailableError):
    """``--data-dir`` is required and missing, or lacks a file: a usage error (exit status 2)."""


#: Independent repeats of a paper reproduction when ``--repeats`` is not given (its tables report
#: the mean ± sd over them): an experiment's ``ExperimentSpec.default_repeats``.
PAPER_REPEATS = 5


@dataclass(frozen=True)
class RunOptions:
    """Options every experiment takes (the ``bensemble reproduce`` flags).

    Attributes:
        seed: base seed; repeat ``r`` uses ``seed + r`` for data, training and binning.
        repeats: independent repetitions (``None``: the experiment's default; 1 when quick).
        out: report root; the experiment writes into ``out/<experiment>``.
        quick: tiny settings (seconds) for tests.
        progress: tqdm progress bars on stderr.
        extra: experiment-specific options (``features``, ``n_train``, ``data_dir``).
        overwrite: replace an earlier report in ``out/<experiment>`` (a folder holding anything
            but report files is never replaced).

    Every field is checked on construction (``ValueError``): a seed is an integer in
    ``[0, 2**32 - repeats]`` (never a bool or a float), ``repeats`` a positive integer.
    """

    seed: int = 0
    repeats: int | None = None
    out: str | os.PathLike = "bensemble-report"
    quick: bool = False
    progress: bool = True
    extra: Mapping[str, Any] = field(default_factory=dict)
    overwrite: bool = False

    def __post_init__(self) -> None:
        fn = "RunOptions"
        if self.repeats is not None:
            check_count(self.repeats, "repeats", fn)
        check_seed(self.seed, "seed", fn, span=self.repeats or 1)
        for name in ("quick", "progress", "overwrite"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(
                    f"{fn}: `{name}` must be True or False (got {getattr(self, name)!r})"
                )
        check_out_text(self.out, fn, option="`out`")
        if not isinstance(self.extra, Mapping):
            raise ValueError(f"{fn}: `extra` must be a mapping (got {type(self.extra).__name__})")

    def n_repeats(self, default: int) -> int:
        """The number of repeats: as given, else ``default`` (1 with ``quick``)."""
        if self.repeats is None:
            value = 1 if self.quick else default
        else:
            value = self.repeats
        return check_positive_int(value, "repeats", "bensemble reproduce")

    def report(self, name: str) -> Report:
        """The experiment's report folder ``out/<name>``, staged: :func:`finish` swaps it in.

        The folder is checked now (before any training): an earlier report there needs
        ``overwrite``; a folder holding anything else is refused.
        """
        report = Report(Path(self.out) / name, staged=True, overwrite=self.overwrite)
        OPEN_REPORTS.append(report)
        return report


@dataclass
class ExperimentResult:
    """What an experiment returns (and prints).

    Attributes:
        name: the experiment (``"toy"``, ...).
        tables: table name -> numeric rows (as written to CSV / JSON).
        files: every file written, in order.
        elapsed: wall-clock seconds.
        text: everything printed.
    """

    name: str
    tables: dict[str, list[dict[str, Any]]]
    files: list[Path]
    elapsed: float
    text: str


def zoo_settings(quick: bool) -> ZooSettings:
    """The paper's settings, or (``quick``) a lean version that runs in seconds, for tests."""
    if not quick:
        return ZooSettings()
    return ZooSettings.quick(
        epochs=5, n_members=3, n_samples=20, n_trees=20, blr_draws=120, blr_burn_in=60
    )


# ----------------------------------------------------------------------------- running
@contextmanager
def single_thread() -> Iterator[None]:
    """Run the block with one torch intra-op thread; the previous setting is restored."""
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        yield
    finally:
        torch.set_num_threads(before)


def progress_bar(iterable: Iterable, *, total: int | None = None, desc: str, enabled: bool):
    """A tqdm bar on stderr, drawn only when stderr is a terminal (:mod:`bensemble._progress`)."""
    return _progress.progress(iterable, total=total, desc=desc, enabled=enabled, leave=False)


class Printer:
    """Collects printed text (returned in :class:`ExperimentResult`) while printing it."""

    def __init__(self, stream=None) -> None:
        self.stream = stream
        self.parts: list[str] = []

    def __call__(self, text: str = "") -> None:
        print(text, file=self.stream or sys.stdout, flush=True)
        self.parts.append(text)

    def table(self, rows: Sequence[Mapping[str, Any]], title: str, digits: int = 4) -> None:
        """Print ``title`` and the rows (mean ± sd merged) as an aligned table."""
        self(title)
        self(format_table(display_rows(rows, digits), digits=digits))
        self()

    @property
    def text(self) -> str:
        return "\n".join(self.parts)


class Stopwatch:
    """Seconds since construction."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start


def finish(
    name: str,
    report: Report,
    tables: dict[str, list[dict[str, Any]]],
    watch: Stopwatch,
    printer: Printer,
    options: RunOptions | None = None,
) -> ExperimentResult:
    """Write ``elapsed.txt`` and ``summary.json``, swap the report folder in, build the result.

    ``summary.json`` holds the experiment, its options (when given), the elapsed time, the
    versions (:func:`~bensemble.reporting.report.environment`) and the list of files.
    """
    elapsed = watch.elapsed
    report.add_text("elapsed.txt", f"{elapsed:.1f}\n")
    summary: dict[str, Any] = {"experiment": name}
    if options is not None:
        summary["options"] = {
            "seed": options.seed,
            "repeats": options.repeats,
            "quick": options.quick,
            "extra": dict(options.extra),
        }
    summary["elapsed_s"] = round(elapsed, 2)
    summary["versions"] = environment()
    summary["files"] = sorted({p.name for p in report.files} | {"summary.json"})
    report.add_json("summary", summary)
    report.commit()
    printer(f"{name}: {elapsed:.1f} s elapsed; report written to {report.out_dir}/")
    return ExperimentResult(name, tables, list(report.files), elapsed, printer.text)


Runner = Callable[[RunOptions], ExperimentResult]
