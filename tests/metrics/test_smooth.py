"""The Beta-kernel smooth calibration curve (paper, fig. 1(c)) and its Display."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

import bensemble.metrics.smooth as smooth_module
from bensemble.metrics import SmoothCalibrationCurve, smooth_calibration_curve
from bensemble.plots import SmoothCalibrationDisplay


def _calibrated(n: int, a: float, b: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Confidences ~ Beta(a, b) and outcomes ~ Bernoulli(confidence): perfectly calibrated."""
    g = torch.Generator().manual_seed(seed)
    conf = torch.distributions.Beta(a, b).sample((n,)).to(torch.float64)
    torch.manual_seed(seed)  # Beta.sample draws from the global RNG
    correct = (torch.rand(n, generator=g, dtype=torch.float64) < conf).to(torch.float64)
    return conf, correct


def _reference_scipy_smooth_curve(conf, correct, bandwidth, grid):
    """A plain float64 loop over grid points with scipy's Beta pdf (mean t, nu = 1/(4b^2) - 1)."""
    nu = 1.0 / (4.0 * bandwidth**2) - 1.0
    c = np.clip(np.asarray(conf, dtype=np.float64), 1e-12, 1 - 1e-12)
    y = np.asarray(correct, dtype=np.float64)
    out = []
    for t in grid:
        w = stats.beta.pdf(c, t * nu, (1 - t) * nu)
        out.append(float((w * y).sum() / w.sum()))
    return np.array(out)


def test_matches_a_scipy_loop_and_is_chunk_and_order_invariant(monkeypatch):
    conf, correct = _calibrated(3000, 2.0, 2.0, seed=1)
    grid = [0.1, 0.3, 0.5, 0.7, 0.9]
    r = smooth_calibration_curve(conf, correct, bandwidth=0.1, grid=grid)
    ref = _reference_scipy_smooth_curve(conf.numpy(), correct.numpy(), 0.1, grid)
    np.testing.assert_allclose(r.curve.numpy(), ref, rtol=1e-10, atol=1e-12)
    # Density: mean of the normalised Beta densities.
    nu = r.concentration
    dens = [stats.beta.pdf(conf.numpy(), t * nu, (1 - t) * nu).mean() for t in grid]
    np.testing.assert_allclose(r.density.numpy(), dens, rtol=1e-9)
    monkeypatch.setattr(smooth_module, "_CHUNK_ELEMENTS", 7)  # 1 sample per chunk
    chunked = smooth_calibration_curve(conf[:300], correct[:300], bandwidth=0.1, grid=grid)
    whole = smooth_calibration_curve
    monkeypatch.undo()
    full = whole(conf[:300], correct[:300], bandwidth=0.1, grid=grid)
    torch.testing.assert_close(chunked.curve, full.curve, rtol=1e-12, atol=1e-12)
    perm = torch.randperm(300, generator=torch.Generator().manual_seed(0))
    shuffled = whole(conf[:300][perm], correct[:300][perm], bandwidth=0.1, grid=grid)
    torch.testing.assert_close(shuffled.curve, full.curve, rtol=1e-12, atol=1e-12)


def test_calibrated_data_lie_within_002_of_the_diagonal_in_the_bulk_at_bandwidth_002():
    # Bulk = [0.05, 0.95]: there the Beta(2, 2) confidences have density >= 0.28, so with
    # N = 200,000 the kernel (sd 2 * 0.02 * sqrt(t (1 - t)) <= 0.02) averages >= ~1,000
    # outcomes and the estimate's standard error is <= 0.007 (0.02 is ~3 se); the analytic
    # smoothing bias (1 - 2t) / (nu + 2) with nu = 624 is below 0.0015.
    conf, correct = _calibrated(200_000, 2.0, 2.0, seed=0)
    grid = torch.linspace(0.05, 0.95, 91, dtype=torch.float64)
    r = smooth_calibration_curve(conf, correct, bandwidth=0.02, grid=grid)
    assert float((r.curve - grid).abs().max()) < 0.02


def test_the_smoothing_bias_at_the_papers_bandwidth_is_the_analytic_one():
    # Confidences ~ Beta(5, 2) (a confident classifier), perfectly calibrated. With the mean-t
    # Beta kernel the expected curve is (t nu + 4) / (nu + 5): at b = 0.2 (nu = 5.25) the bias
    # is (4 - 5 t) / 10.25, +0.146 at t = 0.5, 0 at t = 0.8, -0.049 at t = 0.9.
    conf, correct = _calibrated(200_000, 5.0, 2.0, seed=2)
    grid = torch.tensor([0.3, 0.5, 0.7, 0.8, 0.9], dtype=torch.float64)
    r = smooth_calibration_curve(conf, correct, bandwidth=0.2, grid=grid)
    nu = 1.0 / (4 * 0.2**2) - 1.0
    assert math.isclose(r.concentration, nu)
    analytic_bias = (4.0 - 5.0 * grid) / (nu + 5.0)
    torch.testing.assert_close(r.curve - grid, analytic_bias, atol=0.01, rtol=0.0)
    assert float((r.curve - grid)[1]) > 0.12  # the bias is real, not noise


def test_uniform_calibrated_confidences_are_unbiased_even_at_bandwidth_02():
    conf, correct = _calibrated(200_000, 1.0, 1.0, seed=3)
    grid = torch.linspace(0.1, 0.9, 9, dtype=torch.float64)
    r = smooth_calibration_curve(conf, correct, bandwidth=0.2, grid=grid)
    assert float((r.curve - grid).abs().max()) < 0.01


def test_gaussian_kernel_and_extreme_confidences_stay_finite():
    conf = torch.tensor([0.0, 1.0, 1.0, 0.5], dtype=torch.float64)
    correct = torch.tensor([0, 1, 1, 0])
    for kernel in ("beta", "gaussian"):
        r = smooth_calibration_curve(conf, correct, bandwidth=0.05, kernel=kernel)
        assert bool(torch.isfinite(r.curve).all()) and bool(torch.isfinite(r.density).all())
        assert r.curve.shape == (99,)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        pytest.param({"bandwidth": 0.5}, "`bandwidth` must lie in", id="beta-bandwidth"),
        pytest.param({"bandwidth": 0.0, "kernel": "gaussian"}, "`bandwidth`", id="zero"),
        pytest.param({"bandwidth": True}, "`bandwidth` must be a number", id="bool"),
        pytest.param({"kernel": "tophat"}, "`kernel`", id="kernel"),
        pytest.param({"grid": [0.0, 0.5]}, "`grid` must be non-empty", id="grid-edge"),
        pytest.param({"grid": []}, "`grid`", id="grid-empty"),
    ],
)
def test_bad_options_raise_value_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        smooth_calibration_curve([0.2, 0.8], [0, 1], **kwargs)


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="`conf`"):
        smooth_calibration_curve([0.2, 1.5], [0, 1])
    with pytest.raises(ValueError, match="`correct`"):
        smooth_calibration_curve([0.2, 0.5], [0, 2])
    with pytest.raises(ValueError, match="`correct`"):
        smooth_calibration_curve([0.2, 0.5], [0, 1, 1])


def test_display_holds_exactly_what_the_compute_function_returned():
    conf, correct = _calibrated(500, 2.0, 2.0, seed=4)
    expected = smooth_calibration_curve(conf, correct, bandwidth=0.1)
    display = SmoothCalibrationDisplay.from_predictions(conf, correct, bandwidth=0.1)
    assert isinstance(display.result, SmoothCalibrationCurve)
    torch.testing.assert_close(display.result.curve, expected.curve)
    torch.testing.assert_close(display.result.grid, expected.grid)
    assert display.plot() is display and display.ax_ is not None
    line = display.ax_.lines[1]
    np.testing.assert_allclose(line.get_ydata(), expected.curve.numpy())
    with pytest.raises(ValueError, match="`result`"):
        SmoothCalibrationDisplay({"curve": 1})
