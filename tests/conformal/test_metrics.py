"""Prediction-set metrics against plain loops."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bensemble.conformal import (
    coverage,
    empty_set_rate,
    mean_set_size,
    per_class_coverage,
    size_stratified_coverage,
)


def _random_sets(seed, n=300, k=6):
    rng = np.random.default_rng(seed)
    sets = rng.random((n, k)) < rng.random((n, 1))
    labels = rng.integers(0, k - 1, size=n)  # the last class never occurs
    return sets, labels


def _reference_loop(sets, labels):
    n, k = sets.shape
    covered = [bool(sets[i, labels[i]]) for i in range(n)]
    sizes = [int(sets[i].sum()) for i in range(n)]
    per_class = []
    for c in range(k):
        rows = [covered[i] for i in range(n) if labels[i] == c]
        per_class.append(sum(rows) / len(rows) if rows else math.nan)
    by_size = []
    for m in range(k + 1):
        rows = [covered[i] for i in range(n) if sizes[i] == m]
        by_size.append((len(rows), sum(rows) / len(rows) if rows else math.nan))
    return {
        "coverage": sum(covered) / n,
        "size": sum(sizes) / n,
        "empty": sum(s == 0 for s in sizes) / n,
        "per_class": per_class,
        "by_size": by_size,
    }


@pytest.mark.parametrize("seed", range(3))
def test_metrics_match_loop(seed):
    sets, labels = _random_sets(seed)
    ref = _reference_loop(sets, labels)
    assert coverage(sets, labels) == pytest.approx(ref["coverage"], abs=1e-15)
    assert mean_set_size(sets) == pytest.approx(ref["size"], abs=1e-15)
    assert empty_set_rate(sets) == pytest.approx(ref["empty"], abs=1e-15)
    torch.testing.assert_close(
        per_class_coverage(sets, labels),
        torch.tensor(ref["per_class"], dtype=torch.float64),
        equal_nan=True,
    )
    strat = size_stratified_coverage(sets, labels)
    assert strat.sizes.tolist() == list(range(7))
    assert strat.counts.tolist() == [c for c, _ in ref["by_size"]]
    torch.testing.assert_close(
        strat.coverage,
        torch.tensor([v for _, v in ref["by_size"]], dtype=torch.float64),
        equal_nan=True,
    )
    assert int(strat.counts.sum()) == len(labels)


def test_scalars_are_python_floats_and_int_masks_accepted():
    sets = np.array([[1, 0, 0], [1, 1, 0]])
    labels = np.array([0, 2])
    for value in (coverage(sets, labels), mean_set_size(sets), empty_set_rate(sets)):
        assert type(value) is float
    assert coverage(sets, labels) == 0.5
    assert math.isnan(float(per_class_coverage(sets, labels)[1]))


@pytest.mark.parametrize(
    "sets, labels, arg",
    [
        pytest.param([[0.5, 1.0]], [0], "sets", id="float-mask"),
        pytest.param([[2, 0]], [0], "sets", id="non-binary"),
        pytest.param([True, False], [0], "sets", id="1-D"),
        pytest.param(np.zeros((0, 2), dtype=bool), np.zeros(0, dtype=int), "sets", id="empty"),
        pytest.param([[True, False]], [2], "labels", id="label-range"),
        pytest.param([[True, False]], [0, 1], "labels", id="label-length"),
        pytest.param([[True, False]], [0.0], "labels", id="label-float"),
    ],
)
@pytest.mark.parametrize(
    "fn", [coverage, per_class_coverage, size_stratified_coverage], ids=lambda f: f.__name__
)
def test_bad_inputs_raise(sets, labels, arg, fn):
    with pytest.raises(ValueError, match=f"{fn.__name__}: `{arg}`"):
        fn(np.asarray(sets), np.asarray(labels))


@pytest.mark.parametrize("fn", [mean_set_size, empty_set_rate], ids=lambda f: f.__name__)
def test_bad_sets_raise(fn):
    with pytest.raises(ValueError, match="`sets`"):
        fn(np.array([[0.5, 1.0]]))
