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
  temperature-scaled metrics (``log p / T`` per chunk) and conformal coverage / set size as
  additive sums. Randomised APS / RAPS sets get the uniforms the in-memory ``predict_set`` draws
  for each test sample (held as one float64 per sample).

Besides the chunk, memory holds the labels and, with a split, one boolean per sample and the
test indices. The figures of the report come from the streamed sums: the reliability diagrams
from the ECE's per-bin sums, the epistemic reliability diagram from the EECE's.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

from bensemble import _progress
from bensemble import _validation as V
from bensemble.app._options import check_seed
from bensemble.app.evaluate import CONFORMAL_SCORES, Evaluation, split_indices
from bensemble.app.evaluate_cli import PROG
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
        A :class:`ChunkedEvaluation` with the same ``setup``, ``metrics``, ``ensemble``,
        ``conformal`` and ``temperature`` as the in-memory :class:`Evaluation`.
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
    }
    split = None
    if calibration_split is None:
        positions = None
        setup.update(n_temperature=0, n_conformal=0, n_test=n)
    else:
        temp_idx, conf_idx, test = split_indices(n, calibration_split, seed=seed)
        setup.update(n_temperature=len(temp_idx), n_conformal=len(conf_idx), n_test=len(test))
        positions = test.numpy()
        split = _Calibrated(
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

    unscaled = metric_meters(k, n_bins)
    scaled = metric_meters(k, n_bins) if split is not None else {}
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
            if split is not None:
                split.update(mean, yb, scaled, start, keep)
            if m > 1:
                uncertainty.update(p)
                p_eece = p if order is None else p[order]
                for meter in eece:
                    meter.update(p_eece, yb)
    rows.release(force=True)
    if rows.from_logits and rows.on_simplex:
        warnings.warn(_SIMPLEX_WARNING.format(name=name, fn=where), UserWarning, stacklevel=2)

    part = "all" if split is None else "test"
    metrics = [{"stage": "unscaled", "part": part, "n": n_part}]
    metrics[0].update({key: meter.compute() for key, meter in unscaled.items()})
    conformal, temperature = None, None
    if split is not None:
        temperature = split.temperature
        row = {"stage": f"temperature-scaled (T={temperature:.3f})", "part": "test", "n": n_part}
        row.update({key: meter.compute() for key, meter in scaled.items()})
        metrics.append(row)
        conformal = split.conformal(len(conf_idx), n_part)
    ensemble, details = None, None
    if m > 1:
        ensemble = {"members": m}
        ensemble.update({f"mean_{key}": v for key, v in uncertainty.compute().items()})
        ensemble.update(eece_result(eece, seeds, bins, n_part))
        details = ensemble.pop("details")
    reliability = {"reliability": unscaled["ece"].bins}
    if split is not None:
        reliability["reliability_scaled"] = scaled["ece"].bins
    return ChunkedEvaluation(
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
        reliability_bins=reliability,
    )


@dataclass
class ChunkedEvaluation(Evaluation):
    """An :class:`~bensemble.app.evaluate.Evaluation` without the per-sample tensors
    (``probs``, ``scaled_probs``, ``member_probs`` and ``labels`` are ``None``); the figures come
    from the streamed sums instead: ``reliability_bins`` (the top-label ECE's
    :class:`~bensemble.metrics.CalibrationBins`, ``"reliability"`` and with a split
    ``"reliability_scaled"``) and ``eece_details`` (rebuilt from the EECE's per-bin sums)."""

    reliability_bins: dict[str, Any] = field(default_factory=dict, repr=False)


_SIMPLEX_WARNING = (
    "{fn}: `{name}` rows already lie on the probability simplex (in [0, 1], summing to 1), so "
    "logits=True applies a softmax to probabilities - a second softmax that flattens them; "
    "leave logits out if these are probabilities"
)


def _gathered_mean(rows, index: torch.Tensor, chunk: int) -> torch.Tensor:
    """The member mean ``[n, K]`` of the rows ``index`` (in that order), ``chunk`` rows per read:
    the calibration part is held as ensemble-mean probabilities, not ``M`` members."""
    index = index.numpy()
    parts = [rows.take(index[a : a + chunk]).mean(0) for a in range(0, len(index), chunk)]
    rows.release()
    return torch.cat(parts)


class _Calibrated:
    """The calibration part fitted in memory (temperature, conformal threshold) and the
    streamed test-part sums of the scaled metrics and the conformal sets."""

    def __init__(self, rows, y, temp_idx, conf_idx, test, score, alpha, seed, chunk) -> None:
        from bensemble.calibration import CalibrationFitError, TemperatureScaling
        from bensemble.conformal import SplitConformalClassifier

        fn = "evaluate_predictions"
        n = rows.n
        scaler = TemperatureScaling(on_boundary="warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                scaler.fit(self._log_mean(_gathered_mean(rows, temp_idx, chunk)), y[temp_idx])
        except CalibrationFitError as exc:
            raise ValueError(
                f"{fn}: cannot fit a temperature on the calibration part ({exc})"
            ) from None
        self.scaler = scaler
        self.temperature = float(scaler.temperature.item())
        notes = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        self.converged = bool(scaler.converged_)
        self.warning = " ".join(" ".join(notes).split()) or None
        self.cp = SplitConformalClassifier(
            score, alpha=alpha, generator=torch.Generator().manual_seed(seed)
        )
        self.cp.calibrate(self.scale(_gathered_mean(rows, conf_idx, chunk)), y[conf_idx])
        # the uniforms predict_set would draw for the test part, in test order, kept per row
        u = self.cp._uniforms(len(test), torch.device("cpu"))
        self.u = None
        if u is not None:
            self.u = torch.zeros(n, dtype=torch.float64)
            self.u[test] = u
        self.is_test = torch.zeros(n, dtype=torch.bool)
        self.is_test[test] = True
        self.covered = self.size = 0

    @staticmethod
    def _log_mean(mean: torch.Tensor) -> torch.Tensor:
        return mean.clamp_min(torch.finfo(mean.dtype).tiny).log()

    def scale(self, mean: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return torch.softmax(self.scaler(self._log_mean(mean)).to(torch.float64), dim=-1)

    def update(self, mean, yb, meters, start: int, keep: torch.Tensor) -> None:
        from bensemble.conformal.split import lac_cutoff

        probs = self.scale(mean)
        for meter in meters.values():
            meter.update(probs, yb)
        cp = self.cp
        if self.u is None and cp.score == "lac":
            sets = probs >= lac_cutoff(cp.threshold_, probs.dtype, probs.device)
        else:
            u = None if self.u is None else self.u[start : start + keep.shape[0]][keep]
            sets = cp._scores(probs, u) <= cp.threshold_
        self.covered += int(sets.gather(1, yb[:, None]).sum())
        self.size += int(sets.sum())

    def conformal(self, n_calibration: int, n_test: int) -> dict[str, Any]:
        alpha = self.cp.alpha
        return {
            "score": self.cp.score,
            "alpha": alpha,
            "target_coverage": 1.0 - alpha,
            "coverage": self.covered / n_test,
            "mean_set_size": self.size / n_test,
            "n_calibration": n_calibration,
            "n_test": n_test,
        }
