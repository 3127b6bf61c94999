"""Dense K-means kernels for ``C`` classes at once (``[C, n, H]`` stacks of member vectors).

Every step of :mod:`bensemble.metrics.binning._lloyd` as one batched op over the classes:
k-means++ candidate distances one ``baddbmm`` (``[C, T, H] x [C, H, n]``), the draws one batched
``searchsorted``; each Lloyd assignment one ``baddbmm`` per cache-sized chunk of rows and a
row-wise argmin, the centroid sums one ``index_add_`` with the flat index ``class * M + bin``.
With one intra-op thread a batched op computes every class exactly as the per-class op does
(same kernels, same row chunks, same summation order), and each class draws from its own
generator in the same order, so every class gets what the per-class functions give it alone, bit
for bit (``tests/metrics/binning/test_classes.py``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from bensemble.metrics.binning._lloyd import _within
from bensemble.metrics.binning._nearest import _chunk_rows

__all__ = ["_seed_batch", "_lloyd_batch", "greedy_kmeans_plusplus", "seed_draws"]

_F64 = torch.float64


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
    """``min(closest, ||x - x[rows]||^2)`` as ``[C, T, n]`` (``_lloyd._candidate_dist``
    per class)."""
    picked = x.gather(1, rows[:, :, None].expand(-1, -1, x.shape[2]))
    d = torch.baddbmm(x_sq[:, None, :], picked, x_t, alpha=-2.0)
    d.add_(x_sq.gather(1, rows)[:, :, None]).clamp_min_(0.0)
    return torch.minimum(d, closest[:, None, :], out=d)


def seed_draws(
    gens: list[torch.Generator], n: int, n_clusters: int, n_trials: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """The random numbers of a greedy k-means++ seeding of ``n`` rows, per class from its own
    generator in the per-class seeding's order (:func:`~._lloyd._kmeans_plusplus`): the first
    centre ``[C]`` and the uniform draws of every later step ``[C, M - 1, T]`` (float64)."""
    first = torch.cat([torch.randint(n, (1,), generator=g) for g in gens]).to(device)
    draws = torch.stack(
        [torch.rand((n_clusters - 1) * n_trials, generator=g, dtype=_F64) for g in gens]
    ).view(len(gens), n_clusters - 1, n_trials)
    return first, draws.to(device)


def _weighted_dist(xw_t, wx_sq, x, x_sq, rows, closest):
    """``min(closest, w ||x - x[rows]||^2)`` as ``[C, T, S]``: one ``baddbmm`` of the
    candidates ``[-2 c, ||c||^2]`` with the weighted rows ``[w x, w]`` (``xw_t [C, H + 1, S]``)
    plus ``w ||x||^2`` (``wx_sq [C, S]``), so no product with the weights per step; the clamp to
    ``[0, closest]`` is one pass."""
    picked = x.gather(1, rows[:, :, None].expand(-1, -1, x.shape[2]))  # [C, T, H]
    cand = torch.cat([picked * -2.0, x_sq.gather(1, rows)[:, :, None]], dim=2)
    d = torch.baddbmm(wx_sq[:, None, :], cand, xw_t)
    return d.clamp_(min=torch.zeros((), dtype=d.dtype), max=closest[:, None, :])


def greedy_kmeans_plusplus(
    x: torch.Tensor,
    n_clusters: int,
    gens: list[torch.Generator],
    weights: torch.Tensor | None = None,
    n_trials: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy k-means++ for every class of ``x [C, n, H]`` (float32), each class from its own
    generator (:func:`seed_draws`): at each step ``n_trials`` candidates (default ``2 +
    floor(ln M)``) drawn with probability proportional to ``w * closest``, the one lowering the
    potential ``sum w * closest`` most kept.

    Without ``weights`` every class gets what :func:`~._lloyd._kmeans_plusplus` gives it alone,
    bit for bit (same distances, float64 potentials). With ``weights [C, n]`` (the classwise
    path's weighted sample, :mod:`~._subsample_seed`) the distances come weighted from one
    product and the ``T`` potentials are float32 sums (a choice among ``T`` candidates).

    Returns:
        ``([C, M] row indices, exhausted [C])``: an exhausted class ran out of distinct rows
        (refit it alone).
    """
    n_cls, n, _ = x.shape
    n_trials = n_trials or 2 + int(math.log(n_clusters))
    first, draws = seed_draws(gens, n, n_clusters, n_trials, x.device)
    x_sq = (x * x).sum(2)
    if weights is None:
        x_t = x.transpose(1, 2).contiguous()

        def distances(rows, closest):
            return _candidate_dist(x, x_t, x_sq, rows, closest)

        potential = _F64
    else:
        xw_t = torch.cat([x * weights[:, :, None], weights[:, :, None]], dim=2)
        xw_t = xw_t.transpose(1, 2).contiguous()
        wx_sq = weights * x_sq

        def distances(rows, closest):
            return _weighted_dist(xw_t, wx_sq, x, x_sq, rows, closest)

        potential = x.dtype  # cascade float32 sums
    every = torch.arange(n_cls, device=x.device)
    chosen = torch.empty(n_cls, n_clusters, dtype=torch.int64, device=x.device)
    chosen[:, 0] = first
    closest = torch.full((n_cls, n), math.inf, dtype=x.dtype, device=x.device)
    closest = distances(chosen[:, :1], closest)[:, 0]
    exhausted = torch.zeros(n_cls, dtype=torch.bool, device=x.device)
    for k in range(1, n_clusters):
        cum = torch.cumsum(closest, 1, dtype=_F64)
        total = cum[:, -1]
        exhausted |= ~(total > 0)
        candidates = torch.searchsorted(cum, draws[:, k - 1] * total[:, None], right=True)
        candidates.clamp_(max=n - 1)
        trial = distances(candidates, closest)  # [C, T, n]
        best = trial.sum(2, dtype=potential).argmin(1)
        chosen[:, k] = candidates[every, best]
        closest = trial.view(n_cls * n_trials, n).index_select(0, every * n_trials + best)
    return chosen, exhausted


def _seed_batch(x: torch.Tensor, n_clusters: int, gens: list[torch.Generator]):
    """Greedy k-means++ for every class of ``x [C, n, H]`` (float32), bit-identical per class to
    :func:`~._lloyd._kmeans_plusplus`: :func:`greedy_kmeans_plusplus` without weights."""
    return greedy_kmeans_plusplus(x, n_clusters, gens)


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
