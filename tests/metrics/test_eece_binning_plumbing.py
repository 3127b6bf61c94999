"""Binning objects through the streaming EECE meter and the torchmetrics metric: over any
batches they give the one-shot EECE with the same fitted binning."""

from __future__ import annotations

import pytest
import torch

from bensemble.metrics import EECEMeter
from bensemble.metrics import expected_epistemic_calibration_error as eece
from bensemble.metrics.binning import (
    ExplicitBinning,
    KMeansBinning,
    QuantileBinning,
    UniformBinning,
)

F64 = torch.float64


def _members(h=4, n=600, k=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    z = 2 * torch.randn(h, n, k, generator=g, dtype=F64) + 2 * torch.randn(1, n, k, generator=g)
    return torch.softmax(z, -1), torch.randint(k, (n,), generator=g)


SAMPLE, _ = _members(seed=1)
P, Y = _members(seed=2)


def _streamed(meter, splits=(0, 137, 138, 400, 600)):
    for a, b in zip(splits[:-1], splits[1:], strict=True):
        meter.update(P[:, a:b], Y[a:b])
    return meter.compute()


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda m: KMeansBinning(9, seed=4).fit(SAMPLE, multiclass=m), id="kmeans"),
        pytest.param(lambda m: UniformBinning(8).fit(SAMPLE, multiclass=m), id="uniform"),
        pytest.param(lambda m: QuantileBinning(6).fit(SAMPLE, multiclass=m), id="quantile"),
    ],
)
@pytest.mark.parametrize("multiclass", ["classwise", "top_label"])
def test_meter_over_batches_equals_the_one_shot_eece(make, multiclass):
    binning = make(multiclass)
    value = _streamed(EECEMeter(binning))
    # float64 sums in another order; K-means distances with members in the given order
    assert value == pytest.approx(eece(P, Y, binning), rel=1e-12, abs=1e-15)


def test_binary_meter_and_from_sample():
    pb, yb = P[:, :, 0], (Y == 0).long()
    binning = KMeansBinning(7).fit(SAMPLE[:, :, 0], binary=True)
    meter = EECEMeter(binning).update(pb[:, :300], yb[:300]).update(pb[:, 300:], yb[300:])
    assert meter.binary and meter.compute() == pytest.approx(
        eece(pb, yb, binning, binary=True), rel=1e-12
    )
    sampled = EECEMeter.from_sample(SAMPLE, binning=KMeansBinning(9, seed=4))
    direct = EECEMeter(KMeansBinning(9, seed=4).fit(SAMPLE))
    assert torch.equal(sampled.centroids, direct.centroids)
    quantile = EECEMeter.from_sample(SAMPLE, binning=QuantileBinning(5), multiclass="top_label")
    assert quantile.multiclass == "top_label"
    assert _streamed(quantile) == pytest.approx(
        eece(P, Y, QuantileBinning(5).fit(SAMPLE, multiclass="top_label")), rel=1e-12
    )


def test_a_kmeans_binning_is_its_centroids_to_the_meter():
    binning = KMeansBinning(9, seed=4).fit(SAMPLE)
    a, b = EECEMeter(binning), EECEMeter(binning.centroids_)
    assert torch.equal(a.centroids, b.centroids)
    a.merge(b.update(P[:, :50], Y[:50]))  # same settings: they merge
    assert a.compute() == b.compute()


def test_meter_refuses_what_cannot_stream():
    with pytest.raises(ValueError, match="must be fitted bins that apply to any batch"):
        EECEMeter(KMeansBinning(5))
    with pytest.raises(ValueError, match="must be fitted bins that apply to any batch"):
        EECEMeter(ExplicitBinning(torch.arange(600) % 4).fit(P))
    with pytest.raises(ValueError, match="left at their defaults"):
        EECEMeter(KMeansBinning(5).fit(SAMPLE), "top_label")
    with pytest.raises(ValueError, match="not both"):
        EECEMeter(KMeansBinning(5).fit(SAMPLE), centroids=torch.rand(5, 4))
    other = EECEMeter(UniformBinning(8).fit(SAMPLE))
    with pytest.raises(ValueError, match="same settings"):
        other.merge(EECEMeter(UniformBinning(9).fit(SAMPLE)))


def test_torchmetrics_metric_takes_a_binning():
    tm = pytest.importorskip("torchmetrics")
    assert tm is not None
    from bensemble.integrations.torchmetrics import ExpectedEpistemicCalibrationError

    binning = KMeansBinning(9, seed=4).fit(SAMPLE)
    metric = ExpectedEpistemicCalibrationError(binning)
    metric.update(P[:, :250], Y[:250])
    metric.update(P[:, 250:], Y[250:])
    assert float(metric.compute()) == pytest.approx(eece(P, Y, binning), rel=1e-12)
    sampled = ExpectedEpistemicCalibrationError.from_sample(SAMPLE, binning=UniformBinning(8))
    sampled.update(P, Y)
    assert float(sampled.compute()) == pytest.approx(
        eece(P, Y, UniformBinning(8).fit(SAMPLE)), rel=1e-12
    )
    legacy = ExpectedEpistemicCalibrationError(centroids=binning.centroids_)
    legacy.update(P, Y)  # one batch against two: float64 sums in another order
    assert float(legacy.compute()) == pytest.approx(float(metric.compute()), rel=1e-12)
