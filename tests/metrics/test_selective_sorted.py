"""The low-memory misclassification AUROC / AURC of the chunked evaluation equal the in-memory
metrics (``auroc(1 - conf, 1 - correct)``, ``aurc(conf, correct)``) on data with many ties."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bensemble.metrics import aurc, auroc
from bensemble.metrics._selective_sorted import aurc_sorted, error_auroc_sorted


def _reference(conf: np.ndarray, ok: np.ndarray) -> tuple[float | None, float]:
    c, y = torch.from_numpy(conf), torch.from_numpy(ok.astype(np.float64))
    both = 0 < ok.sum() < ok.size
    return (auroc(1.0 - c, 1.0 - y) if both else None), aurc(c, y)


def _check(conf: np.ndarray, ok: np.ndarray, block: int) -> None:
    want_auroc, want_aurc = _reference(conf, ok)
    got_auroc = error_auroc_sorted(conf, ok, block=block)
    if want_auroc is None:
        assert got_auroc is None
    else:  # integer pair counts vs float64 rank sums: a few ulps of the value
        assert got_auroc == pytest.approx(want_auroc, rel=1e-12, abs=1e-15)
    # the same float64 terms, summed in another order: N ulps at most
    assert aurc_sorted(conf, ok, block=block) == pytest.approx(want_aurc, rel=1e-12, abs=1e-15)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 300),
    levels=st.integers(1, 40),
    accuracy=st.floats(0.0, 1.0),
    block=st.sampled_from([1, 7, 64, 1 << 18]),
    seed=st.integers(0, 2**31 - 1),
)
def test_equals_the_in_memory_metrics_with_ties(n, levels, accuracy, block, seed):
    rng = np.random.default_rng(seed)
    conf = rng.integers(0, levels, n) / max(levels - 1, 1) * 0.9 + 0.1  # many ties
    ok = rng.random(n) < accuracy
    _check(conf.astype(np.float64), ok, block)


def test_equals_the_in_memory_metrics_on_distinct_scores():
    rng = np.random.default_rng(0)
    conf = rng.random(20_000)
    ok = rng.random(20_000) < conf  # informative confidences
    _check(conf, ok, block=1000)


def test_known_values():
    conf = np.array([0.9, 0.8, 0.7, 0.6])
    ok = np.array([True, True, False, False])
    assert aurc_sorted(conf, ok) == pytest.approx(0.20833333333333331, rel=1e-15)
    assert error_auroc_sorted(conf, ok) == 1.0
    # every prediction right (or wrong): no AUROC, AURC 0 (or 1)
    assert error_auroc_sorted(conf, np.ones(4, bool)) is None
    assert aurc_sorted(conf, np.ones(4, bool)) == 0.0
    assert aurc_sorted(conf, np.zeros(4, bool)) == 1.0


def test_inputs_are_left_unchanged():
    conf = np.array([0.3, 0.9, 0.5, 0.5])
    ok = np.array([False, True, True, False])
    before = conf.copy(), ok.copy()
    error_auroc_sorted(conf, ok)
    aurc_sorted(conf, ok)
    assert np.array_equal(conf, before[0]) and np.array_equal(ok, before[1])


@pytest.mark.parametrize("levels", [5, 1000, None])
def test_risk_coverage_vertices_lie_on_the_full_curve(levels):
    from bensemble.metrics import risk_coverage_curve
    from bensemble.metrics._selective_sorted import risk_coverage_vertices

    rng = np.random.default_rng(1)
    conf = rng.random(30_000) if levels is None else rng.integers(0, levels, 30_000) / levels
    ok = rng.random(30_000) < conf
    coverage, risk, thresholds = (
        t.numpy() for t in risk_coverage_curve(torch.from_numpy(conf), torch.from_numpy(ok))
    )
    got = risk_coverage_vertices(conf, ok, max_points=200)
    assert len(got[2]) <= 200 and np.all(np.diff(got[2]) < 0)
    where = np.searchsorted(-thresholds, -got[2])  # each vertex's index on the full curve
    assert np.array_equal(thresholds[where], got[2])
    np.testing.assert_array_equal(got[0], coverage[where])
    np.testing.assert_array_equal(got[1], risk[where])
    assert got[0][-1] == 1.0 and got[1][-1] == (~ok).sum() / ok.size  # the error rate
