"""Greedy k-means++ on a seeded subsample of each class's rows: the classwise path's seeding.

The exact greedy k-means++ scores ``2 + floor(ln M)`` candidates against every row at each of
the ``M`` steps: ``O(M ln M N H)``, at N = 50,000 and 200 bins as much CPU as the whole Lloyd
that follows (``benchmarks/profile_kmeans_classwise.py``). As scikit-learn's
:class:`~sklearn.cluster.MiniBatchKMeans` does with ``init_size``, the classwise path seeds on a
uniform subsample of :func:`init_rows` rows of each class (drawn from the class's generator, so
deterministic for a fixed seed), runs a few Lloyd steps there (:data:`INIT_STEPS`), and hands
those centres to Lloyd over every row (:mod:`~bensemble.metrics.binning._sorted`). The seeds
differ from the per-class fit's; the within-bin sum of squares stays close to it
(``benchmarks/bench_eece_classwise.py`` prints the ratio per class;
``tests/metrics/binning/test_classes.py`` bounds it on a fixed case).

Every class is seeded by the batched dense kernels (:func:`~._batched._seed_batch`), which give
each class what it would get alone, bit for bit, whatever the batch: the result does not depend
on how the classes are chunked.
"""

from __future__ import annotations

import math

import torch

from bensemble.metrics.binning._batched import seed_draws
from bensemble.metrics.binning._coreset import _weighted_lloyd
from bensemble.metrics.binning._sorted import rows_at

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


def _weighted_dist(xw_t, wx_sq, xs, x_sq, rows, closest):
    """``min(closest, w ||x - xs[rows]||^2)`` as ``[C, T, S]``: one ``baddbmm`` of the
    candidates ``[-2 c, ||c||^2]`` with the weighted rows ``[w x, w]`` (``xw_t [C, H + 1, S]``)
    plus ``w ||x||^2`` (``wx_sq [C, S]``), so no product with the weights per step."""
    picked = rows_at(xs, rows)  # [C, T, H]
    cand = torch.cat([picked * -2.0, x_sq.gather(1, rows)[:, :, None]], dim=2)
    d = torch.baddbmm(wx_sq[:, None, :], cand, xw_t).clamp_min_(0.0)
    return torch.minimum(d, closest[:, None, :], out=d)


def _kmeans_plusplus(
    xs: torch.Tensor, w: torch.Tensor, n_clusters: int, gens: list[torch.Generator]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Weighted greedy k-means++ for every class of ``xs [C, S, H]`` with weights ``w [C, S]``
    (``2 + floor(ln M)`` candidates per step drawn with probability ``w * closest``, the one
    lowering the weighted potential ``sum w * closest`` most kept). Each class draws from its own
    generator: the result of a class does not depend on the batch. Returns ``([C, M] sample
    rows, exhausted [C])``."""
    groups, size, _ = xs.shape
    n_trials = INIT_TRIALS or 2 + int(math.log(n_clusters))
    first, draws = seed_draws(gens, size, n_clusters, n_trials, xs.device)
    x_sq = (xs * xs).sum(2)
    xw_t = torch.cat([xs * w[:, :, None], w[:, :, None]], dim=2).transpose(1, 2).contiguous()
    wx_sq = w * x_sq
    every = torch.arange(groups, device=xs.device)
    chosen = torch.empty(groups, n_clusters, dtype=torch.int64, device=xs.device)
    chosen[:, 0] = first
    closest = torch.full((groups, size), math.inf, dtype=xs.dtype, device=xs.device)
    closest = _weighted_dist(xw_t, wx_sq, xs, x_sq, chosen[:, :1], closest)[:, 0]  # weighted
    exhausted = torch.zeros(groups, dtype=torch.bool, device=xs.device)
    for k in range(1, n_clusters):
        cum = torch.cumsum(closest, 1, dtype=_F64)
        total = cum[:, -1]
        exhausted |= ~(total > 0)
        cand = torch.searchsorted(cum, draws[:, k - 1] * total[:, None], right=True)
        cand.clamp_(max=size - 1)
        trial = _weighted_dist(xw_t, wx_sq, xs, x_sq, cand, closest)  # [C, T, S]
        best = trial.sum(2, dtype=_F64).argmin(1)
        chosen[:, k] = cand[every, best]
        closest = trial[every, best]
    return chosen, exhausted


def seed(
    x: torch.Tensor, n_clusters: int, gens: list[torch.Generator], tols: list[float]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Starting centres of every class of ``x [C, N, H]`` (float32): weighted greedy k-means++
    on each class's :func:`sample` (same generator), then at most :data:`INIT_STEPS` weighted
    Lloyd steps there.

    Returns:
        ``(centres [C, M, H] float32, exhausted [C])``; an exhausted class had fewer distinct
        rows than ``M`` in its sample (its centres are meaningless; the caller refits it).
    """
    samples = [sample(x[i], g) for i, g in enumerate(gens)]
    xs = torch.stack([s[0] for s in samples])
    w = torch.stack([s[1] for s in samples])
    chosen, exhausted = _kmeans_plusplus(xs, w, n_clusters, gens)
    start = rows_at(xs, chosen)
    if INIT_STEPS > 0 and xs.shape[1] < x.shape[1]:
        for i in (~exhausted).nonzero()[:, 0].tolist():
            start[i] = _weighted_lloyd(xs[i], w[i], start[i], INIT_STEPS, tols[i], INIT_RTOL)[0]
    return start, exhausted
