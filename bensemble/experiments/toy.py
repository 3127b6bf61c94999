"""``bensemble reproduce toy``: the nine methods on 10 toy points (the paper's figures 2, 3a, 6).

Protocol (appendix B.1.2): two Gaussians of variance 3 centred at ``(-2.5, -2.5)`` (``y = 1``) and
``(2.5, 2.5)``, 10 training points (``n_train``), test points on a regular grid of ``[-8, 8]^2``
with labels ``y ~ Bernoulli(eta(x))``.

Networks are trained **to convergence** by default: full batch, :data:`EPOCHS` Adam steps at
``lr = 1e-3`` (the paper's 20 epochs of batch 32 are 20-40 steps on 10-50 points and leave the
networks underfit). Every network's loss curve is recorded; the table shows the final training
loss and its change over the last 10% of steps relative to the first step's loss
(:meth:`~bensemble.methods.zoo.LossLog.flatness`), which must be below
:data:`FLAT_TOLERANCE` for the loss to count as flat. The illustrative methods are scored under
both trusts of :mod:`bensemble.experiments.illustrative` (default: trust = reported EU, draws
unclipped, as the paper's sentence states), their TECE conditioned on ``(h(x), EU(x))``.

Every method of :data:`~bensemble.methods.zoo.PAPER_ORDER` is scored on the grid: accuracy,
ECE of the mean prediction,
EECE (100 K-means bins) and, since ``eta`` is exact here, the TECE. The figures are the EU maps
beside the true per-point error ``E_h[(eta(x) - h(x))^2]`` (figures 2 and 6) and the EECE per
method (figure 3a). The paper gives figure 3a as a plot only, so its numbers are "n/a"; the
"paper finding" column quotes what the text says about each method.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

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
    progress_bar,
    repeat_seeds,
    single_thread,
    zoo_settings,
)
from bensemble.experiments.illustrative import (
    DEFAULT_CLIP,
    DEFAULT_TRUST,
    TRUST,
    convention_label,
    illustrative_scores,
)
from bensemble.methods import RandomForestMembers
from bensemble.methods.zoo import (
    ACTIVE_METHODS,
    ILLUSTRATIVE_METHODS,
    PAPER_ORDER,
    LossLog,
    illustrative_outputs,
    member_probs,
)

__all__ = [
    "DEFAULT_REPEATS",
    "EPOCHS",
    "FLAT_TOLERANCE",
    "METHODS",
    "N_TRAIN",
    "PAPER_FINDING",
    "SPLITTING_FOREST",
    "ToyConfig",
    "findings",
    "run",
    "toy_config",
]

#: Independent repeats by default (mean ± sd); about 15 minutes on 2 busy CPU cores (measured:
#: 907 s at 10 points, 935 s at 50, with converged networks).
DEFAULT_REPEATS = 5

#: Training points (appendix B.1.2).
N_TRAIN = 10
#: Smallest ``n_train``: the Likelihood method's 10 neighbours.
MIN_N_TRAIN = 10
#: Full-batch Adam steps by default (``--quick``: :data:`QUICK_EPOCHS`).
EPOCHS = 1000
QUICK_EPOCHS = 50
LR = 1e-3
#: A loss curve is flat when its change over the last 10% of steps, relative to the first
#: step's loss, is below this.
FLAT_TOLERANCE = 1e-3
#: The paper's toy findings are judged with these tolerances (see :func:`findings`).
BLR_TECE_TOLERANCE = 0.01
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
VALUES = ("accuracy", "ece", "eece", "tece", "gap", "train loss", "loss change")
MEMBERS = "members"


@dataclass(frozen=True)
class ToyConfig:
    """The toy options, validated: training size, network training, illustrative convention."""

    n_train: int
    epochs: int
    lr: float
    batch_size: int | None
    trust: str
    clip: bool


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
    extra = options.extra
    n_train = _int_option(extra, "n_train", N_TRAIN, MIN_N_TRAIN)
    epochs = _int_option(extra, "epochs", QUICK_EPOCHS if options.quick else EPOCHS, 1)
    batch_size = _int_option(extra, "batch_size", None, 1)
    lr = extra.get("lr", LR)
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not (0 < lr < math.inf):
        raise ValueError(f"reproduce toy: `lr` must be a finite number > 0 (got {lr!r})")
    trust = extra.get("trust", DEFAULT_TRUST)
    if trust not in TRUST:
        raise ValueError(f"reproduce toy: `trust` must be one of {TRUST} (got {trust!r})")
    clip = extra.get("clip", DEFAULT_CLIP)
    if not isinstance(clip, bool):
        raise ValueError(f"reproduce toy: `clip` must be True or False (got {clip!r})")
    return ToyConfig(n_train, epochs, float(lr), batch_size, trust, clip)


def run(options: RunOptions) -> ExperimentResult:
    """Run the toy experiment; print and write its table and figures."""
    config = toy_config(options)  # every option is checked before anything trains
    watch, printer = Stopwatch(), Printer()
    quick = options.quick
    settings = replace(
        zoo_settings(quick), epochs=config.epochs, lr=config.lr, batch_size=config.batch_size
    )
    side = QUICK_GRID_SIDE if quick else GRID_SIDE
    n_bins = QUICK_BINS if quick else EECE_BINS
    repeats = options.n_repeats(DEFAULT_REPEATS)
    report = options.report("toy")
    batch = "full batch" if config.batch_size is None else f"batch {config.batch_size}"
    printer(
        f"toy: {config.n_train} training points, {side}x{side} test grid on [-8, 8]^2, the nine "
        f"methods (+ a forest with min_samples_leaf=1), networks {config.epochs} epochs "
        f"({batch}, Adam lr {config.lr:g}), EECE with {n_bins} K-means bins "
        f"({EECE_BACKEND}), {repeats} repeat(s), seed {options.seed}"
        f"{' (quick settings)' if quick else ''}; illustrative methods scored with "
        f"{convention_label(config.trust, config.clip)} (default) and the other trust"
    )
    records, notes = [], []
    maps: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # method -> (EU, squared error)
    first = None
    jobs = [(s, m) for s in repeat_seeds(options.seed, repeats) for m in METHODS]
    trusts = (config.trust, *(t for t in TRUST if t != config.trust))
    with single_thread():
        for seed, method in progress_bar(jobs, desc="toy", enabled=options.progress):
            train = make_toy_gaussians(config.n_train, seed=seed)
            grid = make_toy_grid(side, seed=seed + 10_000)
            base = {"paper EECE": NA, "paper finding": PAPER_FINDING[method]}
            if method in ILLUSTRATIVE_METHODS:
                h, eu, note = illustrative_outputs(method, train.x, train.y, grid.x)
                for trust in trusts:
                    scores = illustrative_scores(
                        h,
                        eu,
                        grid.y,
                        eta=grid.eta,
                        trust=trust,
                        clip=config.clip,
                        n_members=settings.n_samples,
                        n_bins=n_bins,
                        seed=seed,
                    )
                    label = convention_label(trust, config.clip)
                    records.append(
                        {
                            "method": method,
                            "group": "illustrative",
                            "convention": label,
                            **scores,
                            "train loss": None,
                            "loss change": None,
                            **base,
                        }
                    )
                p, eu_map = None, eu
            else:
                curves: list[list[float]] = []
                if method == SPLITTING_FOREST:
                    forest = RandomForestMembers(
                        n_estimators=settings.n_trees, min_samples_leaf=1, random_state=seed
                    ).fit(train.x, train.y)
                    probs, note = forest.sample_members(grid.x), None
                else:
                    probs = member_probs(
                        method,
                        train.x,
                        train.y,
                        grid.x,
                        settings=settings,
                        seed=seed,
                        training_log=curves,
                    )
                    note = None
                p = probs[..., 1]
                scores = binary_scores(p, grid.y, eta=grid.eta, n_bins=n_bins, seed=seed)
                flat = [LossLog.flatness(c) for c in curves]
                records.append(
                    {
                        "method": method,
                        "group": "active",
                        "convention": MEMBERS,
                        **scores,
                        "train loss": max((f[0] for f in flat), default=None),
                        "loss change": max((f[1] for f in flat), default=None),
                        **base,
                    }
                )
                eu_map = p.var(dim=0, unbiased=False)
            if note and note not in notes:
                notes.append(note)
            if seed == options.seed and (not quick or method in QUICK_MAP_METHODS):
                first = (train, grid)
                if p is None:  # the illustrative method's own draws, default convention
                    g = torch.Generator().manual_seed(seed)
                    from bensemble.methods import gaussian_members

                    p = gaussian_members(h, eu, settings.n_samples, clip=config.clip, generator=g)[
                        ..., 1
                    ]
                maps[method] = (eu_map, ((grid.eta[None, :] - p) ** 2).mean(dim=0))
    every = aggregate(records, ["method", "convention"], VALUES)
    default_label = convention_label(config.trust, config.clip)
    rows = [r for r in every if r["convention"] in (MEMBERS, default_label)]
    both = [r for r in every if r["group"] == "illustrative"]
    title = "toy: EECE per method (paper figure 3a gives no numbers in the text)"
    printer.table(rows, title)
    conv_title = "toy: the illustrative methods under both trusts (the scoring convention)"
    printer.table(both, conv_title)
    verdicts = findings(rows, default_label)
    printer.table(verdicts, "toy: the paper's findings (illustrative rows: the default convention)")
    for note in notes:
        printer(f"note: {note}")
    printer(
        "gap = |EECE - TECE|. TECE conditions on Psi: the member vector for member methods, "
        "(h(x), EU(x)) for the illustrative ones (exact). 'loss change' = |mean loss over the "
        "last 10% of steps - the previous 10%| / first-step loss (max over the method's "
        f"networks; flat when < {FLAT_TOLERANCE:g}). The paper's forest (min_samples_leaf=5) "
        "cannot split 10 points: its trees are single leaves. With 10 training points the "
        "Likelihood method's 10 neighbours are the whole training set (constant prediction)."
    )
    report.add_table("toy", rows, title=title)
    report.add_table("toy_conventions", both, title=conv_title)
    report.add_table("toy_findings", verdicts, title="toy: the paper's findings")
    _figures(report, rows, maps, first, dpi=50 if quick else 120)
    tables = {"toy": rows, "toy_conventions": both, "toy_findings": verdicts}
    return finish("toy", report, tables, watch, printer, options)


def findings(rows, default_label: str) -> list[dict]:
    """The paper's three toy findings, judged on the mean EECE / TECE of ``rows``.

    * illustrative worst: every illustrative method (default convention) has a higher mean EECE
      than every active method of the paper;
    * RF worst active: the paper's Random Forest has the highest mean EECE of the six active
      methods;
    * BLR near perfect: Bayesian logistic regression's mean TECE is below
      :data:`BLR_TECE_TOLERANCE`.
    """
    eece = {
        r["method"]: r["eece"]
        for r in rows
        if r["method"] in PAPER_ORDER and r["convention"] in (MEMBERS, default_label)
    }
    tece = {r["method"]: r.get("tece") for r in rows if r["convention"] == MEMBERS}
    active = {m: eece[m] for m in ACTIVE_METHODS}
    illus = {m: eece[m] for m in ILLUSTRATIVE_METHODS}
    worst_active = max(active, key=active.get)
    best_illus = min(illus, key=illus.get)
    blr = tece.get("Bayesian Log. Reg.")
    out = [
        {
            "finding": "illustrative methods worst",
            "ours": f"best illustrative {best_illus} {illus[best_illus]:.4f} vs worst active "
            f"{worst_active} {active[worst_active]:.4f}",
            "verdict": "holds" if illus[best_illus] > active[worst_active] else "differs",
        },
        {
            "finding": "Random Forest worst active",
            "ours": f"worst active {worst_active} {active[worst_active]:.4f}",
            "verdict": "holds" if worst_active == "Random Forest" else "differs",
        },
        {
            "finding": f"BLR near perfect (TECE < {BLR_TECE_TOLERANCE:g})",
            "ours": f"TECE {blr:.4f}, EECE {eece['Bayesian Log. Reg.']:.4f}",
            "verdict": "holds" if blr is not None and blr < BLR_TECE_TOLERANCE else "differs",
        },
    ]
    return out


def _figures(report, rows, maps, first, dpi: int) -> None:
    """``toy_eu_maps``: per method, its EU map beside its members' squared error on one shared
    colour scale (figures 2 and 6; for the illustrative methods the EU is the one they report,
    fig. 2(a)); ``toy_eece``: EECE and TECE per method (figure 3a)."""
    from bensemble.plots import plot_toy_maps, toy_map_pairs

    train, grid = first
    panels, pairs = toy_map_pairs(
        {m: eu for m, (eu, _) in maps.items()},
        {m: err for m, (_, err) in maps.items()},
        reported=[m for m in maps if m in ILLUSTRATIVE_METHODS],
    )
    fig = plot_toy_maps(
        grid.x, panels, groups=pairs, ncols=6, points=train.x, point_labels=train.y,
        panel_size=3.2,
    )  # fmt: skip
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
