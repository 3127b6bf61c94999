"""The demo's words (issue 20, item 4): cards that count and name what passes after scaling,
questions that name the stage they judge, empty sets explained per score."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bensemble.app.demo_html import DatasetPage, _summary_cards, _verdict_rows
from bensemble.app.demo_notes import metric_notes
from bensemble.app.verdict import (
    EMPTY_SETS,
    QUESTIONS,
    calibration_verdict,
    empty_set_note,
    epistemic_verdict,
    verdict_dict,
)


def _v(answer: str, question: str = "q") -> dict:
    return {"question": question, "answer": answer, "status": "info", "detail": "",
            "rule": "", "value": 0.01, "ci_low": 0.0, "ci_high": 0.02}  # fmt: skip


def _run(label: str, unscaled: str, scaled: str | None, scaling: str, epistemic: str):
    verdicts = {"calibrated_unscaled": _v(unscaled), "scaling": _v(scaling)}
    if scaled is not None:
        verdicts["calibrated_scaled"] = _v(scaled)
    question = "Are the temperature-scaled members' uncertainties epistemically calibrated?"
    verdicts["epistemic"] = _v(epistemic, question)
    return SimpleNamespace(label=label, verdicts=verdicts)


def _page(runs) -> DatasetPage:
    return DatasetPage("Digits", "t", {}, runs)


def test_the_calibration_card_counts_and_names_what_passes_after_scaling():
    # issue 20: "Digits: yes for 0 of 9" although two methods were calibrated after scaling
    runs = [_run("Deep Ensembles", "no", "yes", "yes", "no"), _run("MC Dropout", "no", "yes",
            "yes", "no")] + [_run(f"m{i}", "no", "no", "yes", "no") for i in range(7)]  # fmt: skip
    calibrated, scaling, epistemic = _summary_cards(_page(runs))
    assert calibrated.question == "Digits: Is the temperature-scaled model calibrated?"
    assert calibrated.answer == "yes for 2 of 9: Deep Ensembles, MC Dropout"
    assert "Unscaled: yes for 0 of 9 (none)." in calibrated.detail
    assert calibrated.status == "warn"
    assert scaling.answer == "yes for 9 of 9" and scaling.status == "good"
    assert "temperature-scaled members'" in epistemic.question
    assert epistemic.answer == "yes for 0 of 9" and epistemic.status == "bad"


def test_a_method_without_a_temperature_is_judged_unscaled_and_said_so():
    runs = [_run("A", "yes", None, "n/a", "yes"), _run("B", "no", "yes", "yes", "yes")]
    calibrated = _summary_cards(_page(runs))[0]
    assert calibrated.question == f"Digits: {QUESTIONS[0]}"  # no single stage for all
    assert calibrated.answer == "yes for 2 of 2: A, B"
    assert "No temperature was fitted for A: judged unscaled." in calibrated.detail
    rows = _verdict_rows(_page(runs))
    assert rows[0]["calibrated (scaled)?"] is None and rows[1]["calibrated (scaled)?"] == "yes"


def test_more_than_three_passes_are_counted_and_listed_in_the_detail():
    runs = [_run(f"m{i}", "yes", "yes", "yes", "yes") for i in range(5)]
    card = _summary_cards(_page(runs))[0]
    assert card.answer == "yes for 5 of 5" and "yes: m0, m1, m2, m3, m4" in card.detail


@pytest.mark.parametrize("stage", ["unscaled", "scaled"])
def test_verdicts_name_the_stage_they_judge(stage):
    word = {"unscaled": "unscaled", "scaled": "temperature-scaled"}[stage]
    assert calibration_verdict(0.01, (0.0, 0.02), stage=stage).question == (
        f"Is the {word} model calibrated?"
    )
    assert f"the {word} members'" in epistemic_verdict(0.001, None, members=5, stage=stage).question
    # without a stage the questions are unchanged (bensemble evaluate's cards)
    assert calibration_verdict(0.01, (0.0, 0.02)).question == QUESTIONS[0]
    assert verdict_dict(calibration_verdict(0.01, None), "rule")["question"] == QUESTIONS[0]


def test_empty_sets_are_explained_per_score():
    assert "LAC" in empty_set_note("lac") and "empty" in EMPTY_SETS["lac"]
    assert "u ~ U(0, 1)" in empty_set_note("aps")
    assert "never empty" in empty_set_note("raps", randomized=False)
    assert set(EMPTY_SETS) == {"lac", "aps", "raps"}


def test_metric_notes_give_units_and_the_coverage_target():
    notes = " ".join(metric_notes(has_tece=False, alpha=0.1, ece_bins=15))
    for words in ("in nats", "15 equal-width bins", "target at least 0.9", "squared-probability",
                  "T: the fitted temperature", "set_size", "empty_sets"):  # fmt: skip
        assert words in notes
    assert "TECE: " not in notes and "TECE: " in " ".join(
        metric_notes(has_tece=True, alpha=0.1, ece_bins=15)
    )
