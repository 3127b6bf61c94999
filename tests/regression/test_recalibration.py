"""Variance scaling and quantile recalibration of regression members."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bensemble.regression import (
    QuantileRecalibration,
    VarianceScaling,
    calibration_curve_from_pit,
    interval_coverage,
    miscalibration_area,
    pit_values,
    regression_negative_log_likelihood,
)
from bensemble.uncertainty import decompose_regression_uncertainty

F64 = torch.float64


def _mixture_problem(n: int, c: float, seed: int):
    """Three Gaussian members; labels drawn from their mixture scaled by ``c`` about its mean."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(n, generator=g, dtype=F64)
    offsets = torch.tensor([-0.8, 0.1, 0.7], dtype=F64)[:, None] * (1 + 0.5 * base.abs())
    means = base + offsets
    variances = (0.3 + 0.2 * torch.rand(3, n, generator=g, dtype=F64)).square()
    which = torch.randint(0, 3, (n,), generator=g)
    draw = means.gather(0, which[None])[0] + variances.gather(0, which[None])[
        0
    ].sqrt() * torch.randn(n, generator=g, dtype=F64)
    centre = means.mean(0)
    y = centre + c * (draw - centre)
    return torch.stack([means, variances], -1), y


@pytest.mark.parametrize("c", [0.25, 0.5, 2.0, 4.0])
def test_variance_scaling_recovers_a_known_spread_factor(c):
    p, y = _mixture_problem(6000, c, seed=int(10 * c))
    fit = VarianceScaling().fit(p, y)
    assert fit.converged_
    assert fit.scale_ == pytest.approx(c * c, rel=0.1)
    gaussian = VarianceScaling("gaussian").fit(p, y)
    _, total, _, _ = (p[..., 0].mean(0), *decompose_regression_uncertainty(p[..., 0], p[..., 1]))
    z2 = ((y - p[..., 0].mean(0)).square() / total).mean()
    assert gaussian.scale_ == pytest.approx(float(z2), rel=1e-12)  # the closed form


def test_the_fitted_factor_minimises_the_calibration_nll_and_helps_held_out():
    p, y = _mixture_problem(8000, 2.0, seed=3)
    cal, test = slice(0, 4000), slice(4000, 8000)
    scaler = VarianceScaling().fit(p[:, cal], y[cal])
    at = regression_negative_log_likelihood(scaler.transform(p[:, cal]), y[cal])
    assert at == pytest.approx(scaler.nll_, rel=1e-10)
    for step in (0.99, 1.01):
        other = VarianceScaling()
        other.log_scale.fill_(math.log(scaler.scale_ * step))
        assert regression_negative_log_likelihood(other.transform(p[:, cal]), y[cal]) > at
    before = regression_negative_log_likelihood(p[:, test], y[test])
    assert regression_negative_log_likelihood(scaler.transform(p[:, test]), y[test]) < before - 0.2


def test_transform_keeps_the_mean_and_scales_the_total_variance():
    p, _ = _mixture_problem(100, 1.0, seed=4)
    scaler = VarianceScaling()
    scaler.log_scale.fill_(math.log(2.5))
    out = scaler.transform(p)
    torch.testing.assert_close(out[..., 0].mean(0), p[..., 0].mean(0))
    before = decompose_regression_uncertainty(p[..., 0], p[..., 1])
    after = decompose_regression_uncertainty(out[..., 0], out[..., 1])
    for a, b in zip(before, after):
        torch.testing.assert_close(b, 2.5 * a)
    points = scaler.transform(p[..., 0].float())
    assert points.dtype == torch.float32 and points.shape == (3, 100)
    assert not out.requires_grad


def test_unfitted_scaling_is_the_identity_and_point_members_need_the_gaussian_fit():
    p, y = _mixture_problem(50, 1.0, seed=5)
    torch.testing.assert_close(VarianceScaling().transform(p), p)
    with pytest.raises(ValueError, match="predictive='gaussian'"):
        VarianceScaling().fit(p[..., 0], y)
    assert VarianceScaling("gaussian").fit(p[..., 0], y).scale_ > 0


def test_quantile_map_is_scikit_learns_isotonic_fit_of_the_pit_ecdf():
    from sklearn.isotonic import IsotonicRegression

    p, y = _mixture_problem(2000, 2.0, seed=6)
    cal = QuantileRecalibration().fit(p, y)
    u = pit_values(p, y).numpy()
    ecdf = (u[None, :] <= u[:, None]).mean(axis=1)
    reference = IsotonicRegression(out_of_bounds="clip", y_min=0, y_max=1).fit(u, ecdf)
    # the same map inside (R is pinned at the ends, R(0) = 0 and R(1) = 1, even where PIT values
    # of exactly 0 or 1 occur; scikit-learn also pools x values closer than 1e-15, which only
    # the tail PIT values of this data are)
    grid = np.linspace(np.quantile(u, 0.05), np.quantile(u, 0.95), 1001)
    ours = cal.calibration_map(grid).numpy()
    np.testing.assert_allclose(ours, reference.predict(grid), rtol=0, atol=1e-12)
    assert cal.knots_x_[0] == 0 and cal.knots_y_[-1] == 1
    assert float(cal.calibration_map([0.0])) == 0.0 and float(cal.calibration_map([1.0])) == 1.0


@pytest.mark.parametrize("c", [0.5, 2.0])
def test_quantile_recalibration_calibrates_held_out_data(c):
    p, y = _mixture_problem(8000, c, seed=7)
    cal, test = slice(0, 4000), slice(4000, 8000)
    recal = QuantileRecalibration().fit(p[:, cal], y[cal])
    before = miscalibration_area(p[:, test], y[test])
    after = calibration_curve_from_pit(recal.pit(p[:, test], y[test])).miscalibration_area
    assert before > 0.1 and after < 0.02
    lower, upper = recal.predictive_interval(p[:, test], alpha=0.1)
    assert interval_coverage(lower, upper, y[test]) == pytest.approx(0.9, abs=0.02)
    some = slice(4000, 5500)
    quantile_members = recal.transform(p[:, some])  # [99, N] points of the recalibrated CDF
    assert quantile_members.shape == (99, 1500)
    assert miscalibration_area(quantile_members, y[some]) < 0.04


def test_quantile_recalibration_compares_with_uncertainty_toolbox():
    """UT recalibrates the interval curve (iso_recal of expected on observed proportions); on a
    Gaussian predictive twice too narrow both bring the held-out area from ~0.2 to ~0."""
    uct = pytest.importorskip("uncertainty_toolbox")
    g = torch.Generator().manual_seed(8)
    mu = torch.randn(6000, generator=g, dtype=F64)
    y = mu + 2.0 * torch.randn(6000, generator=g, dtype=F64)
    p = torch.stack([mu, torch.ones_like(mu)], -1)[None]
    cal, test = slice(0, 3000), slice(3000, 6000)
    ours = QuantileRecalibration().fit(p[:, cal], y[cal])
    ours_area = calibration_curve_from_pit(ours.pit(p[:, test], y[test])).miscalibration_area
    exp, obs = uct.get_proportion_lists_vectorized(
        mu[cal].numpy(), np.ones(3000), y[cal].numpy(), prop_type="quantile"
    )
    model = uct.recalibration.iso_recal(exp, obs)
    theirs = uct.miscalibration_area(
        mu[test].numpy(), np.ones(3000), y[test].numpy(), recal_model=model, prop_type="quantile"
    )
    assert uct.miscalibration_area(mu[test].numpy(), np.ones(3000), y[test].numpy()) > 0.15
    assert ours_area < 0.02 and theirs < 0.04


def test_state_dicts_round_trip_and_bad_states_are_refused():
    p, y = _mixture_problem(500, 2.0, seed=9)
    recal = QuantileRecalibration().fit(p, y)
    other = QuantileRecalibration()
    other.load_state_dict(recal.state_dict())
    for a, b in zip(recal.predictive_interval(p), other.predictive_interval(p)):
        assert torch.equal(a, b)
    state = recal.state_dict()
    state["knots_y"] = state["knots_y"].flip(0)
    with pytest.raises(ValueError, match="`knots_x` and `knots_y`"):
        QuantileRecalibration().load_state_dict(state)
    scaler = VarianceScaling().fit(p, y)
    copy = VarianceScaling()
    copy.load_state_dict(scaler.state_dict())
    assert torch.equal(copy.transform(p), scaler.transform(p))
    with pytest.raises(ValueError, match="`log_scale`"):
        VarianceScaling().load_state_dict({"log_scale": torch.tensor(float("nan"))})


def test_options_are_checked():
    with pytest.raises(ValueError, match="`predictive` must be one of"):
        VarianceScaling("normal")
    with pytest.raises(ValueError, match="`bounds`"):
        VarianceScaling(bounds=(2.0, 1.0))
    with pytest.raises(ValueError, match="`n_quantiles`"):
        QuantileRecalibration(n_quantiles=0)
    with pytest.raises(ValueError, match="fit first"):
        QuantileRecalibration().predictive_interval(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="`levels` must lie in"):
        QuantileRecalibration().fit(*_mixture_problem(50, 1.0, 1)).calibration_map([1.5])
