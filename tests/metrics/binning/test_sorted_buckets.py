"""Width buckets of the projection-sorted nearest (bensemble.metrics.binning._sorted.nearest):
blocks of one chunk whose windows need very different widths, each scored in its own bucket,
still give the dense argmin - and a bucket narrower than a block's window would not."""

from __future__ import annotations

import pytest
import torch

from bensemble.metrics.binning import _sorted as S
from bensemble.metrics.binning._nearest import _assign

F64 = torch.float64
H = 4
M = 96  # above the widest listed bucket (64): the widest blocks take the full-width bucket


def _on_diagonal(g, n, m):
    """Well separated centroids spread along the diagonal, rows near every tenth of them (a few
    hundred rows each): windows of 1-4 centroids per block."""
    t = torch.linspace(0.05, 0.95, m, dtype=F64)[:, None].expand(m, H).clone()
    cent = t + 0.003 * torch.randn(m, H, generator=g, dtype=F64)
    near = cent[10 * torch.randint(m // 10, (n,), generator=g)]
    rows = near + 0.002 * torch.randn(n, H, generator=g, dtype=F64)
    return rows, cent


def _one_projection(g, n, m):
    """Every centroid and row on the hyperplane sum = 2 (all projections equal): every block's
    window holds all ``m`` centroids."""
    cent = torch.rand(m, H, generator=g, dtype=F64)
    cent += (2.0 - cent.sum(1, keepdim=True)) / H
    rows = torch.rand(n, H, generator=g, dtype=F64)
    rows += (2.0 - rows.sum(1, keepdim=True)) / H
    return rows, cent


def _mixed(g, n, m):
    """Clusters of 3, 12 and 40 centroids sharing a projection, rows around each, a whole block
    of one duplicated row, and duplicated centroids: windows of every width in one group."""
    sizes, levels = [3, 12, 40, m - 55], [0.0, 3.0, 6.0, 9.0]
    parts = []
    for size, level in zip(sizes, levels, strict=True):
        c = 0.2 * torch.randn(size, H, generator=g, dtype=F64)
        parts.append(c + (level - c.sum(1, keepdim=True)) / H)
    cent = torch.cat(parts)
    # identical centroids (at consecutive indices: equal projections keep them adjacent in the
    # stable sort, which the tie rule needs): the lower index wins
    cent[21] = cent[20]
    cent[60] = cent[59]
    near = cent[torch.randint(m, (n,), generator=g)]
    rows = near + 0.05 * torch.randn(n, H, generator=g, dtype=F64)
    rows[: 2 * S.BLOCK] = rows[0]  # two blocks of one duplicated row
    rows[-300:] = cent[20]  # rows exactly on a duplicated centroid
    return rows, cent


def _chunk(dtype, makes=(_on_diagonal,) * 12 + (_mixed,) * 2 + (_one_projection,)):
    """One chunk of groups made by ``makes`` (``[C, n, H]`` rows, ``[C, M, H]`` centroids); by
    default one group in fifteen needs all ``M`` centroids (the buckets run while >= 90% of the
    blocks fit below ``M``)."""
    g = torch.Generator().manual_seed(7)
    n = 9 * S.BLOCK + 17  # padded to whole blocks
    pairs = [make(g, n, M) for make in makes]
    rows = torch.stack([p[0] for p in pairs]).to(dtype)
    cent = torch.stack([p[1] for p in pairs]).to(dtype)
    return rows, cent


def _widths_used(monkeypatch):
    """Record the window width of every batched product."""
    used: list[int] = []
    score = S._score_blocks

    def spy(xb, cs_flat, csq_flat, start, w, guess):
        used.append(w)
        return score(xb, cs_flat, csq_flat, start, w, guess)

    monkeypatch.setattr(S, "_score_blocks", spy)
    return used


def _check_against_dense(x, cent, rows, labels, dist):
    for i in range(x.shape[0]):
        want, want_d = _assign(x[i], cent[i], with_distances=True)
        assert torch.equal(rows.unsort(labels[i], i), want), f"group {i}"
        got_d = rows.unsort(dist[i], i)
        eps = torch.finfo(x.dtype).eps
        torch.testing.assert_close(got_d, want_d, rtol=0, atol=64 * eps * float(x[i].abs().max()))


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_each_bucket_gives_the_dense_argmin(dtype, monkeypatch):
    x, cent = _chunk(dtype)
    rows = S.SortedRows.build(x)
    used = _widths_used(monkeypatch)
    labels, dist = S.nearest_from_scratch(rows, cent)
    assert {4, M} <= set(used) and len(set(used)) >= 4  # narrow, middling and full windows
    _check_against_dense(x, cent, rows, labels, dist)
    # a loose bound (the distance to a random centroid) widens the windows: same labels
    g = torch.Generator().manual_seed(1)
    other = torch.randint(0, M, labels.shape, generator=g)
    far = cent.gather(1, other[:, :, None].expand(-1, -1, H))
    upper = (rows.x - far).pow(2).sum(2).sqrt()
    again, _ = S.nearest(rows, cent, upper, other)
    assert torch.equal(again, labels)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_buckets_match_one_full_width_pass(dtype, monkeypatch):
    """Bucketed labels and distances equal the ones of every block scored against all ``M``
    centroids through the same kernel (bit for bit: ties and duplicates resolve the same way)."""
    x, cent = _chunk(dtype)
    rows = S.SortedRows.build(x)
    labels, dist = S.nearest_from_scratch(rows, cent)
    monkeypatch.setattr(S, "WIDTHS", ())
    used = _widths_used(monkeypatch)
    full, full_dist = S.nearest_from_scratch(rows, cent)
    assert set(used) == {M}
    assert torch.equal(labels, full)
    # the distances of one label through products of two widths: equal here, but a BLAS kernel
    # may round a width's edge columns differently on another CPU, so a rounding bound
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(dist, full_dist, rtol=0, atol=64 * eps * float(x.abs().max()))


def test_mostly_wide_windows_take_one_full_width_pass(monkeypatch):
    """Under 90% of the blocks below ``M``: every block against all ``M`` centroids at once."""
    x, cent = _chunk(F64, makes=(_mixed, _one_projection))
    rows = S.SortedRows.build(x)
    used = _widths_used(monkeypatch)
    labels, dist = S.nearest_from_scratch(rows, cent)
    assert set(used) == {M}
    _check_against_dense(x, cent, rows, labels, dist)


def test_a_bucket_narrower_than_the_window_is_caught(monkeypatch):
    """The check above can fail: every block one bucket too narrow gives wrong labels."""
    x, cent = _chunk(F64)
    rows = S.SortedRows.build(x)
    buckets = S._buckets

    def too_narrow(span, m):
        widths, bucket = buckets(span, m)
        return widths, (bucket - 1).clamp_min(0)

    monkeypatch.setattr(S, "_buckets", too_narrow)
    labels, dist = S.nearest_from_scratch(rows, cent)
    with pytest.raises(AssertionError):
        _check_against_dense(x, cent, rows, labels, dist)
