"""RiskCoverageDisplay: holds what the metrics computed, draws it, returns itself (Agg backend,
set in tests/conftest.py)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from bensemble.metrics import aurc, risk_coverage_curve, selective_confidence
from bensemble.plots.selective import RiskCoverageDisplay, plot_risk_coverage


def _case(seed=0, n=300):
    rng = np.random.default_rng(seed)
    confidence = np.round(rng.random(n), 2)
    correct = (rng.random(n) < confidence).astype(int)
    return confidence, correct


def test_display_holds_exactly_what_the_compute_function_returned():
    confidence, correct = _case()
    display = RiskCoverageDisplay.from_predictions(confidence, correct)
    coverage, risk, thresholds = risk_coverage_curve(confidence, correct)
    assert torch.equal(display.coverage, coverage)
    assert torch.equal(display.risk, risk)
    assert torch.equal(display.thresholds, thresholds)
    assert display.aurc == aurc(confidence, correct)


def test_plot_returns_self_and_sets_axes():
    confidence, correct = _case(1)
    display = RiskCoverageDisplay.from_predictions(confidence, correct, name="model")
    assert display.plot() is display
    assert display.figure_ is display.ax_.figure
    x, y = display.line_.get_data()
    np.testing.assert_array_equal(x, display.coverage.numpy())
    np.testing.assert_array_equal(y, display.risk.numpy())
    assert display.ax_.get_xlabel() == "Coverage"
    assert "model" in display.ax_.get_legend().get_texts()[0].get_text()
    plt.close(display.figure_)


def test_plot_on_given_axes_with_kwargs():
    fig, ax = plt.subplots()
    display = RiskCoverageDisplay.from_predictions(*_case(2)).plot(ax=ax, color="red", name="a")
    assert display.ax_ is ax and display.figure_ is fig
    assert display.line_.get_color() == "red"
    plt.close(fig)


def test_from_ensemble_uses_mean_prediction():
    g = torch.Generator().manual_seed(0)
    members = torch.softmax(torch.randn(3, 80, 4, generator=g, dtype=torch.float64), -1)
    labels = torch.randint(0, 4, (80,), generator=g)
    display = RiskCoverageDisplay.from_ensemble(members, labels, confidence="negative_entropy")
    correct = (members.mean(0).argmax(-1) == labels).double()
    conf = selective_confidence(members, "negative_entropy")
    coverage, risk, thresholds = risk_coverage_curve(conf, correct)
    assert torch.equal(display.risk, risk) and torch.equal(display.thresholds, thresholds)
    assert display.name == "negative_entropy"


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="`correct`"):
        RiskCoverageDisplay.from_predictions([0.1, 0.2], [0, 2])
    with pytest.raises(ValueError, match="`labels`"):
        RiskCoverageDisplay.from_ensemble(torch.full((2, 3, 2), 0.5), torch.tensor([0, 1]))


def test_plot_risk_coverage_returns_the_figure():
    confidence, correct = _case(3)
    fig = plot_risk_coverage(confidence, correct, name="m")
    line = fig.axes[0].get_lines()[0]  # the curve, then the oracle and random references
    coverage, risk, _ = risk_coverage_curve(confidence, correct)
    np.testing.assert_array_equal(line.get_xdata(), coverage.numpy())
    np.testing.assert_array_equal(line.get_ydata(), risk.numpy())
    plt.close(fig)
