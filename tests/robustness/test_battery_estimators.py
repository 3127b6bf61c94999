"""The estimator battery (issue 19, item 1): every public class with a fit step, one contract.

See battery_estimators.py for the cases and what each check means. Known defects of classes owned
by other work are listed in :data:`KNOWN_DEFECTS` (strict xfail, so a fix is noticed).
"""

from __future__ import annotations

import copy
import re
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

from battery_estimators import ESTIMATOR_CASES, EstimatorCase  # noqa: E402

#: "<case>::<check>" -> reason; strict xfail (remove the line when the fix lands).
KNOWN_DEFECTS: dict[str, str] = {}


def _params(check: str) -> list:
    out = []
    for case in ESTIMATOR_CASES:
        key = f"{case.name}::{check}"
        marks = (
            [pytest.mark.xfail(reason=KNOWN_DEFECTS[key], strict=True)]
            if key in KNOWN_DEFECTS
            else []
        )
        out.append(pytest.param(case, id=case.name, marks=marks))
    return out


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors(item)]
    raise TypeError(f"a prediction must be tensors (got {type(value).__name__})")


def _fitted(case: EstimatorCase) -> Any:
    est = case.build()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        case.fit(est, False)
    return est


def _predict(case: EstimatorCase, est: Any) -> list[torch.Tensor]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [t.detach() for t in _tensors(case.predict(est))]


def _same(a: list[torch.Tensor], b: list[torch.Tensor], where: str) -> None:
    assert len(a) == len(b), where
    for x, y in zip(a, b):
        assert torch.equal(x, y), f"{where}: predictions differ"


def _names_an_argument(err: ValueError) -> bool:
    return bool(re.search(r"`[A-Za-z_][A-Za-z0-9_\[\]]*`", str(err)))


@pytest.mark.parametrize("case", _params("repr"))
def test_repr_before_and_after_fit(case: EstimatorCase) -> None:
    est = case.build()
    assert isinstance(repr(est), str)
    assert isinstance(repr(_fitted(case)), str)


@pytest.mark.parametrize("case", _params("unfitted"))
def test_predict_before_fit_names_the_missing_step(case: EstimatorCase) -> None:
    if case.step is None:
        pytest.skip("usable before fitting (documented)")
    with pytest.raises(ValueError) as info:
        case.predict(case.build())
    assert case.step in str(info.value), f"message does not name {case.step!r}: {info.value}"


@pytest.mark.parametrize("case", _params("returns"))
def test_fit_returns_self(case: EstimatorCase) -> None:
    est = case.build()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = case.fit(est, False)
    if case.returns == "self":
        assert out is est, f"fit returned {type(out).__name__}, not self"
    else:
        assert out is not est or case.returns.startswith("self")


@pytest.mark.parametrize("case", _params("deterministic"))
def test_two_identical_fits_agree(case: EstimatorCase) -> None:
    """Every random step has a fixed default seed: the same fit twice, the same model."""
    _same(_predict(case, _fitted(case)), _predict(case, _fitted(case)), case.name)


@pytest.mark.parametrize("case", _params("bad_input"))
def test_bad_input_is_a_value_error_and_keeps_the_fit(case: EstimatorCase) -> None:
    est = _fitted(case)
    before = _predict(case, est)
    with pytest.raises(ValueError) as info:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            case.fit(est, True)
    assert _names_an_argument(info.value), f"the error names no argument: {info.value}"
    _same(_predict(case, est), before, f"{case.name} after a refused fit")


@pytest.mark.parametrize("case", _params("copy"))
def test_deepcopy_and_state_dict_keep_the_fit(case: EstimatorCase) -> None:
    est = _fitted(case)
    want = _predict(case, est)
    _same(_predict(case, copy.deepcopy(est)), want, f"deepcopy({case.name})")
    if isinstance(est, nn.Module):
        other = case.build()
        other.load_state_dict(est.state_dict())
        _same(_predict(case, other), want, f"{case.name} state_dict round trip")
