"""Evaluating member predictions larger than memory: chunked passes over a memory-mapped array.

:func:`evaluate_chunked` reads ``[M, N, K]`` member probabilities (or logits; ``[N, K]`` for one
model) from a ``.npy`` file opened with ``np.load(mmap_mode="r")`` - or any array supporting
slicing - ``chunk_size`` samples at a time, feeds the streaming meters of
:mod:`bensemble.metrics.streaming`, and returns the numbers of
:func:`bensemble.app.evaluate.evaluate_predictions` without a calibration split
(accuracy, NLL, Brier, ECE and classwise ECE of the ensemble mean; for ``M > 1`` the mean
uncertainty decomposition and the EECE), up to float64 summation order. Memory is
``O(chunk_size * M * K)`` plus the labels. (``bensemble evaluate --chunk-size`` adds the
calibration split on top of the same pieces: :mod:`bensemble.app.evaluate_stream`.)

The EECE follows the two-phase protocol with the *same* K-means fit as the in-memory path:

1. the members are put in the EECE's canonical order
   (:func:`~bensemble.metrics._epistemic_checks.canonical_member_order`: a byte-wise sort of each
   member's whole prediction array), found by :func:`canonical_order_chunked` from the first
   chunk(s) - a later chunk is read only while two members are bit-identical so far;
2. each class's K-means draws the same seeded subsample rows (gathered from the file), and its
   refinement steps stream over the file chunk by chunk (:func:`fit_centroids_chunked`; each
   class's fit reads the file ``1 + refine`` times when ``N`` exceeds the subsample);
3. an :class:`~bensemble.metrics.streaming_epistemic.EECEMeter` per K-means seed accumulates the
   per-bin sums in the main pass.
"""

from __future__ import annotations

import statistics
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from bensemble import _progress
from bensemble._validation import as_labels, check_bool, check_positive_int
from bensemble.metrics._chunked_rows import MemberRows, open_memmap
from bensemble.metrics._epistemic_checks import WARN_OCCUPANCY, resolve_n_bins
from bensemble.metrics.binning._fit import (
    DEFAULT_LLOYD_RTOL,
    DEFAULT_REFINE,
    DEFAULT_SUBSAMPLE,
    _fit,
    resolve_seed,
)
from bensemble.metrics.binning._threads import map_classes, single_threaded
from bensemble.metrics.streaming import (
    AccuracyMeter,
    BrierMeter,
    CalibrationErrorMeter,
    ClasswiseCalibrationErrorMeter,
    NLLMeter,
)
from bensemble.metrics.streaming_epistemic import EECEMeter, UncertaintyMeter

__all__ = [
    "MemberRows",
    "canonical_order_chunked",
    "eece_result",
    "evaluate_chunked",
    "fit_centroids_chunked",
    "metric_meters",
    "open_memmap",
]

_F64 = torch.float64


def _part_blocks(
    rows: MemberRows, positions: np.ndarray | None, block: int
) -> Iterator[torch.Tensor]:
    """The evaluated part (``positions``, in that order; ``None``: every row) block by block."""
    n_part = rows.n if positions is None else len(positions)
    for start in range(0, n_part, block):
        if positions is None:
            yield rows.slice(start, start + block)
        else:
            yield rows.take(positions[start : start + block])
        rows.release()


def canonical_order_chunked(
    rows: MemberRows, positions: np.ndarray | None = None, *, block: int = 65_536
) -> torch.Tensor | None:
    """The EECE's canonical member order of the part ``positions`` (in that order), read block
    by block: members are sorted by the bytes of their whole flattened float64 prediction array
    (:func:`~bensemble.metrics._epistemic_checks.canonical_member_order`). A byte-wise order is
    lexicographic, so each block only sorts the members still tied (bit-identical so far); the
    reading stops once no two are tied. ``None`` when the members are already in that order."""
    if rows.m < 2:
        return None
    groups = [np.arange(rows.m)]
    for p in _part_blocks(rows, positions, block):
        if all(len(g) == 1 for g in groups):
            break
        flat = np.ascontiguousarray(p.reshape(rows.m, -1).numpy())
        width = np.dtype((np.void, flat.shape[1] * flat.itemsize))
        refined = []
        for group in groups:
            if len(group) == 1:
                refined.append(group)
                continue
            keys = flat[group].view(width).ravel()
            group = group[np.argsort(keys, kind="stable")]  # stable: ties keep their order
            raw = flat[group].view(np.uint8)
            start = 0
            for i in range(1, len(group) + 1):
                if i == len(group) or not np.array_equal(raw[i], raw[start]):
                    refined.append(group[start:i])
                    start = i
        groups = refined
    order = np.concatenate(groups)
    return None if np.array_equal(order, np.arange(rows.m)) else torch.from_numpy(order)


class _ClassColumns:
    """Duck-typed ``[n, M]`` float64 member vectors of class ``k`` of the part ``positions``,
    read from the array on indexing, ``block`` rows per read (what the K-means fit needs:
    ``shape``, ``device``, ``dtype``, ``x[rows]``, ``x[a:b]``). ``x[rows]`` follows the part's
    order, as the in-memory fit does; ``x[a:b]`` (the refinement passes, which sum over every
    row) walks the part in file order (``ascending``), so each read is one contiguous range."""

    def __init__(self, rows: MemberRows, k: int, positions, ascending, order, block) -> None:
        self.rows, self.k, self.order, self.block = rows, k, order, block
        self.positions, self.ascending = positions, ascending
        n = rows.n if positions is None else len(positions)
        self.shape = torch.Size([n, rows.m])
        self.device = torch.device("cpu")
        self.dtype = _F64

    def __getitem__(self, index: Any) -> torch.Tensor:
        if isinstance(index, slice):
            start, stop, _ = index.indices(self.shape[0])
            if self.ascending is None:
                spans = [(a, min(a + self.block, stop)) for a in range(start, stop, self.block)]
                return self._columns(self.rows.slice(a, b) for a, b in spans)
            wanted = self.ascending[start:stop]
        else:
            index = np.asarray(index)
            wanted = index if self.positions is None else self.positions[index]
        parts = range(0, len(wanted), self.block)
        return self._columns(self.rows.take(wanted[a : a + self.block]) for a in parts)

    def _columns(self, blocks) -> torch.Tensor:
        out = []
        for p in blocks:
            self.rows.release()
            p = p if self.order is None else p[self.order]
            out.append(p[:, :, self.k].T.contiguous())  # a copy: the block is freed now
        return torch.cat(out) if out else torch.empty(0, self.rows.m, dtype=_F64)


def fit_centroids_chunked(
    rows: MemberRows,
    n_bins: int,
    seeds: list[int],
    *,
    positions: np.ndarray | None = None,
    order: torch.Tensor | None = None,
    block: int = 65_536,
    progress: bool = False,
) -> list[list[torch.Tensor]]:
    """Per seed, the per-class K-means centroids exactly as the in-memory classwise EECE fits
    them on the part ``positions`` (same seed, same subsample rows, same Lloyd stopping rule
    ``lloyd_rtol``; refinement and assignment
    streamed over the array, ``block`` rows per read; members in ``order``)."""
    n_part = rows.n if positions is None else len(positions)
    ascending = None if positions is None else np.sort(positions)  # shared by every class
    total = rows.k * len(seeds)
    with _progress.progress(total=total, enabled=progress, desc="EECE K-means", unit="fits") as bar:

        def one(c: int) -> list[torch.Tensor]:
            x: Any = _ClassColumns(rows, c, positions, ascending, order, block)
            if n_part <= DEFAULT_SUBSAMPLE:
                x = x[np.arange(n_part)]
            out = []
            for s in seeds:
                fit = _fit(
                    x,
                    n_bins,
                    seed=s,
                    subsample=DEFAULT_SUBSAMPLE,
                    refine=DEFAULT_REFINE,
                    lloyd_rtol=DEFAULT_LLOYD_RTOL,  # the in-memory classwise default
                )
                out.append(fit.centroids)
                bar.update(1)
            return out

        per_class = map_classes(one, rows.k)
    return [[per_class[c][i] for c in range(rows.k)] for i in range(len(seeds))]


def eece_result(meters: list[EECEMeter], seeds: list[int], n_bins: int, n: int) -> dict[str, Any]:
    """``eece`` (mean over seeds), ``eece_sd``, ``eece_seeds``, ``eece_bins`` and
    ``eece_bins_fitted`` as the in-memory EECE details report them, with its occupancy warning,
    and under ``"details"`` the :class:`~bensemble.metrics.epistemic.EECEDetails` of the first
    seed's partition (what the epistemic reliability diagram draws)."""
    from bensemble.metrics.epistemic import EECEDetails, _eece_compute

    values = [m.compute() for m in meters]
    state = meters[0].state
    k = len(meters[0].centroids)
    stats = _eece_compute(state["counts"], state["sum_y"], state["sum_eu"], state["sum_p"])
    weighted = stats.pop("weighted").view(k, -1)
    fitted = int((state["counts"].view(k, -1) > 0).sum(dim=1).max())
    if n / fitted < WARN_OCCUPANCY:
        warnings.warn(
            f"expected_epistemic_calibration_error: bins hold fewer than {WARN_OCCUPANCY} "
            "points on average (N / details.n_bins_fitted); the per-bin errors are "
            "noise-dominated - use fewer bins (n_bins='auto') or more points",
            UserWarning,
            stacklevel=2,
        )
    value = values[0] if len(values) == 1 else statistics.fmean(values)
    sd = statistics.stdev(values) if len(values) > 1 else None
    details = EECEDetails(
        value=value,
        **{key: v.view(k, -1) for key, v in stats.items()},
        per_class=weighted.sum(dim=1) / n,
        binning="kmeans",
        backend="torch",
        seed=seeds[0],
        n_bins=n_bins,
        n_bins_fitted=fitted,
        seeds=tuple(seeds),
        seed_values=tuple(values),
        seed_sd=sd,
    )
    return {
        "eece": value,
        "eece_sd": sd,
        "eece_seeds": len(seeds),
        "eece_bins": n_bins,
        "eece_bins_fitted": fitted,
        "details": details,
    }


def metric_meters(k: int, n_bins: int) -> dict[str, Any]:
    """The streaming meters behind one row of ``bensemble evaluate``'s metrics table."""
    return {
        "accuracy": AccuracyMeter(k),
        "nll": NLLMeter(num_classes=k),
        "brier": BrierMeter(k),
        "ece": CalibrationErrorMeter(n_bins, num_classes=k),
        "classwise_ece": ClasswiseCalibrationErrorMeter(k, n_bins),
    }


def evaluate_chunked(
    member_probs: Any,
    labels: Any,
    *,
    n_bins: int = 15,
    eece_bins: int | str = "auto",
    eece_seeds: int = 1,
    seed: int = 0,
    chunk_size: int = 65_536,
    from_logits: bool = False,
    progress: bool | None = None,
) -> dict[str, Any]:
    """Scores of member predictions read ``chunk_size`` samples at a time.

    Args:
        member_probs: ``[M, N, K]`` (or ``[N, K]``) array - typically :func:`open_memmap` of a
            ``.npy`` file - of probabilities, or logits with ``from_logits=True``.
        labels: ``[N]`` integer labels (held in memory).
        n_bins: bins of the ECE and classwise ECE.
        eece_bins: K-means bins of the EECE (``M > 1``): ``"auto"`` (the default of
            ``bensemble evaluate``, :func:`~bensemble.metrics.epistemic.auto_n_bins` of ``N``) or
            an integer.
        eece_seeds: K-means seeds ``seed, ..., seed + eece_seeds - 1`` the EECE averages.
        seed: the EECE's K-means seed (as ``evaluate_predictions``' ``seed``).
        chunk_size: samples per chunk.
        from_logits: the array holds logits (softmax per chunk, in float64).
        progress: tqdm bar (``None``: only on a terminal).

    Returns:
        ``{"n", "accuracy", "nll", "brier", "ece", "classwise_ece"}``, and for ``M > 1`` also
        ``"mean_total"``, ``"mean_aleatoric"``, ``"mean_epistemic"``, ``"mean_member_variance"``
        (``Var_m p_m(y = k)``, divisor ``M``, averaged over samples and classes), ``"eece"``,
        ``"eece_sd"``, ``"eece_seeds"``, ``"eece_bins"``, ``"eece_bins_fitted"``.
    """
    fn = "evaluate_chunked"
    chunk_size = check_positive_int(chunk_size, "chunk_size", fn)
    eece_seeds = check_positive_int(eece_seeds, "eece_seeds", fn)
    enabled = True if progress is None else check_bool(progress, "progress", fn)
    rows = MemberRows(member_probs, from_logits=from_logits, name="member_probs", fn=fn)
    m, n, k = rows.m, rows.n, rows.k
    y = as_labels(labels, "labels", fn, n=n, num_classes=k)
    meters = metric_meters(k, n_bins)
    uncertainty, order, eece, seeds, bins = None, None, [], [], 0
    if m > 1:
        bins = resolve_n_bins(eece_bins, n, fn)
        first = resolve_seed(None, seed, fn)
        seeds = [(first + i) % 2**63 for i in range(eece_seeds)]
        uncertainty = UncertaintyMeter()
        order = canonical_order_chunked(rows, block=chunk_size)
        fits = fit_centroids_chunked(
            rows, bins, seeds, order=order, block=chunk_size, progress=enabled
        )
        eece = [EECEMeter(c) for c in fits]
    variance = torch.zeros((), dtype=torch.float64)  # sum of Var_m p_m(y = k) over samples, k
    # single-threaded kernels: a chunk is too small for intra-op threads, whose barriers stall on
    # a busy machine (bench_streaming: 10x slower with 2 threads on a loaded 2-core machine)
    bar = _progress.progress(total=n, enabled=enabled, desc=fn, unit="rows")
    with single_threaded(), bar:
        for start in range(0, n, chunk_size):
            p = rows.slice(start, start + chunk_size)
            yb = y[start : start + chunk_size]
            mean = p.mean(0)
            for meter in meters.values():
                meter.update(mean, yb)
            if m > 1:
                uncertainty.update(p)
                variance += p.var(0, unbiased=False).sum()
                p_eece = p if order is None else p[order]
                for meter in eece:
                    meter.update(p_eece, yb)
            bar.update(int(yb.shape[0]))
            rows.release()
    rows.release(force=True)
    out: dict[str, Any] = {"n": n}
    out.update({name: meter.compute() for name, meter in meters.items()})
    if m > 1:
        out.update({f"mean_{key}": v for key, v in uncertainty.compute().items()})
        out["mean_member_variance"] = float(variance / (n * k))
        result = eece_result(eece, seeds, bins, n)
        result.pop("details")
        out.update(result)
    return out
