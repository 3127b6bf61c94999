"""Tests of the EECE, the TECE and the ECE of the mean prediction (float64, exact properties)."""

import math

import numpy as np
import pytest
import torch

from bensemble.datasets import make_toy_gaussians
from bensemble.metrics import (
    EECEDetails,
    assign_bins,
    binary_calibration_error,
    calibration_error,
    expected_epistemic_calibration_error,
    fit_bins,
    true_epistemic_calibration_error,
)
from bensemble.metrics._epistemic_checks import canonical_member_order

F64 = torch.float64


# The formula tests below use the binary [H, N] form and the [H, N, K] form side by side; the
# [H, N] form needs binary=True (the shape mechanism itself: tests/robustness/test_eece.py).
def _binary(member_probs) -> bool:
    return torch.as_tensor(member_probs).ndim == 2


def eece(member_probs, *args, **kwargs):
    return expected_epistemic_calibration_error(
        member_probs, *args, binary=_binary(member_probs), **kwargs
    )


def tece(member_probs, *args, **kwargs):
    return true_epistemic_calibration_error(
        member_probs, *args, binary=_binary(member_probs), **kwargs
    )


def bce(member_probs, *args, **kwargs):
    return binary_calibration_error(member_probs, *args, binary=_binary(member_probs), **kwargs)


# ----------------------------------------------------------------------------- references


def _reference_numpy_eece(p, y, ids, eu=None):
    """Plain float64 loop over the bins, straight from the paper's formula."""
    p, y, ids = np.asarray(p, dtype=np.float64), np.asarray(y), np.asarray(ids)
    n = p.shape[1]
    eu = p.var(axis=0) if eu is None else np.asarray(eu, dtype=np.float64)
    value, per_bin = 0.0, {}
    for m in np.unique(ids):
        mask = ids == m
        acc = float(np.mean(y[mask] == 1))
        conf = p[:, mask].mean(axis=1)  # [H]
        squared_error = float(np.mean((acc - conf) ** 2))
        trust = float(eu[mask].mean())
        per_bin[int(m)] = {
            "count": int(mask.sum()),
            "acc": acc,
            "mean_delta": float(conf.mean()),
            "member_variance": float(conf.var()),
            "trust": trust,
            "squared_error": squared_error,
            "term": squared_error - trust,
        }
        value += mask.sum() / n * abs(squared_error - trust)
    return value, per_bin


def _reference_numpy_ece(confidences, y, n_bins):
    """Equal-width (lower, upper] bins, 0 in the first bin."""
    c, y = np.asarray(confidences, dtype=np.float64), np.asarray(y, dtype=np.float64)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    total = 0.0
    for b in range(n_bins):
        mask = (c > edges[b]) & (c <= edges[b + 1])
        if b == 0:
            mask |= c == 0
        if mask.any():
            total += mask.mean() * abs(y[mask].mean() - c[mask].mean())
    return total


def _random_members(h, n, seed, k=None):
    g = torch.Generator().manual_seed(seed)
    if k is None:
        p = torch.rand(h, n, generator=g, dtype=F64)
        y = torch.randint(0, 2, (n,), generator=g)
    else:
        p = torch.softmax(2 * torch.randn(h, n, k, generator=g, dtype=F64), dim=-1)
        y = torch.randint(0, k, (n,), generator=g)
    return p, y


def _toy_ensemble(n, h, seed, sharpness=1.0):
    """Coherent members on the toy problem: logistic models with perturbed weights
    (``sharpness < 1``: an under-confident, epistemically miscalibrated ensemble)."""
    d = make_toy_gaussians(n, seed=seed)
    g = torch.Generator().manual_seed(seed + 100)
    slope = 1 + 0.3 * torch.randn(h, 1, generator=g, dtype=F64)
    shift = 0.5 * torch.randn(h, 1, generator=g, dtype=F64)
    tilt = 0.3 * torch.randn(h, 1, generator=g, dtype=F64)
    s, t = d.x.sum(1), d.x[:, 0] - d.x[:, 1]
    p = torch.sigmoid(-(5 / 3) * sharpness * slope * s + shift + tilt * t)
    return p, d


CASES = [
    pytest.param(5, 200, 7, id="H5-N200-M7"),
    pytest.param(1, 50, 3, id="H1"),
    pytest.param(30, 1000, 40, id="H30-N1000-M40"),
]


# ----------------------------------------------------------------------------- the formula


@pytest.mark.parametrize("h, n, m", CASES)
def test_explicit_bins_match_the_reference(h, n, m):
    p, y = _random_members(h, n, seed=h + n)
    ids = torch.randint(0, m, (n,), generator=torch.Generator().manual_seed(1))
    value = eece(p, y, bins=ids)
    ref, per_bin = _reference_numpy_eece(p.numpy(), y.numpy(), ids.numpy())
    assert isinstance(value, float)
    assert value == pytest.approx(ref, rel=1e-12, abs=1e-15)
    d = eece(p, y, bins=ids, return_details=True)
    assert isinstance(d, EECEDetails) and d.binning == "bins" and d.seed is None
    for b, row in per_bin.items():
        assert d.counts[b].item() == row["count"]
        for field in ("acc", "mean_delta", "member_variance", "trust", "squared_error"):
            assert getattr(d, field)[b].item() == pytest.approx(row[field], rel=1e-12, abs=1e-15)
        assert d.terms[b].item() == pytest.approx(row["term"], rel=1e-10, abs=1e-15)


def test_kmeans_binning_is_fit_then_assign():
    p, d = _toy_ensemble(3000, 6, seed=0)
    details = eece(p, d.y, 40, seed=5, return_details=True)
    order = canonical_member_order(p)  # the EECE fits on the members in their canonical order
    q = p if order is None else p[order]
    ids = assign_bins(q.T, fit_bins(q.T, 40, seed=5))
    assert details.value == pytest.approx(eece(p, d.y, bins=ids), rel=1e-13)
    ref, _ = _reference_numpy_eece(p.numpy(), d.y.numpy(), ids.numpy())
    assert details.value == pytest.approx(ref, rel=1e-12)
    assert details.binning == "kmeans" and details.backend == "torch" and details.seed == 5
    assert details.backend_settings["n_bins"] == 40
    assert details.counts.sum().item() == 3000


def test_kmeans_fit_uses_the_given_centroids():
    p, d = _toy_ensemble(4000, 5, seed=1)
    cal, test = slice(0, 2000), slice(2000, 4000)
    centroids = fit_bins(p[:, cal].T, 30, seed=2)
    value = eece(p[:, test], d.y[test], binning="kmeans_fit", centroids=centroids)
    ids = assign_bins(p[:, test].T, centroids)
    assert value == pytest.approx(eece(p[:, test], d.y[test], bins=ids), rel=1e-13)
    details = eece(
        p[:, test], d.y[test], binning="kmeans_fit", centroids=centroids, return_details=True
    )
    assert details.binning == "kmeans_fit" and details.seed is None
    assert details.counts.shape == (centroids.shape[0],)


def test_custom_eu_replaces_the_member_variance():
    p, y = _random_members(4, 300, seed=3)
    eu = torch.rand(300, generator=torch.Generator().manual_seed(4), dtype=F64) * 0.05
    ids = torch.randint(0, 9, (300,), generator=torch.Generator().manual_seed(5))
    ref, _ = _reference_numpy_eece(p.numpy(), y.numpy(), ids.numpy(), eu.numpy())
    assert eece(p, y, bins=ids, eu=eu) == pytest.approx(ref, rel=1e-12)
    assert eece(p, y, bins=ids, eu=p.var(0, unbiased=False)) == pytest.approx(
        eece(p, y, bins=ids), rel=1e-14
    )


def test_default_eu_is_the_variance_decomposition():
    decomposition = pytest.importorskip("bensemble.uncertainty.decomposition")
    p, y = _random_members(6, 400, seed=6)
    _, eu = decomposition.variance_decomposition(p, binary=True)
    ids = torch.randint(0, 11, (400,), generator=torch.Generator().manual_seed(7))
    d = eece(p, y, bins=ids, return_details=True)
    trust = torch.bincount(ids, weights=eu, minlength=11) / torch.bincount(ids, minlength=11)
    torch.testing.assert_close(d.trust, trust, rtol=1e-13, atol=1e-16)


def test_unused_explicit_bin_ids_take_no_slot():
    p, y = _random_members(3, 60, seed=8)
    ids = torch.randint(0, 3, (60,), generator=torch.Generator().manual_seed(9)) * 2  # 0, 2, 4
    d = eece(p, y, bins=ids, return_details=True)
    assert d.bin_ids.tolist() == [0, 2, 4] and d.counts.shape == (3,)
    assert not bool(torch.isnan(d.terms).any())
    assert d.value == eece(p, y, bins=ids // 2)
    assert d.value == pytest.approx(float((d.weights * d.terms.abs()).nansum()), rel=1e-14)


def test_point_order_does_not_matter():
    p, y = _random_members(5, 500, seed=10)
    ids = torch.randint(0, 13, (500,), generator=torch.Generator().manual_seed(11))
    perm = torch.randperm(500, generator=torch.Generator().manual_seed(12))
    assert eece(p[:, perm], y[perm], bins=ids[perm]) == pytest.approx(
        eece(p, y, bins=ids), rel=1e-13
    )


def test_numpy_inputs_are_accepted():
    p, y = _random_members(3, 100, seed=13)
    ids = torch.randint(0, 5, (100,), generator=torch.Generator().manual_seed(14))
    assert eece(p.numpy(), y.numpy(), bins=ids.numpy()) == eece(p, y, bins=ids)


def test_seed_is_recorded_and_reproduces():
    p, d = _toy_ensemble(2000, 4, seed=2)
    g = torch.Generator().manual_seed(3)
    first = eece(p, d.y, 25, generator=g, return_details=True)
    assert isinstance(first.seed, int)
    assert eece(p, d.y, 25, seed=first.seed) == first.value
    assert eece(p, d.y, 25, seed=first.seed, backend="torch") == first.value


# ----------------------------------------------------------------------------- exact properties


@pytest.mark.parametrize("h, n, m", CASES)
def test_property_1_term_decomposition(h, n, m):
    p, y = _random_members(h, n, seed=20 + h)
    ids = torch.randint(0, m, (n,), generator=torch.Generator().manual_seed(21))
    d = eece(p, y, bins=ids, return_details=True)
    filled = d.counts > 0
    rhs = (d.acc - d.mean_delta) ** 2 + d.member_variance - d.trust
    torch.testing.assert_close(d.terms[filled], rhs[filled], rtol=0, atol=1e-12)


@pytest.mark.parametrize("h, n", [(1, 40), (5, 300), (20, 100)])
def test_property_2_one_bin_per_point_is_the_brier_score(h, n):
    p, y = _random_members(h, n, seed=30 + h)
    delta = p.mean(0)
    brier = float(((y.double() - delta) ** 2).mean())
    assert eece(p, y, bins=torch.arange(n)) == pytest.approx(brier, rel=0, abs=1e-12)


@pytest.mark.parametrize("h, n", [(1, 40), (5, 300), (20, 100)])
def test_property_3_single_bin(h, n):
    p, y = _random_members(h, n, seed=40 + h)
    expected = abs(
        float(((y.double().mean() - p.mean(1)) ** 2).mean()) - float(p.var(0, False).mean())
    )
    assert eece(p, y, bins=torch.zeros(n, dtype=torch.long)) == pytest.approx(
        expected, rel=0, abs=1e-12
    )


def test_property_4_one_member_is_a_squared_calibration_error():
    p, d = _toy_ensemble(3000, 1, seed=4)
    details = eece(p, d.y, 30, seed=1, return_details=True)
    filled = details.counts > 0
    assert bool((details.trust[filled] == 0).all())
    assert bool((details.member_variance[filled] == 0).all())
    w = details.counts[filled] / 3000
    gap2 = (details.acc[filled] - details.mean_delta[filled]) ** 2
    assert details.value == pytest.approx(float((w * gap2).sum()), rel=0, abs=1e-12)
    # ... against an independent per-bin loop on the same partition.
    ids = assign_bins(p.T, fit_bins(p.T, 30, seed=1))
    y, q = d.y.double().numpy(), p[0].numpy()
    ref = sum(
        (ids == m).double().mean().item() * (y[ids == m].mean() - q[ids == m].mean()) ** 2
        for m in ids.unique()
    )
    assert details.value == pytest.approx(ref, rel=0, abs=1e-12)


def test_property_5_two_classes_classwise_equals_binary():
    p1, d = _toy_ensemble(3000, 6, seed=5)
    p = torch.stack([1 - p1, p1], dim=-1)
    binary = eece(p1, d.y, 40, seed=3)
    classwise = eece(p, d.y, 40, seed=3, return_details=True)
    assert classwise.value == pytest.approx(binary, rel=1e-12)
    torch.testing.assert_close(classwise.per_class, torch.full((2,), binary, dtype=F64))
    ids = torch.randint(0, 17, (3000,), generator=torch.Generator().manual_seed(0))
    assert eece(p, d.y, bins=ids) == pytest.approx(eece(p1, d.y, bins=ids), rel=1e-12)


def test_property_6_member_order_does_not_matter():
    p, d = _toy_ensemble(3000, 8, seed=6)
    perm = torch.randperm(8, generator=torch.Generator().manual_seed(1))
    assert eece(p[perm], d.y, 40, seed=9) == eece(p, d.y, 40, seed=9)  # identical


@pytest.fixture(scope="module")
def toy_40k():
    return make_toy_gaussians(40_000, seed=0)


def test_property_7_toy_members_equal_to_eta(toy_40k):
    h = 10
    exact = toy_40k.eta.expand(h, -1)
    assert eece(exact, toy_40k.y, 100, seed=0) < 0.001
    shifted = (toy_40k.eta + 0.1).clamp(0.0, 1.0).expand(h, -1)
    truth = tece(shifted, toy_40k.eta)
    assert truth == pytest.approx(0.0054, abs=2e-4)
    assert eece(shifted, toy_40k.y, 100, seed=0) == pytest.approx(truth, abs=0.001)


def test_property_8_members_must_be_coherent_hypotheses():
    """Why members must be coherent hypotheses (one model / mask / sample for every x).

    Coherent members (noise on the logit fixed per member) are monotone functions of eta: points
    binned by their member vector share similar per-member predictions, so the spread of the
    per-bin member means ``Var_h conf`` matches the reported EU and the EECE stays at its
    finite-sample floor. Incoherent members (fresh noise per point and member) report the same
    kind of EU, but that noise averages out inside a bin: the spread that EU announces is not a
    spread of hypotheses, and the EECE rises towards the mean EU.

    H = 50 members, N = 20,000 points, 50 bins. With few members the K-means cells follow the
    noisy member vectors closely enough that part of the incoherent noise survives in ``conf``
    (measured EECE / mean EU ~0.36 at H = 10 and ~0.55 at H = 20 with 100 bins on 40,000 points).
    Over five noise seeds at this setting: EECE / mean EU 0.66-0.77 (incoherent), coherent /
    incoherent 0.20-0.33.
    """
    h, n = 50, 20_000
    toy = make_toy_gaussians(n, seed=0)
    g = torch.Generator().manual_seed(1)
    logit = torch.logit(toy.eta)
    incoherent = torch.sigmoid(logit + torch.randn(h, n, generator=g, dtype=F64))
    coherent = torch.sigmoid(logit + torch.randn(h, 1, generator=g, dtype=F64))
    value_incoherent = eece(incoherent, toy.y, 50, seed=0)
    value_coherent = eece(coherent, toy.y, 50, seed=0)
    assert value_incoherent > 0.5 * float(incoherent.var(0, unbiased=False).mean())
    assert value_coherent < 0.5 * value_incoherent


# ----------------------------------------------------------------------------- multi-class


def test_classwise_is_the_mean_of_one_vs_all_tasks():
    p, y = _random_members(4, 600, seed=50, k=3)
    details = eece(p, y, 20, seed=4, return_details=True)
    per_class = [eece(p[:, :, k], (y == k).long(), 20, seed=4) for k in range(3)]
    torch.testing.assert_close(details.per_class, torch.tensor(per_class, dtype=F64))
    assert details.value == pytest.approx(sum(per_class) / 3, rel=1e-13)
    assert details.counts.shape[0] == 3 and bool((details.counts.sum(1) == 600).all())
    assert details.weights.shape == details.counts.shape


def test_classwise_with_per_class_centroids_and_eu():
    p, y = _random_members(3, 500, seed=51, k=3)
    cents = [fit_bins(p[:, :, k].T, 10, seed=k) for k in range(3)]
    eu = p.var(0, unbiased=False) * 1.5  # [N, K]
    value = eece(p, y, binning="kmeans_fit", centroids=cents, eu=eu)
    manual = [
        eece(p[:, :, k], (y == k).long(), bins=assign_bins(p[:, :, k].T, cents[k]), eu=eu[:, k])
        for k in range(3)
    ]
    assert value == pytest.approx(sum(manual) / 3, rel=1e-13)
    shared = fit_bins(p[:, :, 0].T, 10, seed=0)
    stacked = eece(p, y, binning="kmeans_fit", centroids=torch.stack([shared] * 3))
    assert stacked == pytest.approx(eece(p, y, binning="kmeans_fit", centroids=shared), rel=1e-14)


def test_top_label_scores_the_argmax_of_the_mean():
    p, y = _random_members(5, 800, seed=52, k=4)
    top = p.mean(0).argmax(1)
    q = p[:, torch.arange(800), top]
    correct = (top == y).long()
    details = eece(p, y, 25, multiclass="top_label", seed=2, return_details=True)
    assert details.per_class is None
    assert details.value == pytest.approx(eece(q, correct, 25, seed=2), rel=1e-13)


# ----------------------------------------------------------------------------- backends


def test_backends_agree_within_kmeans_randomness():
    """The metric does not depend on the backend beyond K-means' own seed-to-seed spread.

    On a miscalibrated ensemble (EECE ~0.0036) the seed-to-seed spread is 1-2% for both
    backends. (On a well calibrated one the EECE sits at its finite-sample floor, ~3e-4 here,
    where the spread over seeds is ~12% and only a many-seed average could be compared.)
    """
    p, d = _toy_ensemble(10_000, 10, seed=7, sharpness=0.5)
    ours = [eece(p, d.y, 50, seed=s, backend="torch") for s in range(2)]
    theirs = [eece(p, d.y, 50, seed=s, backend="sklearn") for s in range(2)]
    assert np.mean(ours) == pytest.approx(np.mean(theirs), rel=0.03)
    details = eece(p, d.y, 50, seed=0, backend="sklearn", return_details=True)
    assert details.backend == "sklearn" and details.backend_settings["tol"] == 1e-4


def test_subsampled_fit_stays_close_to_the_full_fit():
    """Fitting on a subsample moves the EECE less than K-means' seed-to-seed spread (~3% here)."""
    p, d = _toy_ensemble(12_000, 5, seed=8, sharpness=0.5)
    full = [eece(p, d.y, 40, seed=s, subsample=None, return_details=True) for s in range(3)]
    sub = [eece(p, d.y, 40, seed=s, subsample=4000, return_details=True) for s in range(3)]
    assert sub[0].backend_settings["n_fit_rows"] == 4000
    assert sub[0].backend_settings["refine"] == 2
    assert full[0].backend_settings["n_fit_rows"] == 12_000
    assert "refine" not in full[0].backend_settings
    assert np.mean([r.value for r in sub]) == pytest.approx(
        np.mean([r.value for r in full]), rel=0.04
    )


# ----------------------------------------------------------------------------- TECE


def test_tece_default_eu_is_the_squared_mean_gap():
    p, _ = _random_members(7, 500, seed=60)
    eta = torch.rand(500, generator=torch.Generator().manual_seed(61), dtype=F64)
    expected = float(((eta - p.mean(0)) ** 2).mean())
    assert tece(p, eta) == pytest.approx(expected, rel=0, abs=1e-15)


def test_tece_with_custom_eu_matches_numpy():
    p, _ = _random_members(4, 300, seed=62)
    eta = torch.rand(300, generator=torch.Generator().manual_seed(63), dtype=F64)
    eu = torch.rand(300, generator=torch.Generator().manual_seed(64), dtype=F64) * 0.1
    pn, en, un = p.numpy(), eta.numpy(), eu.numpy()
    ref = np.mean(np.abs(np.mean((en[None] - pn) ** 2, axis=0) - un))
    assert tece(p, eta, eu=eu) == pytest.approx(ref, rel=1e-13)


def test_tece_conditioning_on_the_member_vector():
    # Piecewise-constant members: 4 distinct member vectors shared by many points.
    g = torch.Generator().manual_seed(65)
    leaf = torch.randint(0, 4, (400,), generator=g)
    table = torch.rand(3, 4, generator=g, dtype=F64)
    p = table[:, leaf]
    eta = torch.rand(400, generator=g, dtype=F64)
    groups = {}
    for n, key in enumerate(map(tuple, p.T.tolist())):
        groups.setdefault(key, []).append(n)
    pi = np.empty(400)
    for members in groups.values():
        pi[members] = eta[members].mean().item()
    ref = np.mean((pi - p.mean(0).numpy()) ** 2)
    assert tece(p, eta, condition_on="psi") == pytest.approx(ref, rel=1e-12)
    assert abs(tece(p, eta, condition_on="psi") - tece(p, eta)) > 1e-3
    # With all member vectors distinct the two conditionings coincide.
    q, _ = _random_members(3, 200, seed=66)
    e = torch.rand(200, generator=g, dtype=F64)
    assert tece(q, e, condition_on="psi") == pytest.approx(tece(q, e), rel=1e-14)


def test_eece_tends_to_tece_on_the_toy_problem():
    p, d = _toy_ensemble(40_000, 10, seed=9)
    truth = tece(p, d.eta)
    assert eece(p, d.y, 100, seed=0) == pytest.approx(truth, abs=1.5e-3)


# ----------------------------------------------------------------------------- binary ECE


def test_binary_calibration_error_is_the_ece_of_delta():
    p, y = _random_members(6, 2000, seed=70)
    order = canonical_member_order(p)
    delta = (p if order is None else p[order]).mean(0)  # members in the canonical order
    value = bce(p, y, n_bins=15)
    assert value == calibration_error(delta, y, 15)
    assert value == pytest.approx(_reference_numpy_ece(delta.numpy(), y.numpy(), 15), rel=1e-12)
    assert bce(p, y, 10, norm="max") == calibration_error(delta, y, 10, norm="max")


# ----------------------------------------------------------------------------- bad input

P2, Y2 = _random_members(3, 20, seed=80)
P3, Y3 = _random_members(3, 20, seed=81, k=3)


@pytest.mark.parametrize(
    "call, argument",
    [
        pytest.param(lambda: eece(P2[0], Y2), "member_probs", id="rank-1"),
        pytest.param(lambda: eece(P3[None], Y3), "member_probs", id="rank-4"),
        pytest.param(lambda: eece(P2 + 1.0, Y2), "member_probs", id="not-probabilities"),
        pytest.param(lambda: eece(P3 * 2, Y3), "member_probs", id="rows-not-summing"),
        pytest.param(lambda: eece(P2, Y2 + 1), "labels", id="labels-out-of-range"),
        pytest.param(lambda: eece(P3, Y3 + 3), "labels", id="labels-beyond-k"),
        pytest.param(lambda: eece(P2, Y2.double()), "labels", id="labels-float"),
        pytest.param(lambda: eece(P2, Y2[:10]), "labels", id="length-mismatch"),
        pytest.param(lambda: eece(P2, Y2, eu=torch.ones(19)), "eu", id="eu-length"),
        pytest.param(lambda: eece(P2, Y2, eu=-torch.ones(20)), "eu", id="eu-negative"),
        pytest.param(lambda: eece(P3, Y3, eu=torch.ones(20)), "eu", id="eu-classwise-shape"),
        pytest.param(lambda: eece(P2, Y2, n_bins=0), "n_bins", id="n-bins-zero"),
        pytest.param(lambda: eece(P2, Y2, binning="uniform"), "binning", id="binning"),
        pytest.param(lambda: eece(P3, Y3, multiclass="macro"), "multiclass", id="multiclass"),
        pytest.param(lambda: eece(P2, Y2, backend="gpu"), "backend", id="backend"),
        pytest.param(lambda: eece(P2, Y2, bins=torch.zeros(19).long()), "bins", id="bins-length"),
        pytest.param(lambda: eece(P2, Y2, bins=-torch.ones(20).long()), "bins", id="bins-neg"),
        pytest.param(lambda: eece(P2, Y2, bins=torch.zeros(20)), "bins", id="bins-float"),
        pytest.param(
            lambda: eece(P2, Y2, binning="kmeans_fit", centroids=torch.rand(4, 2)),
            "centroids",
            id="centroids-width",
        ),
        pytest.param(
            lambda: eece(P3, Y3, binning="kmeans_fit", centroids=torch.rand(2, 4, 3)),
            "centroids",
            id="centroids-classes",
        ),
        pytest.param(lambda: eece(P2, Y2, binning="kmeans_fit"), "centroids", id="no-centroids"),
        pytest.param(
            lambda: eece(P2, Y2, centroids=torch.rand(4, 3)), "centroids", id="centroids-kmeans"
        ),
        pytest.param(
            lambda: eece(P2, Y2, bins=torch.zeros(20).long(), centroids=torch.rand(4, 3)),
            "bins",
            id="bins-and-centroids",
        ),
        pytest.param(lambda: eece(P2, Y2, seed=1, generator=torch.Generator()), "seed", id="rng"),
        pytest.param(lambda: tece(P2, torch.rand(19)), "eta", id="tece-eta-length"),
        pytest.param(lambda: tece(P2, torch.rand(20) + 1), "eta", id="tece-eta-range"),
        pytest.param(lambda: tece(P2, torch.rand(20), condition_on="y"), "condition_on", id="cond"),
        pytest.param(lambda: tece(P3, torch.rand(20)), "member_probs", id="tece-multiclass"),
        pytest.param(lambda: tece(P2, torch.rand(20), eu=torch.ones(3)), "eu", id="tece-eu"),
        pytest.param(lambda: bce(P2, Y2 + 1), "labels", id="ece-labels"),
        pytest.param(lambda: bce(P2, Y2, 0), "n_bins", id="ece-n-bins"),
    ],
)
def test_bad_input_names_the_argument(call, argument):
    with pytest.raises(ValueError, match=f"`{argument}`"):
        call()


def test_option_errors_list_the_valid_values():
    with pytest.raises(ValueError, match="'kmeans', 'kmeans_fit'"):
        eece(P2, Y2, binning="quantile")
    with pytest.raises(ValueError, match="'classwise', 'top_label'"):
        eece(P3, Y3, multiclass="micro")
    with pytest.raises(ValueError, match="'auto', 'torch', 'sklearn', 'minibatch', 'faiss'"):
        eece(P2, Y2, backend="x")


def test_value_is_finite_and_bounded():
    p, y = _random_members(4, 300, seed=90)
    value = eece(p, y, 10, seed=0)
    assert math.isfinite(value) and 0.0 <= value <= 1.0
