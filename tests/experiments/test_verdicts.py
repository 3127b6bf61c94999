"""The verdict rule (bensemble.experiments.verdicts): the issue's cases and the rule's pieces."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from bensemble.experiments.verdicts import (
    ACCURACY_MAX_GAP,
    DIFFERS,
    HOLDS,
    NOT_COMPARABLE,
    PaperValue,
    compare,
    compare_values,
    finding_verdict,
)


# ----------------------------------------------------------------------------- the cases
def test_size_at_50_points_differs_from_the_papers_0007():
    # 0.0190 +- 0.0019 over 5 repeats against 0.007: the old max(0.02, 0.3 p) rule said "holds"
    v = compare(0.019, 0.0019, 5, "0.007")
    assert v.verdict == DIFFERS
    assert abs(0.019 - 0.007) <= max(0.02, 0.3 * 0.007)  # what the old rule accepted


def test_an_accuracy_008_below_the_papers_differs_even_when_spread_out():
    assert compare(0.91, 0.005, 10, "0.99", accuracy=True).verdict == DIFFERS
    # a wide spread would make the interval reach 0.99; the accuracy scale still says no
    assert compare(0.91, 0.1, 10, "0.99").verdict == HOLDS
    v = compare(0.91, 0.1, 10, "0.99", accuracy=True)
    assert v.verdict == DIFFERS and "accuracy" in v.note
    assert compare(0.79, 0.3, 10, "0.99", accuracy=True).verdict == DIFFERS  # 0.2 below


def test_quick_runs_are_not_comparable():
    v = compare(0.019, 0.0019, 5, "0.007", quick=True)
    assert v.verdict == NOT_COMPARABLE and "quick" in v.note
    assert finding_verdict([True] * 5, quick=True).verdict == NOT_COMPARABLE


def test_size_at_10_points_holds_with_a_wide_interval_note():
    v = compare(0.0609, 0.045, 5, "0.07")
    assert v.verdict == HOLDS
    assert v.note.startswith("wide interval")


# ----------------------------------------------------------------------------- the rule's pieces
def test_the_interval_is_students_prediction_interval():
    mean, sd, n = 0.3, 0.05, 4
    half = stats.t.ppf(0.975, n - 1) * sd * math.sqrt(1 / n + 1)
    v = compare(mean, sd, n, "0.30")
    assert v.interval == f"[{mean - half:.4g}, {mean + half:.4g}]"
    # a paper value averaging 10 runs narrows it
    half10 = stats.t.ppf(0.975, n - 1) * sd * math.sqrt(1 / n + 1 / 10)
    assert compare(mean, sd, n, "0.30", paper_repeats=10).interval == (
        f"[{mean - half10:.4g}, {mean + half10:.4g}]"
    )
    # the interval ends at 0.4779: "0.48" ([0.475, 0.485]) meets it, "0.49" does not, and
    # "0.480" (band [0.4795, 0.4805]) does not either: the printed digits set the band
    assert 0.475 < mean + half < 0.4795
    assert compare(mean, sd, n, "0.48").verdict == HOLDS
    assert compare(mean, sd, n, "0.49").verdict == DIFFERS
    assert compare(mean, sd, n, "0.480").verdict == DIFFERS


def test_a_paper_zero_is_a_rounding_band_not_a_free_pass():
    assert compare(0.004, 0.0001, 5, "0.00").verdict == HOLDS
    assert compare(0.0074, 0.0003, 5, "0.00").verdict == DIFFERS


def test_approximate_values_get_the_relative_band():
    assert compare(7.9, 0.3, 5, "~10").verdict == HOLDS
    assert compare(5.0, 0.3, 5, "~10").verdict == DIFFERS


@pytest.mark.parametrize(
    "kwargs, why",
    [
        ({"n": 1, "sd": None}, "single repeat"),
        ({"paper": "n/a"}, "no number"),
        ({"paper": None}, "no number"),
        ({"stand_in": "MNIST's value; digits is a stand-in"}, "stand-in"),
    ],
)
def test_not_comparable_says_why(kwargs, why):
    args = {"mean": 0.1, "sd": 0.01, "n": 5, "paper": "0.10", **kwargs}
    v = compare(**args)
    assert v.verdict == NOT_COMPARABLE and why in v.note and v.interval == ""


def test_compare_values_uses_the_repeats():
    values = [0.02, 0.018, 0.021, None, 0.017, 0.019]
    direct = compare(0.019, float(stats.tstd([0.02, 0.018, 0.021, 0.017, 0.019])), 5, "0.007")
    assert compare_values(values, "0.007") == direct


def test_findings_hold_in_at_least_80_percent_of_repeats():
    assert finding_verdict([True, True, True, True, False]).verdict == HOLDS
    v = finding_verdict([True, True, True, False, False])
    assert v.verdict == DIFFERS and v.ours == "holds in 3 of 5 repeats"
    assert finding_verdict([True]).verdict == NOT_COMPARABLE


def test_paper_value_parsing():
    p = PaperValue.parse("0.07")
    assert (p.value, p.text) == (0.07, "0.07") and (p.low, p.high) == pytest.approx((0.065, 0.075))
    p = PaperValue.parse(0.007)
    assert (p.low, p.high) == pytest.approx((0.0065, 0.0075))
    p = PaperValue.parse("~200")
    assert (p.low, p.high) == (150.0, 250.0)
    p = PaperValue.parse("0.007 (size plateau at 50 points)")
    assert p.value == 0.007 and p.text.endswith("points)")
    assert PaperValue.parse(200).high == 200.5
    for text in ("n/a", "yes (text)", None, float("nan"), True):
        assert PaperValue.parse(text) is None
    mean = PaperValue.mean_of(["0.07", "0.09", "0.10"])
    assert mean.value == pytest.approx(0.26 / 3) and mean.high - mean.value == pytest.approx(0.005)
    with pytest.raises(ValueError, match="`printed`"):
        PaperValue.mean_of(["0.1", "n/a"])


def test_accuracy_gap_constant_is_the_documented_one():
    assert ACCURACY_MAX_GAP == 0.05
