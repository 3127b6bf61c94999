"""The binning protocol: fit -> self, assign -> ids, n_bins_, centroids_, state_dict, repr;
cross-checked against the array-level K-means and the ECE's binning kernels."""

from __future__ import annotations

import io

import pytest
import torch

from bensemble.metrics import expected_calibration_error, fit_bins
from bensemble.metrics._binning import quantile_edges, uniform_bin_ids
from bensemble.metrics._epistemic_checks import canonical_member_order
from bensemble.metrics.binning import (
    Binning,
    ExplicitBinning,
    KMeansBinning,
    QuantileBinning,
    UniformBinning,
    assign_bins,
)

F64 = torch.float64


def _members(h=4, n=240, k=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    z = 2 * torch.randn(h, n, k, generator=g, dtype=F64) + 2 * torch.randn(1, n, k, generator=g)
    return torch.softmax(z, -1)


P = _members()
PB = P[:, :, 0]

BINNINGS = [
    pytest.param(lambda: KMeansBinning(7, seed=3), id="kmeans"),
    pytest.param(lambda: UniformBinning(6), id="uniform"),
    pytest.param(lambda: QuantileBinning(5), id="quantile"),
    pytest.param(lambda: ExplicitBinning(torch.arange(240) % 9), id="explicit"),
]


@pytest.mark.parametrize("make", BINNINGS)
@pytest.mark.parametrize("mode", ["classwise", "top_label", "binary"])
def test_protocol(make, mode):
    binning = make()
    assert isinstance(binning, Binning) and not binning.fitted
    with pytest.raises(ValueError, match="must be fitted first"):
        binning.assign(P)
    data, kw = (PB, {"binary": True}) if mode == "binary" else (P, {"multiclass": mode})
    assert binning.fit(data, **kw) is binning and binning.fitted
    ids = binning.assign(data)
    shape = (3, 240) if mode == "classwise" else (240,)
    assert ids.shape == shape and ids.dtype == torch.int64
    assert int(ids.min()) >= 0 and int(ids.max()) < binning.n_bins_
    assert binning.multiclass_ == mode
    # the state survives torch.save / load into a fresh binning of the same type
    buffer = io.BytesIO()
    torch.save(binning.state_dict(), buffer)
    buffer.seek(0)
    fresh = make().load_state_dict(torch.load(buffer, weights_only=False))
    assert torch.equal(fresh.assign(data), ids) and fresh.n_bins_ == binning.n_bins_
    assert repr(fresh) == repr(binning)


def test_kmeans_cells_are_fit_bins_per_class_with_members_in_the_given_order():
    perm = [2, 0, 3, 1]
    binning = KMeansBinning(7, seed=3, lloyd_rtol=0.0).fit(P)
    shuffled = KMeansBinning(7, seed=3, lloyd_rtol=0.0).fit(P[perm])
    order = canonical_member_order(P)
    canonical = P if order is None else P[order]
    for k in range(3):
        expected = fit_bins(canonical[:, :, k].T, 7, seed=3)  # fitted on the canonical order
        inverse = torch.argsort(order) if order is not None else torch.arange(4)
        torch.testing.assert_close(binning.centroids_[k], expected[:, inverse], rtol=0, atol=0)
        # permuting the members permutes the centroid columns, nothing else
        torch.testing.assert_close(shuffled.centroids_[k], binning.centroids_[k][:, perm])
        ids = assign_bins(canonical[:, :, k].T, expected)
        assert torch.equal(binning.assign(P)[k], ids)
    assert torch.equal(shuffled.assign(P[perm]), binning.assign(P))
    info = binning.fit_info_[0]
    assert info["backend"] == "torch" and info["n_bins"] == 7 and binning.seed_ == 3


def test_fitted_on_one_split_assigned_on_another():
    calib, test = _members(seed=1), _members(n=100, seed=2)
    binning = KMeansBinning(5).fit(calib)
    ids = binning.assign(test)
    for k in range(3):
        assert torch.equal(ids[k], assign_bins(test[:, :, k].T, binning.centroids_[k]))
    with pytest.raises(ValueError, match="like the ones the binning was fitted on"):
        binning.assign(test[:3])  # other members
    with pytest.raises(ValueError, match="like the ones the binning was fitted on"):
        binning.assign(test[:, :, :2] / test[:, :, :2].sum(-1, keepdim=True))  # other classes


def test_from_centroids_shared_by_every_class_and_per_class():
    c = fit_bins(PB.T, 4, seed=0)
    shared = KMeansBinning.from_centroids(c)
    ids = shared.assign(P)
    for k in range(3):
        assert torch.equal(ids[k], assign_bins(P[:, :, k].T, c))
    per_class = KMeansBinning.from_centroids(torch.stack([c, c, c]))
    assert torch.equal(per_class.assign(P), ids)
    binary = KMeansBinning.from_centroids(c, binary=True)
    assert torch.equal(binary.assign(PB), assign_bins(PB.T, c))
    with pytest.raises(ValueError, match="one \\[B, M\\] set for top_label"):
        KMeansBinning.from_centroids([c, c], multiclass="top_label")


def test_uniform_and_quantile_bin_the_mean_prediction_with_the_ece_rules():
    mean = P.mean(0)  # [N, K]
    ids = UniformBinning(6).fit(P).assign(P)
    assert torch.equal(ids, uniform_bin_ids(mean, 6).to(torch.int64).T)
    top = mean.max(1).values
    q = QuantileBinning(5).fit(P, multiclass="top_label")
    torch.testing.assert_close(q.edges_, quantile_edges(top, 5))
    # equal mass: 240 points in 5 bins of 48
    assert torch.equal(torch.bincount(q.assign(P), minlength=5), torch.full((5,), 48))
    # the ECE with the same bins: sum over bins of |acc - conf| weights
    y = torch.randint(0, 3, (240,), generator=torch.Generator().manual_seed(4))
    correct = (mean.argmax(1) == y).to(F64)
    ids_top = UniformBinning(15).fit(P, multiclass="top_label").assign(P)
    per_bin = torch.zeros(15, 3, dtype=F64)
    per_bin.index_add_(0, ids_top, torch.stack([torch.ones(240, dtype=F64), top, correct], 1))
    filled = per_bin[:, 0] > 0
    ece = float(((per_bin[filled, 2] - per_bin[filled, 1]).abs()).sum() / 240)
    assert ece == pytest.approx(expected_calibration_error(mean, y, 15), abs=1e-12)


def test_explicit_ids_are_re_indexed_and_checked():
    binning = ExplicitBinning([5, 5, 9, 2])
    assert binning.fit(PB[:, :4], binary=True).assign(PB[:, :4]).tolist() == [1, 1, 2, 0]
    assert binning.bin_ids_.tolist() == [2, 5, 9] and binning.n_bins_ == 3
    with pytest.raises(ValueError, match="`bin_ids` must hold one bin id per point"):
        binning.assign(PB[:, :5])
    with pytest.raises(ValueError, match="`bin_ids` must hold bin ids >= 0"):
        ExplicitBinning([0, -1])


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"n_bins": 0}, "n_bins"),
        ({"n_bins": "many"}, "n_bins"),
        ({"seed": -1}, "seed"),
        ({"backend": "gpu"}, "backend"),
        ({"n_seeds": 0}, "n_seeds"),
        ({"max_iter": 0}, "max_iter"),
        ({"tol": -1.0}, "tol"),
        ({"coreset": 0}, "coreset"),
        ({"lloyd_rtol": float("nan")}, "lloyd_rtol"),
        ({"backend": "minibatch", "batch_size": 10}, "batch_size"),
    ],
)
def test_options_are_checked_when_built(kwargs, argument):
    with pytest.raises(ValueError, match=f"KMeansBinning: `{argument}`"):
        KMeansBinning(**kwargs)


def test_n_bins_beyond_the_points_and_bad_states():
    with pytest.raises(ValueError, match="`n_bins` must be 'auto' or an integer in \\[1, 240\\]"):
        KMeansBinning(241).fit(P)
    state = KMeansBinning(3).fit(PB, binary=True).state_dict()
    with pytest.raises(ValueError, match="must be a UniformBinning state_dict"):
        UniformBinning().load_state_dict(state)
    state["fitted"]["centroids"] = torch.zeros(3, 7)
    with pytest.raises(ValueError, match="n_members"):
        KMeansBinning().load_state_dict(state)


def test_repr_shows_the_options_that_differ_from_the_defaults():
    assert repr(KMeansBinning()) == "KMeansBinning()"
    assert repr(KMeansBinning(50, seed=None, lloyd_rtol=0.0)) == (
        "KMeansBinning(n_bins=50, seed=None, lloyd_rtol=0.0)"
    )
    assert repr(QuantileBinning(10)) == "QuantileBinning(n_bins=10)"


def test_seed_none_draws_fresh_seeds_and_fixed_seeds_agree():
    a, b = KMeansBinning(6).fit(P), KMeansBinning(6).fit(P)
    assert a.seed_ == b.seed_ == 0
    assert all(torch.equal(x, y) for x, y in zip(a.centroids_, b.centroids_, strict=True))
    torch.manual_seed(0)
    c = KMeansBinning(6, seed=None).fit(P)
    torch.manual_seed(1)
    d = KMeansBinning(6, seed=None).fit(P)
    assert c.seed_ != d.seed_
