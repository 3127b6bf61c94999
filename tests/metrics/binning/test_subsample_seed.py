"""The classwise path's seeding (bensemble.metrics.binning._subsample_seed): the stratified
sample, the weighted greedy k-means++ on it, and that a class's seeds do not depend on the
classes it is batched with (the streaming fit and other chunkings must give the same bins)."""

from __future__ import annotations

import pytest
import torch

from bensemble.metrics.binning import _subsample_seed as SS
from bensemble.metrics.binning._lloyd import _kmeans_plusplus

F32, F64 = torch.float32, torch.float64


def _classes(n=6000, h=5, classes=4, seed=0):
    """One-vs-rest-like member vectors ``[C, n, h]``: a dense core near 0 and a sparse tail."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(classes, n, h, generator=g)
    u = torch.randn(classes, n, 1, generator=g)
    return torch.sigmoid(z - 5 + 2.5 * u)


def test_sample_is_the_farthest_rows_and_a_uniform_draw_of_the_rest():
    x = _classes(classes=1)[0]
    xs, w = SS.sample(x, torch.Generator().manual_seed(3))
    n_far = int(SS.INIT_ROWS * SS.FAR_SHARE)
    assert xs.shape == (SS.INIT_ROWS, x.shape[1]) and w.shape == (SS.INIT_ROWS,)
    d = ((x - x.mean(0)) ** 2).sum(1, dtype=F64)
    far = torch.sort(d, descending=True, stable=True).indices[:n_far].sort().values
    assert torch.equal(xs[:n_far], x[far])  # the farthest rows, in row order, weight 1
    assert torch.all(w[:n_far] == 1)
    # the drawn rows are distinct rows outside the far stratum, standing for all of it
    drawn = {tuple(r.tolist()) for r in xs[n_far:]}
    assert len(drawn) == SS.INIT_ROWS - n_far
    assert not drawn & {tuple(r.tolist()) for r in x[far]}
    assert float(w.sum(dtype=F64)) == pytest.approx(x.shape[0], rel=1e-6)
    again, _ = SS.sample(x, torch.Generator().manual_seed(3))
    assert torch.equal(again, xs)  # a fixed seed gives a fixed sample


def test_sample_of_a_small_class_is_every_row():
    x = _classes(n=1000, classes=1)[0]
    xs, w = SS.sample(x, torch.Generator().manual_seed(0))
    assert torch.equal(xs, x) and torch.all(w == 1)


def test_sample_breaks_distance_ties_by_row_order():
    x = torch.zeros(SS.INIT_ROWS * 2, 3)
    x[::2] = 1.0  # half the rows at one distance, half at another: ties everywhere
    xs, w = SS.sample(x, torch.Generator().manual_seed(0))
    assert w.shape == (SS.INIT_ROWS,)
    assert float(w.sum(dtype=F64)) == pytest.approx(x.shape[0], rel=1e-6)


def test_a_class_gets_the_same_seeds_in_any_batch():
    x = _classes()
    tols = [0.0] * x.shape[0]
    together, flags = SS.seed(x, 25, [torch.Generator().manual_seed(7) for _ in range(4)], tols)
    assert not flags.any()
    for i in range(x.shape[0]):
        alone, _ = SS.seed(x[i : i + 1], 25, [torch.Generator().manual_seed(7)], [0.0])
        assert torch.equal(alone[0], together[i])
    pair, _ = SS.seed(x[[2, 0]], 25, [torch.Generator().manual_seed(7) for _ in range(2)], [0, 0])
    assert torch.equal(pair[0], together[2]) and torch.equal(pair[1], together[0])


def test_unit_weights_give_the_dense_seeding_quality():
    # on every row with weight 1 the weighted seeding is greedy k-means++ with the same draws:
    # its potential is the dense seeding's up to rounding-level choices
    x = _classes(n=3000, classes=2)
    w = torch.ones(x.shape[:2])
    gens = [torch.Generator().manual_seed(1) for _ in range(2)]
    chosen, flags = SS._kmeans_plusplus(x, w, 30, gens)
    assert not flags.any()
    for i in range(2):
        dense = _kmeans_plusplus(x[i], 30, torch.Generator().manual_seed(1))
        pot = [
            float(torch.cdist(x[i], x[i][c]).pow(2).min(1).values.sum()) for c in (chosen[i], dense)
        ]
        assert pot[0] == pytest.approx(pot[1], rel=0.05)
        assert len(set(chosen[i].tolist())) == 30


def test_seeding_reports_classes_out_of_distinct_rows():
    x = _classes(n=2000, classes=2)
    base = 0.5 + 0.125 * torch.arange(20, dtype=F32).view(4, 5) / 20
    x[1] = base.repeat(x.shape[1] // 4, 1)  # 4 distinct, exactly representable rows
    _, flags = SS.seed(x, 10, [torch.Generator().manual_seed(0) for _ in range(2)], [0.0, 0.0])
    assert flags.tolist() == [False, True]


def test_sample_lloyd_is_the_dense_weighted_lloyd_of_each_class():
    # the batched sample Lloyd on sorted rows against the per-class dense weighted Lloyd
    # (_coreset._weighted_lloyd: same stopping rules, dense float32 distances, float64 sums)
    # from the same seeds: the same centres up to float32 rounding of the means
    from bensemble.metrics.binning._coreset import _weighted_lloyd

    x = _classes(n=5000, classes=3)
    gens = [torch.Generator().manual_seed(2) for _ in range(3)]
    samples = [SS.sample(x[i], g) for i, g in enumerate(gens)]
    xs = torch.stack([s[0] for s in samples])
    w = torch.stack([s[1] for s in samples])
    assert not torch.all(w == 1)  # weighted: the drawn rows stand for the rest
    chosen, flags = SS._kmeans_plusplus(xs, w, 25, gens)
    assert not flags.any()
    start = torch.stack([xs[i][chosen[i]] for i in range(3)])
    tols = [1e-9, 0.0, 1e-7]
    got = SS._sample_lloyd(xs, w, start, 30, tols, SS.INIT_RTOL)
    for i in range(3):
        want, _, _ = _weighted_lloyd(xs[i], w[i], start[i], 30, tols[i], SS.INIT_RTOL)
        assert torch.allclose(got[i], want, rtol=1e-5, atol=1e-6)
        assert not torch.allclose(got[i], start[i], rtol=1e-5, atol=1e-6)  # it moved
