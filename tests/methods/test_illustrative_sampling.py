"""The paper's Gaussian member scheme shared by the illustrative methods; their lifecycle."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from bensemble.datasets.toy import make_toy_gaussians
from bensemble.methods._illustrative import gaussian_members, nearest_neighbors
from bensemble.methods.centroids import Centroids
from bensemble.methods.evidential_knn import EvidentialKNN
from bensemble.methods.relative_likelihood import RelativeLikelihood

METHODS = [
    pytest.param(Centroids, id="centroids"),
    pytest.param(RelativeLikelihood, id="relative_likelihood"),
    pytest.param(EvidentialKNN, id="evidential_knn"),
]


@pytest.fixture(scope="module")
def toy():
    return make_toy_gaussians(50, seed=0), make_toy_gaussians(300, seed=1)


def _reference_scipy_clipped_normal_moments(mu: np.ndarray, sd: np.ndarray):
    """Mean and variance of clip(Z, 0, 1) for Z ~ N(mu, sd^2), by the truncated-normal formulas."""
    mu = np.asarray(mu, dtype=np.float64)
    sd = np.asarray(sd, dtype=np.float64)
    safe = np.where(sd > 0, sd, 1.0)
    a, b = (0.0 - mu) / safe, (1.0 - mu) / safe
    Pa, Pb = stats.norm.cdf(a), stats.norm.cdf(b)
    pa, pb = stats.norm.pdf(a), stats.norm.pdf(b)
    inside = Pb - Pa
    m1 = (1.0 - Pb) + mu * inside + safe * (pa - pb)
    m2 = (
        (1.0 - Pb)
        + mu**2 * inside
        + 2 * mu * safe * (pa - pb)
        + safe**2 * (inside + a * pa - b * pb)
    )
    clipped = np.clip(mu, 0.0, 1.0)
    mean = np.where(sd > 0, m1, clipped)
    var = np.where(sd > 0, m2 - m1**2, 0.0)
    return mean, np.maximum(var, 0.0)


@pytest.mark.parametrize("cls", METHODS)
def test_members_shape_range_and_dtype(cls, toy):
    train, test = toy
    model = cls().fit(train.x, train.y)
    members = model.sample_members(test.x, 7, generator=torch.Generator().manual_seed(0))
    assert members.shape == (7, len(test), 2)
    assert members.dtype == torch.float64
    assert float(members.min()) >= 0.0 and float(members.max()) <= 1.0
    torch.testing.assert_close(members.sum(-1), torch.ones(7, len(test), dtype=torch.float64))


@pytest.mark.parametrize("cls", METHODS)
def test_members_deterministic_under_a_fixed_generator(cls, toy):
    train, test = toy
    model = cls().fit(train.x, train.y)
    a = model.sample_members(test.x, 5, generator=torch.Generator().manual_seed(3))
    b = model.sample_members(test.x, 5, generator=torch.Generator().manual_seed(3))
    c = model.sample_members(test.x, 5, generator=torch.Generator().manual_seed(4))
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.equal(a, c)


@pytest.mark.parametrize("cls", METHODS)
def test_members_mean_and_variance_match_the_clipped_normal(cls, toy):
    """Per point, the members' mean / variance are those of clip(N(h, EU), 0, 1)."""
    train, test = toy
    model = cls().fit(train.x, train.y)
    h = model.predict_proba(test.x)[:, 1].numpy()
    eu = model.epistemic_uncertainty(test.x).numpy()
    n = 4000
    phi = model.sample_members(test.x, n, generator=torch.Generator().manual_seed(0))[..., 1]
    phi = phi.numpy()
    mean_ref, var_ref = _reference_scipy_clipped_normal_moments(h, np.sqrt(eu))
    tol_mean = 5.0 * np.sqrt(var_ref / n) + 1e-9
    assert np.all(np.abs(phi.mean(0) - mean_ref) <= tol_mean)
    centred = phi - phi.mean(0)
    m4 = (centred**4).mean(0)
    var = phi.var(0, ddof=1)
    tol_var = 5.0 * np.sqrt(np.maximum(m4 - var**2, 0.0) / n) + 1e-4 * var_ref + 1e-9
    assert np.all(np.abs(var - var_ref) <= tol_var)


def test_gaussian_members_variance_is_eu_where_unclipped():
    h = torch.tensor([0.5, 0.3, 0.7, 0.45], dtype=torch.float64)
    eu = torch.tensor([0.001, 0.0004, 0.0009, 0.002], dtype=torch.float64)
    n = 20000
    phi = gaussian_members(h, eu, n, generator=torch.Generator().manual_seed(1))[..., 1]
    rel = 5.0 * (2.0 / (n - 1)) ** 0.5
    torch.testing.assert_close(phi.var(0), eu, rtol=rel, atol=0.0)
    torch.testing.assert_close(phi.mean(0), h, rtol=0.0, atol=float(5 * (eu.max() / n).sqrt()))


def test_gaussian_members_clips_to_the_unit_interval():
    h = torch.tensor([0.0, 1.0, 0.5], dtype=torch.float64)
    eu = torch.tensor([1.0, 1.0, 0.0], dtype=torch.float64)
    phi = gaussian_members(h, eu, 2000, generator=torch.Generator().manual_seed(0))[..., 1]
    # With sd = 1 about 1/2 of the draws at h = 0 fall below 0 and are clipped to exactly 0.
    frac_zero = float((phi[:, 0] == 0).double().mean())
    assert 0.45 < frac_zero < 0.55
    assert float((phi[:, 1] == 1).double().mean()) > 0.45
    torch.testing.assert_close(phi[:, 2], torch.full((2000,), 0.5, dtype=torch.float64))


def test_members_are_independent_across_points(toy):
    """The scheme is incoherent by design: the same x in two rows gets unrelated draws."""
    train, test = toy
    model = Centroids().fit(train.x, train.y)
    x = test.x[:1].repeat(2, 1)
    phi = model.sample_members(x, 2000, generator=torch.Generator().manual_seed(0))[..., 1]
    interior = ((phi > 0) & (phi < 1)).all(dim=1)  # draws not clipped in either row
    assert int(interior.sum()) > 200
    assert bool((phi[interior, 0] != phi[interior, 1]).all())
    corr = np.corrcoef(phi[:, 0].numpy(), phi[:, 1].numpy())[0, 1]
    assert abs(corr) < 5.0 / np.sqrt(2000)


@pytest.mark.parametrize("cls", METHODS)
def test_numpy_and_torch_inputs_agree(cls, toy):
    train, test = toy
    a = cls().fit(train.x, train.y)
    b = cls().fit(train.x.numpy(), train.y.numpy())
    torch.testing.assert_close(a.predict_proba(test.x), b.predict_proba(test.x.numpy()))
    torch.testing.assert_close(
        a.epistemic_uncertainty(test.x), b.epistemic_uncertainty(test.x.numpy())
    )
    torch.testing.assert_close(a.predict(test.x), a.predict_proba(test.x).argmax(1))


@pytest.mark.parametrize("cls", METHODS)
def test_probabilities_and_uncertainty_ranges(cls, toy):
    train, test = toy
    model = cls().fit(train.x, train.y)
    probs = model.predict_proba(test.x)
    eu = model.epistemic_uncertainty(test.x)
    assert probs.shape == (len(test), 2) and eu.shape == (len(test),)
    assert probs.dtype == torch.float64 and eu.dtype == torch.float64
    torch.testing.assert_close(probs.sum(1), torch.ones(len(test), dtype=torch.float64))
    assert float(eu.min()) >= 0.0 and float(eu.max()) <= 1.0


@pytest.mark.parametrize("cls", METHODS)
def test_sklearn_clone_and_params(cls, toy):
    train, _ = toy
    model = cls()
    fitted = clone(model).fit(train.x, train.y)
    assert fitted.get_params() == model.get_params()
    assert not hasattr(model, "classes_")
    torch.testing.assert_close(fitted.classes_, torch.tensor([0, 1]))


def test_arbitrary_integer_labels_map_to_sorted_columns(toy):
    train, test = toy
    relabelled = torch.where(train.y == 1, 7, -3)
    a = EvidentialKNN().fit(train.x, train.y)
    b = EvidentialKNN().fit(train.x, relabelled)
    torch.testing.assert_close(b.classes_, torch.tensor([-3, 7]))
    torch.testing.assert_close(a.predict_proba(test.x), b.predict_proba(test.x))
    assert set(b.predict(test.x).tolist()) <= {-3, 7}


@pytest.mark.parametrize("cls", METHODS)
@pytest.mark.parametrize(
    ("X", "y", "arg"),
    [
        pytest.param(np.zeros(10), np.zeros(10, dtype=int), "`X`", id="X-1d"),
        pytest.param(np.full((12, 2), np.nan), np.arange(12) % 2, "`X`", id="X-nan"),
        pytest.param(np.zeros((12, 2)), np.zeros(12), "`y`", id="y-float"),
        pytest.param(np.zeros((12, 2)), np.arange(11) % 2, "same number of samples", id="len"),
        pytest.param(
            np.random.default_rng(0).normal(size=(12, 2)),
            np.zeros(12, dtype=int),
            "two classes",
            id="1class",
        ),
    ],
)
def test_fit_rejects_bad_inputs(cls, X, y, arg):
    with pytest.raises(ValueError, match=arg) as info:
        cls().fit(X, y)
    assert f"{cls.__name__}.fit" in str(info.value)


@pytest.mark.parametrize("cls", METHODS)
@pytest.mark.parametrize(
    "method", ["predict_proba", "epistemic_uncertainty", "predict", "sample_members"]
)
def test_predict_before_fit_names_the_missing_step(cls, method):
    args = (np.zeros((3, 2)),) + ((2,) if method == "sample_members" else ())
    with pytest.raises(NotFittedError, match=r"fit\(X, y\)"):
        getattr(cls(), method)(*args)
    assert issubclass(NotFittedError, ValueError)


@pytest.mark.parametrize("cls", METHODS)
def test_predict_rejects_feature_mismatch_and_bad_n(cls, toy):
    train, test = toy
    model = cls().fit(train.x, train.y)
    with pytest.raises(ValueError, match="`X` must have 2 features"):
        model.predict_proba(np.zeros((4, 3)))
    with pytest.raises(ValueError, match="`n`"):
        model.sample_members(test.x, 0)
    with pytest.raises(ValueError, match="`n`"):
        model.sample_members(test.x, 2.5)


def test_sample_members_rejects_multiclass():
    X = torch.randn(30, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    y = torch.arange(30) % 3
    model = Centroids().fit(X, y)
    assert model.predict_proba(X).shape == (30, 3)
    with pytest.raises(ValueError, match="binary tasks only"):
        model.sample_members(X, 2)


@pytest.mark.parametrize(
    ("h", "eu", "arg"),
    [
        pytest.param([0.5, 1.2], [0.1, 0.1], "`positive_probs`", id="h-range"),
        pytest.param([0.5, 0.5], [0.1, -0.1], "`epistemic_uncertainty`", id="eu-negative"),
        pytest.param([0.5, 0.5], [0.1], "same number of samples", id="len"),
    ],
)
def test_gaussian_members_validation(h, eu, arg):
    with pytest.raises(ValueError, match=arg):
        gaussian_members(h, eu, 3)


def test_nearest_neighbors_matches_a_brute_force_sort():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(40, 3, dtype=torch.float64, generator=g)
    r = torch.randn(25, 3, dtype=torch.float64, generator=g)
    d, idx = nearest_neighbors(q, r, 4)
    qn, rn = q.numpy(), r.numpy()
    for i in range(40):
        dist = np.sqrt(((rn - qn[i]) ** 2).sum(1))
        order = np.argsort(dist)[:4]
        np.testing.assert_array_equal(idx[i].numpy(), order)
        np.testing.assert_allclose(d[i].numpy(), dist[order], rtol=1e-12)


# ----------------------------------------------------------------------------- conventions
def test_gaussian_members_unclipped_draws_keep_mean_h_and_variance_eu():
    """clip=False: the paper's phi ~ N(h, sqrt(EU)) as written, draws may leave [0, 1]."""
    h = torch.tensor([0.0, 1.0, 0.5], dtype=torch.float64)
    eu = torch.tensor([0.25, 0.25, 0.0], dtype=torch.float64)
    n = 20000
    phi = gaussian_members(h, eu, n, clip=False, generator=torch.Generator().manual_seed(0))
    phi = phi[..., 1]
    assert float(phi[:, 0].min()) < 0.0 and float(phi[:, 1].max()) > 1.0
    rel = 5.0 * (2.0 / (n - 1)) ** 0.5
    torch.testing.assert_close(phi.var(0)[:2], eu[:2], rtol=rel, atol=0.0)
    torch.testing.assert_close(phi.mean(0), h, rtol=0.0, atol=5.0 * (0.25 / n) ** 0.5)
    # same generator state, clip=True is exactly the clipped version of the same draws
    clipped = gaussian_members(h, eu, n, clip=True, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(clipped[..., 1], phi.clamp(0.0, 1.0), rtol=0, atol=0)


def test_sample_members_passes_the_clip_option(toy):
    train, test = toy
    model = Centroids().fit(train.x, train.y)
    g = torch.Generator().manual_seed(0)
    raw = model.sample_members(test.x, 50, generator=g, clip=False)[..., 1]
    g = torch.Generator().manual_seed(0)
    clipped = model.sample_members(test.x, 50, generator=g)[..., 1]
    torch.testing.assert_close(clipped, raw.clamp(0.0, 1.0), rtol=0, atol=0)


def test_gaussian_members_rejects_a_non_bool_clip():
    with pytest.raises(ValueError, match="clip"):
        gaussian_members([0.5], [0.1], 2, clip="no")
