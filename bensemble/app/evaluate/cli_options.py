"""The options of ``bensemble evaluate`` beyond classification scoring: ``--recalibrate-epistemic``
(:mod:`~bensemble.app.evaluate.recalibrated`) and ``--task regression``
(:mod:`~bensemble.app.evaluate.regression_cli`).

Kept apart from :mod:`~bensemble.app.evaluate.cli` so that the parser of the classification
command stays one module; importing this imports neither torch nor matplotlib.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["TASKS", "add_task_options"]

PROG = "bensemble evaluate"

#: Values of ``--task``.
TASKS = ("classification", "regression")


def add_task_options(p: argparse.ArgumentParser) -> None:
    """Add ``--task``, ``--recalibrate-epistemic`` and the regression options to ``p``."""
    p.add_argument(
        "--recalibrate-epistemic",
        action="store_true",
        help="with --calibration-split and M > 1: fit an EpistemicRecalibrator (temperature for "
        "the members' centre, a factor s for their spread) on the temperature half and report "
        "the members before and after (EECE, NLL, ECE; T, s and whether the fit hit a bound)",
    )
    p.add_argument(
        "--task",
        choices=TASKS,
        default="classification",
        help="classification (LABELS are integers; default) or regression (PREDICTIONS are "
        "member predictions [M, N] or [M, N, 2] (mean, variance), LABELS real targets [N])",
    )
    p.add_argument(
        "--regression-score",
        choices=("absolute", "normalized"),
        default="absolute",
        help="--task regression: conformity score of the split-conformal intervals, |y - mean| "
        "(absolute) or |y - mean| / sigma (normalized by the predicted total spread)",
    )
    p.add_argument(
        "--n-levels",
        type=int,
        default=100,
        metavar="L",
        help="--task regression: grid size of the calibration curve (100)",
    )


#: Regression-only options and their defaults: given with --task classification, they are refused.
REGRESSION_ONLY = {"regression_score": "absolute", "n_levels": 100}
#: Classification-only options and their defaults: given with --task regression, they are refused.
CLASSIFICATION_ONLY = {
    "logits": False,
    "members": None,
    "recalibrate_epistemic": False,
    "conformal_score": "lac",
    "eece_seeds": 1,
    "n_bins": 15,
    "workers": 1,
}


def refuse_other_task_options(args: argparse.Namespace, task: str) -> None:
    """Refuse the options of the other task on a ``task`` run (``InputError``, one line): those
    of :data:`REGRESSION_ONLY` on a classification run, of :data:`CLASSIFICATION_ONLY` on a
    regression run, when they differ from their defaults."""
    from bensemble.io import InputError

    if task == "classification":
        other_task, other_options = "regression", REGRESSION_ONLY
    else:
        other_task, other_options = "classification", CLASSIFICATION_ONLY
    for name, default in other_options.items():
        if getattr(args, name, default) != default:
            option = "--" + name.replace("_", "-")
            raise InputError(f"{option} applies to --task {other_task} only")


def check_classification_args(args: argparse.Namespace) -> None:
    """Refuse regression-only options on a classification run (``InputError``, one line)."""
    refuse_other_task_options(args, "classification")


def options_from_args(options_class: type, args: argparse.Namespace, **given: Any) -> Any:
    """An ``options_class`` (a dataclass of evaluation options) whose fields are the attributes
    of the same names in ``args``, except the fields ``given`` here (where the command line's
    names or defaults differ)."""
    names = [f.name for f in dataclasses.fields(options_class) if f.name not in given]
    return options_class(**{name: getattr(args, name) for name in names}, **given)


def print_outcome(
    args: argparse.Namespace,
    ev: Any,
    extra: dict[str, Any],
    report: Any,
    out: Path | None,
    print_tables: Callable[[Any], None],
) -> int:
    """What an evaluation prints once its report (if any) is written; returns the exit status.

    The report's problems (figures it could not draw) go to stderr as warnings; then either,
    with ``--json``, the evaluation ``ev``'s dictionary with ``extra`` and the ``"report"`` it
    wrote (``out``, its files and problems, or ``None``), or ``print_tables(ev)`` and the
    report's line.
    """
    if report is not None:
        for problem in report.problems:
            print(f"{PROG}: warning: {problem}", file=sys.stderr)
    if args.json:
        from bensemble.reporting.report import to_json

        payload = ev.to_dict()
        payload.update(extra)
        payload["report"] = None
        if report is not None:
            payload["report"] = {
                "out": str(out),
                "files": [str(f) for f in report.files],
                "problems": list(report.problems),
            }
        print(to_json(payload))
        return 0
    print_tables(ev)
    if report is not None:
        print(f"\nreport: {len(report.files)} files in {out}{os.sep}")
    return 0
