"""TECE conditioned on Psi = (h(x), EU(x)) for methods that report a prediction and an EU."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from bensemble.metrics import true_epistemic_calibration_error
from bensemble.metrics.epistemic import (
    gaussian_draw_moments,
    illustrative_true_epistemic_calibration_error,
)


def _scipy_moments(h: float, eu: float, clip: bool) -> tuple[float, float]:
    """Mean and variance of phi (clipped or not) for phi ~ N(h, sqrt(eu)), by quadrature."""
    sd = np.sqrt(eu)
    if sd == 0:
        v = min(max(h, 0.0), 1.0) if clip else h
        return v, 0.0
    f = (lambda z: np.clip(z, 0.0, 1.0)) if clip else (lambda z: z)
    dist = stats.norm(loc=h, scale=sd)
    m1 = dist.expect(f, lb=h - 12 * sd, ub=h + 12 * sd, points=[0.0, 1.0])
    m2 = dist.expect(lambda z: f(z) ** 2, lb=h - 12 * sd, ub=h + 12 * sd, points=[0.0, 1.0])
    return m1, m2 - m1**2


@pytest.mark.parametrize("clip", [False, True])
@pytest.mark.parametrize(("h", "eu"), [(0.3, 0.01), (0.05, 0.04), (0.9, 0.25), (0.5, 0.0)])
def test_moments_match_scipy_quadrature(h, eu, clip):
    mean, var = gaussian_draw_moments([h], [eu], clip=clip)
    m_ref, v_ref = _scipy_moments(h, eu, clip)
    assert abs(float(mean[0]) - m_ref) < 1e-9
    assert abs(float(var[0]) - v_ref) < 1e-9


@pytest.mark.parametrize("clip", [False, True])
@pytest.mark.parametrize("trust", ["reported", "draws"])
def test_constant_h_and_eu_is_the_analytic_value(trust, clip):
    """One Psi for every point: P(Y=1 | Psi) is the mean of eta; the value is closed-form."""
    h, eu = 0.05, 0.04
    eta = torch.tensor([0.1, 0.5, 0.3, 0.7, 0.2], dtype=torch.float64)
    pi = float(eta.mean())  # 0.36
    m, v = _scipy_moments(h, eu, clip)
    expected = abs((pi - m) ** 2 + v - (eu if trust == "reported" else v))
    got = illustrative_true_epistemic_calibration_error(
        [h] * 5, [eu] * 5, eta, trust=trust, clip=clip
    )
    assert isinstance(got, float)
    assert got == pytest.approx(expected, abs=1e-9)
    if not clip:  # without clipping both conventions are (pi - h)^2
        assert got == pytest.approx((pi - h) ** 2, abs=1e-12)


def test_two_conventions_on_a_hand_made_case():
    """Two Psi groups; unclipped both conventions give the same value, clipped they differ."""
    h = torch.tensor([0.2, 0.2, 0.9, 0.9], dtype=torch.float64)
    eu = torch.tensor([0.01, 0.01, 0.04, 0.04], dtype=torch.float64)
    eta = torch.tensor([0.1, 0.5, 0.6, 0.6], dtype=torch.float64)
    # groups: pi = 0.3 (error (0.1)^2 = 0.01), pi = 0.6 (error (0.3)^2 = 0.09)
    for trust in ("reported", "draws"):
        got = illustrative_true_epistemic_calibration_error(h, eu, eta, trust=trust, clip=False)
        assert got == pytest.approx((0.01 * 2 + 0.09 * 2) / 4, abs=1e-12)
    values = {}
    for trust in ("reported", "draws"):
        terms = []
        for hi, ei, pi in ((0.2, 0.01, 0.3), (0.9, 0.04, 0.6)):
            m, v = _scipy_moments(hi, ei, True)
            terms.append(abs((pi - m) ** 2 + v - (ei if trust == "reported" else v)))
        values[trust] = float(np.mean(terms))
        got = illustrative_true_epistemic_calibration_error(h, eu, eta, trust=trust, clip=True)
        assert got == pytest.approx(values[trust], abs=1e-9)
    assert abs(values["reported"] - values["draws"]) > 1e-3


def test_psi_groups_on_h_and_eu_not_on_draws():
    """Per-point draws never repeat, so grouping on them is conditioning on x; grouping on
    (h, EU) pools the points that share them."""
    h = torch.tensor([0.4, 0.4, 0.4, 0.4], dtype=torch.float64)
    eu = torch.tensor([0.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    eta = torch.tensor([0.2, 0.6, 0.4, 0.4], dtype=torch.float64)
    assert illustrative_true_epistemic_calibration_error(h, eu, eta) == pytest.approx(0.0)
    g = torch.Generator().manual_seed(0)
    draws = (0.4 + 0.05 * torch.randn(50, 4, generator=g, dtype=torch.float64)).clamp(0, 1)
    on_vectors = true_epistemic_calibration_error(draws, eta, condition_on="psi", binary=True)
    on_x = true_epistemic_calibration_error(draws, eta, condition_on="x", binary=True)
    assert on_vectors == pytest.approx(on_x)
    psi = torch.stack([h, eu], dim=1)
    pooled = true_epistemic_calibration_error(draws, eta, condition_on="psi", psi=psi, binary=True)
    pi = torch.full((4,), 0.4, dtype=torch.float64)
    expected = float((((pi - draws) ** 2).mean(0) - draws.var(0, unbiased=False)).abs().mean())
    assert pooled == pytest.approx(expected, abs=1e-12)


def test_psi_argument_is_validated():
    p = torch.tensor([[0.2, 0.8], [0.4, 0.6]], dtype=torch.float64)
    eta = torch.tensor([0.3, 0.5])
    with pytest.raises(ValueError, match="psi"):
        true_epistemic_calibration_error(p, eta, condition_on="x", psi=[[0.1], [0.2]], binary=True)
    with pytest.raises(ValueError, match="psi"):
        true_epistemic_calibration_error(p, eta, condition_on="psi", psi=[[0.1]], binary=True)
    with pytest.raises(ValueError, match="trust"):
        illustrative_true_epistemic_calibration_error([0.2], [0.1], [0.3], trust="variance")
    with pytest.raises(ValueError, match="positive_probs"):
        illustrative_true_epistemic_calibration_error([1.2], [0.1], [0.3])
    with pytest.raises(ValueError, match="epistemic_uncertainty"):
        illustrative_true_epistemic_calibration_error([0.2], [-0.1], [0.3])
