"""One temperature shared by an ensemble's members: ``TemperatureScaling.fit(..., ensemble=True)``.

The fit minimises the NLL of ``mean_m softmax(z_m / T)``; the reference is scipy's bounded search
on ``log T`` of the same objective written in numpy.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.optimize import minimize_scalar
from scipy.special import logsumexp

from bensemble.calibration import (
    DEFAULT_TEMPERATURE_BOUNDS,
    CalibrationFitError,
    TemperatureScaling,
    fit_temperature,
)

T_MIN, T_MAX = DEFAULT_TEMPERATURE_BOUNDS


def _member_case(m=5, n=800, k=6, scale=3.0, spread=1.0, seed=0):
    """Members = a shared latent plus member noise, over-confident by ``scale``."""
    g = torch.Generator().manual_seed(seed)
    latent = torch.randn(n, k, generator=g, dtype=torch.float64)
    labels = torch.multinomial(latent.softmax(-1), 1, generator=g).squeeze(1)
    noise = torch.randn(m, n, k, generator=g, dtype=torch.float64) * spread
    return scale * (latent + noise), labels


def _reference_numpy_ensemble_nll(member_logits, labels, t) -> float:
    z = np.asarray(member_logits, dtype=np.float64) / t
    log_p = z - logsumexp(z, axis=-1, keepdims=True)
    y = np.asarray(labels)
    log_p_y = log_p[:, np.arange(len(y)), y]  # [M, N]
    return float(np.mean(np.log(z.shape[0]) - logsumexp(log_p_y, axis=0)))


def _reference_scipy_ensemble_temperature(member_logits, labels) -> tuple[float, float]:
    grid = np.linspace(-4, 4, 161)
    values = [_reference_numpy_ensemble_nll(member_logits, labels, math.exp(g)) for g in grid]
    best = int(np.argmin(values))
    lo, hi = grid[max(best - 1, 0)], grid[min(best + 1, len(grid) - 1)]
    result = minimize_scalar(
        lambda log_t: _reference_numpy_ensemble_nll(member_logits, labels, math.exp(log_t)),
        bounds=(lo, hi),
        method="bounded",
        options={"xatol": 1e-12, "maxiter": 2000},
    )
    return math.exp(result.x), float(result.fun)


@pytest.mark.parametrize("spread", [0.3, 1.0, 3.0], ids=["close", "diverse", "very-diverse"])
def test_ensemble_fit_matches_scipy(spread):
    logits, labels = _member_case(spread=spread, seed=int(spread * 10))
    scaler = TemperatureScaling().fit(logits, labels, ensemble=True)
    t_ref, nll_ref = _reference_scipy_ensemble_temperature(logits, labels)
    ours = _reference_numpy_ensemble_nll(logits, labels, scaler.temperature_)
    assert abs(scaler.temperature_ - t_ref) <= 1e-5 * t_ref
    assert abs(ours - nll_ref) <= 1e-10 and ours <= nll_ref + 1e-12
    assert abs(scaler.nll_ - ours) <= 1e-12
    assert scaler.converged_ and not scaler.at_boundary_ and scaler.solver_ == "grid"
    t64 = fit_temperature(logits, labels, ensemble=True)  # the float64 optimum
    assert abs(t64 - scaler.temperature_) <= 2**-24 * (abs(math.log(t64)) + 2) * t64


def test_one_member_is_ordinary_temperature_scaling():
    logits, labels = _member_case(m=1)
    a = TemperatureScaling().fit(logits, labels, ensemble=True)
    b = TemperatureScaling().fit(logits[0], labels)
    assert a.temperature_ == b.temperature_ and a.solver_ == "newton"


def test_identical_members_give_the_single_model_temperature():
    logits, labels = _member_case(m=1, seed=3)
    stack = logits.expand(4, -1, -1)
    t_ens = TemperatureScaling().fit(stack, labels, ensemble=True).temperature_
    t_one = TemperatureScaling().fit(logits[0], labels).temperature_
    assert abs(t_ens - t_one) <= 1e-8 * t_one


def test_shared_temperature_beats_the_unscaled_ensemble_and_keeps_inputs():
    logits, labels = _member_case(scale=4.0, seed=5)
    kept = logits.clone()
    scaler = TemperatureScaling().fit(logits.float().numpy(), labels.numpy(), ensemble=True)
    assert torch.equal(logits, kept)
    assert scaler.nll_ < _reference_numpy_ensemble_nll(logits, labels, 1.0) - 0.05
    assert scaler.temperature_ > 1.0  # over-confident members are softened
    # forward applies the one T to every member
    with torch.no_grad():
        scaled = scaler(logits.float())
    assert scaled.shape == logits.shape


def test_constant_members_warn_and_clamp():
    logits = torch.ones(3, 40, 4) * torch.arange(40.0).view(1, 40, 1)
    labels = torch.arange(40) % 4
    with pytest.warns(RuntimeWarning, match="constant"):
        assert TemperatureScaling().fit(
            logits, labels, ensemble=True
        ).temperature_ == pytest.approx(T_MAX, rel=1e-6)
    with pytest.raises(CalibrationFitError, match="constant"):
        TemperatureScaling(on_boundary="raise").fit(logits, labels, ensemble=True)


def test_every_member_right_and_sure_clamps_to_t_min():
    logits, _ = _member_case(spread=0.0, seed=2)
    labels = logits[0].argmax(-1)  # every member ranks the label first
    with pytest.warns(RuntimeWarning, match="T_min"):
        scaler = TemperatureScaling().fit(logits, labels, ensemble=True)
    assert scaler.temperature_ == pytest.approx(T_MIN, rel=1e-6) and scaler.at_boundary_


@pytest.mark.parametrize(
    "call, match",
    [
        pytest.param(
            lambda s: s.fit(torch.zeros(5, 3), torch.zeros(5, dtype=torch.int64), ensemble=True),
            r"`logits`.*\[M, N, K\]",
            id="2-D-with-ensemble",
        ),
        pytest.param(
            lambda s: s.fit(torch.zeros(2, 5, 3), torch.zeros(5, dtype=torch.int64)),
            r"`logits`.*ensemble=True",
            id="3-D-without-ensemble",
        ),
        pytest.param(
            lambda s: s.fit(torch.zeros(2, 5, 3), torch.zeros(4, dtype=torch.int64), ensemble=True),
            "`labels`",
            id="length",
        ),
        pytest.param(
            lambda s: s.fit(torch.zeros(2, 5, 3), torch.zeros(5, dtype=torch.int64), ensemble=1),
            "`ensemble`",
            id="ensemble-not-bool",
        ),
    ],
)
def test_bad_member_inputs_raise(call, match):
    with pytest.raises(ValueError, match=match):
        call(TemperatureScaling())
