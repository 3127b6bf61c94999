"""``bensemble demo``: the paper's methods on embedded data, before and after temperature scaling.

Two datasets, nothing downloaded:

* **toy** - the two Gaussians of Hoarau's epistemic-calibration paper
  (:func:`bensemble.datasets.make_toy_gaussians`), where the true ``eta(x) = P(y = 1 | x)`` is
  known: train / calibration / test sets drawn independently, plus a regular grid for the maps.
* **digits** - scikit-learn's bundled ``load_digits`` (8x8 images, 10 classes, inputs / 16),
  split 60 / 20 / 20 (stratified) into train / calibration / test. The methods that produce
  10-class members run on all ten classes; the binary-only ones (Bayesian logistic regression and
  the three illustrative methods) run one-vs-all on :data:`ONE_VS_ALL_DIGIT` against the rest.

Protocol for every method (:func:`bensemble.experiments.zoo.member_probs`, one call per method so
that calibration, test and grid points see the same members):

1. The calibration set is cut in two separate halves
   (:func:`bensemble.conformal.split_calibration`), as the practitioner's guide requires:
   conformal labels must play no part in fitting the temperature.
2. Temperature scaling ("pool, then calibrate") is fitted on the first half, on
   ``log p(x)`` with ``p(x) = mean_h p_h(x)`` the pooled prediction (``softmax(log p) = p``, so
   ``T = 1`` is the unscaled model; ``log 0`` is floored at the smallest float64). The members
   are scaled with the same temperature, ``p_h -> softmax(log p_h / T)``, for the EECE / TECE
   after scaling.
3. A split-conformal LAC predictor (``alpha = 0.1``) is calibrated on the second half, once on the
   unscaled and once on the scaled pooled prediction.
4. Every number in the tables is measured on the untouched test set: accuracy, NLL, Brier, ECE
   (15 equal-width bins) of the pooled prediction; EECE of the members (K-means bins, about
   ``sqrt(n_test)`` of them; classwise for 10 classes); on the toy data also TECE against the
   known ``eta``; conformal coverage and mean set size.

The report folder gets ``toy`` and ``digits`` tables (``.md``, ``.csv``, ``.json``),
``summary.json`` (settings, temperatures, the NLL on the temperature-fitting half before and
after scaling, elapsed time, files) and PNG figures: reliability diagrams before / after,
epistemic reliability diagrams before / after, and on the toy data maps of ``EU(x) = Var_h h(x)``
beside the true per-x error ``E_h[(eta(x) - h(x))^2]`` (the paper's figures 2 and 6).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from bensemble import _progress
from bensemble.experiments.report import Report, format_table

if TYPE_CHECKING:
    from bensemble.experiments.zoo import ZooSettings

__all__ = [
    "ALPHA",
    "ONE_VS_ALL_DIGIT",
    "DemoConfig",
    "DemoResult",
    "add_demo_parser",
    "run_demo",
    "run_demo_command",
]

#: Conformal miscoverage level of the tables.
ALPHA = 0.1
#: Bins of the (top-label, equal-width) ECE and of the reliability diagrams.
ECE_BINS = 15
#: The digit the binary-only methods separate from the other nine.
ONE_VS_ALL_DIGIT = 8
#: Methods whose members are 10-class on digits.
DIGITS_MULTICLASS = ("DropConnect", "Random Forest", "MC-Dropout", "Deep Ensemble", "Bayesian Deep")
#: Binary-only methods, run one-vs-all on digits.
DIGITS_BINARY_ONLY = ("Centroids", "Bayesian Log. Reg.", "Likelihood", "EK-NN")
#: Methods drawn in the figures (those that ran, at most four per dataset).
FIGURE_METHODS = ("Deep Ensemble", "MC-Dropout", "Random Forest", "EK-NN")
_TINY = torch.finfo(torch.float64).tiny


@dataclass(frozen=True)
class DemoConfig:
    """Sizes, methods and method settings of a demo run (defaults: the full demo).

    Attributes:
        toy_train, toy_calibration, toy_test: sizes of the three toy draws.
        grid_per_axis: side of the toy grid of the EU maps.
        toy_methods: methods run on the toy data (``None``: all nine).
        digits_methods: methods run on the ten digit classes.
        digits_binary_methods: binary-only methods run one-vs-all on digits.
        settings: method settings (``None``: the paper's, ``ZooSettings()``).
    """

    toy_train: int = 200
    toy_calibration: int = 1000
    toy_test: int = 2000
    grid_per_axis: int = 60
    toy_methods: tuple[str, ...] | None = None
    digits_methods: tuple[str, ...] = DIGITS_MULTICLASS
    digits_binary_methods: tuple[str, ...] = DIGITS_BINARY_ONLY
    settings: ZooSettings | None = None

    @classmethod
    def quick(cls) -> DemoConfig:
        """The ``--quick`` version: fewer points, methods, members and epochs."""
        from bensemble.experiments.zoo import ZooSettings

        return cls(
            toy_train=100,
            toy_calibration=400,
            toy_test=600,
            grid_per_axis=25,
            toy_methods=("Random Forest", "MC-Dropout", "Deep Ensemble", "EK-NN"),
            digits_methods=("Random Forest", "Deep Ensemble"),
            digits_binary_methods=("EK-NN",),
            settings=ZooSettings.quick(epochs=8, n_members=3, n_samples=20, n_trees=20),
        )


@dataclass
class DemoResult:
    """What :func:`run_demo` produced.

    Attributes:
        tables: table name (``"toy"``, ``"digits"``) -> rows (one per method and stage).
        summary: the content of ``summary.json``.
        files: every file written.
        elapsed: wall-clock seconds.
    """

    tables: dict[str, list[dict[str, Any]]]
    summary: dict[str, Any]
    files: list[Path]
    elapsed: float


@dataclass
class _MethodRun:
    """One method's rows plus what its figures need (test split only)."""

    label: str
    rows: list[dict[str, Any]]
    fit: dict[str, Any]
    labels: torch.Tensor
    probs: dict[str, torch.Tensor]
    details: dict[str, Any]
    maps: dict[str, torch.Tensor] | None = None


# ----------------------------------------------------------------------------- evaluation
def _eece_bins(n: int) -> int:
    """About ``sqrt(n)`` K-means bins (at least 5, at most 100): ~20-45 points per bin here."""
    return max(5, min(100, round(math.sqrt(n))))


def _stage(
    members: torch.Tensor,
    pooled: torch.Tensor,
    labels: torch.Tensor,
    sets: torch.Tensor,
    eta: torch.Tensor | None,
    seed: int,
) -> tuple[dict[str, Any], Any]:
    """Test metrics of one stage; ``members [H, n, K]``, ``pooled [n, K]``, ``sets [n, K]``."""
    from bensemble import metrics as M
    from bensemble.conformal import coverage, mean_set_size

    binary = members.shape[-1] == 2
    details = M.expected_epistemic_calibration_error(
        members[..., 1] if binary else members,
        labels,
        n_bins=_eece_bins(labels.shape[0]),
        seed=seed,
        return_details=True,
    )
    row: dict[str, Any] = {
        "accuracy": M.accuracy(pooled, labels),
        "NLL": M.negative_log_likelihood(pooled, labels),
        "Brier": M.brier_score(pooled, labels),
        "ECE": M.expected_calibration_error(pooled, labels, n_bins=ECE_BINS),
        "EECE": details.value,
    }
    if eta is not None:
        row["TECE"] = M.true_epistemic_calibration_error(members[..., 1], eta)
    row["coverage"] = coverage(sets, labels)
    row["set_size"] = mean_set_size(sets)
    return row, details


def _evaluate_method(
    label: str,
    members: torch.Tensor,
    n_cal: int,
    y_cal: torch.Tensor,
    y_test: torch.Tensor,
    parts: Any,
    *,
    eta_test: torch.Tensor | None,
    seed: int,
) -> _MethodRun:
    """Scale, calibrate and score one method; ``members [H, n_cal + n_test, K]``."""
    from bensemble.calibration import CalibrationFitError, TemperatureScaling
    from bensemble.conformal import SplitConformalClassifier

    n_test = y_test.shape[0]
    members = members[:, : n_cal + n_test]
    pooled = members.mean(0)
    log_pooled = pooled.clamp_min(_TINY).log()
    t_idx, c_idx = parts.temperature, parts.conformal
    fit: dict[str, Any] = {
        "temperature": None,
        "converged": None,
        "nll_fit_before": float(F.cross_entropy(log_pooled[:n_cal][t_idx], y_cal[t_idx])),
        "nll_fit_after": None,
        "note": None,
    }
    stages = {"before": (members, pooled)}
    scaler = TemperatureScaling(on_boundary="warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            scaler.fit(log_pooled[:n_cal][t_idx], y_cal[t_idx])
    except CalibrationFitError as exc:
        fit["note"] = f"temperature not fitted: {' '.join(str(exc).split())}"
    else:
        notes = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        fit["note"] = " ".join(" ".join(notes).split()) or None
        fit.update(
            temperature=float(scaler.temperature.item()),
            converged=bool(scaler.converged_),
            nll_fit_after=float(scaler.nll_),
        )
        with torch.no_grad():
            scaled_members = scaler(members.clamp_min(_TINY).log()).softmax(-1)
            scaled_pooled = scaler(log_pooled).softmax(-1)
        stages["after"] = (scaled_members, scaled_pooled)

    rows, probs, details = [], {}, {}
    for stage, (m, p) in stages.items():
        generator = torch.Generator().manual_seed(seed)
        cp = SplitConformalClassifier("lac", alpha=ALPHA, generator=generator)
        sets = cp.calibrate(p[:n_cal][c_idx], y_cal[c_idx]).predict_set(p[n_cal:])
        scores, details[stage] = _stage(m[:, n_cal:], p[n_cal:], y_test, sets, eta_test, seed)
        temperature = fit["temperature"] if stage == "after" else None
        rows.append({"method": label, "stage": stage, "T": temperature, **scores})
        probs[stage] = p[n_cal:]
    return _MethodRun(label, rows, fit, y_test, probs, details)


# ----------------------------------------------------------------------------- datasets
def _toy_runs(config: DemoConfig, seed: int, settings: ZooSettings, bar: Any) -> tuple:
    from bensemble.conformal import split_calibration
    from bensemble.datasets import make_toy_gaussians, make_toy_grid
    from bensemble.experiments.zoo import PAPER_ORDER, member_probs

    g = torch.Generator().manual_seed(seed)
    train = make_toy_gaussians(config.toy_train, generator=g)
    cal = make_toy_gaussians(config.toy_calibration, generator=g)
    test = make_toy_gaussians(config.toy_test, generator=g)
    grid = make_toy_grid(config.grid_per_axis, generator=g)
    parts = split_calibration(cal.y, seed=seed)
    x_eval = torch.cat([cal.x, test.x, grid.x])
    n_cal, n_test = len(cal), len(test)
    runs = []
    methods = PAPER_ORDER if config.toy_methods is None else config.toy_methods
    for method in [m for m in PAPER_ORDER if m in methods]:
        bar.set_postfix_str(f"toy: {method}")
        members = member_probs(method, train.x, train.y, x_eval, settings=settings, seed=seed)
        run = _evaluate_method(
            method, members, n_cal, cal.y, test.y, parts, eta_test=test.eta, seed=seed
        )
        if method in FIGURE_METHODS:
            h = members[:, n_cal + n_test :, 1]  # members' P(y = 1 | x) on the grid
            run.maps = {
                "EU(x)": h.var(dim=0, unbiased=False),
                "E_h[(eta(x) - h(x))^2]": ((grid.eta[None, :] - h) ** 2).mean(dim=0),
            }
        runs.append(run)
        bar.update(1)
    setup = {
        "train": len(train),
        "calibration": n_cal,
        "temperature_part": len(parts.temperature),
        "conformal_part": len(parts.conformal),
        "test": n_test,
        "grid": f"{config.grid_per_axis}x{config.grid_per_axis} on [-8, 8]^2",
        "eece_bins": _eece_bins(n_test),
    }
    return runs, setup, (grid.x, train.x, train.y)


def _digits_runs(config: DemoConfig, seed: int, settings: ZooSettings, bar: Any) -> tuple:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    from bensemble.conformal import split_calibration
    from bensemble.experiments.zoo import PAPER_ORDER, member_probs

    data = load_digits()
    x = torch.tensor(data.data / 16.0, dtype=torch.float32)
    y = torch.tensor(data.target, dtype=torch.int64)
    idx = torch.arange(len(y)).numpy()
    train, rest = train_test_split(idx, test_size=0.4, random_state=seed, stratify=data.target)
    cal, test = train_test_split(rest, test_size=0.5, random_state=seed, stratify=data.target[rest])
    parts = split_calibration(y[cal], stratify=True, seed=seed)
    x_eval = torch.cat([x[cal], x[test]])
    runs = []
    tasks = [(m, None) for m in PAPER_ORDER if m in config.digits_methods]
    tasks += [(m, ONE_VS_ALL_DIGIT) for m in PAPER_ORDER if m in config.digits_binary_methods]
    for method, digit in tasks:
        yy = y if digit is None else (y == digit).to(torch.int64)
        label = method if digit is None else f"{method} ({digit} vs rest)"
        bar.set_postfix_str(f"digits: {label}")
        members = member_probs(method, x[train], yy[train], x_eval, settings=settings, seed=seed)
        runs.append(
            _evaluate_method(
                label, members, len(cal), yy[cal], yy[test], parts, eta_test=None, seed=seed
            )
        )
        bar.update(1)
    setup = {
        "train": len(train),
        "calibration": len(cal),
        "temperature_part": len(parts.temperature),
        "conformal_part": len(parts.conformal),
        "test": len(test),
        "eece_bins": _eece_bins(len(test)),
        "one_vs_all_digit": ONE_VS_ALL_DIGIT,
    }
    return runs, setup


# ----------------------------------------------------------------------------- figures
def _dedupe_legend(ax: Any) -> None:
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), loc="lower right", fontsize="small")


def _reliability_figure(runs: list[_MethodRun]) -> Any:
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


def _epistemic_figure(runs: list[_MethodRun]) -> Any:
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


def _maps_figure(runs: list[_MethodRun], grid_x: torch.Tensor, x_train, y_train) -> Any:
    from bensemble.plots import plot_toy_maps

    panels = {f"{run.label}: {key}": value for run in runs for key, value in run.maps.items()}
    return plot_toy_maps(grid_x, panels, ncols=2, points=x_train, point_labels=y_train)


def _figure_runs(runs: list[_MethodRun]) -> list[_MethodRun]:
    chosen = [r for r in runs if r.label.split(" (")[0] in FIGURE_METHODS]
    return chosen[:4] or runs[:1]


# ----------------------------------------------------------------------------- the run
def _print(text: str = "") -> None:
    tqdm.write(text, file=sys.stdout)


def _check_config(config: DemoConfig, known: tuple[str, ...]) -> None:
    lists = {
        "toy_methods": (config.toy_methods or (), known),
        "digits_methods": (config.digits_methods, DIGITS_MULTICLASS),
        "digits_binary_methods": (config.digits_binary_methods, known),
    }
    for name, (methods, allowed) in lists.items():
        bad = [m for m in methods if m not in allowed]
        if bad:
            raise ValueError(
                f"run_demo: `config.{name}` must name methods among {list(allowed)} (got {bad})"
            )


def _check_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} exists and is not a folder")


def run_demo(
    *,
    quick: bool = False,
    seed: int = 0,
    out: str | Path = "bensemble-report",
    progress: bool = True,
    config: DemoConfig | None = None,
) -> DemoResult:
    """Run the demo: train, scale, evaluate, print the tables and write the report folder.

    Args:
        quick: the sub-30-second version (:meth:`DemoConfig.quick`); ignored with ``config``.
        seed: seeds the data draws / splits, the training and the member sampling.
        out: report folder (created if missing; existing files of the same names are replaced).
        progress: tqdm bars (on stderr) over methods and training epochs.
        config: explicit sizes and methods.

    Returns:
        A :class:`DemoResult`.

    Raises:
        ValueError: ``out`` is an existing file.

    torch runs single-threaded meanwhile (restored afterwards): the networks are tiny, and on a
    shared 2-core machine intra-op threads made training about 10x slower in our measurements.
    The global RNG is restored afterwards too.
    """
    start = time.perf_counter()
    out = Path(out)
    _check_out(out)
    from bensemble.experiments.zoo import PAPER_ORDER, ZooSettings

    config = config or (DemoConfig.quick() if quick else DemoConfig())
    _check_config(config, PAPER_ORDER)
    settings = replace(config.settings or ZooSettings(), progress=progress)
    n_toy = len(PAPER_ORDER if config.toy_methods is None else config.toy_methods)
    total = n_toy + len(config.digits_methods) + len(config.digits_binary_methods)
    report = Report(out)
    threads = torch.get_num_threads()
    tables: dict[str, list[dict[str, Any]]] = {}
    summary: dict[str, Any] = {"seed": seed, "quick": quick, "alpha": ALPHA, "ece_bins": ECE_BINS}
    summary["settings"] = {k: v for k, v in vars(settings).items() if k != "progress"}
    try:
        torch.set_num_threads(1)
        with (
            torch.random.fork_rng(devices=[]),
            _progress.progress(
                total=total, desc="bensemble demo", unit="method", enabled=progress
            ) as bar,
        ):
            toy_runs, toy_setup, (grid_x, x_tr, y_tr) = _toy_runs(config, seed, settings, bar)
            title = (
                f"Toy Gaussians ({toy_setup['train']} training points): test-set metrics before "
                f"and after temperature scaling; TECE against the true P(y|x); LAC conformal sets "
                f"at alpha = {ALPHA}"
            )
            tables["toy"] = _emit(report, "toy", title, toy_setup, toy_runs)
            fig_runs = _figure_runs(toy_runs)
            report.add_figure("toy_reliability", _reliability_figure(fig_runs))
            report.add_figure("toy_epistemic_reliability", _epistemic_figure(fig_runs))
            map_runs = [r for r in fig_runs if r.maps is not None]
            if map_runs:
                report.add_figure("toy_eu_maps", _maps_figure(map_runs, grid_x, x_tr, y_tr))
            summary["toy"] = {"setup": toy_setup, "fits": {r.label: r.fit for r in toy_runs}}

            digit_runs, digit_setup = _digits_runs(config, seed, settings, bar)
            title = (
                "Digits (load_digits, 10 classes): test-set metrics before and after temperature "
                f"scaling; binary-only methods run one-vs-all ({ONE_VS_ALL_DIGIT} vs rest); LAC "
                f"conformal sets at alpha = {ALPHA}"
            )
            tables["digits"] = _emit(report, "digits", title, digit_setup, digit_runs)
            fig_runs = _figure_runs(digit_runs)
            report.add_figure("digits_reliability", _reliability_figure(fig_runs))
            report.add_figure("digits_epistemic_reliability", _epistemic_figure(fig_runs))
            summary["digits"] = {
                "setup": digit_setup,
                "fits": {r.label: r.fit for r in digit_runs},
            }
    finally:
        torch.set_num_threads(threads)

    elapsed = time.perf_counter() - start
    summary["elapsed_s"] = round(elapsed, 2)
    summary["files"] = sorted(p.name for p in report.files) + ["summary.json"]
    report.add_json("summary", summary)
    _print(f"\nreport: {len(report.files)} files in {out}/")
    _print(f"elapsed: {elapsed:.1f} s")
    return DemoResult(tables=tables, summary=summary, files=list(report.files), elapsed=elapsed)


def _emit(
    report: Report, name: str, title: str, setup: dict[str, Any], runs: list[_MethodRun]
) -> list[dict[str, Any]]:
    """Print one dataset's table (and notes) and write it to the report."""
    rows = [row for run in runs for row in run.rows]
    sizes = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in setup.items())
    _print(f"\n{title}\n({sizes})")
    _print(format_table(rows))
    for run in runs:
        if run.fit["note"]:
            _print(f"note ({run.label}): {run.fit['note']}")
    report.add_table(name, rows, title=title)
    return rows


# ----------------------------------------------------------------------------- command line
def add_demo_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``demo`` sub-command on ``sub`` (from ``add_subparsers``)."""
    p = sub.add_parser(
        "demo",
        help="train the paper's methods on embedded data (toy Gaussians, digits) and report",
        description="Train the epistemic-calibration paper's methods on the toy Gaussians and on "
        "scikit-learn's digits, temperature-scale on a calibration split, and report accuracy, "
        "NLL, Brier, ECE, EECE (and TECE on the toy data) before and after scaling, with "
        f"conformal coverage and set size at alpha = {ALPHA}. Writes tables and figures to --out.",
    )
    p.add_argument("--quick", action="store_true", help="a sub-30-second version (for tests)")
    p.add_argument("--seed", type=int, default=0, help="seed of data, training and sampling (0)")
    p.add_argument("--out", default="bensemble-report", help="report folder (bensemble-report)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    return p


def run_demo_command(args: argparse.Namespace) -> int:
    """Run ``bensemble demo`` for parsed ``args``; returns the exit status."""
    if args.seed < 0:
        print(f"bensemble demo: error: `--seed` must be >= 0 (got {args.seed})", file=sys.stderr)
        return 2
    try:
        _check_out(Path(args.out))
    except ValueError as exc:
        print(f"bensemble demo: error: {exc}", file=sys.stderr)
        return 2
    run_demo(
        quick=args.quick,
        seed=args.seed,
        out=args.out,
        progress=not getattr(args, "no_progress", False),
    )
    return 0
