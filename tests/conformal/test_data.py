"""Temperature / conformal split of one held-out set."""

from __future__ import annotations

import pytest
import torch

from bensemble.conformal import split_calibration


def _labels(n=1000, k=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    p = torch.tensor([0.55, 0.25, 0.15, 0.05])[:k]
    return torch.multinomial(p / p.sum(), n, replacement=True, generator=g)


@pytest.mark.parametrize("stratify", [False, True])
@pytest.mark.parametrize("fraction", [0.3, 0.5, 0.8])
def test_parts_are_disjoint_and_cover_everything(stratify, fraction):
    y = _labels()
    parts = split_calibration(y, temperature_fraction=fraction, stratify=stratify, seed=1)
    both = torch.cat([parts.temperature, parts.conformal])
    assert torch.equal(torch.sort(both).values, torch.arange(len(y)))
    assert abs(len(parts.temperature) - fraction * len(y)) <= 4  # per-class rounding
    assert torch.equal(parts.temperature, torch.sort(parts.temperature).values)


def test_stratified_split_keeps_each_class_proportion():
    y = _labels(997)
    parts = split_calibration(y, temperature_fraction=0.3, stratify=True, seed=2)
    counts = torch.bincount(y, minlength=4)
    got = torch.bincount(y[parts.temperature], minlength=4)
    expected = torch.round(counts.double() * 0.3).long()
    assert torch.equal(got, expected)


def test_split_is_random_and_reproducible():
    y = _labels()
    a = split_calibration(y, seed=3)
    b = split_calibration(y, generator=torch.Generator().manual_seed(3))
    c = split_calibration(y, seed=4)
    assert torch.equal(a.temperature, b.temperature)
    assert not torch.equal(a.temperature, c.temperature)
    # not a prefix split: both parts spread over the whole range
    assert int(a.temperature.min()) < 10 and int(a.conformal.min()) < 10


@pytest.mark.parametrize(
    "kwargs, arg",
    [
        pytest.param(dict(temperature_fraction=0.0), "temperature_fraction", id="fraction-0"),
        pytest.param(dict(temperature_fraction=1.0), "temperature_fraction", id="fraction-1"),
        pytest.param(dict(temperature_fraction=0.001), "temperature_fraction", id="empty-part"),
        pytest.param(dict(stratify="yes"), "stratify", id="stratify"),
        pytest.param(dict(seed=1, generator=torch.Generator()), "seed", id="seed-and-gen"),
        pytest.param(dict(generator=3), "generator", id="generator-int"),
    ],
)
def test_bad_inputs_raise(kwargs, arg):
    with pytest.raises(ValueError, match=f"`{arg}`"):
        split_calibration(_labels(100), **kwargs)


def test_bad_labels_raise():
    with pytest.raises(ValueError, match="`labels`"):
        split_calibration(torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="`labels`"):
        split_calibration(torch.tensor([0, -1, 1]), stratify=True)


@pytest.mark.parametrize("stratify", [False, True])
def test_split_calibration_refuses_negative_labels(stratify):
    with pytest.raises(ValueError, match="split_calibration: `labels` must be class indices >= 0"):
        split_calibration(torch.tensor([-1, 0, 1, 1]), seed=0, stratify=stratify)
