"""The verdict rules of :mod:`bensemble.app.verdict` on hand-made numbers, and the notes of
:mod:`bensemble.app.evaluate.summary` on hand-made evaluations."""

from __future__ import annotations

import pytest
import torch

from bensemble.app.evaluate import evaluate_predictions
from bensemble.app.evaluate.summary import _notes
from bensemble.app.verdict import (
    ECE_THRESHOLD,
    EECE_THRESHOLD,
    calibration_verdict,
    epistemic_verdict,
    scaling_verdict,
)

T = ECE_THRESHOLD


@pytest.mark.parametrize(
    ("ece", "ci", "null", "answer", "status"),
    [
        pytest.param(0.01, (0.005, 0.02), 0.04, "yes", "good", id="calibrated"),
        pytest.param(0.12, (0.09, 0.15), 0.05, "no", "bad", id="miscalibrated"),
        pytest.param(0.035, (0.02, 0.05), 0.04, "unclear", "warn", id="ci-straddles"),
        # above the threshold, but no more than a calibrated model scores on so few points
        pytest.param(0.06, (0.045, 0.08), 0.07, "unclear", "warn", id="small-sample-bias"),
        pytest.param(0.01, None, None, "yes", "good", id="no-bootstrap-yes"),
        pytest.param(0.05, None, None, "no", "bad", id="no-bootstrap-no"),
    ],
)
def test_calibration_rule(ece, ci, null, answer, status):
    v = calibration_verdict(ece, ci, null_q95=null)
    assert (v.answer, v.status) == (answer, status)
    assert f"{ece:.4f}" in v.detail and str(T) in v.detail
    assert ("No interval" in v.detail) == (ci is None)


def test_calibration_rule_edges_are_strict():
    assert calibration_verdict(0.01, (0.0, T), null_q95=1.0).answer == "unclear"
    assert calibration_verdict(0.05, (T, 0.06), null_q95=0.0).answer == "unclear"


@pytest.mark.parametrize(
    ("diff", "ci", "answer", "status"),
    [
        pytest.param(-0.1, (-0.15, -0.05), "yes", "good", id="helped"),
        pytest.param(0.02, (0.01, 0.03), "no, it made NLL worse", "bad", id="hurt"),
        pytest.param(-0.01, (-0.03, 0.01), "unclear", "warn", id="straddles"),
    ],
)
def test_scaling_rule(diff, ci, answer, status):
    v = scaling_verdict(diff, ci, before=0.5, after=0.5 + diff, temperature=1.2)
    assert (v.answer, v.status) == (answer, status)
    assert "T = 1.200" in v.detail and f"{diff:+.4f}" in v.detail


def test_scaling_rule_without_a_split_is_na():
    v = scaling_verdict(None, None, before=0.5, after=None)
    assert (v.answer, v.status) == ("n/a", "info")


@pytest.mark.parametrize(
    ("eece", "ci", "members", "answer"),
    [
        pytest.param(0.002, (0.001, 0.004), 5, "yes", id="calibrated"),
        pytest.param(0.05, (0.03, 0.07), 5, "no", id="miscalibrated"),
        pytest.param(0.01, (0.005, 0.02), 5, "unclear", id="straddles"),
        pytest.param(None, None, 1, "n/a", id="single-model"),
    ],
)
def test_epistemic_rule(eece, ci, members, answer):
    assert epistemic_verdict(eece, ci, members=members).answer == answer
    assert EECE_THRESHOLD == 0.01


def _evaluation(n, seed=0, sharpness=1.0, split=0.5):
    g = torch.Generator().manual_seed(seed)
    true = 2.0 * torch.randn(n, 3, generator=g, dtype=torch.float64)
    labels = torch.multinomial(torch.softmax(true, 1), 1, generator=g).squeeze(1)
    probs = torch.softmax(sharpness * true, -1)
    return evaluate_predictions(probs, labels, calibration_split=split, bootstrap=40, seed=seed)


def test_small_parts_get_a_note_and_large_ones_do_not():
    small = _evaluation(300)  # 75 temperature / 75 conformal points
    assert sum("fewer than 200" in note for note in small.notes) == 2
    large = _evaluation(1000)  # 250 / 250
    assert not any("fewer than 200" in note for note in large.notes)


def test_scaling_that_hurts_gets_a_note():
    ev = _evaluation(1000)
    assert not any("made the held-out NLL worse" in note for note in ev.notes)
    ev.metrics[1]["nll"] = ev.metrics[0]["nll"] + 0.01  # as if the fitted T had hurt
    assert any("made the held-out NLL worse" in note for note in _notes(ev))


def test_verdicts_on_data_with_known_calibration():
    # labels drawn from the model itself: calibrated; the same logits x3: overconfident
    calibrated = _evaluation(4000, seed=1)
    overconfident = _evaluation(4000, seed=1, sharpness=3.0)
    assert calibrated.verdicts[0]["answer"] in ("yes", "unclear")
    assert overconfident.verdicts[0]["answer"] == "no"
    assert overconfident.verdicts[1]["answer"] == "yes"  # T near 3 lowers the NLL clearly
    assert calibrated.verdicts[2]["answer"] == "n/a"  # one model
