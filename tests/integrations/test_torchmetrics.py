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
        assert float(value) == pytest.approx(expected, abs=1e-12, rel=1e-12)
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
    monkeypatch.setattr(bt, "_MISSING", ImportError("No module named 'torchmetrics'"))
    with pytest.raises(ImportError, match="needs the optional torchmetrics package"):
        bt.ExpectedCalibrationError()


def test_sync_refuses_without_a_process_group_and_non_meters():
    with pytest.raises(ValueError, match="sync_: torch.distributed must be initialised"):
        sync_(CalibrationErrorMeter())
    with pytest.raises(ValueError, match="sync_: `meter` must be a bensemble streaming meter"):
        sync_(object())
