"""The selective metrics' bounded-memory sweep (:mod:`bensemble.app.evaluate.ranked`): its
point values are the library's AUROC and AURC, its replicates those of
:func:`bensemble.metrics.intervals.selective_replicates` on the same rows, and its risk-coverage
vertices lie on the curve - for any block size, any split into merged states, ties or none."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import bensemble.app.evaluate.ranked as ranked_module
from bensemble.app.evaluate.ranked import Ranked
from bensemble.metrics import aurc, auroc, risk_coverage_curve

#: float64 sums of the same terms in another grouping (blocks, merged states): ~n * eps
#: relative for these n <= 2,000 terms; the AURC's harmonic numbers come from the digamma
#: function here and from a running sum in the library (1e-13 apart at these n).
REL = 1e-10


def _ranked(conf, correct, rows, cuts):
    """A state built from the pieces ``cuts`` apart, merged."""
    edges = [0, *cuts, len(conf)]
    state = None
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        part = Ranked(b - a)
        part.add(conf[a:b], correct[a:b], rows[a:b])
        state = part if state is None else state.merge(part)
    return state


@st.composite
def _samples(draw):
    n = draw(st.integers(1, 300))
    levels = draw(st.sampled_from([3, 20, 10**6]))  # tie-heavy to tie-free
    g = np.random.default_rng(draw(st.integers(0, 2**31)))
    conf = np.round(g.random(n) * levels) / levels
    correct = g.random(n) < draw(st.floats(0.0, 1.0))
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, n - 1)), max_size=3))) - {n})
    return conf, correct, g.permutation(3 * n)[:n], cuts, draw(st.integers(1, 64))


@given(_samples())
def test_point_values_are_the_library_auroc_and_aurc(sample):
    conf, correct, rows, cuts, block = sample
    got_auroc, got_aurc = _ranked(conf, correct, rows, cuts).finish(block=block)
    c, ok = torch.from_numpy(conf), torch.from_numpy(correct.astype(np.float64))
    assert got_aurc[0] == pytest.approx(aurc(c, ok), rel=REL, abs=1e-15)
    errors = int((~correct).sum())
    if 0 < errors < len(conf):
        assert got_auroc[0] == pytest.approx(auroc(1.0 - c, 1.0 - ok), rel=REL)
    else:
        assert np.isnan(got_auroc[0])


@given(_samples())
def test_vertices_lie_on_the_risk_coverage_curve(sample):
    conf, correct, rows, cuts, block = sample
    state = _ranked(conf, correct, rows, cuts)
    state.finish(block=block)
    coverage, risk, thresholds = state.vertices(max_points=7, block=block)
    full = risk_coverage_curve(torch.from_numpy(conf), torch.from_numpy(correct * 1.0))
    index = {float(t): i for i, t in enumerate(full[2].tolist())}
    assert thresholds[0] == conf.max() and thresholds[-1] == conf.min()
    assert coverage[-1] == 1.0 and np.all(np.diff(thresholds) < 0)
    for cov, r, t in zip(coverage, risk, thresholds, strict=True):
        i = index[float(t)]
        assert (cov, r) == pytest.approx((float(full[0][i]), float(full[1][i])), rel=1e-12)


@pytest.mark.parametrize("ties", [False, True])
def test_replicates_are_the_librarys_on_the_same_rows(monkeypatch, ties):
    from bensemble.metrics.intervals import selective_replicates

    g = np.random.default_rng(3)
    n = 1500
    conf = g.random(n)
    conf = np.round(conf * 15) / 15 if ties else conf
    correct = g.random(n) < conf
    rows = g.permutation(4 * n)[:n]
    monkeypatch.setattr(ranked_module, "_BLOCK_VALUES", 37 * 41)  # many small blocks
    got_auroc, got_aurc = _ranked(conf, correct, rows, [400, 900]).finish(40, seed=11, block=53)
    want_auroc, want_aurc = selective_replicates(conf, correct, rows, 40, seed=11)
    np.testing.assert_allclose(got_auroc, want_auroc.numpy(), rtol=REL)
    np.testing.assert_allclose(got_aurc, want_aurc.numpy(), rtol=REL)
