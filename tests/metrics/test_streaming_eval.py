"""The classwise EECE streamed over a row source (:mod:`bensemble.metrics.streaming_eval`): the
same K-means centroids as the in-memory fit, bit for bit, and the same per-bin sums as the
one-shot EECE, for any chunking, member order, subsample and seed list."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import bensemble.metrics._streaming_kmeans as sk
import bensemble.metrics.binning._fit as km
from bensemble.metrics import expected_epistemic_calibration_error
from bensemble.metrics._epistemic_checks import canonical_member_order
from bensemble.metrics.binning._fit import DEFAULT_LLOYD_RTOL, _fit
from bensemble.metrics.streaming_eval import (
    EECESums,
    MemberRows,
    canonical_order_chunked,
    eece_result,
    fit_classwise_centroids,
    open_memmap,
)

#: float64 sums of the same terms in another order (per chunk, then over chunks): ~n * 2.2e-16
#: relative for these n <= 1,000 positive terms; 1e-10 leaves room without hiding a wrong term.
REL = 1e-10


def _members(m=3, n=700, k=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    z = 2 * torch.randn(m, n, k, generator=g, dtype=torch.float64)
    z += 2 * torch.randn(1, n, k, generator=g, dtype=torch.float64)
    return torch.softmax(z, -1), torch.randint(0, k, (n,), generator=g)


def _rows(probs):
    return MemberRows(probs.numpy(), from_logits=False, name="p", fn="test")


def _streamed_eece(probs, y, n_bins, seeds, block):
    rows = _rows(probs)
    order = canonical_order_chunked(rows, block=block)
    fits = fit_classwise_centroids(rows, n_bins, seeds, order=order, block=block)
    sums = [EECESums(c) for c in fits]
    for start in range(0, probs.shape[1], block):
        p = rows.slice(start, start + block)
        p = p if order is None else p[order]
        for s in sums:
            s.update(p, y[start : start + block])
    return eece_result(sums, seeds, n_bins, probs.shape[1])


@pytest.mark.parametrize("block", [1, 61, 700])
def test_streamed_eece_equals_the_one_shot_eece(block):
    probs, y = _members()
    got = _streamed_eece(probs, y, 12, [3], block)
    want = expected_epistemic_calibration_error(probs, y, n_bins=12, seed=3, return_details=True)
    assert got["eece"] == pytest.approx(want.value, rel=REL, abs=1e-14)
    assert got["eece_bins_fitted"] == want.n_bins_fitted
    d = got["details"]
    for key in ("counts", "acc", "mean_delta", "member_variance", "trust", "squared_error"):
        torch.testing.assert_close(getattr(d, key), getattr(want, key), rtol=REL, atol=1e-14)
    torch.testing.assert_close(d.per_class, want.per_class, rtol=REL, atol=1e-14)


def test_several_kmeans_seeds():
    probs, y = _members(n=300)
    got = _streamed_eece(probs, y, 10, [0, 1, 2], 50)
    want = expected_epistemic_calibration_error(
        probs, y, n_bins=10, seed=0, n_seeds=3, return_details=True
    )
    assert got["eece"] == pytest.approx(want.value, rel=REL)
    assert got["eece_sd"] == pytest.approx(want.seed_sd, rel=1e-8)
    assert got["details"].seed_values == pytest.approx(want.seed_values, rel=REL)


@pytest.mark.parametrize("perm", [[0, 1, 2, 3], [3, 1, 0, 2], [2, 3, 1, 0]])
def test_centroids_are_bit_identical_for_any_member_order(perm):
    """The fit sees the members in the canonical order whatever order the source holds them
    in: the same centroids, bit for bit, as the in-memory per-class fit on that order."""
    probs, _ = _members(4, n=300)
    canonical = probs[canonical_member_order(probs)]
    rtol = DEFAULT_LLOYD_RTOL  # the classwise EECE's stopping rule
    want = [_fit(canonical[:, :, c].T, 9, seed=5, lloyd_rtol=rtol).centroids for c in range(4)]
    rows = _rows(probs[perm])
    order = canonical_order_chunked(rows, block=40)
    (got,) = fit_classwise_centroids(rows, 9, [5], order=order, block=40)
    for c in range(4):
        assert torch.equal(got[c], want[c]), (perm, c)


def test_subsampled_fit_refines_over_every_row(monkeypatch, tmp_path):
    """A part larger than the subsample: the subsample rows are gathered once, then the refine
    steps stream over the file (file order), one pass per step for every class at once."""
    monkeypatch.setattr(sk, "DEFAULT_SUBSAMPLE", 120)
    probs, y = _members(3, n=900)
    path = tmp_path / "p.npy"
    np.save(path, probs.numpy())
    rows = MemberRows(open_memmap(path), from_logits=False, name="p", fn="test")
    fits = fit_classwise_centroids(rows, 10, [2], block=64)
    rtol = DEFAULT_LLOYD_RTOL
    for c in range(4):
        want = _fit(probs[:, :, c].T, 10, seed=2, subsample=120, lloyd_rtol=rtol).centroids
        torch.testing.assert_close(fits[0][c], want, rtol=1e-12, atol=1e-15)
    eece = expected_epistemic_calibration_error(probs, y, n_bins=10, seed=2, subsample=120)
    monkeypatch.setattr(km, "DEFAULT_SUBSAMPLE", 120)
    assert _streamed_eece(probs, y, 10, [2], 64)["eece"] == pytest.approx(eece, rel=REL)


def test_a_fit_on_a_part_in_its_own_order():
    """``positions``: the part (e.g. a test split) in a shuffled order, as the in-memory fit on
    ``probs[:, positions]``."""
    probs, _ = _members(3, n=400)
    part = np.random.default_rng(0).permutation(400)[:250]
    rows = _rows(probs)
    sub = probs[:, torch.from_numpy(part)]
    order = canonical_order_chunked(rows, part, block=33)
    want_order = canonical_member_order(sub)
    assert (order is None) == (want_order is None)
    (got,) = fit_classwise_centroids(rows, 8, [1], positions=part, order=order, block=33)
    canonical = sub if want_order is None else sub[want_order]
    for c in range(4):
        want = _fit(canonical[:, :, c].T, 8, seed=1, lloyd_rtol=DEFAULT_LLOYD_RTOL).centroids
        assert torch.equal(got[c], want), c


def test_classes_fitted_a_group_at_a_time_give_the_same_centroids(monkeypatch):
    probs, _ = _members(3, n=300, k=5)
    rows = _rows(probs)
    (whole,) = fit_classwise_centroids(rows, 7, [4], block=50)
    monkeypatch.setattr(sk, "FIT_BUDGET", 1)  # one class per group
    (grouped,) = fit_classwise_centroids(rows, 7, [4], block=50)
    for a, b in zip(whole, grouped, strict=True):
        assert torch.equal(a, b)


def test_few_distinct_rows_take_the_per_class_path():
    """A class whose member vectors take fewer distinct values than bins: every distinct row is
    a centroid, as in memory."""
    probs, y = _members(3, n=200, k=3)
    probs[:, :, 0] = torch.tensor([0.2, 0.5, 0.7])[torch.arange(200) % 3][None]
    probs[:, :, 1:] = probs[:, :, 1:] * ((1 - probs[:, :, :1]) / probs[:, :, 1:].sum(-1, True))
    got = _streamed_eece(probs, y, 10, [0], 37)
    want = expected_epistemic_calibration_error(probs, y, n_bins=10, seed=0, return_details=True)
    assert got["eece"] == pytest.approx(want.value, rel=REL)
    assert got["eece_bins_fitted"] == want.n_bins_fitted


def test_merged_sums_equal_one_pass_and_bad_merges_are_refused():
    probs, y = _members(3, n=300)
    rows = _rows(probs)
    (fits,) = fit_classwise_centroids(rows, 8, [0], block=300)
    whole = EECESums(fits)
    whole.update(probs, y)
    a, b = EECESums(fits), EECESums(fits)
    a.update(probs[:, :120], y[:120])
    b.update(probs[:, 120:], y[120:])
    assert a.merge(b).value() == pytest.approx(whole.value(), rel=REL)
    with pytest.raises(ValueError, match="EECESums.merge: `other` must be another state"):
        a.merge(a)
    with pytest.raises(ValueError, match="EECESums.merge"):
        a.merge(EECESums(fits[:2]))


def test_canonical_order_reads_on_while_members_are_tied():
    """Members bit-identical on the first rows (and two identical everywhere): the order found
    block by block is the in-memory byte-wise order of the whole arrays."""
    p = torch.softmax(torch.randn(5, 40, 3, generator=torch.Generator().manual_seed(1)), -1)
    p = p.to(torch.float64)
    p[:, :25] = p[0, :25]  # every member equal on the first 25 rows
    p[3] = p[1]  # members 1 and 3 identical throughout
    for perm in ([0, 1, 2, 3, 4], [4, 3, 2, 1, 0], [2, 4, 0, 3, 1]):
        q = p[perm]
        rows = _rows(q)
        want = canonical_member_order(q)
        for block in (1, 7, 40):
            got = canonical_order_chunked(rows, block=block)
            assert (got is None) == (want is None)
            if want is not None:
                assert torch.equal(got, want)


def test_open_memmap_refuses_a_missing_file(tmp_path):
    with pytest.raises(ValueError, match="open_memmap: `path` must be a readable .npy file"):
        open_memmap(tmp_path / "missing.npy")
