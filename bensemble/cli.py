"""The ``bensemble`` command.

Sub-commands::

    bensemble --version
    bensemble demo [--quick] [--out DIR] [--seed N] [--no-progress]
    bensemble evaluate PREDICTIONS --labels LABELS [--logits] [--calibration-split FRACTION]
                       [--alpha 0.1] [--n-bins 15] [--seed N] [--out DIR] [--json] ...
    bensemble reproduce {toy,size,noise,binning,digits,fashion,fig1,all} [--seed N]
                        [--repeats R] [--out DIR] [--quick]
    bensemble reproduce {mnist,cifar10} --data-dir DIR [--quick] ...
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import bensemble


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bensemble",
        description="How far can you trust a classifier? Ensembles, calibration, epistemic "
        "calibration and conformal prediction sets.",
    )
    parser.add_argument("--version", action="version", version=f"bensemble {bensemble.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    from bensemble.experiments.demo import add_demo_parser

    add_demo_parser(sub)

    from bensemble.experiments.evaluate import add_evaluate_parser

    add_evaluate_parser(sub)

    from bensemble.experiments.reproduce import add_reproduce_parser

    add_reproduce_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit status."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "demo":
        from bensemble.experiments.demo import run_demo_command

        return run_demo_command(args)
    if args.command == "evaluate":
        from bensemble.experiments.evaluate import run_evaluate

        return run_evaluate(args)
    if args.command == "reproduce":
        from bensemble.experiments.reproduce import run_reproduce

        return run_reproduce(args)
    parser.error(f"unknown command {args.command!r}")  # pragma: no cover
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
