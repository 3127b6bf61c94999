"""``bensemble reproduce size``: random-forest EECE vs training-set size (paper figure 3b, right).

Protocol (section 4.2, appendix B.1.2): the toy Gaussians, a random forest of 100 trees trained on
``n`` points, scored on 40,000 fresh test points with the EECE (100 K-means bins). The paper reports
0.07 at 10 points, falling to a plateau of about 0.007 beyond 50 points (``paper/section4.json``).

Two forests are reported. The paper's (``min_samples_leaf = 5``) cannot split a bootstrap sample
of 10 points (a split needs 5 distinct points on each side, and a bootstrap of 10 holds about 6.5
distinct ones), so at 10 points every tree is a single leaf and all test points share one member
vector (the ``vectors`` column counts distinct member vectors): its EECE is then the one-bin
value ``|mean_h (acc - conf_h)^2 - Var_h conf_h|``, set by the class split of the sample. The
paper does not explain how its forest behaves there, so we also report ``min_samples_leaf = 1``,
which can split. The TECE (exact here, conditioned on the member vector) is printed beside each
EECE. :func:`forest_record` is shared with the noise sweep.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from bensemble._options import check_count, check_seed
from bensemble.datasets import make_toy_gaussians
from bensemble.experiments._common import NA, PAPER_REPEATS, RunOptions
from bensemble.experiments._plotting import line_figure
from bensemble.experiments._scores import EECE_BINS, binary_scores
from bensemble.experiments.findings import trend_finding, value_verdicts
from bensemble.experiments.illustrative import Convention
from bensemble.experiments.paper_values import paper_section
from bensemble.experiments.runner import ExperimentConfig, ExperimentSpec, Table, by, run_spec
from bensemble.methods import RandomForestMembers

__all__ = [
    "LEAF_SETTINGS",
    "SPEC",
    "ForestSweepConfig",
    "forest_figure",
    "forest_record",
    "forest_scores",
    "run",
]

SIZES, QUICK_SIZES = (10, 20, 30, 50, 100, 200, 500), (10, 50)
N_TEST, QUICK_TEST = 40_000, 2_000
N_TREES, QUICK_TREES = 100, 20
QUICK_BINS = 20
#: (label, min_samples_leaf): the paper's forest and one that can split 10 points.
LEAF_SETTINGS = (("leaf5", 5), ("leaf1", 1))


@dataclass(frozen=True)
class ForestSweepConfig(ExperimentConfig):
    """A forest sweep's settings: the swept values, test points, trees and bins."""

    values: tuple[Any, ...]
    n_test: int
    n_trees: int
    n_bins: int
    training: str

    def header(self) -> str:
        return (
            f"random forest ({self.n_trees} trees) on {self.training}, {self.n_test} test "
            f"points, EECE with {self.n_bins} K-means bins"
        )


def forest_config(name: str, values: tuple, quick_values: tuple, training: str) -> Any:
    """The ``configure`` of a forest sweep over ``values`` (``quick_values`` with --quick);
    ``training`` says what the forests train on."""

    def configure(options: RunOptions) -> ForestSweepConfig:
        quick = options.quick
        return ForestSweepConfig(
            quick, Convention.from_extra(options.extra, f"reproduce {name}"),
            quick_values if quick else values, QUICK_TEST if quick else N_TEST,
            QUICK_TREES if quick else N_TREES, QUICK_BINS if quick else EECE_BINS, training,
        )  # fmt: skip

    return configure


def forest_scores(
    x_train, y_train, test, *, min_samples_leaf: int, n_trees: int, n_bins: int, seed: int
) -> dict[str, float]:
    """Train a forest and score it on ``test`` (a :class:`~bensemble.datasets.ToyData`).

    Returns:
        :func:`~bensemble.experiments._scores.binary_scores` with the TECE, plus ``vectors``:
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


def forest_record(x_train, y_train, test, config: ForestSweepConfig, seed: int) -> dict[str, float]:
    """:func:`forest_scores` of every forest of :data:`LEAF_SETTINGS`, as one record.

    Keys are ``"EECE leaf5"``, ``"TECE leaf5"``, ``"accuracy leaf5"``, ``"vectors leaf5"``, ...
    """
    record: dict[str, float] = {}
    for label, leaf in LEAF_SETTINGS:
        scores = forest_scores(
            x_train, y_train, test, min_samples_leaf=leaf, n_trees=config.n_trees,
            n_bins=config.n_bins, seed=seed,
        )  # fmt: skip
        for field in ("eece", "tece", "accuracy", "vectors"):
            name = field.upper() if field in ("eece", "tece") else field
            record[f"{name} {label}"] = scores[field]
    return record


#: The averaged columns of a forest sweep.
FOREST_VALUES = tuple(
    f"{q} {label}" for label, _ in LEAF_SETTINGS for q in ("EECE", "TECE", "accuracy", "vectors")
)


def forest_figure(
    report, name: str, rows, x: str, *, title: str, xlabel: str, reference, caption: str
):
    """EECE of both forests against ``x`` (log axes), the paper's values as hollow squares."""
    xs = [r[x] for r in rows]
    series = {
        f"EECE, min_samples_leaf={leaf}": (
            xs, [r[f"EECE {label}"] for r in rows], [r.get(f"EECE {label} sd") for r in rows]
        )
        for label, leaf in LEAF_SETTINGS
    }  # fmt: skip
    fig = line_figure(
        series, xlabel=xlabel, ylabel="EECE", title=title, logx=x == "n_train", logy=True,
        reference=reference, caption=caption,
    )  # fmt: skip
    report.add_figure(name, fig)


def _paper_eece() -> dict[int, str]:
    return {int(n): v for n, v in paper_section("size")["eece"].items()}


def _verdicts(config: ForestSweepConfig, records) -> list[dict[str, Any]]:
    paper = paper_section("size")
    return [
        *value_verdicts(config, records, "n_train", "EECE leaf5", _paper_eece()),
        trend_finding(config, records, "n_train", "EECE leaf5", -1, "EECE falls with size",
                      paper["trend"]),
    ]  # fmt: skip


def _figures(report, tables, config: ForestSweepConfig, first) -> None:
    ref = [(n, float(v)) for n, v in _paper_eece().items() if n in config.values]
    forest_figure(
        report, "size", tables["size"], "n_train", title="Random forest: EECE vs training-set size",
        xlabel="training points",
        reference={"paper (section 4.2)": ([n for n, _ in ref], [v for _, v in ref])},
        caption="mean ± sd over repeats; members: the forest's trees (no illustrative method)",
    )  # fmt: skip


def _measure(config: ForestSweepConfig, test, n: int, seed: int) -> list[dict[str, Any]]:
    train = make_toy_gaussians(n, seed=seed)
    return [{"n_train": n, **forest_record(train.x, train.y, test, config, seed)}]


SPEC = ExperimentSpec(
    name="size",
    description="random-forest EECE vs training-set size (fig. 3b)",
    configure=forest_config("size", SIZES, QUICK_SIZES, "n toy points"),
    conditions=lambda config: config.values,
    prepare=lambda config, seed: make_toy_gaussians(config.n_test, seed=seed + 10_000),
    measure=_measure,
    tables=(
        Table(
            "size",
            "random-forest EECE vs training-set size (paper figure 3b, right)",
            by(
                ["n_train"],
                FOREST_VALUES,
                paper=lambda row, c: {"paper EECE": _paper_eece().get(row["n_train"], NA)},
            ),
        ),
    ),  # fmt: skip
    verdicts=_verdicts,
    figures=_figures,
    notes=lambda config: [
        "leaf5 = the paper's forest (min_samples_leaf=5): with 10 points no tree can split, so "
        "every test point has the same member vector (vectors = 1) and the EECE is a one-bin "
        "value set by the sample's class split; leaf1 = min_samples_leaf=1, which can split. "
        "vectors = distinct member vectors on the test points; TECE conditions on the member "
        "vector."
    ],
    # about 2-5 minutes on 2 CPU cores with the default repeats
    default_repeats=PAPER_REPEATS,
)


def run(options: RunOptions):
    """Run the training-set-size sweep; print and write its table, verdicts and figure."""
    return run_spec(SPEC, options)
