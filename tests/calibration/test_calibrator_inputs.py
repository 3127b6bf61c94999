"""The calibrators' inputs and states, beyond the common contract (issue 20 item 3, issue 24).

The scalers' issue-20 behaviour (plain tensors at inference, frozen parameters, the ``*_``
views); the calibrators of probabilities' input forms (``[N]`` binary, ``from_logits``) and
refusals; hyper-parameter and state checks.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bensemble.calibration import (
    BetaCalibration,
    DirichletCalibration,
    EpistemicRecalibrator,
    HistogramBinningCalibration,
    IsotonicCalibration,
    MatrixScaling,
    TemperatureScaling,
    VectorScaling,
)

F64 = torch.float64
K = 3


def _logits(n=120, seed=12):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % K
    z = torch.randn(n, K, generator=g, dtype=F64) + 2.0 * torch.nn.functional.one_hot(y, K)
    return z, y


def _probs(n=120, seed=12):
    z, y = _logits(n, seed)
    return (1.5 * z).softmax(-1), y


# ----------------------------------------------------------------------- the scalers (issue 20)
def test_issue_20_snippets_work():
    z, y = _logits()
    ts = TemperatureScaling().fit(z, y)
    assert ts(z).softmax(-1).numpy().shape == (120, K)  # raised before: a grad-tracking tensor
    assert ts.temperature.grad_fn is None and not ts.temperature.requires_grad
    assert type(ts.temperature_) is float and ts.temperature_ == ts.temperature.item()
    vs = VectorScaling(K).fit(z.numpy(), y.numpy())
    np.testing.assert_array_equal(vs.a_, vs.a.detach().double().numpy())
    np.testing.assert_array_equal(vs.b_, vs.b.detach().double().numpy())
    ms = MatrixScaling(K).fit(z, y)
    assert ms.weight_.shape == (K, K) and ms.bias_.shape == (K,) and ms.weight_.dtype == np.float64
    torch.testing.assert_close(ms.transform(z), ms(z), rtol=0, atol=0)
    torch.testing.assert_close(ms.predict_proba(z), ms(z).softmax(-1), rtol=0, atol=0)


@pytest.mark.parametrize("make", [TemperatureScaling, lambda: VectorScaling(K)])
def test_scaler_parameters_are_frozen_until_the_user_opts_in(make):
    scaler = make()
    assert not any(p.requires_grad for p in scaler.parameters())
    z, y = _logits()
    scaler.fit(z, y)
    assert not any(p.requires_grad for p in scaler.parameters())
    scaler.requires_grad_(True)
    torch.nn.functional.cross_entropy(scaler(z.float()), y).backward()
    assert all(p.grad is not None for p in scaler.parameters())


# --------------------------------------------------------------------- the probability inputs
_PROB_CALIBRATORS = [
    IsotonicCalibration,
    lambda **kw: HistogramBinningCalibration(8, **kw),
    BetaCalibration,
    lambda **kw: DirichletCalibration(1e-2, 1e-2, **kw),
]


@pytest.mark.parametrize("make", _PROB_CALIBRATORS)
def test_positive_class_vector_is_the_two_column_form(make):
    g = torch.Generator().manual_seed(9)
    p1 = torch.rand(300, generator=g, dtype=F64)
    y = (torch.rand(300, generator=g, dtype=F64) < p1**2).long()
    two = torch.stack([1 - p1, p1], 1)
    a, b = make().fit(p1, y), make().fit(two, y)
    # log1p(-p1) and log(1 - p1) differ in the last bits; the iterative fits (stopped at a
    # gradient of 1e-6 to 1e-10) may carry that to ~1e-7
    torch.testing.assert_close(a.transform(p1), b.transform(two)[:, 1], rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(a.transform(two), b.transform(two), rtol=1e-6, atol=1e-7)
    assert a.transform(p1).shape == (300,)


@pytest.mark.parametrize("make", _PROB_CALIBRATORS)
def test_from_logits_is_the_softmax_of_the_logits(make):
    z, y = _logits()
    a = make(from_logits=True).fit(z, y).transform(z)
    b = make().fit(z.softmax(-1), y).transform(z.softmax(-1))
    # log_softmax(z) and log(softmax(z)) differ in the last bits; the iterative fits (stopped at
    # a gradient of 1e-6 to 1e-10) carry that to ~1e-7 in the calibrated probabilities
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("make", _PROB_CALIBRATORS)
@pytest.mark.parametrize(
    "bad, message",
    [
        pytest.param(lambda p: p[:, :2], "classes", id="other-K"),
        pytest.param(lambda p: p * 2, "summing to 1|probabilities", id="not-probs"),
        pytest.param(lambda p: p[None], "shape", id="3-D"),
        pytest.param(lambda p: -p, r"\[0, 1\]", id="negative"),
    ],
)
def test_transform_refuses_bad_probabilities(make, bad, message):
    p, y = _probs()
    est = make().fit(p, y)
    with pytest.raises(ValueError, match=message) as info:
        est.transform(bad(p))
    assert "`probs`" in str(info.value)


@pytest.mark.parametrize(
    "make, arg",
    [
        (lambda: HistogramBinningCalibration(0), "n_bins"),
        (lambda: HistogramBinningCalibration(2.5), "n_bins"),
        (lambda: IsotonicCalibration(from_logits="yes"), "from_logits"),
        (lambda: BetaCalibration(max_iter=0), "max_iter"),
        (lambda: DirichletCalibration(-1.0), "off_diagonal_l2"),
        (lambda: DirichletCalibration(0.0, float("nan")), "intercept_l2"),
        (lambda: EpistemicRecalibrator(spread_bounds=(2.0, 1.0)), "spread_bounds"),
        (lambda: EpistemicRecalibrator(on_boundary="ignore"), "on_boundary"),
    ],
)
def test_constructors_refuse_bad_hyperparameters(make, arg):
    with pytest.raises(ValueError, match=f"`{arg}`"):
        make()


@pytest.mark.parametrize(
    "make, key, value, expectation",
    [
        (lambda: HistogramBinningCalibration(8), "bin_values", lambda v: v + 2, r"\[0, 1\]"),
        (IsotonicCalibration, "thresholds_x", lambda v: v.flip(1), "non-decreasing"),
        (BetaCalibration, "coef", lambda v: -v.abs() - 1, "a, b >= 0"),
    ],
)
def test_states_that_break_the_maps_invariants_are_refused(make, key, value, expectation):
    p, y = _probs()
    est = make().fit(p, y)
    state = est.state_dict()
    state[key] = value(state[key])
    with pytest.raises(ValueError, match=expectation):
        make().load_state_dict(state)


def test_an_unfitted_state_makes_an_unfitted_calibrator():
    p, y = _probs()
    est = IsotonicCalibration().fit(p, y)
    est.load_state_dict(IsotonicCalibration().state_dict())
    assert not est.is_fitted_
    with pytest.raises(ValueError, match="not fitted"):
        est.transform(p)
