"""Greedy k-means++ on a seeded subsample of each class's rows: the classwise path's seeding.

The exact greedy k-means++ scores ``2 + floor(ln M)`` candidates against every row at each of
the ``M`` steps: ``O(M ln M N H)``, at N = 50,000 and 200 bins as much CPU as the whole Lloyd
that follows (``benchmarks/profile_kmeans_classwise.py``). As scikit-learn's
:class:`~sklearn.cluster.MiniBatchKMeans` does with ``init_size``, the classwise path seeds on a
sample of :data:`INIT_ROWS` rows of each class (:func:`sample`: stratified, drawn from the
class's generator, so deterministic for a fixed seed): weighted greedy k-means++
(:func:`~._batched.greedy_kmeans_plusplus`, float32 potentials of the candidates), then at most
:data:`INIT_STEPS` weighted Lloyd steps there (:func:`_sample_lloyd`: all classes of a chunk at
once on projection-sorted rows, exact nearest centres, float64 sums), and hands those centres to
Lloyd over every row (:mod:`~bensemble.metrics.binning._sorted`). The seeds differ from the
per-class fit's; the within-bin sum of squares stays close to it
(``benchmarks/bench_eece_classwise.py`` prints the ratio per class;
``tests/metrics/binning/test_coreset.py`` bounds it on a fixed case).

A class's seeds do not depend on the classes it is batched with: each class draws from its own
generator, and every batched kernel computes a class as it would alone (the sorted nearest
search is exact), so the result does not depend on how the classes are chunked
(``tests/metrics/binning/test_subsample_seed.py``).
"""

from __future__ import annotations

import math

import torch

from bensemble.metrics.binning._batched import greedy_kmeans_plusplus
from bensemble.metrics.binning._sorted import SortedRows, nearest, nearest_from_scratch, rows_at

__all__ = ["INIT_ROWS", "INIT_STEPS", "INIT_RTOL", "FAR_SHARE", "sample", "seed"]

_F64 = torch.float64
#: Rows of the seeding sample (scikit-learn's ``init_size`` default is 3 x 1,024).
INIT_ROWS = 4096
#: Share of the sample taken as the rows farthest from the class mean (weight 1 each).
FAR_SHARE = 0.75
#: Most weighted Lloyd steps on the sample before the fit over every row (0: none).
INIT_STEPS = 30
#: A sample Lloyd step lowering the weighted inertia by less than this share of it is the last.
INIT_RTOL = 1e-3
#: Candidates per k-means++ step (``None``: ``2 + floor(ln M)``, scikit-learn's).
INIT_TRIALS: int | None = None


def sample(x: torch.Tensor, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """The seeding sample of one class's rows ``x [N, H]`` (float32) and its float32 weights.

    Stratified: the ``FAR_SHARE * INIT_ROWS`` rows farthest from the mean (the confident
    predictions of a one-vs-rest class, which the optimal cells isolate), each of weight 1, and
    a uniform draw without replacement of the rest from ``g``, each standing for its stratum's
    share. All rows (weight 1) when ``N <= INIT_ROWS``."""
    n = x.shape[0]
    if n <= INIT_ROWS:
        return x, torch.ones(n, dtype=x.dtype, device=x.device)
    d = ((x - x.mean(0)) ** 2).sum(1, dtype=_F64)
    n_far = int(INIT_ROWS * FAR_SHARE)
    # the n_far largest distances; ties at the threshold go to the lower row indices
    threshold = torch.kthvalue(d, n - n_far + 1).values
    far = d > threshold
    ties = (d == threshold).nonzero()[:, 0]
    far[ties[: n_far - int(far.sum())]] = True
    rest = (~far).nonzero()[:, 0]
    drawn = rest[torch.randperm(rest.numel(), generator=g)[: INIT_ROWS - n_far].to(x.device)]
    rows = torch.cat([far.nonzero()[:, 0], drawn])
    w = torch.ones(INIT_ROWS, dtype=x.dtype, device=x.device)
    w[n_far:] = rest.numel() / (INIT_ROWS - n_far)
    return x[rows], w


def _kmeans_plusplus(
    xs: torch.Tensor, w: torch.Tensor, n_clusters: int, gens: list[torch.Generator]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Weighted greedy k-means++ for every class of ``xs [C, S, H]`` with weights ``w [C, S]``
    (:func:`~._batched.greedy_kmeans_plusplus`, :data:`INIT_TRIALS` candidates per step). Each
    class draws from its own generator: the result of a class does not depend on the batch.
    Returns ``([C, M] sample rows, exhausted [C])``."""
    return greedy_kmeans_plusplus(xs, n_clusters, gens, weights=w, n_trials=INIT_TRIALS)


def _sample_lloyd(xs, w, start, max_iter: int, tols: list[float], rtol: float) -> torch.Tensor:
    """Weighted Lloyd on the samples ``xs [C, S, H]`` (weights ``w [C, S]``) of every class at
    once from ``start [C, M, H]``, on projection-sorted rows (:func:`~._sorted.nearest`, exact):
    each class stops once the summed squared centroid shift is at most its ``tols`` entry, a step
    lowers the weighted within-cluster sum of squares by at most ``rtol`` of it, or after
    ``max_iter`` steps. The weighted sums are recomputed each step (float64). Returns the
    centres ``[C, M, H]`` (float32)."""
    rows = SortedRows.build(xs)
    groups, n_rows, width = rows.x.shape
    m = start.shape[1]
    ws = torch.zeros(groups, n_rows, dtype=_F64, device=xs.device)  # padding rows weigh 0
    ws[:, : rows.n] = w.to(_F64).gather(1, rows.order)
    xw = rows.x.to(_F64) * ws[:, :, None]
    x_sq = (rows.sq.to(_F64) * ws).sum(1)
    labels, dist = nearest_from_scratch(rows, start)
    centroids, out = start, start.clone()
    index = torch.arange(groups, device=xs.device)  # original class of each active one
    tol = torch.tensor(tols, dtype=_F64, device=xs.device)
    previous = torch.full((groups,), math.inf, dtype=_F64, device=xs.device)
    for step in range(max_iter):
        active = labels.shape[0]
        flat = (labels + (torch.arange(active, device=xs.device) * m)[:, None]).view(-1)
        mass = torch.zeros(active * m, dtype=_F64, device=xs.device)
        mass = mass.index_add_(0, flat, ws.view(-1)).view(active, m)
        sums = torch.zeros(active * m, width, dtype=_F64, device=xs.device)
        sums = sums.index_add_(0, flat, xw.view(-1, width)).view(active, m, width)
        filled = mass > 0
        safe = torch.where(filled, mass, 1.0)
        within = x_sq - torch.where(filled, (sums * sums).sum(2) / safe, 0.0).sum(1)
        new = torch.where(filled[:, :, None], sums / safe[:, :, None], centroids.to(_F64))
        new = new.to(start.dtype)
        move = (new - centroids).to(_F64).pow_(2).sum(2)
        centroids = new
        stop = (move.sum(1) <= tol) | (previous - within <= rtol * within.clamp_min(0.0))
        previous = within
        done = stop if step < max_iter - 1 else torch.ones_like(stop)
        out[index[done]] = centroids[done]
        keep = (~done).nonzero()[:, 0]
        if keep.numel() == 0:
            break
        if keep.numel() < done.numel():
            rows, ws, xw, x_sq = rows.select(keep), ws[keep], xw[keep], x_sq[keep]
            labels, dist, centroids, move = labels[keep], dist[keep], centroids[keep], move[keep]
            index, tol, previous = index[keep], tol[keep], previous[keep]
        upper = dist.clamp_min(0.0).sqrt_() + move.sqrt_().to(dist.dtype).gather(1, labels)
        labels, dist = nearest(rows, centroids, upper, labels)
    return out


def seed(
    x: torch.Tensor, n_clusters: int, gens: list[torch.Generator], tols: list[float]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Starting centres of every class of ``x [C, N, H]`` (float32): weighted greedy k-means++
    on each class's :func:`sample` (same generator), then at most :data:`INIT_STEPS` weighted
    Lloyd steps there (:func:`_sample_lloyd`, all classes at once).

    Returns:
        ``(centres [C, M, H] float32, exhausted [C])``; an exhausted class had fewer distinct
        rows than ``M`` in its sample (its centres are meaningless; the caller refits it).
    """
    samples = [sample(x[i], g) for i, g in enumerate(gens)]
    xs = torch.stack([s[0] for s in samples])
    w = torch.stack([s[1] for s in samples])
    chosen, exhausted = _kmeans_plusplus(xs, w, n_clusters, gens)
    start = rows_at(xs, chosen)
    fine = (~exhausted).nonzero()[:, 0]
    if INIT_STEPS > 0 and xs.shape[1] < x.shape[1] and fine.numel():
        tol = [tols[i] for i in fine.tolist()]
        start[fine] = _sample_lloyd(xs[fine], w[fine], start[fine], INIT_STEPS, tol, INIT_RTOL)
    return start, exhausted
