"""Regression EECE / TECE on the heteroscedastic toy problem with its known E[Y | x]."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest
import torch

from bensemble.datasets import make_regression_toy
from bensemble.regression import (
    fit_regression_bins,
    regression_epistemic_calibration_error,
    true_regression_epistemic_calibration_error,
)
from bensemble.regression._eece_kernels import _reece_compute
from bensemble.regression._inputs import as_member_predictions
from bensemble.regression.epistemic import _reece_chunk_update
from bensemble.regression.scoring import merge_states

sys.path.insert(0, str(Path(__file__).resolve().parent))
from regression_cases import smooth_members  # noqa: E402

EECE = regression_epistemic_calibration_error
TECE = true_regression_epistemic_calibration_error


def _toy(n: int, seed: int):
    data = make_regression_toy(n, seed=seed)
    return data.x[:, 0], data.y, data.mean


def test_members_equal_to_the_truth_have_an_eece_that_decays_with_n():
    """The decay table of the guide: EECE ~ noise / sqrt(N) with sqrt(N) bins."""
    values = []
    for n in (500, 2000, 8000, 32000):
        _, y, f = _toy(n, seed=n)
        truth = f.expand(5, -1)  # five members equal to E[Y | x]: EU = 0
        assert TECE(truth, f) < 1e-28  # 0 up to the rounding of the members' mean
        values.append(EECE(truth, y))
    assert all(later < 0.8 * earlier for earlier, later in zip(values, values[1:])), values
    assert values[-1] < 2e-3


def test_members_that_agree_more_than_they_are_right_give_a_positive_gap():
    x, y, f = _toy(20000, seed=1)
    narrow = smooth_members(x, f, spread=0.05, bias=0.4)  # shared bias 0.4 sin(x)
    tece = TECE(narrow, f)  # = E[(0.4 sin x)^2] ~ 0.08
    assert tece == pytest.approx(0.08 * (1 - torch.sin(torch.tensor(6.0)).item() / 6), rel=0.05)
    details = regression_epistemic_calibration_error(narrow, y, return_details=True)
    assert details.value > 0.05 and details.signed > 0.05  # over-confident: error > EU
    assert details.value == pytest.approx(tece, rel=0.2)


def test_the_reported_eu_is_what_is_tested():
    """Members centred on the truth (antithetic spread): EU = Var_h is calibrated; a reported EU
    c^2 times too small (too narrow) or too large leaves a gap |1 - c^2| mean Var_h."""
    x, y, f = _toy(20000, seed=2)
    members = smooth_members(x, f, spread=0.3)
    var = members.var(dim=0, unbiased=False)
    assert EECE(members, y) < 0.004
    for c2 in (0.25, 4.0):
        gap = abs(1 - c2) * float(var.mean())
        details = regression_epistemic_calibration_error(
            members, y, eu=c2 * var, return_details=True
        )
        assert details.value == pytest.approx(gap, rel=0.1)
        assert (details.signed > 0) == (c2 < 1)
        assert TECE(members, f, eu=c2 * var) == pytest.approx(gap, rel=1e-9)


def test_the_bias_correction_removes_the_label_noise_on_average():
    """Truth members: E[signed] = 0 with the correction, = sum_b w_b Var(r | b) / n_b without."""
    with_correction, without = [], []
    for seed in range(40):
        _, y, f = _toy(1000, seed=100 + seed)
        truth = f.expand(3, -1)
        d = regression_epistemic_calibration_error(truth, y, n_bins=25, return_details=True)
        with_correction.append(d.signed)
        without.append(float((d.weights * d.squared_error).nansum()))
    mean_with = sum(with_correction) / 40
    mean_without = sum(without) / 40
    assert mean_without > 0.003  # ~ E[Var(Y|x)] * bins / N = 0.19 * 25 / 1000
    assert abs(mean_with) < 0.15 * mean_without


def test_details_add_up():
    x, y, f = _toy(3000, seed=3)
    members = smooth_members(x, f, spread=0.2, bias=0.1)
    d = regression_epistemic_calibration_error(members, y, n_bins=40, return_details=True)
    assert d.value == pytest.approx(float((d.weights * d.terms.abs()).nansum()), rel=1e-12)
    assert int(d.counts.sum()) == 3000 and d.n_bins == 40 and d.seed == 0
    assert torch.equal(torch.bincount(d.point_bins, minlength=d.counts.numel()).double(), d.counts)
    torch.testing.assert_close(d.terms, d.squared_error - d.correction - d.trust)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert EECE(members, y, bias_correction=False) >= 0.0


def test_member_order_does_not_change_a_bit_and_identical_calls_agree():
    x, y, f = _toy(2000, seed=4)
    members = smooth_members(x, f, n_members=8, spread=0.2)
    value = EECE(members, y)
    assert EECE(members, y) == value
    for seed in range(3):
        perm = torch.randperm(8, generator=torch.Generator().manual_seed(seed))
        assert EECE(members[perm], y) == value
    # 16 members of unequal spread around 1000: sums over members in another order round
    # differently, so only the canonical order makes the value bit-identical
    g = torch.Generator().manual_seed(5)
    scale = 10 * torch.rand(16, 1, generator=g, dtype=torch.float64)
    wide = 1000 + scale * torch.randn(16, 3000, generator=g, dtype=torch.float64)
    labels = 1000 + torch.randn(3000, generator=g, dtype=torch.float64)
    value = EECE(wide, labels, n_bins=40)
    for _ in range(6):
        assert EECE(wide[torch.randperm(16, generator=g)], labels, n_bins=40) == value


def test_fixed_bins_make_the_sums_additive_over_chunks():
    x, y, f = _toy(4000, seed=5)
    members = smooth_members(x, f, spread=0.2, bias=0.2)
    centroids = fit_regression_bins(members[:, :2000], 30)  # fitted on one split
    one_shot = regression_epistemic_calibration_error(
        members[:, 2000:], y[2000:], centroids=centroids, return_details=True
    )
    # a stream: chunks of the other split, in the caller's member order, merged by addition
    members_t = as_member_predictions(members, "stream")
    state = None
    for a, b in [(2000, 2500), (2500, 2501), (2501, 4000)]:
        part, _ = _reece_chunk_update(members_t.rows(a, b), y[a:b], centroids)
        state = part if state is None else merge_states(state, part)
    streamed = _reece_compute(state, bias_correction=True)
    assert float(streamed["value"]) == pytest.approx(one_shot.value, rel=1e-9)
    torch.testing.assert_close(one_shot.centroids, centroids)


def test_tece_is_the_pointwise_formula():
    g = torch.Generator().manual_seed(6)
    members = torch.randn(4, 50, generator=g, dtype=torch.float64)
    f = torch.randn(50, generator=g, dtype=torch.float64)
    eu = torch.rand(50, generator=g, dtype=torch.float64)
    expected = ((f - members).square().mean(0) - eu).abs().mean()
    assert TECE(members, f, eu=eu) == pytest.approx(float(expected), rel=1e-12)
    mse_of_mean = float((f - members.mean(0)).square().mean())
    assert TECE(members, f) == pytest.approx(mse_of_mean, rel=1e-12)
    gaussian = torch.stack([members, torch.ones_like(members)], -1)
    assert TECE(gaussian, f) == TECE(members, f)  # the members' variances do not enter


def test_inputs_are_checked():
    x, y, f = _toy(100, seed=7)
    members = smooth_members(x, f, spread=0.1)
    with pytest.raises(ValueError, match="`n_bins`"):
        EECE(members, y, n_bins=101)
    with pytest.raises(ValueError, match="`eu` must be >= 0"):
        EECE(members, y, eu=-torch.ones(100))
    with pytest.raises(ValueError, match="`eu` must have one value per point"):
        EECE(members, y, eu=torch.ones(99))
    with pytest.raises(ValueError, match="`centroids` must have 6 columns"):
        EECE(members, y, centroids=torch.zeros(3, 5))
    with pytest.raises(ValueError, match="`labels`"):
        EECE(members, y[:-1])
    with pytest.raises(ValueError, match="`bias_correction`"):
        EECE(members, y, bias_correction="yes")
    with pytest.raises(ValueError, match="`true_mean`"):
        TECE(members, f[:-1])
    with pytest.warns(UserWarning, match="fewer than 10 points"):
        EECE(members, y, n_bins=50)


def test_return_details_carries_the_value_it_returns_alone():
    x, y, f = _toy(2000, seed=8)
    members = smooth_members(x, f, spread=0.2, bias=0.1)
    value = regression_epistemic_calibration_error(members, y, n_bins=20)
    details = regression_epistemic_calibration_error(members, y, n_bins=20, return_details=True)
    assert isinstance(value, float) and details.value == value
    assert details.n_bins == 20 and details.counts.sum() == 2000
    with pytest.raises(ValueError, match="return_details"):
        regression_epistemic_calibration_error(members, y, return_details="yes")
