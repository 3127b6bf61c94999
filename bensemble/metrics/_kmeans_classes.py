"""Classwise K-means, batched: the ``K`` per-class ``"torch"`` fits of the classwise EECE run as
one fit over a ``[C, n, H]`` stack of classes (``C`` classes per chunk).

Every step of :mod:`bensemble.metrics._kmeans_core` becomes one batched op over the chunk:
k-means++ candidate distances one ``baddbmm`` (``[C, T, H] x [C, H, n]``), the draws one batched
``searchsorted``; each Lloyd assignment one ``baddbmm`` per cache-sized chunk of rows and a
row-wise argmin, the centroid sums one ``index_add_`` with the flat index ``class * M + bin``,
the counts one ``bincount``. Classes stop on their own: a class that converges leaves the batch
(the rest are compacted), so no class runs more Lloyd steps than it would alone.

**Identical to the per-class loop.** With one intra-op thread a batched op computes every class
exactly as the per-class op does (same kernels, same row chunks, same summation order: checked by
``tests/metrics/test_kmeans_classes.py``), and each class draws from its own generator in the
same order, so every class gets the centroids, bins, iteration count and inertia of
:func:`bensemble.metrics._kmeans._fit` run alone with one thread, bit for bit. Chunks run on a
pool of single-threaded workers (:func:`~bensemble.metrics._kmeans_batched.map_classes`), so all
cores work without intra-op barriers. Classes whose fit is not a plain seeding + Lloyd run
(fewer distinct rows than bins) and seeding that runs out of distinct rows take the per-class
path unchanged.

What batching saves is the per-op cost of ``K`` separate fits (dispatch, Python, allocations):
about 100 seeding steps and 30-70 Lloyd steps of ~10 ops each per class. It dominates when each
class is small (a few thousand rows); at 50,000 rows x 100 bins the ``[n, M]`` distance blocks
dominate and batching saves little (``benchmarks/bench_eece_classwise.py``).

**The classwise default stops Lloyd earlier** (``lloyd_rtol = 3e-4``,
:data:`~bensemble.metrics._kmeans.DEFAULT_LLOYD_RTOL`): besides the exact fit's rules, a class
stops when a Lloyd step lowers its within-cluster sum of squares by at most ``3e-4`` of it
(computed from the per-cluster sums, ``sum ||x||^2 - sum_m ||S_m||^2 / n_m``, no extra pass).
Seeding and every step up to the stop are those of the exact fit, so the inertia can only be
what the exact fit had at that step: most of the exact fit's 30-110 steps at 50,000 rows move the
inertia by less than 0.01%. Measured (``python benchmarks/profile_kmeans_classwise.py
--stopping``, one thread, CPU time; inertia = within-bin sum of squares over the exact fit's):
N = 50,000, 100 bins, H = 10, 8 classes each: K = 100 2.6x less CPU, worst class +0.75%, mean
+0.38%; K = 1000 2.3x less CPU, worst +0.48%, mean
+0.30%. Smaller fits (N = 10,000, 20 bins, H = 6, 4 classes of K = 10 / 100 /
1000): 1.1-2.1x less CPU, worst class +0.40% /
+0.79% / +0.04%. At N = 2,000 rows and 100 bins (20 rows per bin) one class in 100 reached
+1.6% (all classes +0.1%; ``bench_eece_classwise.py``). For comparison, the exact fit with seed
1 instead of 0 differs by -2.4% to +2.3% per class on the same data. ``lloyd_rtol=0`` gives the
exact fit (bins identical to the per-class loop). The opt-in ``coreset`` fit
(:mod:`~bensemble.metrics._kmeans_coreset`) runs one class per task on the same workers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from bensemble.metrics import _kmeans_coreset
from bensemble.metrics._kmeans import DEFAULT_REFINE, DEFAULT_SUBSAMPLE
from bensemble.metrics._kmeans_assign import (
    _assign,
    _chunk_rows,
    _n_distinct_at_least,
    _refine,
)
from bensemble.metrics._kmeans_batched import map_classes
from bensemble.metrics._kmeans_core import _kmeans_plusplus, _lloyd, _within

__all__ = ["fit_classes", "MAX_BATCH_SCORES"]

_F32, _F64 = torch.float32, torch.float64
#: Bound on ``classes x rows x bins`` of one batch. Batching only saves per-op costs and costs
#: cache: on the loaded 2-core benchmark machine (one thread, 100 bins, H = 10) batches were
#: 1.63x faster than one class at a time at 1,000 rows per class, 1.95x at 2,000, 1.15x at 5,000
#: and 1.12x at 10,000 (``python benchmarks/bench_eece_classwise.py --sweep``); 2^21 gives 20
#: classes of 1,000 rows, 4 of 5,000, 2 of 10,000 and one (the per-class path) from 20,000 rows.
MAX_BATCH_SCORES = 1 << 21


def _argmin_last(scores: torch.Tensor) -> torch.Tensor:
    """Argmin over the last axis (first index on ties); numpy's SIMD kernel on the CPU."""
    if scores.device.type == "cpu":
        return torch.from_numpy(scores.numpy().argmin(axis=-1).astype(np.int64, copy=False))
    return scores.argmin(dim=-1)


def _assign_batch(x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """``[C, n]`` nearest centroid per row (float32 scores, the row chunks of ``_assign``)."""
    n_cls, n, _ = x.shape
    c_sq = (c * c).sum(2)
    c_t = c.transpose(1, 2).contiguous()
    step = min(_chunk_rows(c.shape[1]), n)
    ids = torch.empty(n_cls, n, dtype=torch.int64, device=x.device)
    block = torch.empty(n_cls, step, c.shape[1], dtype=x.dtype, device=x.device)
    for start in range(0, n, step):
        xb = x[:, start : start + step]
        scores = torch.baddbmm(c_sq[:, None, :], xb, c_t, alpha=-2.0, out=block[:, : xb.shape[1]])
        ids[:, start : start + xb.shape[1]] = _argmin_last(scores).to(x.device)
    return ids


def _candidate_dist(x, x_t, x_sq, rows, closest):
    """``min(closest, ||x - x[rows]||^2)`` as ``[C, T, n]`` (``_kmeans_core._candidate_dist``
    per class)."""
    picked = x.gather(1, rows[:, :, None].expand(-1, -1, x.shape[2]))
    d = torch.baddbmm(x_sq[:, None, :], picked, x_t, alpha=-2.0)
    d.add_(x_sq.gather(1, rows)[:, :, None]).clamp_min_(0.0)
    return torch.minimum(d, closest[:, None, :], out=d)


def _seed_batch(x: torch.Tensor, n_clusters: int, gens: list[torch.Generator]):
    """Greedy k-means++ for every class of ``x [C, n, H]`` (float32). Returns the ``[C, M]`` row
    indices and a ``[C]`` mask of the classes whose seeding ran out of distinct rows (those must
    be refitted alone)."""
    n_cls, n, _ = x.shape
    n_trials = 2 + int(math.log(n_clusters))
    # Each class's generator draws what the per-class seeding draws, in the same order.
    first = torch.cat([torch.randint(n, (1,), generator=g) for g in gens])
    draws = torch.stack(
        [torch.rand((n_clusters - 1) * n_trials, generator=g, dtype=_F64) for g in gens]
    ).view(n_cls, n_clusters - 1, n_trials)
    draws = draws.to(x.device)
    x_sq = (x * x).sum(2)
    x_t = x.transpose(1, 2).contiguous()
    every = torch.arange(n_cls, device=x.device)
    chosen = torch.empty(n_cls, n_clusters, dtype=torch.int64, device=x.device)
    chosen[:, 0] = first.to(x.device)
    closest = torch.full((n_cls, n), math.inf, dtype=x.dtype, device=x.device)
    closest = _candidate_dist(x, x_t, x_sq, chosen[:, :1], closest)[:, 0]
    exhausted = torch.zeros(n_cls, dtype=torch.bool, device=x.device)
    for k in range(1, n_clusters):
        cum = torch.cumsum(closest, 1, dtype=_F64)
        total = cum[:, -1]
        exhausted |= ~(total > 0)
        candidates = torch.searchsorted(cum, draws[:, k - 1] * total[:, None], right=True)
        candidates.clamp_(max=n - 1)
        trial = _candidate_dist(x, x_t, x_sq, candidates, closest)
        best = trial.sum(2, dtype=_F64).argmin(1)
        chosen[:, k] = candidates[every, best]
        closest = trial[every, best]
    return chosen, exhausted


def _lloyd_batch(
    x: torch.Tensor, c: torch.Tensor, max_iter: int, tol_abs: list[float], rtol: float = 0.0
):
    """Lloyd for every class of ``x [C, n, H]`` from ``c [C, M, H]`` (float32), each class
    stopping by its own rule. Returns ``[(centroids, labels, n_iter, converged)]`` per class."""
    n_cls, n, width = x.shape
    m = c.shape[1]
    out: list[Any] = [None] * n_cls
    active = list(range(n_cls))
    labels_old = None
    # per class, as _lloyd computes them (same values, same summation order)
    x_sq = [float((x[i].to(_F64) ** 2).sum()) if rtol > 0 else 0.0 for i in range(n_cls)]
    previous = [math.inf] * n_cls
    for n_iter in range(1, max_iter + 1):
        offsets = (torch.arange(len(active), device=x.device) * m)[:, None]
        labels = _assign_batch(x, c)
        flat = (labels + offsets).view(-1)
        counts = torch.bincount(flat, minlength=len(active) * m).view(-1, m)
        sums = torch.zeros(len(active) * m, width, dtype=x.dtype, device=x.device)
        sums = sums.index_add_(0, flat, x.reshape(-1, width)).view(-1, m, width)
        new = torch.where(
            counts[:, :, None] > 0, sums / counts.clamp_min(1)[:, :, None].to(x.dtype), c
        )
        shift = ((new - c) ** 2).sum((1, 2)).tolist()
        c = new
        same = (labels == labels_old).all(1).tolist() if labels_old is not None else None
        keep = []
        for i, k in enumerate(active):
            within = _within(x_sq[k], sums[i], counts[i]) if rtol > 0 else 0.0
            stop = shift[i] <= tol_abs[k] or (rtol > 0 and previous[k] - within <= rtol * within)
            previous[k] = within
            if same is not None and same[i]:
                out[k] = (c[i], labels[i], n_iter, True)
            elif stop or n_iter == max_iter:
                # not a strict stop: the labels are re-assigned to the final centroids
                out[k] = (c[i], None, n_iter, stop)
            else:
                keep.append(i)
        if not keep:
            break
        if len(keep) < len(active):
            index = torch.tensor(keep, device=x.device)
            x, c, labels = x[index], c[index], labels[index]
            active = [active[i] for i in keep]
        labels_old = labels
    return out


def _prepare(x: torch.Tensor, n_bins: int, seed: int, subsample: int | None, tol: float):
    """The per-class prelude of ``_fit``: generator, subsample, bin cap, tolerance."""
    g = torch.Generator().manual_seed(seed)
    n = x.shape[0]
    if subsample is not None and n > subsample:
        rows = torch.randperm(n, generator=g)[:subsample].sort().values
        x_fit = x[rows].contiguous()
    else:
        x_fit = x.contiguous()
    n_fit = x_fit.shape[0]
    n_clusters = _n_distinct_at_least(x_fit, min(n_bins, n_fit))
    plain = not (n_clusters < min(n_bins, n_fit) or n_clusters == n_fit)
    tol_abs = tol * float(x_fit.var(dim=0, unbiased=False).mean()) if plain else 0.0
    return g, x_fit, n_clusters, plain, tol_abs


def _finish(x, x_fit, fitted, settings, refine):
    """``_fit``'s epilogue and ``partition``'s assignment: bins of every row and the info."""
    centroids32, labels, n_iter, converged = fitted
    if labels is None:
        labels = _assign(x_fit.to(_F32), centroids32)[0]
    counts = torch.bincount(labels, minlength=centroids32.shape[0])
    centroids = centroids32.to(_F64)
    subsampled = x_fit.shape[0] < x.shape[0]
    if subsampled:
        for _ in range(refine):
            centroids, counts = _refine(x, centroids)
    centroids = centroids[counts > 0]
    # (``_fit`` also derives the inertia on the fitted rows; the bins do not need it.)
    ids, _ = _assign(x, centroids)
    info = {
        "backend": "torch",
        "n_bins_fitted": centroids.shape[0],
        "n_iter": int(n_iter),
        "converged": bool(converged),
        "n_fit_rows": int(x_fit.shape[0]),
        **settings,
    }
    return ids, centroids.shape[0], info


def _chunk_size(n_classes: int, n_rows: int, n_bins: int, workers: int) -> int:
    """Classes per batch: enough to share the per-op cost, few enough that a batch's blocks stay
    near the cache (``C * n * M <= MAX_BATCH_SCORES``) and that every worker gets classes."""
    return max(1, min(-(-n_classes // workers), MAX_BATCH_SCORES // max(1, n_rows * n_bins)))


def fit_classes(
    vectors: Callable[[int], torch.Tensor],
    n_classes: int,
    n_bins: int,
    *,
    seed: int,
    fallback: Callable[[int], tuple[torch.Tensor, int, dict[str, Any]]],
    subsample: int | None = DEFAULT_SUBSAMPLE,
    refine: int = DEFAULT_REFINE,
    max_iter: int = 300,
    tol: float = 1e-4,
    workers: int | None = None,
    max_batch: int | None = None,
    coreset: int | None = None,
    lloyd_rtol: float = 0.0,
) -> list[tuple[torch.Tensor, int, dict[str, Any]]]:
    """Bins of every class from batched ``"torch"`` K-means fits, class by class identical to
    ``partition(vectors(k), binning="kmeans", backend="torch", seed=seed, ...)``.

    Args:
        vectors: ``k -> [N, H]`` float64 member vectors of class ``k`` (every class has ``N``).
        n_classes: ``K``.
        n_bins: requested bins per class.
        seed: the integer seed of every class's fit.
        fallback: ``k -> (bin ids, bins, info)`` for a class that cannot run batched (the
            per-class path).
        subsample, refine, max_iter, tol: as in :func:`bensemble.metrics.fit_bins`.
        workers: single-threaded workers (default: torch's intra-op thread count).
        max_batch: at most this many classes per batch (default: :func:`_chunk_size`'s rule).
        coreset: as in :func:`bensemble.metrics.fit_bins`: classes with more than ``2 *
            coreset`` rows to fit get the coreset fit, one class per task on the same workers
            (identical to ``_fit(..., coreset=coreset)``); ``None``: the exact fit.
        lloyd_rtol: as in :func:`bensemble.metrics.fit_bins` (``0``: the exact fit).

    Returns:
        Per class ``(bin ids [N], number of bins, fit info)``, in class order.
    """
    settings: dict[str, Any] = {
        "n_bins": n_bins,
        "max_iter": max_iter,
        "tol": tol,
        "subsample": subsample,
    }
    if coreset is not None:
        settings["coreset"] = coreset
    if lloyd_rtol > 0:
        settings["lloyd_rtol"] = lloyd_rtol
    vectors_rows = vectors(0).shape[0]
    n_rows = min(vectors_rows, subsample) if subsample is not None else vectors_rows
    budget = workers if workers is not None else torch.get_num_threads()
    size = _chunk_size(n_classes, n_rows, n_bins, max(1, budget))
    if max_batch is not None:
        size = max(1, min(size, max_batch))
    starts = list(range(0, n_classes, size))

    def _settings(k: int) -> dict[str, Any]:
        subsampled = subsample is not None and vectors_rows > subsample
        return {**settings, "refine": refine} if subsampled else dict(settings)

    def run_chunk(j: int) -> list[tuple[torch.Tensor, int, dict[str, Any]]]:
        classes = range(starts[j], min(starts[j] + size, n_classes))
        xs = {k: vectors(k) for k in classes}
        prepared = {k: _prepare(xs[k], n_bins, seed, subsample, tol) for k in classes}
        results: dict[int, Any] = {}
        # Batch the plain fits by their (rows, bins) shape; the rest go alone.
        shapes: dict[tuple[int, int], list[int]] = {}
        for k in classes:
            g, x_fit, n_clusters, plain, tol_abs = prepared[k]
            if plain and _kmeans_coreset.applies(coreset, x_fit.shape[0]):
                fitted = _kmeans_coreset.fit_torch_coreset(
                    x_fit, n_clusters, g, max_iter, tol_abs, coreset
                )
                results[k] = _finish(xs[k], x_fit, fitted, _settings(k), refine)
            elif plain:
                shapes.setdefault((x_fit.shape[0], n_clusters), []).append(k)
            else:
                results[k] = fallback(k)
        for (_, n_clusters), group in shapes.items():
            if len(group) == 1:
                (k,) = group
                g, x_fit, _, _, tol_abs = prepared[k]
                x32 = x_fit.to(_F32)
                rows = _kmeans_plusplus(x32, n_clusters, g)
                if rows.numel() < n_clusters:  # ran out of distinct rows: the per-class path
                    results[k] = fallback(k)
                    continue
                fitted = _lloyd(x32, x32[rows].clone(), max_iter, tol_abs, lloyd_rtol)
                results[k] = _finish(xs[k], x_fit, fitted, _settings(k), refine)
                continue
            x32 = torch.stack([prepared[k][1].to(_F32) for k in group])
            seeds, exhausted = _seed_batch(x32, n_clusters, [prepared[k][0] for k in group])
            every = torch.arange(len(group), device=x32.device)[:, None]
            start = x32[every, seeds].clone()
            tols = [prepared[k][4] for k in group]
            fits = _lloyd_batch(x32, start, max_iter, tols, lloyd_rtol)
            for i, k in enumerate(group):
                if bool(exhausted[i]):
                    results[k] = fallback(k)
                else:
                    results[k] = _finish(xs[k], prepared[k][1], fits[i], _settings(k), refine)
        return [results[k] for k in classes]

    chunks = map_classes(run_chunk, len(starts), workers=workers)
    return [r for chunk in chunks for r in chunk]
