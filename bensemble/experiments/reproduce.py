"""``bensemble reproduce EXPERIMENT``: the command line of the paper's experiments.

Each experiment is declared as an :class:`~bensemble.experiments.runner.ExperimentSpec` and run
by :func:`~bensemble.experiments.runner.run_spec`. :data:`EXPERIMENTS` is the registry: name ->
(module, function, description); :func:`runner` gives the function ``run(options) ->
ExperimentResult``. Modules are imported only when an experiment runs, so ``bensemble --help``
stays cheap. Every experiment prints its table(s) with
the paper's value beside ours and writes them, with its figures and ``summary.json`` (options,
versions, files), to ``OUT/<experiment>/``: staged beside it and swapped in at the end, so the
folder holds exactly one run's files (an earlier report is replaced only with ``--overwrite``).
Every option is checked before anything is trained.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bensemble.experiments._common import DataDirError, DataUnavailableError

if TYPE_CHECKING:  # the runners (torch, scikit-learn) load only when an experiment runs
    from bensemble.experiments._common import ExperimentResult, RunOptions

__all__ = [
    "EXPERIMENTS",
    "REPRODUCE_DESCRIPTION",
    "DataDirError",
    "DataUnavailableError",
    "add_reproduce_arguments",
    "reproduce",
    "run_reproduce",
    "runner",
]

PROG = "bensemble reproduce"

_X = "bensemble.experiments."
#: name -> (module, function, one-line description); the function is ``run(options)``.
EXPERIMENTS: dict[str, tuple[str, str, str]] = {
    "toy": (_X + "toy", "run", "nine methods on 10 toy points (fig. 2, 3a, 6)"),
    "size": (_X + "size", "run", "random-forest EECE vs training-set size (fig. 3b)"),
    "noise": (_X + "noise", "run", "random-forest EECE vs input corruption (fig. 3b)"),
    "binning": (_X + "binning", "run", "|EECE - TECE| vs number of bins (fig. 5)"),
    "digits": (_X + "digits", "run", "one-vs-all on scikit-learn digits (table 1)"),
    "fashion": (_X + "vision", "run_fashion", "one-vs-all on Fashion-MNIST (table 1 protocol)"),
    "mnist": (_X + "vision", "run_mnist", "table 1 on MNIST files (--data-dir)"),
    "cifar10": (_X + "vision", "run_cifar10", "table 2 on CIFAR-10 files (--data-dir)"),
    "fig1": (_X + "fig1", "run", "RF reliability diagrams + smooth curve (fig. 1)"),
    "all": (_X + "all", "run", "every offline experiment and one Markdown index"),
}


def runner(name: str) -> Callable[[RunOptions], ExperimentResult]:
    """The ``run(options)`` function of experiment ``name`` (imports its module)."""
    if name not in EXPERIMENTS:
        raise ValueError(
            f"reproduce: `name` must be one of {', '.join(EXPERIMENTS)} (got {name!r})"
        )
    module, function, _ = EXPERIMENTS[name]
    return getattr(importlib.import_module(module), function)


def reproduce(name: str, options: RunOptions | None = None, **kwargs: Any) -> ExperimentResult:
    """Run experiment ``name`` (a key of :data:`EXPERIMENTS`) and return its result.

    Args:
        name: the experiment.
        options: run options; or pass their fields as keyword arguments
            (``seed=``, ``repeats=``, ``out=``, ``quick=``, ``progress=``, ``extra=``).
    """
    run = runner(name)
    from bensemble.experiments._common import OPEN_REPORTS, RunOptions

    if options is None:
        options = RunOptions(**kwargs)
    elif kwargs:
        raise ValueError("reproduce: pass either `options` or keyword options, not both")
    opened = len(OPEN_REPORTS)
    try:
        return run(options)
    except BaseException:
        for report in OPEN_REPORTS[opened:]:
            report.discard()  # a failed run leaves no staging folder behind
        raise
    finally:
        del OPEN_REPORTS[opened:]


#: The ``bensemble reproduce`` description (``bensemble reproduce --help``).
REPRODUCE_DESCRIPTION = (
    "Reproduce one of the paper's experiments ("
    + "; ".join(f"{k}: {d}" for k, (_, _, d) in EXPERIMENTS.items())
    + "). Prints the table "
    "with the paper's value beside ours and writes tables (Markdown, CSV, JSON) and PNG "
    "figures to OUT/EXPERIMENT/."
)


def add_reproduce_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``reproduce`` sub-command's arguments to ``p`` (:mod:`bensemble.cli` registers the
    command, with :data:`REPRODUCE_DESCRIPTION`); returns ``p``."""
    p.add_argument(
        "experiment",
        choices=list(EXPERIMENTS),
        metavar="EXPERIMENT",
        help=f"one of: {', '.join(EXPERIMENTS)}",
    )
    p.add_argument("--seed", type=int, default=0, help="base seed (repeat r uses seed + r)")
    p.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="independent repeats, reported as mean ± sd (default: per experiment)",
    )
    p.add_argument("--out", default="bensemble-report", help="report root folder")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier report in OUT/EXPERIMENT (a folder holding other files is "
        "never replaced)",
    )
    p.add_argument("--quick", action="store_true", help="tiny settings (seconds), for tests")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument(
        "--features",
        choices=("ae", "raw"),
        default="ae",
        help="digits: auto-encoder latent (the paper's protocol) or raw pixels",
    )
    p.add_argument(
        "--n-train",
        type=int,
        default=None,
        help="fashion: training points for the classifiers (0: all 60,000); toy: training "
        "points (>= 10, default 10)",
    )
    p.add_argument(
        "--n-test",
        type=int,
        default=None,
        help="binning: test points (default 10,000; the paper's second experiment uses "
        "40,000); fashion / mnist / cifar10: score on a seeded subset of this many test images "
        "(default all 10,000)",
    )
    p.add_argument(
        "--data-dir",
        default=None,
        help="fashion: folder of the IDX files (default /usr/share/datasets/fashion-mnist); "
        "mnist / cifar10 (required): folder of their files",
    )
    p.add_argument(
        "--reuse",
        action="store_true",
        help="all: run nothing; build OUT/index.md from the reports that earlier "
        "`bensemble reproduce NAME --out OUT` runs left in OUT",
    )
    _add_toy_and_convention_arguments(p)
    return p


def _add_toy_and_convention_arguments(p: argparse.ArgumentParser) -> None:
    """toy: network training; every experiment: the illustrative methods' scoring convention."""
    p.add_argument("--epochs", type=int, default=None, help="toy: epochs (default 1000)")
    p.add_argument("--lr", type=float, default=None, help="toy: Adam learning rate (1e-3)")
    p.add_argument(
        "--batch-size", type=int, default=None, help="toy: minibatch size (default full batch)"
    )
    p.add_argument(
        "--trust",
        choices=("reported", "draws"),
        default=None,
        help="illustrative methods (toy, digits, fashion, mnist, cifar10, all; accepted by "
        "size and noise, which score none): trust = the reported EU (default) or the variance "
        "of the draws; every caption names the convention",
    )
    p.add_argument(
        "--clip",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="illustrative methods: clip the Gaussian draws to [0, 1] (default: no, as the "
        "paper writes them)",
    )


def _toy_and_convention_extra(args: argparse.Namespace, extra: dict[str, Any]) -> None:
    for name in ("epochs", "lr", "batch_size", "trust", "clip"):
        if getattr(args, name, None) is not None:
            extra[name] = getattr(args, name)


def run_reproduce(args: argparse.Namespace) -> int:
    """Run the parsed ``reproduce`` command; return the exit status.

    Every option is checked first (a bad one raises ``ValueError``, printed by the command line
    as one line with exit status 2); nothing is trained or written before.
    """

    from bensemble._options import check_count, check_seed
    from bensemble.reporting._folder import check_out_text, check_report_folder

    if args.repeats is not None:
        check_count(args.repeats, "--repeats", PROG)
    check_seed(args.seed, "--seed", PROG, span=args.repeats or 1)
    if args.n_train is not None:
        check_count(args.n_train, "--n-train", PROG, minimum=0)
    if args.n_test is not None:
        check_count(args.n_test, "--n-test", PROG, minimum=20)
    root = check_out_text(args.out, PROG)
    if root.exists() and not root.is_dir():
        raise ValueError(f"{PROG}: --out {root} exists and is not a folder")
    overwrite = bool(getattr(args, "overwrite", False))
    check_report_folder(root / args.experiment, overwrite=overwrite, fn=PROG)
    from bensemble.experiments._common import RunOptions

    extra: dict[str, Any] = {"features": args.features}
    if args.n_train is not None:
        extra["n_train"] = args.n_train
    if args.n_test is not None:
        extra["n_test"] = args.n_test
    if args.data_dir is not None:
        extra["data_dir"] = args.data_dir
    if getattr(args, "reuse", False):
        if args.experiment != "all":
            raise ValueError(f"{PROG}: --reuse applies to `all` only (got {args.experiment})")
        extra["reuse"] = True
    _toy_and_convention_extra(args, extra)
    options = RunOptions(
        seed=args.seed,
        repeats=args.repeats,
        out=root,
        quick=args.quick,
        progress=not args.no_progress,
        extra=extra,
        overwrite=overwrite,
    )
    try:
        reproduce(args.experiment, options)
    except DataUnavailableError as err:
        print(f"{PROG} {args.experiment}: {err}", file=sys.stderr)
        return 2 if isinstance(err, DataDirError) else 1
    return 0
