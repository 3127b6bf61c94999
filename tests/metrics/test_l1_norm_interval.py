"""The L1 two-step interval on Gaussian vectors with a known truth (the bootstrap replaced by
independent draws of the noise), its invariances, and its regular limit far from zero."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from bensemble.metrics.intervals import l1_norm_interval, percentile_interval

F64 = torch.float64
NAN = float("nan")


def _coverage(truth: torch.Tensor, sd: torch.Tensor, trials: int = 300, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    hits, lows = 0, []
    for _ in range(trials):
        estimate = truth + sd * torch.randn(truth.shape, generator=g, dtype=F64)
        replicates = estimate + sd * torch.randn(200, truth.numel(), generator=g, dtype=F64)
        low, high = l1_norm_interval(estimate, replicates)
        hits += low <= float(truth.abs().sum()) <= high
        lows.append(low)
    return hits / trials, lows


@pytest.mark.parametrize(
    "name",
    ["zero", "spread thin", "one bin", "mixed signs", "far from zero"],
)
def test_covers_on_gaussian_vectors(name):
    sd = torch.linspace(0.5, 2.0, 15, dtype=F64) * 1e-3
    truth = {
        "zero": torch.zeros(15, dtype=F64),
        "spread thin": 1.2 * sd,
        "one bin": torch.zeros(15, dtype=F64).index_fill(0, torch.tensor([3]), 0.01),
        "mixed signs": sd * torch.tensor([2.0, -2.0, 0.5, -0.5, 1.0] * 3, dtype=F64),
        "far from zero": 20 * sd * torch.tensor([1.0, -1.0, 1.0] * 5, dtype=F64),
    }[name]
    coverage, lows = _coverage(truth, sd)
    # 300 trials: a true coverage of 0.95 falls below 0.92 with probability < 1%
    assert coverage >= 0.92
    if name == "zero":  # the lower end is 0 whenever T = 0 is not rejected
        assert sum(low == 0.0 for low in lows) >= 0.95 * len(lows)


@pytest.mark.parametrize("shape", ["flat", "concentrated"])
def test_far_from_zero_it_is_the_normal_interval(shape):
    sd = torch.full((10,), 1e-3, dtype=F64)
    estimate = torch.full((10,), 0.05, dtype=F64)
    if shape == "concentrated":  # Cauchy-Schwarz is loose here: the linear bound must win
        estimate[0] = 0.3
    g = torch.Generator().manual_seed(1)
    replicates = estimate + sd * torch.randn(4000, 10, generator=g, dtype=F64)
    low, high = l1_norm_interval(estimate, replicates)
    half, norm = math.sqrt(10) * 1e-3, float(estimate.sum())
    # lower tail at 1 - a/2 + beta = 0.9775, upper at 1 - a/4 = 0.9875 (Bonferroni)
    assert low == pytest.approx(norm - 2.005 * half, abs=0.15 * half)
    assert high == pytest.approx(norm + 2.241 * half, abs=0.15 * half)


@given(seed=st.integers(0, 2**31), j=st.integers(1, 12), scale=st.floats(1e-6, 1.0))
def test_contains_the_estimate_and_is_invariant_to_signs_and_order(seed, j, scale):
    g = torch.Generator().manual_seed(seed)
    estimate = scale * torch.randn(j, generator=g, dtype=F64)
    replicates = estimate + scale * 0.3 * torch.randn(50, j, generator=g, dtype=F64)
    low, high = l1_norm_interval(estimate, replicates)
    norm = float(estimate.abs().sum())
    assert 0.0 <= low <= norm <= high
    flip = torch.where(torch.rand(j, generator=g) < 0.5, -1.0, 1.0).to(F64)
    perm = torch.randperm(j, generator=g)
    low2, high2 = l1_norm_interval((flip * estimate)[perm], (flip * replicates)[:, perm])
    assert low2 == pytest.approx(low, rel=1e-9, abs=1e-15)
    assert high2 == pytest.approx(high, rel=1e-9, abs=1e-15)


def test_wider_at_a_higher_level():
    g = torch.Generator().manual_seed(2)
    estimate = 0.01 * torch.randn(8, generator=g, dtype=F64)
    replicates = estimate + 0.004 * torch.randn(400, 8, generator=g, dtype=F64)
    low90, high90 = l1_norm_interval(estimate, replicates, 0.90)
    low99, high99 = l1_norm_interval(estimate, replicates, 0.99)
    assert low99 <= low90 and high99 >= high90


def test_degenerate_replicates_give_the_point():
    estimate = torch.tensor([0.1, -0.2], dtype=F64)
    assert l1_norm_interval(estimate, estimate.expand(10, 2)) == pytest.approx((0.3, 0.3))
    nan = torch.full((10, 2), float("nan"), dtype=F64)
    assert l1_norm_interval(estimate, nan) == pytest.approx((0.3, 0.3))
    assert percentile_interval(torch.full((10,), float("nan"), dtype=F64)) is None


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: l1_norm_interval(torch.zeros(3), torch.zeros(5, 4)), "replicates"),
        (lambda: l1_norm_interval(torch.zeros(3, 1), torch.zeros(5, 3)), "estimate"),
        (lambda: l1_norm_interval(torch.tensor([0.0, NAN]), torch.zeros(5, 2)), "estimate"),
        (lambda: l1_norm_interval(torch.zeros(2), torch.zeros(5, 2), 1.5), "level"),
        (lambda: l1_norm_interval(torch.zeros(2), torch.zeros(5, 2), beta=0.2), "beta"),
        (lambda: percentile_interval(torch.zeros(3, 2)), "values"),
        (lambda: percentile_interval(torch.zeros(3), level=0), "level"),
    ],
)
def test_bad_input_names_the_argument(call, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        call()


def test_near_zero_the_debiased_squared_bound_is_the_tighter_upper_end():
    """Pure noise in 30 bins: the linear bound adds 2.24 sd * sqrt(30) to a plug-in value that
    is itself all noise; the debiased squared error mapped back stays near the plug-in value."""
    g = torch.Generator().manual_seed(3)
    sd = 1e-3
    estimate = sd * torch.randn(30, generator=g, dtype=F64)
    replicates = estimate + sd * torch.randn(400, 30, generator=g, dtype=F64)
    low, high = l1_norm_interval(estimate, replicates)
    norm, linear_margin = float(estimate.abs().sum()), 2.24 * sd * math.sqrt(30)
    assert low == 0.0
    assert high < norm + 0.5 * linear_margin
