"""The command line of ``bensemble evaluate``: options, checks, the run and the printout.

:func:`run_evaluate` checks every option and opens every input (shapes, labels, the report
folder) before it computes anything, computes with the one engine
(:func:`~bensemble.app.evaluate.api.evaluate_source`: a ``.npy`` or uncompressed ``.npz`` member
is read through :func:`bensemble.io.open_npy_chunks` ``--chunk-size`` rows at a time, other
formats are read into memory and converted a chunk at a time; several PREDICTIONS files or
a glob are one dataset; ``--workers N`` runs the main pass in N processes), and writes the report
folder once, atomically, at the end (:mod:`~bensemble.app.evaluate.write`). Any bad input exits
with status 2 and one line on stderr, and nothing is written; an input is never written over.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

__all__ = ["add_evaluate_arguments", "run_evaluate"]

PROG = "bensemble evaluate"
DEFAULT_OUT = "bensemble-report"
#: Most ECE bins the command accepts (far beyond any sample size it can score).
MAX_BINS = 10**6
_DEFAULT_BOOTSTRAP = 200  # bensemble.app.bootstrap.DEFAULT_BOOTSTRAP (no torch import here)
_SCORES = ("lac", "aps", "raps")  # bensemble.app.evaluate.options.CONFORMAL_SCORES


def _eece_bins_option(value: str) -> int | str:
    """``--eece-bins``: "auto" or an integer (argparse names the option on failure)."""
    if value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be 'auto' or an integer (got {value!r})") from None


def _positive_int_option(value: str) -> int:
    """A positive integer (argparse names the option on failure)."""
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer (got {value!r})")
    return n


#: The ``bensemble evaluate`` description (``bensemble evaluate --help``).
EVALUATE_DESCRIPTION = (
    "Score saved member predictions against labels. PREDICTIONS is [M, N, K] "
    "(M members, N samples, K classes) or [N, K] for one model, as .npy (memory-mapped, "
    "read a chunk at a time), .npz (file.npz:key to pick an array), .pt (torch.load "
    "weights_only=True) or a header-less .csv (N rows x K columns; for M members stack them "
    "as M*N rows and pass --members M). Several PREDICTIONS files (or a quoted glob) are "
    "shards of one dataset, in the order given. LABELS are N integers (one file, or one "
    "per shard)."
)


def add_evaluate_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``evaluate`` sub-command's arguments to ``p`` (:mod:`bensemble.cli` registers the
    command, with :data:`EVALUATE_DESCRIPTION`); returns ``p``."""
    p.add_argument(
        "predictions", nargs="+", metavar="PREDICTIONS", help="member probabilities or logits"
    )
    p.add_argument(
        "--labels", required=True, nargs="+", metavar="LABELS", help="integer labels [N]"
    )
    p.add_argument("--logits", action="store_true", help="PREDICTIONS are logits (softmax them)")
    p.add_argument(
        "--calibration-split",
        type=float,
        default=None,
        metavar="FRACTION",
        help="fit temperature scaling (first half) and the conformal threshold (second half) "
        "on this random fraction; report on the rest",
    )
    p.add_argument("--alpha", type=float, default=0.1, help="conformal miscoverage (0.1)")
    p.add_argument("--conformal-score", default="lac", choices=_SCORES, help="conformal score")
    p.add_argument("--n-bins", type=int, default=15, help="bins of ECE / classwise ECE (15)")
    p.add_argument(
        "--eece-bins",
        type=_eece_bins_option,
        default="auto",
        help="bins of EECE: auto (about sqrt(N), at most 200) or an integer",
    )
    p.add_argument(
        "--eece-seeds", type=int, default=1, help="K-means seeds the EECE averages (1); sd shown"
    )
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the split, the EECE and the bootstrap (0)"
    )
    p.add_argument(
        "--bootstrap",
        type=int,
        default=_DEFAULT_BOOTSTRAP,
        metavar="B",
        help=f"bootstrap replicates of the 95%% intervals ({_DEFAULT_BOOTSTRAP}; 0: none)",
    )
    p.add_argument(
        "--members",
        type=int,
        default=None,
        metavar="M",
        help="PREDICTIONS is a 2-D table of M*N rows, member 0's N rows first",
    )
    p.add_argument(
        "--members-axis",
        type=int,
        choices=(0, 1),
        default=0,
        help="axis of a 3-D PREDICTIONS holding the members: 0 for [M, N, K], 1 for [N, M, K]",
    )
    p.add_argument(
        "--chunk-size",
        type=_positive_int_option,
        default=None,
        metavar="N",
        help="samples per read (default: about 2^18 values, M x K per sample); a tuning knob: "
        "memory against passes, the same numbers",
    )
    p.add_argument(
        "--workers",
        type=_positive_int_option,
        default=1,
        metavar="N",
        help="processes for the main pass over the shards, and threads for the EECE's per-class "
        "K-means fits (1)",
    )
    p.add_argument(
        "--out",
        default=None,
        help=f"report folder ({DEFAULT_OUT}; with --json and no --out nothing is written)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier report in --out (a folder holding other files is never replaced)",
    )
    p.add_argument("--json", action="store_true", help="print JSON to stdout instead of tables")
    from bensemble.app.evaluate.cli_options import add_task_options

    add_task_options(p)
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no per-stage timing lines (they appear on a terminal's stderr only)",
    )
    return p


def _one_line(exc: BaseException | Warning | str) -> str:
    text = " ".join(str(exc).split()).removeprefix(f"{PROG}: ")
    return text.replace("pass from_logits=True", "pass --logits").replace(
        "from_logits=True", "--logits"
    )


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:  # pragma: no cover - permission problems
        return a.resolve() == b.resolve()


def _check_out(out: Path, inputs: list[Path], files: list[str], overwrite: bool) -> None:
    """Refuse an ``--out`` that is an input, holds an input, or may not be replaced.

    The report folder is replaced as a whole, so an input inside it would be lost whatever its
    name (``files``, the names the report will have, are named in the message when they clash).
    """
    from bensemble.io import InputError
    from bensemble.reporting._folder import check_report_folder

    for src in inputs:
        if _same_file(out, src) or out.resolve() == src.resolve():
            raise InputError(f"--out {out} is an input file; choose another folder")
    for src in inputs:
        if out.resolve() in src.resolve().parents:
            clash = f" (as {src.name})" if src.name in files else ""
            raise InputError(
                f"--out {out} would overwrite the input {src}{clash}: the report folder is "
                "replaced as a whole; choose another folder"
            )
    check_report_folder(out, overwrite=overwrite, fn=PROG)


def run_evaluate(args: argparse.Namespace) -> int:
    """Run ``bensemble evaluate`` for parsed ``args``; returns the exit status.

    Exit status 2 with one line ``bensemble evaluate: error: ...`` on stderr for any bad input,
    before anything is written; 1 if writing the report fails; 0 on success. Warnings (logits
    that already look like probabilities, a temperature at its bound, ...) are one line each,
    ``bensemble evaluate: warning: ...``, and the run goes on. With ``--json`` and no ``--out``
    nothing is written. On a terminal, one line per stage says where the time went, from
    starting Python to writing the folder.
    """
    if getattr(args, "task", "classification") == "regression":
        from bensemble.app.evaluate.regression_cli import run_regression

        return run_regression(args)
    from bensemble.app.evaluate.timing import Timings, process_seconds

    timings = Timings(enabled=not getattr(args, "no_progress", False))
    started = process_seconds()
    t0 = time.perf_counter()
    import torch  # noqa: F401 - timed as a stage of its own

    from bensemble.app.evaluate import api, write  # noqa: F401

    timings.add("starting Python and importing", (started or 0.0) + time.perf_counter() - t0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = _out_folder(args)
            ev = _evaluate_args(args, out, timings)
        except ValueError as exc:  # the error alone: a usage error is one line
            print(f"{PROG}: error: {_one_line(exc)}", file=sys.stderr)
            return 2
    _print_warnings(caught)

    def named(paths: list) -> str | list[str]:  # one file as a string, shards as a list
        return str(paths[0]) if len(paths) == 1 else [str(p) for p in paths]

    inputs = {
        "predictions": named(args.predictions),
        "labels": named(args.labels),
        "logits": bool(args.logits),
    }
    if args.chunk_size is not None:
        inputs["chunk_size"] = args.chunk_size
    if args.workers > 1:
        inputs["workers"] = args.workers
    extra = {"inputs": inputs}
    report = None
    if out is not None:
        from bensemble.app.evaluate.write import write_evaluation

        try:
            report = write_evaluation(
                ev, out, extra=extra, overwrite=args.overwrite, timings=timings
            )
        except (OSError, ValueError) as exc:
            print(
                f"{PROG}: error: could not write the report to {out}: {_one_line(exc)}",
                file=sys.stderr,
            )
            return 1
    from bensemble.app.evaluate.cli_options import print_outcome

    return print_outcome(args, ev, extra, report, out, _print_tables)


def _out_folder(args: argparse.Namespace) -> Path | None:
    """The report folder: ``--out``, the default without ``--json``, else ``None`` (no files)."""
    from bensemble.reporting._folder import check_out_text

    if args.out is None:
        return None if args.json else Path(DEFAULT_OUT)
    return check_out_text(args.out, PROG)


def _print_warnings(caught: list[warnings.WarningMessage]) -> None:
    seen: set[str] = set()
    for w in caught:
        if issubclass(w.category, (UserWarning, RuntimeWarning)):
            text = _one_line(w.message).replace("leave logits out", "leave out --logits")
            if text not in seen:
                seen.add(text)
                print(f"{PROG}: warning: {text}", file=sys.stderr)


def _options(args: argparse.Namespace):
    """The checked :class:`~bensemble.app.evaluate.options.EvaluateOptions` of ``args``."""
    from bensemble import _validation as V
    from bensemble._options import check_seed
    from bensemble.app.bootstrap import check_bootstrap
    from bensemble.app.evaluate.cli_options import check_classification_args, options_from_args
    from bensemble.app.evaluate.options import EvaluateOptions
    from bensemble.io import InputError

    fn = PROG
    check_classification_args(args)
    V.check_probability(args.alpha, "--alpha", fn)
    V.check_n_bins(args.n_bins, fn, name="--n-bins")
    if args.n_bins > MAX_BINS:  # per-bin arrays: 2**40 bins would reach the allocator
        raise InputError(f"--n-bins must be at most {MAX_BINS} (got {args.n_bins})")
    if args.eece_bins != "auto":
        V.check_n_bins(args.eece_bins, fn, name="--eece-bins")
    V.check_positive_int(args.eece_seeds, "--eece-seeds", fn)
    if args.calibration_split is not None:
        V.check_probability(args.calibration_split, "--calibration-split", fn)
    check_seed(args.seed, "--seed", fn)
    check_bootstrap(args.bootstrap, "--bootstrap", fn)
    options = options_from_args(
        EvaluateOptions,
        args,
        chunk_size=args.chunk_size or "auto",
        progress=not getattr(args, "no_progress", False),
        recalibrate_epistemic=bool(getattr(args, "recalibrate_epistemic", False)),
    )
    return options.checked(fn)


def _evaluate_args(args: argparse.Namespace, out: Path | None, timings):
    """Check the options, open the inputs and the report folder, then evaluate (nothing is
    written)."""
    from bensemble.app.evaluate.api import evaluate_source
    from bensemble.app.evaluate.options import MAX_PER_CLASS
    from bensemble.app.evaluate.sources import Predictions, ShardSpec, expand_paths, read_labels
    from bensemble.app.evaluate.write import planned_files
    from bensemble.io import split_key

    options = _options(args)
    with timings.stage("opening the inputs"):
        paths = expand_paths(list(args.predictions), "predictions")
        label_paths = expand_paths(list(args.labels), "labels")
        specs = [
            ShardSpec(
                path=path,
                members=args.members,
                members_axis=args.members_axis,
                name="predictions",
                where=str(split_key(path)[0]),
            )
            for path in paths
        ]
        source = Predictions(specs, None, from_logits=args.logits)
        block = options.block(source.n, source.m * source.k)
        source.set_labels(read_labels(label_paths, source.sizes, source.k, block=block))
    if out is not None:
        inputs = [split_key(p)[0] for p in [*paths, *label_paths]]
        files = planned_files(
            ensemble=source.m > 1,
            split=options.calibration_split is not None,
            per_class=source.k <= MAX_PER_CLASS,
            intervals=options.bootstrap > 0,
            recalibrated=options.recalibrate_epistemic,
        )
        _check_out(out, inputs, files, args.overwrite)
    return evaluate_source(
        source, options, workers=args.workers, backend="processes", timings=timings, fn=PROG
    )


def _print_tables(ev) -> None:
    from bensemble.reporting.report import format_table

    s = ev.setup
    head = f"{s['members']} member(s), {s['samples']} samples, {s['classes']} classes"
    if ev.temperature is not None:
        head += (
            f"; split: {s['n_temperature']} temperature / {s['n_conformal']} conformal / "
            f"{s['n_test']} test (seed {s['seed']})"
        )
    print(head)
    print()
    for v in ev.verdicts:
        print(f"{v['question']} {v['answer']}. {v['detail']}")
    for name, title, rows in ev.tables():
        print(f"\n{title}")
        print(format_table(rows))
        for note in ev.table_notes(name):
            print(f"  {note}")
    if ev.ensemble is None:
        print("\n(single model: no uncertainty decomposition or EECE)")
    for note in ev.notes:
        print(f"\nnote: {note}")
