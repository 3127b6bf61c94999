"""One hand-shape for the API (issue 20, item 6): ``(probs, labels)`` everywhere, ``labels`` as
the one keyword for class labels (``targets`` deprecated), and a row-sum message that says to
renormalise probabilities that are off by rounding."""

import warnings

import numpy as np
import pytest
import torch

from bensemble import metrics
from bensemble.metrics import (
    AccuracyMeter,
    BrierMeter,
    CalibrationErrorMeter,
    ClasswiseCalibrationErrorMeter,
    NLLMeter,
)


def _data(n=300, k=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = 2.0 * torch.randn(n, k, generator=g, dtype=torch.float64)
    probs = logits.softmax(-1)
    labels = torch.multinomial(probs, 1, generator=g).squeeze(1)
    return probs, labels


def _reference_confidence_correct(probs, labels):
    """Top-label probability and correctness, by a plain loop."""
    conf, correct = [], []
    for row, y in zip(probs.tolist(), labels.tolist()):
        top = max(range(len(row)), key=lambda j: (row[j], -j))  # first index on ties
        conf.append(row[top])
        correct.append(1.0 if top == y else 0.0)
    return torch.tensor(conf, dtype=torch.float64), torch.tensor(correct)


SELECTIVE = [
    pytest.param(metrics.aurc, {}, id="aurc"),
    pytest.param(metrics.excess_aurc, {}, id="excess_aurc"),
    pytest.param(metrics.risk_coverage_curve, {}, id="risk_coverage_curve"),
    pytest.param(metrics.risk_at_coverage, {"coverage": 0.6}, id="risk_at_coverage"),
    pytest.param(metrics.coverage_at_risk, {"risk": 0.2}, id="coverage_at_risk"),
]


def _same(a, b):
    if isinstance(a, tuple):
        for x, y in zip(a, b):
            torch.testing.assert_close(x, y, rtol=0, atol=0)
    else:
        assert a == b


@pytest.mark.parametrize(("fn", "options"), SELECTIVE)
def test_selective_functions_take_probs_and_labels(fn, options):
    probs, labels = _data()
    conf, correct = _reference_confidence_correct(probs, labels)
    expected = fn(conf, correct, **options)
    _same(fn(probs, labels, **options), expected)  # positional, by shape
    _same(fn(probs=probs, labels=labels, **options), expected)  # by keyword
    _same(fn(probs.numpy(), labels.numpy(), **options), expected)  # numpy
    members = torch.stack([probs, probs])  # [M, N, K]: scored on the mean over members
    _same(fn(members, labels, **options), expected)


@pytest.mark.parametrize(("fn", "options"), SELECTIVE)
def test_selective_forms_cannot_be_mixed_or_half_given(fn, options):
    probs, labels = _data(50)
    conf, correct = _reference_confidence_correct(probs, labels)
    name = fn.__name__
    with pytest.raises(ValueError, match=f"^{name}: `probs` and `labels` must replace"):
        fn(conf, correct, probs=probs, labels=labels, **options)
    with pytest.raises(ValueError, match=f"^{name}: `labels` must be given with `probs`"):
        fn(probs=probs, **options)
    with pytest.raises(ValueError, match=f"^{name}: `correct` must be given"):
        fn(conf, **options)
    with pytest.raises(ValueError, match=f"^{name}: `labels` must lie in"):
        fn(probs, labels + 5, **options)
    with pytest.raises(ValueError, match=f"^{name}: `probs` must have rows summing to 1"):
        fn(probs * 0.5, labels, **options)


# --------------------------------------------------------------- labels, the one keyword
LABELLED = [
    pytest.param(metrics.negative_log_likelihood, id="negative_log_likelihood"),
    pytest.param(metrics.brier_score, id="brier_score"),
    pytest.param(metrics.accuracy, id="accuracy"),
    pytest.param(metrics.expected_calibration_error, id="expected_calibration_error"),
    pytest.param(metrics.maximum_calibration_error, id="maximum_calibration_error"),
    pytest.param(metrics.classwise_calibration_error, id="classwise_calibration_error"),
    pytest.param(metrics.reliability_diagram, id="reliability_diagram"),
]
METERS = [
    CalibrationErrorMeter,
    lambda: ClasswiseCalibrationErrorMeter(5),
    NLLMeter,
    BrierMeter,
    AccuracyMeter,
]


@pytest.mark.parametrize("fn", LABELLED)
def test_labels_keyword_and_deprecated_targets(fn):
    probs, labels = _data()
    expected = fn(probs, labels)
    assert fn(probs, labels=labels) == expected
    with pytest.warns(DeprecationWarning, match=r"`targets` is deprecated, use `labels`") as rec:
        assert fn(probs, targets=labels) == expected  # bensemble 0.2's keyword still works
    assert rec[0].filename == __file__  # attributed to the caller
    with pytest.raises(ValueError, match="`labels` must be passed once"):
        fn(probs, labels=labels, targets=labels)


@pytest.mark.parametrize("meter", METERS, ids=["ECE", "classwise", "NLL", "Brier", "accuracy"])
def test_meters_take_labels_and_deprecated_targets(meter):
    probs, labels = _data()
    expected = meter().update(probs, labels).compute()
    assert meter().update(probs, labels=labels).compute() == expected
    with pytest.warns(DeprecationWarning, match="`targets` is deprecated"):
        assert meter().update(probs, targets=labels).compute() == expected


def test_no_public_metric_still_names_labels_targets():
    import inspect

    for fn in [p.values[0] for p in LABELLED] + [m().update for m in METERS]:
        params = inspect.signature(fn).parameters
        assert "labels" in params and "targets" not in params, fn


# ------------------------------------------------------------- the row-sum message
def test_rows_off_by_rounding_are_told_to_renormalise():
    probs, labels = _data(20)
    off = probs * 1.001  # rows summing to 1.001
    with pytest.raises(ValueError, match="renormalise them") as info:
        metrics.expected_calibration_error(off, labels)
    message = str(info.value)
    assert "max deviation 0.001" in message
    assert "from_logits=True would apply a softmax to probabilities" in message
    assert "pass from_logits=True" not in message
    # the advice is right: renormalised rows are accepted, and equal the intended probabilities
    fixed = off / off.sum(-1, keepdim=True)
    assert metrics.expected_calibration_error(fixed, labels) == pytest.approx(
        metrics.expected_calibration_error(probs, labels), abs=1e-12
    )


def test_rows_far_from_one_still_point_at_logits():
    _, labels = _data(20)
    scores = torch.rand(20, 5, generator=torch.Generator().manual_seed(1))
    with pytest.raises(ValueError, match="look like logits or unnormalised scores.*from_logits"):
        metrics.brier_score(scores, labels)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        metrics.brier_score(np.log(scores.numpy()), labels, from_logits=True)  # the remedy works
