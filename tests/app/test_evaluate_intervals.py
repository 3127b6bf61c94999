"""``bensemble evaluate``'s intervals from streaming replicate states
(:mod:`bensemble.app.evaluate.intervals` over :mod:`bensemble.metrics.intervals`): what the
engine hands the states chunk by chunk equals one update on whole arrays, the intervals do not
depend on chunks, shards or workers, each is around the reported value, and the report says
which method each uses and what it covers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from bensemble.app.evaluate import evaluate_predictions, evaluate_shards

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _reference_evaluate import reference_evaluation  # noqa: E402

#: float64 sums of the same weighted terms in other chunks: ~n * 2.2e-16 relative.
REL = 1e-10


def _members(m=3, n=300, k=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    true = 2.0 * torch.randn(n, k, generator=g, dtype=torch.float64)
    labels = torch.multinomial(torch.softmax(true, 1), 1, generator=g).squeeze(1)
    noise = 0.4 * torch.randn(m, n, k, generator=g, dtype=torch.float64)
    return torch.softmax(1.3 * (true + noise), -1), labels


def _rows(intervals):
    return {(r["stage"], r["metric"]): r for r in intervals}


def _close(got, want, path):
    assert set(got) == set(want), path
    for key, a in want.items():
        b = got[key]
        if isinstance(a, float):
            assert b == pytest.approx(a, rel=REL, abs=1e-13), (path, key)
        else:
            assert b == a, (path, key)


def _library_intervals(ref, n_bins, n_boot, seed):
    """The library's replicate states fed the whole reported part in one update."""
    from bensemble.app.bootstrap_stats import per_sample_nll
    from bensemble.metrics._eece_stats import _member_variance
    from bensemble.metrics.intervals import (
        ReplicateState,
        selective_intervals,
        selective_replicates,
    )
    from bensemble.uncertainty import decompose_classification_uncertainty

    state = ReplicateState(n_boot, seed=seed)
    y, rows = ref["labels"], ref["rows"]
    inputs, selective = {}, {}
    stages = {"unscaled": ref["probs"]}
    if ref["scaled"] is not None:
        stages["temperature-scaled"] = ref["scaled"]
    for stage, p in stages.items():
        pred = p.argmax(1)
        for name in ("accuracy", "nll", "brier"):
            state.add_mean(f"{stage}:{name}")
        state.add_calibration(f"{stage}:ece", n_bins)
        state.add_calibration(f"{stage}:classwise_ece", n_bins, classwise=True, num_classes=4)
        onehot = torch.nn.functional.one_hot(y, 4).double()
        inputs[f"{stage}:accuracy"] = ((pred == y).double(),)
        inputs[f"{stage}:nll"] = (per_sample_nll(p, y),)
        inputs[f"{stage}:brier"] = (((p - onehot) ** 2).sum(1),)
        inputs[f"{stage}:ece"] = inputs[f"{stage}:classwise_ece"] = (p, y)
        conf = p.gather(1, pred[:, None]).squeeze(1)
        selective[stage] = (conf, pred == y)
    members = ref["members"]
    total, aleatoric, epistemic = decompose_classification_uncertainty(members)
    m, n, k = members.shape
    means = {
        "mean_total": total,
        "mean_aleatoric": aleatoric,
        "mean_epistemic": epistemic,
        "mean_member_variance": _member_variance(members.reshape(m, n * k)).view(n, k).mean(1),
    }
    for name, values in means.items():
        state.add_mean(f"ensemble:{name}")
        inputs[f"ensemble:{name}"] = (values,)
    details = ref["details"]
    state.add_eece("ensemble:eece", n_members=m, n_slots=details.counts.shape[-1], n_groups=k)
    from bensemble.metrics._epistemic_checks import canonical_member_order

    order = canonical_member_order(members)
    ordered = members if order is None else members[order]
    inputs["ensemble:eece"] = (ordered, y, details.point_bins.reshape(k, n))
    state.update(rows, inputs)
    out = {name: iv for name, iv in state.compute().items()}
    for stage, (conf, correct) in selective.items():
        for name, iv in selective_intervals(
            *selective_replicates(conf, correct, rows, n_boot, seed=seed)
        ).items():
            out[f"{stage}:{name}"] = iv
    return out


def test_the_engine_feeds_the_states_what_one_update_on_whole_arrays_gives():
    probs, labels = _members(n=400)
    kw = {"seed": 3, "eece_bins": 8}
    ev = evaluate_predictions(probs, labels, bootstrap=40, chunk_size=53, **kw)
    ref = reference_evaluation(probs, labels, **kw)
    ref["rows"] = torch.arange(400)
    want = _library_intervals(ref, 15, 40, 3)
    rows = _rows(ev.intervals)
    assert set(rows) == {tuple(key.split(":", 1)) for key in want}
    for key, iv in want.items():
        row = rows[tuple(key.split(":", 1))]
        got = {"low": row["ci_low"], "high": row["ci_high"], "method": row["method"]}
        _close(got, {"low": iv.low, "high": iv.high, "method": iv.method}, key)


def test_intervals_do_not_depend_on_chunks_shards_or_workers():
    probs, labels = _members(n=360, seed=1)
    kw = {"seed": 5, "bootstrap": 30, "eece_bins": 7, "calibration_split": 0.3}
    whole = evaluate_predictions(probs, labels, **kw).intervals
    for chunk in (1, 41):
        got = evaluate_predictions(probs, labels, chunk_size=chunk, **kw).intervals
        for a, b in zip(got, whole, strict=True):
            _close(a, b, f"chunk {chunk}")
    shards = [probs[:, :100], probs[:, 100:250], probs[:, 250:]]
    got = evaluate_shards(shards, labels, backend="serial", workers=3, **kw).intervals
    for a, b in zip(got, whole, strict=True):
        _close(a, b, "shards")


def test_each_interval_is_around_the_reported_value_and_seeded():
    probs, labels = _members(n=500, seed=2)
    kw = {"calibration_split": 0.4, "eece_bins": 6, "bootstrap": 60}
    ev = evaluate_predictions(probs, labels, seed=1, **kw)
    reported = {
        "unscaled": {**ev.metrics[0], **ev.selective[0]},
        "temperature-scaled": {**ev.metrics[1], **ev.selective[1]},
        "scaled - unscaled": {"nll": ev.metrics[1]["nll"] - ev.metrics[0]["nll"]},
        "conformal": ev.conformal,
        "ensemble": ev.ensemble,
    }
    assert len(ev.intervals) == 23
    for row in ev.intervals:
        assert row["value"] == reported[row["stage"]][row["metric"]]
        if row["method"] == "percentile":  # a percentile interval holds its point
            assert row["ci_low"] <= row["value"] <= row["ci_high"], row
        else:
            assert row["metric"] in ("ece", "classwise_ece", "eece")
            assert 0.0 <= row["ci_low"] <= row["ci_high"], row
    again = evaluate_predictions(probs, labels, seed=1, **kw).intervals
    other = evaluate_predictions(probs, labels, seed=2, **kw).intervals
    assert again == ev.intervals and other != ev.intervals


def test_the_report_says_which_method_each_interval_uses_and_what_it_covers():
    probs, labels = _members(n=300)
    ev = evaluate_predictions(probs, labels, bootstrap=20, eece_bins=6)
    notes = " ".join(ev.table_notes("intervals"))
    for phrase in ("Poisson", "percentile", "l1-two-step", "valid near zero", "bins held fixed"):
        assert phrase in notes
    assert "Poisson bootstrap" in dict((n, t) for n, t, _ in ev.tables())["intervals"]
    assert "two-step" in ev.verdicts[0]["rule"] and ev.setup["ece_calibrated_q95"] is None


def test_a_state_too_large_to_hold_is_left_out_with_a_note(monkeypatch):
    import bensemble.metrics.intervals._replicates as R

    probs, labels = _members(n=200)
    # room for the means and the ECE states (21 x 61), not the EECE's 21 x 4 x 10 x 7 numbers
    monkeypatch.setattr(R, "MAX_STATE_ENTRIES", 3_000)
    ev = evaluate_predictions(probs, labels, bootstrap=20, eece_bins=10)
    metrics = {(r["stage"], r["metric"]) for r in ev.intervals}
    assert ("ensemble", "eece") not in metrics and ("unscaled", "ece") in metrics
    assert any("No interval for ensemble:eece" in note for note in ev.notes)
    assert ev.verdicts[2]["ci_low"] is None and "No interval" in ev.verdicts[2]["detail"]
