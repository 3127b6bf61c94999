"""Tests of the exact PG(1, c) sampler and the closed-form moments."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from bensemble.methods._polya_gamma import (
    polya_gamma_mean,
    polya_gamma_variance,
    sample_polya_gamma,
)

# |c| / 2 below and above 1 / 0.64 = 1.5625 exercises both inverse-Gaussian branches of the sampler;
# c = 0 the untilted law, large |c| the concentrated regime, negative c the symmetry.
C_VALUES = [
    pytest.param(0.0, id="c=0"),
    pytest.param(1.0, id="c=1"),
    pytest.param(3.0, id="c=3-large-mean-branch"),
    pytest.param(3.3, id="c=3.3-small-mean-branch"),
    pytest.param(-6.0, id="c=-6"),
    pytest.param(40.0, id="c=40"),
]


def _reference_series_moments(c: float, n_terms: int = 200_000) -> tuple[float, float]:
    """Mean and variance from the gamma-convolution representation (float64 sums)."""
    k = np.arange(1, n_terms + 1, dtype=np.float64)
    d = (k - 0.5) ** 2 + c**2 / (4.0 * math.pi**2)
    # Tail sums beyond n_terms by the integral approximation (relative error < 1e-10 here).
    tail1 = 1.0 / (n_terms + 0.0)
    tail2 = 1.0 / (3.0 * n_terms**3)
    mean = ((1.0 / d).sum() + tail1) / (2.0 * math.pi**2)
    var = ((1.0 / d**2).sum() + tail2) / (4.0 * math.pi**4)
    return mean, var


def _reference_series_sampler(c: float, n: int, seed: int, n_terms: int = 400) -> np.ndarray:
    """PG(1, c) by the truncated gamma convolution plus the tail's mean (an independent sampler)."""
    rng = np.random.default_rng(seed)
    k = np.arange(1, n_terms + 1, dtype=np.float64)
    d = (k - 0.5) ** 2 + c**2 / (4.0 * math.pi**2)
    head = (rng.exponential(size=(n, n_terms)) / d).sum(axis=1)
    k_tail = np.arange(n_terms + 1, 200_000, dtype=np.float64)
    tail = (1.0 / ((k_tail - 0.5) ** 2 + c**2 / (4.0 * math.pi**2))).sum()
    return (head + tail) / (2.0 * math.pi**2)


@pytest.mark.parametrize("c", [0.0, 1e-4, 0.3, 2.0, 7.5, -12.0, 80.0])
def test_closed_form_moments_match_series(c):
    mean, var = _reference_series_moments(c)
    got_mean = float(polya_gamma_mean(torch.tensor(c)))
    got_var = float(polya_gamma_variance(torch.tensor(c)))
    assert got_mean == pytest.approx(mean, rel=1e-8)
    assert got_var == pytest.approx(var, rel=1e-8)


def test_closed_form_values_at_zero_and_huge_c():
    assert float(polya_gamma_mean(torch.tensor(0.0))) == 0.25
    assert float(polya_gamma_variance(torch.tensor(0.0))) == pytest.approx(1.0 / 24.0)
    big = torch.tensor([1e3, 1e5])
    torch.testing.assert_close(polya_gamma_mean(big), 1.0 / (2.0 * big.double()))
    torch.testing.assert_close(polya_gamma_variance(big), 1.0 / (2.0 * big.double() ** 3))


@pytest.mark.parametrize("c", C_VALUES)
def test_sample_mean_and_variance_match_closed_form(c):
    n = 100_000
    w = sample_polya_gamma(torch.full((n,), c), seed=11)
    mean = float(polya_gamma_mean(torch.tensor(c)))
    var = float(polya_gamma_variance(torch.tensor(c)))
    # Standard errors: sd / sqrt(n) for the mean; sqrt((mu4 - var^2) / n) for the variance, with
    # the fourth central moment estimated from the draws. 4.5 SE: both are deterministic (fixed
    # seed) and a wrong sampler (e.g. PG(1, c/2) or a missing tilt) is off by tens of SE.
    assert abs(float(w.mean()) - mean) < 4.5 * math.sqrt(var / n)
    mu4 = float(((w - w.mean()) ** 4).mean())
    assert abs(float(w.var()) - var) < 4.5 * math.sqrt((mu4 - var**2) / n)


@pytest.mark.parametrize("c", [0.0, 2.5, 6.0])
def test_distribution_matches_gamma_convolution_sampler(c):
    n = 20_000
    w = sample_polya_gamma(torch.full((n,), c), seed=5).numpy()
    ref = _reference_series_sampler(c, n, seed=6)
    assert stats.ks_2samp(w, ref).pvalue > 1e-3


def test_mixed_parameters_in_one_call():
    # Entries with different c (both proposal branches, several rounds) in one vectorised call.
    c = torch.tensor([0.0, 3.0, 3.3, 40.0]).repeat(25_000)
    w = sample_polya_gamma(c, seed=2).view(-1, 4)
    want = polya_gamma_mean(c[:4])
    se = torch.sqrt(polya_gamma_variance(c[:4]) / w.shape[0])
    assert bool(((w.mean(0) - want).abs() < 4.5 * se).all())


def test_shape_positivity_determinism_and_symmetry():
    c = torch.linspace(-5, 5, 12).view(3, 4)
    a = sample_polya_gamma(c, seed=3)
    assert a.shape == (3, 4) and a.dtype == torch.float64
    assert bool((a > 0).all())
    torch.testing.assert_close(a, sample_polya_gamma(c, generator=torch.Generator().manual_seed(3)))
    torch.testing.assert_close(a, sample_polya_gamma(-c, seed=3))  # the law depends on |c| only
    assert not torch.equal(a, sample_polya_gamma(c, seed=4))
    b = sample_polya_gamma(np.zeros(5), seed=0)  # numpy input
    assert b.shape == (5,)
    assert sample_polya_gamma(torch.empty(0), seed=0).shape == (0,)


def test_global_rng_used_without_generator():
    torch.manual_seed(0)
    a = sample_polya_gamma(torch.ones(10))
    torch.manual_seed(0)
    torch.testing.assert_close(a, sample_polya_gamma(torch.ones(10)))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        pytest.param({"c": torch.tensor([1.0, float("nan")])}, "`c` must be finite", id="nan"),
        pytest.param(
            {"c": torch.ones(2), "seed": 1, "generator": torch.Generator()}, "not both", id="both"
        ),
        pytest.param({"c": torch.ones(2), "generator": 3}, "`generator`", id="bad-generator"),
        pytest.param({"c": ["a"]}, "`c` must be numeric", id="strings"),
    ],
)
def test_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        sample_polya_gamma(**kwargs)
