"""Misclassification AUROC / AURC replicates: row 0 = the metrics, replicate r = the metrics of the
data repeated w[:, r] times (ties included), any sample order and block size give the same."""

from __future__ import annotations

import math

import pytest
import torch

from bensemble.metrics import aurc, auroc
from bensemble.metrics.intervals import _selective_replicates as module
from bensemble.metrics.intervals import (
    percentile_interval,
    poisson_weights,
    selective_intervals,
    selective_replicates,
)


def _data(n=400, seed=0, ties=True):
    g = torch.Generator().manual_seed(seed)
    conf = torch.rand(n, generator=g, dtype=torch.float64)
    if ties:
        conf = (conf * 20).round() / 20  # many tied confidences
    correct = torch.rand(n, generator=g, dtype=torch.float64) < conf
    return conf, correct


@pytest.mark.parametrize("ties", [True, False])
def test_point_and_replicates_are_the_metrics_of_the_repeated_data(ties):
    conf, correct = _data(ties=ties)
    a, r = selective_replicates(conf, correct, range(400), 8, seed=2)
    assert float(a[0]) == pytest.approx(auroc(1 - conf, ~correct), rel=1e-12)
    assert float(r[0]) == pytest.approx(aurc(conf, correct), rel=1e-10)
    w = poisson_weights(range(400), 8, seed=2).long()
    for j in range(8):
        rep = torch.repeat_interleave(torch.arange(400), w[:, j])
        assert float(a[j + 1]) == pytest.approx(auroc(1 - conf[rep], ~correct[rep]), rel=1e-12)
        assert float(r[j + 1]) == pytest.approx(aurc(conf[rep], correct[rep]), rel=1e-9)


def test_order_and_block_size_do_not_matter(monkeypatch):
    conf, correct = _data()
    a, r = selective_replicates(conf, correct, range(400), 9, seed=1)
    perm = torch.randperm(400, generator=torch.Generator().manual_seed(3))
    monkeypatch.setattr(module, "_BLOCK_ENTRIES", 400 * 2)  # blocks of 2 replicates
    a2, r2 = selective_replicates(conf[perm], correct[perm], perm, 9, seed=1)
    torch.testing.assert_close(a2, a, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(r2, r, rtol=1e-12, atol=1e-12)


def test_intervals_and_the_no_error_case():
    conf, correct = _data()
    out = selective_intervals(*selective_replicates(conf, correct, range(400), 50))
    assert out["error_auroc"].low <= out["error_auroc"].point <= out["error_auroc"].high
    assert out["aurc"].method == "percentile" and out["aurc"].n_replicates == 50
    all_right = torch.ones(400, dtype=torch.bool)
    none = selective_intervals(*selective_replicates(conf, all_right, range(400), 20))
    assert none["error_auroc"] is None and none["aurc"].point == 0.0


def test_too_few_finite_replicates_give_no_interval_rather_than_a_zero_width_one():
    # replicates that lose every error have a NaN AUROC; with most of them NaN the interval
    # is missing, never [point, point]
    auroc = torch.tensor([0.8, 0.7, *([math.nan] * 6), 0.9, 0.75])
    aurc = torch.tensor([0.1, 0.12, 0.09, 0.11, 0.1, 0.13, 0.08, 0.1, 0.1, 0.11])
    out = selective_intervals(auroc, aurc)
    assert out["error_auroc"] is None
    assert out["aurc"].low < out["aurc"].high and out["aurc"].n_replicates == 9
    # the data's value NaN: no interval, whatever the replicates
    assert selective_intervals(torch.tensor([math.nan, 0.5, 0.6]), aurc[:3])["error_auroc"] is None


def test_the_percentiles_are_those_of_the_replicates_alone():
    values = torch.arange(101, dtype=torch.float64) / 100  # row 0 = 0.0, replicates 0.01..1.0
    out = selective_intervals(values, values, level=0.9)
    low, high = percentile_interval(values[1:], 0.9)
    assert (out["aurc"].low, out["aurc"].high, out["aurc"].point) == (low, high, 0.0)


@pytest.mark.parametrize(
    ("args", "name"),
    [
        (([0.5], [0.5]), "auroc"),  # the data's value alone: no replicate
        (([0.5, 0.4], [0.5]), "aurc"),
        (([[0.5, 0.4]], [0.5, 0.4]), "auroc"),
    ],
)
def test_intervals_refuse_rows_without_replicates_or_of_two_lengths(args, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        selective_intervals(*args)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"confidence": [0.5, 0.2], "correct": [1, 2], "sample_index": range(2)}, "correct"),
        ({"confidence": [0.5, 0.2], "correct": [1, 0], "sample_index": range(3)}, "sample_index"),
        ({"confidence": [[0.5]], "correct": [1], "sample_index": range(1)}, "confidence"),
        (
            {"confidence": [0.5], "correct": [1], "sample_index": range(1), "n_replicates": 0},
            "n_replicates",
        ),
    ],
)
def test_bad_input_names_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        selective_replicates(**kwargs)
