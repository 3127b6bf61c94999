"""The evaluation behind ``bensemble evaluate --chunk-size N``, read from a memory-mapped ``.npy``.

:func:`evaluate_memmap` reports the numbers of
:func:`~bensemble.app.evaluate.evaluate_predictions` (same protocol, same seeds) while holding
``O(chunk_size * M * K)`` of the predictions in memory at a time, up to float64 summation order:

* without a split: one pass over the file (plus the EECE's K-means passes,
  :mod:`bensemble.metrics.streaming_eval`);
* with ``calibration_split``: the same :func:`~bensemble.app.evaluate.split_indices`; the
  temperature and conformal calibration rows are gathered into memory as ensemble-mean
  probabilities ``[n_cal, K]`` (ascending reads from the file, a chunk at a time) and fitted
  exactly as in memory; the test part is streamed: unscaled and
  temperature-scaled metrics (``log p / T`` per chunk) and conformal coverage / set size /
  empty sets as additive counts (:mod:`bensemble.app.evaluate_split`). Randomised APS / RAPS
  sets get the uniforms the in-memory ``predict_set`` draws for each test sample (held as one
  float64 per sample).

Every table of the in-memory report is there with the same numbers except the bootstrap
intervals (``setup["bootstrap"]`` is 0, and the verdicts read the point estimates as with
``--bootstrap 0``): the per-class table and the conformal empty-set rate and per-class coverage
are additive sums per chunk. The selective table (misclassification AUROC, AURC) and the
risk-coverage figure rank every confidence, so they are computed exactly from the **gathered**
part: one float64 confidence ``max_k p_k`` and one boolean "argmax is right" per reported sample
and stage (``O(N)`` scalars, not ``O(N * M * K)``); the two numbers by
:mod:`bensemble.metrics._selective_sorted` (the right and wrong predictions' confidences sorted in
place, one more float64 per sample; the in-memory functions' sort index and temporaries take
about 1 GB at ``N = 10^7``), the figure by the in-memory display.

Besides the chunk, memory holds the labels, those gathered scalars and, with a split, one boolean
per sample and the test indices. The other figures come from the streamed sums: the reliability
diagrams from the ECE's per-bin sums, the epistemic reliability diagram from the EECE's.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

from bensemble import _progress
from bensemble import _validation as V
from bensemble._options import check_seed
from bensemble.app.evaluate import CONFORMAL_SCORES, Evaluation, split_indices
from bensemble.app.evaluate_cli import PROG
from bensemble.app.evaluate_report import top_confidence
from bensemble.app.evaluate_split import CalibratedPart
from bensemble.app.evaluate_stats import class_rows, selective_from_gathered
from bensemble.metrics._epistemic_checks import resolve_n_bins
from bensemble.metrics._kmeans import resolve_seed
from bensemble.metrics._kmeans_batched import single_threaded
from bensemble.metrics.streaming_epistemic import EECEMeter, UncertaintyMeter
from bensemble.metrics.streaming_eval import (
    MemberRows,
    canonical_order_chunked,
    eece_result,
    fit_centroids_chunked,
    metric_meters,
)

__all__ = ["ChunkedEvaluation", "evaluate_memmap"]


def evaluate_memmap(
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
    chunk_size: int = 65_536,
    from_logits: bool = False,
    progress: bool | None = None,
    name: str = "member_probs",
    source: str | None = None,
) -> ChunkedEvaluation:
    """:func:`~bensemble.app.evaluate.evaluate_predictions` of an ``[M, N, K]`` (or ``[N, K]``)
    array read ``chunk_size`` samples at a time (module docstring).

    Args:
        member_probs: ``[M, N, K]`` or ``[N, K]`` array, typically
            :func:`~bensemble.metrics.streaming_eval.open_memmap` of a ``.npy`` file.
        labels: ``[N]`` integer labels (held in memory).
        calibration_split, alpha, n_bins, eece_bins, eece_seeds, conformal_score, seed: as in
            :func:`~bensemble.app.evaluate.evaluate_predictions`.
        chunk_size: samples per read.
        from_logits: the array holds logits (softmax per chunk, in float64).
        progress: tqdm bars (``None``: only on a terminal).
        name, source: the argument and the file named in messages about the predictions.

    Returns:
        A :class:`ChunkedEvaluation` with the numbers of the in-memory :class:`Evaluation`
        with ``bootstrap=0`` (``setup``, ``metrics``, ``selective``, ``ensemble``,
        ``conformal``, ``temperature``, ``per_class``, ``notes``, ``verdicts``), up to float64
        summation order.
    """
    fn = "evaluate_predictions"
    where = fn if source is None else source
    rows = MemberRows(member_probs, from_logits=from_logits, name=name, fn=where)
    m, n, k = rows.m, rows.n, rows.k
    y = V.as_labels(labels, "labels", fn, n=n, num_classes=k)
    alpha = V.check_probability(alpha, "alpha", fn)
    n_bins = V.check_n_bins(n_bins, fn)
    if eece_bins != "auto":
        eece_bins = V.check_n_bins(eece_bins, fn, name="eece_bins")
    eece_seeds = V.check_positive_int(eece_seeds, "eece_seeds", fn)
    conformal_score = V.check_option(conformal_score, "conformal_score", CONFORMAL_SCORES, fn)
    seed = check_seed(seed, "seed", fn)
    chunk_size = V.check_positive_int(chunk_size, "chunk_size", fn)
    enabled = True if progress is None else V.check_bool(progress, "progress", fn)
    setup: dict[str, Any] = {
        "members": m,
        "samples": n,
        "classes": k,
        "n_bins": n_bins,
        "seed": seed,
        "calibration_split": calibration_split,
        "bootstrap": 0,  # intervals need every sample in memory
    }
    split = None
    if calibration_split is None:
        positions = None
        setup.update(n_temperature=0, n_conformal=0, n_test=n)
    else:
        temp_idx, conf_idx, test = split_indices(n, calibration_split, seed=seed)
        setup.update(n_temperature=len(temp_idx), n_conformal=len(conf_idx), n_test=len(test))
        positions = test.numpy()
        split = CalibratedPart(
            rows, y, temp_idx, conf_idx, test, conformal_score, alpha, seed, chunk_size
        )
        setup["temperature_converged"] = split.converged
        setup["temperature_warning"] = split.warning
    n_part = n if positions is None else len(positions)

    order, eece, uncertainty, seeds, bins = None, [], None, [], 0
    if m > 1:
        bins = resolve_n_bins(eece_bins, n_part, "expected_epistemic_calibration_error")
        first = resolve_seed(None, seed, fn)
        seeds = [(first + i) % 2**63 for i in range(eece_seeds)]
        order = canonical_order_chunked(rows, positions, block=chunk_size)
        fits = fit_centroids_chunked(
            rows, bins, seeds, positions=positions, order=order, block=chunk_size, progress=enabled
        )
        eece = [EECEMeter(c) for c in fits]
        uncertainty = UncertaintyMeter()
    variance = torch.zeros((), dtype=torch.float64)  # sum of Var_m p_m(y = k) over samples, k

    unscaled = metric_meters(k, n_bins)
    scaled = metric_meters(k, n_bins) if split is not None else {}
    # (confidence, correct) per reported sample and stage: O(N) scalars, in file order
    gathered = {"unscaled": _Gathered(n_part)}
    if split is not None:
        gathered["scaled"] = _Gathered(n_part)
    # single-threaded kernels: a chunk is too small for intra-op threads, whose barriers stall on
    # a busy machine (bench_streaming: 10x slower with 2 threads on a loaded 2-core machine)
    bar = _progress.progress(total=n, enabled=enabled, desc=PROG, unit="rows")
    with single_threaded(), bar:
        for start in range(0, n, chunk_size):
            p = rows.slice(start, start + chunk_size)
            rows.release()
            yb = y[start : start + chunk_size]
            bar.update(int(yb.shape[0]))
            if split is not None:
                keep = split.is_test[start : start + chunk_size]
                p, yb = p[:, keep], yb[keep]
                if yb.numel() == 0:
                    continue
            mean = p.mean(0)
            for meter in unscaled.values():
                meter.update(mean, yb)
            gathered["unscaled"].add(mean, yb)
            if split is not None:
                probs = split.update(mean, yb, scaled, start, keep)
                gathered["scaled"].add(probs, yb)
            if m > 1:
                uncertainty.update(p)
                variance += p.var(0, unbiased=False).sum()
                p_eece = p if order is None else p[order]
                for meter in eece:
                    meter.update(p_eece, yb)
    rows.release(force=True)
    if rows.from_logits and rows.on_simplex:
        warnings.warn(_SIMPLEX_WARNING.format(name=name, fn=where), UserWarning, stacklevel=2)

    part = "all" if split is None else "test"
    # the gathered scalars in the order of the in-memory part (the test indices' order)
    back = None if positions is None else torch.argsort(torch.from_numpy(positions))
    confidence = {key: g.in_part_order(back) for key, g in gathered.items()}
    metrics = [{"stage": "unscaled", "part": part, "n": n_part}]
    metrics[0].update({key: meter.compute() for key, meter in unscaled.items()})
    selective = [
        {"stage": "unscaled", **selective_from_gathered(*confidence["unscaled"], chunk_size)}
    ]
    conformal, temperature = None, None
    if split is not None:
        temperature = split.temperature
        row = {"stage": f"temperature-scaled (T={temperature:.3f})", "part": "test", "n": n_part}
        row.update({key: meter.compute() for key, meter in scaled.items()})
        metrics.append(row)
        stage = row["stage"]
        selective.append(
            {"stage": stage, **selective_from_gathered(*confidence["scaled"], chunk_size)}
        )
        conformal = split.conformal(len(conf_idx), n_part)
    ensemble, details = None, None
    if m > 1:
        ensemble = {"members": m}
        ensemble.update({f"mean_{key}": v for key, v in uncertainty.compute().items()})
        ensemble["mean_member_variance"] = float(variance / (n_part * k))
        ensemble.update(eece_result(eece, seeds, bins, n_part))
        details = ensemble.pop("details")
    reliability = {"reliability": unscaled["ece"].bins}
    if split is not None:
        reliability["reliability_scaled"] = scaled["ece"].bins
    y_part = y if positions is None else y[torch.from_numpy(positions)]
    ev = ChunkedEvaluation(
        setup=setup,
        metrics=metrics,
        ensemble=ensemble,
        conformal=conformal,
        temperature=temperature,
        probs=None,
        scaled_probs=None,
        member_probs=None,
        labels=None,
        eece_details=details,
        selective=selective,
        per_class=_per_class(k, y_part, confidence["unscaled"][1], unscaled, scaled, split),
        reliability_bins=reliability,
        confidence=confidence,
    )
    from bensemble.app.evaluate_summary import summarise

    summarise(ev, stage=lambda label: contextlib.nullcontext())  # notes and verdicts
    return ev


class _Gathered:
    """One float64 confidence and one boolean "argmax is right" per reported sample, filled a
    chunk at a time in file order (preallocated: ``9 * n`` bytes, no per-chunk list)."""

    def __init__(self, n: int) -> None:
        self.confidence = torch.empty(n, dtype=torch.float64)
        self.correct = torch.empty(n, dtype=torch.bool)
        self.filled = 0

    def add(self, probs: torch.Tensor, labels: torch.Tensor) -> None:
        conf, correct = top_confidence(probs, labels)
        stop = self.filled + conf.shape[0]
        self.confidence[self.filled : stop] = conf
        self.correct[self.filled : stop] = correct
        self.filled = stop

    def in_part_order(self, back: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(confidence, correct)`` in the part's order: the file order is the sorted test
        indices, ``back`` (their argsort) undoes the sort; ``None``: all samples, in order."""
        assert self.filled == self.confidence.shape[0]
        if back is None:
            return self.confidence, self.correct
        conf, correct = torch.empty_like(self.confidence), torch.empty_like(self.correct)
        conf[back], correct[back] = self.confidence, self.correct
        return conf, correct


def _per_class(k, labels, correct, unscaled, scaled, split) -> list[dict[str, Any]] | None:
    """The per-class table of the in-memory report from the streamed sums: support and accuracy
    from the gathered correctness, each class's classwise-ECE term from the classwise ECE
    meters' per-bin sums, the conformal coverage from per-class counts."""
    from bensemble.app.evaluate import MAX_PER_CLASS
    from bensemble.metrics.calibration import _norm_from_sums

    if k > MAX_PER_CLASS:
        return None
    support = torch.bincount(labels, minlength=k)
    hits = torch.bincount(labels, weights=correct.to(torch.float64), minlength=k)
    cols = {"support": support.tolist(), "accuracy": (hits / support.clamp_min(1)).tolist()}
    stages = {"classwise_ece": unscaled}
    if split is not None:
        stages = {"classwise_ece_unscaled": unscaled, "classwise_ece_scaled": scaled}
    for name, meters in stages.items():
        state = meters["classwise_ece"].state
        cols[name] = _norm_from_sums(state["counts"], state["sum_p"], state["hits"], "l1").tolist()
    if split is not None:
        cols["coverage"] = (split.covered_per_class / support.to(torch.float64)).tolist()
    return class_rows(cols)


@dataclass
class ChunkedEvaluation(Evaluation):
    """An :class:`~bensemble.app.evaluate.Evaluation` without the per-sample tensors
    (``probs``, ``scaled_probs``, ``member_probs`` and ``labels`` are ``None``); the figures come
    from the streamed sums instead: ``reliability_bins`` (the top-label ECE's
    :class:`~bensemble.metrics.CalibrationBins`, ``"reliability"`` and with a split
    ``"reliability_scaled"``), ``eece_details`` (rebuilt from the EECE's per-bin sums) and
    ``confidence`` (``"unscaled"`` and with a split ``"scaled"``: the gathered
    ``(max_k p_k, argmax is right)`` per reported sample, for the risk-coverage curves)."""

    reliability_bins: dict[str, Any] = field(default_factory=dict, repr=False)
    confidence: dict[str, Any] = field(default_factory=dict, repr=False)

    def figure_makers(self) -> dict[str, Any]:
        """The report's figures (file stem -> function drawing it) for
        :func:`~bensemble.app.evaluate_report.write_evaluation`: reliability diagrams from the
        ECE's per-bin sums, the epistemic one from the EECE's, the risk-coverage curves from the
        gathered confidences."""
        from bensemble import plots
        from bensemble.app.evaluate_report import risk_coverage_figure

        def reliability(bins: Any, name: str | None) -> Any:
            lower, upper = plots.wilson_interval(bins.sum_correct, bins.counts, 0.95)
            return plots.ReliabilityDisplay(bins, lower, upper, name=name).plot().figure_

        def curve(key: str, row: int) -> Any:
            # at most 2,000 exact vertices of the curve (a line through 10^7 of them costs GBs)
            from bensemble.metrics._selective_sorted import risk_coverage_vertices

            conf, correct = self.confidence[key]
            vertices = risk_coverage_vertices(conf.numpy(), correct.numpy())
            coverage, risk, thresholds = (torch.from_numpy(v) for v in vertices)
            aurc = self.selective[row]["aurc"]
            return plots.RiskCoverageDisplay(coverage, risk, thresholds, aurc=aurc)

        bins = self.reliability_bins
        makers: dict[str, Any] = {}
        curves = {"unscaled": lambda: curve("unscaled", 0)}
        if self.temperature is None:
            makers["reliability"] = lambda: reliability(bins["reliability"], None)
        else:
            scaled = f"T = {self.temperature:.3f}"
            makers["reliability"] = lambda: reliability(bins["reliability"], "unscaled")
            makers["reliability_scaled"] = lambda: reliability(bins["reliability_scaled"], scaled)
            curves[scaled] = lambda: curve("scaled", 1)
        if self.eece_details is not None:
            details = self.eece_details
            makers["epistemic_reliability"] = lambda: (
                plots.EpistemicReliabilityDisplay.from_details(details, name="ensemble")
                .plot()
                .figure_
            )
        makers["risk_coverage"] = lambda: risk_coverage_figure(
            {name: make() for name, make in curves.items()}
        )
        return makers


_SIMPLEX_WARNING = (
    "{fn}: `{name}` rows already lie on the probability simplex (in [0, 1], summing to 1), so "
    "logits=True applies a softmax to probabilities - a second softmax that flattens them; "
    "leave logits out if these are probabilities"
)
