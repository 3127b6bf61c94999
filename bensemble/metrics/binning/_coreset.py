"""Coreset K-means (opt-in, ``coreset=S``): the ``"torch"`` fit on a weighted sample, then Lloyd
steps over every row.

At ``N = 50,000`` one exact fit is ~45 ms of k-means++ seeding plus 30-110 Lloyd steps of ~5 ms
(``[N, M]`` distance blocks; ``benchmarks/profile_kmeans_classwise.py``). With ``coreset=S`` and
more than ``2 S`` rows to fit:

1. **Lightweight coreset** (Bachem, Lucic and Krause, KDD 2018): ``S`` rows drawn with replacement
   with probability ``q(x) = 1/(2N) + d(x, mean)^2 / (2 sum d^2)``, each weighted ``1 / (S q(x))``.
   The distance term keeps the sparse tails that a uniform subsample misses (a uniform 10,000-row
   subsample with 2-5 refinement passes left the inertia 1.7-6.1% above the full fit's:
   ``profile_kmeans_classwise.py --subsample``).
2. Weighted greedy k-means++ and weighted Lloyd on the coreset, stopped by the usual rule
   (summed squared centroid shift below ``tol`` times the mean feature variance) or when a step
   improves the weighted inertia by less than :data:`CORESET_RTOL` of it.
3. At most :data:`MAX_REFINE_STEPS` Lloyd steps over every row (float32 distances, float64
   sums), stopped when a step lowers the within-cluster sum of squares by less than
   :data:`REFINE_RTOL` of it (computed from the sums, no extra pass).

Measured (``python benchmarks/profile_kmeans_classwise.py --stopping``, one thread): at N = 50,000,
100 bins, S = 10,000: 3.1-3.4x less CPU than the exact fit, inertia worst class +0.9% / +1.15%,
mean +0.4% / +0.0% (K = 100 / 1000); but at N = 10,000, 20 bins, S = 2,000 up to +4.9% on a class
(K = 1000). Hence it is not the classwise default (that is ``lloyd_rtol``, whose seeding and
steps are the exact fit's). If the coreset holds fewer distinct rows than bins the fit falls back
to the exact one (same generator, so deterministic either way).
"""

from __future__ import annotations

import math

import torch

from bensemble.metrics.binning._lloyd import _fit_torch, _kmeans_plusplus
from bensemble.metrics.binning._nearest import _assign, _chunks

__all__ = ["MAX_REFINE_STEPS", "REFINE_RTOL", "applies", "fit_torch_coreset"]

_F32, _F64 = torch.float32, torch.float64
#: Most Lloyd steps over every row after the coreset fit.
MAX_REFINE_STEPS = 30
#: A coreset Lloyd step that lowers the weighted within-cluster sum of squares by less than this
#: fraction of it is the last one (besides the usual centroid-shift rule).
CORESET_RTOL = 1e-3
#: A full-data step that lowers the within-cluster sum of squares by less than this fraction of
#: it is the last one.
REFINE_RTOL = 3e-4


def applies(coreset: int | None, n_fit: int) -> bool:
    """Whether a fit of ``n_fit`` rows uses the coreset (more than twice its size)."""
    return coreset is not None and n_fit > 2 * coreset


def _sample(x: torch.Tensor, size: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Coreset rows of ``x [N, H]`` (float32) and their weights (sum close to ``N``)."""
    n = x.shape[0]
    d = ((x - x.mean(0)) ** 2).sum(1, dtype=_F64)
    total = float(d.sum())
    q = torch.full((n,), 0.5 / n, dtype=_F64)
    if total > 0:
        q += 0.5 * d / total
    rows = torch.multinomial(q, size, replacement=True, generator=g)
    return x[rows], (1.0 / (size * q[rows])).to(x.dtype)


def _weighted_kmeans_plusplus(
    x: torch.Tensor, w: torch.Tensor, n_clusters: int, g: torch.Generator
) -> torch.Tensor | None:
    """Greedy k-means++ on weighted rows (:func:`~._lloyd._kmeans_plusplus` with ``weights``):
    the centres, or ``None`` when the rows run out of distinct values."""
    chosen = _kmeans_plusplus(x, n_clusters, g, weights=w)
    return x[chosen].clone() if chosen.shape[0] == n_clusters else None


def _weighted_lloyd(x, w, centroids, max_iter: int, tol_abs: float, rtol: float):
    """Weighted Lloyd on the coreset, stopped by the centroid-shift rule or when a step lowers
    the weighted within-cluster sum of squares by less than ``rtol`` of itself; an empty cluster
    keeps its centre."""
    n_iter, converged = 0, False
    xw = x.to(_F64) * w.to(_F64)[:, None]
    x_sq = float((xw * x.to(_F64)).sum())
    previous = math.inf
    for n_iter in range(1, max_iter + 1):  # noqa: B007 - n_iter is reported
        labels, _ = _assign(x, centroids)
        mass = torch.zeros(centroids.shape[0], dtype=_F64).index_add_(0, labels, w.to(_F64))
        sums = torch.zeros(centroids.shape, dtype=_F64).index_add_(0, labels, xw)
        safe = mass.clamp_min(1e-300)[:, None]
        within = x_sq - float(((sums * sums) / safe)[mass > 0].sum())
        new = torch.where(mass[:, None] > 0, sums / safe, centroids.to(_F64)).to(x.dtype)
        shift = float(((new - centroids) ** 2).sum())
        centroids = new
        if shift <= tol_abs or previous - within <= rtol * max(within, 0.0):
            converged = True
            break
        previous = within
    return centroids, n_iter, converged


def _refine_until(x: torch.Tensor, centroids: torch.Tensor, max_steps: int, rtol: float):
    """Lloyd steps over every row of ``x`` (float64 rows, float32 distances, float64 sums) until
    the within-cluster sum of squares improves by less than ``rtol`` of itself. Returns the
    centroids (float64), the labels of the last assignment and the steps run."""
    m, width = centroids.shape
    x_sq = float((x * x).sum())
    centroids = centroids.to(_F64)
    previous = math.inf
    labels = torch.empty(x.shape[0], dtype=torch.int64)
    steps = 0
    for steps in range(1, max_steps + 1):  # noqa: B007 - steps is reported
        sums = torch.zeros(m, width, dtype=_F64)
        for start, xb, arg, _ in _chunks(x, centroids, _F32):
            sums.index_add_(0, arg, xb.to(_F64))
            labels[start : start + xb.shape[0]] = arg
        counts = torch.bincount(labels, minlength=m)
        safe = counts.clamp_min(1)[:, None].to(_F64)
        within = x_sq - float(((sums * sums) / safe).sum())
        centroids = torch.where(counts[:, None] > 0, sums / safe, centroids)
        if previous - within <= rtol * max(within, 0.0):
            break
        previous = within
    return centroids, labels, steps


def fit_torch_coreset(
    x: torch.Tensor, n_clusters: int, g: torch.Generator, max_iter: int, tol_abs: float, size: int
):
    """The coreset fit of ``x [N, H]`` (float64 rows) on ``size`` coreset rows: ``(centroids
    float64, labels [N], Lloyd iterations (coreset + full-data steps), converged)``, or the exact
    ``_fit_torch`` result when the coreset runs out of distinct rows. The stopping rules are the
    module's constants (:data:`CORESET_RTOL`, :data:`MAX_REFINE_STEPS`, :data:`REFINE_RTOL`)."""
    x32 = x.to(_F32)
    xc, w = _sample(x32, size, g)
    start = _weighted_kmeans_plusplus(xc, w, n_clusters, g)
    if start is None:
        return _fit_torch(x, n_clusters, g, max_iter, tol_abs)
    centroids, n_iter, converged = _weighted_lloyd(xc, w, start, max_iter, tol_abs, CORESET_RTOL)
    centroids, labels, steps = _refine_until(x, centroids, MAX_REFINE_STEPS, REFINE_RTOL)
    return centroids, labels, n_iter + steps, converged
