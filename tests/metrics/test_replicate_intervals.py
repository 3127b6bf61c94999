"""Replicate states: the point row is today's metric, replicate r is the metric of the data
repeated w[:, r] times, one chunk == many chunks == merged shards, failed updates change nothing."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from bensemble.metrics import (
    classwise_calibration_error,
    expected_calibration_error,
    expected_epistemic_calibration_error,
    reliability_diagram,
)
from bensemble.metrics.intervals import (
    CalibrationReplicates,
    EECEReplicates,
    Interval,
    MeanReplicates,
    ReplicateState,
    poisson_weights,
)

N, K, H, M, R = 300, 4, 5, 7, 16
REL = 1e-10  # float64 sums in another order


def _data(seed=0, n=N, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    members = torch.softmax(2 * torch.randn(H, n, K, generator=g, dtype=torch.float64), -1)
    labels = torch.randint(0, K, (n,), generator=g)
    bins = torch.randint(0, M, (K, n), generator=g)
    return members.mean(0).to(dtype), members, labels, bins


def _close(a, b, rel=REL):
    torch.testing.assert_close(
        torch.as_tensor(a, dtype=torch.float64),
        torch.as_tensor(b, dtype=torch.float64),
        rtol=rel,
        atol=rel,
    )


# ------------------------------------------------------------------------- point row
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_point_is_the_metric(dtype):
    probs, members, labels, bins = _data(dtype=dtype)
    w = poisson_weights(range(N), R)
    top = CalibrationReplicates(15, n_replicates=R).update(w, probs, labels)
    cw = CalibrationReplicates(15, classwise=True, num_classes=K, n_replicates=R)
    cw.update(w, probs, labels)
    assert top.compute().point == pytest.approx(expected_calibration_error(probs, labels), rel=REL)
    assert cw.compute().point == pytest.approx(classwise_calibration_error(probs, labels), rel=REL)
    # the top-label bins are the reliability diagram's
    assert top.bins().counts.tolist() == reliability_diagram(probs, labels)["counts"]
    # the replicate row 0 (a sparse product) agrees with the metric's own bin sums
    _close(top.replicate_terms()[0].abs().sum(), expected_calibration_error(probs, labels))


def test_eece_point_is_the_metric_with_the_same_bins():
    _, members, labels, bins = _data()
    details = expected_epistemic_calibration_error(
        members, labels, n_bins=M, seed=0, return_details=True
    )
    state = EECEReplicates(H, details.counts.shape[-1], n_groups=K, n_replicates=R)
    state.update(poisson_weights(range(N), R), members, labels, details.point_bins)
    assert state.compute().point == pytest.approx(details.value, rel=REL)
    shared = expected_epistemic_calibration_error(members, labels, bins=bins[0])
    state = EECEReplicates(H, M, n_groups=K, n_replicates=R)
    state.update(poisson_weights(range(N), R), members, labels, bins[0])
    assert state.compute().point == pytest.approx(shared, rel=REL)
    binary = expected_epistemic_calibration_error(
        members[:, :, 1], (labels == 1).long(), bins=bins[1], binary=True
    )
    state = EECEReplicates(H, M, binary=True, n_replicates=R)
    state.update(poisson_weights(range(N), R), members[:, :, 1], (labels == 1).long(), bins[1])
    assert state.compute().point == pytest.approx(binary, rel=REL)


# ------------------------------------------------------------------------- replicate rows
def test_replicates_are_the_metric_of_the_repeated_data():
    """Integer weights are resample counts: replicate r = the point of the data repeated."""
    probs, members, labels, bins = _data(n=120)
    w = poisson_weights(range(120), 6, seed=3)
    mean = MeanReplicates(6).update(w, probs[:, 0])
    top = CalibrationReplicates(10, n_replicates=6).update(w, probs, labels)
    cw = CalibrationReplicates(10, classwise=True, num_classes=K, n_replicates=6)
    cw.update(w, probs, labels)
    eece = EECEReplicates(H, M, n_groups=K, n_replicates=6).update(w, members, labels, bins)
    for r in range(6):
        rep = torch.repeat_interleave(torch.arange(120), w[:, r].long())
        ones = torch.ones(rep.numel(), 1, dtype=torch.float64)
        _close(mean.replicate_values()[r + 1], probs[rep, 0].mean())
        _close(
            top.replicate_terms()[r + 1].abs().sum(),
            expected_calibration_error(probs[rep], labels[rep], 10),
        )
        _close(
            cw.replicate_terms()[r + 1].abs().sum(),
            classwise_calibration_error(probs[rep], labels[rep], 10),
        )
        alone = EECEReplicates(H, M, n_groups=K, n_replicates=1)
        alone.update(ones, members[:, rep], labels[rep], bins[:, rep])
        _close(eece.plug_in_values()[r + 1], alone.plug_in_values()[0])
        _close(eece.replicate_terms()[r + 1], alone.replicate_terms()[0])


def _reference_u_statistic_eece_terms(members, labels, bins):
    """Bias-corrected per-bin EECE terms by an explicit loop over pairs of distinct points."""
    h, n, k = members.shape
    out = torch.zeros(k, M, dtype=torch.float64)
    for c in range(k):
        y = (labels == c).double()
        for m in range(M):
            idx = torch.nonzero(bins[c] == m).flatten().tolist()
            if len(idx) < 2:
                continue
            pairs = [(i, j) for i in idx for j in idx if i != j]
            d = y[None, :] - members[:, :, c]  # [H, n]
            sq = sum(float((d[:, i] * d[:, j]).mean()) for i, j in pairs) / len(pairs)
            eu = float(members[:, idx, c].var(0, unbiased=False).mean())
            out[c, m] = len(idx) / n * (sq - eu) / k
    return out.reshape(-1)


def test_bias_corrected_eece_terms_are_the_u_statistic():
    _, members, labels, bins = _data(n=60)
    state = EECEReplicates(H, M, n_groups=K, n_replicates=2)
    state.update(poisson_weights(range(60), 2), members, labels, bins)
    _close(state.replicate_terms()[0], _reference_u_statistic_eece_terms(members, labels, bins))


def test_bias_correction_removes_the_plug_in_bias():
    """Calibrated members with zero epistemic gap: E[plug-in] > 0, E[corrected terms] = 0."""
    g = torch.Generator().manual_seed(1)
    n, reps, values = 400, 60, []
    for _ in range(reps):
        p = 0.3 + 0.4 * torch.rand(1, n, generator=g, dtype=torch.float64).expand(H, n)
        y = (torch.rand(n, generator=g, dtype=torch.float64) < p[0]).long()
        state = EECEReplicates(H, 4, binary=True, n_replicates=1)
        state.update(torch.ones(n, 1), p, y, (p[0] * 10).long() % 4)
        values.append(state.replicate_terms()[0].sum())
    plug_bias = float(state.plug_in_values()[0])
    mean, sd = float(torch.stack(values).mean()), float(torch.stack(values).std())
    assert abs(mean) < 4 * sd / reps**0.5
    assert plug_bias > 0


# ------------------------------------------------------------------------- merging
def _state(seed=0):
    s = ReplicateState(R, seed=seed)
    s.add_mean("acc")
    s.add_calibration("ece", 15)
    s.add_calibration("cw", 15, classwise=True, num_classes=K)
    s.add_eece("eece", H, M, n_groups=K)
    return s


def _inputs(probs, members, labels, bins, rows):
    correct = (probs[rows].argmax(1) == labels[rows]).double()
    return {
        "acc": (correct,),
        "ece": (probs[rows], labels[rows]),
        "cw": (probs[rows], labels[rows]),
        "eece": (members[:, rows], labels[rows], bins[:, rows]),
    }


def _same_states(a, b, rel=REL):
    for name in a.names:
        for key, value in a[name].state.items():
            _close(value, b[name].state[key], rel)
    ia, ib = a.compute(), b.compute()
    for name in ia:
        for field in ("point", "low", "high", "estimate"):
            assert getattr(ia[name], field) == pytest.approx(getattr(ib[name], field), rel=1e-9)


@given(cuts=st.lists(st.integers(1, N - 1), max_size=5, unique=True))
def test_one_chunk_equals_any_chunking_and_merged_shards(cuts):
    probs, members, labels, bins = _data()
    whole = _state().update(range(N), _inputs(probs, members, labels, bins, slice(0, N)))
    edges = [0, *sorted(cuts), N]
    chunked, shards = _state(), []
    for a, b in zip(edges[:-1], edges[1:]):
        args = _inputs(probs, members, labels, bins, slice(a, b))
        chunked.update(range(a, b), args)
        shards.append(_state().update(range(a, b), args))
    _same_states(whole, chunked)
    merged = shards[0]
    for shard in shards[1:]:
        merged.merge(shard)
    _same_states(whole, merged)


def test_shuffled_rows_with_their_indices_give_the_same_state():
    probs, members, labels, bins = _data()
    perm = torch.randperm(N, generator=torch.Generator().manual_seed(2))
    whole = _state().update(range(N), _inputs(probs, members, labels, bins, slice(0, N)))
    shuffled = _state().update(perm, _inputs(probs, members, labels, bins, perm))
    _same_states(whole, shuffled)


def test_standalone_update_equals_the_bundle():
    probs, members, labels, bins = _data()
    bundle = _state(seed=5).update(range(N), _inputs(probs, members, labels, bins, slice(0, N)))
    w = poisson_weights(range(N), R, seed=5)
    top = CalibrationReplicates(15, n_replicates=R).update(w, probs, labels)
    for key, value in top.state.items():
        _close(value, bundle["ece"].state[key])


def test_failed_update_changes_nothing():
    probs, members, labels, bins = _data()
    s = _state().update(range(100), _inputs(probs, members, labels, bins, slice(0, 100)))
    before = copy.deepcopy({n: {k: v.clone() for k, v in s[n].state.items()} for n in s.names})
    bad = _inputs(probs, members, labels, bins, slice(100, 200))
    bad["eece"] = (members[:, 100:200], labels[100:200], bins[:, 100:200] + M)  # out of range
    with pytest.raises(ValueError, match="`point_bins`"):
        s.update(range(100, 200), bad)
    for n in s.names:
        for k, v in s[n].state.items():
            assert torch.equal(v, before[n][k])


def test_merge_refuses_other_seeds_names_and_itself():
    a, b = _state(seed=0), _state(seed=1)
    with pytest.raises(ValueError, match="`other`"):
        a.merge(b)
    with pytest.raises(ValueError, match="`other`"):
        a.merge(a)
    c = ReplicateState(R, seed=0)
    c.add_mean("acc")
    with pytest.raises(ValueError, match="`other`"):
        a.merge(c)
    with pytest.raises(ValueError, match="`other`"):
        a["ece"].merge(CalibrationReplicates(10, n_replicates=R))


# ------------------------------------------------------------------------- intervals
def test_intervals_state_their_method_and_what_they_cover():
    probs, members, labels, bins = _data()
    out = _state().update(range(N), _inputs(probs, members, labels, bins, slice(0, N))).compute()
    assert {k: v.method for k, v in out.items()} == {
        "acc": "percentile",
        "ece": "l1-two-step",
        "cw": "l1-two-step",
        "eece": "l1-two-step",
    }
    assert all(isinstance(v, Interval) and v.low <= v.estimate <= v.high for v in out.values())
    assert "15 equal-width bins held fixed" in out["ece"].covers
    assert "conditional on the bins" in out["eece"].covers
    assert all(isinstance(getattr(v, f), float) for v in out.values() for f in ("low", "high"))


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda: CalibrationReplicates(0), "n_bins"),
        (lambda: CalibrationReplicates(10, classwise=True), "num_classes"),
        (lambda: CalibrationReplicates(10, n_replicates=0), "n_replicates"),
        (lambda: EECEReplicates(2, 3, n_groups=2, binary=True), "n_groups"),
        (lambda: EECEReplicates(50, 4000, n_groups=1000), "replicate state"),
        (lambda: MeanReplicates(covers=3), "covers"),
        (lambda: ReplicateState(10, level=1.0), "level"),
        (lambda: ReplicateState(10, seed=-3), "seed"),
    ],
)
def test_bad_settings_name_the_argument(make, name):
    with pytest.raises(ValueError, match=name):
        make()


def test_bad_chunks_name_the_argument():
    probs, members, labels, bins = _data()
    s = _state()
    w = poisson_weights(range(10), R)
    with pytest.raises(ValueError, match="`weights`"):
        s["acc"].update(w[:, :3], torch.ones(10))
    with pytest.raises(ValueError, match="`values`"):
        s["acc"].update(w, torch.full((10,), float("nan")))
    with pytest.raises(ValueError, match="`probs`"):
        s["cw"].update(w, probs[:10, :3], labels[:10])
    with pytest.raises(ValueError, match="`member_probs`"):
        s["eece"].update(w, members[:2, :10], labels[:10], bins[:, :10])
    with pytest.raises(ValueError, match="one row per sample"):
        s.update(range(5), {"acc": (torch.ones(6),)})
    with pytest.raises(ValueError, match="`name`"):
        s.update(range(5), {"nope": (torch.ones(5),)})
    with pytest.raises(ValueError, match="no data yet"):
        s["ece"].compute()


def test_classwise_ece_with_many_classes_is_one_sparse_product():
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(500, 1000, generator=g), -1)
    labels = torch.randint(0, 1000, (500,), generator=g)
    s = CalibrationReplicates(15, classwise=True, num_classes=1000, n_replicates=8)
    s.update(poisson_weights(range(500), 8), probs, labels)
    assert s.compute().point == pytest.approx(classwise_calibration_error(probs, labels), rel=REL)
    assert np.isfinite(s.compute().high)


@pytest.mark.parametrize("entries", [1, 7])
@pytest.mark.parametrize("order", ["C", "F"])  # F: not C-contiguous, the product's fallback
def test_sparse_sums_add_into_the_sums_in_place(entries, order):
    from bensemble.metrics.intervals._calibration_replicates import add_sparse_sums

    g = np.random.default_rng(entries)
    rows = g.integers(0, 40, (90, entries))  # repeated rows within a sample too
    values = g.standard_normal((90, entries))
    weights = g.integers(0, 5, (90, 6)).astype(np.float64)
    want = g.standard_normal((40, 6))
    into = np.array(want, order=order)
    np.add.at(want, rows.reshape(-1), values.reshape(-1)[:, None] * weights.repeat(entries, 0))
    add_sparse_sums(into, rows, values, weights)
    np.testing.assert_allclose(into, want, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("bad", [-1, 40])
def test_sparse_sums_refuse_rows_outside_the_state(bad):
    """The compiled kernels write where a row id points: an id outside the state is refused
    before anything is added."""
    from bensemble.metrics.intervals._sparse_sums import add_sparse_sums

    rows = np.zeros((5, 3), dtype=np.int64)
    rows[2, 1] = bad
    into = np.zeros((40, 4))
    with pytest.raises(ValueError, match="`rows` must lie in"):
        add_sparse_sums(into, rows, np.ones((5, 3)), np.ones((5, 4)))
    assert not into.any()
