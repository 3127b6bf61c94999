"""``bensemble reproduce toy``: the nine methods on 10 toy points (the paper's figures 2, 3a, 6).

Protocol (appendix B.1.2): two Gaussians of variance 3 centred at ``(-2.5, -2.5)`` (``y = 1``) and
``(2.5, 2.5)``, 10 training points (``n_train``), test points on a regular grid of ``[-8, 8]^2``
with labels ``y ~ Bernoulli(eta(x))``.

Networks are trained **to convergence** by default: full batch, :data:`EPOCHS` Adam steps at
``lr = 1e-3`` (the paper's 20 epochs of batch 32 are 20-40 steps on 10-50 points and leave the
networks underfit). Every network's loss curve is recorded; the table shows the final training
loss and its change over the last 10% of steps relative to the first step's loss
(:meth:`~bensemble.methods.zoo.LossLog.flatness`), which must be below :data:`FLAT_TOLERANCE` for
the loss to count as flat. The illustrative methods are scored under the run's convention
(``--trust``, ``--clip``; default trust = reported EU, draws unclipped) in the main table and
under all four in ``toy_conventions``, their TECE conditioned on ``(h(x), EU(x))``.

Every method of :data:`~bensemble.methods.zoo.PAPER_ORDER` (and a forest that can split 10
points) is scored on the grid: accuracy, ECE of the mean prediction, EECE (100 K-means bins) and,
since ``eta`` is exact here, the TECE. The figures are the EU maps beside the true per-point error
``E_h[(eta(x) - h(x))^2]`` (figures 2 and 6) and the EECE per method (figure 3a). The paper gives
figure 3a as a plot only, so its findings are judged repeat by repeat
(:mod:`bensemble.experiments.findings`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from bensemble.datasets import make_toy_gaussians, make_toy_grid
from bensemble.experiments._common import NA, PAPER_REPEATS, RunOptions, zoo_settings
from bensemble.experiments._plotting import bar_figure
from bensemble.experiments._scores import EECE_BINS, MEMBERS, score_method
from bensemble.experiments.findings import toy_findings
from bensemble.experiments.illustrative import CONVENTIONS, Convention
from bensemble.experiments.paper_values import paper_section
from bensemble.experiments.runner import ExperimentConfig, ExperimentSpec, Table, by, run_spec
from bensemble.methods.zoo import ILLUSTRATIVE_METHODS, PAPER_ORDER, LossLog, ZooSettings

__all__ = ["EPOCHS", "FLAT_TOLERANCE", "METHODS", "SPEC", "ToyConfig", "run", "toy_config"]

#: Training points (appendix B.1.2); the smallest is the Likelihood's 10 neighbours.
N_TRAIN = 10
MIN_N_TRAIN = 10
#: Full-batch Adam steps by default (``--quick``: :data:`QUICK_EPOCHS`).
EPOCHS = 1000
QUICK_EPOCHS = 50
LR = 1e-3
#: A loss curve is flat when its change over the last 10% of steps, relative to the first
#: step's loss, is below this.
FLAT_TOLERANCE = 1e-3
GRID_SIDE, QUICK_GRID_SIDE, QUICK_BINS = 100, 20, 20
#: With --quick only these methods get EU maps (a 20-panel figure takes seconds to lay out).
QUICK_MAP_METHODS = ("Centroids", "Deep Ensemble")
#: Not in the paper: a forest that can split 10 points (``min_samples_leaf = 1``). The paper's
#: (``min_samples_leaf = 5``) cannot: with 10 points every tree is one leaf.
SPLITTING_FOREST = "Random Forest (leaf 1)"
#: The rows of the table: the paper's nine methods, then the splitting forest.
METHODS = (*PAPER_ORDER, SPLITTING_FOREST)
VALUES = ("accuracy", "ece", "eece", "tece", "gap", "train loss", "loss change")


@dataclass(frozen=True)
class ToyConfig(ExperimentConfig):
    """The toy's options, validated: training size, network training, grid and bins."""

    n_train: int
    epochs: int
    lr: float
    batch_size: int | None
    settings: ZooSettings
    side: int
    n_bins: int

    def header(self) -> str:
        batch = "full batch" if self.batch_size is None else f"batch {self.batch_size}"
        return (
            f"{self.n_train} training points, {self.side}x{self.side} test grid on [-8, 8]^2, "
            f"the nine methods (+ a forest with min_samples_leaf=1), networks {self.epochs} "
            f"epochs ({batch}, Adam lr {self.lr:g}), EECE with {self.n_bins} K-means bins"
        )


def _int_option(extra, name: str, default, low: int):
    value = extra.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"reproduce toy: `{name}` must be an integer >= {low} (got {value!r})")
    return value


def toy_config(options: RunOptions) -> ToyConfig:
    """Read and validate the toy's options from ``options.extra`` (before anything trains).

    Keys: ``n_train`` (>= 10, default 10), ``epochs`` (>= 1; default 1000, 50 with quick),
    ``lr`` (> 0, default 1e-3), ``batch_size`` (>= 1; default None = full batch), ``trust``
    (``"reported"`` or ``"draws"``) and ``clip`` (bool) for the illustrative methods.
    """
    extra, quick = options.extra, options.quick
    n_train = _int_option(extra, "n_train", N_TRAIN, MIN_N_TRAIN)
    epochs = _int_option(extra, "epochs", QUICK_EPOCHS if quick else EPOCHS, 1)
    batch_size = _int_option(extra, "batch_size", None, 1)
    lr = extra.get("lr", LR)
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not (0 < lr < math.inf):
        raise ValueError(f"reproduce toy: `lr` must be a finite number > 0 (got {lr!r})")
    convention = Convention.from_extra(extra, "reproduce toy")
    settings = replace(zoo_settings(quick), epochs=epochs, lr=float(lr), batch_size=batch_size)
    side = QUICK_GRID_SIDE if quick else GRID_SIDE
    n_bins = QUICK_BINS if quick else EECE_BINS
    return ToyConfig(
        quick, convention, n_train, epochs, float(lr), batch_size, settings, side, n_bins
    )


def _prepare(config: ToyConfig, seed: int) -> dict[str, Any]:
    train = make_toy_gaussians(config.n_train, seed=seed)
    return {"train": train, "grid": make_toy_grid(config.side, seed=seed + 10_000), "maps": {}}


def _measure(config: ToyConfig, context: dict, method: str, seed: int) -> list[dict[str, Any]]:
    train, grid = context["train"], context["grid"]
    settings, curves = config.settings, []
    name = method
    if method == SPLITTING_FOREST:
        method, settings = "Random Forest", replace(settings, min_samples_leaf=1)
    conventions = (config.convention, *(c for c in CONVENTIONS if c != config.convention))
    result = score_method(
        method, (train.x, train.y), (grid.x, grid.y), settings=settings, eta=grid.eta,
        conventions=conventions, n_bins=config.n_bins, seed=seed, training_log=curves,
    )  # fmt: skip
    if not config.quick or name in QUICK_MAP_METHODS:  # the figure draws the first repeat's
        error = ((grid.eta[None, :] - result.members) ** 2).mean(dim=0)
        context["maps"][name] = (result.eu, error)
    flat = [LossLog.flatness(c) for c in curves]
    loss = {
        "train loss": max((f[0] for f in flat), default=None),
        "loss change": max((f[1] for f in flat), default=None),
    }
    return [{"method": name, **r, **loss, "note": result.note} for r in result.records]


def _paper(row: dict, config: ToyConfig) -> dict[str, Any]:
    said = paper_section("toy")["methods"].get(
        row["method"], "not in the paper (a forest that can split)"
    )
    return {"paper EECE": NA, "paper finding": said}


def _is_main(config: ToyConfig):
    return lambda r: r["convention"] in (MEMBERS, config.convention.label)


def _main_table(records, config: ToyConfig) -> list[dict[str, Any]]:
    keys = ("method", "group", "convention")
    return by(keys, VALUES, where=_is_main(config), paper=_paper)(records, config)


TABLES = (
    Table("toy", "EECE per method (paper figure 3a gives no numbers)", _main_table),
    Table(
        "toy_conventions",
        "the illustrative methods under every convention (trust x clip)",
        by(
            ("method", "convention"),
            ("mean EU", "eece", "tece", "gap"),
            where=lambda r: r["group"] == "illustrative",
        ),
    ),  # fmt: skip
)


def _notes(config: ToyConfig) -> list[str]:
    return [
        "gap = |EECE - TECE|. TECE conditions on Psi: the member vector for member methods, "
        "(h(x), EU(x)) for the illustrative ones (exact). 'loss change' = |mean loss over the "
        "last 10% of steps - the previous 10%| / first-step loss (max over the method's "
        f"networks; flat when < {FLAT_TOLERANCE:g}). The paper's forest (min_samples_leaf=5) "
        "cannot split 10 points: its trees are single leaves."
    ]


def _figures(report, tables, config: ToyConfig, first: dict) -> None:
    """``toy_eu_maps``: per method its EU map beside its members' squared error on one colour
    scale from 0 (figures 2 and 6; illustrative methods: the EU they report, fig. 2(a), and the
    draws of the run's convention); ``toy_eece``: EECE and TECE per method (figure 3a)."""
    from bensemble.plots import plot_toy_maps, toy_map_pairs

    dpi = 50 if config.quick else 120
    maps = first["maps"]
    panels, pairs = toy_map_pairs(
        {m: eu for m, (eu, _) in maps.items()},
        {m: err for m, (_, err) in maps.items()},
        reported=[m for m in maps if m in ILLUSTRATIVE_METHODS],
    )
    train, grid = first["train"], first["grid"]
    fig = plot_toy_maps(
        grid.x, panels, groups=pairs, ncols=6, points=train.x, point_labels=train.y,
        panel_size=3.2,
    )  # fmt: skip
    fig.suptitle(f"first repeat; {config.convention.caption}", fontsize=9)
    report.add_figure("toy_eu_maps", fig, dpi=dpi)
    rows = tables["toy"]
    fig = bar_figure(
        [r["method"] for r in rows],
        {q.upper(): ([r[q] for r in rows], [r.get(f"{q} sd") for r in rows])
         for q in ("eece", "tece")},
        ylabel="epistemic calibration error",
        title="toy: EECE and TECE per method (mean ± sd over repeats)",
        caption=config.convention.caption,
    )  # fmt: skip
    report.add_figure("toy_eece", fig, dpi=dpi)


SPEC = ExperimentSpec(
    name="toy",
    description="nine methods on 10 toy points (fig. 2, 3a, 6)",
    configure=toy_config,
    conditions=lambda config: METHODS,
    prepare=_prepare,
    measure=_measure,
    tables=TABLES,
    verdicts=toy_findings,
    figures=_figures,
    notes=_notes,
    # 21-33 minutes on 2 busy CPU cores with the default repeats
    default_repeats=PAPER_REPEATS,
    illustrative=True,
)


def run(options: RunOptions):
    """Run the toy experiment; print and write its tables, verdicts and figures."""
    return run_spec(SPEC, options)
