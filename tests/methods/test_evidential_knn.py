"""Evidential k-NN (Denœux 1995): closed-form Dempster combination against the power set."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from bensemble.datasets.toy import make_toy_gaussians
from bensemble.methods.evidential_knn import EvidentialKNN, combine_simple_support


def _reference_powerset_dempster(support, classes, num_classes):
    """Dempster's rule over all subsets of Omega (bit masks), one neighbour at a time."""
    omega = (1 << num_classes) - 1
    combined = {omega: 1.0}  # vacuous mass function
    for s, c in zip(support, classes):
        piece = {1 << int(c): float(s), omega: 1.0 - float(s)}
        out: dict[int, float] = {}
        for (a, ma), (b, mb) in itertools.product(combined.items(), piece.items()):
            out[a & b] = out.get(a & b, 0.0) + ma * mb
        combined = out
    conflict = combined.pop(0, 0.0)
    normalised = {a: m / (1.0 - conflict) for a, m in combined.items()}
    singletons = [normalised.get(1 << c, 0.0) for c in range(num_classes)]
    # only singletons and Omega can carry mass for simple support functions on singletons
    assert set(normalised) <= {1 << c for c in range(num_classes)} | {omega}
    return np.array(singletons), normalised.get(omega, 0.0)


@pytest.mark.parametrize("num_classes", [2, 3])
def test_closed_form_matches_the_powerset_combination(num_classes):
    rng = np.random.default_rng(num_classes)
    support = rng.uniform(0.0, 0.9, size=(50, 7))
    classes = rng.integers(0, num_classes, size=(50, 7))
    classes[0] = 0  # one row where the other classes have no neighbour at all
    m_single, m_omega = combine_simple_support(support, classes, num_classes)
    for i in range(50):
        ref_single, ref_omega = _reference_powerset_dempster(support[i], classes[i], num_classes)
        np.testing.assert_allclose(m_single[i].numpy(), ref_single, rtol=1e-10, atol=1e-14)
        assert float(m_omega[i]) == pytest.approx(ref_omega, rel=1e-10)
    torch.testing.assert_close(m_single.sum(1) + m_omega, torch.ones(50, dtype=torch.float64))


def test_closed_form_survives_long_products():
    """Many strong supports: products underflow in linear space but not in log space."""
    support = torch.full((1, 4000), 0.9, dtype=torch.float64)
    classes = torch.zeros(1, 4000, dtype=torch.long)
    classes[0, ::2] = 1
    m_single, m_omega = combine_simple_support(support, classes, 2)
    torch.testing.assert_close(m_single, torch.tensor([[0.5, 0.5]], dtype=torch.float64))
    assert bool(torch.isfinite(m_omega).all()) and float(m_omega) < 1e-100


def _reference_loop_eknn(X_train, y_train, X, k, alpha, beta, gamma=None):
    """Plain loops: default gammas, neighbours, masses, power-set Dempster, BetP, m(Omega)."""
    X_train, y_train, X = map(np.asarray, (X_train, y_train, X))
    K = int(y_train.max()) + 1
    if gamma is None:
        gamma = []
        for c in range(K):
            pts = X_train[y_train == c]
            dists = [
                math.dist(pts[i], pts[j]) for i in range(len(pts)) for j in range(i + 1, len(pts))
            ]
            gamma.append(np.mean(dists) ** -beta)
    probs, eu = [], []
    for x in X:
        d = np.sqrt(((X_train - x) ** 2).sum(1))
        order = np.argsort(d, kind="stable")[:k]
        s = [alpha * math.exp(-gamma[y_train[i]] * d[i] ** beta) for i in order]
        single, omega = _reference_powerset_dempster(s, y_train[order], K)
        probs.append(single + omega / K)
        eu.append(omega)
    return np.array(gamma), np.array(probs), np.array(eu)


@pytest.mark.parametrize("num_classes", [2, 3])
def test_model_matches_a_loop_reference(num_classes):
    g = torch.Generator().manual_seed(10 + num_classes)
    y = torch.arange(45) % num_classes
    X = torch.randn(45, 2, dtype=torch.float64, generator=g) + 2.0 * y[:, None]
    Xq = 2.0 * torch.randn(20, 2, dtype=torch.float64, generator=g)
    model = EvidentialKNN().fit(X, y)
    gamma, probs, eu = _reference_loop_eknn(X, y, Xq, 12, 0.4, 0.5)
    torch.testing.assert_close(model.gamma_, torch.from_numpy(gamma))
    torch.testing.assert_close(model.predict_proba(Xq), torch.from_numpy(probs))
    torch.testing.assert_close(model.epistemic_uncertainty(Xq), torch.from_numpy(eu))


def test_given_gamma_is_used():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(30, 2, dtype=torch.float64, generator=g)
    y = torch.arange(30) % 2
    Xq = torch.randn(5, 2, dtype=torch.float64, generator=g)
    scalar = EvidentialKNN(n_neighbors=5, gamma=2.0).fit(X, y)
    torch.testing.assert_close(scalar.gamma_, torch.tensor([2.0, 2.0], dtype=torch.float64))
    per_class = EvidentialKNN(n_neighbors=5, gamma=[0.5, 3.0]).fit(X, y)
    _, probs, eu = _reference_loop_eknn(X, y, Xq, 5, 0.4, 0.5, gamma=[0.5, 3.0])
    torch.testing.assert_close(per_class.predict_proba(Xq), torch.from_numpy(probs))
    torch.testing.assert_close(per_class.epistemic_uncertainty(Xq), torch.from_numpy(eu))
    with pytest.raises(ValueError, match="`gamma` must be one number or 2 numbers"):
        EvidentialKNN(n_neighbors=5, gamma=[1.0, 2.0, 3.0]).fit(X, y)


def test_single_point_class_uses_the_overall_mean_distance():
    X = torch.tensor([[0.0], [1.0], [3.0], [10.0]], dtype=torch.float64)
    y = torch.tensor([0, 0, 0, 1])
    model = EvidentialKNN(n_neighbors=2, beta=1.0).fit(X, y)
    overall = np.mean([1, 3, 10, 2, 9, 7])  # all 6 distinct pairs
    torch.testing.assert_close(
        model.gamma_,
        torch.tensor([1 / 2.0, 1 / overall], dtype=torch.float64),  # class 0: 1, 3, 2
    )


def test_far_from_the_data_is_total_ignorance():
    train = make_toy_gaussians(50, seed=0)
    model = EvidentialKNN().fit(train.x, train.y)
    far = torch.tensor([[1e4, -1e4]], dtype=torch.float64)
    torch.testing.assert_close(model.epistemic_uncertainty(far), torch.ones(1, dtype=torch.float64))
    torch.testing.assert_close(
        model.predict_proba(far), torch.full((1, 2), 0.5, dtype=torch.float64)
    )


def test_accuracy_on_the_toy_problem():
    train = make_toy_gaussians(50, seed=0)
    test = make_toy_gaussians(10_000, seed=1)
    model = EvidentialKNN().fit(train.x, train.y)
    accuracy = float((model.predict(test.x) == test.y).double().mean())
    assert accuracy >= 0.95  # measured 0.978


def test_multiclass_probabilities_sum_to_one():
    g = torch.Generator().manual_seed(1)
    y = torch.arange(60) % 4
    X = torch.randn(60, 3, dtype=torch.float64, generator=g) + y[:, None]
    model = EvidentialKNN().fit(X, y)
    probs = model.predict_proba(X)
    m_single, m_omega = model.mass(X)
    assert probs.shape == (60, 4)
    torch.testing.assert_close(probs.sum(1), torch.ones(60, dtype=torch.float64))
    torch.testing.assert_close(m_single.sum(1) + m_omega, torch.ones(60, dtype=torch.float64))


@pytest.mark.parametrize(
    ("kwargs", "arg"),
    [
        pytest.param({"n_neighbors": 0}, "`n_neighbors`", id="k0"),
        pytest.param({"alpha": 1.0}, "`alpha`", id="alpha1"),
        pytest.param({"alpha": 0.0}, "`alpha`", id="alpha0"),
        pytest.param({"beta": 0.0}, "`beta`", id="beta0"),
        pytest.param({"gamma": -1.0}, "`gamma`", id="gamma-neg"),
        pytest.param({"gamma": [1.0, float("nan")]}, "`gamma`", id="gamma-nan"),
    ],
)
def test_rejects_bad_hyper_parameters(kwargs, arg):
    with pytest.raises(ValueError, match=arg):
        EvidentialKNN(**kwargs)


def test_fit_rejects_too_few_points_and_coincident_classes():
    with pytest.raises(ValueError, match="n_neighbors=12"):
        EvidentialKNN().fit(np.random.default_rng(0).normal(size=(5, 2)), np.arange(5) % 2)
    X = np.array([[0.0], [0.0], [1.0], [2.0]])
    with pytest.raises(ValueError, match="pass `gamma` explicitly"):
        EvidentialKNN(n_neighbors=2).fit(X, np.array([0, 0, 1, 1]))


@pytest.mark.parametrize(
    ("support", "classes", "arg"),
    [
        pytest.param([[0.5, 1.0]], [[0, 1]], "`support` must lie in \\[0, 1\\)", id="s1"),
        pytest.param([[0.5, -0.1]], [[0, 1]], "`support`", id="s-neg"),
        pytest.param([[0.5, 0.1]], [[0, 2]], "`neighbor_classes`", id="class-range"),
        pytest.param([[0.5, 0.1]], [[0.0, 1.0]], "`neighbor_classes`", id="class-float"),
        pytest.param([[0.5, 0.1]], [[0, 1, 1]], "`neighbor_classes` must have the shape", id="shp"),
    ],
)
def test_combine_validation(support, classes, arg):
    with pytest.raises(ValueError, match=arg):
        combine_simple_support(support, classes, 2)
