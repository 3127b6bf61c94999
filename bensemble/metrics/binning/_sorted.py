"""Nearest centroids and Lloyd steps on rows sorted by their projection on the diagonal.

Member vectors ``x = (p_1, ..., p_H)`` of an ensemble lie close to the diagonal (the members
mostly agree), so the projection ``t(x) = (x_1 + ... + x_H) / sqrt(H)`` orders them well: for
any centroid ``c``, ``|t(x) - t(c)| <= ||x - c||`` (Cauchy-Schwarz with the unit vector
``(1, ..., 1) / sqrt(H)``). Given an upper bound ``u`` on a row's nearest-centroid distance, only
the centroids whose projection lies in ``[t(x) - u, t(x) + u]`` can be nearest: with centroids
sorted by projection that is one contiguous *window* of them.

Layout: the rows of ``C`` groups (the classes of a classwise fit) are sorted once by projection
and cut into blocks of :data:`BLOCK` consecutive rows; a block's window is the union of its rows'
windows. Each block goes to the narrowest width *bucket* (:data:`WIDTHS`, then all ``M``)
holding its window, and one batched product per bucket scores its blocks (gathered with one
``index_select``) against windows laid out ``[blocks, window, rows]``, so the minimum over the
window is a fast reduction along a strided axis. On the imagenet-like one-vs-rest member
vectors of ``benchmarks/bench_eece_classwise.py`` (N = 50,000, 200 bins, mid-Lloyd) the median
block window holds 3 centroids, 90% at most 13: 1029 of 1568 blocks take width 4, 270 width 8,
173 width 16, 77 width 32, 19 wider: 14.9k block-by-centroid products against 32.6k for one
width covering 90% of the blocks (16 here) plus rescoring the rest wider. Widths below 4 are
left out: there the CPU's batched product rounds some scores differently from the wider ones
(widths 4, 8, 12, 16, 24, 32, 64, 128 and 200 gave bit-equal scores in float32 and float64 on
the benchmark machine, an AVX-512 AMD EPYC; 1-3 did not), so the labels stay those of one
shared width.

**Exact.** Every centroid that can be nearest is scored: the window radius is inflated by a bound
on the rounding of the scores ``||c||^2 - 2 x.c`` (:func:`_radius`), so the result is the dense
argmin's (:func:`bensemble.metrics.binning._nearest._assign`) except where two centroids tie to
within rounding. Ties go to the lower centroid index for identical centroids (a stable sort).

:func:`lloyd` runs Lloyd iterations for all groups at once with the stopping rules of
:func:`bensemble.metrics.binning._lloyd._lloyd`; each step's upper bound is the previous distance
plus the move of the row's centroid (triangle inequality), and the per-cluster sums are updated
in float64 from the rows that changed cluster only. The classwise path's seeds come from
:mod:`~bensemble.metrics.binning._subsample_seed`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = [
    "BLOCK",
    "WIDTHS",
    "SortedRows",
    "fit",
    "lloyd",
    "nearest",
    "nearest_from_scratch",
    "rows_at",
]

_F64 = torch.float64
#: Rows per block (a block is scored against one window of centroids).
BLOCK = 256
#: Bucket widths below ``M`` (each block is scored in the narrowest one holding its window).
WIDTHS = (4, 8, 16, 32, 64)
#: Share of blocks that must fit a bucket below ``M`` for the bucketed passes (else one full one).
_FULL_BELOW = 0.9
#: Bound on score elements per batched product (``blocks x window x rows``): cache-sized pieces.
_PIECE = 1 << 20


@dataclass
class SortedRows:
    """Rows of ``C`` groups sorted by projection, padded to whole blocks.

    Attributes:
        x: ``[C, R, H]`` rows in projection order (``R`` padded to blocks with the last row).
        proj: ``[C, R]`` their projections, non-decreasing along ``R``.
        sq: ``[C, R]`` squared norms.
        order: ``[C, N]`` original row of every sorted position.
        n: real rows per group ``N`` (positions ``>= N`` are padding).
    """

    x: torch.Tensor
    proj: torch.Tensor
    sq: torch.Tensor
    order: torch.Tensor
    n: int

    @classmethod
    def build(
        cls,
        x: torch.Tensor,
        block: int = BLOCK,
        order: torch.Tensor | None = None,
        groups: torch.Tensor | None = None,
    ) -> SortedRows:
        """Sort ``x [C, N, H]`` (any float dtype) by projection and pad to blocks. ``order``:
        a ``[C, N]`` row order to use instead of sorting (e.g. the float32 rows' order for the
        float64 rows: nearly sorted is enough, the windows are bounded per block). ``groups``:
        with ``order``, the ``C`` groups of ``x [S, N, H]`` to take (rows gathered straight from
        ``x``, no copy of the selection first)."""
        n = x.shape[1]
        if order is None:
            proj, order = torch.sort(_project(x), dim=1, stable=True)
        else:
            proj = _project(x)
            proj = (proj if groups is None else proj[groups]).gather(1, order)
        pad = -n % block
        padded = order
        if pad:  # padding rows repeat the last sorted row (one gather, no second copy)
            padded = torch.cat([order, order[:, -1:].expand(-1, pad)], dim=1)
            proj = torch.cat([proj, proj[:, -1:].expand(-1, pad)], dim=1)
        rows = rows_at(x, padded, groups)
        return cls(rows, proj.contiguous(), (rows * rows).sum(2), order, n)

    @property
    def valid(self) -> torch.Tensor:
        """``[R]`` True for real rows."""
        return torch.arange(self.x.shape[1], device=self.x.device) < self.n

    def select(self, groups: torch.Tensor) -> SortedRows:
        """The rows of a subset of the groups."""
        return SortedRows(
            self.x[groups], self.proj[groups], self.sq[groups], self.order[groups], self.n
        )

    def unsort(self, values: torch.Tensor, group: int) -> torch.Tensor:
        """``[R]`` values of group ``group`` per sorted position -> ``[N]`` per original row."""
        out = torch.empty(self.n, dtype=values.dtype, device=values.device)
        return out.scatter_(0, self.order[group], values[: self.n])


def rows_at(
    x: torch.Tensor, index: torch.Tensor, groups: torch.Tensor | None = None
) -> torch.Tensor:
    """``x[c, index[c, r]]`` as ``[C, R, H]`` for ``x [C, M, H]``, ``index [C, R]``: one
    ``index_select`` on the flattened rows (what ``x.gather(1, index[..., None].expand(...))``
    gives, 4-5x faster on the CPU). ``groups [C]``: take ``x[groups[c], index[c, r]]`` from
    ``x [S, M, H]`` instead."""
    total, m, width = x.shape
    if groups is None:
        groups = torch.arange(index.shape[0], device=x.device)
    base = (groups.to(x.device) * m)[:, None]
    flat = x.reshape(total * m, width).index_select(0, (index + base).view(-1))
    return flat.view(index.shape[0], index.shape[1], width)


def _project(x: torch.Tensor) -> torch.Tensor:
    return x.sum(-1) / math.sqrt(x.shape[-1])


def _radius(upper: torch.Tensor, sq: torch.Tensor, proj: torch.Tensor, cmax, width: int):
    """Window half-width: ``upper`` inflated so that rounding of the scores cannot make an
    excluded centroid the argmin. With ``g = 4 (H + 2) eps`` bounding the relative rounding of a
    score and of ``upper^2``, a centroid at true distance ``d`` with ``d^2 > u^2 (1 + 8 g) +
    8 g ||x||^2`` always scores above the nearest one; projections add ``2 (H + 1) eps``
    times their magnitudes."""
    eps = torch.finfo(upper.dtype).eps
    g = 4.0 * (width + 2) * eps
    r = (upper * upper * (1.0 + 8.0 * g) + 8.0 * g * sq).sqrt_()
    return r.add_(2.0 * (width + 1) * eps * (proj.abs() + cmax))


def _sorted_centroids(centroids: torch.Tensor):
    """Centroids sorted by projection (stable: equal ones keep their index order)."""
    cproj, corder = torch.sort(_project(centroids), dim=1, stable=True)
    cs = centroids.gather(1, corder[:, :, None].expand(-1, -1, centroids.shape[2]))
    return cproj.contiguous(), corder, cs, (cs * cs).sum(2)


def _score_blocks(xb, cs_flat, csq_flat, start, w, guess):
    """Nearest of the window ``start .. start + w`` (flat sorted ids ``[P]``) for every row of
    the blocks ``xb [P, B, H]``: ``(flat sorted id [P, B], its score ||c||^2 - 2 x.c [P, B])``.

    ``guess [P, B]`` (flat sorted ids, e.g. the previous labels) is kept wherever it attains the
    window's minimum score; the argmin runs only over the other rows. The scores are laid out
    ``[P, w, B]`` so that the minimum is a reduction along a strided axis (an argmin over a short
    last axis costs ~10x more per score)."""
    cand = start[:, None] + torch.arange(w, device=start.device)  # [P, w]
    flat = cand.view(-1)
    scores = torch.baddbmm(
        csq_flat.index_select(0, flat).view(-1, w, 1),
        cs_flat.index_select(0, flat).view(-1, w, xb.shape[2]),
        xb.transpose(1, 2),
        alpha=-2.0,
    )  # [P, w, B]
    best = scores.amin(dim=1)  # [P, B]
    pos = guess - start[:, None]
    at = pos.clamp(0, w - 1)
    ok = scores.gather(1, at[:, None, :])[:, 0] == best
    ok &= pos == at  # the guess lies in the window
    picked = guess.clone()
    p_idx, b_idx = (~ok).nonzero(as_tuple=True)
    if p_idx.numel():
        arg = scores[p_idx, :, b_idx].argmin(dim=1)  # first minimum
        picked[p_idx, b_idx] = cand[p_idx, arg]
    return picked, best


def nearest(
    rows: SortedRows, centroids: torch.Tensor, upper: torch.Tensor, guess: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Nearest centroid of every sorted row, given an upper bound on its distance.

    Args:
        rows: ``C`` groups of sorted rows (dtype of the scores).
        centroids: ``[C, M, H]`` centroids, same dtype.
        upper: ``[C, R]`` upper bounds on each row's nearest-centroid distance (not squared).
        guess: ``[C, R]`` a likely nearest centroid per row (the previous labels): kept where it
            scores the minimum, which spares most rows the argmin.

    Returns:
        ``(labels [C, R] int64, squared distances [C, R])``.
    """
    groups, n_rows, width = rows.x.shape
    m = centroids.shape[1]
    block = BLOCK if n_rows % BLOCK == 0 else n_rows
    nb = n_rows // block
    cproj, corder, cs, csq = _sorted_centroids(centroids)
    cmax = cproj.abs().amax(1, keepdim=True)
    r = _radius(upper, rows.sq, rows.proj, cmax, width)
    lo = torch.searchsorted(cproj, (rows.proj - r).view(groups, nb, block).amin(2))
    hi = torch.searchsorted(cproj, (rows.proj + r).view(groups, nb, block).amax(2), right=True)
    span = (hi - lo).view(-1)  # [C * nb]
    base = (torch.arange(groups, device=lo.device) * m)[:, None]
    lo_flat = (lo.clamp(max=m - 1) + base).view(-1)
    rank = torch.empty_like(corder).scatter_(1, corder, torch.arange(m).expand_as(corder))
    guess_flat = (rank.gather(1, guess) + base).view(groups * nb, block)
    cs_flat, csq_flat = cs.reshape(groups * m, width), csq.reshape(groups * m)
    xb = rows.x.view(groups * nb, block, width)
    picked = torch.empty(groups * nb, block, dtype=torch.int64, device=lo.device)
    dist = torch.empty(groups * nb, block, dtype=rows.x.dtype, device=lo.device)
    # every block in the narrowest bucket covering its window, one batched product per bucket
    widths, bucket = _buckets(span, m)
    for j, w in enumerate(widths):
        todo = (bucket == j).nonzero()[:, 0]
        step = max(1, _PIECE // (w * block))
        for a in range(0, todo.numel(), step):
            idx = todo[a : a + step]
            start = torch.minimum(lo_flat[idx], _last_window(lo_flat[idx], m, w))
            pos, d2 = _score_blocks(
                xb.index_select(0, idx),
                cs_flat,
                csq_flat,
                start,
                w,
                guess_flat.index_select(0, idx),
            )
            picked.index_copy_(0, idx, pos)
            dist.index_copy_(0, idx, d2)
    dist.add_(rows.sq.view(groups * nb, block)).clamp_min_(0.0)
    # identical centroids sit next to each other, lowest index first: take the first of a run
    same = torch.zeros(groups, m, dtype=torch.bool, device=lo.device)
    same[:, 1:] = (cs[:, 1:] == cs[:, :-1]).all(2)
    index = torch.arange(m, device=lo.device).expand(groups, m)
    first = torch.where(same, 0, index).cummax(dim=1).values + base
    sorted_id = first.reshape(-1).index_select(0, picked.view(-1))
    labels = corder.reshape(-1).index_select(0, sorted_id).view(groups, -1)
    return labels, dist.view(groups, -1)


def _buckets(span: torch.Tensor, m: int) -> tuple[list[int], torch.Tensor]:
    """Window widths ``[WIDTHS below m..., m]`` and each block's bucket: the index of the
    narrowest width holding its ``span`` centroids (``span <= m`` always).

    When fewer than :data:`_FULL_BELOW` of the blocks fit below ``m`` (or ``m <= 8``), every
    block takes the full width ``m`` (one pass, no gathers): the width the single-bulk layout
    used there, whose float64 scores of the last ``m mod 4`` centroids round differently from
    a narrower window's, so the labels stay bit for bit the same."""
    widths = [w for w in WIDTHS if w < m] + [m]
    fits = float((span <= widths[-2]).double().mean()) if len(widths) > 1 else 0.0
    if m <= 8 or fits < _FULL_BELOW:
        return [m], torch.zeros_like(span)
    return widths, torch.searchsorted(torch.tensor(widths, device=span.device), span)


def _last_window(lo_flat: torch.Tensor, m: int, w: int) -> torch.Tensor:
    """The largest window start of each block's group (``group * m + m - w``)."""
    return torch.div(lo_flat, m, rounding_mode="floor") * m + (m - w)


def nearest_from_scratch(
    rows: SortedRows, centroids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`nearest` without a prior bound: each row's bound is its exact distance to the
    centroid whose projection is closest to its own."""
    cproj, corder, cs, _ = _sorted_centroids(centroids)
    at = torch.searchsorted(cproj, rows.proj).clamp_(max=cproj.shape[1] - 1)
    below = (at - 1).clamp_(min=0)
    closer = (rows.proj - cproj.gather(1, below)).abs() <= (cproj.gather(1, at) - rows.proj).abs()
    guess = torch.where(closer, below, at)
    c = rows_at(cs, guess)
    upper = (rows.x - c).pow_(2).sum(2).sqrt_()
    return nearest(rows, centroids, upper, corder.gather(1, guess))


def _means(sums: torch.Tensor, counts: torch.Tensor, previous: torch.Tensor) -> torch.Tensor:
    """Cluster means from float64 sums (an empty cluster keeps its centre), in the rows' dtype."""
    mean = sums / counts.clamp_min(1.0)[:, :, None]
    return torch.where(counts[:, :, None] > 0, mean, previous.to(_F64)).to(previous.dtype)


def lloyd(
    rows: SortedRows,
    centroids: torch.Tensor,
    labels: torch.Tensor,
    dist: torch.Tensor,
    max_iter: int,
    tol_abs: torch.Tensor,
    rtol: float,
) -> list[tuple[torch.Tensor, torch.Tensor, int, bool]]:
    """Lloyd iterations for every group, each stopping by the rules of
    :func:`bensemble.metrics.binning._lloyd._lloyd`: no label changes; the summed squared centroid
    shift at most ``tol_abs``; with ``rtol > 0``, a step lowering the within-cluster sum of squares
    by at most ``rtol`` of it; ``max_iter``.

    Args:
        rows: ``C`` groups of sorted rows (float32).
        centroids: ``[C, M, H]`` starting centroids.
        labels: ``[C, R]`` nearest starting centroid of every sorted row.
        dist: ``[C, R]`` squared distance to it.
        max_iter: maximum iterations.
        tol_abs: ``[C]`` float64 shift tolerances.
        rtol: relative inertia tolerance (0: off).

    Returns:
        Per group ``(centroids [M, H], labels [N] per original row, iterations, converged)``;
        the labels are the nearest of the returned centroids.
    """
    groups, n_rows, width = rows.x.shape
    m = centroids.shape[1]
    valid = rows.valid
    out: list = [None] * groups
    index = torch.arange(groups, device=rows.x.device)  # original group of each active one
    x_sq = (rows.sq.to(_F64) * valid).sum(1)
    base = (torch.arange(groups, device=labels.device) * m)[:, None]
    flat = (labels + base).masked_fill_(~valid, groups * m).view(-1)
    counts = torch.bincount(flat, minlength=groups * m + 1)[:-1].to(_F64).view(groups, m)
    sums = torch.zeros(groups * m + 1, width, dtype=_F64, device=rows.x.device)
    sums = sums.index_add_(0, flat, rows.x.reshape(-1, width).to(_F64))[:-1].view(groups, m, width)
    previous = torch.full((groups,), math.inf, dtype=_F64)
    for n_iter in range(1, max_iter + 1):
        new = _means(sums, counts, centroids)
        move = (new - centroids).to(_F64).pow_(2).sum(2)  # [C, M] squared moves
        shift = move.sum(1)
        centroids = new
        within = x_sq - ((sums * sums).sum(2) / counts.clamp_min(1.0)).sum(1)
        stop = shift <= tol_abs
        if rtol > 0:
            stop |= previous - within <= rtol * within
        previous = within
        done = stop | (n_iter == max_iter)
        upper = dist.clamp_min(0.0).sqrt_() + move.sqrt_().to(dist.dtype).gather(1, labels)
        new_labels, dist = nearest(rows, centroids, upper, labels)
        moved = (new_labels != labels) & valid
        still = ~moved.any(1)
        for i in (done | still).nonzero()[:, 0].tolist():
            # done: the labels are re-assigned to the final centroids (the dense path's last
            # assignment); still: a label-stable step, the means are the centroids already
            out[int(index[i])] = (
                centroids[i],
                rows.unsort(new_labels[i], i),
                n_iter + int(bool(still[i]) and not bool(done[i])),
                bool(stop[i]) if bool(done[i]) else True,
            )
        keep = ~(done | still)
        if not bool(keep.any()):
            break
        ci, ri = (moved & keep[:, None]).nonzero(as_tuple=True)
        if ci.numel():
            x = rows.x.view(-1, width).index_select(0, ci * n_rows + ri).to(_F64)
            old_slot, new_slot = ci * m + labels[ci, ri], ci * m + new_labels[ci, ri]
            sums.view(-1, width).index_add_(0, old_slot, x, alpha=-1.0)
            sums.view(-1, width).index_add_(0, new_slot, x)
            one = torch.ones_like(old_slot, dtype=_F64)
            counts.view(-1).index_add_(0, old_slot, one, alpha=-1.0).index_add_(0, new_slot, one)
        labels = new_labels
        if not bool(keep.all()):
            k = keep.nonzero()[:, 0]
            rows, index = rows.select(k), index[k]
            centroids, labels, dist = centroids[k], labels[k], dist[k]
            sums, counts, x_sq, previous = sums[k], counts[k], x_sq[k], previous[k]
            tol_abs = tol_abs[k]
            groups = k.numel()
    return out


def fit(
    x: torch.Tensor,
    start: torch.Tensor,
    max_iter: int,
    tol_abs: list[float],
    rtol: float,
    rows: SortedRows | None = None,
) -> list[tuple[torch.Tensor, torch.Tensor, int, bool]]:
    """Lloyd from ``start [C, M, H]`` for the rows ``x [C, N, H]`` (float32) of every group
    (``rows``: the same rows sorted, if built already): per group ``(centroids [M, H], labels
    [N], iterations, converged)`` (see :func:`lloyd`)."""
    rows = SortedRows.build(x) if rows is None else rows
    labels, dist = nearest_from_scratch(rows, start)
    tol = torch.tensor(tol_abs, dtype=_F64)
    return lloyd(rows, start.clone(), labels, dist, max_iter, tol, rtol)
