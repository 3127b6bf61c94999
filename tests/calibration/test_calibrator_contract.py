"""One contract for every post-hoc calibrator (issue 20 item 3, issue 24 items 1-2).

Each :class:`Case` says how to build a calibrator, what it is fitted on and what it predicts. Every
case meets every check: ``fit`` returns ``self`` and is deterministic; outputs never track
gradients and do not depend on the container (tensor / numpy) or on how the rows are batched;
a refused input raises a ``ValueError`` naming an argument and keeps the previous fit; deepcopy,
``state_dict`` and a weights-only ``torch.save`` keep the predictions; a bad state is refused with
the key named, leaving the module as it was. (tests/robustness's estimator and module batteries
cover the same classes with the package-wide checks; these add what only calibrators share.)
"""

from __future__ import annotations

import copy
import io
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

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


def _logits(n=120, seed=12, bad=False):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % K
    z = torch.randn(n, K, generator=g, dtype=F64) + 2.0 * torch.nn.functional.one_hot(y, K)
    if bad:
        z[5, 1] = float("nan")
    return z, y


def _probs(n=120, seed=12, bad=False):
    z, y = _logits(n, seed)
    p = (1.5 * z).softmax(-1)
    if bad:
        p[5, 1] = float("nan")
    return p, y


def _members(n=120, seed=12, bad=False):
    z, y = _logits(n, seed)
    g = torch.Generator().manual_seed(seed + 1)
    members = (z + 0.7 * torch.randn(4, n, K, generator=g, dtype=F64)).softmax(-1)
    if bad:
        members[1, 5, 1] = float("nan")
    return members, y


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[], Any]
    data: Callable[..., tuple[torch.Tensor, torch.Tensor]]  # data(n=, seed=, bad=)
    fitted_first: bool  # predicting before fit raises (True) or is the identity (False)
    rows_axis: int = 0  # the sample axis of the input (1 for member stacks)


CASES = [
    Case("TemperatureScaling", TemperatureScaling, _logits, False),
    Case("VectorScaling", lambda: VectorScaling(K), _logits, False),
    Case("MatrixScaling", lambda: MatrixScaling(K, off_diagonal_l2=1e-3), _logits, False),
    Case("IsotonicCalibration", IsotonicCalibration, _probs, True),
    Case("HistogramBinningCalibration", lambda: HistogramBinningCalibration(8), _probs, True),
    Case("BetaCalibration", BetaCalibration, _probs, True),
    Case("DirichletCalibration", lambda: DirichletCalibration(1e-2, 1e-2), _probs, True),
    Case("EpistemicRecalibrator", EpistemicRecalibrator, _members, False, rows_axis=1),
]
PARAMS = [pytest.param(case, id=case.name) for case in CASES]


def _fit(case: Case, est: Any, **kw: Any) -> Any:
    x, y = case.data(**kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # e.g. a fit at a bound
        return est.fit(x, y)


def _fitted(case: Case) -> Any:
    est = case.build()
    _fit(case, est)
    return est


def _predict(est: Any, x: Any) -> torch.Tensor:
    return est.predict_proba(x)


def _names_an_argument(err: Exception) -> bool:
    return bool(re.search(r"`[A-Za-z_][A-Za-z0-9_.\[\]]*`", str(err)))


@pytest.mark.parametrize("case", PARAMS)
def test_repr_before_and_after_fit(case):
    est = case.build()
    assert type(est).__name__ in repr(est)
    assert repr(_fitted(case)) != "" and type(est).__name__ in repr(_fitted(case))


@pytest.mark.parametrize("case", PARAMS)
def test_predict_before_fit(case):
    x, _ = case.data()
    est = case.build()
    if case.fitted_first:
        with pytest.raises(ValueError, match=r"fit\(") as info:
            est.transform(x)
        assert _names_an_argument(info.value) or "not fitted" in str(info.value)
    else:  # the unfitted scalers and the recalibrator: their initial map (the identity, or
        # z / init_temp for temperature scaling)
        scale = est.temperature_ if case.name == "TemperatureScaling" else 1.0
        torch.testing.assert_close(est.transform(x), x / scale, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("case", PARAMS)
def test_fit_returns_self_and_two_fits_agree(case):
    x, _ = case.data()
    first = case.build()
    assert _fit(case, first) is first
    second = _fitted(case)
    assert torch.equal(_predict(first, x), _predict(second, x))


@pytest.mark.parametrize("case", PARAMS)
def test_fit_leaves_its_inputs_alone(case):
    x, y = case.data()
    x0, y0 = x.clone(), y.clone()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        case.build().fit(x, y)
    assert torch.equal(x, x0) and torch.equal(y, y0)


@pytest.mark.parametrize("case", PARAMS)
def test_bad_input_is_a_value_error_and_keeps_the_fit(case):
    x, y = case.data()
    est = _fitted(case)
    before = _predict(est, x)
    with pytest.raises(ValueError) as info:
        _fit(case, est, bad=True)
    assert _names_an_argument(info.value), str(info.value)
    with pytest.raises(ValueError) as info:
        est.fit(x, y[:-1])  # one label short
    assert "`labels`" in str(info.value)
    with pytest.raises(ValueError) as info:
        est.fit(x, y.double())  # float labels
    assert "`labels`" in str(info.value)
    assert torch.equal(_predict(est, x), before)


@pytest.mark.parametrize("case", PARAMS)
def test_outputs_never_track_gradients(case):
    x, _ = case.data()
    est = _fitted(case)
    grad_x = x.clone().requires_grad_()
    for out in (est.transform(grad_x), est.predict_proba(grad_x), est.transform(x.numpy())):
        assert isinstance(out, torch.Tensor) and not out.requires_grad
    assert est.predict_proba(x).numpy().dtype == np.float64  # .numpy() just works (issue 20)


@pytest.mark.parametrize("case", PARAMS)
def test_numpy_and_tensor_inputs_agree_and_dtypes_follow_the_input(case):
    x, _ = case.data()
    est = _fitted(case)
    torch.testing.assert_close(est.predict_proba(x.numpy()), est.predict_proba(x), rtol=0, atol=0)
    out32 = est.predict_proba(x.float())
    assert out32.dtype == torch.float32 and est.predict_proba(x).dtype == F64
    torch.testing.assert_close(out32.double(), est.predict_proba(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", PARAMS)
def test_predict_proba_rows_lie_on_the_simplex(case):
    x, _ = case.data(seed=3)
    q = _fitted(case).predict_proba(x)
    assert bool(((q >= 0) & (q <= 1)).all())
    # float64 rows of at most K = 3 terms
    torch.testing.assert_close(q.sum(-1), torch.ones(q.shape[:-1], dtype=F64), rtol=0, atol=1e-10)


@pytest.mark.parametrize("case", PARAMS)
@settings(max_examples=15)  # a transform is cheap, but there are eight calibrators
@given(data=st.data())
def test_transform_does_not_depend_on_batching(case, data):
    """Row-wise maps: any split of the rows into chunks gives the rows of the whole (the
    streaming contract: fit once, transform chunk by chunk)."""
    est = _FITTED[case.name]
    x, _ = case.data(n=57, seed=data.draw(st.integers(0, 50), label="seed"))
    n = x.shape[case.rows_axis]
    cuts = sorted(data.draw(st.sets(st.integers(1, n - 1), max_size=4), label="cuts"))
    bounds = [0, *cuts, n]
    pieces = [
        est.transform(x.narrow(case.rows_axis, a, b - a)) for a, b in zip(bounds[:-1], bounds[1:])
    ]
    # float64 rows, reductions over at most K terms (K eps relative) whatever the batch kernel;
    # 1e-10 leaves room for any CPU's summation order and still catches a cross-row dependence
    torch.testing.assert_close(
        torch.cat(pieces, dim=case.rows_axis), est.transform(x), rtol=1e-10, atol=1e-12
    )


_FITTED = {case.name: _fitted(case) for case in CASES}


@pytest.mark.parametrize("case", PARAMS)
@settings(max_examples=6)  # each example is a fit
@given(seed=st.integers(0, 2**16))
def test_fit_does_not_depend_on_the_order_of_the_calibration_rows(case, seed):
    x, y = case.data()
    perm = torch.randperm(y.shape[0], generator=torch.Generator().manual_seed(seed))
    est = case.build()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        est.fit(x.index_select(case.rows_axis, perm), y[perm])
    # sums in another order: float64 rounding, amplified by the optimisers' stopping rules
    tol = 0 if case.name in ("IsotonicCalibration", "HistogramBinningCalibration") else 1e-6
    torch.testing.assert_close(
        est.predict_proba(x), _FITTED[case.name].predict_proba(x), rtol=0, atol=tol
    )


@pytest.mark.parametrize("case", PARAMS)
def test_deepcopy_state_dict_and_weights_only_save_keep_the_fit(case):
    x, _ = case.data(seed=4)
    est = _fitted(case)
    want = _predict(est, x)
    assert torch.equal(_predict(copy.deepcopy(est), x), want)
    other = case.build()
    other.load_state_dict(est.state_dict())
    assert torch.equal(_predict(other, x), want)
    buffer = io.BytesIO()
    torch.save(est.state_dict(), buffer)
    buffer.seek(0)
    third = case.build()
    third.load_state_dict(torch.load(buffer, weights_only=True))
    assert torch.equal(_predict(third, x), want)


def _corrupt(state: dict) -> list[tuple[str, dict]]:
    """Bad copies of a state: a NaN, a wrong shape, each for every tensor entry."""
    bad = []
    for key, value in state.items():
        if (
            not isinstance(value, torch.Tensor)
            or not value.is_floating_point()
            or not value.numel()
        ):
            continue
        nan = dict(state)
        nan[key] = value.clone().reshape(-1).index_fill(0, torch.tensor([0]), float("nan"))
        nan[key] = nan[key].reshape(value.shape)
        bad.append((key, nan))
        shaped = dict(state)
        shaped[key] = torch.cat([value.reshape(-1), value.reshape(-1)[:1]])
        bad.append((key, shaped))
    return bad


@pytest.mark.parametrize("case", PARAMS)
def test_a_bad_state_is_refused_and_changes_nothing(case):
    x, _ = case.data(seed=5)
    source = _fitted(case)
    target = _fitted(case)
    want = _predict(target, x)
    for key, state in _corrupt(source.state_dict()):
        with pytest.raises(ValueError, match=f"`{re.escape(key)}`"):
            target.load_state_dict(state)
        assert torch.equal(_predict(target, x), want), key


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("case", PARAMS)
def test_cuda_fit_and_transform_match_cpu(case):
    x, y = case.data()
    cpu = _FITTED[case.name]
    gpu = case.build().to("cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        gpu.fit(x.cuda(), y.cuda())
    out = gpu.predict_proba(x.cuda())
    assert out.device.type == "cuda"
    torch.testing.assert_close(out.cpu(), cpu.predict_proba(x), rtol=1e-6, atol=1e-6)
