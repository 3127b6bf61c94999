"""``bensemble evaluate --task regression``: the command line's run of a regression evaluation.

PREDICTIONS is one file of member predictions ``[M, N]`` (points) or ``[M, N, 2]`` (mean,
variance) (``--members-axis 1``: ``[N, M(, 2)]``), LABELS one file of ``N`` real targets. Every
option is checked and both inputs opened (shapes, targets, the report folder) before anything is
computed; a ``.npy`` is read ``--chunk-size`` points at a time
(:mod:`~bensemble.app.evaluate.regression`). Bad input exits with status 2 and one line on
stderr, and nothing is written; an input is never written over; the report folder is written
once, atomically (:mod:`~bensemble.app.evaluate.regression_report`).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from bensemble.app.evaluate.cli_options import PROG

__all__ = ["run_regression"]


def _checked(args: argparse.Namespace):
    """The checked :class:`~bensemble.app.evaluate.regression.RegressionOptions` of ``args``."""
    from bensemble.app.evaluate.cli_options import options_from_args, refuse_other_task_options
    from bensemble.app.evaluate.regression import RegressionOptions
    from bensemble.io import InputError

    refuse_other_task_options(args, "regression")
    if len(args.predictions) != 1 or len(args.labels) != 1:
        raise InputError(
            "--task regression takes one PREDICTIONS file and one --labels file (got "
            f"{len(args.predictions)} and {len(args.labels)})"
        )
    options = options_from_args(
        RegressionOptions,
        args,
        conformal_score=args.regression_score,
        chunk_size=args.chunk_size or 65_536,
    )
    fn = PROG
    try:
        return options.checked(fn)
    except ValueError as exc:  # the command line's names for the arguments
        text = str(exc).replace("`n_levels`", "--n-levels").replace("`eece_bins`", "--eece-bins")
        raise InputError(text.replace("`calibration_split`", "--calibration-split")) from None


def _check_out(out: Path, inputs: list[Path], overwrite: bool) -> None:
    """Refuse an ``--out`` that is an input or holds one, or may not be replaced."""
    from bensemble.io import InputError
    from bensemble.reporting._folder import check_report_folder

    for src in inputs:
        if out.resolve() == src.resolve() or out.resolve() in src.resolve().parents:
            raise InputError(
                f"--out {out} would overwrite the input {src}: the report folder is replaced as "
                "a whole; choose another folder"
            )
    check_report_folder(out, overwrite=overwrite, fn=PROG)


def _evaluate(args: argparse.Namespace, out: Path | None):
    from bensemble.app.evaluate.regression import evaluate_regression_rows
    from bensemble.app.evaluate.regression_rows import RegressionRows, read_targets
    from bensemble.io import split_key

    options = _checked(args)
    path, labels = str(args.predictions[0]), str(args.labels[0])
    where = str(split_key(path)[0])
    rows = RegressionRows(path, members_axis=args.members_axis, name="predictions", where=where)
    y = read_targets(labels, rows.n, name="labels", where=str(split_key(labels)[0]))
    if out is not None:
        _check_out(out, [split_key(path)[0], split_key(labels)[0]], args.overwrite)
    return evaluate_regression_rows(rows, y, options, fn=PROG)


def run_regression(args: argparse.Namespace) -> int:
    """Run ``bensemble evaluate --task regression`` for parsed ``args``; the exit status (2:
    bad input, one line on stderr, nothing written; 1: writing failed; 0: success)."""
    from bensemble.reporting._folder import check_out_text

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = None
            if args.out is not None:
                out = check_out_text(args.out, PROG)
            elif not args.json:
                out = Path("bensemble-report")
            ev = _evaluate(args, out)
        except ValueError as exc:
            print(f"{PROG}: error: {' '.join(str(exc).split())}", file=sys.stderr)
            return 2
    for w in caught:
        if issubclass(w.category, (UserWarning, RuntimeWarning)):
            print(f"{PROG}: warning: {' '.join(str(w.message).split())}", file=sys.stderr)
    extra = {"inputs": {"predictions": str(args.predictions[0]), "labels": str(args.labels[0])}}
    report = None
    if out is not None:
        from bensemble.app.evaluate.regression_report import write_regression

        try:
            report = write_regression(ev, out, extra=extra, overwrite=args.overwrite)
        except (OSError, ValueError) as exc:
            text = " ".join(str(exc).split())
            print(f"{PROG}: error: could not write the report to {out}: {text}", file=sys.stderr)
            return 1
    from bensemble.app.evaluate.cli_options import print_outcome

    return print_outcome(args, ev, extra, report, out, _print)


def _print(ev) -> None:
    from bensemble.reporting.report import format_table

    s = ev.setup
    print(f"{s['members']} member(s) ({s['kind']}), {s['samples']} points", end="")
    if s["n_calibration"]:
        print(f"; split: {s['n_calibration']} conformal / {s['n_test']} test (seed {s['seed']})")
    else:
        print()
    for name, title, rows in ev.tables():
        if name == "calibration_curve":
            continue  # in the report folder: one row per level
        print(f"\n{title}")
        print(format_table(rows))
        for note in ev.table_notes(name):
            print(f"  {note}")
    for note in ev.notes:
        print(f"\nnote: {note}")
