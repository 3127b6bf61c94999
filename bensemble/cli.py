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
folder that may not be written, a --data-dir without the data, an argument that is not valid
UTF-8), reported as one line ``bensemble COMMAND: error: ...`` on stderr; 1 when the report
cannot be written, data is missing or the system refuses a file operation (one line too); 130
when interrupted; 141 (as for a program stopped by SIGPIPE) when the reader of the output went
away (``bensemble evaluate ... | head -1``): the command stops quietly, with nothing on stderr.
``--help`` and ``--version`` exit 0. Warnings are one line each, ``bensemble COMMAND: warning:
...``. Every name shown has its control and bidirectional characters escaped
(:func:`bensemble._terminal.printable_name`).

A closed output pipe: Python ignores SIGPIPE (so a write to a closed pipe raises
:class:`BrokenPipeError` rather than killing the process - restoring the default action would
also kill it on any closed socket, such as a Ray worker's), and :func:`main` catches the error
wherever it is raised, points the standard streams at ``os.devnull`` so that the interpreter's
final flush cannot raise it again (as Python's documentation of SIGPIPE recommends), and returns
141.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence

import bensemble
from bensemble._terminal import is_valid_utf8, printable_name, printable_text

#: Exit status when the reader of stdout closed it: 128 + SIGPIPE, as a shell reports a program
#: that SIGPIPE stopped.
EXIT_BROKEN_PIPE = 128 + getattr(signal, "SIGPIPE", 13)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors: ``PROG: error: MESSAGE`` on stderr, exit status 2.

    The stock parser prints the whole usage block first; a one-line error is what scripts and
    logs can use (``--help`` still prints the usage). Sub-command parsers inherit the class.
    """

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{printable_text(self.prog)}: error: {printable_text(message)}\n")


#: Sub-commands: the module that holds each one's description and arguments, their names
#: there, and the one-line help ``bensemble --help`` lists (said here only, so that a command
#: that is not imported still shows it).
COMMANDS = {
    "demo": (
        "bensemble.app.demo",
        "DEMO_DESCRIPTION",
        "add_demo_arguments",
        "train the paper's methods on embedded data (toy Gaussians, digits) and report",
    ),
    "evaluate": (
        "bensemble.app.evaluate.cli",
        "EVALUATE_DESCRIPTION",
        "add_evaluate_arguments",
        "score saved predictions: metrics, uncertainty, scaling, conformal sets",
    ),
    "reproduce": (
        "bensemble.experiments.reproduce",
        "REPRODUCE_DESCRIPTION",
        "add_reproduce_arguments",
        "reproduce an experiment of the epistemic-calibration paper",
    ),
}


def _build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser; when ``argv`` names a command, only that command's module is imported (the
    others get a stand-in with their name and help: ``bensemble demo`` imports the methods and
    scikit-learn, ``bensemble reproduce`` the experiments - seconds a small ``evaluate`` need
    not wait for). Without a command (``--help``, a typo) every command is registered."""
    import importlib

    parser = _Parser(
        prog="bensemble",
        description="How far can you trust a classifier? Ensembles, calibration, epistemic "
        "calibration and conformal prediction sets.",
    )
    parser.add_argument("--version", action="version", version=f"bensemble {bensemble.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for name, (module, description, arguments, summary) in COMMANDS.items():
        if chosen in COMMANDS and name != chosen:
            sub.add_parser(name, help=summary)
            continue
        loaded = importlib.import_module(module)
        p = sub.add_parser(name, help=summary, description=getattr(loaded, description))
        getattr(loaded, arguments)(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit status (never raises
    :class:`SystemExit`: usage errors return 2, ``--help`` and ``--version`` return 0; a closed
    stdout returns :data:`EXIT_BROKEN_PIPE` quietly)."""
    try:
        status = _main(argv)
        if sys.stdout is not None:  # None when started with fd 1 closed (`>&-`)
            sys.stdout.flush()  # inside the try: a closed pipe surfaces here, not at exit
        return status
    except BrokenPipeError:
        _silence_closed_streams()
        return EXIT_BROKEN_PIPE


def console() -> None:
    """The ``bensemble`` console script (and ``python -m bensemble.cli``): :func:`main` on
    ``sys.argv``, then exit with its status without tearing the interpreter down.

    Python's teardown garbage-collects every module after the command is done (torch and
    matplotlib: about 0.5 s CPU, a sixth of a small ``bensemble evaluate``). Here the ``atexit``
    handlers run (temporary folders, worker pools, Ray), stdout and stderr are flushed, and the
    process ends with :func:`os._exit`; while a non-daemon thread still runs, the ordinary
    :func:`sys.exit` waits for it instead.
    """
    status = main()
    import atexit
    import threading

    main_thread = threading.main_thread()
    if any(t is not main_thread and not t.daemon and t.is_alive() for t in threading.enumerate()):
        sys.exit(status)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # the reader is gone (or the stream was closed)
            pass
    os._exit(status)


def _main(argv: Sequence[str] | None) -> int:
    parser = _build_parser(sys.argv[1:] if argv is None else [str(a) for a in argv])
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    if args.command is None:
        parser.print_help()
        return 0
    prog = f"bensemble {args.command}"
    bad = next((a for a in (sys.argv[1:] if argv is None else argv) if not _utf8(a)), None)
    if bad is not None:
        _error(
            prog,
            f"argument {printable_name(bad)} is not valid UTF-8 (the bytes shown as \\xNN); "
            "rename the file or folder - names are shown and recorded as UTF-8",
        )
        return 2
    try:
        return _dispatch(args)
    except ValueError as exc:  # bad input found late: still one line, still status 2
        _error(prog, str(exc))
        return 2
    except BrokenPipeError:
        raise
    except OSError as exc:  # the system refused a file operation: one line, status 1
        detail = str(exc)
        if exc.strerror and exc.filename is not None:
            detail = f"{exc.strerror}: {printable_name(exc.filename)}"
        _error(prog, detail)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


def _utf8(arg: object) -> bool:
    return not isinstance(arg, (str, os.PathLike)) or is_valid_utf8(arg)


def _error(prog: str, message: str) -> None:
    """One line ``PROG: error: MESSAGE`` on stderr, control characters escaped."""
    text = printable_text(message).removeprefix(f"{prog}: ")
    print(f"{prog}: error: {text}", file=sys.stderr)


def _silence_closed_streams() -> None:
    """Point stdout and stderr at ``os.devnull``: the reader is gone, and the interpreter's final
    flush of what is still buffered must not raise :class:`BrokenPipeError` again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
    except OSError:  # pragma: no cover - no /dev/null
        return
    try:
        for stream in (sys.stdout, sys.stderr):
            try:
                os.dup2(devnull, stream.fileno())
            except (AttributeError, OSError, ValueError):  # replaced streams (tests)
                continue
    finally:
        os.close(devnull)


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
    console()
