"""Greedy k-means++ on projection-sorted rows (:mod:`~bensemble.metrics.binning._sorted`): the
dense seeding's draws and choices, touching only the rows a candidate can reach.

A candidate ``c`` can lower a row's distance to its closest chosen centre only if ``|t(x) -
t(c)| < sqrt(closest)`` (``t``: the projection on the diagonal). On an ensemble's one-vs-rest
member vectors, most rows of a class sit near 0 and are soon close to a chosen centre, so a step
touches a few percent of the rows (3.7% of the blocks on the ImageNet-like classes of
``benchmarks/bench_eece_classwise.py``) instead of all of them. Where members disagree (a fifth
of the spread off the diagonal) the bound prunes little; the classwise path then seeds densely
(:func:`off_diagonal` tells the two apart).
"""

from __future__ import annotations

import math

import torch

from bensemble.metrics.binning._sorted import SortedRows, _project

__all__ = ["DENSE_AFTER", "DRAW_BLOCK", "FULL_STEP", "RESUM", "SEED_BLOCK", "off_diagonal", "seed"]

_F64 = torch.float64


#: Rows per block in the seeding's reach test (finer than :data:`BLOCK`: tighter block radii).
SEED_BLOCK = 128
#: Rows per block of the two-level sampling (original row order).
DRAW_BLOCK = 256
#: Seeding steps between exact re-summations of the draw blocks (updated incrementally between).
RESUM = 32
#: Above this fraction of reached blocks a seeding step scores every row (no gathers).
FULL_STEP = 0.15
#: Scores per piece of a full step (``groups x candidates x rows``): cache-sized.
FULL_PIECE = 1 << 20
#: Full steps between refreshes of the block radii (stale radii are upper bounds: still exact).
REACH_EVERY = 4
#: After this many full steps in a row, every later step is a full one (no reach test). Measured
#: on 8 ImageNet-like classes at K = 1000 (``benchmarks/bench_eece_classwise.py``'s workload, one
#: thread): once the few confident rows have centres (step ~25-45), the later centres go into the
#: bulk of near-zero rows, every step reaches most blocks (109 of 140 steps full at N = 20,000,
#: 122 of 199 at N = 50,000), and the pruned steps in between cost more than dense ones (the
#: seeding was 0.65-0.8x the dense one's speed). At K = 200 (N = 20,000) at most 3 in a row.
DENSE_AFTER = 8


def _draw(closest_blocks, block_sums, u):
    """Rows drawn with probability proportional to ``closest``: the first row whose running sum
    (in the original row order) exceeds ``u`` - what ``searchsorted(cumsum(closest), u,
    right=True)`` gives - found block by block, without a pass over every row.

    ``closest_blocks [C, nb, B]``, ``block_sums [C, nb]`` float64, ``u [C, T]``."""
    groups, nb, block = closest_blocks.shape
    ends = torch.cumsum(block_sums, 1)
    b = torch.searchsorted(ends, u, right=True).clamp_(max=nb - 1)  # [C, T]
    before = torch.where(b > 0, ends.gather(1, (b - 1).clamp(min=0)), torch.zeros_like(u))
    every = torch.arange(groups, device=u.device)[:, None]
    within = torch.cumsum(closest_blocks[every, b], 2, dtype=_F64)  # [C, T, B]
    j = torch.searchsorted(within, (u - before)[:, :, None], right=True)[:, :, 0]
    return b * block + j.clamp_(max=block - 1), ends[:, -1]


def _full_step(x, x_t, x_sq, cand, closest, cblocks):
    """A seeding step over every row in the original order (early steps reach most blocks), as
    the dense seeding does it: ``(best candidate [C], fresh draw-block sums)``; ``closest`` is
    updated in place. Groups go a few at a time (``groups x candidates x rows`` at most
    :data:`FULL_PIECE` scores): one group's ``[T, N]`` block stays in cache where a batch of
    many would not (measured at N = 50,000: 175 ms per class one at a time, 247 ms in batches
    of 8)."""
    groups, n, _ = x.shape
    step = max(1, FULL_PIECE // (cand.shape[1] * n))
    best = torch.empty(groups, dtype=torch.int64, device=x.device)
    for a in range(0, groups, step):
        b = min(groups, a + step)
        every = torch.arange(b - a, device=x.device)[:, None]
        xs, cs = x[a:b], cand[a:b]
        d = torch.baddbmm(x_sq[a:b, None, :], xs[every, cs], x_t[a:b], alpha=-2.0)  # [c, T, N]
        d.add_(x_sq[a:b].gather(1, cs)[:, :, None]).clamp_min_(0.0)
        trial = torch.minimum(d, closest[a:b, None, :n], out=d)
        best[a:b] = trial.sum(2, dtype=_F64).argmin(1)  # the dense seeding's rule
        closest[a:b, :n] = trial[every[:, 0], best[a:b]]
    return best, cblocks.sum(2, dtype=_F64)


def off_diagonal(x: torch.Tensor, rows: SortedRows) -> torch.Tensor:
    """``[C]`` share of each group's sum of squares (around its mean) orthogonal to the diagonal:
    how far the member vectors are from "the members agree". The projection bound prunes the
    seeding well below ~0.1 (confident ensembles: 0.02-0.04 measured) and poorly above (members
    that disagree by a factor ``e``: 0.22). From the sorted rows' projections and norms: ``1 -
    sum (t - mean t)^2 / (sum ||x||^2 - N ||mean x||^2)``, in float64."""
    n = rows.n
    t = rows.proj[:, :n].to(_F64)
    along = ((t - t.mean(dim=1, keepdim=True)) ** 2).sum(1)
    mean = x.mean(dim=1, dtype=_F64)
    total = rows.sq[:, :n].sum(1, dtype=_F64) - n * (mean * mean).sum(1)
    return 1.0 - along / total.clamp_min(1e-300)


def seed(
    x: torch.Tensor, rows: SortedRows, n_clusters: int, gens: list[torch.Generator]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy k-means++ for every group - the draws and choices of
    :func:`bensemble.metrics.binning._lloyd._kmeans_plusplus`, touching only reachable rows.

    A candidate ``c`` can lower a row's distance to its closest chosen centre only if
    ``|t(x) - t(c)| < sqrt(closest)``; per block of :data:`SEED_BLOCK` sorted rows the largest
    ``sqrt(closest)`` bounds that, so each step scores the candidates on the blocks they can
    reach and updates ``closest`` there (on confident predictions a few percent of the rows).
    Rows are drawn with probability proportional to ``closest`` through per-block sums in the
    original row order (:func:`_draw`), the dense seeding's draws up to the rounding of the
    running sums.

    Args:
        x: ``[C, N, H]`` float32 rows in their original order.
        rows: the same rows sorted (:meth:`SortedRows.build`).
        n_clusters: centres ``M`` per group.
        gens: one generator per group (each draws what the dense seeding draws, in order).

    Returns:
        ``(chosen [C, M] original row indices, exhausted [C])``: an exhausted group ran out of
        distinct rows (its remaining entries are meaningless; the caller refits it alone).
    """
    groups, n, width = x.shape
    device = x.device
    trials = 2 + int(math.log(n_clusters))
    first = torch.cat([torch.randint(n, (1,), generator=g) for g in gens]).to(device)
    draws = torch.stack(
        [torch.rand((n_clusters - 1) * trials, generator=g, dtype=_F64) for g in gens]
    ).view(groups, n_clusters - 1, trials)
    every = torch.arange(groups, device=device)
    x_sq = (x * x).sum(2)  # [C, N]
    proj = _project(x)  # [C, N]
    chosen = torch.empty(groups, n_clusters, dtype=torch.int64, device=device)
    chosen[:, 0] = first
    c0 = x[every, first]  # [C, H]
    # the running minimum in the original order, padded with zeros to whole draw blocks (at
    # least one padding entry: the sorted padding rows point at it)
    nbo = n // DRAW_BLOCK + 1
    closest = torch.zeros(groups, nbo * DRAW_BLOCK, dtype=x.dtype, device=device)
    d0 = torch.baddbmm(x_sq[:, None, :], c0[:, None, :], x.transpose(1, 2), alpha=-2.0)
    closest[:, :n] = d0[:, 0].add_(x_sq[every, first][:, None]).clamp_min_(0.0)
    cblocks = closest.view(groups, nbo, DRAW_BLOCK)
    sums = cblocks.sum(2, dtype=_F64)
    n_rows = rows.x.shape[1]
    block = SEED_BLOCK if n_rows % SEED_BLOCK == 0 else n_rows
    nb = n_rows // block
    xb = rows.x.view(groups, nb, block, width)
    sqb = rows.sq.view(groups, nb, block)
    pb = rows.proj.view(groups, nb, block)
    lo, hi = pb[:, :, 0], pb[:, :, -1]
    pad = torch.full((groups, n_rows - n), n, dtype=torch.int64, device=device)
    order = torch.cat([rows.order, pad], dim=1)  # padding rows -> the zero entry ``n``
    reach = closest.gather(1, order).view(groups, nb, block).amax(2).sqrt_()
    exhausted = torch.zeros(groups, dtype=torch.bool, device=device)
    arange_block = torch.arange(block, device=device)
    x_t, full, streak = x.transpose(1, 2), 0, 0
    tiny = 1e-9 * sums.sum(1)
    for k in range(1, n_clusters):
        if bool((sums.sum(1) <= tiny).any()):  # maybe all zero: incremental sums leave residue
            sums = cblocks.sum(2, dtype=_F64)
        cand, total = _draw(cblocks, sums, draws[:, k - 1] * sums.sum(1, keepdim=True))
        exhausted |= ~(total > 0)
        cand.clamp_(max=n - 1)  # [C, T]
        if streak < DENSE_AFTER:
            tc = proj.gather(1, cand)  # [C, T]
            gap = torch.maximum(lo[:, None, :] - tc[:, :, None], tc[:, :, None] - hi[:, None, :])
            slack = 1e-6 * (reach + tc.abs().amax(1, keepdim=True)) + 1e-30
            hit = (gap < (reach + slack)[:, None, :]).any(1)  # [C, nb] blocks a candidate reaches
        if streak >= DENSE_AFTER or float(hit.double().mean()) > FULL_STEP:
            # after DENSE_AFTER full steps in a row the bound has stopped pruning (the centres
            # now go into the bulk of near-equal rows): every later step is a full one
            best, sums = _full_step(x, x_t, x_sq, cand, closest, cblocks)
            chosen[:, k] = cand[every, best]
            full, streak = full + 1, streak + 1
            # closest only decreases: a stale reach still bounds it (more blocks)
            if full % REACH_EVERY == 0 and streak < DENSE_AFTER:
                reach = closest.gather(1, order).view(groups, nb, block).amax(2).sqrt_()
            continue
        streak = 0
        cls, blk = hit.nonzero(as_tuple=True)
        pick = cand[cls]  # [P, T]
        d = torch.baddbmm(
            sqb[cls, blk][:, None, :],
            x[cls[:, None], pick],
            xb[cls, blk].transpose(1, 2),
            alpha=-2.0,
        )
        d.add_(x_sq[cls[:, None], pick][:, :, None]).clamp_min_(0.0)  # [P, T, B]
        orig = order[cls[:, None], blk[:, None] * block + arange_block]  # [P, B] original rows
        old = closest[cls[:, None], orig]  # 0 for the padding rows: no gain, nothing to lower
        gain = (old[:, None, :] - d).clamp_min_(0.0).sum(2, dtype=_F64)  # [P, T]
        gains = torch.zeros(groups, trials, dtype=_F64, device=device).index_add_(0, cls, gain)
        best = gains.argmax(1)  # [C]: the dense argmin of the potential, first on ties
        chosen[:, k] = cand[every, best]
        new = torch.minimum(old, d[torch.arange(cls.numel(), device=device), best[cls]])
        closest[cls[:, None], orig] = new
        reach[cls, blk] = new.amax(1).sqrt_()
        # the draw-block sums follow the changes (re-summed exactly every RESUM steps)
        slot = cls[:, None] * nbo + torch.div(orig, DRAW_BLOCK, rounding_mode="floor")
        sums.view(-1).index_add_(0, slot.view(-1), (new - old).view(-1).to(_F64))
        if k % RESUM == 0:
            sums = cblocks.sum(2, dtype=_F64)
    return chosen, exhausted
