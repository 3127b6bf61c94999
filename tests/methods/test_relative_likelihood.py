"""Relative-likelihood plausibilities (Nguyen, Shaker & Hüllermeier 2022) from k-NN counts."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from scipy import optimize
from scipy.special import xlogy

from bensemble.datasets.toy import make_toy_gaussians
from bensemble.methods.relative_likelihood import (
    RelativeLikelihood,
    relative_likelihood_plausibility,
)


def _relative_likelihood_np(theta, p, n):
    log_max = xlogy(p, p / (p + n)) + xlogy(n, n / (p + n))
    return np.exp(xlogy(p, theta) + xlogy(n, 1 - theta) - log_max)


def _reference_scipy_plausibility(p: float, n: float) -> tuple[float, float]:
    """sup_theta min(L, 2 theta - 1) and sup_theta min(L, 1 - 2 theta) by bounded Brent search."""

    def neg_pi1(t):
        return -min(_relative_likelihood_np(t, p, n), 2 * t - 1)

    def neg_pi0(t):
        return -min(_relative_likelihood_np(t, p, n), 1 - 2 * t)

    opts = {"xatol": 1e-13, "maxiter": 2000}
    r1 = optimize.minimize_scalar(neg_pi1, bounds=(0.5, 1.0), method="bounded", options=opts)
    r0 = optimize.minimize_scalar(neg_pi0, bounds=(0.0, 0.5), method="bounded", options=opts)
    # the bounded search never evaluates the end points; pi = 1 is attained at theta = 1 / 0
    pi1 = max(-r1.fun, -neg_pi1(1.0))
    pi0 = max(-r0.fun, -neg_pi0(0.0))
    return pi1, pi0


def _reference_scipy_crossing(p: float, n: float) -> float:
    """pi(1) as 2 theta* - 1 at the crossing L(theta*) = 2 theta* - 1, by scipy's brentq."""
    lo = max(0.5, p / (p + n))
    if _relative_likelihood_np(lo, p, n) <= 2 * lo - 1:  # p / (p + n) rounds to 1
        return 2 * lo - 1
    root = optimize.brentq(
        lambda t: _relative_likelihood_np(t, p, n) - (2 * t - 1), lo, 1.0, xtol=1e-15
    )
    return 2 * root - 1


def _reference_grid_plausibility(p: float, n: float, size: int = 400_001):
    theta = np.linspace(0.0, 1.0, size)
    lik = _relative_likelihood_np(theta, p, n)
    return np.max(np.minimum(lik, 2 * theta - 1)), np.max(np.minimum(lik, 1 - 2 * theta))


PAIRS = [(10, 0), (0, 10), (5, 5), (7, 3), (3, 7), (9, 1), (6, 4), (1, 0), (0, 1), (2.5, 1.5)]


def test_plausibility_matches_scipy_and_a_dense_grid():
    p = torch.tensor([a for a, _ in PAIRS], dtype=torch.float64)
    n = torch.tensor([b for _, b in PAIRS], dtype=torch.float64)
    pi1, pi0 = relative_likelihood_plausibility(p, n)
    ref = np.array([_reference_scipy_plausibility(a, b) for a, b in PAIRS])
    grid = np.array([_reference_grid_plausibility(a, b) for a, b in PAIRS])
    crossing1 = np.array([_reference_scipy_crossing(a, b) for a, b in PAIRS])
    crossing0 = np.array([_reference_scipy_crossing(b, a) for a, b in PAIRS])
    # bounded Brent stops ~1e-8 short of a kink maximum; brentq on the crossing is exact
    torch.testing.assert_close(pi1, torch.from_numpy(ref[:, 0]), rtol=0, atol=1e-7)
    torch.testing.assert_close(pi0, torch.from_numpy(ref[:, 1]), rtol=0, atol=1e-7)
    torch.testing.assert_close(pi1, torch.from_numpy(crossing1), rtol=0, atol=1e-12)
    torch.testing.assert_close(pi0, torch.from_numpy(crossing0), rtol=0, atol=1e-12)
    torch.testing.assert_close(pi1, torch.from_numpy(grid[:, 0]), rtol=0, atol=5e-5)
    torch.testing.assert_close(pi0, torch.from_numpy(grid[:, 1]), rtol=0, atol=5e-5)


def test_plausibility_with_a_subnormal_count_is_finite():
    pi1, pi0 = relative_likelihood_plausibility([2.0, 5e-324], [5e-324, 2.0])
    torch.testing.assert_close(pi1, pi0.flip(0))
    assert float(pi1[0]) == pytest.approx(1.0) and float(pi0[0]) > 0.0


def test_plausibility_closed_form_cases():
    # all positive: pi(1) = 1 exactly; with p = 1, n = 0: pi(0) solves theta = 1 - 2 theta -> 1/3
    pi1, pi0 = relative_likelihood_plausibility([1.0, 10.0], [0.0, 0.0])
    torch.testing.assert_close(pi1, torch.ones(2, dtype=torch.float64))
    torch.testing.assert_close(pi0[0], torch.tensor(1 / 3, dtype=torch.float64))


@given(
    st.floats(0.0, 30.0, allow_nan=False, allow_subnormal=False),
    st.floats(0.0, 30.0, allow_nan=False, allow_subnormal=False),
)
def test_plausibility_symmetry_and_range(p, n):
    if p + n < 1e-3:
        return
    pi1, pi0 = relative_likelihood_plausibility([p], [n])
    sw1, sw0 = relative_likelihood_plausibility([n], [p])
    torch.testing.assert_close(pi1, sw0, rtol=0, atol=1e-12)
    torch.testing.assert_close(pi0, sw1, rtol=0, atol=1e-12)
    assert 0.0 <= float(pi1) <= 1.0 and 0.0 <= float(pi0) <= 1.0
    assert float(pi1) == pytest.approx(_reference_scipy_crossing(p, n), abs=1e-10)
    # the crossing value is the sup: at theta* = (1 + pi1) / 2, L(theta*) = pi1
    if 0.0 < float(pi1) < 1.0:
        theta = (1.0 + float(pi1)) / 2.0
        assert _relative_likelihood_np(theta, p, n) == pytest.approx(float(pi1), abs=1e-9)


def _reference_loop_counts(X_train, y_train, X, k):
    """Positive counts among the k nearest training points (plain float64 loop)."""
    X_train, y_train = np.asarray(X_train), np.asarray(y_train)
    counts = []
    for x in np.asarray(X):
        order = np.argsort(np.sqrt(((X_train - x) ** 2).sum(1)), kind="stable")[:k]
        counts.append(int(y_train[order].sum()))
    return np.array(counts)


@pytest.mark.parametrize("k", [1, 4, 10])
def test_model_matches_a_loop_reference(k):
    g = torch.Generator().manual_seed(k)
    X = torch.randn(40, 2, dtype=torch.float64, generator=g)
    y = (X[:, 0] + 0.8 * torch.randn(40, dtype=torch.float64, generator=g) > 0).long()
    Xq = 1.5 * torch.randn(30, 2, dtype=torch.float64, generator=g)
    model = RelativeLikelihood(n_neighbors=k).fit(X, y)
    counts = _reference_loop_counts(X, y, Xq, k)
    ref = np.array([_reference_scipy_plausibility(c, k - c) for c in counts])
    h = counts / k
    torch.testing.assert_close(
        model.predict_proba(Xq), torch.from_numpy(np.stack([1 - h, h], 1)), rtol=0, atol=1e-12
    )
    torch.testing.assert_close(
        model.plausibility(Xq), torch.from_numpy(ref[:, ::-1].copy()), rtol=0, atol=1e-7
    )
    torch.testing.assert_close(
        model.epistemic_uncertainty(Xq), torch.from_numpy(ref.min(1)), rtol=0, atol=1e-7
    )
    torch.testing.assert_close(
        model.aleatoric_uncertainty(Xq), torch.from_numpy(1 - ref.max(1)), rtol=0, atol=1e-7
    )


def test_eu_peaks_at_balanced_counts_and_au_at_few_neighbours():
    """Balanced evidence is uncertain; with k = 10 both classes are plausible at 5/5."""
    model = RelativeLikelihood(n_neighbors=10).fit(
        np.arange(20, dtype=float)[:, None], np.arange(20) % 2
    )
    table = model.plausibility_table_
    eu = table.min(1).values
    assert int(eu.argmax()) == 5
    assert float(eu[0]) < 1e-2 and float(eu[10]) < 1e-2


def test_accuracy_on_the_toy_problem():
    train = make_toy_gaussians(50, seed=0)
    test = make_toy_gaussians(10_000, seed=1)
    model = RelativeLikelihood().fit(train.x, train.y)
    accuracy = float((model.predict(test.x) == test.y).double().mean())
    assert accuracy >= 0.95  # measured 0.978


def test_binary_only_and_hyper_parameters():
    X = np.random.default_rng(0).normal(size=(30, 2))
    with pytest.raises(ValueError, match="exactly two classes"):
        RelativeLikelihood().fit(X, np.arange(30) % 3)
    with pytest.raises(ValueError, match="n_neighbors=10"):
        RelativeLikelihood().fit(X[:8], np.arange(8) % 2)
    for bad in [0, -1, 2.0, True, None]:
        with pytest.raises(ValueError, match="`n_neighbors`"):
            RelativeLikelihood(n_neighbors=bad)


@pytest.mark.parametrize(
    ("p", "n", "arg"),
    [
        pytest.param([1.0, -1.0], [1.0, 1.0], "`positives` and `negatives`", id="negative"),
        pytest.param([0.0], [0.0], "must be > 0", id="zero-total"),
        pytest.param([1.0, 2.0], [1.0], "same number of samples", id="len"),
        pytest.param([[1.0]], [1.0], "`positives`", id="2d"),
    ],
)
def test_plausibility_validation(p, n, arg):
    with pytest.raises(ValueError, match=arg):
        relative_likelihood_plausibility(p, n)


# ----------------------------------------------------------------------------- variants
def _reference_scipy_argmax(p: float, n: float) -> float:
    """Where min(L(theta), 2 theta - 1) peaks on [1/2, 1], by bounded Brent (the author's
    ``opt.x``); the end point 1 is checked since the bounded search never evaluates it."""

    def neg(t):
        return -min(_relative_likelihood_np(t, p, n), 2 * t - 1)

    opts = {"xatol": 1e-12, "maxiter": 2000}
    r = optimize.minimize_scalar(neg, bounds=(0.5, 1.0), method="bounded", options=opts)
    return 1.0 if neg(1.0) <= r.fun else float(r.x)


def _variant_reference(x_train, y_train, x_eval, k, supports, eu, rescale="none"):
    """Loop reference with numpy distances and the scipy plausibilities above."""
    x_train, x_eval = np.asarray(x_train, float), np.asarray(x_eval, float)
    if rescale == "unit_variance":
        scale = np.sqrt(x_train.var(axis=0).mean())
        x_train, x_eval = x_train / scale, x_eval / scale
    y_train = np.asarray(y_train)
    hs, eus = [], []
    for x in x_eval:
        d = np.sqrt(((x_train - x) ** 2).sum(1))
        idx = np.argsort(d, kind="stable")[:k]
        w = {"count": np.ones(k), "distance": 1.0 / (1.0 + d[idx]), "inverse_distance": 1 / d[idx]}
        w = w[supports]
        p = float((w * (y_train[idx] == 1)).sum())
        n = float((w * (y_train[idx] == 0)).sum())
        if supports == "inverse_distance":
            p, n = math.ceil(p), math.ceil(n)
        pi1, pi0 = _reference_scipy_crossing(p, n), _reference_scipy_crossing(n, p)
        hs.append(p / (p + n))
        if eu == "min":
            eus.append(min(pi1, pi0))
        elif eu == "paper":
            eus.append(1.0 - max(pi1, pi0))
        elif eu == "argmax":
            eus.append(min(_reference_scipy_argmax(p, n), _reference_scipy_argmax(n, p)))
        else:
            eus.append(float(_relative_likelihood_np(0.5, p, n)))
    return np.array(hs), np.array(eus)


@pytest.mark.parametrize("supports", ["count", "distance", "inverse_distance"])
@pytest.mark.parametrize("eu", ["min", "paper", "crossing", "argmax"])
def test_variants_match_a_scipy_loop_reference(supports, eu):
    train, test = make_toy_gaussians(40, seed=0), make_toy_gaussians(25, seed=1)
    model = RelativeLikelihood(n_neighbors=7, supports=supports, eu=eu).fit(train.x, train.y)
    h_ref, eu_ref = _variant_reference(train.x, train.y, test.x, 7, supports, eu)
    np.testing.assert_allclose(model.predict_proba(test.x)[:, 1].numpy(), h_ref, atol=1e-12)
    # the argmax reference is a bounded Brent search for a kink: ~1e-8 in theta
    tol = 1e-7 if eu == "argmax" else 1e-9
    np.testing.assert_allclose(model.epistemic_uncertainty(test.x).numpy(), eu_ref, atol=tol)


def test_argmax_reading_is_at_least_one_half():
    train, test = make_toy_gaussians(40, seed=0), make_toy_gaussians(200, seed=1)
    eu = (
        RelativeLikelihood.reading("author-code")
        .fit(train.x, train.y)
        .epistemic_uncertainty(test.x)
    )
    assert float(eu.min()) >= 0.5 and float(eu.max()) <= 1.0


def test_rescaled_reading_is_scale_free_and_matches_the_reference():
    train, test = make_toy_gaussians(40, seed=0), make_toy_gaussians(25, seed=1)
    model = RelativeLikelihood.reading("rescaled-distance").fit(train.x, train.y)
    h_ref, eu_ref = _variant_reference(
        train.x, train.y, test.x, 10, "distance", "crossing", "unit_variance"
    )
    np.testing.assert_allclose(model.epistemic_uncertainty(test.x).numpy(), eu_ref, atol=1e-9)
    np.testing.assert_allclose(model.predict_proba(test.x)[:, 1].numpy(), h_ref, atol=1e-12)
    big = RelativeLikelihood.reading("rescaled-distance").fit(7.0 * train.x, train.y)
    torch.testing.assert_close(
        big.epistemic_uncertainty(7.0 * test.x), model.epistemic_uncertainty(test.x)
    )
    raw = RelativeLikelihood(supports="distance", eu="crossing").fit(7.0 * train.x, train.y)
    assert not torch.allclose(
        raw.epistemic_uncertainty(7.0 * test.x), model.epistemic_uncertainty(test.x)
    )


def test_named_readings():
    from bensemble.methods.relative_likelihood import READINGS

    author = RelativeLikelihood.reading("author-code")
    assert (author.n_neighbors, author.supports, author.eu) == (7, "inverse_distance", "argmax")
    assert READINGS["nguyen"] == {
        "n_neighbors": 10,
        "supports": "count",
        "eu": "min",
        "rescale": "none",
    }
    with pytest.raises(ValueError, match="`name`.*author-code"):
        RelativeLikelihood.reading("author")


def test_inverse_distance_supports_by_hand():
    # neighbours of 0.0 at distances 0.5 (y=1), 1 (y=1), 2 (y=0): ceil(2 + 1) = 3, ceil(0.5) = 1
    model = RelativeLikelihood(n_neighbors=3, supports="inverse_distance", eu="min")
    model.fit([[0.5], [-1.0], [2.0], [9.0]], [1, 1, 0, 0])
    torch.testing.assert_close(model.predict_proba([[0.0]])[:, 1], torch.tensor([0.75]).double())


def test_default_variant_is_nguyen_counts():
    model = RelativeLikelihood()
    assert (model.supports, model.eu) == ("count", "min")


def test_variants_on_hand_made_counts():
    """Ten agreeing neighbours: Nguyen's EU is pi(0) = 0.4725...^10-ish (tiny), the paper
    reading 1 - max(pi) = 0 (pi(1) = 1) and the crossing reading L(1/2) = 2^-10."""
    x = [[float(i)] for i in range(10)] + [[100.0 + i] for i in range(10)]
    y = [1] * 10 + [0] * 10
    q = [[4.5]]
    eus = {
        eu: float(RelativeLikelihood(eu=eu).fit(x, y).epistemic_uncertainty(q)[0])
        for eu in ("min", "paper", "crossing")
    }
    assert 0.0 < eus["min"] < 2e-3
    assert eus["paper"] == pytest.approx(0.0, abs=1e-15)
    assert eus["crossing"] == pytest.approx(2.0**-10, rel=1e-12)


def test_distance_supports_give_larger_eu_far_from_the_data():
    x = [[float(i)] for i in range(10)] + [[100.0 + i] for i in range(10)]
    y = [1] * 10 + [0] * 10
    near = RelativeLikelihood(supports="distance").fit(x, y)
    far_eu = float(near.epistemic_uncertainty([[-50.0]])[0])
    near_eu = float(near.epistemic_uncertainty([[4.5]])[0])
    assert far_eu > 0.5 > near_eu  # supports of ~0.2 barely move the likelihood
    count = RelativeLikelihood().fit(x, y)
    assert float(count.epistemic_uncertainty([[-50.0]])[0]) < 2e-3


@pytest.mark.parametrize(
    ("kwargs", "match"), [({"supports": "weights"}, "supports"), ({"eu": "max"}, "eu")]
)
def test_variant_options_are_validated(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RelativeLikelihood(**kwargs)


def test_rescale_option_is_validated():
    with pytest.raises(ValueError, match="`rescale`.*unit_variance"):
        RelativeLikelihood(rescale="standard")


def test_likelihood_variant_table_on_a_small_task():
    from bensemble.experiments.illustrative import Convention
    from bensemble.experiments.likelihood_variants import (
        VARIANTS,
        likelihood_variant_records,
        likelihood_variant_table,
    )

    train, test = make_toy_gaussians(40, seed=0), make_toy_gaussians(30, seed=1)
    records = []
    for task in ((1, "pos"), (0, "neg")):
        records += likelihood_variant_records(
            (train.x, train.y), (test.x, test.y), task, convention=Convention(), seed=0,
            n_bins=3, n_members=5,
        )  # fmt: skip
    assert len(records) == 2 * len(VARIANTS)
    rows = likelihood_variant_table(records, quick=False, reading_in_use="rescaled-distance")
    assert [r["reading"] for r in rows] == list(VARIANTS)
    assert [r["in tables"] for r in rows].count("yes") == 1
    assert all(r["paper EECE (MNIST)"] == "0.14" for r in rows)
    assert all(0.0 <= r["mean EU"] <= 1.0 for r in rows)
    author = next(r for r in rows if r["reading"] == "author-code")
    assert author["mean EU"] >= 0.5  # the argmax reading
    assert {r["vs 0.14"] for r in rows} <= {"holds", "differs"}
