"""The options of ``bensemble evaluate`` beyond classification scoring: ``--recalibrate-epistemic``
(:mod:`~bensemble.app.evaluate.recalibrated`) and ``--task regression``
(:mod:`~bensemble.app.evaluate.regression_cli`).

Kept apart from :mod:`~bensemble.app.evaluate.cli` so that the parser of the classification
command stays one module; importing this imports neither torch nor matplotlib.
"""

from __future__ import annotations

import argparse

__all__ = ["TASKS", "add_task_options"]

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


def check_classification_args(args: argparse.Namespace) -> None:
    """Refuse regression-only options on a classification run (``InputError``, one line)."""
    from bensemble.io import InputError

    for name, default in REGRESSION_ONLY.items():
        if getattr(args, name, default) != default:
            option = "--" + name.replace("_", "-")
            raise InputError(f"{option} applies to --task regression only")
