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


def _dedupe_legend(ax: Any) -> None:
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), loc="lower right", fontsize="small")


def reliability_figure(runs: list) -> Any:
    import matplotlib.pyplot as plt

    from bensemble.plots import ReliabilityDisplay

    fig, axes = plt.subplots(1, len(runs), figsize=(4.5 * len(runs), 4.5), squeeze=False)
    for ax, run in zip(axes[0], runs):
        for stage, probs in run.probs.items():
            name = stage if stage == "before" else f"after (T = {run.fit['temperature']:.3f})"
            ReliabilityDisplay.from_predictions(probs, run.labels, n_bins=ECE_BINS, name=name).plot(
                ax=ax, show_counts=False
            )
        _dedupe_legend(ax)
        ax.set_title(run.label)
        ax.set_xlabel("Confidence")
    fig.tight_layout()
    return fig


def epistemic_figure(runs: list) -> Any:
    import matplotlib.pyplot as plt

    from bensemble.plots import EpistemicReliabilityDisplay

    fig, axes = plt.subplots(2, len(runs), figsize=(4.5 * len(runs), 9), squeeze=False)
    for j, run in enumerate(runs):
        for i, stage in enumerate(("before", "after")):
            ax = axes[i, j]
            if stage not in run.details:
                ax.set_visible(False)
                continue
            EpistemicReliabilityDisplay.from_details(run.details[stage], name=stage).plot(ax=ax)
            ax.set_title(f"{run.label}: {stage} scaling", fontsize="medium")
            ax.set_xlabel("reported EU (bin mean)")
            ax.set_ylabel("members' squared error")
    fig.tight_layout()
    return fig


def maps_figure(runs: list, grid_x: torch.Tensor, x_train, y_train) -> Any:
    from bensemble.plots import plot_toy_maps

    panels = {f"{run.label}: {key}": value for run in runs for key, value in run.maps.items()}
    return plot_toy_maps(grid_x, panels, ncols=2, points=x_train, point_labels=y_train)


def figure_runs(runs: list) -> list:
    chosen = [r for r in runs if r.label.split(" (")[0] in FIGURE_METHODS]
    return chosen[:4] or runs[:1]
