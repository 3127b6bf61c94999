"""``bensemble evaluate``: metrics, uncertainty, temperature scaling and conformal sets for saved
predictions.

Given member probabilities ``[M, N, K]`` (``M = 1`` for a single model) and labels ``[N]``,
:func:`evaluate_predictions` reports, for the ensemble-mean prediction
``p(x) = (1/M) sum_m p_m(x)``: accuracy, NLL, Brier score, top-label ECE and classwise ECE; and
for ``M > 1`` the mean total / aleatoric / epistemic uncertainty of the members and their
expected epistemic calibration error (EECE).

With ``calibration_split=f`` the samples are shuffled with a seeded generator and the first
``round(f * N)`` form the calibration part, the rest the test part. The calibration part is cut
in two *separate* halves, as the practitioner's guide requires (reusing conformal labels to tune
the temperature breaks the split-conformal guarantee):

1. the first half fits :class:`~bensemble.calibration.TemperatureScaling` on ``log p(x)``
   (the log of the ensemble mean: "pool, then calibrate"; ``softmax(log p) = p``, so ``T = 1``
   is the unscaled prediction, and for one model ``log softmax(z)`` scales exactly like ``z``);
2. the second half calibrates a :class:`~bensemble.conformal.SplitConformalClassifier` on the
   temperature-scaled probabilities, with the temperature already fixed;
3. every number is reported on the untouched test part: metrics before and after scaling,
   conformal coverage and mean set size (target ``1 - alpha``).

The temperature acts on the pooled prediction only; member-level quantities (the uncertainty
decomposition and EECE) are those of the unscaled members.

The command-line wrapper (:func:`run_evaluate`) validates every input before it creates the
report folder, never writes over an input file, and writes each file atomically.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bensemble import _validation as V
from bensemble.app._folder import check_out_text, check_report_folder
from bensemble.app._options import check_seed
from bensemble.app.evaluate_report import planned_files, write_evaluation
from bensemble.app.report import format_table, to_json
from bensemble.io import InputError, load_labels, load_predictions, renormalised, split_key

__all__ = [
    "Evaluation",
    "add_evaluate_parser",
    "evaluate_predictions",
    "planned_files",
    "run_evaluate",
    "split_indices",
    "write_evaluation",
]

PROG = "bensemble evaluate"
DEFAULT_OUT = "bensemble-report"
#: Most ECE bins the command accepts (far beyond any sample size it can score in memory).
MAX_BINS = 10**6
CONFORMAL_SCORES = ("lac", "aps", "raps")


@dataclass
class Evaluation:
    """What :func:`evaluate_predictions` found.

    Attributes:
        setup: Sizes and options (``members``, ``samples``, ``classes``, split sizes, ...).
        metrics: One row per stage (``"unscaled"``, and ``"temperature-scaled"`` with a split):
            ``n``, ``accuracy``, ``nll``, ``brier``, ``ece``, ``classwise_ece``.
        ensemble: For ``M > 1``: ``members``, ``mean_total``, ``mean_aleatoric``,
            ``mean_epistemic`` (nats, entropy decomposition) and ``eece``; else ``None``.
        conformal: With a split: ``score``, ``alpha``, ``target_coverage``, ``coverage``,
            ``mean_set_size``, ``n_calibration``, ``n_test``; else ``None``.
        temperature: The fitted temperature, or ``None`` without a split.
        probs: Ensemble-mean probabilities ``[n, K]`` of the reported part (for figures).
        scaled_probs: Their temperature-scaled version ``[n, K]``, or ``None``.
        member_probs: Member probabilities ``[M, n, K]`` of the reported part.
        labels: Labels ``[n]`` of the reported part.
        eece_details: The :class:`~bensemble.metrics.EECEDetails` behind ``ensemble["eece"]``
            (``M > 1``), for the epistemic reliability diagram.
    """

    setup: dict[str, Any]
    metrics: list[dict[str, Any]]
    ensemble: dict[str, Any] | None
    conformal: dict[str, Any] | None
    temperature: float | None
    probs: torch.Tensor = field(repr=False)
    scaled_probs: torch.Tensor | None = field(repr=False)
    member_probs: torch.Tensor = field(repr=False)
    labels: torch.Tensor = field(repr=False)
    eece_details: Any = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The numbers as plain JSON-ready Python objects (no tensors)."""
        return {
            "setup": dict(self.setup),
            "temperature": self.temperature,
            "metrics": [dict(r) for r in self.metrics],
            "ensemble": None if self.ensemble is None else dict(self.ensemble),
            "conformal": None if self.conformal is None else dict(self.conformal),
        }

    def tables(self) -> list[tuple[str, str, list[dict[str, Any]]]]:
        """``(name, title, rows)`` for each table of the report, in print order."""
        part = "test part" if self.temperature is not None else "all samples"
        out = [("metrics", f"Ensemble-mean prediction ({part})", self.metrics)]
        if self.ensemble is not None:
            out.append(("ensemble", f"Member disagreement ({part})", [self.ensemble]))
        if self.conformal is not None:
            out.append(
                ("conformal", "Split conformal prediction sets (test part)", [self.conformal])
            )
        return out


def split_indices(
    n: int, fraction: float, *, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Seeded random split into temperature / conformal / test indices.

    A random permutation of ``range(n)`` (``torch.Generator`` seeded with ``seed``); its first
    ``n_cal = round(fraction * n)`` entries are the calibration part, the remaining ``n - n_cal``
    the test part. :func:`bensemble.conformal.split_calibration` (same seed) then cuts the
    calibration part into two disjoint halves: one fits the temperature, the other calibrates
    the conformal threshold.

    Raises:
        ValueError: ``fraction`` outside ``(0, 1)`` or a part that would be empty.
    """
    from bensemble.conformal import split_calibration

    fn = "split_indices"
    fraction = V.check_probability(fraction, "calibration_split", fn)
    seed = check_seed(seed, "seed", fn)
    n_cal = round(fraction * n)
    if n_cal < 2 or n - n_cal < 1:
        raise ValueError(
            f"{fn}: `calibration_split` must leave at least 2 calibration samples and 1 test "
            f"sample (got {fraction!r} of {n} samples: {n_cal} calibration, {n - n_cal} test)"
        )
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    cal, test = perm[:n_cal], perm[n_cal:]
    halves = split_calibration(torch.zeros(n_cal, dtype=torch.int64), seed=seed)
    return cal[halves.temperature], cal[halves.conformal], test


def _scores(probs: torch.Tensor, labels: torch.Tensor, n_bins: int) -> dict[str, Any]:
    from bensemble import metrics as M

    return {
        "n": int(labels.shape[0]),
        "accuracy": M.accuracy(probs, labels),
        "nll": M.negative_log_likelihood(probs, labels),
        "brier": M.brier_score(probs, labels),
        "ece": M.expected_calibration_error(probs, labels, n_bins=n_bins),
        "classwise_ece": M.classwise_calibration_error(probs, labels, n_bins=n_bins),
    }


def evaluate_predictions(
    member_probs: Any,
    labels: Any,
    *,
    calibration_split: float | None = None,
    alpha: float = 0.1,
    n_bins: int = 15,
    eece_bins: int | str = "auto",
    eece_seeds: int = 1,
    conformal_score: str = "lac",
    seed: int = 0,
) -> Evaluation:
    """Score saved predictions (formulas and protocol: module docstring).

    Args:
        member_probs: Member probabilities ``[M, N, K]`` (or ``[N, K]`` for one model).
        labels: Integer labels ``[N]`` in ``[0, K)``.
        calibration_split: Fraction in ``(0, 1)`` used for temperature scaling and conformal
            calibration (two separate halves); ``None`` reports on all samples, no scaling.
        alpha: Conformal miscoverage level in ``(0, 1)``.
        n_bins: Bins of the ECE and classwise ECE.
        eece_bins: Bins of the EECE (``M > 1`` only): ``"auto"`` (about ``sqrt(N)``, see
            :func:`bensemble.metrics.epistemic.auto_n_bins`) or an integer.
        eece_seeds: K-means seeds the EECE averages (their sd is reported as ``eece_sd``).
        conformal_score: ``"lac"``, ``"aps"`` or ``"raps"``.
        seed: Seeds the split, the EECE and randomised conformal scores.

    Returns:
        An :class:`Evaluation`.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> member_probs = torch.softmax(torch.randn(3, 200, 4, generator=g), dim=-1)
        >>> labels = torch.randint(0, 4, (200,), generator=g)
        >>> ev = evaluate_predictions(member_probs, labels, calibration_split=0.5, seed=0)
        >>> ev.setup["n_temperature"], ev.setup["n_conformal"], ev.setup["n_test"]
        (50, 50, 100)
        >>> [row["stage"].split()[0] for row in ev.metrics]
        ['unscaled', 'temperature-scaled']
    """
    fn = "evaluate_predictions"
    p = V.to_tensor(member_probs, "member_probs", fn)
    p = renormalised(V.as_probs(p, "member_probs", fn, ndim=(2, 3)), p.dtype)
    if p.ndim == 2:
        p = p.unsqueeze(0)
    m, n, k = p.shape
    y = V.as_labels(labels, "labels", fn, n=n, num_classes=k)
    alpha = V.check_probability(alpha, "alpha", fn)
    n_bins = V.check_n_bins(n_bins, fn)
    if eece_bins != "auto":
        eece_bins = V.check_n_bins(eece_bins, fn, name="eece_bins")
    eece_seeds = V.check_positive_int(eece_seeds, "eece_seeds", fn)
    conformal_score = V.check_option(conformal_score, "conformal_score", CONFORMAL_SCORES, fn)
    seed = check_seed(seed, "seed", fn)

    setup: dict[str, Any] = {
        "members": m,
        "samples": n,
        "classes": k,
        "n_bins": n_bins,
        "seed": seed,
        "calibration_split": calibration_split,
    }
    temperature = None
    conformal = None
    scaled = None
    if calibration_split is None:
        test = torch.arange(n)
        setup.update(n_temperature=0, n_conformal=0, n_test=n)
    else:
        temp_idx, conf_idx, test = split_indices(n, calibration_split, seed=seed)
        setup.update(n_temperature=len(temp_idx), n_conformal=len(conf_idx), n_test=len(test))

    mean = p.mean(0)
    p_test, y_test, members_test = mean[test], y[test], p[:, test]
    rows = [{"stage": "unscaled", "part": "all" if calibration_split is None else "test"}]
    rows[0].update(_scores(p_test, y_test, n_bins))

    if calibration_split is not None:
        from bensemble.calibration import CalibrationFitError, TemperatureScaling
        from bensemble.conformal import SplitConformalClassifier, coverage, mean_set_size

        log_mean = mean.clamp_min(torch.finfo(mean.dtype).tiny).log()
        scaler = TemperatureScaling(on_boundary="warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                scaler.fit(log_mean[temp_idx], y[temp_idx])
        except CalibrationFitError as exc:
            raise ValueError(
                f"{fn}: cannot fit a temperature on the calibration part ({exc})"
            ) from None
        temperature = float(scaler.temperature.item())
        notes = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        setup["temperature_converged"] = bool(scaler.converged_)
        setup["temperature_warning"] = " ".join(" ".join(notes).split()) or None
        with torch.no_grad():
            scaled_all = torch.softmax(scaler(log_mean).to(torch.float64), dim=-1)
        scaled = scaled_all[test]
        row = {"stage": f"temperature-scaled (T={temperature:.3f})", "part": "test"}
        row.update(_scores(scaled, y_test, n_bins))
        rows.append(row)

        generator = torch.Generator().manual_seed(seed)
        cp = SplitConformalClassifier(conformal_score, alpha=alpha, generator=generator)
        cp.calibrate(scaled_all[conf_idx], y[conf_idx])
        sets = cp.predict_set(scaled)
        conformal = {
            "score": conformal_score,
            "alpha": alpha,
            "target_coverage": 1.0 - alpha,
            "coverage": coverage(sets, y_test),
            "mean_set_size": mean_set_size(sets),
            "n_calibration": len(conf_idx),
            "n_test": len(test),
        }

    ensemble = None
    eece_details = None
    if m > 1:
        from bensemble.metrics import expected_epistemic_calibration_error
        from bensemble.uncertainty import decompose_classification_uncertainty

        total, aleatoric, epistemic = decompose_classification_uncertainty(members_test)
        eece_details = expected_epistemic_calibration_error(
            members_test,
            y_test,
            n_bins=eece_bins,
            seed=seed,
            n_seeds=eece_seeds,
            return_details=True,
        )
        ensemble = {
            "members": m,
            "mean_total": float(total.mean()),
            "mean_aleatoric": float(aleatoric.mean()),
            "mean_epistemic": float(epistemic.mean()),
            "eece": float(eece_details.value),
            "eece_sd": eece_details.seed_sd,  # over eece_seeds K-means seeds (None for one)
            "eece_seeds": eece_seeds,
            "eece_bins": eece_details.n_bins,  # "auto" resolved
            "eece_bins_fitted": eece_details.n_bins_fitted,
        }
    return Evaluation(
        setup=setup,
        metrics=rows,
        ensemble=ensemble,
        conformal=conformal,
        temperature=temperature,
        probs=p_test,
        scaled_probs=scaled,
        member_probs=members_test,
        labels=y_test,
        eece_details=eece_details,
    )


# ----------------------------------------------------------------------------- command line
def _eece_bins_option(value: str) -> int | str:
    """``--eece-bins``: "auto" or an integer (argparse names the option on failure)."""
    if value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be 'auto' or an integer (got {value!r})") from None


def add_evaluate_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``evaluate`` sub-command on ``sub`` (from ``add_subparsers``)."""
    p = sub.add_parser(
        "evaluate",
        help="score saved predictions: metrics, uncertainty, scaling, conformal sets",
        description="Score saved member predictions against labels. PREDICTIONS is [M, N, K] "
        "(M members, N samples, K classes) or [N, K] for one model, as .npy, .npz "
        "(file.npz:key to pick an array), .pt (torch.load weights_only=True) or a header-less "
        ".csv (N rows x K columns; for M members stack them as M*N rows and pass --members M). "
        "LABELS are N integers.",
    )
    p.add_argument("predictions", metavar="PREDICTIONS", help="member probabilities or logits")
    p.add_argument("--labels", required=True, metavar="LABELS", help="integer labels [N]")
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
    p.add_argument(
        "--conformal-score", default="lac", choices=CONFORMAL_SCORES, help="conformal score"
    )
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
    p.add_argument("--seed", type=int, default=0, help="seed of the split and the EECE (0)")
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
    from bensemble.app.evaluate_stream import add_chunk_size_argument

    add_chunk_size_argument(p)
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
    nothing is written.
    """
    fn = PROG
    if getattr(args, "chunk_size", None) is not None:  # memory-mapped .npy, chunk by chunk
        from bensemble.app.evaluate_stream import run_evaluate_chunked

        return run_evaluate_chunked(args)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = _out_folder(args, fn)
            ev = _evaluate_args(args, fn, out)
        except ValueError as exc:  # the error alone: a usage error is one line
            print(f"{PROG}: error: {_one_line(exc)}", file=sys.stderr)
            return 2
    _print_warnings(caught)
    extra = {
        "inputs": {
            "predictions": str(args.predictions),
            "labels": str(args.labels),
            "logits": bool(args.logits),
        }
    }
    report = None
    if out is not None:
        try:
            report = write_evaluation(ev, out, extra=extra, overwrite=args.overwrite)
        except (OSError, ValueError) as exc:
            print(
                f"{PROG}: error: could not write the report to {out}: {_one_line(exc)}",
                file=sys.stderr,
            )
            return 1
        for problem in report.problems:
            print(f"{PROG}: warning: {problem}", file=sys.stderr)
    if args.json:
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
    _print_tables(ev)
    print(f"\nreport: {len(report.files)} files in {out}{os.sep}")
    return 0


def _out_folder(args: argparse.Namespace, fn: str) -> Path | None:
    """The report folder: ``--out``, the default without ``--json``, else ``None`` (no files)."""
    if args.out is None:
        return None if args.json else Path(DEFAULT_OUT)
    return check_out_text(args.out, fn)


def _print_warnings(caught: list[warnings.WarningMessage]) -> None:
    seen: set[str] = set()
    for w in caught:
        if issubclass(w.category, (UserWarning, RuntimeWarning)):
            text = _one_line(w.message).replace("leave logits out", "leave out --logits")
            if text not in seen:
                seen.add(text)
                print(f"{PROG}: warning: {text}", file=sys.stderr)


def _evaluate_args(args: argparse.Namespace, fn: str, out: Path | None) -> Evaluation:
    """Load and check everything, then evaluate (nothing is written)."""
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
    probs = load_predictions(
        args.predictions,
        logits=args.logits,
        members=args.members,
        members_axis=args.members_axis,
        fn=str(split_key(args.predictions)[0]),
    )
    m, n, k = probs.shape
    labels = load_labels(args.labels, n=n, num_classes=k, fn=str(split_key(args.labels)[0]))
    if out is not None:
        inputs = [split_key(args.predictions)[0], split_key(args.labels)[0]]
        split = args.calibration_split is not None
        _check_out(out, inputs, planned_files(ensemble=m > 1, split=split), args.overwrite)
    return evaluate_predictions(
        probs,
        labels,
        calibration_split=args.calibration_split,
        alpha=args.alpha,
        n_bins=args.n_bins,
        eece_bins=args.eece_bins,
        eece_seeds=args.eece_seeds,
        conformal_score=args.conformal_score,
        seed=args.seed,
    )


def _print_tables(ev: Evaluation) -> None:
    s = ev.setup
    head = f"{s['members']} member(s), {s['samples']} samples, {s['classes']} classes"
    if ev.temperature is not None:
        head += (
            f"; split: {s['n_temperature']} temperature / {s['n_conformal']} conformal / "
            f"{s['n_test']} test (seed {s['seed']})"
        )
    print(head)
    for _name, title, rows in ev.tables():
        print(f"\n{title}")
        print(format_table(rows))
    if ev.ensemble is None:
        print("\n(single model: no uncertainty decomposition or EECE)")
    if s.get("temperature_warning"):
        print(f"\nnote: {s['temperature_warning']}")
