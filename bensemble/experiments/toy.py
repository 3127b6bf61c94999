"""``bensemble reproduce toy``: the nine methods on 10 toy points (the paper's figures 2, 3a, 6).

Protocol (appendix B.1.2): two Gaussians of variance 3 centred at ``(-2.5, -2.5)`` (``y = 1``) and
``(2.5, 2.5)``, 10 training points, test points on a regular grid of ``[-8, 8]^2`` with labels
``y ~ Bernoulli(eta(x))``. Every method of :data:`~bensemble.experiments.zoo.PAPER_ORDER` is
trained with the paper's settings and scored on the grid: accuracy, ECE of the mean prediction,
EECE (100 K-means bins) and, since ``eta`` is exact here, the TECE. The figures are the EU maps
beside the true per-point error ``E_h[(eta(x) - h(x))^2]`` (figures 2 and 6) and the EECE per
method (figure 3a). The paper gives figure 3a as a plot only, so its numbers are "n/a"; the
"paper finding" column quotes what the text says about each method.
"""

from __future__ import annotations

import torch

from bensemble.datasets import make_toy_gaussians, make_toy_grid
from bensemble.experiments._common import (
    EECE_BACKEND,
    EECE_BINS,
    NA,
    ExperimentResult,
    Printer,
    RunOptions,
    Stopwatch,
    aggregate,
    bar_figure,
    binary_scores,
    columns_of,
    finish,
    method_member_probs,
    progress_bar,
    repeat_seeds,
    single_thread,
    zoo_settings,
)
from bensemble.experiments.zoo import ILLUSTRATIVE_METHODS, PAPER_ORDER
from bensemble.methods import RandomForestMembers

__all__ = ["DEFAULT_REPEATS", "METHODS", "N_TRAIN", "PAPER_FINDING", "SPLITTING_FOREST", "run"]

#: Independent repeats by default (mean ± sd); about 2-5 minutes on 2 CPU cores.
DEFAULT_REPEATS = 5

#: Training points (appendix B.1.2).
N_TRAIN = 10
GRID_SIDE = 100
QUICK_GRID_SIDE = 20
QUICK_BINS = 20
#: With --quick only these methods get EU maps (a 20-panel figure takes seconds to lay out).
QUICK_MAP_METHODS = ("Centroids", "Deep Ensemble")

#: What sections 4.1 and appendix B say about each method on the toy data.
PAPER_FINDING = {
    "Centroids": "miscalibrated (illustrative; fig. 2a)",
    "DropConnect": "well calibrated (fig. 3a)",
    "Bayesian Log. Reg.": "almost perfectly calibrated (fig. 6a)",
    "Likelihood": "miscalibrated (illustrative)",
    "EK-NN": "miscalibrated (illustrative)",
    "Random Forest": "worst active method (fig. 3a, 6b)",
    "MC-Dropout": "well calibrated (fig. 3a)",
    "Deep Ensemble": "well calibrated (fig. 2b, 3a)",
    "Bayesian Deep": "well calibrated (fig. 3a)",
}
#: Not in the paper: a forest that can split 10 points (``min_samples_leaf = 1``). The paper's
#: (``min_samples_leaf = 5``) cannot: with 10 points every tree is one leaf, so its members are
#: constant and its EECE only reflects the class balance of the training sample.
SPLITTING_FOREST = "Random Forest (leaf 1)"
PAPER_FINDING[SPLITTING_FOREST] = "not in the paper (a forest that can split)"
#: The rows of the table: the paper's nine methods, then the splitting forest.
METHODS = (*PAPER_ORDER, SPLITTING_FOREST)
VALUES = ("accuracy", "ece", "eece", "tece", "gap")


def run(options: RunOptions) -> ExperimentResult:
    """Run the toy experiment; print and write its table and figures."""
    watch, printer = Stopwatch(), Printer()
    quick = options.quick
    settings = zoo_settings(quick)
    side = QUICK_GRID_SIDE if quick else GRID_SIDE
    n_bins = QUICK_BINS if quick else EECE_BINS
    repeats = options.n_repeats(DEFAULT_REPEATS)
    report = options.report("toy")
    printer(
        f"toy: {N_TRAIN} training points, {side}x{side} test grid on [-8, 8]^2, the nine "
        f"methods (+ a forest with min_samples_leaf=1), EECE with {n_bins} K-means bins "
        f"({EECE_BACKEND}), {repeats} repeat(s), "
        f"seed {options.seed}{' (quick settings)' if quick else ''}"
    )
    records, notes = [], []
    maps: dict[str, torch.Tensor] = {}
    first = None
    jobs = [(s, m) for s in repeat_seeds(options.seed, repeats) for m in METHODS]
    with single_thread():
        for seed, method in progress_bar(jobs, desc="toy", enabled=options.progress):
            train = make_toy_gaussians(N_TRAIN, seed=seed)
            grid = make_toy_grid(side, seed=seed + 10_000)
            if method == SPLITTING_FOREST:
                forest = RandomForestMembers(
                    n_estimators=settings.n_trees, min_samples_leaf=1, random_state=seed
                ).fit(train.x, train.y)
                probs, note = forest.sample_members(grid.x), None
            else:
                probs, note = method_member_probs(
                    method, train.x, train.y, grid.x, settings=settings, seed=seed
                )
            if note and note not in notes:
                notes.append(note)
            p = probs[..., 1]
            scores = binary_scores(p, grid.y, eta=grid.eta, n_bins=n_bins, seed=seed)
            records.append(
                {
                    "method": method,
                    "group": "illustrative" if method in ILLUSTRATIVE_METHODS else "active",
                    **scores,
                    "paper EECE": NA,
                    "paper finding": PAPER_FINDING[method],
                }
            )
            if seed == options.seed and (not quick or method in QUICK_MAP_METHODS):
                first = (train, grid)
                maps[f"{method}: EU(x)"] = p.var(dim=0, unbiased=False)
                maps[f"{method}: E_h[(eta - h)^2]"] = ((grid.eta[None, :] - p) ** 2).mean(dim=0)
    rows = aggregate(records, ["method"], VALUES)
    title = "toy: EECE per method (paper figure 3a gives no numbers in the text)"
    printer.table(rows, title)
    for note in notes:
        printer(f"note: {note}")
    printer(
        "gap = |EECE - TECE|; TECE conditions on the member vector (P(y=1 | Pi(x))). The "
        "paper's forest (min_samples_leaf=5) cannot split 10 points: its trees are single "
        "leaves, so its EECE only reflects the class balance of the training sample. The "
        "Likelihood method's 10 nearest neighbours are the whole 10-point training set, so its "
        "prediction is the same at every grid point (accuracy about 1/2)."
    )
    report.add_table("toy", rows, title=title)
    _figures(report, rows, maps, first, dpi=50 if quick else 120)
    return finish("toy", report, {"toy": rows}, watch, printer, options)


def _figures(report, rows, maps, first, dpi: int) -> None:
    from bensemble.plots import plot_toy_maps

    train, grid = first
    fig = plot_toy_maps(grid.x, maps, ncols=6, points=train.x, point_labels=train.y, panel_size=3.2)
    report.add_figure("toy_eu_maps", fig, dpi=dpi)
    methods = columns_of(rows, "method")
    bars = {
        "EECE": (
            columns_of(rows, "eece"),
            columns_of(rows, "eece sd") if "eece sd" in rows[0] else None,
        ),
        "TECE": (
            columns_of(rows, "tece"),
            columns_of(rows, "tece sd") if "tece sd" in rows[0] else None,
        ),
    }
    fig = bar_figure(
        methods, bars, ylabel="epistemic calibration error", title="toy: EECE and TECE per method"
    )
    report.add_figure("toy_eece", fig, dpi=dpi)
