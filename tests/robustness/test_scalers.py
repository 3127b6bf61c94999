"""Issue 11 for the post-hoc scalers: validated state (class 3) and conventions (class 6).

Class 3: a scaler never holds a state that turns every scaled logit into NaN. ``load_state_dict``
and the ``temperature`` setter refuse NaN / inf / non-positive temperatures, non-finite affine
parameters and wrong shapes with a ``ValueError`` naming the key.

Class 6: parameters are ordinary float32 module parameters (the fit runs in float64 inside); a
fitted temperature scaler exposes the plain float ``temperature_``; a fit on uninformative logits
(constant or near-identical rows, logits no better than a uniform guess) warns and clamps to the
bound by default, the same way on every call, and raises only with ``on_boundary="raise"``.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from bensemble.calibration import (
    DEFAULT_TEMPERATURE_BOUNDS,
    CalibrationFitError,
    MatrixScaling,
    TemperatureScaling,
    VectorScaling,
    fit_temperature,
)

T_MIN, T_MAX = DEFAULT_TEMPERATURE_BOUNDS


def _tempered(n=400, k=4, temp=2.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    latent = torch.randn(n, k, generator=g, dtype=torch.float64)
    labels = torch.multinomial(latent.softmax(-1), 1, generator=g).squeeze(1)
    return latent * temp, labels


# ================================================================== class 3: validated state
_NAN, _INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    "state,key",
    [
        pytest.param({"log_temperature": torch.tensor([_NAN])}, "log_temperature", id="log-nan"),
        pytest.param({"log_temperature": torch.tensor([_INF])}, "log_temperature", id="log-inf"),
        pytest.param({"log_temperature": torch.tensor([-_INF])}, "log_temperature", id="log-ninf"),
        pytest.param({"log_temperature": torch.tensor([800.0])}, "log_temperature", id="T-inf"),
        pytest.param({"log_temperature": torch.zeros(2)}, "log_temperature", id="log-shape"),
        pytest.param({"log_temperature": torch.zeros(1, 1)}, "log_temperature", id="log-2d"),
        pytest.param({"temperature": torch.tensor([_NAN])}, "temperature", id="legacy-nan"),
        pytest.param({"temperature": torch.tensor([-1.0])}, "temperature", id="legacy-neg"),
        pytest.param({"temperature": torch.tensor([0.0])}, "temperature", id="legacy-zero"),
        pytest.param({"temperature": torch.tensor([_INF])}, "temperature", id="legacy-inf"),
        pytest.param({"temperature": torch.ones(3)}, "temperature", id="legacy-shape"),
    ],
)
def test_temperature_load_state_dict_refuses_bad_state(state, key):
    scaler = TemperatureScaling(init_temp=2.0)
    with pytest.raises(ValueError, match=f"`{key}`"):
        scaler.load_state_dict(state)
    assert scaler.temperature_ == pytest.approx(2.0)  # the module is left as it was
    z = torch.randn(3, 4)
    assert torch.isfinite(scaler(z)).all()


def test_temperature_load_state_dict_refuses_bad_state_inside_a_model():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), TemperatureScaling())
    state = model.state_dict()
    state["1.log_temperature"] = torch.tensor([_NAN])
    with pytest.raises(ValueError, match="`1.log_temperature`"):
        model.load_state_dict(state)


@pytest.mark.parametrize(
    "cls,key,value",
    [
        pytest.param(VectorScaling, "a", torch.tensor([1.0, _NAN, 1.0]), id="vector-a-nan"),
        pytest.param(VectorScaling, "b", torch.tensor([0.0, _INF, 0.0]), id="vector-b-inf"),
        pytest.param(VectorScaling, "a", torch.ones(4), id="vector-a-shape"),
        pytest.param(MatrixScaling, "weight", torch.eye(4), id="matrix-weight-shape"),
        pytest.param(MatrixScaling, "weight", torch.full((3, 3), _NAN), id="matrix-weight-nan"),
        pytest.param(MatrixScaling, "bias", torch.tensor([0.0, 0.0, -_INF]), id="matrix-bias"),
    ],
)
def test_affine_load_state_dict_refuses_bad_state(cls, key, value):
    scaler = cls(3)
    state = scaler.state_dict()
    state[key] = value
    with pytest.raises(ValueError, match=f"`{key}`"):
        scaler.load_state_dict(state)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(torch.tensor([2.0, 3.0]), id="tensor-of-two"),
        pytest.param(True, id="bool"),
        pytest.param(torch.tensor(_NAN), id="tensor-nan"),
        pytest.param(math.inf, id="inf"),
        pytest.param(0.0, id="zero"),
        pytest.param(1e300, id="beyond-float32"),
        pytest.param(1e-300, id="below-float32"),
    ],
)
def test_temperature_setter_refuses_bad_values(value):
    scaler = TemperatureScaling(init_temp=2.0)
    with pytest.raises(ValueError, match="`temperature`"):
        scaler.temperature = value
    assert scaler.temperature_ == pytest.approx(2.0)


def test_valid_state_round_trips_including_the_legacy_key():
    scaler = TemperatureScaling()
    scaler.load_state_dict({"temperature": torch.tensor([2.25])})
    assert scaler.temperature_ == pytest.approx(2.25, rel=1e-7)
    clone = VectorScaling(3)
    clone.load_state_dict(VectorScaling(3).state_dict())


# ============================================================ class 6: conventions users rely on
@pytest.mark.parametrize(
    "make", [TemperatureScaling, lambda: VectorScaling(3), lambda: MatrixScaling(3)]
)
def test_parameters_are_ordinary_float32_parameters(make):
    scaler = make()
    for name, p in scaler.named_parameters():
        assert p.dtype == torch.float32, name
    # and they stay float32 after a float64 fit
    logits, labels = _tempered(k=3)
    scaler.fit(logits, labels)
    for name, p in scaler.named_parameters():
        assert p.dtype == torch.float32, name


def _float32_stored(t: float) -> float:
    """Bound on |applied - t| / t when log t is stored in float32 and exponentiated there."""
    return 2**-24 * (abs(math.log(t)) + 2)


def test_fitted_scaler_exposes_a_plain_float_temperature():
    logits, labels = _tempered(temp=3.0)
    scaler = TemperatureScaling().fit(logits, labels)
    assert type(scaler.temperature_) is float
    # the float64 optimum (fit_temperature returns it), held by the float32 parameter
    t64 = fit_temperature(logits, labels)
    assert abs(scaler.temperature_ - t64) <= _float32_stored(t64) * t64
    # temperature_ is what the module applies, and what the 0.2 tensor view shows
    assert scaler.temperature_ == scaler.temperature.item()
    z = logits[:5]
    torch.testing.assert_close(scaler(z), z / scaler.temperature_, rtol=0, atol=0)


def test_constant_rows_warn_and_clamp_to_the_upper_bound_by_default():
    logits = torch.ones(60, 3) * torch.arange(60.0).unsqueeze(1)
    labels = torch.arange(60) % 3
    with pytest.warns(RuntimeWarning, match="constant"):
        scaler = TemperatureScaling().fit(logits, labels)
    assert scaler.temperature_ == pytest.approx(T_MAX, rel=_float32_stored(T_MAX))
    assert not scaler.converged_ and scaler.at_boundary_
    with pytest.raises(CalibrationFitError, match="constant"):
        TemperatureScaling(on_boundary="raise").fit(logits, labels)


def test_separable_data_warn_and_clamp_by_default():
    logits, _ = _tempered()
    with pytest.warns(RuntimeWarning, match="separable"):
        scaler = TemperatureScaling().fit(logits, logits.argmax(-1))
    assert scaler.temperature_ == pytest.approx(T_MIN, rel=_float32_stored(T_MIN))
    with pytest.warns(RuntimeWarning, match="separable"):
        assert fit_temperature(logits, logits.argmax(-1)) == T_MIN


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("seed", range(6))
def test_near_identical_logits_give_the_upper_bound_every_time(dtype, seed):
    """Rows equal up to a few units in the last place of their dtype carry no information."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(300, 1, generator=g, dtype=torch.float64).to(dtype)
    ulps = torch.randint(-2, 3, (300, 5), generator=g).to(dtype)
    logits = base + ulps * torch.finfo(dtype).eps * base.abs()  # +-2 ulps around each row
    labels = torch.randint(0, 5, (300,), generator=g)
    with pytest.warns(RuntimeWarning, match="constant"):
        scaler = TemperatureScaling().fit(logits, labels)
    assert scaler.temperature_ == pytest.approx(T_MAX, rel=_float32_stored(T_MAX))
    with pytest.raises(CalibrationFitError):
        TemperatureScaling(on_boundary="raise").fit(logits, labels)


def test_a_gradient_at_rounding_level_is_read_as_uninformative():
    """NLL'(0) is exactly 0 here; reduction order must not decide between T_min and T_max."""
    logits = torch.tensor([[0.0, 1.0], [0.0, 1.0]] * 500, dtype=torch.float64) * 0.1
    labels = torch.tensor([0, 1] * 500)
    results = set()
    for seed in range(5):
        perm = torch.randperm(1000, generator=torch.Generator().manual_seed(seed))
        with pytest.warns(RuntimeWarning, match="uniform guess"):
            results.add(TemperatureScaling().fit(logits[perm], labels[perm]).temperature_)
    assert len(results) == 1 and results.pop() == pytest.approx(T_MAX, rel=1e-6)


def test_uninformative_fit_is_deterministic_across_input_forms():
    g = torch.Generator().manual_seed(3)
    logits = (1.0 + torch.randint(-1, 2, (200, 4), generator=g) * 2**-23).float()
    labels = torch.randint(0, 4, (200,), generator=g)
    perm = torch.randperm(200, generator=g)
    outcomes = []
    forms = ((logits, labels), (logits.numpy(), labels.numpy()), (logits[perm], labels[perm]))
    for form, y in forms:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            outcomes.append(TemperatureScaling().fit(form, y).temperature_)
    assert len(set(outcomes)) == 1 and outcomes[0] == pytest.approx(T_MAX, rel=1e-6)


def test_informative_fits_are_unchanged_by_the_new_default():
    logits, labels = _tempered(n=3000, temp=3.0, seed=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scaler = TemperatureScaling().fit(logits, labels)
    assert scaler.converged_ and not scaler.at_boundary_
    assert abs(scaler.temperature_ - 3.0) < 0.3
    t64 = fit_temperature(logits, labels)
    assert abs(scaler.temperature_ - t64) <= _float32_stored(t64) * t64


# ============================================ class 3: hyper-parameters reassigned after __init__
@pytest.mark.parametrize(
    "attr,value",
    [
        pytest.param("on_boundary", "clip", id="on_boundary"),
        pytest.param("bounds", (2.0, 1.0), id="bounds"),
        pytest.param("init_temp", -1.0, id="init_temp"),
    ],
)
def test_temperature_fit_rechecks_reassigned_hyperparameters(attr, value):
    logits, _ = _tempered()
    scaler = TemperatureScaling()
    setattr(scaler, attr, value)
    with pytest.raises(ValueError, match=f"`{attr}`"):
        scaler.fit(logits, logits.argmax(-1))


def test_matrix_fit_rechecks_the_penalty():
    logits, labels = _tempered(k=3)
    scaler = MatrixScaling(3)
    scaler.off_diagonal_l2 = float("nan")
    with pytest.raises(ValueError, match="`off_diagonal_l2`"):
        scaler.fit(logits, labels)


@pytest.mark.parametrize("make", [lambda: VectorScaling(3), lambda: MatrixScaling(3)])
def test_affine_forward_refuses_non_finite_parameters(make):
    scaler = make()
    with torch.no_grad():
        next(scaler.parameters())[0] = float("nan")  # e.g. a diverged optimiser step
    with pytest.raises(ValueError, match="finite"):
        scaler(torch.randn(4, 3))


def test_temperature_forward_refuses_a_non_finite_parameter():
    scaler = TemperatureScaling()
    with torch.no_grad():
        scaler.log_temperature.fill_(float("nan"))
    with pytest.raises(ValueError, match="temperature"):
        scaler(torch.randn(4, 3))


# ======================================================== class 1: probabilities passed as logits
@pytest.mark.parametrize(
    "fit",
    [
        lambda z, y: TemperatureScaling().fit(z, y),
        lambda z, y: fit_temperature(z, y),
        lambda z, y: VectorScaling(4).fit(z, y),
        lambda z, y: TemperatureScaling().fit(z[None].expand(3, -1, -1), y, ensemble=True),
    ],
    ids=["temperature", "functional", "vector", "ensemble"],
)
def test_probabilities_passed_as_logits_warn(fit):
    logits, labels = _tempered(temp=3.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.warns(UserWarning, match="look like probabilities"):
            fit(logits.softmax(-1), labels)


def test_logits_in_the_unit_interval_that_are_not_on_the_simplex_do_not_warn():
    logits, labels = _tempered(temp=3.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        TemperatureScaling().fit(logits.sigmoid(), labels)  # in [0, 1], rows do not sum to 1


@pytest.mark.parametrize("cls", [VectorScaling, MatrixScaling])
def test_affine_fit_that_diverges_is_refused_and_leaves_the_scaler_unchanged(cls):
    """Logits near float32's maximum drive L-BFGS to NaN: the fit must say so, not store NaN."""
    scaler = cls(2)
    before = {k: v.clone() for k, v in scaler.state_dict().items()}
    logits = torch.tensor([[8.507e37, 8.507e37], [0.0, 8.507e37]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=r"\.fit: `logits` must allow a finite fit"):
            scaler.fit(logits, torch.tensor([1, 0]))
    for key, value in scaler.state_dict().items():
        assert torch.equal(value, before[key])
