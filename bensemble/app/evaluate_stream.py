"""``bensemble evaluate --chunk-size N``: the command line of the chunked evaluation.

:func:`add_chunk_size_argument` adds the option to the ``evaluate`` parser and
:func:`evaluate_chunked_args` evaluates when it is given
(:func:`~bensemble.app.evaluate_cli.run_evaluate` runs the command): the predictions must be a
``.npy`` file (opened memory-mapped; any other format exits 2 with one line), the labels may be
any format :func:`~bensemble.io.load_labels` reads, and the numbers come from
:func:`~bensemble.app.evaluate_memmap.evaluate_memmap`. Exit status, messages and ``--json`` are
those of ``run_evaluate``; the report folder holds the files of an in-memory run with
``--bootstrap 0`` (the tables, ``summary.json``, the figures and ``report.html``, written by
the same :func:`~bensemble.app.evaluate_report.write_evaluation`; the figures are drawn from the
streamed per-bin sums and the gathered confidences, :mod:`bensemble.app.evaluate_memmap`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from bensemble import _validation as V
from bensemble._options import check_seed
from bensemble.app.evaluate import MAX_PER_CLASS, Evaluation
from bensemble.app.evaluate_cli import (
    MAX_BINS,
    _check_out,
)
from bensemble.app.evaluate_memmap import evaluate_memmap
from bensemble.app.evaluate_report import planned_files
from bensemble.io import InputError, load_labels, split_key

__all__ = [
    "add_chunk_size_argument",
    "evaluate_memmap",
    "evaluate_chunked_args",
]

#: Options of ``bensemble evaluate`` that need every sample in memory (refused with --chunk-size,
#: with the reason): each bootstrap resample reweights every prediction of the reported part.
NOT_STREAMED = (
    (
        "bootstrap",
        "--bootstrap",
        "its intervals resample every prediction at once, which --chunk-size never holds in "
        "memory; the chunked report is that of --bootstrap 0 (no intervals, verdicts read the "
        "point estimates)",
    ),
)


def _chunk_size_option(value: str) -> int:
    """``--chunk-size``: a positive integer (argparse names the option on failure)."""
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer (got {value!r})")
    return n


def add_chunk_size_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--chunk-size N`` to the ``evaluate`` parser."""
    parser.add_argument(
        "--chunk-size",
        type=_chunk_size_option,
        default=None,
        metavar="N",
        help="read a .npy PREDICTIONS memory-mapped, N samples at a time (bounded memory, the "
        "same numbers and report; no bootstrap intervals)",
    )


# ----------------------------------------------------------------------------- command line
def _open_predictions(args: argparse.Namespace, fn: str) -> Any:
    """The memory-mapped ``[M, N, K]`` (or ``[N, K]``) array of ``args.predictions``."""
    file, key = split_key(args.predictions)
    if key is not None or file.suffix.lower() != ".npy":
        raise InputError(
            f"--chunk-size reads .npy files only, memory-mapped (got {args.predictions}); save "
            "the array with numpy.save or leave out --chunk-size"
        )
    if not file.is_file():
        what = "does not exist" if not file.exists() else "is not a file"
        raise InputError(f"`predictions` file {file} {what}")
    try:
        array = np.load(file, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise InputError(f"`predictions` file {file} is not a readable .npy file ({exc})") from None
    if args.members is not None:
        members = V.check_positive_int(args.members, "--members", fn)
        if array.ndim != 2 or array.shape[0] % members:
            raise InputError(
                f"`predictions` must be a 2-D [M*N, K] table with a multiple of --members "
                f"{members} rows (got shape {tuple(array.shape)})"
            )
        array = array.reshape(members, array.shape[0] // members, array.shape[1])
    if array.ndim == 3 and args.members_axis == 1:
        array = array.transpose(1, 0, 2)
    if array.ndim not in (2, 3):
        raise InputError(
            f"`predictions` must be 2-D [N, K] or 3-D [M, N, K] (got shape {tuple(array.shape)})"
        )
    return array


def evaluate_chunked_args(args: argparse.Namespace, fn: str, out: Path | None) -> Evaluation:
    """``bensemble evaluate ... --chunk-size N`` for parsed ``args`` (called by
    :func:`~bensemble.app.evaluate_cli.run_evaluate`): check everything, open the file
    memory-mapped, then evaluate (nothing is written)."""
    for attr, option, why in NOT_STREAMED:
        if getattr(args, attr, None):  # None (not given) and 0 are accepted
            raise InputError(
                f"{option} {getattr(args, attr)} cannot be used with --chunk-size: {why}; leave "
                f"out {option} (or pass 0), or leave out --chunk-size to get intervals"
            )
    V.check_probability(args.alpha, "--alpha", fn)
    V.check_n_bins(args.n_bins, fn, name="--n-bins")
    if args.n_bins > MAX_BINS:
        raise InputError(f"--n-bins must be at most {MAX_BINS} (got {args.n_bins})")
    if args.eece_bins != "auto":
        V.check_n_bins(args.eece_bins, fn, name="--eece-bins")
    V.check_positive_int(args.eece_seeds, "--eece-seeds", fn)
    if args.calibration_split is not None:
        V.check_probability(args.calibration_split, "--calibration-split", fn)
    check_seed(args.seed, "--seed", fn)
    array = _open_predictions(args, fn)
    n, k = array.shape[-2], array.shape[-1]
    labels = load_labels(args.labels, n=n, num_classes=k, fn=str(split_key(args.labels)[0]))
    if out is not None:
        inputs = [split_key(args.predictions)[0], split_key(args.labels)[0]]
        ensemble = array.ndim == 3 and array.shape[0] > 1
        files = planned_files(
            ensemble=ensemble,
            split=args.calibration_split is not None,
            per_class=k <= MAX_PER_CLASS,
            intervals=False,
        )
        _check_out(out, inputs, files, args.overwrite)
    return evaluate_memmap(
        array,
        labels,
        calibration_split=args.calibration_split,
        alpha=args.alpha,
        n_bins=args.n_bins,
        eece_bins=args.eece_bins,
        eece_seeds=args.eece_seeds,
        conformal_score=args.conformal_score,
        seed=args.seed,
        chunk_size=args.chunk_size,
        from_logits=args.logits,
        name="predictions",
        source=str(split_key(args.predictions)[0]),
    )
