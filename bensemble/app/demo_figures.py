"""Figures of ``bensemble demo``: reliability and epistemic reliability diagrams, EU maps.

Each function takes the per-method runs of :mod:`bensemble.app.demo` and returns a
matplotlib Figure (matplotlib is imported inside the functions only).
"""

from __future__ import annotations

from typing import Any

import torch

from bensemble.app.demo_protocol import ECE_BINS

__all__ = ["epistemic_figure", "figure_runs", "maps_figure", "reliability_figure"]

#: Methods drawn in the figures (those that ran, at most four per dataset).
FIGURE_METHODS = ("Deep Ensemble", "MC-Dropout", "Random Forest", "EK-NN")
#: Keys of ``run.maps``: the members' EU and their squared error against ``eta``.
EU_KEY = "EU(x)"
ERROR_KEY = "E_h[(eta(x) - h(x))^2]"


def _method(run: Any) -> str:
    return run.label.split(" (")[0]


def reliability_figure(runs: list) -> Any:
    """Per method: before / after scaling on one diagram, their counts below (two methods a row)."""
    import matplotlib.pyplot as plt

    from bensemble.plots import ReliabilityDisplay

    ncols = min(2, len(runs))
    nrows = -(-len(runs) // ncols)
    fig, axes = plt.subplots(
        2 * nrows, ncols, figsize=(6.0 * ncols, 5.2 * nrows), squeeze=False,
        gridspec_kw={"height_ratios": [3, 1] * nrows}, layout="constrained",
    )  # fmt: skip
    for i in range(len(runs), nrows * ncols):
        axes[2 * (i // ncols), i % ncols].set_visible(False)
        axes[2 * (i // ncols) + 1, i % ncols].set_visible(False)
    for i, run in enumerate(runs):
        ax, below = axes[2 * (i // ncols), i % ncols], axes[2 * (i // ncols) + 1, i % ncols]
        below.sharex(ax)
        for stage, probs in run.probs.items():
            name = stage if stage == "before" else f"after (T = {run.fit['temperature']:.3f})"
            ReliabilityDisplay.from_predictions(probs, run.labels, n_bins=ECE_BINS, name=name).plot(
                ax=ax, counts_ax=below
            )
        ax.set_title(run.label)
    return fig


def epistemic_figure(runs: list) -> Any:
    """Per method (column): epistemic reliability before (top) and after (bottom) scaling, the
    two panels on shared axes (same scale, same limits); EECE in the titles, one legend below."""
    import matplotlib.pyplot as plt

    from bensemble.plots import EpistemicReliabilityDisplay, plot_epistemic_reliability_panels
    from bensemble.plots.epistemic_panels import shared_handles

    fig, axes = plt.subplots(
        2, len(runs), figsize=(4.2 * len(runs), 8.8), squeeze=False, layout="constrained"
    )
    drawn = []
    for j, run in enumerate(runs):
        stages = [s for s in ("before", "after") if s in run.details]
        displays = {
            f"{run.label}: {stage} scaling": EpistemicReliabilityDisplay.from_details(
                run.details[stage], name=stage
            )
            for stage in stages
        }
        if displays:
            plot_epistemic_reliability_panels(
                displays, axes=axes[: len(displays), j], legend="titles"
            )
            drawn += displays.values()
        for ax in axes[len(displays) :, j]:
            ax.set_visible(False)
        for ax in axes[: len(displays), j]:
            ax.title.set_fontsize("medium")
    if drawn:
        handles = shared_handles(drawn)
        fig.legend(
            handles=handles, loc="outside lower center", ncols=min(len(handles), 6),
            fontsize="small",
        )  # fmt: skip
    return fig


def maps_figure(runs: list, grid_x: torch.Tensor, x_train, y_train) -> Any:
    """Per method, its EU map beside its members' squared error on one shared colour scale.

    For the illustrative methods (no members of their own) the EU map is the EU the method
    reports, refitted on ``x_train`` (the paper's fig. 2(a)); the squared error is that of the
    members drawn from it.
    """
    from bensemble.methods.zoo import ILLUSTRATIVE_METHODS, illustrative_outputs
    from bensemble.plots import plot_toy_maps, toy_map_pairs

    eu, error, reported = {}, {}, []
    for run in runs:
        eu[run.label] = run.maps[EU_KEY]
        error[run.label] = run.maps[ERROR_KEY]
        if _method(run) in ILLUSTRATIVE_METHODS:
            eu[run.label] = illustrative_outputs(_method(run), x_train, y_train, grid_x)[1]
            reported.append(run.label)
    panels, pairs = toy_map_pairs(eu, error, reported=reported)
    return plot_toy_maps(
        grid_x, panels, groups=pairs, ncols=2, points=x_train, point_labels=y_train
    )


def figure_runs(runs: list) -> list:
    chosen = [r for r in runs if _method(r) in FIGURE_METHODS]
    return chosen[:4] or runs[:1]
