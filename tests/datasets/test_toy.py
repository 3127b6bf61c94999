"""Tests of the two-Gaussian toy problem against independent references (scipy densities)."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from bensemble.datasets import (
    BAYES_ERROR,
    ToyData,
    corrupt_inputs,
    make_toy_gaussians,
    make_toy_grid,
    toy_posterior,
)
from bensemble.datasets.toy import MEAN_NEGATIVE, MEAN_POSITIVE, VARIANCE


def _reference_scipy_posterior(x: np.ndarray) -> np.ndarray:
    """Bayes' rule with the two Gaussian densities and equal priors (no closed form used)."""
    cov = VARIANCE * np.eye(2)
    pos = stats.multivariate_normal(MEAN_POSITIVE, cov).pdf(x)
    neg = stats.multivariate_normal(MEAN_NEGATIVE, cov).pdf(x)
    return pos / (pos + neg)


def test_bayes_error_matches_the_normal_tail():
    # Distance between the means is 5 sqrt(2); per-class sd 3**0.5 -> Phi(-||d|| / (2 sd)).
    reference = stats.norm.cdf(-5.0 * math.sqrt(2.0) / (2.0 * math.sqrt(VARIANCE)))
    assert BAYES_ERROR == pytest.approx(reference, rel=1e-12)
    assert BAYES_ERROR == pytest.approx(0.0206, abs=5e-5)


def test_posterior_matches_bayes_rule_with_scipy_densities():
    g = torch.Generator().manual_seed(0)
    x = 4.0 * torch.randn(500, 2, generator=g, dtype=torch.float64)
    eta = toy_posterior(x)
    torch.testing.assert_close(
        eta, torch.from_numpy(_reference_scipy_posterior(x.numpy())), rtol=1e-9, atol=1e-12
    )


def test_posterior_rejects_wrong_shape():
    with pytest.raises(ValueError, match="`x`"):
        toy_posterior(torch.zeros(3, 3))


def test_sampler_shapes_dtypes_and_eta():
    d = make_toy_gaussians(1000, seed=1)
    assert isinstance(d, ToyData) and len(d) == 1000
    assert d.x.shape == (1000, 2) and d.x.dtype == torch.float64
    assert d.y.shape == (1000,) and d.y.dtype == torch.int64
    assert set(d.y.unique().tolist()) <= {0, 1}
    torch.testing.assert_close(d.eta, toy_posterior(d.x))


def test_sampler_class_conditional_moments():
    d = make_toy_gaussians(200_000, seed=2)
    assert d.y.double().mean().item() == pytest.approx(0.5, abs=0.005)
    for label, mean in ((1, MEAN_POSITIVE), (0, MEAN_NEGATIVE)):
        x = d.x[d.y == label].numpy()
        np.testing.assert_allclose(x.mean(0), mean, atol=0.02)
        np.testing.assert_allclose(np.cov(x.T), VARIANCE * np.eye(2), atol=0.05)


def test_bayes_error_is_reproduced_empirically():
    d = make_toy_gaussians(400_000, seed=3)
    # The expected Bayes risk E[min(eta, 1 - eta)] has a small Monte-Carlo error (~1e-4 here).
    risk = torch.minimum(d.eta, 1 - d.eta).mean().item()
    assert risk == pytest.approx(BAYES_ERROR, abs=5e-4)
    # ... and the Bayes classifier's error rate on the sampled labels (binomial sd ~2.2e-4).
    error = ((d.eta > 0.5).long() != d.y).double().mean().item()
    assert error == pytest.approx(BAYES_ERROR, abs=1e-3)


def test_labels_are_calibrated_against_eta():
    d = make_toy_gaussians(200_000, seed=4)
    ids = torch.bucketize(d.eta, torch.linspace(0, 1, 11)[1:-1])
    counts = torch.bincount(ids, minlength=10).double()
    freq = torch.bincount(ids, weights=d.y.double(), minlength=10) / counts
    mean_eta = torch.bincount(ids, weights=d.eta, minlength=10) / counts
    sd = torch.sqrt(mean_eta * (1 - mean_eta) / counts)
    assert bool(((freq - mean_eta).abs() <= 4 * sd + 1e-3).all())


def test_seed_and_generator_reproducibility():
    a = make_toy_gaussians(100, seed=7)
    b = make_toy_gaussians(100, generator=torch.Generator().manual_seed(7))
    c = make_toy_gaussians(100, seed=8)
    torch.testing.assert_close(a.x, b.x)
    assert torch.equal(a.y, b.y)
    assert not torch.equal(a.x, c.x)


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda: make_toy_gaussians(0), id="n-zero"),
        pytest.param(lambda: make_toy_gaussians(2.5), id="n-float"),
        pytest.param(
            lambda: make_toy_gaussians(5, seed=1, generator=torch.Generator()), id="seed-and-gen"
        ),
        pytest.param(lambda: make_toy_grid(1), id="grid-too-small"),
        pytest.param(lambda: make_toy_grid(5, low=1.0, high=1.0), id="grid-empty-range"),
        pytest.param(lambda: corrupt_inputs(torch.zeros(3, 2), 1.5), id="rho-above-1"),
        pytest.param(lambda: corrupt_inputs(torch.zeros(3), 0.5), id="x-1d"),
    ],
)
def test_bad_arguments_raise(call):
    with pytest.raises(ValueError):
        call()


def test_grid_layout_is_row_major_with_x1_fastest():
    d = make_toy_grid(7, low=-3.0, high=3.0, seed=0)
    axis = torch.linspace(-3.0, 3.0, 7, dtype=torch.float64)
    assert d.x.shape == (49, 2)
    image_x1 = d.x[:, 0].reshape(7, 7)
    image_x2 = d.x[:, 1].reshape(7, 7)
    torch.testing.assert_close(image_x1, axis.expand(7, 7))  # columns follow x1
    torch.testing.assert_close(image_x2, axis[:, None].expand(7, 7))  # rows follow x2
    torch.testing.assert_close(d.eta, toy_posterior(d.x))


def test_grid_labels_are_bernoulli_eta():
    d = make_toy_grid(300, seed=5)
    assert d.y.dtype == torch.int64
    # Sum of independent Bernoulli(eta): mean and variance known exactly.
    total, expected = d.y.double().sum().item(), d.eta.sum().item()
    sd = math.sqrt((d.eta * (1 - d.eta)).sum().item())
    assert abs(total - expected) < 5 * sd
    # Points with eta ~ 0 or 1 carry deterministic labels.
    assert bool((d.y[d.eta < 1e-12] == 0).all()) and bool((d.y[d.eta > 1 - 1e-12] == 1).all())
    assert torch.equal(make_toy_grid(300, seed=5).y, d.y)


def test_corrupt_inputs_extremes_and_fraction():
    x = make_toy_gaussians(50_000, seed=6).x
    torch.testing.assert_close(corrupt_inputs(x, 0.0, seed=0), x)
    full = corrupt_inputs(x, 1.0, seed=0)
    assert bool(((full >= -8.0) & (full <= 8.0)).all())
    assert not bool((full == x).all(dim=1).any())
    # Replaced rows are uniform on [-8, 8]^2: mean 0, variance 16^2 / 12.
    np.testing.assert_allclose(full.mean(0).numpy(), 0.0, atol=0.1)
    np.testing.assert_allclose(full.var(0).numpy(), 256.0 / 12.0, rtol=0.02)
    half = corrupt_inputs(x, 0.3, seed=1)
    replaced = (half != x).any(dim=1).double().mean().item()
    assert replaced == pytest.approx(0.3, abs=0.01)


def test_corrupt_inputs_custom_box_and_reproducibility():
    x = torch.zeros(1000, 2, dtype=torch.float64)
    out = corrupt_inputs(x, 1.0, low=2.0, high=3.0, seed=3)
    assert bool(((out >= 2.0) & (out <= 3.0)).all())
    torch.testing.assert_close(out, corrupt_inputs(x, 1.0, low=2.0, high=3.0, seed=3))
    g = torch.Generator().manual_seed(3)
    torch.testing.assert_close(out, corrupt_inputs(x, 1.0, low=2.0, high=3.0, generator=g))
