"""A negative result, kept so that its figure can be regenerated: exact triangle-inequality
pruning of the ``"torch"`` K-means (greedy k-means++ that visits only the rows a candidate can
reach; Lloyd with Hamerly's bounds, the lower bound loosened per row only by the centroids that
moved near its own), all in float64.

Same algorithm in exact arithmetic as :mod:`bensemble.metrics.binning._lloyd`, but slower on the
classwise workload of ``benchmarks/bench_eece_classwise.py``: half of those one-vs-rest member
vectors sit in a dense core near 0, where centroid moves keep invalidating the bounds of a large
share of the rows, and gathering those rows costs more than the dense float32 distance block.
``python benchmarks/profile_kmeans_classwise.py --pruned`` measures it. Not used by the library.
"""

from __future__ import annotations

import math

import torch

from bensemble.metrics.binning._nearest import _chunks


def _nearest_two(
    x: torch.Tensor, centroids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row of ``x``: the nearest centroid by the scores ``||c||^2 - 2 x.c`` in ``x``'s dtype
    (ties -> lower index), that score, and the second smallest score (``inf`` with one
    centroid)."""
    n, dev = x.shape[0], x.device
    ids = torch.empty(n, dtype=torch.int64, device=dev)
    s1 = torch.empty(n, dtype=x.dtype, device=dev)
    s2 = torch.empty(n, dtype=x.dtype, device=dev)
    for start, xb, arg, scores in _chunks(x, centroids, x.dtype):
        stop = start + xb.shape[0]
        arg = arg.to(dev)
        ids[start:stop] = arg
        s1[start:stop] = scores.gather(1, arg[:, None])[:, 0]
        scores.scatter_(1, arg[:, None], math.inf)
        if dev.type == "cpu":
            s2[start:stop] = torch.from_numpy(scores.numpy().min(axis=1))
        else:
            s2[start:stop] = scores.amin(1)
    return ids, s1, s2


_F64 = torch.float64
# Relative slack on every bound.
_SLACK = 1e-9


def _pairwise(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Euclidean distances ``[len(a), len(b)]`` from explicit differences (no matmul rounding)."""
    return torch.cdist(a, b, compute_mode="donot_use_mm_for_euclid_dist")


def _rounding(x_sq: torch.Tensor) -> float:
    """Absolute slack on a float64 squared distance from the matmul expansion."""
    return 1e-12 * (1.0 + float(x_sq.max()))


def _kmeans_plusplus(x: torch.Tensor, n_clusters: int, g: torch.Generator) -> torch.Tensor:
    """Greedy k-means++ seeding: each step draws ``2 + floor(ln M)`` candidates with probability
    proportional to the squared distance to the chosen centres and keeps the one that lowers the
    potential most (ties -> the first drawn). Returns the row indices of the centres.

    Pruned: a step computes distances only for the rows a candidate can reach (module docstring).
    """
    x = x.to(_F64)
    n = x.shape[0]
    n_trials = 2 + int(math.log(n_clusters))
    x_sq = (x * x).sum(1)
    eps = _rounding(x_sq)
    chosen = torch.empty(n_clusters, dtype=torch.int64)
    chosen[0] = torch.randint(n, (1,), generator=g)
    centres = x.new_empty(n_clusters, x.shape[1])
    centres[0] = x[chosen[0]]
    closest = ((x - centres[0]) ** 2).sum(1)
    owner = torch.zeros(n, dtype=torch.int64, device=x.device)
    for k in range(1, n_clusters):
        cum = torch.cumsum(closest, 0)
        total = cum[-1]
        if not bool(total > 0):  # every row coincides with a centre: no more distinct rows
            return chosen[:k]
        draws = torch.rand(n_trials, generator=g, dtype=_F64).to(cum.device) * total
        candidates = torch.searchsorted(cum, draws, right=True).clamp_(max=n - 1)
        cx = x.index_select(0, candidates)
        # Row i can gain only if some candidate lies within 2 r_i of its centre.
        near = _pairwise(cx, centres[:k]).amin(0).index_select(0, owner)
        reach = (closest + eps).sqrt_().mul_(2 * (1 + _SLACK)).add_(2 * math.sqrt(eps))
        rows = (near < reach).nonzero().squeeze(1)
        xs = x.index_select(0, rows)
        d = torch.addmm(x_sq.index_select(0, rows)[None, :], cx, xs.T, alpha=-2.0)
        d.add_(x_sq.index_select(0, candidates)[:, None]).clamp_min_(0.0)
        current = closest.index_select(0, rows)
        gain = (current[None, :] - d).clamp_min_(0.0).sum(1)
        best = int(gain.argmax())
        chosen[k] = candidates[best]
        centres[k] = cx[best]
        better = d[best] < current
        closest.index_copy_(0, rows, torch.where(better, d[best], current))
        owner.index_copy_(0, rows, torch.where(better, k, owner.index_select(0, rows)))
    return chosen


class _Bounds:
    """Hamerly's bounds per row: ``upper`` >= the distance to its centroid, ``lower`` <= the
    distance to every other centroid. Re-assignment uses float32 scores (as the dense algorithm
    did); ``lower`` subtracts a bound on their rounding error, ``upper`` is the float64 distance."""

    def __init__(self, x, c):
        self.x = x
        self.x_sq = (x * x).sum(1)
        self.eps = _rounding(self.x_sq)
        self.labels = torch.zeros(x.shape[0], dtype=torch.int64, device=x.device)
        self.upper = torch.full_like(self.x_sq, math.inf)
        self.lower = torch.zeros_like(self.x_sq)

    def _up(self, d_sq):
        return (d_sq + self.eps).sqrt_().mul_(1 + _SLACK).add_(math.sqrt(self.eps))

    def move(self, delta_sq: torch.Tensor, c: torch.Tensor) -> None:
        """The centroids moved by ``sqrt(delta_sq)`` to ``c``: loosen the bounds.

        The upper bound grows by the move of the own centroid. A centroid ``j`` that moved can
        come no closer than ``l - move_j`` (Hamerly) nor than ``||c_a - c_j|| - upper``
        (triangle inequality through the own centroid ``a``); centroids that did not move keep
        their distance. Lower bound: the smaller of the old one and the larger of the two
        bounds, taken over the moved centroids other than ``a``. Late in the fit few centroids
        move, and only the rows of cells near them lose their bound.
        """
        step = delta_sq.sqrt().mul_(1 + _SLACK)
        moved = step > 0
        n_moved = int(moved.sum())
        if n_moved == 0:
            return
        self.upper += step.index_select(0, self.labels)
        # Largest move among the moved centroids other than a, for every a.
        top = step.topk(min(2, step.numel())).values
        largest = torch.full_like(step, float(top[0]))
        if n_moved > 1:
            largest[step == top[0]] = float(top[1])
        else:
            largest[moved] = 0.0
        far = _pairwise(c, c[moved])
        far[moved.nonzero().squeeze(1), torch.arange(n_moved, device=c.device)] = math.inf
        nearest_moved = far.amin(1) if n_moved else torch.full_like(step, math.inf)
        hamerly = self.lower - largest.index_select(0, self.labels)
        triangle = nearest_moved.index_select(0, self.labels) - self.upper
        torch.minimum(self.lower, torch.maximum(hamerly, triangle), out=self.lower)

    def assign(self, c: torch.Tensor):
        """Re-assign the rows whose bounds allow a change; returns ``(rows that moved, old
        labels, new labels)``."""
        bound = self.lower
        if c.shape[0] > 1:
            gap = _pairwise(c, c).fill_diagonal_(math.inf).amin(1).div_(2)
            bound = torch.maximum(bound, gap.index_select(0, self.labels))
        rows = (self.upper >= bound).nonzero().squeeze(1)
        if 0 < rows.numel() < self.x.shape[0]:
            # Tighten the upper bound to the exact distance; re-assign the rows still in doubt.
            xr = self.x.index_select(0, rows)
            own = ((xr - c.index_select(0, self.labels.index_select(0, rows))) ** 2).sum(1)
            up = self._up(own)
            self.upper.index_copy_(0, rows, up)
            rows = rows[up >= bound.index_select(0, rows)]
        if rows.numel() == 0:
            return rows, rows, rows
        xr = self.x.index_select(0, rows)
        ids, _, s2 = _nearest_two(xr, c)
        own = ((xr - c.index_select(0, ids)) ** 2).sum(1)
        low = (s2 + self.x_sq.index_select(0, rows) - self.eps).clamp_min_(0.0)
        low.sqrt_().mul_(1 - _SLACK)
        old = self.labels.index_select(0, rows)
        self.labels.index_copy_(0, rows, ids)
        self.upper.index_copy_(0, rows, self._up(own))
        self.lower.index_copy_(0, rows, low.sub_(math.sqrt(self.eps)))
        moved = ids != old
        return rows[moved], old[moved], ids[moved]


def _lloyd(
    x: torch.Tensor, centroids: torch.Tensor, max_iter: int, tol_abs: float
) -> tuple[torch.Tensor, torch.Tensor, int, bool]:
    """Lloyd iterations from ``centroids``; an empty cluster keeps its centre (and is dropped by
    the caller). Returns ``(centroids, labels, n_iter, converged)``, float64 centroids."""
    x = x.to(_F64)
    c = centroids.to(_F64).clone()
    m = c.shape[0]
    bounds = _Bounds(x, c)
    bounds.assign(c)
    sums = torch.zeros_like(c).index_add_(0, bounds.labels, x)
    counts = torch.bincount(bounds.labels, minlength=m)
    strict = converged = False
    n_iter = 0
    for n_iter in range(1, max_iter + 1):  # noqa: B007 - n_iter is reported
        n_moved = -1
        if n_iter > 1:
            moved, old, new = bounds.assign(c)
            n_moved = moved.numel()
            if n_moved:
                xm = x.index_select(0, moved)
                sums.index_add_(0, new, xm).index_add_(0, old, xm, alpha=-1.0)
                counts += torch.bincount(new, minlength=m) - torch.bincount(old, minlength=m)
        new_c = torch.where(counts[:, None] > 0, sums / counts.clamp_min(1)[:, None], c)
        delta = ((new_c - c) ** 2).sum(1)
        c = new_c
        if n_moved == 0:
            strict = converged = True
            break
        if float(delta.sum()) <= tol_abs:
            converged = True
            break
        bounds.move(delta, c)
    if not strict:
        bounds.move(delta, c)
        bounds.assign(c)
    return c, bounds.labels, n_iter, converged


def _fit_torch(x, n_bins, g, max_iter, tol_abs):
    """Seeding and Lloyd on float64 rows; float64 centroids and the final labels."""
    seeds = _kmeans_plusplus(x, n_bins, g)
    return _lloyd(x, x[seeds].to(_F64), max_iter, tol_abs)
