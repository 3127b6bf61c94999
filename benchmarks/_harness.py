"""Shared helpers for the benchmark scripts: median timing, a result record, one results file.

Every ``benchmarks/bench_*.py`` times a baseline and our implementation *in the same process*,
builds :class:`Result` rows and calls :func:`write_results`, which replaces that script's section
of ``benchmarks/results.md`` (other scripts' sections are kept) and prints the table.

Typical use::

    import _harness
    t_base = _harness.measure(lambda: baseline(x))
    t_ours = _harness.measure(lambda: ours(x))
    _harness.write_results([_harness.Result("ECE 1e6x10", "loop", t_base, t_ours, 1e-16)])
"""

from __future__ import annotations

import math
import os
import platform
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Result",
    "measure",
    "measure_interleaved",
    "environment",
    "format_table",
    "write_results",
    "write_section",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PATH = "benchmarks/results.md"
_TITLE = "# Benchmark results\n"
_INTRO = (
    "Written by `make bench` (`benchmarks/run_all.py`). Each section comes from one "
    "`benchmarks/bench_*.py`; times are medians of repeated runs after a warm-up, baseline and "
    "ours measured in the same process. ratio = baseline / ours (higher is better for us).\n"
)


def measure(
    fn: Callable[[], object],
    repeats: int = 5,
    warmup: int = 1,
    *,
    sync: Callable[[], object] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Median wall time of ``fn()`` in seconds (``time.perf_counter``), after ``warmup`` calls.

    Args:
        fn: the work to time (its result is discarded).
        repeats: number of timed calls (at least 1).
        warmup: untimed calls first.
        sync: called before starting and before stopping the clock (``torch.cuda.synchronize``
            for GPU work).
        clock: the clock; ``time.process_time`` gives CPU time (of all threads), which on a
            shared machine excludes the time the process waited for a core.
    """
    return measure_interleaved([fn], repeats, warmup, sync=sync, clock=clock)[0]


def measure_interleaved(
    fns: Sequence[Callable[[], object]],
    repeats: int = 5,
    warmup: int = 1,
    *,
    sync: Callable[[], object] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> list[float]:
    """Median times of several functions timed in alternation (round-robin).

    On a shared machine the load drifts; alternating the candidates exposes them to the same
    drift, so their *ratio* is steadier than with back-to-back blocks of runs.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(
            f"measure: `repeats` must be >= 1 and `warmup` >= 0 (got {repeats}, {warmup})"
        )
    for _ in range(warmup):
        for fn in fns:
            fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            if sync is not None:
                sync()
            start = clock()
            fn()
            if sync is not None:
                sync()
            times[i].append(clock() - start)
    return [statistics.median(t) for t in times]


@dataclass
class Result:
    """One row of a results table.

    Attributes:
        workload: what was computed, with its size.
        baseline: name of the baseline implementation.
        baseline_s: baseline median seconds.
        ours_s: our median seconds.
        agreement: ``|ours - reference|`` (a float), or a short text; ``None`` if not applicable.
        target: the ratio we aim for (``None``: reported only).
        note: free text (e.g. the reference the agreement is measured against).
    """

    workload: str
    baseline: str
    baseline_s: float
    ours_s: float
    agreement: float | str | None = None
    target: float | None = None
    note: str = ""

    @property
    def ratio(self) -> float:
        """``baseline_s / ours_s``: how many times faster we are."""
        return self.baseline_s / self.ours_s if self.ours_s > 0 else math.inf

    @property
    def met(self) -> bool | None:
        """Whether ``ratio >= target`` (``None`` without a target)."""
        return None if self.target is None else self.ratio >= self.target


def environment(device: str = "cpu") -> str:
    """One line naming the software, thread count and hardware a table was measured on."""
    parts = [f"python {platform.python_version()}"]
    try:
        import torch

        parts.append(f"torch {torch.__version__}")
        parts.append(f"{torch.get_num_threads()} torch threads")
        if device.startswith("cuda") and torch.cuda.is_available():
            parts.append(f"GPU {torch.cuda.get_device_name()}")
    except ImportError:  # pragma: no cover
        pass
    parts.append(f"{platform.machine()} {platform.processor() or platform.system()}")
    parts.append(f"{os.cpu_count()} CPUs")
    return ", ".join(parts)


def _fmt_time(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds < 1 else f"{seconds:.3f} s"


def _fmt_agreement(value: float | str | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return f"{value:.1e}"


def format_table(results: Sequence[Result]) -> str:
    """The rows as a Markdown table."""
    lines = [
        "| workload | baseline | baseline time | ours | ratio | target | agreement | note |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        target = "-" if r.target is None else f">= {r.target:g}x " + ("ok" if r.met else "MISSED")
        lines.append(
            f"| {r.workload} | {r.baseline} | {_fmt_time(r.baseline_s)} | {_fmt_time(r.ours_s)} "
            f"| {r.ratio:.2f}x | {target} | {_fmt_agreement(r.agreement)} | {r.note} |"
        )
    return "\n".join(lines) + "\n"


def _section_name(section: str | None) -> str:
    if section is not None:
        return section
    return Path(sys.argv[0]).stem or "benchmark"


def write_results(
    results: Sequence[Result],
    path: str | Path = DEFAULT_PATH,
    *,
    section: str | None = None,
    notes: Sequence[str] = (),
    device: str = "cpu",
) -> str:
    """Replace (or append) this script's section of the results file and print it.

    Args:
        results: the rows.
        path: the Markdown file, relative to the repository root unless absolute.
        section: section name; defaults to the running script's file name
            (``bench_metrics``). A GPU run should pass e.g. ``"bench_metrics (cuda)"``.
        notes: extra lines printed above the table (workload details, thread count, ...).
        device: used in the environment line.

    Returns:
        The section's Markdown text.
    """
    name = _section_name(section)
    body = [f"## {name}", "", f"Environment: {environment(device)}."]
    body += [f"{line}" for line in notes]
    body += ["", format_table(results)]
    return write_section("\n".join(body), path, section=name)


def write_section(text: str, path: str | Path = DEFAULT_PATH, *, section: str | None = None) -> str:
    """Replace (or append) the section ``section`` of the results file by ``text`` (Markdown
    that starts with its own heading) and print it; for tables other than :class:`Result` rows.
    """
    name = _section_name(section)
    text = text if text.endswith("\n") else text + "\n"
    print(text)

    target = Path(path)
    if not target.is_absolute():
        target = REPO_ROOT / target
    begin, end = f"<!-- begin {name} -->", f"<!-- end {name} -->"
    block = f"{begin}\n{text}{end}\n"
    old = target.read_text() if target.exists() else _TITLE + "\n" + _INTRO + "\n"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end) + r"\n?", re.DOTALL)
    if pattern.search(old):
        new = pattern.sub(lambda _: block, old, count=1)
    else:
        new = old.rstrip("\n") + "\n\n" + block
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(new)
    return text
