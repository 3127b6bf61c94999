"""The heteroscedastic regression toy problem: its truth functions and its draws."""

from __future__ import annotations

import pytest
import torch

from bensemble.datasets import (
    make_regression_toy,
    regression_toy_mean,
    regression_toy_variance,
)


def test_draws_follow_the_stated_conditional_mean_and_variance():
    data = make_regression_toy(60000, seed=1)
    x = data.x[:, 0]
    assert data.x.shape == (60000, 1) and data.x.dtype == torch.float64
    torch.testing.assert_close(data.mean, torch.sin(2 * x) + x / 2)
    torch.testing.assert_close(data.variance, (0.1 + 0.2 * x.abs()).square())
    z = (data.y - data.mean) / data.variance.sqrt()
    assert float(z.mean()) == pytest.approx(0.0, abs=0.02)
    assert float(z.var()) == pytest.approx(1.0, abs=0.02)
    assert float(x.min()) > -3 and float(x.max()) < 3
    assert float((x > 0).double().mean()) == pytest.approx(0.5, abs=0.01)


def test_fixed_default_seed_and_explicit_randomness():
    a, b = make_regression_toy(50), make_regression_toy(50)
    assert torch.equal(a.y, b.y)
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert torch.equal(
        make_regression_toy(50, generator=g1).y, make_regression_toy(50, generator=g2).y
    )
    assert not torch.equal(make_regression_toy(50, seed=1).y, a.y)


def test_gap_leaves_an_empty_interval_and_keeps_the_rest_uniform():
    x = make_regression_toy(20000, gap=(0.5, 1.5), seed=2).x[:, 0]
    assert not bool(((x > 0.5) & (x < 1.5)).any())
    assert float((x < 0.5).double().mean()) == pytest.approx(3.5 / 5.0, abs=0.01)


def test_truth_functions_take_both_layouts_and_check_their_input():
    x = torch.linspace(-3, 3, 7, dtype=torch.float64)
    assert torch.equal(regression_toy_mean(x), regression_toy_mean(x[:, None]))
    assert regression_toy_variance([0.0]).tolist() == pytest.approx([0.01])
    with pytest.raises(ValueError, match="`x` must be \\[N\\] or \\[N, 1\\]"):
        regression_toy_mean(torch.zeros(3, 2))
    with pytest.raises(ValueError, match="`gap`"):
        make_regression_toy(10, gap=(1.0, 4.0))
    with pytest.raises(ValueError, match="`n`"):
        make_regression_toy(0)
