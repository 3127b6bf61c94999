"""The vectorised bootstrap of :mod:`bensemble.app.bootstrap`.

Every statistic is checked two ways: with all-ones weights it equals the library's metric on the
sample, and with the counts of an explicit resample it equals the library's metric on that
resample (so the weighted formulas are the metrics, not approximations). Then the intervals:
they cover the true value on data with known calibration, narrow with N, and are seeded.
"""

from __future__ import annotations

import pytest
import torch

from bensemble import metrics as M
from bensemble.app.bootstrap import (
    BootstrapPlan,
    calibrated_ece_null,
    check_bootstrap,
    multinomial_weights,
    percentile_interval,
)
from bensemble.metrics._binning import uniform_bin_ids


def _data(n=300, k=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    probs = torch.softmax(2.0 * torch.randn(n, k, generator=g, dtype=torch.float64), -1)
    labels = torch.multinomial(probs, 1, generator=g).squeeze(1)
    return probs, labels


def _plan(probs, labels, n_bins=10):
    n, k = probs.shape
    conf, pred = probs.max(1)
    correct = (pred == labels).to(torch.float64)
    onehot = torch.nn.functional.one_hot(labels, k).to(torch.float64)
    plan = BootstrapPlan(n)
    plan.mean("accuracy", correct)
    plan.mean("brier", ((probs - onehot) ** 2).sum(1))
    plan.binned_gap("ece", uniform_bin_ids(conf, n_bins), correct - conf, n_bins + 1)
    ids = uniform_bin_ids(probs, n_bins)
    plan.binned_gap("classwise_ece", ids, onehot - probs, n_bins + 1)
    plan.selective("auroc", "aurc", conf, correct)
    return plan


def _library(probs, labels, n_bins=10):
    conf, pred = probs.max(1)
    correct = (pred == labels).to(torch.float64)
    return {
        "accuracy": M.accuracy(probs, labels),
        "brier": M.brier_score(probs, labels),
        "ece": M.expected_calibration_error(probs, labels, n_bins=n_bins),
        "classwise_ece": M.classwise_calibration_error(probs, labels, n_bins=n_bins),
        "auroc": M.auroc(1.0 - conf, 1.0 - correct),
        "aurc": M.aurc(conf, correct),
    }


def test_all_ones_weights_give_the_library_metrics():
    probs, labels = _data()
    got = _plan(probs, labels).evaluate(torch.ones(1, probs.shape[0]))
    for name, value in _library(probs, labels).items():
        assert got[name].item() == pytest.approx(value, rel=1e-12, abs=1e-14), name


def test_resample_weights_give_the_metrics_of_the_resample():
    # ties (a point drawn twice) and coarse confidences stress AUROC / AURC tie handling
    probs, labels = _data(n=120, k=3, seed=1)
    probs = (probs * 8).round() + 1e-3
    probs = probs / probs.sum(1, keepdim=True)
    plan = _plan(probs, labels)
    g = torch.Generator().manual_seed(5)
    for _ in range(3):
        idx = torch.randint(120, (120,), generator=g)
        w = torch.bincount(idx, minlength=120).to(torch.float64)[None]
        got = plan.evaluate(w)
        for name, value in _library(probs[idx], labels[idx]).items():
            assert got[name].item() == pytest.approx(value, rel=1e-10, abs=1e-13), name


def test_eece_with_fixed_bins_matches_the_library_on_a_resample():
    g = torch.Generator().manual_seed(2)
    h, n = 3, 200
    p = torch.rand(h, n, generator=g, dtype=torch.float64)
    y = torch.randint(0, 2, (n,), generator=g)
    ids = torch.randint(0, 7, (n,), generator=g)
    plan = BootstrapPlan(n)
    plan.eece("eece", p, (y == 1).to(torch.float64), p.var(0, unbiased=False), ids, 1, 7)
    idx = torch.randint(n, (n,), generator=g)
    w = torch.bincount(idx, minlength=n).to(torch.float64)[None]
    ref = M.expected_epistemic_calibration_error(p[:, idx], y[idx], bins=ids[idx], binary=True)
    assert plan.evaluate(w)["eece"].item() == pytest.approx(ref, rel=1e-10)
    ones = M.expected_epistemic_calibration_error(p, y, bins=ids, binary=True)
    assert plan.evaluate(torch.ones(1, n))["eece"].item() == pytest.approx(ones, rel=1e-12)


def test_weights_are_multinomial_counts_seeded_and_block_independent(monkeypatch):
    blocks = list(multinomial_weights(50, 7, seed=3))
    w = torch.cat(blocks)
    assert w.shape == (7, 50) and torch.all(w.sum(1) == 50) and torch.all(w == w.round())
    assert torch.equal(w, torch.cat(list(multinomial_weights(50, 7, seed=3))))
    assert not torch.equal(w, torch.cat(list(multinomial_weights(50, 7, seed=4))))
    monkeypatch.setattr("bensemble.app.bootstrap._BLOCK_ENTRIES", 100)  # blocks of 2 rows
    small = list(multinomial_weights(50, 7, seed=3))
    assert len(small) == 4 and torch.equal(torch.cat(small), w)


def _calibrated(n, seed):
    """Confidences of a perfectly calibrated binary model: P(correct) = confidence."""
    g = torch.Generator().manual_seed(seed)
    p1 = torch.rand(n, generator=g, dtype=torch.float64)
    y = torch.bernoulli(p1, generator=g).to(torch.int64)
    return torch.stack([1 - p1, p1], 1), y


def _nll_plan(probs, labels):
    plan = _plan(probs, labels)
    p_y = probs.gather(1, labels[:, None]).squeeze(1)
    plan.mean("nll", -(p_y + 1e-8).log())
    return plan


#: Population values of the calibrated model of :func:`_calibrated`, p ~ U(0, 1):
#: accuracy E[max(p, 1 - p)] = 3/4, NLL E[binary entropy] = 1/2 nat, Brier E[2 p (1 - p)] = 1/3.
TRUE = {"accuracy": 0.75, "nll": 0.5, "brier": 1.0 / 3.0}


def test_intervals_cover_the_true_values_and_narrow_with_n():
    # 20 fixed seeds per size: a 95% interval misses about once in 20; we ask for at least 16
    # hits per metric (Binomial(20, 0.95) < 16 has probability 3e-4, and the data are fixed).
    widths = {}
    for n in (400, 3200):
        hits = dict.fromkeys(TRUE, 0)
        width = []
        for seed in range(20):
            probs, labels = _calibrated(n, seed)
            reps = _nll_plan(probs, labels).run(200, seed=seed)
            for name, true in TRUE.items():
                lo, hi = percentile_interval(reps[name])
                hits[name] += lo <= true <= hi
            lo, hi = percentile_interval(reps["accuracy"])
            width.append(hi - lo)
        assert all(h >= 16 for h in hits.values()), (n, hits)
        widths[n] = sum(width) / len(width)
    # sd ~ 1 / sqrt(n): eight times the points, about sqrt(8) = 2.8 times narrower
    assert 2.0 < widths[400] / widths[3200] < 4.0


def test_calibrated_null_is_above_the_ece_of_calibrated_data_and_below_miscalibrated():
    probs, labels = _calibrated(1000, 0)
    conf = probs.max(1).values
    ids = uniform_bin_ids(conf, 15)
    null = calibrated_ece_null(conf, ids, 16, 300, seed=0)
    q95 = torch.quantile(null, 0.95).item()
    assert M.expected_calibration_error(probs, labels, n_bins=15) < q95
    sharp = torch.softmax(4.0 * probs.log(), 1)  # overconfident
    conf_s = sharp.max(1).values
    null_s = calibrated_ece_null(conf_s, uniform_bin_ids(conf_s, 15), 16, 300, seed=0)
    assert M.expected_calibration_error(sharp, labels, n_bins=15) > torch.quantile(null_s, 0.95)


def test_percentile_interval_and_nan_replicates():
    assert percentile_interval(torch.arange(101, dtype=torch.float64)) == pytest.approx((2.5, 97.5))
    v = torch.tensor([1.0, float("nan"), float("nan"), float("nan")])
    assert percentile_interval(v) is None
    assert percentile_interval(torch.empty(0)) is None


def test_b_zero_runs_nothing():
    probs, labels = _data(n=20)
    out = _plan(probs, labels).run(0, seed=0)
    assert all(v.numel() == 0 for v in out.values())


@pytest.mark.parametrize("bad", [-1, 1.5, True, "10", 10**6])
def test_check_bootstrap_rejects(bad):
    with pytest.raises(ValueError, match="`--bootstrap` must be an integer in"):
        check_bootstrap(bad, "--bootstrap", "f")
    assert check_bootstrap(0, "b", "f") == 0
