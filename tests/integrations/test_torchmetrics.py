"""torchmetrics subclasses: states are the meters' float64 sums with dist_reduce_fx="sum", the
values equal the meters' and the one-shot functions'; a clear error without torchmetrics."""

from __future__ import annotations

import pytest
import torch

from bensemble.integrations import sync_
from bensemble.integrations import torchmetrics as bt
from bensemble.metrics import (
    CalibrationErrorMeter,
    brier_score,
    classwise_calibration_error,
    expected_calibration_error,
    expected_epistemic_calibration_error,
    negative_log_likelihood,
)


def _data(n=300, k=3, h=4):
    g = torch.Generator().manual_seed(0)
    members = torch.softmax(2 * torch.randn(h, n, k, generator=g, dtype=torch.float64), -1)
    return members, torch.randint(0, k, (n,), generator=g)


@pytest.mark.filterwarnings("ignore:The ``compute`` method")
def test_metrics_match_one_shot_and_sum_their_states():
    pytest.importorskip("torchmetrics")
    members, y = _data()
    probs = members.mean(0)
    cents = torch.rand(3, 5, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    cases = [
        (bt.ExpectedCalibrationError(10), expected_calibration_error(probs, y, 10), False),
        (
            bt.ClasswiseCalibrationError(3, 10),
            classwise_calibration_error(probs, y, 10),
            False,
        ),
        (bt.NegativeLogLikelihood(), negative_log_likelihood(probs, y), False),
        (bt.BrierScore(), brier_score(probs, y), False),
        (
            bt.ExpectedEpistemicCalibrationError(cents),
            expected_epistemic_calibration_error(members, y, binning="kmeans_fit", centroids=cents),
            True,
        ),
    ]
    for metric, expected, member_input in cases:
        for a, b in ((0, 100), (100, 300)):
            metric.update(members[:, a:b] if member_input else probs[a:b], y[a:b])
        value = metric.compute()
        assert value.dtype == torch.float64
        assert float(value) == pytest.approx(expected, abs=1e-12, rel=1e-10)
        assert set(metric._reductions) == set(metric._defaults)
        assert all(getattr(metric, k).dtype == torch.float64 for k in metric._defaults)
        # sum reduction: the state size does not depend on the number of samples
        sizes = {k: getattr(metric, k).numel() for k in metric._defaults}
        metric.update(members if member_input else probs, y)
        assert sizes == {k: getattr(metric, k).numel() for k in metric._defaults}
        metric.reset()
        with pytest.raises(ValueError, match="no data yet"):
            metric.compute()


def test_missing_torchmetrics_is_a_clear_error(monkeypatch):
    from bensemble.integrations import _meter_metric

    monkeypatch.setattr(_meter_metric, "_MISSING", ImportError("No module named 'torchmetrics'"))
    with pytest.raises(ImportError, match="needs the optional torchmetrics package"):
        bt.ExpectedCalibrationError()


def test_sync_refuses_without_a_process_group_and_non_meters():
    with pytest.raises(ValueError, match="sync_: torch.distributed must be initialised"):
        sync_(CalibrationErrorMeter())
    with pytest.raises(ValueError, match="sync_: `meter` must be a bensemble streaming meter"):
        sync_(object())


# ----------------------------------------------------------------------------- issue 19 / 20


def test_eece_without_centroids_says_how_to_get_them():
    pytest.importorskip("torchmetrics")
    with pytest.raises(ValueError, match=r"`centroids` must .*from_sample.*fit_bins") as info:
        bt.ExpectedEpistemicCalibrationError()
    assert "docs/api/integrations.md" in str(info.value)


@pytest.mark.filterwarnings("ignore:The ``compute`` method")
def test_eece_from_sample_fits_the_bins_fit_bins_fits_and_matches_one_shot():
    pytest.importorskip("torchmetrics")
    from bensemble.metrics import fit_bins

    members, y = _data(n=600)
    sample, rest, y_rest = members[:, :200], members[:, 200:], y[200:]
    metric = bt.ExpectedEpistemicCalibrationError.from_sample(sample, n_bins=6, seed=3)
    expected = torch.stack([fit_bins(sample[:, :, k].T, 6, seed=3) for k in range(3)])
    torch.testing.assert_close(metric._meter.centroids, expected, rtol=0, atol=0)
    again = bt.ExpectedEpistemicCalibrationError.from_sample(sample, n_bins=6, seed=3)
    assert torch.equal(again._meter.centroids, metric._meter.centroids)  # seeded by default
    metric.update(rest, y_rest)
    one_shot = expected_epistemic_calibration_error(
        rest, y_rest, binning="kmeans_fit", centroids=expected
    )
    assert float(metric.compute()) == pytest.approx(one_shot, rel=1e-10, abs=1e-12)


@pytest.mark.filterwarnings("ignore:The ``compute`` method")
def test_dtype_casts_keep_the_states_float64_and_the_value():
    pytest.importorskip("torchmetrics")
    members, y = _data()
    metric = bt.ExpectedCalibrationError(10)
    metric.update(members.mean(0), y)
    before = float(metric.compute())
    for cast in (
        lambda m: m.to(torch.float16),
        lambda m: m.half(),
        lambda m: m.set_dtype(torch.float32),
        lambda m: m.to("cpu", torch.bfloat16),
        torch.nn.Module.float,
    ):
        cast(metric)
        assert all(getattr(metric, k).dtype == torch.float64 for k in metric._defaults)
        assert all(v.dtype == torch.float64 for v in metric._defaults.values())
        metric.update(members.mean(0)[:1], y[:1])  # a cast of counts would stop at 2048 (f16)
    assert metric.counts.sum() == 300 + 5
    assert float(metric.compute()) != before  # the five extra rows were added, not cast away


def _two_rank_metric(make, mine, theirs):
    """``make(**kw)`` synced with a simulated second rank holding ``theirs``'s states."""
    calls = iter(theirs._reductions)

    def gather(tensor, group=None):
        return [tensor, getattr(theirs, next(calls)).clone()]

    metric = make(dist_sync_fn=gather, distributed_available_fn=lambda: True)
    metric.update(*mine)
    return metric


@pytest.mark.filterwarnings("ignore:The ``compute`` method")
def test_sync_with_a_rank_of_other_centroids_is_refused_and_unsynced():
    pytest.importorskip("torchmetrics")
    members, y = _data()
    g = torch.Generator().manual_seed(1)
    cents = torch.rand(3, 5, 4, generator=g, dtype=torch.float64)
    good = bt.ExpectedEpistemicCalibrationError(cents)
    good.update(members[:, 100:], y[100:])
    metric = _two_rank_metric(
        lambda **kw: bt.ExpectedEpistemicCalibrationError(cents, **kw),
        (members[:, :100], y[:100]),
        good,
    )
    expected = expected_epistemic_calibration_error(
        members, y, binning="kmeans_fit", centroids=cents
    )
    assert float(metric.compute()) == pytest.approx(expected, rel=1e-10, abs=1e-12)
    other = bt.ExpectedEpistemicCalibrationError(cents + 0.01)
    other.update(members[:, 100:], y[100:])
    metric = _two_rank_metric(
        lambda **kw: bt.ExpectedEpistemicCalibrationError(cents, **kw),
        (members[:, :100], y[:100]),
        other,
    )
    local = metric.counts.clone()
    with pytest.raises(ValueError, match=r"compute: `states` must come from .*same settings"):
        metric.compute()
    assert not metric._is_synced and torch.equal(metric.counts, local)
    metric(members[:, :10], y[:10])  # forward still works: the metric was un-synced


def test_a_nested_metric_loads_checked_states_through_its_parent():
    pytest.importorskip("torchmetrics")
    members, y = _data()
    parent = torch.nn.ModuleDict({"nll": bt.NegativeLogLikelihood()})
    parent["nll"].persistent(True)
    parent["nll"].update(members.mean(0), y)
    saved = parent.state_dict()
    assert set(saved) == {f"nll.{k}" for k in parent["nll"]._defaults}
    fresh = torch.nn.ModuleDict({"nll": bt.NegativeLogLikelihood()})
    fresh.load_state_dict(saved)
    assert float(fresh["nll"].compute()) == pytest.approx(
        negative_log_likelihood(members.mean(0), y)
    )
    tampered = {**saved, "nll.count": saved["nll.count"] + 0.5}
    with pytest.raises(
        ValueError, match=r"load_state_dict: `state_dict\['count'\]` must hold whole"
    ):
        bt.NegativeLogLikelihood().load_state_dict({k[4:]: v for k, v in tampered.items()})
    fresh.load_state_dict({})  # a state dict saved without persistent(True): nothing to load
    assert fresh["nll"].count == 300


def test_sizes_seen_are_decoded_alike_by_the_metric_and_by_sync_():
    """The metric's compat states and ``sync_``'s all_reduce share one decoding of the sizes
    seen: ``(UNSEEN, 0)`` is none yet, ``(k, k)`` is ``k``, anything else is refused."""
    pytest.importorskip("torchmetrics")
    from bensemble.integrations.distributed import _UNSEEN, _agreed_sizes

    def refusal(name, what, low, high):
        return f"{name}/{what}: {low:g}..{high:g}"

    ranges = {"num_classes": (3.0, 3.0), "n_members": (_UNSEEN, 0.0)}
    assert _agreed_sizes(ranges, refusal) == {"num_classes": 3, "n_members": None}
    for bad in [(3.0, 4.0), (0.0, 0.0), (2.5, 2.5)]:
        with pytest.raises(ValueError, match="^n_members/members: "):
            _agreed_sizes({"n_members": bad}, refusal)
    metric = bt.ExpectedCalibrationError()
    g = torch.Generator().manual_seed(0)
    metric.update(torch.rand(10, 3, generator=g).softmax(-1), torch.arange(10) % 3)
    metric.compat_max[1] = 4.0  # what summing ranks fed 3 and 4 classes would record
    with pytest.raises(ValueError, match=r"one number of classes \(got 3 and 4; under DDP"):
        metric.compute()
