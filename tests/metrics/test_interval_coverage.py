"""Coverage of the 95% intervals of the ECE, classwise ECE and EECE against exact truths.

Populations whose binned calibration error is known exactly (``benchmarks/
_coverage_populations.py``; the full table is ``benchmarks/bench_interval_coverage.py``).

What "decisive" means here: each cell has 200 runs and passes at >= 180 covered (0.90). A
method with a true coverage of 0.95 fails a cell with probability 0.07% (binomial, mean 190,
sd 3.1); one with a true coverage of 0.85 passes it with probability 2.4%; the percentile method
the report used until issue 21 (coverage 0-60% at these true values) fails every cell near zero,
which :func:`test_the_old_method_fails_the_same_check` shows on the same replicates. The runs are
seeded, so the outcome is deterministic.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from bensemble.metrics.intervals import ReplicateState

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "_coverage_populations.py"
_SPEC = importlib.util.spec_from_file_location("_coverage_populations", _PATH)
populations = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(populations)

RUNS, NEEDED, REPLICATES = 200, 180, 200


def _interval(metric, population, n, run, rng, method="l1-two-step"):
    state = ReplicateState(REPLICATES, seed=run)
    if metric == "eece":
        p, y, cell = population.sample(n, rng)
        state.add_eece("x", population.h, population.m, binary=True)
        state.update(range(n), {"x": (p, y, cell)})
        return state["x"].compute()
    probs, labels = population.sample(n, rng)
    classwise = metric == "classwise_ece"
    k = probs.shape[1] if classwise else None
    state.add_calibration("x", populations.N_BINS, classwise=classwise, num_classes=k)
    state.update(range(n), {"x": (probs, labels)})
    return state["x"].compute(method=method)


def _covered(metric, truth, n, method="l1-two-step", runs=RUNS):
    population = {
        "ece": lambda t: populations.TopLabelPopulation(t, "wave"),
        "classwise_ece": populations.ClasswisePopulation,
        "eece": populations.EECEPopulation,
    }[metric](truth)
    assert population.truth == pytest.approx(truth, abs=1e-12)
    rng = np.random.default_rng(12345 + n)
    return sum(
        _interval(metric, population, n, run, rng, method).contains(population.truth)
        for run in range(runs)
    )


@pytest.mark.slow
@pytest.mark.parametrize("metric", ["ece", "classwise_ece", "eece"])
@pytest.mark.parametrize("truth", [0.0, 0.005, 0.02])
def test_coverage_at_n_2000(metric, truth):
    assert _covered(metric, truth, 2000) >= NEEDED


@pytest.mark.slow
@pytest.mark.parametrize("metric", ["ece", "classwise_ece", "eece"])
def test_coverage_at_n_10000_near_zero(metric):
    # n = 10,000 at the true value the old method missed most (0.005: 60% for the ECE); the
    # benchmark prints every cell of the grid
    assert _covered(metric, 0.005, 10_000, runs=100) >= 90


def test_the_old_method_fails_the_same_check():
    """The same harness rejects the percentile interval near zero (a fast, reduced run)."""
    old = _covered("ece", 0.0, 2000, method="debiased-percentile", runs=40)
    new = _covered("ece", 0.0, 2000, runs=40)
    assert old <= 8 < 36 <= new
