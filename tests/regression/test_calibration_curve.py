"""Regression calibration curves, miscalibration area, PIT values."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bensemble.regression import (
    calibration_curve_from_pit,
    interval_coverage,
    miscalibration_area,
    pit_values,
    predictive_interval,
    regression_calibration_curve,
)
from bensemble.regression._inputs import as_member_predictions
from bensemble.regression.calibration_curve import _calibration_update, grid

sys.path.insert(0, str(Path(__file__).resolve().parent))
from regression_cases import gaussian_members, point_members  # noqa: E402


def _reference_brute_force_curve(p, y, n_levels):
    """Build every central interval and count the labels inside."""
    members = as_member_predictions(p, "t")
    observed = []
    for level in np.linspace(0, 1, n_levels):
        if level == 0:
            # the 0% interval [Q(1/2), Q(1/2)]: the median atom for point members
            median = p.sort(dim=0).values[(p.shape[0] + 1) // 2 - 1]
            observed.append(float((median == y).double().mean()) if members.points else 0.0)
        elif level == 1:
            if members.points:
                lo, hi = p.min(0).values, p.max(0).values
                observed.append(interval_coverage(lo, hi, y))
            else:
                observed.append(1.0)
        else:
            observed.append(interval_coverage(*predictive_interval(p, 1 - level), y))
    return np.array(observed)


@pytest.mark.parametrize("n_levels", [10, 100])
def test_gaussian_curve_area_and_errors_match_uncertainty_toolbox(n_levels):
    uct = pytest.importorskip("uncertainty_toolbox")
    p, y = gaussian_members(1, 500, seed=1)
    mu, sd, yy = p[0, :, 0].numpy(), p[0, :, 1].sqrt().numpy(), y.numpy()
    curve = regression_calibration_curve(p, y, n_levels=n_levels)
    expected, observed = uct.get_proportion_lists_vectorized(mu, sd, yy, n_levels)
    np.testing.assert_allclose(curve.expected.numpy(), expected, atol=1e-15)
    np.testing.assert_allclose(curve.observed.numpy(), observed, atol=0)
    assert curve.miscalibration_area == pytest.approx(
        uct.miscalibration_area(mu, sd, yy, n_levels), abs=1e-12
    )
    assert curve.mean_absolute_error == pytest.approx(
        uct.mean_absolute_calibration_error(mu, sd, yy, n_levels), abs=1e-12
    )
    assert curve.root_mean_squared_error == pytest.approx(
        uct.root_mean_squared_calibration_error(mu, sd, yy, n_levels), abs=1e-12
    )


def test_quantile_curve_is_uncertainty_toolboxs_on_mirrored_labels():
    uct = pytest.importorskip("uncertainty_toolbox")
    p, y = gaussian_members(1, 400, seed=2)
    mu, sd = p[0, :, 0], p[0, :, 1].sqrt()
    ours = regression_calibration_curve(p, 2 * mu - y, kind="quantile")
    _, observed = uct.get_proportion_lists_vectorized(
        mu.numpy(), sd.numpy(), y.numpy(), 100, prop_type="quantile"
    )
    np.testing.assert_allclose(ours.observed.numpy(), observed, atol=0)


@pytest.mark.parametrize("kind", ["gaussian", "points"])
def test_curve_counts_the_labels_inside_the_built_intervals(kind):
    p, y = gaussian_members(4, 200, seed=3) if kind == "gaussian" else point_members(5, 200)
    curve = regression_calibration_curve(p, y, n_levels=21)
    np.testing.assert_allclose(curve.observed.numpy(), _reference_brute_force_curve(p, y, 21))


def test_area_is_the_integral_of_the_gap_between_curve_and_diagonal():
    p, y = gaussian_members(3, 300, seed=4)
    curve = regression_calibration_curve(p, y, n_levels=11)
    fine = np.linspace(0, 1, 200_001)
    gap = np.interp(fine, curve.expected.numpy(), (curve.observed - curve.expected).numpy())
    assert curve.miscalibration_area == pytest.approx(np.trapezoid(np.abs(gap), fine), abs=1e-8)


def test_a_calibrated_predictive_has_a_small_area_and_uniform_pit():
    g = torch.Generator().manual_seed(5)
    mu = torch.randn(20000, generator=g, dtype=torch.float64)
    sd = 0.5 + torch.rand(20000, generator=g, dtype=torch.float64)
    y = mu + sd * torch.randn(20000, generator=g, dtype=torch.float64)
    p = torch.stack([mu, sd.square()], -1)[None]
    assert miscalibration_area(p, y) < 0.01
    assert miscalibration_area(torch.stack([mu, 0.25 * sd.square()], -1)[None], y) > 0.15
    u = pit_values(p, y)
    assert float(torch.histc(u, bins=10, min=0, max=1).div(2000).sub(1).abs().max()) < 0.1


def test_curve_from_pit_equals_the_curve_of_a_continuous_predictive():
    p, y = gaussian_members(4, 300, seed=6)
    for kind in ("interval", "quantile"):
        direct = regression_calibration_curve(p, y, n_levels=37, kind=kind)
        via_pit = calibration_curve_from_pit(pit_values(p, y), n_levels=37, kind=kind)
        torch.testing.assert_close(direct.observed, via_pit.observed, rtol=0, atol=0)


def test_streamed_counts_equal_the_one_shot_curve():
    p, y = gaussian_members(3, 120, seed=7)
    members = as_member_predictions(p, "t")
    levels = grid(50)
    parts = [_calibration_update(members.rows(a, b), y[a:b], levels, "interval") for a, b in
             [(0, 1), (1, 60), (60, 120)]]  # fmt: skip
    inside = sum(part["inside"] for part in parts)
    torch.testing.assert_close(inside, regression_calibration_curve(p, y, n_levels=50).inside)


def test_whole_support_at_level_one():
    x = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)  # two point members
    curve = regression_calibration_curve(x, [0.5, 3.0], n_levels=2)
    assert curve.observed.tolist() == [0.0, 0.5]  # 3.0 lies beyond the atoms
    far = torch.tensor([[[0.0, 1.0]]], dtype=torch.float64)
    assert regression_calibration_curve(far, [80.0], n_levels=2).observed.tolist() == [0.0, 1.0]


def test_curve_options_and_pit_inputs_are_checked():
    p, y = gaussian_members(2, 5)
    with pytest.raises(ValueError, match="`n_levels`"):
        regression_calibration_curve(p, y, n_levels=1)
    with pytest.raises(ValueError, match="`kind` must be one of 'interval', 'quantile'"):
        regression_calibration_curve(p, y, kind="two-sided")
    with pytest.raises(ValueError, match="`pit` must lie in"):
        calibration_curve_from_pit([0.5, 1.5])
