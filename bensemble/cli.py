"""The ``bensemble`` command.

Sub-commands::

    bensemble --version
    bensemble demo [--quick] [--out DIR] [--overwrite] [--seed N] [--no-progress]
    bensemble evaluate PREDICTIONS --labels LABELS [--logits] [--calibration-split FRACTION]
                       [--alpha 0.1] [--n-bins 15] [--seed N] [--out DIR] [--overwrite]
                       [--json] ...
    bensemble reproduce {toy,size,noise,binning,digits,fashion,fig1,all} [--seed N]
                        [--repeats R] [--out DIR] [--overwrite] [--quick]
    bensemble reproduce {mnist,cifar10} --data-dir DIR [--quick] ...

Exit status: 0 on success; 2 for every usage error (a bad option, a bad input file, a report
folder that may not be written, a --data-dir without the data), reported as one line
``bensemble COMMAND: error: ...`` on stderr; 1 when the report cannot be written or data is
missing; 130 when interrupted. ``--help`` and ``--version`` exit 0. Warnings are one line
each, ``bensemble COMMAND: warning: ...``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import bensemble


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors: ``PROG: error: MESSAGE`` on stderr, exit status 2.

    The stock parser prints the whole usage block first; a one-line error is what scripts and
    logs can use (``--help`` still prints the usage). Sub-command parsers inherit the class.
    """

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {' '.join(str(message).split())}\n")


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="bensemble",
        description="How far can you trust a classifier? Ensembles, calibration, epistemic "
        "calibration and conformal prediction sets.",
    )
    parser.add_argument("--version", action="version", version=f"bensemble {bensemble.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    from bensemble.app.demo import add_demo_parser

    add_demo_parser(sub)

    from bensemble.app.evaluate import add_evaluate_parser

    add_evaluate_parser(sub)

    from bensemble.experiments.reproduce import add_reproduce_parser

    add_reproduce_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit status (never raises
    :class:`SystemExit`: usage errors return 2, ``--help`` and ``--version`` return 0)."""
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    if args.command is None:
        parser.print_help()
        return 0
    prog = f"bensemble {args.command}"
    try:
        return _dispatch(args)
    except ValueError as exc:  # bad input found late: still one line, still status 2
        text = " ".join(str(exc).split()).removeprefix(f"{prog}: ")
        print(f"{prog}: error: {text}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "demo":
        from bensemble.app.demo import run_demo_command

        return run_demo_command(args)
    if args.command == "evaluate":
        from bensemble.app.evaluate import run_evaluate

        return run_evaluate(args)
    from bensemble.experiments.reproduce import run_reproduce

    return run_reproduce(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
