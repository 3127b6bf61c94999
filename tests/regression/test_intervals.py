"""Central predictive intervals and PICP / MPIW / interval score."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

from bensemble.regression import (
    interval_coverage,
    interval_score,
    mean_interval_width,
    predictive_interval,
)
from bensemble.regression._distribution import cdf_pair, quantile
from bensemble.regression._inputs import as_member_predictions
from bensemble.regression.intervals import _interval_compute, _interval_update

sys.path.insert(0, str(Path(__file__).resolve().parent))
from regression_cases import gaussian_members, point_members  # noqa: E402


def _reference_numpy_interval_score(lo, hi, y, alpha):
    return np.mean((hi - lo) + 2 / alpha * (lo - y) * (y < lo) + 2 / alpha * (y - hi) * (y > hi))


@pytest.mark.parametrize("alpha", [0.01, 0.1, 0.5])
def test_one_gaussian_interval_is_scipy_norm_interval(alpha):
    p, _ = gaussian_members(1, 50, seed=1)
    lo, hi = predictive_interval(p, alpha)
    ref_lo, ref_hi = stats.norm.interval(1 - alpha, p[0, :, 0].numpy(), p[0, :, 1].sqrt().numpy())
    np.testing.assert_allclose(lo.numpy(), ref_lo, rtol=0, atol=1e-12)
    np.testing.assert_allclose(hi.numpy(), ref_hi, rtol=0, atol=1e-12)


def test_mixture_interval_ends_are_the_mixture_quantiles():
    p, _ = gaussian_members(4, 30, seed=2)
    lo, hi = predictive_interval(p, 0.1)
    mu, sd = p[..., 0].numpy(), p[..., 1].sqrt().numpy()
    cdf_lo = stats.norm.cdf(lo.numpy()[None], mu, sd).mean(0)
    cdf_hi = stats.norm.cdf(hi.numpy()[None], mu, sd).mean(0)
    np.testing.assert_allclose(cdf_lo, 0.05, atol=1e-12)
    np.testing.assert_allclose(cdf_hi, 0.95, atol=1e-12)
    # Q(p) = inf{x : F(x) >= p} over the floats, with the library's own CDF: F(Q) >= p and,
    # one float below, F < p
    means, variances = p[..., 0], p[..., 1]
    for level, q in ((0.05, lo), (0.95, hi)):
        assert bool((cdf_pair(means, variances, q)[0] >= level).all())
        below = torch.nextafter(q, torch.full_like(q, -torch.inf))
        assert bool((cdf_pair(means, variances, below)[0] < level).all())


def test_point_members_give_order_statistics():
    x, _ = point_members(10, 40, seed=3)
    lo, hi = predictive_interval(x, 0.2)  # Q(0.1) = x_(1), Q(0.9) = x_(9)
    ordered = x.sort(dim=0).values
    assert torch.equal(lo, ordered[0]) and torch.equal(hi, ordered[8])
    # mixed atoms and Gaussians: bisection lands on the atom when it carries the level
    p = torch.tensor([[[0.0, 0.0]], [[0.0, 0.0]], [[5.0, 1.0]]], dtype=torch.float64)
    lo, hi = predictive_interval(p, 0.5)
    # F(x) = 2/3 + Phi(x - 5) / 3 above 0: Q(0.25) is the atom, Q(0.75) = 5 + Phi^-1(0.25)
    assert float(lo) == 0.0
    assert float(hi) == pytest.approx(5.0 + stats.norm.ppf((0.75 - 2 / 3) * 3), abs=1e-9)


def test_coverage_width_and_score_against_numpy():
    g = np.random.default_rng(4)
    lo = g.normal(size=200)
    hi = lo + g.uniform(0, 2, size=200)
    y = g.normal(size=200)
    assert interval_coverage(lo, hi, y) == pytest.approx(np.mean((lo <= y) & (y <= hi)), abs=0)
    assert mean_interval_width(lo, hi) == pytest.approx(np.mean(hi - lo), rel=1e-12)
    for alpha in (0.05, 0.3):
        assert interval_score(lo, hi, y, alpha) == pytest.approx(
            _reference_numpy_interval_score(lo, hi, y, alpha), rel=1e-12
        )


def test_interval_score_averaged_over_levels_is_uncertainty_toolboxs():
    uct = pytest.importorskip("uncertainty_toolbox")
    p, y = gaussian_members(1, 300, seed=5)
    levels = np.linspace(0.01, 0.99, 99)
    ours = np.mean([interval_score(*predictive_interval(p, 1 - q), y, 1 - q) for q in levels])
    reference = uct.interval_score(p[0, :, 0].numpy(), p[0, :, 1].sqrt().numpy(), y.numpy())
    assert ours == pytest.approx(reference, rel=1e-10)


def test_interval_score_is_minimised_by_the_true_quantiles():
    g = torch.Generator().manual_seed(6)
    y = torch.randn(40000, generator=g, dtype=torch.float64)
    alpha = 0.2
    z = float(stats.norm.ppf(1 - alpha / 2))
    best = interval_score(-z * torch.ones_like(y), z * torch.ones_like(y), y, alpha)
    for factor in (0.8, 1.25):
        half = factor * z * torch.ones_like(y)
        worse = interval_score(-half, half, y, alpha)
        assert worse > best


def test_streamed_interval_sums_equal_the_one_shot_values():
    p, y = gaussian_members(3, 90, seed=7)
    lo, hi = predictive_interval(p, 0.1)
    state = None
    for a, b in [(0, 13), (13, 14), (14, 90)]:
        part = _interval_update(lo[a:b], hi[a:b], y[a:b], 0.1)
        state = part if state is None else {k: state[k] + part[k] for k in state}
    values = _interval_compute(state)
    assert values["coverage"] == pytest.approx(interval_coverage(lo, hi, y), rel=1e-12)
    assert values["width"] == pytest.approx(mean_interval_width(lo, hi), rel=1e-12)
    assert values["score"] == pytest.approx(interval_score(lo, hi, y, 0.1), rel=1e-12)
    assert as_member_predictions(p, "t").n == 90


def test_interval_inputs_are_checked():
    with pytest.raises(ValueError, match="`lower` must not exceed `upper`"):
        interval_coverage([1.0], [0.0], [0.5])
    with pytest.raises(ValueError, match="`upper` must have the length"):
        mean_interval_width([0.0, 1.0], [1.0])
    with pytest.raises(ValueError, match="`labels`"):
        interval_score([0.0], [1.0], [0.5, 0.5], 0.1)
    with pytest.raises(ValueError, match="`alpha`"):
        interval_score([0.0], [1.0], [0.5], 1.5)
    with pytest.raises(ValueError, match="`lower`.*finite"):
        interval_coverage([-float("inf")], [0.0], [0.0])
    with pytest.raises(ValueError, match="`alpha`"):
        predictive_interval(torch.zeros(2, 3), alpha=0.0)


def test_mixture_quantiles_match_a_root_finder_also_across_zero():
    from scipy.optimize import brentq

    mu = torch.tensor([[-1.0, -3.0, 1e-3], [1.0, 2.0, 5.0], [0.0, 0.5, -2.0]], dtype=torch.float64)
    var = torch.tensor([[1.0, 0.5, 2.0], [1.0, 0.1, 1.0], [0.3, 4.0, 1e-6]], dtype=torch.float64)
    p = torch.stack([mu, var], -1)
    median = quantile(mu, var, 0.5)  # symmetric members at point 0: the median is 0, reached
    assert abs(float(median[0])) < 1e-15  # in <= 64 halvings of the bit patterns of [-1.1, 1.1]
    for alpha in (0.02, 0.5, 0.9):
        lo, hi = predictive_interval(p, alpha)
        for i in range(3):
            for level, value in ((alpha / 2, lo[i]), (1 - alpha / 2, hi[i])):

                def gap(t: float, i: int = i, level: float = level) -> float:
                    return stats.norm.cdf(t, mu[:, i], var[:, i].sqrt()).mean() - level

                root = brentq(gap, -50, 50, xtol=1e-14)
                assert float(value) == pytest.approx(root, abs=1e-9)
