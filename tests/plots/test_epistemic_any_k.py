"""The epistemic reliability diagram is readable at any number of classes (issue 20, item 5).

Measured in pixels after an Agg draw: the Axes keep the size they have without a legend (at
K = 10 an 11-entry legend used to squeeze them to about 120-140 px), nothing is cut off the
figure (``legend_loc="outside"`` used to cut the legend), and at K = 100 the ten classes with the
largest support are drawn and the title says so.
"""

import functools

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from bensemble.metrics import expected_epistemic_calibration_error  # noqa: E402
from bensemble.plots import EpistemicReliabilityDisplay  # noqa: E402
from bensemble.plots._classes import class_support  # noqa: E402

#: The smallest Axes side accepted, in pixels (the default figure without a legend: ~427 px).
MIN_SIDE = 380


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@functools.cache
def _details(k: int, n: int = 1500, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    logits = 2 * torch.randn(5, n, k, generator=g) + 3 * torch.randn(1, n, k, generator=g)
    # uneven class frequencies, so "largest support" is a real choice at K = 100
    logits = logits + torch.linspace(2.0, 0.0, k)
    members = logits.softmax(-1)
    labels = torch.multinomial(members.mean(0), 1, generator=g).squeeze(1)
    details = expected_epistemic_calibration_error(members, labels, 8, seed=0, return_details=True)
    return details, labels


def _side(ax) -> float:
    box = ax.get_window_extent()
    return min(box.width, box.height)


def _inside_figure(fig, artist) -> bool:
    box = artist.get_window_extent(fig.canvas.get_renderer())
    return (
        box.x0 >= -0.5
        and box.y0 >= -0.5
        and box.x1 <= fig.bbox.width + 0.5
        and (box.y1 <= fig.bbox.height + 0.5)
    )


@pytest.mark.parametrize("k", [2, 10, 100])
@pytest.mark.parametrize("legend_loc", ["free", "outside"])
def test_axes_keep_their_size_and_nothing_is_cut(k, legend_loc):
    details, _ = _details(k)
    bare = EpistemicReliabilityDisplay.from_details(details, name="ensemble").plot(legend_loc=None)
    bare.figure_.canvas.draw()
    reference = _side(bare.ax_)
    shown = EpistemicReliabilityDisplay.from_details(details, name="ensemble")
    fig = shown.plot(legend_loc=legend_loc).figure_
    fig.canvas.draw()
    side = _side(shown.ax_)
    assert side >= MIN_SIDE, f"K={k}, {legend_loc}: Axes of {side:.0f} px"
    assert side >= reference - 2, f"K={k}, {legend_loc}: {side:.0f} px vs {reference:.0f} bare"
    legend = shown.ax_.get_legend()
    assert _inside_figure(fig, legend), f"K={k}, {legend_loc}: legend cut off"
    for label in (shown.ax_.yaxis.label, shown.ax_.xaxis.label, shown.ax_.title):
        assert _inside_figure(fig, label), f"K={k}, {legend_loc}: {label.get_text()!r} cut off"
    low, high = shown.ax_.get_ylim()
    ticks = [
        tick.label1
        for tick, at in zip(shown.ax_.yaxis.get_major_ticks(), shown.ax_.get_yticks())
        if low <= at <= high and tick.label1.get_visible() and tick.label1.get_text()
    ]
    assert ticks and all(_inside_figure(fig, t) for t in ticks), f"K={k}: y tick labels cut"


def test_many_classes_draw_the_largest_support_and_say_so():
    details, labels = _details(100)
    support = torch.bincount(labels, minlength=100).to(torch.float64)
    # the support a display derives from the details is the number of labels of each class
    torch.testing.assert_close(class_support(details.counts, details.acc), support)
    display = EpistemicReliabilityDisplay.from_details(details).plot()
    expected = torch.argsort(-support, stable=True)[:10].sort().values
    assert display.shown_classes_.tolist() == expected.tolist()
    assert "10 of 100 classes shown (largest support)" in display.ax_.get_title()
    labels_in_legend = [t.get_text() for t in display.ax_.get_legend().get_texts()]
    assert [t for t in labels_in_legend if t.startswith("class ")] == [
        f"class {k}" for k in expected.tolist()
    ]
    # every drawn marker is a bin of a shown class, and every filled bin of one is drawn
    drawn = len(display.scatter_.get_offsets())
    keep = (display.counts > 0) & torch.isin(display.classes, expected)
    keep &= (display.trust > 0) & (display.squared_error > 0) if display.scale_ == "log" else keep
    assert drawn == int(keep.sum())


def test_all_classes_on_request_and_below_the_limit():
    details, _ = _details(10)
    display = EpistemicReliabilityDisplay.from_details(details).plot()
    assert display.shown_classes_.tolist() == list(range(10)) and display.class_note_ is None
    details, _ = _details(30)
    wide = EpistemicReliabilityDisplay.from_details(details).plot(max_classes=None)
    assert len(wide.shown_classes_) == 30
    wide.figure_.canvas.draw()
    assert _side(wide.ax_) >= MIN_SIDE  # 32 entries: columns, and a wider figure
    assert _inside_figure(wide.figure_, wide.ax_.get_legend())


def test_a_users_axes_are_never_resized():
    details, _ = _details(10)
    fig, ax = plt.subplots(figsize=(4, 4))
    EpistemicReliabilityDisplay.from_details(details).plot(ax=ax, legend_loc="outside")
    assert tuple(fig.get_size_inches()) == (4.0, 4.0)


@pytest.mark.parametrize("bad", [0, -1, 2.5, "10"])
def test_bad_max_classes(bad):
    details, _ = _details(10)
    with pytest.raises(ValueError, match="`max_classes`"):
        EpistemicReliabilityDisplay.from_details(details).plot(max_classes=bad)


def _count_layouts(monkeypatch) -> list:
    """Every constrained layout and every draw without rendering is recorded."""
    from matplotlib.figure import Figure
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    calls: list = []
    real_draw, real_layout = Figure.draw_without_rendering, ConstrainedLayoutEngine.execute

    def draw(self):
        calls.append("draw")
        return real_draw(self)

    def layout(self, fig):
        calls.append("layout")
        return real_layout(self, fig)

    monkeypatch.setattr(Figure, "draw_without_rendering", draw)
    monkeypatch.setattr(ConstrainedLayoutEngine, "execute", layout)
    return calls


@pytest.mark.parametrize("k", [2, 10, 100])
def test_an_outside_legend_costs_one_layout(k, monkeypatch):
    # the side before the legend is read off the layout with it (issue 21: the tiny report's
    # epistemic figure used to be laid out three times, then once more by savefig)
    details, _ = _details(k)
    calls = _count_layouts(monkeypatch)
    EpistemicReliabilityDisplay.from_details(details, name="ensemble").plot(legend_loc="outside")
    assert calls == ["layout"]  # the layout alone: nothing drawn


def test_a_free_legend_measures_the_bare_side_in_its_own_layout(monkeypatch):
    details, _ = _details(2)
    calls = _count_layouts(monkeypatch)
    EpistemicReliabilityDisplay.from_details(details, name="ensemble").plot(legend_loc="free")
    assert calls == ["layout", "layout"]  # place_legend's (no legend yet), the check with it


@pytest.mark.parametrize("k", [2, 10, 100])
@pytest.mark.parametrize("loc", ["outside", "upper left"])
def test_side_without_legend_is_the_side_a_layout_without_it_gives(k, loc):
    from bensemble.plots._layout import axes_side, side_without_legend

    details, _ = _details(k)
    fig, ax = plt.subplots(figsize=(7.5, 5), layout="constrained")
    display = EpistemicReliabilityDisplay.from_details(details, name="ensemble")
    display.plot(ax=ax, legend_loc=loc)
    ax.set_anchor("W")
    axes_side(ax)
    read = side_without_legend(ax)
    assert read is not None
    ax.get_legend().set_in_layout(False)
    assert read == pytest.approx(axes_side(ax), abs=0.5)


def test_side_without_legend_declines_when_the_legend_squeezes_the_axes():
    from bensemble.plots._layout import axes_side, side_without_legend

    details, _ = _details(10)
    fig, ax = plt.subplots(figsize=(5.5, 5), layout="constrained")
    display = EpistemicReliabilityDisplay.from_details(details, name="ensemble")
    display.plot(ax=ax, legend_loc="outside")  # no room for it: the width limits the Axes
    squeezed = axes_side(ax)
    assert side_without_legend(ax) is None
    ax.get_legend().set_in_layout(False)
    assert axes_side(ax) > squeezed + 10
