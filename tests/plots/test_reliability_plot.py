"""Tests of the classic reliability diagram (Wilson intervals, Display, figure)."""

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from scipy import stats  # noqa: E402

from bensemble.metrics import binned_calibration_stats, calibration_error  # noqa: E402
from bensemble.plots import (  # noqa: E402
    ReliabilityDisplay,
    plot_reliability_diagram,
    wilson_interval,
)

Z95 = 1.959963984540054


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _predictions(n=2000, k=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    probs = torch.softmax(2 * torch.randn(n, k, generator=g, dtype=torch.float64), dim=1)
    labels = torch.multinomial(probs, 1, generator=g).squeeze(1)
    return probs, labels


# ----------------------------------------------------------------------------- Wilson interval


def test_wilson_closed_form_values():
    lower, upper = wilson_interval([0.0, 10.0, 5.0], [10.0, 10.0, 10.0])
    # s = 0: [0, z^2 / (n + z^2)];  s = n: [n / (n + z^2), 1];  s = 5, n = 10: the textbook pair.
    assert lower[0].item() == pytest.approx(0.0, abs=1e-15)
    assert upper[0].item() == pytest.approx(Z95**2 / (10 + Z95**2), rel=1e-12)
    assert lower[1].item() == pytest.approx(10 / (10 + Z95**2), rel=1e-12)
    assert upper[1].item() == pytest.approx(1.0, abs=1e-15)
    assert lower[2].item() == pytest.approx(0.2365931, abs=1e-7)
    assert upper[2].item() == pytest.approx(0.7634069, abs=1e-7)


@pytest.mark.parametrize("level", [0.8, 0.9, 0.95, 0.99])
def test_wilson_matches_scipy_binomtest(level):
    successes = [0, 1, 3, 17, 40, 99, 250]
    counts = [5, 2, 30, 17, 100, 100, 1000]
    lower, upper = wilson_interval(
        torch.tensor(successes, dtype=torch.float64), counts, confidence_level=level
    )
    for i, (s, n) in enumerate(zip(successes, counts)):
        ci = stats.binomtest(s, n).proportion_ci(confidence_level=level, method="wilson")
        assert lower[i].item() == pytest.approx(ci.low, rel=1e-9, abs=1e-12)
        assert upper[i].item() == pytest.approx(ci.high, rel=1e-9, abs=1e-12)


def test_wilson_empty_bin_is_nan():
    lower, upper = wilson_interval([0.0, 2.0], [0.0, 4.0])
    assert math.isnan(lower[0].item()) and math.isnan(upper[0].item())
    assert lower[1] < 0.5 < upper[1]


@pytest.mark.parametrize(
    "call, argument",
    [
        pytest.param(lambda: wilson_interval([3.0], [2.0]), "successes", id="s-above-n"),
        pytest.param(lambda: wilson_interval([1.0, 2.0], [3.0]), "successes", id="shape"),
        pytest.param(lambda: wilson_interval([1.0], [3.0], 1.0), "confidence_level", id="level"),
        pytest.param(lambda: wilson_interval([[1.0]], [[3.0]]), "successes", id="2d"),
    ],
)
def test_wilson_bad_input(call, argument):
    with pytest.raises(ValueError, match=f"`{argument}`"):
        call()


# ----------------------------------------------------------------------------- Display


def test_display_holds_exactly_what_the_compute_functions_returned():
    probs, labels = _predictions()
    conf, pred = probs.max(1)
    display = ReliabilityDisplay.from_confidences(conf, pred == labels, n_bins=12)
    bins = binned_calibration_stats(conf, pred == labels, 12)
    for field in ("edges", "counts", "sum_confidence", "sum_correct"):
        assert torch.equal(getattr(display.bins, field), getattr(bins, field))
    lower, upper = wilson_interval(bins.sum_correct, bins.counts)
    torch.testing.assert_close(display.lower, lower, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(display.upper, upper, rtol=0, atol=0, equal_nan=True)
    assert display.ece == calibration_error(conf, pred == labels, 12)


def test_from_predictions_is_top_label():
    probs, labels = _predictions(seed=1)
    a = ReliabilityDisplay.from_predictions(probs, labels, n_bins=10, binning="quantile")
    conf, pred = probs.max(1)
    b = ReliabilityDisplay.from_confidences(conf, pred == labels, n_bins=10, binning="quantile")
    for field in ("edges", "counts", "sum_confidence", "sum_correct"):
        assert torch.equal(getattr(a.bins, field), getattr(b.bins, field))
    logits = torch.log(probs)
    c = ReliabilityDisplay.from_predictions(logits, labels, n_bins=10, from_logits=True)
    torch.testing.assert_close(
        c.bins.counts, ReliabilityDisplay.from_predictions(probs, labels, n_bins=10).bins.counts
    )


def test_from_predictions_bad_input():
    probs, labels = _predictions(n=10)
    with pytest.raises(ValueError, match="`labels`"):
        ReliabilityDisplay.from_predictions(probs, labels[:5])
    with pytest.raises(ValueError, match="`probs`"):
        ReliabilityDisplay.from_predictions(probs * 3, labels)


def test_plot_draws_markers_intervals_diagonal_and_counts(tmp_path):
    probs, labels = _predictions(n=500, seed=2)
    display = ReliabilityDisplay.from_predictions(probs, labels, n_bins=10, name="model")
    assert display.plot() is display
    fig = display.figure_
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    filled = display.bins.counts > 0
    line = display.errorbar_.lines[0]
    np.testing.assert_allclose(line.get_xdata(), display.bins.mean_confidence[filled].numpy())
    np.testing.assert_allclose(line.get_ydata(), display.bins.accuracy[filled].numpy())
    # Error bars span the Wilson interval.
    segments = display.errorbar_.lines[2][0].get_segments()
    np.testing.assert_allclose([s[0][1] for s in segments], display.lower[filled].numpy())
    np.testing.assert_allclose([s[1][1] for s in segments], display.upper[filled].numpy())
    heights = [bar.get_height() for bar in display.bars_]
    np.testing.assert_allclose(heights, display.bins.counts.numpy())
    assert any(
        list(ln.get_xdata()) == [0, 1] and list(ln.get_ydata()) == [0, 1]
        for ln in display.ax_.lines
    )
    texts = [t.get_text() for t in display.ax_.get_legend().get_texts()]
    assert any(t.startswith("model (ECE = ") for t in texts)
    assert display.counts_ax_.get_xlabel() == "Confidence"
    path = tmp_path / "reliability.png"
    fig.savefig(path)
    assert path.stat().st_size > 1000


def test_plot_on_given_axes_draws_no_twin_over_it():
    probs, labels = _predictions(n=300, seed=3)
    fig, ax = plt.subplots()
    display = ReliabilityDisplay.from_predictions(probs, labels).plot(ax=ax, color="red")
    assert display.ax_ is ax and display.figure_ is fig
    # the user's Axes stays alone: no twin y-axis, no bars drawn over the diagram
    assert display.counts_ax_ is None and display.bars_ is None and fig.axes == [ax]
    assert not ax.patches and ax.get_xlabel() == "Confidence"
    assert matplotlib.colors.same_color(display.errorbar_.lines[0].get_color(), "red")
    bare = ReliabilityDisplay.from_predictions(probs, labels).plot(show_counts=False)
    assert bare.bars_ is None and len(bare.figure_.axes) == 1


def test_plot_on_given_axes_puts_counts_on_counts_ax():
    probs, labels = _predictions(n=300, seed=3)
    fig, (ax, below) = plt.subplots(2, 1, sharex=True)
    display = ReliabilityDisplay.from_predictions(probs, labels, n_bins=6)
    display.plot(ax=ax, counts_ax=below)
    assert display.counts_ax_ is below and len(below.patches) == 6 and not ax.patches
    assert below.get_xlabel() == "Confidence" and ax.get_xlabel() == ""
    with pytest.raises(ValueError, match="`counts_ax`"):
        display.plot(counts_ax=below)
    with pytest.raises(ValueError, match="`counts_ax`"):
        display.plot(ax=ax, counts_ax=ax)


def test_plot_reliability_diagram_returns_a_figure(tmp_path):
    probs, labels = _predictions(n=300, seed=4)
    fig = plot_reliability_diagram(probs, labels, n_bins=8)
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    assert len(fig.axes[1].patches) == 8
    fig.savefig(tmp_path / "r.png")
