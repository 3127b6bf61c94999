"""``bensemble reproduce size``: random-forest EECE vs training-set size (paper figure 3b, right).

Protocol (section 4.2, appendix B.1.2): the toy Gaussians, a random forest of 100 trees trained on
``n`` points, scored on 40,000 fresh test points with the EECE (100 K-means bins). The paper reports
0.07 at 10 points, falling to a plateau of about 0.007 beyond 50 points.

Two forests are reported. The paper's (``min_samples_leaf = 5``) cannot split a bootstrap sample
of 10 points (a split needs 5 distinct points on each side, and a bootstrap of 10 holds about 6.5
distinct ones), so at 10 points every tree is a single leaf and all test points share one member
vector (the ``vectors`` column counts distinct member vectors): its EECE is then the one-bin
value ``|mean_h (acc - conf_h)^2 - Var_h conf_h|``. The paper does not explain how its forest
behaves there, so we also report ``min_samples_leaf = 1``, which can split. The TECE (exact here,
conditioned on the member vector) is printed beside each EECE.
"""

from __future__ import annotations

import torch

from bensemble._options import check_count, check_seed
from bensemble.datasets import make_toy_gaussians
from bensemble.experiments._common import (
    EECE_BACKEND,
    EECE_BINS,
    NA,
    ExperimentResult,
    Printer,
    RunOptions,
    Stopwatch,
    aggregate,
    binary_scores,
    columns_of,
    finish,
    line_figure,
    progress_bar,
    repeat_seeds,
    single_thread,
)
from bensemble.methods import RandomForestMembers

__all__ = [
    "DEFAULT_REPEATS",
    "LEAF_SETTINGS",
    "N_TEST",
    "PAPER_EECE",
    "SIZES",
    "forest_scores",
    "leaf_settings_record",
    "run",
]

#: Independent repeats by default (mean ± sd); about 2-5 minutes on 2 CPU cores.
DEFAULT_REPEATS = 5

SIZES = (10, 20, 30, 50, 100, 200, 500)
N_TEST = 40_000
N_TREES = 100
#: (label, min_samples_leaf): the paper's forest and one that can split 10 points.
LEAF_SETTINGS = (("leaf5", 5), ("leaf1", 1))
#: Section 4.2: ".07 with 10 training instances, to .007 with more than 50 instances".
PAPER_EECE = {10: 0.07, 50: 0.007, 100: 0.007, 200: 0.007, 500: 0.007}

QUICK_SIZES = (10, 50)
QUICK_TEST = 2_000
QUICK_TREES = 20
QUICK_BINS = 20


def forest_scores(
    x_train, y_train, test, *, min_samples_leaf: int, n_trees: int, n_bins: int, seed: int
) -> dict[str, float]:
    """Train a forest and score it on ``test`` (a :class:`~bensemble.datasets.ToyData`).

    Returns:
        :func:`~bensemble.experiments._common.binary_scores` with the TECE, plus ``vectors``:
        the number of distinct member vectors on the test points.
    """
    seed = check_seed(seed, "seed", "forest_scores")
    n_trees = check_count(n_trees, "n_trees", "forest_scores")
    forest = RandomForestMembers(
        n_estimators=n_trees, min_samples_leaf=min_samples_leaf, random_state=seed
    ).fit(x_train, y_train)
    p = forest.sample_members(test.x)[..., 1]
    scores = binary_scores(p, test.y, eta=test.eta, n_bins=n_bins, seed=seed)
    scores["vectors"] = float(torch.unique(p.T, dim=0).shape[0])
    return scores


def leaf_settings_record(
    x_train, y_train, test, *, n_trees: int, n_bins: int, seed: int, fields: tuple[str, ...]
) -> dict[str, float]:
    """:func:`forest_scores` for every forest of :data:`LEAF_SETTINGS`, as one table record.

    Keys are ``"<FIELD> <label>"`` with ``eece``/``tece`` upper-cased (``"EECE leaf5"``) and other
    fields as they are (``"vectors leaf1"``).
    """
    record: dict[str, float] = {}
    for label, leaf in LEAF_SETTINGS:
        scores = forest_scores(
            x_train, y_train, test, min_samples_leaf=leaf, n_trees=n_trees, n_bins=n_bins, seed=seed
        )
        for field in fields:
            name = field.upper() if field in ("eece", "tece") else field
            record[f"{name} {label}"] = scores[field]
    return record


def run(options: RunOptions) -> ExperimentResult:
    """Run the training-set-size sweep; print and write its table and figure."""
    watch, printer = Stopwatch(), Printer()
    quick = options.quick
    sizes = QUICK_SIZES if quick else SIZES
    n_test = QUICK_TEST if quick else N_TEST
    n_trees = QUICK_TREES if quick else N_TREES
    n_bins = QUICK_BINS if quick else EECE_BINS
    repeats = options.n_repeats(DEFAULT_REPEATS)
    report = options.report("size")
    printer(
        f"size: random forest ({n_trees} trees) on n toy points, {n_test} test points, EECE "
        f"with {n_bins} K-means bins ({EECE_BACKEND}), {repeats} repeat(s), seed {options.seed}"
        f"{' (quick settings)' if quick else ''}"
    )
    records = []
    jobs = [(s, n) for s in repeat_seeds(options.seed, repeats) for n in sizes]
    with single_thread():
        for seed, n in progress_bar(jobs, desc="size", enabled=options.progress):
            train = make_toy_gaussians(n, seed=seed)
            test = make_toy_gaussians(n_test, seed=seed + 10_000)
            record = {"n_train": n, "paper EECE": PAPER_EECE.get(n, NA)}
            record |= leaf_settings_record(
                train.x,
                train.y,
                test,
                n_trees=n_trees,
                n_bins=n_bins,
                seed=seed,
                fields=("eece", "tece", "vectors"),
            )
            records.append(record)
    values = [c for c in records[0] if c.split()[0] in ("EECE", "TECE", "vectors")]
    rows = aggregate(records, ["n_train"], values)
    title = "size: random-forest EECE vs training-set size (paper figure 3b, right)"
    printer.table(rows, title)
    printer(
        "leaf5 = the paper's forest (min_samples_leaf=5): with 10 points no tree can split, "
        "so every test point has the same member vector (vectors = 1) and the EECE is a "
        "one-bin value; leaf1 = min_samples_leaf=1, which can split. vectors = distinct member "
        "vectors on the test points; TECE conditions on the member vector."
    )
    report.add_table("size", rows, title=title)
    _figure(report, rows)
    return finish("size", report, {"size": rows}, watch, printer, options)


def _figure(report, rows) -> None:
    xs = columns_of(rows, "n_train")
    series = {}
    for label, leaf in LEAF_SETTINGS:
        key = f"EECE {label}"
        err = columns_of(rows, key + " sd") if key + " sd" in rows[0] else None
        series[f"EECE, min_samples_leaf={leaf}"] = (xs, columns_of(rows, key), err)
    ref = [(n, v) for n, v in PAPER_EECE.items() if n in xs]
    fig = line_figure(
        series,
        xlabel="training points",
        ylabel="EECE",
        title="Random forest: EECE vs training-set size",
        logx=True,
        logy=True,
        reference={"paper (section 4.2)": ([n for n, _ in ref], [v for _, v in ref])},
    )
    report.add_figure("size", fig)
