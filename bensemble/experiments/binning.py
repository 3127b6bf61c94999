"""``bensemble reproduce binning``: ``|EECE - TECE|`` vs the number of bins (paper figure 5).

Protocol (appendix B.2): a deep ensemble (the paper's settings: 10 members, hidden ``(100, 20)``,
Adam, 20 epochs) trained on 20 toy points, 10,000 test points, the EECE with ``M`` K-means bins
(scikit-learn, as in the paper) against the exact TECE (``eta`` is known on the toy data; every
point has its own member vector, so conditioning on ``x`` or on the vector is the same). The paper
finds the smallest gap near 200 bins ("already a good estimator of the TECE with around 200
bins"); fewer bins blur the member vectors, more bins leave too few points per bin.

``--n-test N`` changes the number of test points (the paper's second experiment uses 40,000). The
table marks the number of bins ``n_bins="auto"`` picks at that ``N``
(:func:`bensemble.metrics.epistemic.auto_n_bins`), adding it to the grid when it is not there, so
that one run shows where the default lands on the curve.
"""

from __future__ import annotations

import warnings

from bensemble.datasets import make_toy_gaussians
from bensemble.experiments._common import (
    EECE_BACKEND,
    NA,
    ExperimentResult,
    Printer,
    RunOptions,
    Stopwatch,
    aggregate,
    columns_of,
    finish,
    line_figure,
    progress_bar,
    repeat_seeds,
    single_thread,
    zoo_settings,
)
from bensemble.methods.zoo import member_probs
from bensemble.metrics import expected_epistemic_calibration_error, true_epistemic_calibration_error
from bensemble.metrics.epistemic import auto_n_bins

__all__ = ["DEFAULT_REPEATS", "BINS", "N_TEST", "N_TRAIN", "PAPER_BEST", "run"]

#: Independent repeats by default (mean ± sd); about 2-5 minutes on 2 CPU cores.
DEFAULT_REPEATS = 5

BINS = (5, 10, 20, 50, 100, 200, 500, 1000)
N_TRAIN = 20
N_TEST = 10_000
#: Figure 5's minimum ("~200 bins").
PAPER_BEST = 200

QUICK_BINS = (5, 20, 50)
QUICK_TEST = 1_000


def run(options: RunOptions) -> ExperimentResult:
    """Run the binning study; print and write its table and figure."""
    watch, printer = Stopwatch(), Printer()
    quick = options.quick
    n_test = options.extra.get("n_test") or (QUICK_TEST if quick else N_TEST)
    auto = auto_n_bins(n_test)
    bins = sorted({m for m in (QUICK_BINS if quick else BINS) if m <= n_test} | {auto})
    settings = zoo_settings(quick)
    repeats = options.n_repeats(DEFAULT_REPEATS)
    report = options.report("binning")
    printer(
        f"binning: deep ensemble ({settings.n_members} members) on {N_TRAIN} toy points, "
        f"{n_test} test points (--n-test), EECE with M K-means bins ({EECE_BACKEND}) vs "
        "the exact TECE, "
        f"{repeats} repeat(s), seed {options.seed}{' (quick settings)' if quick else ''}"
    )
    records = []
    seeds = repeat_seeds(options.seed, repeats)
    jobs = [(s, m) for s in seeds for m in (None, *bins)]  # None: train the ensemble
    p = tece = test = None
    with single_thread():
        for seed, n_bins in progress_bar(jobs, desc="binning", enabled=options.progress):
            if n_bins is None:
                train = make_toy_gaussians(N_TRAIN, seed=seed)
                test = make_toy_gaussians(n_test, seed=seed + 10_000)
                probs = member_probs(
                    "Deep Ensemble", train.x, train.y, test.x, settings=settings, seed=seed
                )
                p = probs[..., 1]
                tece = true_epistemic_calibration_error(p, test.eta, binary=True)
                continue
            with warnings.catch_warnings():  # sparse bins are the point of the sweep
                warnings.simplefilter("ignore", UserWarning)
                eece = expected_epistemic_calibration_error(
                    p,
                    test.y,
                    n_bins=n_bins,
                    binning="kmeans",
                    seed=seed,
                    backend=EECE_BACKEND,
                    binary=True,
                )
            records.append(
                {
                    "n_bins": n_bins,
                    "points per bin": n_test // n_bins,
                    "auto": "n_bins='auto'" if n_bins == auto else "",
                    "paper": "minimum (~200 bins)" if n_bins == PAPER_BEST else NA,
                    "EECE": eece,
                    "TECE": tece,
                    "|EECE - TECE|": abs(eece - tece),
                }
            )
    rows = aggregate(records, ["n_bins"], ["EECE", "TECE", "|EECE - TECE|"])
    title = "binning: |EECE - TECE| vs number of K-means bins, deep ensemble (paper figure 5)"
    printer.table(rows, title, digits=5)
    best = min(rows, key=lambda r: r["|EECE - TECE|"])
    at_auto = next(r for r in rows if r["n_bins"] == auto)
    printer(
        f"smallest mean |EECE - TECE| at M = {best['n_bins']} bins "
        f"({best['|EECE - TECE|']:.5f}); paper: minimum near {PAPER_BEST} bins at 10,000 points."
    )
    printer(
        f"n_bins='auto' picks M = {auto} at N = {n_test} (|EECE - TECE| "
        f"{at_auto['|EECE - TECE|']:.5f}, {at_auto['|EECE - TECE|'] / best['|EECE - TECE|']:.2f}x "
        "the smallest)."
    )
    report.add_table("binning", rows, title=title)
    _figure(report, rows, auto)
    return finish("binning", report, {"binning": rows}, watch, printer, options)


def _figure(report, rows, auto: int) -> None:
    xs = columns_of(rows, "n_bins")
    key = "|EECE - TECE|"
    err = columns_of(rows, key + " sd") if key + " sd" in rows[0] else None
    ys = columns_of(rows, key)
    fig = line_figure(
        {"deep ensemble, 20 training points": (xs, ys, err)},
        xlabel="number of K-means bins M",
        ylabel="|EECE - TECE|",
        title="EECE as an estimator of the TECE",
        logx=True,
    )
    ax = fig.axes[0]
    ax.axvline(PAPER_BEST, color="black", linestyle="--", label=f"paper's minimum (~{PAPER_BEST})")
    ax.axvline(auto, color="tab:red", linestyle=":", label=f"n_bins='auto' ({auto})")
    ax.legend()
    report.add_figure("binning", fig)
