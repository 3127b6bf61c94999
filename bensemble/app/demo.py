"""``bensemble demo``: the paper's methods on embedded data, before and after temperature scaling.

Two datasets, nothing downloaded:

* **toy** - the two Gaussians of Hoarau's epistemic-calibration paper
  (:func:`bensemble.datasets.make_toy_gaussians`), where the true ``eta(x) = P(y = 1 | x)`` is
  known: train / calibration / test sets drawn independently, plus a regular grid for the maps.
* **digits** - scikit-learn's bundled ``load_digits`` (8x8 images, 10 classes, inputs / 16),
  split 60 / 20 / 20 (stratified) into train / calibration / test. The methods that produce
  10-class members run on all ten classes; the binary-only ones (Bayesian logistic regression and
  the three illustrative methods) run one-vs-all on :data:`ONE_VS_ALL_DIGIT` against the rest.

Protocol for every method (:func:`bensemble.methods.zoo.member_probs`, one call per method so
that calibration, test and grid points see the same members):

1. The calibration set is cut in two separate halves
   (:func:`bensemble.conformal.split_calibration`), as the practitioner's guide requires:
   conformal labels must play no part in fitting the temperature.
2. Temperature scaling ("pool, then calibrate") is fitted on the first half, on
   ``log p(x)`` with ``p(x) = mean_h p_h(x)`` the pooled prediction (``softmax(log p) = p``, so
   ``T = 1`` is the unscaled model; ``log 0`` is floored at the smallest float64). The members
   are scaled with the same temperature, ``p_h -> softmax(log p_h / T)``, for the EECE / TECE
   after scaling.
3. A split-conformal LAC predictor (``alpha = 0.1``) is calibrated on the second half, once on the
   unscaled and once on the scaled pooled prediction.
4. Every number in the tables is measured on the untouched test set: accuracy, NLL, Brier, ECE
   (15 equal-width bins) of the pooled prediction; EECE of the members (K-means bins, about
   ``sqrt(n_test)`` of them; classwise for 10 classes); on the toy data also TECE against the
   known ``eta``; conformal coverage and mean set size.

The report folder gets ``toy`` and ``digits`` tables (``.md``, ``.csv``, ``.json``),
``summary.json`` (settings, temperatures, the NLL on the temperature-fitting half before and
after scaling, elapsed time, files) and PNG figures: reliability diagrams before / after,
epistemic reliability diagrams before / after, and on the toy data maps of ``EU(x) = Var_h h(x)``
beside the true per-x error ``E_h[(eta(x) - h(x))^2]`` (the paper's figures 2 and 6). A
self-contained ``report.html`` shows the same tables and figures (the same PNG bytes, embedded)
under a verdict block: per dataset and method, is the pooled prediction calibrated before and
after temperature scaling, did scaling help on the test set, are the members epistemically
calibrated at the stage a user would deploy (scaled when a temperature was fitted) - each
answered by the rules of :mod:`bensemble.app.verdict` with 95% bootstrap intervals
(:mod:`bensemble.app.demo_html`); the cards count and name the methods that pass. Every table
carries notes on its columns and their units (:mod:`bensemble.app.demo_notes`), printed under
it, shown under it in the page and kept in ``summary.json``.
"""

from __future__ import annotations

import argparse
import functools
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from tqdm.auto import tqdm

from bensemble import _progress
from bensemble._options import check_seed
from bensemble._terminal import printable_name
from bensemble.app.demo_config import DIGITS_MULTICLASS, DemoConfig
from bensemble.app.demo_data import ONE_VS_ALL_DIGIT
from bensemble.app.demo_data import digits_runs as _digits_runs
from bensemble.app.demo_data import toy_runs as _toy_runs
from bensemble.app.demo_figures import (
    epistemic_figure,
    figure_runs,
    maps_figure,
    reliability_figure,
)
from bensemble.app.demo_html import DatasetPage, add_figures, demo_page
from bensemble.app.demo_notes import metric_notes
from bensemble.app.demo_protocol import (
    ALPHA,
    ECE_BINS,
    _eece_bins,  # noqa: F401 - part of the module's tested surface
    _evaluate_method,  # noqa: F401
    _MethodRun,
)
from bensemble.reporting._folder import check_out_text, check_report_folder
from bensemble.reporting.html import render_html
from bensemble.reporting.report import Report, environment, format_table

if TYPE_CHECKING:
    pass

__all__ = [
    "ALPHA",
    "DEMO_DESCRIPTION",
    "ONE_VS_ALL_DIGIT",
    "DemoConfig",
    "DemoResult",
    "add_demo_arguments",
    "run_demo",
    "run_demo_command",
]


@dataclass
class DemoResult:
    """What :func:`run_demo` produced.

    Attributes:
        tables: table name (``"toy"``, ``"digits"``) -> rows (one per method and stage).
        summary: the content of ``summary.json``.
        files: every file written.
        elapsed: wall-clock seconds.
    """

    tables: dict[str, list[dict[str, Any]]]
    summary: dict[str, Any]
    files: list[Path]
    elapsed: float


# ----------------------------------------------------------------------------- the run
def _print(text: str = "") -> None:
    tqdm.write(text, file=sys.stdout)


def _check_config(config: DemoConfig, known: tuple[str, ...]) -> None:
    lists = {
        "toy_methods": (config.toy_methods or (), known),
        "digits_methods": (config.digits_methods, DIGITS_MULTICLASS),
        "digits_binary_methods": (config.digits_binary_methods, known),
    }
    for name, (methods, allowed) in lists.items():
        bad = [m for m in methods if m not in allowed]
        if bad:
            raise ValueError(
                f"run_demo: `config.{name}` must name methods among {list(allowed)} (got {bad})"
            )


def run_demo(
    *,
    quick: bool = False,
    seed: int = 0,
    out: str | Path = "bensemble-report",
    progress: bool = True,
    config: DemoConfig | None = None,
    overwrite: bool = False,
) -> DemoResult:
    """Run the demo: train, scale, evaluate, print the tables and write the report folder.

    Args:
        quick: the sub-30-second version (:meth:`DemoConfig.quick`); ignored with ``config``.
        seed: seeds the data draws / splits, the training and the member sampling.
        out: report folder. The files are staged beside it and swapped in at the end, so it
            holds exactly this run's files; an earlier report there is replaced only with
            ``overwrite``, and a folder holding anything else is refused.
        progress: tqdm bars (on stderr) over methods and training epochs.
        config: explicit sizes and methods.
        overwrite: replace an earlier report in ``out``.

    Returns:
        A :class:`DemoResult`.

    Raises:
        ValueError: a bad ``seed``, ``out`` or ``config``, found before anything is trained.

    torch runs single-threaded meanwhile (restored afterwards): the networks are tiny, and on a
    shared 2-core machine intra-op threads made training about 10x slower in our measurements.
    The global RNG is restored afterwards too.
    """
    start = time.perf_counter()
    seed = check_seed(seed, "seed", "run_demo")
    out = check_out_text(out, "run_demo", option="`out`")
    from bensemble.methods.zoo import PAPER_ORDER, ZooSettings

    config = config or (DemoConfig.quick() if quick else DemoConfig())
    _check_config(config, PAPER_ORDER)
    settings = replace(config.settings or ZooSettings(), progress=progress)
    n_toy = len(PAPER_ORDER if config.toy_methods is None else config.toy_methods)
    total = n_toy + len(config.digits_methods) + len(config.digits_binary_methods)
    report = Report(out, staged=True, overwrite=overwrite)  # checks the folder now
    threads = torch.get_num_threads()
    tables: dict[str, list[dict[str, Any]]] = {}
    summary: dict[str, Any] = {"seed": seed, "quick": quick, "alpha": ALPHA, "ece_bins": ECE_BINS}
    summary["versions"] = environment()
    summary["settings"] = {k: v for k, v in vars(settings).items() if k != "progress"}
    try:
        torch.set_num_threads(1)
        with (
            torch.random.fork_rng(devices=[]),
            _progress.progress(
                total=total, desc="bensemble demo", unit="method", enabled=progress
            ) as bar,
        ):
            toy, toy_setup, (grid_x, x_tr, y_tr) = _toy_runs(config, seed, settings, bar)
            title = (
                f"Toy Gaussians ({toy_setup['train']} training points): test-set metrics before "
                f"and after temperature scaling; TECE against the true P(y|x); LAC conformal sets "
                f"at alpha = {ALPHA}"
            )
            maps = functools.partial(_eu_maps, grid_x=grid_x, x_train=x_tr, y_train=y_tr)
            tables["toy"], toy_page, summary["toy"] = _dataset_report(
                report, "toy", "Toy", title, toy_setup, toy, has_tece=True, more_figures=maps
            )

            digits, digit_setup = _digits_runs(config, seed, settings, bar)
            title = (
                "Digits (load_digits, 10 classes): test-set metrics before and after temperature "
                f"scaling; binary-only methods run one-vs-all ({ONE_VS_ALL_DIGIT} vs rest); LAC "
                f"conformal sets at alpha = {ALPHA}"
            )
            tables["digits"], digits_page, summary["digits"] = _dataset_report(
                report, "digits", "Digits", title, digit_setup, digits, has_tece=False
            )
            page = demo_page(
                [toy_page, digits_page],
                versions=summary["versions"],
                settings={"seed": seed, "alpha": ALPHA, "ece_bins": ECE_BINS},
            )
            report.add_text("report.html", render_html(page))
        elapsed = time.perf_counter() - start
        summary["elapsed_s"] = round(elapsed, 2)
        summary["files"] = sorted(p.name for p in report.files) + ["summary.json"]
        report.add_json("summary", summary)
        report.commit()
    except BaseException:
        report.discard()
        raise
    finally:
        torch.set_num_threads(threads)
    _print(f"\nreport: {len(report.files)} files in {printable_name(out)}/")
    _print(f"elapsed: {elapsed:.1f} s")
    return DemoResult(tables=tables, summary=summary, files=list(report.files), elapsed=elapsed)


def _dataset_report(
    report: Report,
    key: str,
    name: str,
    title: str,
    setup: dict[str, Any],
    runs: list[Any],
    *,
    has_tece: bool,
    more_figures: Callable[[list[Any]], dict[str, Any]] | None = None,
) -> tuple[list[dict[str, Any]], DatasetPage, dict[str, Any]]:
    """One dataset's part of the report: its table (printed too), its reliability and epistemic
    reliability figures (``key_reliability.png``, ...; plus ``more_figures(figure runs)``), its
    section of ``report.html`` and its entry of ``summary.json``."""
    rows = _emit(report, key, title, setup, runs)
    fig_runs = figure_runs(runs)
    figs = {
        f"{key}_reliability": reliability_figure(fig_runs),
        f"{key}_epistemic_reliability": epistemic_figure(fig_runs),
    }
    if more_figures is not None:
        figs.update(more_figures(fig_runs))
    page = DatasetPage(name, title, setup, runs, add_figures(report, figs))
    entry = {
        "setup": setup,
        "fits": {r.label: r.fit for r in runs},
        "verdicts": {r.label: r.verdicts for r in runs},
        "notes": metric_notes(has_tece=has_tece, alpha=ALPHA, ece_bins=ECE_BINS),
    }
    return rows, page, entry


def _eu_maps(fig_runs: list[Any], *, grid_x: Any, x_train: Any, y_train: Any) -> dict[str, Any]:
    """The toy data's epistemic-uncertainty maps of the runs that have them (none: no figure)."""
    map_runs = [r for r in fig_runs if r.maps is not None]
    return {"toy_eu_maps": maps_figure(map_runs, grid_x, x_train, y_train)} if map_runs else {}


def _emit(
    report: Report, name: str, title: str, setup: dict[str, Any], runs: list[_MethodRun]
) -> list[dict[str, Any]]:
    """Print one dataset's table (and notes) and write it to the report."""
    rows = [row for run in runs for row in run.rows]
    sizes = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in setup.items())
    _print(f"\n{title}\n({sizes})")
    _print(format_table(rows))
    notes = metric_notes(has_tece=any("TECE" in r for r in rows), alpha=ALPHA, ece_bins=ECE_BINS)
    for text in notes:
        _print(textwrap.fill(text, width=100, subsequent_indent="  "))
    for run in runs:
        if run.fit["note"]:
            _print(f"note ({run.label}): {run.fit['note']}")
    report.add_table(name, rows, title=title)
    return rows


# ----------------------------------------------------------------------------- command line
#: The ``bensemble demo`` description (``bensemble demo --help``).
DEMO_DESCRIPTION = (
    "Train the epistemic-calibration paper's methods on the toy Gaussians and on "
    "scikit-learn's digits, temperature-scale on a calibration split, and report accuracy, "
    "NLL, Brier, ECE, EECE (and TECE on the toy data) before and after scaling, with "
    f"conformal coverage and set size at alpha = {ALPHA}. Writes tables and figures to --out."
)


def add_demo_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``demo`` sub-command's arguments to ``p`` (:mod:`bensemble.cli` registers the
    command, with :data:`DEMO_DESCRIPTION`); returns ``p``."""
    p.add_argument("--quick", action="store_true", help="a sub-30-second version (for tests)")
    p.add_argument("--seed", type=int, default=0, help="seed of data, training and sampling (0)")
    p.add_argument("--out", default="bensemble-report", help="report folder (bensemble-report)")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier report in --out (a folder holding other files is never replaced)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    return p


def run_demo_command(args: argparse.Namespace) -> int:
    """Run ``bensemble demo`` for parsed ``args``; returns the exit status.

    Every option is checked before anything is trained; a bad one raises ``ValueError``, which
    the command line prints as one line with exit status 2.
    """
    prog = "bensemble demo"
    seed = check_seed(args.seed, "--seed", prog)
    out = check_out_text(args.out, prog)
    overwrite = bool(getattr(args, "overwrite", False))
    check_report_folder(out, overwrite=overwrite, fn=prog)
    run_demo(
        quick=args.quick,
        seed=seed,
        out=out,
        progress=not getattr(args, "no_progress", False),
        overwrite=overwrite,
    )
    return 0
