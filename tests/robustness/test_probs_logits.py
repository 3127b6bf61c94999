"""Issue 11, class 1: probabilities vs logits across the library API.

* ``from_logits=True`` given rows that already lie on the simplex (every value in [0, 1], every row
  summing to 1) applies the softmax twice: every public function with ``from_logits`` warns
  (a ``UserWarning``, not an error) and still does what it was told.
* Valid float16 / bfloat16 probabilities are accepted at every layer with the tolerance of their
  *original* dtype, also after an earlier layer converted them to float64 (``source_dtype=``).
"""

from __future__ import annotations

import warnings

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from bensemble import _validation as V  # noqa: E402
from bensemble import metrics as M  # noqa: E402
from bensemble.plots import ReliabilityDisplay, plot_reliability_diagram  # noqa: E402
from bensemble.uncertainty import (  # noqa: E402
    decompose_classification_uncertainty,
    variance_decomposition,
)

F64 = torch.float64


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _simplex(n=40, k=3, seed=0, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(2 * torch.randn(n, k, generator=g, dtype=F64), -1).to(dtype)


def _labels(n=40, k=3, seed=1):
    return torch.randint(0, k, (n,), generator=torch.Generator().manual_seed(seed))


def _members(m=4, n=40, k=3, seed=2, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(2 * torch.randn(m, n, k, generator=g, dtype=F64), -1).to(dtype)


# Every public function (and the checker layer) that takes ``from_logits``: call(x) with x the
# [N, K] (or [M, N, K]) array given as logits.
_Y = _labels()
FROM_LOGITS = [
    pytest.param(lambda x: M.negative_log_likelihood(x, _Y, from_logits=True), 2, id="nll"),
    pytest.param(lambda x: M.brier_score(x, _Y, from_logits=True), 2, id="brier"),
    pytest.param(lambda x: M.accuracy(x, _Y, from_logits=True), 2, id="accuracy"),
    pytest.param(lambda x: M.expected_calibration_error(x, _Y, from_logits=True), 2, id="ece"),
    pytest.param(lambda x: M.maximum_calibration_error(x, _Y, from_logits=True), 2, id="mce"),
    pytest.param(
        lambda x: M.classwise_calibration_error(x, _Y, from_logits=True), 2, id="classwise"
    ),
    pytest.param(lambda x: M.reliability_diagram(x, _Y, from_logits=True), 2, id="reliability"),
    pytest.param(
        lambda x: M.CalibrationErrorMeter(from_logits=True).update(x, _Y).compute(), 2, id="meter"
    ),
    pytest.param(
        lambda x: ReliabilityDisplay.from_predictions(x, _Y, from_logits=True),
        2,
        id="ReliabilityDisplay",
    ),
    pytest.param(
        lambda x: plot_reliability_diagram(x, _Y, from_logits=True), 2, id="plot_reliability"
    ),
    pytest.param(
        lambda x: decompose_classification_uncertainty(x, from_logits=True), 3, id="decompose"
    ),
    pytest.param(lambda x: variance_decomposition(x, from_logits=True), 3, id="variance"),
    pytest.param(lambda x: V.as_probs(x, "probs", "f", from_logits=True), 2, id="as_probs"),
    pytest.param(
        lambda x: V.as_member_probs(x, "member_probs", "f", from_logits=True),
        3,
        id="as_member_probs",
    ),
]


def _input(rank: int) -> torch.Tensor:
    return _simplex() if rank == 2 else _members()


@pytest.mark.parametrize("call, rank", FROM_LOGITS)
def test_from_logits_on_simplex_rows_warns(call, rank):
    with pytest.warns(UserWarning, match=r"from_logits=True.*(probabilities|simplex)"):
        call(_input(rank))


@pytest.mark.parametrize("call, rank", FROM_LOGITS)
def test_from_logits_on_real_logits_is_silent(call, rank):
    x = torch.log(_input(rank)) + 0.3  # rows no longer sum to 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        call(x)


def test_binary_members_from_logits_in_unit_interval_warn():
    p1 = torch.rand(3, 20, generator=torch.Generator().manual_seed(0), dtype=F64)
    with pytest.warns(UserWarning, match="from_logits=True"):
        decompose_classification_uncertainty(p1, from_logits=True, binary=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        decompose_classification_uncertainty(torch.logit(p1) - 3.0, from_logits=True, binary=True)


def test_the_warning_names_the_function_and_argument():
    with pytest.warns(UserWarning) as record:
        M.expected_calibration_error(_simplex(), _Y, from_logits=True)
    message = str(record[0].message)
    assert message.startswith("expected_calibration_error: `probs`")
    assert record[0].filename == __file__  # points at the caller, not into the library


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(
            lambda: M.expected_calibration_error(_simplex(), _Y, from_logits="no"), id="ece"
        ),
        pytest.param(lambda: M.negative_log_likelihood(_simplex(), _Y, from_logits=1), id="nll"),
        pytest.param(lambda: M.CalibrationErrorMeter(from_logits="False"), id="meter"),
        pytest.param(
            lambda: decompose_classification_uncertainty(_members(), from_logits="yes"),
            id="decompose",
        ),
    ],
)
def test_from_logits_must_be_a_bool(call):
    with pytest.raises(ValueError, match="`from_logits` must be True or False"):
        call()


# ----------------------------------------------------------------------------- low precision

_HALF = [pytest.param(torch.float16, id="float16"), pytest.param(torch.bfloat16, id="bfloat16")]


def _off_by_rounding(dtype: torch.dtype, k: int = 10) -> torch.Tensor:
    """Valid ``dtype`` probabilities whose rows miss 1 by more than the float32/64 tolerance."""
    p = _simplex(n=200, k=k, seed=3, dtype=dtype)
    deviation = float((p.to(F64).sum(-1) - 1).abs().max())
    assert V.SUM_TOLERANCE < deviation < 1e-2
    return p


@pytest.mark.parametrize("dtype", _HALF)
def test_low_precision_probs_accepted_after_conversion_with_source_dtype(dtype):
    p = _off_by_rounding(dtype)
    wide = p.to(F64)
    with pytest.raises(ValueError, match="summing to 1"):
        V.as_probs(wide, "probs", "f")  # the float64 tolerance applies without the source dtype
    out = V.as_probs(wide, "probs", "f", source_dtype=dtype)
    assert torch.equal(out, wide)
    members = V.as_member_probs(wide[None].expand(3, -1, -1), "m", "f", source_dtype=dtype)
    assert members.shape == (3, 200, 10)
    stack = V.as_member_stack(wide[None].expand(3, -1, -1), "m", "f", source_dtype=dtype)
    assert stack.shape == (3, 200, 10)


@pytest.mark.parametrize("dtype", _HALF)
def test_source_dtype_is_kept_by_float_dtype(dtype):
    # a float64 source keeps the strict tolerance
    p = _off_by_rounding(dtype).to(F64)
    with pytest.raises(ValueError, match="summing to 1"):
        V.as_probs(p, "probs", "f", source_dtype=torch.float64)
    with pytest.raises(ValueError, match="`source_dtype` must be a floating torch.dtype"):
        V.as_probs(p, "probs", "f", source_dtype=torch.int64)


_Y200 = _labels(n=200, k=10, seed=4)
PROB_TAKERS = [
    pytest.param(lambda p, m: M.negative_log_likelihood(p, _Y200), id="nll"),
    pytest.param(lambda p, m: M.brier_score(p, _Y200), id="brier"),
    pytest.param(lambda p, m: M.accuracy(p, _Y200), id="accuracy"),
    pytest.param(lambda p, m: M.expected_calibration_error(p, _Y200), id="ece"),
    pytest.param(lambda p, m: M.maximum_calibration_error(p, _Y200), id="mce"),
    pytest.param(lambda p, m: M.classwise_calibration_error(p, _Y200), id="classwise"),
    pytest.param(lambda p, m: M.reliability_diagram(p, _Y200), id="reliability"),
    pytest.param(lambda p, m: M.CalibrationErrorMeter().update(p, _Y200).compute(), id="meter"),
    pytest.param(lambda p, m: ReliabilityDisplay.from_predictions(p, _Y200), id="display"),
    pytest.param(lambda p, m: decompose_classification_uncertainty(m), id="decompose"),
    pytest.param(lambda p, m: variance_decomposition(m), id="variance"),
    pytest.param(lambda p, m: M.ood_scores(m), id="ood_scores"),
    pytest.param(lambda p, m: M.selective_confidence(m), id="selective_confidence"),
    pytest.param(lambda p, m: M.misclassification_report(m, _Y200), id="misclassification"),
    pytest.param(lambda p, m: M.detection_report(m, m), id="detection"),
]


@pytest.mark.parametrize("dtype", _HALF)
@pytest.mark.parametrize("call", PROB_TAKERS)
def test_low_precision_probs_accepted_by_every_public_function(call, dtype):
    p = _off_by_rounding(dtype)
    call(p, p[None].expand(3, -1, -1).contiguous())


def test_low_precision_tolerance_holds_for_many_classes():
    # bfloat16 rows of K = 1000 small probabilities: the rounding adds up over the classes
    p = _simplex(n=50, k=1000, seed=5, dtype=torch.bfloat16)
    out = V.as_probs(np.asarray(p.float()), "probs", "f", source_dtype=torch.bfloat16)
    assert out.shape == (50, 1000)
