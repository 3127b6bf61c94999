"""The call battery (issue 19, item 1): public functions and helper classes no other battery drives.

Each case of battery_calls.CALL_CASES: the valid call returns, and every bad call raises a
``ValueError`` whose message names the documented argument in backticks (never a TypeError,
AttributeError or a linear-algebra error). Known defects of other work: strict xfail.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from battery_calls import CALL_CASES, CallCase  # noqa: E402

#: "<name>::<argument>" -> reason (strict xfail; remove the line when the fix lands).
KNOWN_DEFECTS: dict[str, str] = {}


def _bad_params() -> list:
    params = []
    for case in CALL_CASES:
        for i, (call, argument) in enumerate(case.bad):
            key = f"{case.name}::{argument}"
            marks = (
                [pytest.mark.xfail(reason=KNOWN_DEFECTS[key], strict=True)]
                if key in KNOWN_DEFECTS
                else []
            )
            params.append(
                pytest.param(case.name, call, argument, id=f"{case.name}-{i}", marks=marks)
            )
    return params


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CALL_CASES])
def test_valid_call_returns(case: CallCase) -> None:
    if case.valid is None:
        pytest.skip(case.why)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        case.valid()


@pytest.mark.parametrize("name, call, argument", _bad_params())
def test_bad_call_is_a_value_error_naming_the_argument(name, call, argument) -> None:
    with warnings.catch_warnings(), pytest.raises(ValueError) as info:
        warnings.simplefilter("ignore")
        call()
    assert f"`{argument}`" in str(info.value), f"{name}: {info.value}"
