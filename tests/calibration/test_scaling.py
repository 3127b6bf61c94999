"""Tests for bensemble.calibration.scaling: exact optima, boundaries, validation, state."""

from __future__ import annotations

import io
import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy.optimize import minimize, minimize_scalar
from torch import nn

from bensemble.calibration import (
    CalibrationFitError,
    MatrixScaling,
    TemperatureScaling,
    VectorScaling,
    fit_temperature,
)
from bensemble.metrics import expected_calibration_error as _ece


# ----------------------------------------------------------------------------- data and references
def _tempered_case(n: int, k: int, true_temp: float, seed: int):
    """Labels drawn from softmax(latent); logits = latent * true_temp, so T* ~ true_temp."""
    gen = torch.Generator().manual_seed(seed)
    latent = torch.randn(n, k, generator=gen, dtype=torch.float64)
    labels = torch.multinomial(latent.softmax(-1), 1, generator=gen).squeeze(1)
    return latent * true_temp, labels


def _synthetic_logits_guide(n, generator):
    """The practitioner's guide's generator (seed 002): 5 classes, logits inflated 3x."""
    latent = torch.randn(n, 5, generator=generator, dtype=torch.float64)
    labels = torch.multinomial(latent.softmax(-1), 1, generator=generator).squeeze(1)
    return 3 * latent, labels


def _reference_numpy_nll(logits, labels) -> float:
    """Mean NLL of softmax(logits) in float64 numpy (max-shifted log-sum-exp)."""
    z = np.asarray(logits, dtype=np.float64)
    y = np.asarray(labels)
    m = z.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(z - m).sum(axis=1))
    return float(np.mean(lse - z[np.arange(len(y)), y]))


def _reference_scipy_temperature(logits, labels) -> tuple[float, float]:
    """scipy's bounded search on log T over [-4, 4], float64 NLL, tight xatol."""
    z = np.asarray(logits, dtype=np.float64)
    y = np.asarray(labels)
    result = minimize_scalar(
        lambda log_t: _reference_numpy_nll(z / math.exp(log_t), y),
        bounds=(-4.0, 4.0),
        method="bounded",
        options={"xatol": 1e-12, "maxiter": 2000},
    )
    assert result.success
    return math.exp(result.x), float(result.fun)


def _reference_bensemble02_temperature(logits, labels, init_temp=1.5) -> float:
    """bensemble 0.2's fit: LBFGS on T itself, lr 0.01, 50 iterations, no line search."""
    temperature = nn.Parameter(torch.full((1,), init_temp, dtype=logits.dtype))
    optimizer = torch.optim.LBFGS([temperature], lr=0.01, max_iter=50)

    def closure():
        optimizer.zero_grad()
        loss = F.cross_entropy(logits / temperature, labels)
        loss.backward()
        return loss

    optimizer.step(closure)
    return temperature.item()


def _affine_case(n=600, k=4, seed=3):
    """Class-wise miscalibrated logits: per-class scales and shifts applied to a latent."""
    gen = torch.Generator().manual_seed(seed)
    latent = torch.randn(n, k, generator=gen, dtype=torch.float64)
    labels = torch.multinomial(latent.softmax(-1), 1, generator=gen).squeeze(1)
    scale = torch.tensor([3.0, 1.0, 0.5, 2.0], dtype=torch.float64)[:k]
    shift = torch.tensor([0.5, 0.0, -0.3, 0.2], dtype=torch.float64)[:k]
    return latent * scale + shift, labels


def _reference_scipy_affine(logits, labels, kind: str, off_diagonal_l2: float = 0.0) -> float:
    """Minimum of the vector / matrix scaling objective by scipy L-BFGS-B (numpy gradient)."""
    z = np.asarray(logits, dtype=np.float64)
    y = np.asarray(labels)
    n, k = z.shape
    onehot = np.eye(k)[y]
    off = 1.0 - np.eye(k)

    def unpack(x):
        if kind == "vector":
            return x[:k], x[k:]
        return x[: k * k].reshape(k, k), x[k * k :]

    def objective(x):
        w, b = unpack(x)
        s = z * w + b if kind == "vector" else z @ w.T + b
        s = s - s.max(axis=1, keepdims=True)
        log_p = s - np.log(np.exp(s).sum(axis=1, keepdims=True))
        loss = -np.mean(np.sum(onehot * log_p, axis=1))
        diff = (np.exp(log_p) - onehot) / n
        grad_w = (diff * z).sum(0) if kind == "vector" else diff.T @ z
        if kind == "matrix" and off_diagonal_l2 > 0:
            loss += off_diagonal_l2 * np.sum((w * off) ** 2)
            grad_w = grad_w + 2.0 * off_diagonal_l2 * w * off
        return loss, np.concatenate([grad_w.ravel(), diff.sum(0)])

    x0 = np.concatenate(
        [np.ones(k), np.zeros(k)] if kind == "vector" else [np.eye(k).ravel(), np.zeros(k)]
    )
    result = minimize(
        objective,
        x0,
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": 20000, "ftol": 1e-15, "gtol": 1e-12},
    )
    return float(result.fun)


#: Relative error of a temperature T in [e^-4, e^4] stored as a float32 log and exponentiated in
#: float32: 2**-24 |log T| (rounding log T) + 2**-23 (exp, within one ulp).
_STORED = 2**-24 * (4 + 2)


# -------------------------------------------------------------------------- temperature: optimum
@pytest.mark.parametrize("true_temp", [0.5, 3.0, 10.0], ids=["T=0.5", "T=3", "T=10"])
def test_temperature_matches_scipy_optimum(true_temp):
    logits, labels = _tempered_case(3000, 6, true_temp, seed=int(true_temp * 10))
    scaler = TemperatureScaling().fit(logits, labels)
    t_ref, nll_ref = _reference_scipy_temperature(logits, labels)
    t_ours = scaler.temperature_
    nll_ours = _reference_numpy_nll(logits / t_ours, labels)
    assert abs(t_ours - t_ref) <= 1e-3 * t_ref
    assert abs(nll_ours - nll_ref) <= 1e-8
    assert nll_ours <= nll_ref + 1e-12  # never worse than the scipy optimum
    assert abs(scaler.nll_ - nll_ours) <= 1e-12  # the reported NLL is the NLL at the returned T
    assert scaler.converged_ and scaler.solver_ == "newton" and 1 <= scaler.n_iter_ <= 20
    assert abs(t_ours - true_temp) <= 0.15 * true_temp  # and near the generating temperature


def test_temperature_gradient_vanishes_at_fit():
    """The NLL derivative in log T (by autograd, float64) is zero at the fitted float64 T."""
    logits, labels = _tempered_case(2000, 7, 2.0, seed=11)
    t64 = fit_temperature(logits, labels)
    log_t = torch.tensor(math.log(t64), dtype=torch.float64, requires_grad=True)
    F.cross_entropy(logits / log_t.exp(), labels).backward()
    assert abs(log_t.grad.item()) <= 1e-10


def test_bensemble02_recipe_stops_short_and_ours_does_not():
    generator = torch.Generator().manual_seed(0)
    logits, labels = _synthetic_logits_guide(2000, generator)
    t_ref, nll_ref = _reference_scipy_temperature(logits, labels)
    t_old = _reference_bensemble02_temperature(logits, labels)
    t_ours = TemperatureScaling().fit(logits, labels).temperature_
    assert abs(t_old - t_ref) > 0.5  # it stops near 1.7 where the optimum is ~3.0
    assert _reference_numpy_nll(logits / t_old, labels) - nll_ref > 1e-3
    assert abs(t_ours - t_ref) <= 1e-6 * t_ref
    assert abs(_reference_numpy_nll(logits / t_ours, labels) - nll_ref) <= 1e-10


def test_guide_temperature_example():
    """Seed 002's example: logits inflated 3x, 2000 calibration and 4000 test draws."""
    generator = torch.Generator().manual_seed(0)
    cal_logits, cal_labels = _synthetic_logits_guide(2000, generator)
    test_logits, test_labels = _synthetic_logits_guide(4000, generator)
    temperature = fit_temperature(cal_logits, cal_labels)
    assert abs(temperature - 3.0) <= 0.3

    # The guide's own scipy helper (default xatol) agrees to its precision.
    def objective(log_t):
        return F.cross_entropy(cal_logits / np.exp(log_t), cal_labels).item()

    guide = math.exp(minimize_scalar(objective, bounds=(-4, 4), method="bounded").x)
    assert abs(temperature - guide) <= 1e-4 * guide

    scaled = TemperatureScaling().fit(cal_logits, cal_labels)(test_logits)
    before, after = test_logits.softmax(-1), scaled.softmax(-1)
    assert F.cross_entropy(scaled, test_labels) < F.cross_entropy(test_logits, test_labels) - 0.3
    assert _ece(after, test_labels) < 0.5 * _ece(before, test_labels)
    assert torch.equal(before.argmax(-1), after.argmax(-1))


def test_fallback_search_reaches_the_same_optimum():
    logits, labels = _tempered_case(1500, 5, 4.0, seed=5)
    newton = TemperatureScaling().fit(logits, labels)
    bounded = TemperatureScaling().fit(logits, labels, max_iter=1)  # Newton cannot finish
    assert bounded.solver_ == "bounded" and bounded.converged_
    t_n, t_b = newton.temperature_, bounded.temperature_
    assert abs(t_n - t_b) <= 1e-6 * t_n
    assert abs(newton.nll_ - bounded.nll_) <= 1e-12


def test_fit_is_deterministic_and_does_not_warm_start():
    logits_a, labels_a = _tempered_case(1000, 4, 2.0, seed=1)
    logits_b, labels_b = _tempered_case(1000, 4, 0.7, seed=2)
    scaler = TemperatureScaling()
    first = scaler.fit(logits_a, labels_a).temperature_
    assert scaler.fit(logits_a, labels_a).temperature_ == first
    scaler.fit(logits_b, labels_b)
    assert scaler.fit(logits_a, labels_a).temperature_ == first
    t64 = fit_temperature(logits_a, labels_a)  # the float64 optimum the parameter holds
    assert abs(t64 - first) <= 2**-24 * (abs(math.log(t64)) + 2) * t64


@pytest.mark.parametrize(
    "dtype,kind", [(torch.float32, "tensor"), (torch.float64, "tensor"), (None, "numpy")]
)
def test_fit_accepts_arrays_and_never_modifies_inputs(dtype, kind):
    logits, labels = _tempered_case(800, 5, 2.0, seed=4)
    if kind == "numpy":
        logits, labels = logits.numpy().copy(), labels.numpy().copy()
        kept = logits.copy()
    else:
        logits = logits.to(dtype)
        kept = logits.clone()
    t = TemperatureScaling().fit(logits, labels).temperature_
    if kind == "numpy":
        np.testing.assert_array_equal(logits, kept)
    else:
        assert torch.equal(logits, kept)
    t64 = fit_temperature(torch.as_tensor(kept).double(), torch.as_tensor(labels))
    # the same values in float64: the same optimum, stored in the float32 parameter
    assert abs(t - t64) <= 2**-24 * (abs(math.log(t64)) + 2) * t64


# ------------------------------------------------------------------------- temperature: boundary
def test_separable_data_raises_fit_error_on_request():
    logits, labels = _tempered_case(500, 4, 1.0, seed=9)
    labels = logits.argmax(-1)  # every label is the top class: T -> 0 is optimal
    with pytest.raises(CalibrationFitError, match="separable"):
        TemperatureScaling(on_boundary="raise").fit(logits, labels)
    with pytest.raises(CalibrationFitError):
        fit_temperature(logits, labels, on_boundary="raise")
    with pytest.warns(RuntimeWarning, match="separable"):
        scaler = TemperatureScaling().fit(logits, labels)  # the default warns and clamps
    assert scaler.temperature_ == pytest.approx(math.exp(-4.0))
    assert not scaler.converged_


def test_anti_informative_logits_raise_fit_error():
    logits, _ = _tempered_case(500, 4, 1.0, seed=9)
    labels = logits.argmin(-1)  # the label always has the lowest logit: T -> inf is optimal
    with pytest.raises(CalibrationFitError, match="T -> inf"):
        TemperatureScaling(on_boundary="raise").fit(logits, labels)
    with pytest.warns(RuntimeWarning, match="T -> inf"):
        t = TemperatureScaling().fit(logits, labels).temperature_
    assert t == pytest.approx(math.exp(4.0), rel=1e-6)


def test_constant_rows_raise_fit_error():
    logits = torch.ones(50, 3) * torch.arange(50.0).unsqueeze(1)
    labels = torch.arange(50) % 3
    with pytest.raises(CalibrationFitError, match="constant"):
        TemperatureScaling(on_boundary="raise").fit(logits, labels)


@pytest.mark.parametrize(
    "true_temp,bounds,end", [(3.0, (0.2, 2.0), "T_max"), (0.5, (1.0, 5.0), "T_min")]
)
def test_optimum_outside_bounds_is_reported(true_temp, bounds, end):
    logits, labels = _tempered_case(2000, 5, true_temp, seed=8)
    with pytest.raises(CalibrationFitError, match=end):
        TemperatureScaling(bounds=bounds, on_boundary="raise").fit(logits, labels)
    # the bounded fallback reports it as well
    with pytest.raises(CalibrationFitError, match=end):
        TemperatureScaling(bounds=bounds, on_boundary="raise").fit(logits, labels, max_iter=1)
    with pytest.warns(RuntimeWarning, match=end):
        scaler = TemperatureScaling(bounds=bounds).fit(logits, labels, max_iter=1)
    with pytest.warns(RuntimeWarning):
        scaler = TemperatureScaling(bounds=bounds).fit(logits, labels)
    expected = bounds[1] if end == "T_max" else bounds[0]
    assert scaler.temperature_ == pytest.approx(expected)


def test_fit_error_is_a_runtime_error():
    assert issubclass(CalibrationFitError, RuntimeError)


# -------------------------------------------------------------------------- temperature: forward
@given(
    logits=hnp.arrays(
        np.float32,
        hnp.array_shapes(min_dims=2, max_dims=2, min_side=1, max_side=6),
        elements=st.floats(allow_nan=False, allow_infinity=False, width=32),
    ),
    temperature=st.floats(min_value=1e-37, max_value=1e38),  # float32's normal range
)
def test_temperature_keeps_the_top_class(logits, temperature):
    scaler = TemperatureScaling()
    scaler.temperature = temperature
    z = torch.from_numpy(logits)
    with torch.no_grad():
        scaled = scaler(z)
    assert scaled.dtype == z.dtype and scaled.shape == z.shape
    assert not torch.isnan(scaled).any()
    top = z.argmax(-1, keepdim=True)
    # division by T > 0 is monotone in floating point: the old top class is still a maximum ...
    assert torch.equal(scaled.gather(-1, top).squeeze(-1), scaled.amax(-1))
    # ... and it is the argmax wherever the scaled row has a unique maximum
    unique = (scaled == scaled.amax(-1, keepdim=True)).sum(-1) == 1
    assert torch.equal(scaled.argmax(-1)[unique], top.squeeze(-1)[unique])


def _random_scaler(kind: str, k: int, seed: int) -> nn.Module:
    gen = torch.Generator().manual_seed(seed)
    if kind == "temperature":
        scaler = TemperatureScaling()
        scaler.temperature = float(torch.rand(1, generator=gen)) * 4 + 0.1
        return scaler
    scaler = VectorScaling(k) if kind == "vector" else MatrixScaling(k)
    with torch.no_grad():
        for p in scaler.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return scaler


def _rounding_bound(scaler: nn.Module, z: torch.Tensor) -> torch.Tensor:
    """Elementwise bound on |computed - exact| of one forward pass in z's dtype.

    A dot product of n terms in floating point is off by at most n * eps * sum |terms| (Higham,
    Accuracy and Stability, 3.1, with eps = 2u); the map's terms are |z_k W_jk| and |b_j|.
    """
    eps = torch.finfo(z.dtype).eps
    z64 = z.to(torch.float64).abs()
    if isinstance(scaler, TemperatureScaling):
        t = scaler.temperature_
        return 2 * eps * z64 / t  # T rounded to z's dtype, then one division
    if isinstance(scaler, VectorScaling):
        a, b = scaler.a.double().abs(), scaler.b.double().abs()
        return 2 * eps * (z64 * a + b)
    w, b = scaler.weight.double().abs(), scaler.bias.double().abs()
    return (z.shape[-1] + 1) * eps * (z64 @ w.T + b)


@pytest.mark.parametrize("kind", ["temperature", "vector", "matrix"])
@given(
    m=st.integers(1, 4),
    n=st.integers(1, 5),
    k=st.integers(2, 5),
    seed=st.integers(0, 2**16),
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
def test_member_logits_equal_per_member_forward(kind, m, n, k, seed, dtype):
    scaler = _random_scaler(kind, k, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    member_logits = (torch.randn(m, n, k, generator=gen) * 5).to(dtype)
    with torch.no_grad():
        stacked = scaler(member_logits)
        each = torch.stack([scaler(member_logits[i]) for i in range(m)])
    assert stacked.dtype == dtype and stacked.shape == (m, n, k)
    # both results are within the rounding bound of the exact map (batched and per-member
    # matrix products may sum in different orders), so within twice that of each other
    diff = (stacked.to(torch.float64) - each.to(torch.float64)).abs()
    bound = 2 * _rounding_bound(scaler, member_logits)
    assert bool((diff <= bound).all()), float((diff - bound).max())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_forward_keeps_dtype_and_matches_division(dtype):
    scaler = TemperatureScaling(init_temp=2.5)
    z = torch.randn(20, 4, generator=torch.Generator().manual_seed(0)).to(dtype)
    out = scaler(z)
    assert out.dtype == dtype
    # the applied T (a float32 value, within 2**-24 (log 2.5 + 2) of 2.5) rounded to the dtype,
    # one division, one final rounding: within 3 eps of the float64 quotient
    t = scaler.temperature_
    exact = z.double() / t
    assert abs(t - 2.5) <= 2.5 * 2**-24 * (math.log(2.5) + 2)
    assert bool(((out.double() - exact).abs() <= 3 * torch.finfo(dtype).eps * exact.abs()).all())


def test_forward_is_differentiable_and_accepts_numpy():
    scaler = TemperatureScaling(init_temp=2.0)
    z = torch.randn(10, 3, generator=torch.Generator().manual_seed(0))
    # the temperature is frozen by default (issue 20): the output is a plain tensor ...
    assert not scaler.log_temperature.requires_grad and not scaler(z).requires_grad
    # ... yet differentiable in the input, and in the temperature once the user opts in
    z_grad = z.clone().requires_grad_()
    scaler(z_grad).logsumexp(-1).sum().backward()
    torch.testing.assert_close(z_grad.grad.sum(-1), torch.full((10,), 0.5), rtol=1e-6, atol=1e-6)
    scaler.requires_grad_(True)
    scaler(z).logsumexp(-1).sum().backward()
    assert scaler.log_temperature.grad is not None and scaler.log_temperature.grad.abs() > 0
    exact = z.double() / scaler.temperature_
    diff = (scaler(z.numpy()).double() - exact).abs()
    assert bool((diff <= 2 * torch.finfo(torch.float32).eps * exact.abs()).all())


def test_temperature_property_and_setter():
    scaler = TemperatureScaling(init_temp=1.5)
    assert isinstance(scaler.temperature, torch.Tensor)
    assert scaler.temperature_ == pytest.approx(1.5, rel=_STORED)
    scaler.temperature = 2.0
    assert scaler.temperature_ == pytest.approx(2.0, rel=_STORED)
    # the float32 parameter holds log T to float32 rounding: |dT / T| <= |log T| * 2**-24
    assert abs(scaler.temperature.item() - 2.0) <= 2.0 * math.log(2.0) * 2**-24 * 1.01 + 2**-23
    with pytest.raises(ValueError, match="`temperature`"):
        scaler.temperature = -1.0
    assert "temperature=2" in repr(scaler)


# ----------------------------------------------------------------------------- state round trip
@pytest.mark.parametrize("kind", ["temperature", "vector", "matrix"])
def test_state_dict_and_torch_save_round_trip(kind):
    scaler = _random_scaler(kind, 4, seed=7)
    z = torch.randn(6, 4, generator=torch.Generator().manual_seed(1))
    fresh = {"temperature": TemperatureScaling, "vector": VectorScaling, "matrix": MatrixScaling}
    clone = fresh[kind]() if kind == "temperature" else fresh[kind](4)
    clone.load_state_dict(scaler.state_dict())
    torch.testing.assert_close(clone(z), scaler(z), rtol=0, atol=0)
    buffer = io.BytesIO()
    torch.save(scaler, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    torch.testing.assert_close(loaded(z), scaler(z), rtol=0, atol=0)
    buffer = io.BytesIO()
    torch.save(scaler.state_dict(), buffer)
    buffer.seek(0)
    clone.load_state_dict(torch.load(buffer))  # weights-only load of the state dict
    torch.testing.assert_close(clone(z), scaler(z), rtol=0, atol=0)


def test_loads_a_bensemble02_temperature_state_dict():
    scaler = TemperatureScaling()
    scaler.load_state_dict({"temperature": torch.tensor([2.25])})
    assert scaler.temperature_ == pytest.approx(2.25, rel=_STORED)


# ----------------------------------------------------------------------------- vector / matrix
def test_vector_scaling_matches_scipy_and_beats_identity():
    logits, labels = _affine_case()
    scaler = VectorScaling(num_classes=4).fit(logits, labels)
    reference = _reference_scipy_affine(logits, labels, "vector")
    ours = _reference_numpy_nll(scaler(logits).detach(), labels)
    assert scaler.converged_
    assert abs(ours - reference) <= 1e-6
    assert abs(scaler.nll_ - ours) <= 1e-12
    assert ours < _reference_numpy_nll(logits, labels) - 0.05
    # at least as good as the best single temperature (a special case of vector scaling)
    assert ours <= TemperatureScaling().fit(logits, labels).nll_ + 1e-9


@pytest.mark.parametrize("off_diagonal_l2", [0.0, 0.05])
def test_matrix_scaling_matches_scipy(off_diagonal_l2):
    logits, labels = _affine_case(k=3, seed=4)
    scaler = MatrixScaling(num_classes=3, off_diagonal_l2=off_diagonal_l2).fit(logits, labels)
    reference = _reference_scipy_affine(logits, labels, "matrix", off_diagonal_l2)
    weight = scaler.weight.detach()
    off = weight - torch.diag(torch.diagonal(weight))
    objective = scaler.nll_ + off_diagonal_l2 * float((off**2).sum())
    assert scaler.converged_
    assert abs(objective - reference) <= 1e-6
    assert abs(scaler.nll_ - _reference_numpy_nll(scaler(logits).detach(), labels)) <= 1e-12
    assert scaler.nll_ < _reference_numpy_nll(logits, labels) - 0.05
    if off_diagonal_l2 == 0.0:  # a superset of vector scaling
        vector = VectorScaling(num_classes=3).fit(logits, labels)
        assert scaler.nll_ <= vector.nll_ + 1e-9


@pytest.mark.parametrize("cls", [VectorScaling, MatrixScaling])
def test_affine_fit_is_deterministic_and_keeps_inputs(cls):
    logits, labels = _affine_case(k=4)
    kept = logits.clone()
    scaler = cls(num_classes=4)
    first = [p.detach().clone() for p in scaler.fit(logits, labels).parameters()]
    scaler.fit(logits * 2, labels)
    second = [p.detach().clone() for p in scaler.fit(logits, labels).parameters()]
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    assert torch.equal(logits, kept)


def test_vector_scaling_on_float32_numpy_input():
    logits, labels = _affine_case(k=4)
    a = VectorScaling(4).fit(logits.float().numpy(), labels.numpy())
    b = VectorScaling(4).fit(logits.float(), labels)
    torch.testing.assert_close(a.a, b.a, rtol=0, atol=0)
    out = a(logits.float())
    assert out.dtype == torch.float32 and out.shape == logits.shape


def test_vector_scaling_separable_data_warns_not_converged():
    logits, _ = _affine_case(k=4)
    labels = logits.argmax(-1)
    with pytest.warns(RuntimeWarning, match="separable"):
        scaler = VectorScaling(4).fit(logits, labels, max_iter=20)
    assert not scaler.converged_


# ----------------------------------------------------------------------------- validation
_LOGITS, _LABELS = _tempered_case(20, 3, 1.0, seed=0)
_NAN_LOGITS = _LOGITS.clone()
_NAN_LOGITS[3, 1] = float("nan")


@pytest.mark.parametrize(
    "logits,labels,kwargs,arg",
    [
        pytest.param(_LOGITS[:, 0], _LABELS, {}, "logits", id="logits-1d"),
        pytest.param(_LOGITS[None], _LABELS, {}, "logits", id="logits-3d"),
        pytest.param(_NAN_LOGITS, _LABELS, {}, "logits", id="logits-nan"),
        pytest.param(_LOGITS[:, :1], _LABELS * 0, {}, "logits", id="one-class"),
        pytest.param(_LOGITS, _LABELS.double(), {}, "labels", id="float-labels"),
        pytest.param(_LOGITS, _LABELS + 3, {}, "labels", id="labels-out-of-range"),
        pytest.param(_LOGITS, -_LABELS - 1, {}, "labels", id="labels-negative"),
        pytest.param(_LOGITS, _LABELS[:-1], {}, "labels", id="length-mismatch"),
        pytest.param(_LOGITS, _LABELS[:, None], {}, "labels", id="labels-2d"),
        pytest.param(_LOGITS, _LABELS, {"max_iter": 0}, "max_iter", id="max-iter"),
    ],
)
@pytest.mark.parametrize("fit", ["temperature", "vector", "matrix", "functional"])
def test_fit_rejects_bad_input(fit, logits, labels, kwargs, arg):
    if fit == "functional" and "max_iter" in kwargs:
        call = lambda: fit_temperature(logits, labels, **kwargs)  # noqa: E731
    elif fit == "functional":
        call = lambda: fit_temperature(logits, labels)  # noqa: E731
    else:
        k = logits.shape[-1] if logits.ndim == 2 and logits.shape[-1] >= 2 else 3
        scaler = {
            "temperature": TemperatureScaling(),
            "vector": VectorScaling(k),
            "matrix": MatrixScaling(k),
        }[fit]
        call = lambda: scaler.fit(logits, labels, **kwargs)  # noqa: E731
    with pytest.raises(ValueError, match=f"`{arg}`"):
        call()


@pytest.mark.parametrize(
    "make,arg",
    [
        pytest.param(lambda: TemperatureScaling(init_temp=0.0), "init_temp", id="init-zero"),
        pytest.param(lambda: TemperatureScaling(init_temp=-1.0), "init_temp", id="init-neg"),
        pytest.param(lambda: TemperatureScaling(init_temp=math.nan), "init_temp", id="init-nan"),
        pytest.param(lambda: fit_temperature(_LOGITS, _LABELS, init_temp=0), "init_temp", id="fn"),
        pytest.param(lambda: TemperatureScaling(bounds=(2.0, 1.0)), "bounds", id="bounds-order"),
        pytest.param(lambda: TemperatureScaling(bounds=(0.0, 1.0)), "bounds", id="bounds-zero"),
        pytest.param(lambda: TemperatureScaling(on_boundary="clip"), "on_boundary", id="option"),
        pytest.param(lambda: VectorScaling(num_classes=1), "num_classes", id="vector-k1"),
        pytest.param(lambda: VectorScaling(num_classes=2.5), "num_classes", id="vector-float"),
        pytest.param(lambda: MatrixScaling(3, off_diagonal_l2=-1.0), "off_diagonal_l2", id="l2"),
    ],
)
def test_constructor_rejects_bad_hyperparameters(make, arg):
    with pytest.raises(ValueError, match=f"`{arg}`"):
        make()


@pytest.mark.parametrize("cls", [VectorScaling, MatrixScaling])
def test_num_classes_mismatch_names_logits(cls):
    scaler = cls(num_classes=4)
    with pytest.raises(ValueError, match=r"`logits`.*num_classes=4"):
        scaler.fit(_LOGITS, _LABELS)
    with pytest.raises(ValueError, match=r"`logits`.*num_classes=4"):
        scaler(_LOGITS)
    with pytest.raises(ValueError, match="`logits`"):
        scaler(torch.zeros(2, 3, 4, 4))


def test_forward_rejects_wrong_rank():
    with pytest.raises(ValueError, match="`logits`"):
        TemperatureScaling()(torch.zeros(5))


# ----------------------------------------------------------------------------- devices
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fit_on_cuda_matches_cpu():
    logits, labels = _tempered_case(2000, 5, 2.5, seed=6)
    cpu = TemperatureScaling().fit(logits, labels).temperature_
    gpu = TemperatureScaling().fit(logits.cuda(), labels.cuda()).temperature_
    assert abs(cpu - gpu) <= 2 * _STORED * cpu  # equal optima, each stored in float32
    vector = VectorScaling(5).fit(logits.cuda(), labels.cuda())
    assert vector(logits.cuda()).device.type == "cuda"


def test_module_is_usable_under_no_grad():
    logits, labels = _affine_case(k=4)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")
        scaler = VectorScaling(4).fit(logits, labels)
        TemperatureScaling().fit(logits, labels)
    assert scaler.converged_


@pytest.mark.parametrize("cls", [VectorScaling, MatrixScaling])
def test_affine_forward_is_the_closed_form_map(cls):
    """``z * a + b`` and ``z W^T + b`` with set, asymmetric parameters (a transposed ``W``
    fits as well as the right one, so only a closed form tells them apart)."""
    g = torch.Generator().manual_seed(0)
    z = torch.randn(6, 3, generator=g)
    scaler = cls(num_classes=3)
    bias = torch.tensor([0.5, -1.0, 2.0])
    if cls is MatrixScaling:
        scale = torch.tensor([[1.0, 2.0, 0.0], [0.0, 1.0, -3.0], [0.5, 0.0, 1.0]])
        want = z @ scale.T + bias
        params = {"weight": scale, "bias": bias}
    else:
        scale = torch.tensor([2.0, 0.5, -1.0])
        want = z * scale + bias
        params = {"a": scale, "b": bias}
    scaler.load_state_dict({**scaler.state_dict(), **params})
    torch.testing.assert_close(scaler(z), want, rtol=1e-6, atol=1e-6)
