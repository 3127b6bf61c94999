"""Layout of the toy maps: one colour scale and one colour bar per EU / squared-error pair,
mathtext titles, the illustrative methods' reported EU (fig. 2(a))."""

from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from bensemble.datasets import make_toy_gaussians, make_toy_grid  # noqa: E402
from bensemble.plots import plot_toy_maps, toy_map_pairs  # noqa: E402

F64 = torch.float64


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


# ----------------------------------------------------------------------------- toy maps


def test_toy_map_pairs_share_one_colour_scale_and_bar():
    grid = make_toy_grid(12, seed=0)
    g = torch.Generator().manual_seed(0)
    h = torch.sigmoid(torch.logit(grid.eta)[None] * torch.rand(4, 1, generator=g, dtype=F64))
    eu = h.var(0, unbiased=False)
    err = ((grid.eta[None] - h) ** 2).mean(0)
    panels, pairs = toy_map_pairs(
        {"Deep Ensemble": eu, "Centroids": 3 * eu}, {"Deep Ensemble": err, "Centroids": err / 2},
        reported=["Centroids"],
    )  # fmt: skip
    assert pairs[1][0] == "Centroids\n" + r"reported $\mathrm{EU}(x)$"
    assert pairs[0][1] == "Deep Ensemble\n" + r"$\mathbb{E}_h[(\eta(x) - h(x))^2]$"
    fig = plot_toy_maps(grid.x, panels, groups=pairs, ncols=4, panel_size=2.0)
    fig.canvas.draw()  # mathtext titles must render
    maps = [ax for ax in fig.axes if ax.images]
    bars = [ax for ax in fig.axes if not ax.images]
    assert len(maps) == 4 and len(bars) == 2  # one colour bar per pair
    for (left, right), (eu_map, err_map) in zip(
        (maps[:2], maps[2:]), ((eu, err), (3 * eu, err / 2))
    ):
        assert left.images[0].get_clim() == right.images[0].get_clim()
        low, high = left.images[0].get_clim()
        assert low == 0.0  # colour bars start at 0: a pale panel is a small value
        assert high == pytest.approx(max(float(eu_map.max()), float(err_map.max())))
    assert maps[0].images[0].get_clim() != maps[2].images[0].get_clim()
    for bar, pair in zip(bars, (maps[:2], maps[2:])):  # each bar right of its own pair
        assert bar.get_position().x0 >= pair[1].get_position().x1 - 1e-9
    for ax in maps:
        assert ax.get_xlabel() == "$x_1$" and ax.get_ylabel() == "$x_2$" and ax.get_title()


def test_toy_map_groups_are_checked():
    grid = make_toy_grid(4, seed=0)
    panels = {"a": grid.eta, "b": grid.eta}
    for groups in ([["a", "c"]], [["a"], ["a", "b"]], "ab", [[]]):
        with pytest.raises(ValueError, match="`groups`"):
            plot_toy_maps(grid.x, panels, groups=groups)
    with pytest.raises(ValueError, match="`groups`"):
        plot_toy_maps(grid.x, panels, groups=[["a", "b"]], shared_scale=True)
    with pytest.raises(ValueError, match="`squared_error`"):
        toy_map_pairs({"m": grid.eta}, {"n": grid.eta})
    with pytest.raises(ValueError, match="`reported`"):
        toy_map_pairs({"m": grid.eta}, {"m": grid.eta}, reported=["x"])


def test_demo_maps_show_the_illustrative_methods_reported_eu():
    from bensemble.app.demo_figures import maps_figure
    from bensemble.methods.zoo import illustrative_outputs

    train = make_toy_gaussians(20, seed=0)
    grid = make_toy_grid(10, seed=1)
    members = torch.rand(5, 100, generator=torch.Generator().manual_seed(0), dtype=F64)
    maps = {"EU(x)": members.var(0), "E_h[(eta(x) - h(x))^2]": members.mean(0)}
    runs = [
        SimpleNamespace(label="EK-NN", maps=maps),
        SimpleNamespace(label="MC-Dropout", maps=maps),
    ]
    fig = maps_figure(runs, grid.x, train.x, train.y)
    images = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title().split("\n")[0] for ax in images] == ["EK-NN"] * 2 + ["MC-Dropout"] * 2
    reported = illustrative_outputs("EK-NN", train.x, train.y, grid.x)[1]
    np.testing.assert_allclose(images[0].images[0].get_array(), reported.reshape(10, 10))
    np.testing.assert_allclose(images[2].images[0].get_array(), maps["EU(x)"].reshape(10, 10))
    assert "reported" in images[0].get_title() and "reported" not in images[2].get_title()
    assert len(fig.axes) == 6  # four maps, a colour bar per pair
