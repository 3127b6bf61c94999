"""NLL, CRPS and sharpness of regression members: closed forms, peers, kernels, inputs."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from scipy import integrate, stats

from bensemble.regression import (
    crps,
    crps_per_sample,
    regression_negative_log_likelihood,
    sharpness,
    split_member_predictions,
)
from bensemble.regression._inputs import as_member_predictions
from bensemble.regression.scoring import (
    _crps_compute,
    _crps_update,
    _nll_compute,
    _nll_update,
    merge_states,
)
from bensemble.uncertainty import decompose_regression_uncertainty

sys.path.insert(0, str(Path(__file__).resolve().parent))
from regression_cases import gaussian_members, point_members  # noqa: E402


def _reference_scipy_mixture_nll(p: torch.Tensor, y: torch.Tensor) -> float:
    mu, var = p[..., 0].numpy(), p[..., 1].numpy()
    dens = stats.norm.pdf(y.numpy()[None], mu, np.sqrt(var)).mean(axis=0)
    return float(-np.log(dens).mean())


def _reference_quadrature_crps(p: torch.Tensor, y: torch.Tensor, i: int) -> float:
    mu, sd = p[:, i, 0].numpy(), np.sqrt(p[:, i, 1].numpy())
    t0 = float(y[i])

    def integrand(t: float) -> float:
        return (stats.norm.cdf(t, mu, sd).mean() - (t >= t0)) ** 2

    left = integrate.quad(integrand, -60, t0, limit=200, epsabs=1e-13)[0]
    return left + integrate.quad(integrand, t0, 60, limit=200, epsabs=1e-13)[0]


def test_one_gaussian_nll_and_crps_match_uncertainty_toolbox_and_properscoring():
    uct = pytest.importorskip("uncertainty_toolbox")
    ps = pytest.importorskip("properscoring")
    p, y = gaussian_members(1, 400, seed=3)
    mu, sd = p[0, :, 0].numpy(), p[0, :, 1].sqrt().numpy()
    assert regression_negative_log_likelihood(p, y) == pytest.approx(
        uct.nll_gaussian(mu, sd, y.numpy()), abs=1e-10
    )
    assert crps(p, y) == pytest.approx(uct.crps_gaussian(mu, sd, y.numpy()), abs=1e-10)
    torch.testing.assert_close(
        crps_per_sample(p, y),
        torch.from_numpy(ps.crps_gaussian(y.numpy(), mu, sd)),
        rtol=0,
        atol=1e-12,
    )
    assert sharpness(p) == pytest.approx(uct.sharpness(sd), abs=1e-12)


def test_mixture_nll_is_the_log_of_the_mean_density():
    p, y = gaussian_members(5, 300, seed=4)
    assert regression_negative_log_likelihood(p, y) == pytest.approx(
        _reference_scipy_mixture_nll(p, y), rel=1e-12
    )


def test_gaussian_predictive_is_the_moment_matched_gaussian():
    p, y = gaussian_members(4, 200, seed=5)
    total, _, _ = decompose_regression_uncertainty(p[..., 0], p[..., 1])
    single = torch.stack([p[..., 0].mean(0), total], -1)[None]
    for metric in (regression_negative_log_likelihood, crps):
        assert metric(p, y, predictive="gaussian") == pytest.approx(metric(single, y), rel=1e-12)


def test_mixture_crps_matches_numerical_integration():
    p, y = gaussian_members(4, 12, seed=6)
    values = crps_per_sample(p, y)
    for i in range(12):
        assert float(values[i]) == pytest.approx(_reference_quadrature_crps(p, y, i), abs=1e-8)


def test_point_crps_is_properscoring_crps_ensemble():
    ps = pytest.importorskip("properscoring")
    x, y = point_members(7, 300, seed=7)
    reference = ps.crps_ensemble(y.numpy(), x.numpy().T)
    ours = crps_per_sample(x, y)
    torch.testing.assert_close(ours, torch.from_numpy(reference), rtol=0, atol=1e-12)


def test_mixture_crps_tends_to_the_energy_form_as_variances_vanish():
    x, y = point_members(5, 50, seed=8)
    tiny = torch.stack([x, torch.full_like(x, 1e-14)], -1)
    torch.testing.assert_close(crps_per_sample(tiny, y), crps_per_sample(x, y), rtol=0, atol=1e-6)


def test_crps_of_an_atom_is_the_absolute_error_and_nll_refuses_it():
    p = torch.tensor([[[1.0, 0.0], [2.0, 0.0]]], dtype=torch.float64)
    y = torch.tensor([3.0, 2.0], dtype=torch.float64)
    assert crps_per_sample(p, y).tolist() == [2.0, 0.0]
    with pytest.raises(ValueError, match="`member_preds`.*variances > 0"):
        regression_negative_log_likelihood(p, y)
    with pytest.raises(ValueError, match="point members"):
        regression_negative_log_likelihood(p[..., 0], y)


@pytest.mark.parametrize("shape", [(3, 60, 2), (4, 60)], ids=["gaussian", "points"])
def test_streamed_kernels_equal_the_one_shot_value(shape):
    g = torch.Generator().manual_seed(9)
    raw = torch.randn(*shape, generator=g, dtype=torch.float64)
    if len(shape) == 3:
        raw[..., 1] = raw[..., 1].abs() + 0.1
    y = torch.randn(shape[1], generator=g, dtype=torch.float64)
    members = as_member_predictions(raw, "test")
    cuts = [0, 7, 8, 31, 60]
    kernels = [(_crps_update, _crps_compute, crps)]
    if len(shape) == 3:
        kernels.append((_nll_update, _nll_compute, regression_negative_log_likelihood))
    for update, compute, one_shot in kernels:
        state = update(members.rows(0, 7), y[0:7])
        for a, b in zip(cuts[1:-1], cuts[2:]):
            state = merge_states(state, update(members.rows(a, b), y[a:b]))
        assert compute(state) == pytest.approx(one_shot(raw, y), rel=1e-12)


@given(perm_seed=st.integers(0, 1000), shift=st.floats(-50, 50))
def test_member_order_and_location_equivariance(perm_seed, shift):
    p, y = gaussian_members(5, 40, seed=10)
    perm = torch.randperm(5, generator=torch.Generator().manual_seed(perm_seed))
    moved = p.clone()
    moved[..., 0] += shift
    for metric in (regression_negative_log_likelihood, crps, sharpness):
        args = (p[perm],) if metric is sharpness else (p[perm], y)
        base = (p,) if metric is sharpness else (p, y)
        assert metric(*args) == pytest.approx(metric(*base), rel=1e-12)
    assert crps(moved, y + shift) == pytest.approx(crps(p, y), rel=1e-9, abs=1e-9)


def test_split_member_predictions_feeds_the_decomposition():
    x, _ = point_members(4, 10)
    means, variances = split_member_predictions(x)
    assert torch.equal(means, x) and torch.equal(variances, torch.zeros_like(x))
    total, aleatoric, epistemic = decompose_regression_uncertainty(means, variances)
    assert sharpness(x) == pytest.approx(math.sqrt(float(total.mean())), rel=1e-12)
    assert float(aleatoric.abs().max()) == 0.0 and torch.equal(total, epistemic)


def test_outputs_follow_the_input_dtype_and_track_no_gradient():
    p, y = gaussian_members(3, 20)
    leaf = p.float().requires_grad_(True)
    out = crps_per_sample(leaf, y.float())
    assert out.dtype == torch.float32 and not out.requires_grad
    assert crps_per_sample(p.half(), y).dtype == torch.float32
    assert isinstance(crps(leaf, y), float)


BAD = [
    pytest.param(torch.zeros(3, 4, 3), "member_preds", id="last-axis-3"),
    pytest.param(torch.zeros(3), "member_preds", id="1-d"),
    pytest.param(torch.zeros(0, 4, 2), "member_preds", id="no-members"),
    pytest.param(torch.zeros(2, 0), "member_preds", id="no-points"),
    pytest.param(torch.tensor([[[0.0, -1.0]]]), "member_preds", id="negative-variance"),
    pytest.param(torch.tensor([[[float("nan"), 1.0]]]), "member_preds", id="nan"),
    pytest.param(torch.tensor([[[float("inf"), 1.0]]]), "member_preds", id="inf"),
    pytest.param(torch.tensor([[[1e200, 1.0]]]), "member_preds", id="too-large"),
    pytest.param(torch.tensor([[True]]), "member_preds", id="bool"),
]


@pytest.mark.parametrize("preds, name", BAD)
@pytest.mark.parametrize("metric", [crps, regression_negative_log_likelihood, crps_per_sample])
def test_bad_member_predictions_are_value_errors_naming_the_argument(metric, preds, name):
    y = torch.zeros(preds.shape[1] if preds.ndim > 1 else 1)
    with pytest.raises(ValueError, match=f"`{name}`"):
        metric(preds, y)


@pytest.mark.parametrize(
    "labels",
    [torch.zeros(5), torch.zeros(4, 1), torch.tensor([0.0, 0.0, 0.0, float("nan")]), []],
    ids=["length", "2-d", "nan", "empty"],
)
def test_bad_labels_are_value_errors(labels):
    p, _ = gaussian_members(2, 4)
    with pytest.raises(ValueError, match="`labels`"):
        crps(p, labels)


def test_bad_predictive_lists_the_options():
    p, y = gaussian_members(2, 4)
    with pytest.raises(ValueError, match="`predictive` must be one of 'mixture', 'gaussian'"):
        crps(p, y, predictive="normal")


def test_nll_beyond_float64_is_a_value_error():
    p = torch.tensor([[[0.0, 1e-300]]], dtype=torch.float64)
    with pytest.raises(ValueError, match="finite log-likelihood"):
        regression_negative_log_likelihood(p, torch.tensor([1e10], dtype=torch.float64))
