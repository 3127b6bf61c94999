"""Projection-sorted K-means kernels (bensemble.metrics.binning._sorted) against the dense ones:
the same nearest centroids, Lloyd steps and k-means++ seeds."""

from __future__ import annotations

import math

import pytest
import torch

from bensemble.metrics.binning import _sorted as S
from bensemble.metrics.binning import _sorted_seed as SS
from bensemble.metrics.binning._lloyd import _kmeans_plusplus, _lloyd
from bensemble.metrics.binning._nearest import _assign

F64 = torch.float64


def _confident(n=3000, h=6, k=30, seed=0, classes=4):
    """One-vs-rest member vectors of a confident ensemble (a few classes): ``[C, n, h]``."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(k, (n,), generator=g)
    z = torch.randn(n, k, generator=g, dtype=F64)
    z[torch.arange(n), y] += 6 + 5 * torch.rand(n, generator=g, dtype=F64)
    p = torch.softmax(z[None] + 0.5 * torch.randn(h, n, k, generator=g, dtype=F64), -1)
    return p[:, :, :classes].permute(2, 1, 0).contiguous()


def _broad(n=2000, h=5, seed=1, classes=3):
    """Member vectors whose members disagree (off-diagonal spread ~0.2)."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(classes, n, h, generator=g, dtype=F64)
    u = torch.randn(classes, n, 1, generator=g, dtype=F64)
    return torch.sigmoid(z - 3 + 2 * u)


DATA = [pytest.param(_confident, id="confident"), pytest.param(_broad, id="broad")]


@pytest.mark.parametrize("make", DATA)
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_nearest_is_the_dense_argmin(make, dtype):
    x = make().to(dtype)
    g = torch.Generator().manual_seed(3)
    cent = torch.stack([xi[torch.randperm(xi.shape[0], generator=g)[:40]] for xi in x])
    cent[:, 7] = cent[:, 3]  # duplicate centroids: ties go to the lower index
    rows = S.SortedRows.build(x)
    labels, dist = S.nearest_from_scratch(rows, cent)
    for i in range(x.shape[0]):
        want, want_d = _assign(x[i], cent[i], with_distances=True)
        assert torch.equal(rows.unsort(labels[i], i), want)
        got_d = rows.unsort(dist[i], i)
        torch.testing.assert_close(got_d, want_d, rtol=1e-4, atol=1e-5 * float(want_d.max()))
    # any valid upper bound gives the same labels: the distance to a random centroid
    other = torch.randint(0, 40, labels.shape, generator=g)
    far = cent.gather(1, other[:, :, None].expand(-1, -1, x.shape[2]))
    upper = (rows.x - far).pow(2).sum(2).sqrt()
    again, _ = S.nearest(rows, cent, upper, other)
    assert torch.equal(again, labels)


@pytest.mark.parametrize("make", DATA)
@pytest.mark.parametrize("rtol", [0.0, 3e-4, 1e-2])
def test_lloyd_takes_the_dense_steps(make, rtol):
    x = make().to(torch.float32)
    starts = torch.stack(
        [xi[_kmeans_plusplus(xi, 25, torch.Generator().manual_seed(1))] for xi in x]
    )
    tols = [1e-4 * float(xi.to(F64).var(0, unbiased=False).mean()) for xi in x]
    fits = S.fit(x, starts.clone(), 300, tols, rtol)
    for i, (c, labels, n_iter, converged) in enumerate(fits):
        c_d, labels_d, n_iter_d, converged_d = _lloyd(x[i], starts[i].clone(), 300, tols[i], rtol)
        assert torch.equal(labels, labels_d)
        assert (n_iter, converged) == (n_iter_d, converged_d)
        # float64 cluster sums vs the dense float32 ones: the same means up to float32 rounding
        torch.testing.assert_close(c, c_d, rtol=1e-5, atol=1e-6)


def test_lloyd_stops_each_group_on_its_own():
    x = _confident(classes=4).to(torch.float32)
    starts = torch.stack(
        [xi[_kmeans_plusplus(xi, 12, torch.Generator().manual_seed(2))] for xi in x]
    )
    together = S.fit(x, starts.clone(), 300, [1e-8] * 4, 1e-3)
    for i in range(4):
        (alone,) = S.fit(x[i : i + 1], starts[i : i + 1].clone(), 300, [1e-8], 1e-3)
        assert torch.equal(together[i][0], alone[0]) and torch.equal(together[i][1], alone[1])
        assert together[i][2:] == alone[2:]
    assert len({f[2] for f in together}) > 1  # they did stop at different steps
    capped = S.fit(x, starts.clone(), 2, [0.0] * 4, 0.0)
    assert all(f[2] == 2 and not f[3] for f in capped)


@pytest.mark.parametrize("make", DATA)
def test_seeding_draws_and_chooses_what_the_dense_seeding_does(make):
    x = make().to(torch.float32)
    rows = S.SortedRows.build(x)
    gens = [torch.Generator().manual_seed(5) for _ in range(x.shape[0])]
    chosen, exhausted = SS.seed(x, rows, 30, gens)
    assert not exhausted.any()
    for i in range(x.shape[0]):
        assert torch.equal(chosen[i], _kmeans_plusplus(x[i], 30, torch.Generator().manual_seed(5)))


@pytest.mark.parametrize("dense_after", [0, 2])
def test_seeding_that_turns_dense_chooses_what_the_dense_seeding_does(monkeypatch, dense_after):
    # DENSE_AFTER full steps in a row switch the rest of the seeding to full steps (0: from the
    # start); the draws and choices stay the dense seeding's
    monkeypatch.setattr(SS, "DENSE_AFTER", dense_after)
    calls = []
    full_step = SS._full_step
    monkeypatch.setattr(SS, "_full_step", lambda *a: calls.append(1) or full_step(*a))
    x = _confident().to(torch.float32)
    rows = S.SortedRows.build(x)
    chosen, exhausted = SS.seed(x, rows, 30, [torch.Generator().manual_seed(5) for _ in range(4)])
    assert not exhausted.any()
    if dense_after == 0:
        assert len(calls) == 29  # every step after the first centre
    for i in range(x.shape[0]):
        assert torch.equal(chosen[i], _kmeans_plusplus(x[i], 30, torch.Generator().manual_seed(5)))


def test_seeding_reports_groups_out_of_distinct_rows():
    x = _confident(classes=2, h=5).to(torch.float32)
    # 4 distinct rows of exactly representable values: their distances are exactly 0
    base = 0.5 + 0.125 * torch.arange(20, dtype=torch.float32).view(4, 5) / 20
    x[1] = base.repeat(x.shape[1] // 4, 1)
    rows = S.SortedRows.build(x)
    chosen, exhausted = SS.seed(x, rows, 10, [torch.Generator().manual_seed(0) for _ in range(2)])
    assert exhausted.tolist() == [False, True]
    assert _kmeans_plusplus(x[1], 10, torch.Generator().manual_seed(0)).numel() == 4  # dense too
    assert torch.equal(chosen[0], _kmeans_plusplus(x[0], 10, torch.Generator().manual_seed(0)))


def test_draws_follow_the_running_sum():
    g = torch.Generator().manual_seed(0)
    closest = torch.rand(3, 4 * SS.DRAW_BLOCK, generator=g)
    closest[:, ::7] = 0.0
    blocks = closest.view(3, 4, SS.DRAW_BLOCK)
    u = torch.rand(3, 50, generator=g, dtype=F64) * closest.sum(1, dtype=F64)[:, None]
    got, total = SS._draw(blocks, blocks.sum(2, dtype=F64), u)
    want = torch.searchsorted(torch.cumsum(closest, 1, dtype=F64), u, right=True)
    assert torch.equal(got, want)
    torch.testing.assert_close(total, closest.sum(1, dtype=F64))


def test_off_diagonal_share():
    x = torch.stack([_broad(classes=1)[0], _confident(classes=1)[0][:2000, :5]]).to(torch.float32)
    rows = S.SortedRows.build(x)
    got = SS.off_diagonal(x, rows)
    for i in range(2):
        xc = x[i].to(F64) - x[i].to(F64).mean(0)
        direct = 1 - float((xc.sum(1) ** 2).sum() / x.shape[2]) / float((xc**2).sum())
        assert float(got[i]) == pytest.approx(direct, rel=1e-4, abs=1e-6)
    assert float(got[0]) > 0.1 > float(got[1])  # the two regimes the classwise path tells apart
    assert math.isfinite(float(got[0]))
