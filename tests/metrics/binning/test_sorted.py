"""Projection-sorted K-means kernels (bensemble.metrics.binning._sorted) against the dense ones:
the same nearest centroids and Lloyd steps."""

from __future__ import annotations

import pytest
import torch

from bensemble.metrics.binning import _sorted as S
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


def test_rows_at_is_the_expanded_gather():
    x = _confident().to(torch.float32)
    index = torch.randint(x.shape[1], (x.shape[0], 50), generator=torch.Generator().manual_seed(0))
    want = x.gather(1, index[:, :, None].expand(-1, -1, x.shape[2]))
    assert torch.equal(S.rows_at(x, index), want)


def test_rows_at_and_build_take_the_listed_groups_without_a_copy_first():
    x = _confident(classes=5)
    groups = torch.tensor([3, 0, 4])
    index = torch.randint(x.shape[1], (3, 70), generator=torch.Generator().manual_seed(1))
    assert torch.equal(S.rows_at(x, index, groups), S.rows_at(x[groups], index))
    order = S.SortedRows.build(x[groups].to(torch.float32)).order
    want = S.SortedRows.build(x[groups], order=order)
    got = S.SortedRows.build(x, order=order, groups=groups)
    for field in ("x", "proj", "sq", "order"):
        assert torch.equal(getattr(got, field), getattr(want, field)), field
    assert got.n == want.n
