"""Layout facts of every display, rendered with Agg: labels, legends off the data, shared limits.

The overlap check here is independent of ``bensemble.plots._layout``: it samples points along
every drawn line and error bar and takes every marker's box and bar in display coordinates, after
``fig.canvas.draw()``, and asserts that none falls inside the legend's box.
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.collections import LineCollection, PathCollection  # noqa: E402

from bensemble.metrics import expected_epistemic_calibration_error  # noqa: E402
from bensemble.plots import (  # noqa: E402
    EECEvsECEDisplay,
    EpistemicReliabilityDisplay,
    ReliabilityDisplay,
    RiskCoverageDisplay,
    SmoothCalibrationDisplay,
    plot_epistemic_reliability_panels,
)
from bensemble.plots.epistemic import auto_scale  # noqa: E402
from bensemble.plots.selective import oracle_risk  # noqa: E402

F64 = torch.float64
DIAGONAL = "Perfect calibration"


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


# ----------------------------------------------------------------------------- helpers


def _box(ax, artist):
    return artist.get_window_extent(ax.figure.canvas.get_renderer())


def _data_points(ax):
    """Display-coordinate points of the data on ``ax`` (the y = x reference line excluded)."""
    points = []

    def along(xy):
        xy = np.asarray(xy, dtype=float)
        for a, b in zip(xy[:-1], xy[1:]):
            t = np.linspace(0.0, 1.0, 25)[:, None]
            points.extend(a + t * (b - a))
        points.extend(xy)

    for line in ax.lines:
        if line.get_label() == DIAGONAL or not line.get_visible():
            continue
        xy = np.column_stack([np.asarray(v, dtype=float) for v in line.get_data()])
        along(line.get_transform().transform(xy))
    for coll in ax.collections:
        if isinstance(coll, LineCollection):
            for path in coll.get_paths():
                along(coll.get_transform().transform(path.vertices))
        elif isinstance(coll, PathCollection):
            points.extend(coll.get_offset_transform().transform(coll.get_offsets()))
    boxes = [_box(ax, p) for p in ax.patches]
    return np.asarray(points).reshape(-1, 2), boxes


def _assert_legend_off_data(ax):
    ax.figure.canvas.draw()
    legend = ax.get_legend()
    assert legend is not None
    box = _box(ax, legend)
    points, boxes = _data_points(ax)
    inside = (
        (points[:, 0] > box.x0)
        & (points[:, 0] < box.x1)
        & (points[:, 1] > box.y0)
        & (points[:, 1] < box.y1)
    )
    assert not inside.any(), f"legend covers data at {points[inside][:3]}"
    assert not any(box.overlaps(b) for b in boxes)


def _diagonals(ax):
    return [ln for ln in ax.lines if ln.get_label() == DIAGONAL]


def _legend_texts(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


def _overconfident(n=1500, k=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = 2.5 * torch.randn(n, k, generator=g, dtype=F64)
    labels = torch.multinomial(torch.softmax(logits / 2.0, 1), 1, generator=g).squeeze(1)
    return torch.softmax(logits, 1), labels, torch.softmax(logits / 2.0, 1)


def _binary_members(h=6, n=1500, seed=0, spread=0.7):
    g = torch.Generator().manual_seed(seed)
    z = 3 * torch.randn(n, generator=g, dtype=F64)
    p = torch.sigmoid(z + spread * torch.randn(h, 1, generator=g, dtype=F64))
    return p, torch.bernoulli(torch.sigmoid(z), generator=g).long()


# ----------------------------------------------------------------------------- reliability


def test_reliability_counts_panel_is_a_separate_axes_below():
    probs, labels, _ = _overconfident()
    d = ReliabilityDisplay.from_predictions(probs, labels, n_bins=10, name="model").plot()
    fig = d.figure_
    fig.canvas.draw()
    assert fig.axes == [d.ax_, d.counts_ax_]
    top, bottom = d.ax_.get_position(), d.counts_ax_.get_position()
    assert bottom.y1 <= top.y0  # below, not a twin drawn over the diagram
    assert bottom.x0 == pytest.approx(top.x0) and bottom.x1 == pytest.approx(top.x1)
    assert not d.ax_.patches and len(d.counts_ax_.patches) == 10
    assert d.ax_.get_ylabel() == "Accuracy" and d.counts_ax_.get_ylabel() == "Count"
    assert d.counts_ax_.get_xlabel() == "Confidence"
    assert DIAGONAL in _legend_texts(d.ax_)
    _assert_legend_off_data(d.ax_)


def test_reliability_on_shared_axes_draws_the_diagonal_once():
    probs, labels, scaled = _overconfident(seed=1)
    fig, (ax, below) = plt.subplots(2, 1, sharex=True, layout="constrained")
    a = ReliabilityDisplay.from_predictions(probs, labels, n_bins=10, name="before")
    b = ReliabilityDisplay.from_predictions(scaled, labels, n_bins=10, name="after")
    a.plot(ax=ax, counts_ax=below)
    b.plot(ax=ax, counts_ax=below)
    assert len(_diagonals(ax)) == 1 and a.diagonal_ is b.diagonal_
    texts = _legend_texts(ax)
    assert texts.count(DIAGONAL) == 1 and texts[-1] == DIAGONAL
    assert any(t.startswith("before (ECE") for t in texts)
    assert any(t.startswith("after (ECE") for t in texts)
    assert fig.axes == [ax, below] and len(below.patches) == 20
    _assert_legend_off_data(ax)


def test_reliability_on_a_users_axes_adds_no_twin():
    probs, labels, _ = _overconfident(seed=2)
    fig, ax = plt.subplots()
    ReliabilityDisplay.from_predictions(probs, labels).plot(ax=ax)
    assert fig.axes == [ax] and not ax.patches
    assert ax.get_xlabel() == "Confidence" and ax.get_ylabel() == "Accuracy"


# ----------------------------------------------------------------------------- epistemic


def test_epistemic_auto_scale_rule():
    counts = torch.tensor([60.0, 30.0, 10.0])
    near = EpistemicReliabilityDisplay(
        torch.tensor([1e-4, 0.05, 0.2]), torch.tensor([2e-4, 0.08, 0.3]), counts
    )
    assert auto_scale(near) == "log"  # 60% of the points within a tenth of the top (0.3)
    spread = EpistemicReliabilityDisplay(
        torch.tensor([0.02, 0.05, 0.2]), torch.tensor([0.04, 0.08, 0.3]), counts
    )
    assert auto_scale(spread) == "linear"  # 0.04 > 0.03: no bin near zero
    hidden = EpistemicReliabilityDisplay(
        torch.tensor([1e-4, 0.0, 0.2]), torch.tensor([2e-4, 0.01, 0.3]), counts
    )
    assert auto_scale(hidden) == "linear"  # 30% of the points have EU 0: log would hide them
    assert near.plot().scale_ == "log" and near.ax_.get_xscale() == "log"
    assert spread.plot().scale_ == "linear" and spread.ax_.get_yscale() == "linear"
    assert near.plot(scale="linear").scale_ == "linear"


def test_epistemic_legend_marker_is_normal_size_and_off_the_data():
    p, y = _binary_members()
    d = EpistemicReliabilityDisplay.from_member_probs(p, y, 30, seed=0, binary=True, name="ens")
    d.plot(max_marker_size=2000.0)
    ax = d.ax_
    assert max(d.scatter_.get_sizes()) == pytest.approx(2000.0)
    legend = ax.get_legend()
    sizes = [h.get_markersize() for h in legend.legend_handles if hasattr(h, "get_markersize")]
    assert sizes and max(sizes) <= 10  # not the 2000-point marker of the heaviest bin
    fig, ax2 = plt.subplots()
    d.plot(ax=ax2, label="mine", color="red", legend_loc="upper left")
    assert "mine" in _legend_texts(ax2)
    face = ax2.get_legend().legend_handles[0].get_markerfacecolor()
    assert matplotlib.colors.same_color(face[:3], "red")
    d.plot(ax=ax)  # back to the first Axes for the checks below
    assert ax.get_xlabel() and ax.get_ylabel()
    assert len(_diagonals(ax)) == 1 and DIAGONAL in _legend_texts(ax)
    _assert_legend_off_data(ax)


def test_epistemic_classwise_view_has_one_colour_per_class():
    g = torch.Generator().manual_seed(3)
    logits = 2 * torch.randn(1200, 4, generator=g, dtype=F64)
    labels = torch.multinomial(torch.softmax(logits, 1), 1, generator=g).squeeze(1)
    members = torch.softmax(logits[None] + 0.8 * torch.randn(5, 1200, 4, generator=g), -1)
    details = expected_epistemic_calibration_error(members, labels, 8, seed=0, return_details=True)
    d = EpistemicReliabilityDisplay.from_details(details, name="classwise").plot(scale="linear")
    colours = {tuple(np.round(c, 6)) for c in d.scatter_.get_facecolors()}
    assert len(colours) == 4
    shown = d.counts > 0
    assert len(d.scatter_.get_offsets()) == int(shown.sum())
    texts = _legend_texts(d.ax_)
    assert [t for t in texts if t.startswith("class ")] == [f"class {k}" for k in range(4)]
    # each bin is drawn in its class's legend colour
    handles = {t.get_text(): h for t, h in zip(d.ax_.get_legend().get_texts(),
                                               d.ax_.get_legend().legend_handles)}  # fmt: skip
    first_of_class = [int((d.classes[shown] == k).nonzero()[0]) for k in range(4)]
    for k, i in enumerate(first_of_class):
        assert matplotlib.colors.same_color(
            d.scatter_.get_facecolors()[i][:3], handles[f"class {k}"].get_markerfacecolor()[:3]
        )
    _assert_legend_off_data(d.ax_)


def test_epistemic_before_after_panels_share_axes():
    p, y = _binary_members(seed=4)
    before = EpistemicReliabilityDisplay.from_member_probs(p, y, 20, seed=0, binary=True)
    after = EpistemicReliabilityDisplay.from_member_probs(
        p**0.6, y, 20, seed=0, binary=True, name="after"
    )
    fig = plot_epistemic_reliability_panels({"before": before, "after": after})
    fig.canvas.draw()
    a, b = before.ax_, after.ax_
    assert a.get_xlim() == b.get_xlim() == a.get_ylim() == b.get_ylim()
    assert a.get_xscale() == b.get_xscale() == before.scale_ == after.scale_
    low, high = a.get_xlim()
    for d in (before, after):
        filled = d.counts > 0
        assert float(d.trust[filled].max()) < high and float(d.squared_error[filled].max()) < high
        assert len(_diagonals(d.ax_)) == 1 and d.ax_.get_legend() is None
    assert a.get_title() == f"before (EECE = {before.value:.4f})"
    assert b.get_title() == f"after (EECE = {after.value:.4f})"
    assert a.get_ylabel() and a.get_xlabel() and b.get_xlabel()
    # one figure legend, below both panels (so off their data)
    (legend,) = fig.legends
    box = legend.get_window_extent(fig.canvas.get_renderer())
    assert all(box.y1 <= ax.get_window_extent().y0 for ax in (a, b))
    assert [t.get_text() for t in legend.get_texts()] == [DIAGONAL]
    # on given axes each panel keeps its own legend
    fig, axes = plt.subplots(1, 2, layout="constrained")
    plot_epistemic_reliability_panels([before, after], axes=axes, scale="linear")
    assert before.scale_ == after.scale_ == "linear"
    for ax in axes:
        _assert_legend_off_data(ax)
    fig, axes = plt.subplots(2, 1, layout="constrained")
    plot_epistemic_reliability_panels([before, after], axes=axes, legend="titles")
    assert not fig.legends and all(ax.get_legend() is None for ax in axes)
    assert axes[1].get_title() == f"after (EECE = {after.value:.4f})"
    with pytest.raises(ValueError, match="`legend`"):
        plot_epistemic_reliability_panels([before], legend="below")


def test_epistemic_displays_on_one_axes_share_the_diagonal():
    p, y = _binary_members(seed=5, spread=0.3)
    q, z = _binary_members(seed=5, spread=2.0)
    small = EpistemicReliabilityDisplay.from_member_probs(p, y, 20, seed=0, binary=True)
    large = EpistemicReliabilityDisplay.from_member_probs(q, z, 20, seed=0, binary=True)
    assert large.extent("linear")[1] > small.extent("linear")[1]
    fig, ax = plt.subplots(layout="constrained")
    small.plot(ax=ax, scale="linear")
    large.plot(ax=ax, scale="auto")
    assert len(_diagonals(ax)) == 1 and large.scale_ == "linear"  # the first display's scale
    high = max(small.extent("linear")[1], large.extent("linear")[1])
    assert ax.get_xlim()[1] == pytest.approx(high)
    assert max(_diagonals(ax)[0].get_xdata()) == pytest.approx(high)


# ----------------------------------------------------------------------------- risk-coverage


def test_risk_coverage_reference_curves():
    probs, labels, _ = _overconfident(n=600, seed=6)
    conf, pred = probs.max(1)
    correct = pred == labels
    d = RiskCoverageDisplay.from_predictions(conf, correct, name="max prob").plot()
    e = 1.0 - correct.double().mean().item()
    assert d.error_rate == pytest.approx(e, abs=1e-12)
    x, y = d.oracle_line_.get_data()
    np.testing.assert_allclose(y, np.clip(x - (1 - e), 0, None) / x, atol=1e-12)
    assert y[x <= 1 - e].max() == 0.0 and y[-1] == pytest.approx(e)
    np.testing.assert_allclose(d.random_line_.get_ydata(), [e, e])
    texts = _legend_texts(d.ax_)
    assert any(t.startswith("oracle") for t in texts) and "random rejection" in texts
    assert d.ax_.get_xlabel() == "Coverage" and d.ax_.get_ylabel() == "Selective risk"
    assert d.ax_.get_ylim()[1] > max(float(d.risk.max()), e)  # the random line is inside
    _assert_legend_off_data(d.ax_)
    # a second curve on the same Axes reuses the references
    RiskCoverageDisplay.from_predictions(-conf, correct, name="reversed").plot(ax=d.ax_)
    assert len([ln for ln in d.ax_.lines if ln.get_label() == "random rejection"]) == 1
    bare = RiskCoverageDisplay.from_predictions(conf, correct).plot(
        show_oracle=False, show_random=False
    )
    assert bare.oracle_line_ is None and bare.random_line_ is None and len(bare.ax_.lines) == 1
    with pytest.raises(ValueError, match="`show_oracle`"):
        d.plot(show_oracle="yes")


def test_oracle_risk_bad_input():
    with pytest.raises(ValueError, match="`coverage`"):
        oracle_risk([0.0, 0.5], 0.1)
    with pytest.raises(ValueError, match="`error_rate`"):
        oracle_risk([0.5], 1.5)


# ----------------------------------------------------------------------------- scatter, smooth


def test_eece_vs_ece_scatter_layout():
    rows = [
        {"method": m, "ece": ece * (1 + t / 10), "eece": eece * (1 + t / 7)}
        for m, ece, eece in (("A", 0.01, 0.002), ("B", 0.05, 0.03), ("C", 0.2, 0.1))
        for t in range(3)
    ]
    d = EECEvsECEDisplay.from_rows(rows).plot()
    assert d.ax_.get_xlabel() and d.ax_.get_ylabel()
    assert d.ax_.get_xscale() == d.ax_.get_yscale() == "log"
    assert _legend_texts(d.ax_) == ["A", "B", "C"]
    _assert_legend_off_data(d.ax_)


def test_smooth_calibration_layout():
    g = torch.Generator().manual_seed(7)
    conf = torch.rand(800, generator=g, dtype=F64) * 0.5 + 0.5
    correct = torch.bernoulli(conf, generator=g)
    d = SmoothCalibrationDisplay.from_predictions(conf, correct, bandwidth=0.1).plot()
    assert d.ax_.get_xlabel() and d.ax_.get_ylabel()
    assert len(_diagonals(d.ax_)) == 1
    SmoothCalibrationDisplay.from_predictions(conf, correct, bandwidth=0.05).plot(ax=d.ax_)
    assert len(_diagonals(d.ax_)) == 1
    _assert_legend_off_data(d.ax_)
