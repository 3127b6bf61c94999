"""The estimator battery's contract for the regression recalibrators and conformal regressors.

The same checks as ``tests/robustness/test_battery_estimators.py`` (branch wt-modules): repr
before and after fitting; a prediction before fitting names the missing step (or the estimator is
documented usable unfitted); ``fit`` returns ``self``; two identical fits agree; a bad input is a
``ValueError`` naming an argument and leaves the previous fit in place; ``copy.deepcopy`` and
(for ``nn.Module`` s) ``state_dict`` keep the fitted predictions. :data:`REGRESSION_ESTIMATOR_CASES`
has the battery's ``EstimatorCase`` fields, ready to join its ``ESTIMATOR_CASES``.
"""

from __future__ import annotations

import copy
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch import nn

from bensemble.conformal import ConformalizedQuantileRegressor, SplitConformalRegressor
from bensemble.regression import QuantileRecalibration, VarianceScaling

F64 = torch.float64


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[], Any]
    fit: Callable[[Any, bool], Any]
    predict: Callable[[Any], Any]
    step: str | None = "fit"
    method: str = "predict_interval"  # the prediction method ``predict`` calls
    quantile_input: bool = False  # takes [M, N, 2] (lower, upper) quantiles


def _members(bad: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(21)
    means = torch.randn(3, 80, generator=g, dtype=F64)
    variances = 0.1 + torch.rand(3, 80, generator=g, dtype=F64)
    y = means.mean(0) + 2.0 * torch.randn(80, generator=g, dtype=F64)
    if bad:
        y[4] = float("nan")
    return torch.stack([means, variances], -1), y


def _quantiles(bad: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    p, y = _members(bad)
    sd = p[..., 1].sqrt()
    return torch.stack([p[..., 0] - sd, p[..., 0] + sd], -1), y


REGRESSION_ESTIMATOR_CASES = [
    Case(
        "VarianceScaling",
        lambda: VarianceScaling(),
        lambda est, bad: est.fit(*_members(bad)),
        lambda est: est.transform(_members()[0][:, :5]),
        step=None,  # unfitted: s = 1, the identity map (as the logit scalers)
        method="transform",
    ),
    Case(
        "QuantileRecalibration",
        lambda: QuantileRecalibration(n_quantiles=9),
        lambda est, bad: est.fit(*_members(bad)),
        lambda est: est.predictive_interval(_members()[0][:, :5]),
        method="predictive_interval",
    ),
    Case(
        "SplitConformalRegressor",
        lambda: SplitConformalRegressor("normalized", alpha=0.2),
        lambda est, bad: est.calibrate(*_members(bad)),
        lambda est: est.predict_interval(_members()[0][:, :5]),
        step="calibrate",
    ),
    Case(
        "ConformalizedQuantileRegressor",
        lambda: ConformalizedQuantileRegressor(alpha=0.2, symmetric=False),
        lambda est, bad: est.calibrate(*_quantiles(bad)),
        lambda est: est.predict_interval(_quantiles()[0][:, :5]),
        step="calibrate",
        quantile_input=True,
    ),
]
CASES = [pytest.param(case, id=case.name) for case in REGRESSION_ESTIMATOR_CASES]


def _tensors(value: Any) -> list[torch.Tensor]:
    return [value] if isinstance(value, torch.Tensor) else [t for v in value for t in _tensors(v)]


def _fitted(case: Case) -> Any:
    est = case.build()
    case.fit(est, False)
    return est


def _same(a: Any, b: Any, where: str) -> None:
    for x, y in zip(_tensors(a), _tensors(b), strict=True):
        assert torch.equal(x, y), f"{where}: predictions differ"


@pytest.mark.parametrize("case", CASES)
def test_repr_before_and_after_fit(case):
    before, after = repr(case.build()), repr(_fitted(case))
    assert case.name in before and case.name in after


@pytest.mark.parametrize("case", CASES)
def test_predict_before_fit_names_the_missing_step(case):
    if case.step is None:
        case.predict(case.build())  # documented usable unfitted
        return
    with pytest.raises(ValueError, match=case.step):
        case.predict(case.build())


@pytest.mark.parametrize("case", CASES)
def test_fit_returns_self_and_identical_fits_agree(case):
    est = case.build()
    assert case.fit(est, False) is est
    _same(case.predict(est), case.predict(_fitted(case)), case.name)


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_a_value_error_and_keeps_the_fit(case):
    est = _fitted(case)
    before = case.predict(est)
    with pytest.raises(ValueError) as info:
        case.fit(est, True)
    assert re.search(r"`[A-Za-z_]+`", str(info.value)), str(info.value)
    _same(case.predict(est), before, f"{case.name} after a refused fit")


@pytest.mark.parametrize("case", CASES)
def test_deepcopy_and_state_dict_keep_the_fit(case):
    est = _fitted(case)
    want = case.predict(est)
    _same(case.predict(copy.deepcopy(est)), want, "deepcopy")
    if isinstance(est, nn.Module):
        other = case.build()
        other.load_state_dict(est.state_dict())
        _same(case.predict(other), want, "state_dict")


@pytest.mark.parametrize("case", CASES)
def test_predictions_track_no_gradient_and_take_numpy(case):
    est = _fitted(case)
    data = (_quantiles() if case.quantile_input else _members())[0][:, :5]
    leaf = data.clone().requires_grad_(True)
    method = case.method
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = getattr(est, method)(leaf)
        from_numpy = getattr(est, method)(data.numpy())
    assert not any(t.requires_grad for t in _tensors(out))
    _same(out, from_numpy, "numpy input")
