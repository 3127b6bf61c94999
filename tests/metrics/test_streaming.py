"""Tests for bensemble.metrics.streaming.CalibrationErrorMeter.

one-shot == streaming over random batch splits == merged shards == an independent float64 loop.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from bensemble.metrics import (
    CalibrationErrorMeter,
    expected_calibration_error,
    reliability_diagram,
)

NORMS = ("l1", "l2", "max")


def _probs(seed, n, k, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(2 * torch.randn(n, k, generator=g, dtype=torch.float64), 1)
    return p.to(dtype), torch.randint(0, k, (n,), generator=g)


def _reference_numpy_ece(probs, targets, n_bins, norm):
    """Plain float64 loop; edges are bensemble's float32 torch grid, bins (lower, upper]."""
    p = probs.double().numpy()
    conf, correct = p.max(1), (p.argmax(1) == targets.numpy()).astype(float)
    edges = torch.linspace(0, 1, n_bins + 1).double().numpy()
    l1 = l2 = mx = 0.0
    for b in range(n_bins):
        mask = (conf > edges[b]) & (conf <= edges[b + 1])
        if mask.any():
            gap = abs(correct[mask].mean() - conf[mask].mean())
            w = mask.mean()
            l1, l2, mx = l1 + w * gap, l2 + w * gap**2, max(mx, gap)
    return {"l1": l1, "l2": np.sqrt(l2), "max": mx}[norm]


def _split(n, n_parts, rng):
    cuts = np.sort(rng.choice(np.arange(1, n), size=n_parts - 1, replace=False))
    return np.split(np.arange(n), cuts)


@given(
    seed=st.integers(0, 2**31 - 1),
    n_parts=st.integers(1, 8),
    n_bins=st.integers(1, 50),
    norm=st.sampled_from(NORMS),
)
def test_one_shot_equals_streaming_equals_merged_shards(seed, n_parts, n_bins, norm):
    probs, y = _probs(seed, 400, 4, torch.float32)
    rng = np.random.default_rng(seed)
    one_shot = expected_calibration_error(probs, y, n_bins, norm=norm)

    stream = CalibrationErrorMeter(n_bins, norm)
    for idx in _split(400, n_parts, rng):
        stream.update(probs[idx], y[idx])

    shards = []
    for idx in _split(400, n_parts, rng):
        shards.append(CalibrationErrorMeter(n_bins, norm).update(probs[idx].numpy(), y[idx]))
    merged = CalibrationErrorMeter(n_bins, norm)
    for shard in shards:
        merged.merge(shard)

    assert stream.compute() == pytest.approx(one_shot, abs=1e-12)
    assert merged.compute() == pytest.approx(one_shot, abs=1e-12)
    assert one_shot == pytest.approx(_reference_numpy_ece(probs, y, n_bins, norm), abs=1e-12)
    # counts are exact integers, identical to the one-shot bins
    counts = reliability_diagram(probs, y, n_bins)["counts"]
    assert stream.bins.counts.tolist() == counts == merged.bins.counts.tolist()


def test_reset_and_reuse():
    probs, y = _probs(1, 100, 3)
    meter = CalibrationErrorMeter(10).update(probs[:50], y[:50])
    meter.reset()
    meter.update(probs[50:], y[50:])
    assert meter.compute() == pytest.approx(
        expected_calibration_error(probs[50:], y[50:], 10), abs=1e-12
    )
    assert "samples=50" in repr(meter)


def test_from_logits_and_num_classes():
    g = torch.Generator().manual_seed(2)
    z = 3 * torch.randn(200, 5, generator=g)
    y = torch.randint(0, 5, (200,), generator=g)
    meter = CalibrationErrorMeter(15, num_classes=5, from_logits=True)
    meter.update(z[:120], y[:120]).update(z[120:], y[120:])
    assert meter.compute() == pytest.approx(
        expected_calibration_error(z, y, from_logits=True), abs=1e-12
    )
    with pytest.raises(ValueError, match=r"CalibrationErrorMeter.update: `probs` must have 5 "):
        meter.update(torch.randn(3, 4), torch.tensor([0, 1, 2]))


def test_merge_empty_meters_and_class_mismatch():
    probs, y = _probs(3, 60, 3)
    a = CalibrationErrorMeter(7)
    b = CalibrationErrorMeter(7).update(probs, y)
    assert a.merge(CalibrationErrorMeter(7)) is a
    a.merge(b)
    assert a.compute() == b.compute()
    c = CalibrationErrorMeter(7).update(*_probs(4, 10, 4))
    with pytest.raises(ValueError, match="merge: `other` must be for 3 classes"):
        a.merge(c)


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="no data yet.*call update"):
        CalibrationErrorMeter().compute()
    with pytest.raises(ValueError, match="CalibrationErrorMeter: `n_bins` must be an integer"):
        CalibrationErrorMeter(n_bins=0)
    with pytest.raises(ValueError, match="CalibrationErrorMeter: `norm` must be one of 'l1'"):
        CalibrationErrorMeter(norm="l3")
    with pytest.raises(ValueError, match="CalibrationErrorMeter: `num_classes` must be an int"):
        CalibrationErrorMeter(num_classes=1)
    with pytest.raises(ValueError, match="merge: `other` must use the same n_bins and norm"):
        CalibrationErrorMeter(10).merge(CalibrationErrorMeter(15))
    with pytest.raises(ValueError, match="merge: `other` must be a CalibrationErrorMeter"):
        CalibrationErrorMeter().merge(3)
    with pytest.raises(ValueError, match="update: `probs` must have rows summing to 1"):
        CalibrationErrorMeter().update(torch.tensor([[2.0, 1.0]]) / 4, torch.tensor([0]))
    with pytest.raises(ValueError, match="update: `labels` must have an integer dtype"):
        CalibrationErrorMeter().update(torch.tensor([[0.5, 0.5]]), torch.tensor([0.0]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_batches_merge_with_cpu():
    probs, y = _probs(5, 1000, 4, torch.float32)
    gpu = CalibrationErrorMeter().update(probs[:500].cuda(), y[:500].cuda())
    cpu = CalibrationErrorMeter().update(probs[500:], y[500:])
    assert gpu.merge(cpu).compute() == pytest.approx(
        expected_calibration_error(probs, y), abs=1e-12
    )
