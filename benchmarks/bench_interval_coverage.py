"""Coverage of the report's 95% intervals, old (percentile) vs new (Poisson, L1 two-step).

Populations whose binned calibration error is known exactly (``_coverage_populations.py``):
for each metric (top-label ECE, classwise ECE, binary EECE with fixed bins), sample size and true
value, ``--runs`` independent samples are drawn; each gets

* the OLD interval: the report's code path until issue 21 (``bensemble.app.bootstrap``:
  multinomial resamples, the statistic registered as ``register_stage`` /
  ``BootstrapPlan.eece`` do, ``percentile_interval(values, debias_from=value)``);
* the NEW interval: :class:`bensemble.metrics.intervals.ReplicateState` (counter-based Poisson
  weights, method ``"l1-two-step"``),

and the table gives the fraction of runs whose interval contains the true value, the one-sided
95% Clopper-Pearson lower bound of the new coverage and the median interval of each method.
The means (accuracy, NLL, Brier; percentile intervals of either bootstrap) are checked on the
top-label population. Same replicates (200), same samples for both methods.

Run: ``PYTHONPATH=. python benchmarks/bench_interval_coverage.py`` (about 10 min of CPU on one
core; writes its section of ``benchmarks/results.md``; ``--runs 50`` for a quick look that
writes nothing). Every run also times the weights alone (10^6 x 200, CPU time of this process:
counter-based Poisson vs the report's multinomial draws, same run); ``--weights`` does only
that, ``--bundle`` adds the CPU time of all the intervals of a report at 200,000 x 5 x 10 (old
BootstrapPlan vs ReplicateState + selective_intervals, same run).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _coverage_populations import (  # noqa: E402
    N_BINS,
    ClasswisePopulation,
    EECEPopulation,
    TopLabelPopulation,
    binomial_lower_bound,
    mean_truths,
    selective_truths,
)

from bensemble._progress import progress  # noqa: E402
from bensemble.app.bootstrap import BootstrapPlan  # noqa: E402
from bensemble.app.bootstrap import percentile_interval as old_percentile  # noqa: E402
from bensemble.metrics import (  # noqa: E402
    classwise_calibration_error,
    expected_calibration_error,
    expected_epistemic_calibration_error,
)
from bensemble.metrics._binning import uniform_bin_ids  # noqa: E402
from bensemble.metrics.intervals import (  # noqa: E402
    ReplicateState,
    selective_intervals,
    selective_replicates,
)

REPLICATES = 200
TRUTHS = (0.0, 0.005, 0.02)
F64 = torch.float64


def _old_ece(plan, name, probs, labels, classwise):
    """The statistic as ``register_stage`` registers it (bins of the full sample, fixed)."""
    k = probs.shape[1]
    if classwise:
        onehot = torch.nn.functional.one_hot(labels, k).to(F64)
        plan.binned_gap(name, uniform_bin_ids(probs, N_BINS), onehot - probs.to(F64), N_BINS + 1)
        return classwise_calibration_error(probs, labels, N_BINS)
    conf, pred = probs.max(1)
    correct = (pred == labels).to(F64)
    plan.binned_gap(name, uniform_bin_ids(conf, N_BINS), correct - conf.to(F64), N_BINS + 1)
    return expected_calibration_error(probs, labels, N_BINS)


def one_run(metric: str, population, n: int, run: int, rng: np.random.Generator):
    """``(old (low, high), new Interval)`` of one sample."""
    plan, state = BootstrapPlan(n), ReplicateState(REPLICATES, seed=run)
    if metric == "eece":
        p, y, cell = population.sample(n, rng)
        value = expected_epistemic_calibration_error(p, y, bins=cell, binary=True)
        plan.eece("x", p, y.to(F64), p.var(0, unbiased=False), cell, 1, population.m)
        state.add_eece("x", population.h, population.m, binary=True)
        state.update(range(n), {"x": (p, y, cell)})
    else:
        probs, labels = population.sample(n, rng)
        classwise = metric == "classwise_ece"
        value = _old_ece(plan, "x", probs, labels, classwise)
        k = probs.shape[1] if classwise else None
        state.add_calibration("x", N_BINS, classwise=classwise, num_classes=k)
        state.update(range(n), {"x": (probs, labels)})
    old = old_percentile(plan.run(REPLICATES, seed=run)["x"], debias_from=value)
    return old, state.compute()["x"]


POPULATIONS = {
    "ece": lambda t: TopLabelPopulation(t, "wave"),
    "ece (over-confident)": lambda t: TopLabelPopulation(t, "over"),
    "classwise_ece": ClasswisePopulation,
    "eece": EECEPopulation,
}


def coverage_table(metrics, sizes, runs: int) -> list[str]:
    rows = [
        "| metric | n | true value | old coverage | new coverage | new >= (95% CP) | "
        "old median interval | new median interval |",
        "|---|---|---|---|---|---|---|---|",
    ]
    cells = [(m, n, t) for m in metrics for n in sizes for t in TRUTHS]
    for metric, n, truth in progress(cells, desc="coverage"):
        population = POPULATIONS[metric](truth)
        kind = "eece" if metric == "eece" else metric.split(" ")[0]
        rng = np.random.default_rng(1000 + n)
        old_hits = new_hits = 0
        old_ends, new_ends = [], []
        for run in range(runs):
            old, new = one_run(kind, population, n, run, rng)
            old_hits += old is not None and old[0] <= population.truth <= old[1]
            new_hits += new.low <= population.truth <= new.high
            old_ends.append(old if old is not None else (np.nan, np.nan))
            new_ends.append((new.low, new.high))
        o, w = np.nanmedian(old_ends, 0), np.median(new_ends, 0)
        rows.append(
            f"| {metric} | {n:,} | {population.truth:.4f} | {old_hits / runs:.1%} | "
            f"{new_hits / runs:.1%} | {binomial_lower_bound(new_hits, runs):.1%} | "
            f"{o[0]:.4f} - {o[1]:.4f} | {w[0]:.4f} - {w[1]:.4f} |"
        )
        print(rows[-1], flush=True)
    return rows


def means_table(sizes, runs: int) -> list[str]:
    """Percentile intervals of the means, the misclassification AUROC and the AURC: old
    multinomial resamples vs new Poisson replicates (truths by numerical integration)."""
    rows = ["| metric | n | true value | old coverage | new coverage |", "|---|---|---|---|---|"]
    population = TopLabelPopulation(0.02, "wave")
    truths = {**mean_truths(population), **selective_truths(population)}
    for n in sizes:
        rng = np.random.default_rng(7 + n)
        hits = {(name, m): 0 for name in truths for m in ("old", "new")}
        for run in range(runs):
            probs, labels = population.sample(n, rng)
            conf, pred = probs.max(1)
            correct = (pred == labels).to(F64)
            values = {
                "accuracy": correct,
                "nll": -(probs.gather(1, labels[:, None]).squeeze(1) + 1e-8).log(),
                "brier": ((probs - torch.nn.functional.one_hot(labels, 10)) ** 2).sum(1),
            }
            plan, state = BootstrapPlan(n), ReplicateState(REPLICATES, seed=run)
            for name, v in values.items():
                plan.mean(name, v)
                state.add_mean(name)
            plan.selective("error_auroc", "aurc", conf.to(F64), correct)
            state.update(range(n), {name: (v,) for name, v in values.items()})
            old = plan.run(REPLICATES, seed=run)
            new = {
                **state.compute(),
                **selective_intervals(*selective_replicates(conf, correct, range(n), seed=run)),
            }
            for name, truth in truths.items():
                low, high = old_percentile(old[name])
                hits[(name, "old")] += low <= truth <= high
                hits[(name, "new")] += new[name].contains(truth)
        for name, truth in truths.items():
            rows.append(
                f"| {name} | {n:,} | {truth:.4f} | {hits[(name, 'old')] / runs:.1%} | "
                f"{hits[(name, 'new')] / runs:.1%} |"
            )
            print(rows[-1], flush=True)
    return rows


def weights_timing(n: int = 1_000_000, replicates: int = REPLICATES):
    """CPU time of the weights alone: counter-based Poisson vs the report's multinomial."""
    import _harness

    from bensemble.app.bootstrap import multinomial_weights
    from bensemble.metrics.intervals._poisson import weight_block

    index = np.arange(n, dtype=np.uint64)
    cpu = time.process_time()
    weight_block(index, replicates, 0)
    poisson = time.process_time() - cpu
    cpu = time.process_time()
    for _ in multinomial_weights(n, replicates, seed=0):
        pass
    multinomial = time.process_time() - cpu
    return _harness.Result(
        f"bootstrap weights {n:,} x {replicates} (CPU s)",
        "multinomial draws (report until issue 21)",
        multinomial,
        poisson,
        note=f"counter-based Poisson(1): {poisson / (n * replicates) * 1e9:.1f} ns a weight",
    )


def bundle_timing(n: int = 200_000, m: int = 5, k: int = 10, slots: int = 200):
    """CPU time of every interval of a report at ``n x m x k`` (two stages, 9 further means,
    the classwise EECE with ``slots`` fixed bins per class): the report's BootstrapPlan until
    issue 21 vs ReplicateState (chunks of 50,000 rows) + selective_intervals, same run."""
    import _harness

    from bensemble.app.bootstrap_stats import register_stage

    g = torch.Generator().manual_seed(0)
    members = torch.softmax(2 * torch.randn(m, n, k, generator=g), -1)
    labels = torch.randint(0, k, (n,), generator=g)
    bins = torch.randint(0, slots, (k, n), generator=g)
    stages = {"unscaled": members.mean(0), "scaled": torch.softmax(members.mean(0).log() / 1.3, 1)}
    extra = [f"mean{i}" for i in range(9)]
    value = torch.rand(n, generator=g, dtype=F64)
    cols = members.to(F64).permute(0, 2, 1).reshape(m, k * n)
    outcome = (labels[None, :] == torch.arange(k)[:, None]).reshape(-1).to(F64)
    flat = (bins + torch.arange(k)[:, None] * slots).reshape(-1)

    cpu = time.process_time()
    plan = BootstrapPlan(n)
    for name, p in stages.items():
        register_stage(plan, name, p, labels, N_BINS)
    for name in extra:
        plan.mean(name, value)
    plan.eece("eece", cols, outcome, cols.var(0, unbiased=False), flat, k, slots)
    plan.run(REPLICATES, seed=0)
    old = time.process_time() - cpu

    cpu = time.process_time()
    state = ReplicateState(REPLICATES, seed=0)
    for name in stages:
        for metric in ("accuracy", "nll", "brier"):
            state.add_mean(f"{name}:{metric}")
        state.add_calibration(f"{name}:ece", N_BINS)
        state.add_calibration(f"{name}:classwise_ece", N_BINS, classwise=True, num_classes=k)
    for name in extra:
        state.add_mean(name)
    state.add_eece("eece", m, slots, n_groups=k)
    for start in range(0, n, 50_000):
        rows = slice(start, start + 50_000)
        inputs = {name: (value[rows],) for name in extra}
        inputs["eece"] = (members[:, rows], labels[rows], bins[:, rows])
        for name, p in stages.items():
            conf, pred = p[rows].max(1)
            right = (pred == labels[rows]).to(F64)
            nll = -(p[rows].to(F64).gather(1, labels[rows, None]).squeeze(1) + 1e-8).log()
            inputs.update({f"{name}:accuracy": (right,), f"{name}:nll": (nll,)})
            inputs[f"{name}:brier"] = (nll,)
            inputs[f"{name}:ece"] = inputs[f"{name}:classwise_ece"] = (p[rows], labels[rows])
        state.update(range(start, start + 50_000), inputs)
    state.compute()
    for p in stages.values():
        conf, pred = p.max(1)
        selective_intervals(
            *selective_replicates(conf.to(F64), pred == labels, range(n), REPLICATES)
        )
    new = time.process_time() - cpu
    return _harness.Result(
        f"all report intervals {n:,} x {m} x {k} (CPU s)",
        "BootstrapPlan (report until issue 21)",
        old,
        new,
        note="streamed in 50,000-row chunks; incl. AUROC/AURC",
    )


def main() -> None:
    import _harness

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--sizes", default="500,2000,10000")
    parser.add_argument("--metrics", default=",".join(POPULATIONS))
    parser.add_argument("--weights", action="store_true", help="time the weights only")
    parser.add_argument("--no-means", action="store_true")
    parser.add_argument("--only-means", action="store_true")
    parser.add_argument("--bundle", action="store_true", help="time a report's intervals only")
    args = parser.parse_args()
    torch.set_num_threads(1)
    start, cpu = time.perf_counter(), time.process_time()
    lines: list[str] = []
    if not (args.weights or args.bundle):
        sizes = [int(s) for s in args.sizes.split(",")]
        lines.append(
            f"Coverage of the 95% intervals: {args.runs} runs per cell, {REPLICATES} replicates, "
            f"{N_BINS} bins; new >= is the one-sided 95% Clopper-Pearson bound."
        )
        if not args.only_means:
            lines += [""] + coverage_table(args.metrics.split(","), sizes, args.runs)
        if not args.no_means:
            lines += ["", "Means, AUROC, AURC (percentile intervals):", ""]
            lines += means_table(sizes, args.runs)
    rows = [weights_timing()]
    if args.bundle:
        rows.append(bundle_timing())
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    command = " ".join(["python", *sys.argv])
    lines += ["", f"Runtime {wall:.0f} s wall, {cpu:.0f} s CPU: `PYTHONPATH=. {command}`.", ""]
    if args.weights or args.bundle or args.runs < 200 or args.only_means or args.no_means:
        print("\n".join(lines))
        print(_harness.format_table(rows))
    else:  # the full grid goes into benchmarks/results.md
        _harness.write_results(rows, notes=lines)


if __name__ == "__main__":
    main()
