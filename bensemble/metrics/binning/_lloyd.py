"""The ``"torch"`` K-means: greedy k-means++ seeding (``2 + floor(ln M)`` candidates per step, as
scikit-learn does) and Lloyd iterations, in float32 (centroids are returned in float64).

Lloyd stops when no label changes or when the summed squared centroid shift falls below
``tol_abs``; an empty cluster keeps its centre (the caller drops it). The same arithmetic runs for
many classes at once in :mod:`bensemble.metrics.binning._classes`, which must stay bit-identical to
these functions: change both together.
"""

from __future__ import annotations

import math

import torch

from bensemble.metrics.binning import _sorted
from bensemble.metrics.binning._nearest import _assign

__all__ = ["_candidate_dist", "_kmeans_plusplus", "_lloyd", "_fit_torch"]


def _candidate_dist(
    x: torch.Tensor,
    x_t: torch.Tensor,
    x_sq: torch.Tensor,
    rows: torch.Tensor,
    closest: torch.Tensor,
) -> torch.Tensor:
    """``min(closest, ||x - x[rows]||^2)`` as ``[R, N]``.

    ``c @ x_t`` with a contiguous ``x_t = x.T`` was the fastest layout for a handful of
    candidates at every ``H`` measured (10-100; ``x @ c.T`` was up to 8x slower at H = 10), and
    the per-candidate potentials are then contiguous row sums.
    """
    d = torch.addmm(x_sq[None, :], x[rows], x_t, alpha=-2.0)
    d.add_(x_sq[rows][:, None]).clamp_min_(0.0)
    return torch.minimum(d, closest[None, :], out=d)


def _kmeans_plusplus(
    x: torch.Tensor, n_clusters: int, g: torch.Generator, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """Greedy k-means++ seeding: each step draws ``2 + floor(ln M)`` candidates with probability
    proportional to the squared distance to the chosen centres (times the row's weight, with
    ``weights [N]``: the coreset's) and keeps the one that lowers the potential most. Returns the
    row indices of the centres: fewer than ``n_clusters`` when the rows run out of distinct
    values."""
    n = x.shape[0]
    n_trials = 2 + int(math.log(n_clusters))
    x_sq = (x * x).sum(1)
    x_t = x.T.contiguous()
    chosen = torch.empty(n_clusters, dtype=torch.int64)
    chosen[0] = torch.randint(n, (1,), generator=g)
    if weights is None:
        closest = torch.full((n,), math.inf, dtype=x.dtype, device=x.device)
        closest = _candidate_dist(x, x_t, x_sq, chosen[:1], closest)[0]
    else:  # the coreset fit's first distances, as measured (bensemble.metrics.binning._coreset)
        closest = ((x - x[chosen[0]]) ** 2).sum(1)
    for k in range(1, n_clusters):
        mass = closest if weights is None else closest * weights
        cum = torch.cumsum(mass, 0, dtype=torch.float64)  # float64: exact enough to sample
        total = cum[-1]
        if not bool(total > 0):  # every row coincides with a centre: no more distinct rows
            return chosen[:k]
        draws = torch.rand(n_trials, generator=g, dtype=torch.float64).to(cum.device) * total
        candidates = torch.searchsorted(cum, draws, right=True).clamp_(max=n - 1)
        trial = _candidate_dist(x, x_t, x_sq, candidates, closest)
        potential = trial if weights is None else trial * weights
        best = int(potential.sum(1, dtype=torch.float64).argmin())
        chosen[k] = candidates[best]
        closest = trial[best]
    return chosen


def _within(x_sq: float, sums: torch.Tensor, counts: torch.Tensor) -> float:
    """Within-cluster sum of squares of a partition from its per-cluster sums and counts:
    ``sum ||x||^2 - sum_m ||S_m||^2 / n_m`` (float64; no pass over the rows)."""
    s = sums.to(torch.float64)
    return x_sq - float(((s * s).sum(1) / counts.clamp_min(1)).sum())


def _lloyd(
    x: torch.Tensor,
    centroids: torch.Tensor,
    max_iter: int,
    tol_abs: float,
    rtol: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, int, bool]:
    """Lloyd iterations; an empty cluster keeps its centre (and is dropped by the caller).
    With ``rtol > 0`` also stop when a step lowers the within-cluster sum of squares by at most
    ``rtol`` of itself (the classwise EECE's default, ``lloyd_rtol``)."""
    m = centroids.shape[0]
    labels_old = None
    x_sq = float((x.to(torch.float64) ** 2).sum()) if rtol > 0 else 0.0
    previous = math.inf
    strict = converged = False
    n_iter = 0
    for n_iter in range(1, max_iter + 1):  # noqa: B007 - n_iter is reported
        labels, _ = _assign(x, centroids)
        counts = torch.bincount(labels, minlength=m)
        sums = torch.zeros_like(centroids).index_add_(0, labels, x)
        new = torch.where(
            counts[:, None] > 0, sums / counts.clamp_min(1)[:, None].to(x.dtype), centroids
        )
        shift = float(((new - centroids) ** 2).sum())
        centroids = new
        if labels_old is not None and torch.equal(labels, labels_old):
            strict = converged = True
            break
        labels_old = labels
        within = _within(x_sq, sums, counts) if rtol > 0 else 0.0
        if shift <= tol_abs or (rtol > 0 and previous - within <= rtol * within):
            converged = True
            break
        previous = within
    if not strict:
        labels, _ = _assign(x, centroids)
    return centroids, labels, n_iter, converged


def _fit_torch(x, n_bins, g, max_iter, tol_abs, rtol=0.0):
    """Seeding then Lloyd; with ``rtol > 0`` Lloyd runs on projection-sorted rows
    (:mod:`~bensemble.metrics.binning._sorted`, what the classwise EECE runs for every class).

    The fit runs in float32: about twice as fast, and distances between probability vectors
    need no more precision to choose a cell. Centroids come back as float64, and every
    assignment after the fit (the one the EECE uses) is computed in float64."""
    x32 = x.to(torch.float32)
    seeds = _kmeans_plusplus(x32, n_bins, g)
    start = x32[seeds].clone()
    if rtol > 0:
        fitted = _sorted.fit(x32[None], start[None], max_iter, [tol_abs], rtol)[0]
    else:
        fitted = _lloyd(x32, start, max_iter, tol_abs, rtol)
    centroids, labels, n_iter, converged = fitted
    return centroids.to(torch.float64), labels, n_iter, converged
