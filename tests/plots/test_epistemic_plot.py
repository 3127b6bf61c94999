"""Tests of the epistemic reliability diagram and the toy-grid maps."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from bensemble.datasets import make_toy_grid  # noqa: E402
from bensemble.metrics import expected_epistemic_calibration_error  # noqa: E402
from bensemble.plots import (  # noqa: E402
    EpistemicReliabilityDisplay,
    plot_epistemic_reliability_diagram,
    plot_toy_maps,
)

F64 = torch.float64


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _members(h=6, n=1500, seed=0, k=None):
    g = torch.Generator().manual_seed(seed)
    z = 3 * torch.randn(n, generator=g, dtype=F64)
    if k is None:
        p = torch.sigmoid(z + 0.7 * torch.randn(h, 1, generator=g, dtype=F64))
        y = torch.bernoulli(torch.sigmoid(z), generator=g).long()
        return p, y
    logits = z[None, :, None] * torch.randn(1, 1, k, generator=g, dtype=F64)
    p = torch.softmax(logits + 0.5 * torch.randn(h, 1, k, generator=g, dtype=F64), dim=-1)
    y = torch.randint(0, k, (n,), generator=g)
    return p, y


# ----------------------------------------------------------------------------- Display


def test_display_holds_exactly_the_details():
    p, y = _members()
    details = expected_epistemic_calibration_error(
        p, y, 20, seed=1, return_details=True, binary=True
    )
    display = EpistemicReliabilityDisplay.from_details(details, name="ens")
    assert display.trust is details.trust
    assert display.squared_error is details.squared_error
    assert display.counts is details.counts
    assert display.value == details.value and display.name == "ens"


def test_from_member_probs_equals_from_details():
    p, y = _members(seed=1)
    a = EpistemicReliabilityDisplay.from_member_probs(p, y, 15, seed=3, binary=True)
    details = expected_epistemic_calibration_error(
        p, y, 15, seed=3, return_details=True, binary=True
    )
    for field in ("trust", "squared_error", "counts"):
        torch.testing.assert_close(getattr(a, field), getattr(details, field), equal_nan=True)
    assert a.value == details.value


def test_a_binning_object_gives_the_old_keyword_numbers():
    from bensemble.metrics.binning import KMeansBinning, QuantileBinning

    p, y = _members(k=3, seed=4)
    with pytest.warns(DeprecationWarning):
        old = EpistemicReliabilityDisplay.from_member_probs(p, y, 12, seed=5, class_index=1)
    new = EpistemicReliabilityDisplay.from_member_probs(
        p, y, KMeansBinning(12, seed=5), class_index=1
    )
    for field in ("trust", "squared_error", "counts"):
        torch.testing.assert_close(getattr(old, field), getattr(new, field), equal_nan=True)
    assert old.value == new.value
    # a fitted binning is reused, any binning works; the default is 100 K-means bins, seed 0
    cells = KMeansBinning(8).fit(p)
    fixed = EpistemicReliabilityDisplay.from_member_probs(p, y, cells)
    assert fixed.value == expected_epistemic_calibration_error(p, y, cells)
    quantile = plot_epistemic_reliability_diagram(p, y, QuantileBinning(5), class_index=0)
    assert isinstance(quantile, Figure)
    default = EpistemicReliabilityDisplay.from_member_probs(p, y)
    assert default.value == expected_epistemic_calibration_error(p, y, KMeansBinning(100))


def test_classwise_details_pool_or_select_a_class():
    p, y = _members(k=3, seed=2)
    details = expected_epistemic_calibration_error(p, y, 10, seed=0, return_details=True)
    pooled = EpistemicReliabilityDisplay.from_details(details)
    assert pooled.trust.shape == (details.counts.numel(),)
    # The weighted mean distance to the diagonal over all (class, bin) points is the EECE.
    filled = pooled.counts > 0
    distance = (pooled.squared_error - pooled.trust).abs()
    assert float((pooled.weights[filled] * distance[filled]).sum()) == pytest.approx(
        details.value, rel=1e-12
    )
    one = EpistemicReliabilityDisplay.from_details(details, class_index=2)
    assert torch.equal(one.counts, details.counts[2])
    assert one.value == float(details.per_class[2])
    with pytest.raises(ValueError, match="`class_index`"):
        EpistemicReliabilityDisplay.from_details(details, class_index=3)
    binary = expected_epistemic_calibration_error(
        p[:, :, 0], (y == 0).long(), 10, seed=0, return_details=True, binary=True
    )
    with pytest.raises(ValueError, match="`class_index`"):
        EpistemicReliabilityDisplay.from_details(binary, class_index=0)
    with pytest.raises(ValueError, match="`details`"):
        EpistemicReliabilityDisplay.from_details({"trust": 1})


def test_plot_draws_bins_on_the_diagonal_diagram(tmp_path):
    p, y = _members(seed=3)
    display = EpistemicReliabilityDisplay.from_member_probs(
        p, y, 25, seed=0, name="ens", binary=True
    )
    assert display.plot(max_marker_size=200.0) is display
    fig, ax = display.figure_, display.ax_
    assert isinstance(fig, Figure) and ax in fig.axes
    filled = display.counts > 0
    offsets = display.scatter_.get_offsets()
    np.testing.assert_allclose(offsets[:, 0], display.trust[filled].numpy())
    np.testing.assert_allclose(offsets[:, 1], display.squared_error[filled].numpy())
    sizes = display.scatter_.get_sizes()
    weights = display.weights[filled].numpy()
    np.testing.assert_allclose(sizes, 200.0 * weights / weights.max())
    diagonal = [ln for ln in ax.lines if ln.get_label() == "Perfect calibration"]
    assert len(diagonal) == 1
    xd, yd = diagonal[0].get_data()
    np.testing.assert_allclose(xd, yd)
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(t.startswith("ens (EECE = ") for t in texts)
    path = tmp_path / "epistemic.png"
    fig.savefig(path)
    assert path.stat().st_size > 1000


def test_log_scale_and_given_axes():
    p, y = _members(h=1, seed=4)  # one member: EU = 0 everywhere
    fig, ax = plt.subplots()
    display = EpistemicReliabilityDisplay.from_member_probs(p, y, 10, seed=0, binary=True)
    display.plot(ax=ax, scale="log")
    assert display.ax_ is ax and ax.get_xscale() == "log"
    assert len(display.scatter_.get_offsets()) == 0  # every bin has trust 0: nothing to show
    with pytest.raises(ValueError, match="`scale`"):
        display.plot(scale="symlog")


def test_plot_function_returns_a_figure(tmp_path):
    p, y = _members(seed=5)
    fig = plot_epistemic_reliability_diagram(p, y, 12, seed=0, binary=True)
    assert isinstance(fig, Figure) and len(fig.axes) == 1
    fig.savefig(tmp_path / "e.png")


# ----------------------------------------------------------------------------- toy maps


def test_toy_maps_show_each_panel_as_an_image(tmp_path):
    grid = make_toy_grid(20, seed=0)
    p = torch.sigmoid(
        torch.logit(grid.eta)[None]
        + torch.randn(5, 1, generator=torch.Generator().manual_seed(0), dtype=F64)
    )
    eu = p.var(0, unbiased=False)
    err = ((grid.eta[None] - p) ** 2).mean(0)
    fig = plot_toy_maps(
        grid.x,
        {"EU(x)": eu, "true error": err.numpy()},
        points=grid.x[:10],
        point_labels=grid.y[:10],
    )
    assert isinstance(fig, Figure)
    image_axes = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in image_axes] == ["EU(x)", "true error"]
    np.testing.assert_allclose(image_axes[0].images[0].get_array(), eu.reshape(20, 20).numpy())
    np.testing.assert_allclose(image_axes[1].images[0].get_array(), err.reshape(20, 20).numpy())
    assert image_axes[0].images[0].get_extent() == [-8.0, 8.0, -8.0, 8.0]
    assert len(fig.axes) == 4  # two maps and two colour bars
    assert len(image_axes[0].collections) == 1  # the overlaid points
    path = tmp_path / "maps.png"
    fig.savefig(path)
    assert path.stat().st_size > 1000


def test_toy_maps_layout_and_shared_scale():
    grid = make_toy_grid(8, seed=0)
    panels = {f"p{i}": grid.eta * (i + 1) for i in range(3)}
    fig = plot_toy_maps(grid.x, panels, ncols=2, shared_scale=True)
    image_axes = [ax for ax in fig.axes if ax.images]
    assert len(image_axes) == 3
    limits = {ax.images[0].get_clim() for ax in image_axes}
    assert len(limits) == 1 and limits.pop()[1] == pytest.approx(3 * float(grid.eta.max()))
    hidden = [ax for ax in fig.axes if not ax.get_visible()]
    assert len(hidden) == 1


@pytest.mark.parametrize(
    "grid_x, panels, argument",
    [
        pytest.param(torch.rand(10, 2), {"a": torch.rand(10)}, "grid_x", id="not-square"),
        pytest.param(
            make_toy_grid(4).x[:, [1, 0]], {"a": torch.rand(16)}, "grid_x", id="x2-fastest"
        ),
        pytest.param(make_toy_grid(4).x, {"a": torch.rand(15)}, "panels", id="wrong-size"),
        pytest.param(make_toy_grid(4).x, {}, "panels", id="empty"),
    ],
)
def test_toy_maps_bad_input(grid_x, panels, argument):
    with pytest.raises(ValueError, match=f"`{argument}"):
        plot_toy_maps(grid_x, panels)


def test_deprecated_n_bins_keyword_gives_the_binning_objects_bins():
    """bensemble 0.3's ``from_member_probs(p, y, n_bins=..., seed=...)`` still works (deprecated)
    and bins exactly as ``KMeansBinning(n_bins, seed=...)``."""
    from bensemble.metrics import KMeansBinning

    g = torch.Generator().manual_seed(3)
    p = torch.softmax(torch.randn(4, 300, 3, generator=g), -1)
    y = torch.randint(0, 3, (300,), generator=g)
    new = EpistemicReliabilityDisplay.from_member_probs(p, y, KMeansBinning(6, seed=2))
    with pytest.warns(DeprecationWarning):
        old = EpistemicReliabilityDisplay.from_member_probs(p, y, n_bins=6, seed=2)
    for field in ("trust", "squared_error", "counts"):
        torch.testing.assert_close(getattr(old, field), getattr(new, field), rtol=0, atol=0)
    assert old.value == new.value
