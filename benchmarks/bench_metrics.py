"""Binned calibration metrics: ours vs a per-bin mask loop, torchmetrics and the read-once floor.

Workload: ``probs [N, K]`` float32 = softmax(2 * randn) with N = 1,000,000 and K = 10 (seeded),
labels uniform in [0, K). Our functions are timed through the public API, input validation
included (finite / range / row-sum checks, labels in range).

Baselines, all run in this process:

* **loop**: bensemble 0.2's method, written below as a user would: one boolean mask per bin,
  ``conf > lower & conf <= upper`` on the float32 ``linspace`` edges, float32 means;
* **torchmetrics**: ``multiclass_calibration_error(..., norm="l1")`` (its defaults, input
  validation on; bins ``[lower, upper)``, float32 ``scatter_add``);
* **max floor**: ``probs.max(dim=1)`` alone, the top-label extraction any ECE must do (one read
  of the matrix). "Within 1.6x of the floor" is the row ratio ``>= 0.625``. Our top-label step
  is an ``argmax`` over the integer view of the (validated, non-negative) probabilities plus a
  gather, cheaper than ``torch.max`` on the CPU; its time is in the note;
* **classwise loop**: the per-class version of the mask loop.

Agreement is ``|ours - reference|`` where the reference is a float64 per-bin loop with the same
bin membership; the baselines' own deviations are in the note column.

Threads: one by default. On a shared two-core machine every parallel region of a multi-op
pipeline can stall for a scheduler tick while the other core is busy, which measures the load,
not the code; ``--threads 0`` keeps torch's default. The thread count is printed and recorded.

Usage::

    python benchmarks/bench_metrics.py [--n 1000000] [--k 10] [--repeats 5] [--threads T]
                                       [--device cpu|cuda] [--no-write]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness  # noqa: E402

from bensemble.metrics import (  # noqa: E402
    classwise_calibration_error,
    expected_calibration_error,
)
from bensemble.metrics.scoring import _top_label  # noqa: E402

TARGETS = {"loop15": 2.5, "loop200": 20.0, "torchmetrics": 1.3, "floor": 1 / 1.6}
AGREEMENT = 1e-12


# ----------------------------------------------------------------------------- baselines


def ece_mask_loop(probs: torch.Tensor, targets: torch.Tensor, n_bins: int) -> float:
    """bensemble 0.2's per-bin loop (float32 edges, (lower, upper], float32 accumulation)."""
    confidences, predictions = torch.max(probs, dim=1)
    accuracies = predictions.eq(targets)
    ece = torch.zeros(1, device=probs.device)
    edges = torch.linspace(0, 1, n_bins + 1, device=probs.device)
    for i in range(n_bins):
        in_bin = (confidences > edges[i]) & (confidences <= edges[i + 1])
        prop = in_bin.float().mean()
        if prop.item() > 0.0:
            gap = confidences[in_bin].mean() - accuracies[in_bin].float().mean()
            ece += prop * torch.abs(gap)
    return ece.item()


def classwise_mask_loop(probs: torch.Tensor, targets: torch.Tensor, n_bins: int) -> float:
    """The same loop per class on P(y = k) against 1[y = k], averaged over classes."""
    edges = torch.linspace(0, 1, n_bins + 1, device=probs.device)
    total = 0.0
    for k in range(probs.shape[1]):
        pk = probs[:, k]
        yk = (targets == k).float()
        ce = torch.zeros(1, device=probs.device)
        for i in range(n_bins):
            in_bin = (pk > edges[i]) & (pk <= edges[i + 1])
            prop = in_bin.float().mean()
            if prop.item() > 0.0:
                ce += prop * torch.abs(pk[in_bin].mean() - yk[in_bin].mean())
        total += ce.item()
    return total / probs.shape[1]


def torchmetrics_ece(probs: torch.Tensor, targets: torch.Tensor, n_bins: int) -> float:
    from torchmetrics.functional.classification import multiclass_calibration_error

    return float(
        multiclass_calibration_error(
            probs, targets, num_classes=probs.shape[1], n_bins=n_bins, norm="l1"
        )
    )


# ----------------------------------------------------------------------------- float64 reference


def _binned_gap_float64(values: torch.Tensor, outcome: torch.Tensor, n_bins: int) -> float:
    """sum_b (n_b / N) |mean outcome - mean value|, float64 sums, float32-grid bins (lower, upper]
    compared in ``values``' dtype (0 in bin 0)."""
    edges = torch.linspace(0, 1, n_bins + 1, device=values.device).to(values.dtype)
    v64, o64 = values.double(), outcome.double()
    n = values.shape[0]
    total = 0.0
    for i in range(n_bins):
        in_bin = (values > edges[i]) & (values <= edges[i + 1])
        if i == 0:
            in_bin |= values == 0
        count = int(in_bin.sum())
        if count:
            total += count / n * abs(float(o64[in_bin].mean()) - float(v64[in_bin].mean()))
    return total


def reference_ece(probs, targets, n_bins):
    confidences, predictions = probs.max(dim=1)
    return _binned_gap_float64(confidences, predictions == targets, n_bins)


def reference_classwise(probs, targets, n_bins):
    k = probs.shape[1]
    return sum(_binned_gap_float64(probs[:, c], targets == c, n_bins) for c in range(k)) / k


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="binned calibration metrics benchmark")
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (default 1: reproducible on a shared 2-core box; 0 = torch default)",
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--quick", action="store_true", help="100,000 rows, print only")
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.no_write = 100_000, True
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else None

    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(2.0 * torch.randn(args.n, args.k, generator=g), dim=1).to(device)
    targets = torch.randint(0, args.k, (args.n,), generator=g).to(device)
    size = f"{args.n:.0e} x {args.k} f32".replace("e+0", "e")
    rep = max(5, args.repeats)  # medians of at least 5 runs after a warm-up
    threads = torch.get_num_threads()
    print(f"bench_metrics: N={args.n}, K={args.k}, device={device}, torch threads={threads}")

    def ours(n_bins):
        return lambda: expected_calibration_error(probs, targets, n_bins)

    results: list[_harness.Result] = []
    refs = {nb: reference_ece(probs, targets, nb) for nb in (15, 200)}
    vals = {nb: expected_calibration_error(probs, targets, nb) for nb in (15, 200)}

    seen: dict[str, float] = {}  # baseline values, captured while timing them

    def keep(key, fn):
        return lambda: seen.__setitem__(key, fn())

    # 1. vs the per-bin mask loop at 15 and 200 bins
    for nb, key in ((15, "loop15"), (200, "loop200")):
        t_loop, t_ours = _harness.measure_interleaved(
            [keep(key, lambda nb=nb: ece_mask_loop(probs, targets, nb)), ours(nb)],
            repeats=rep,
            sync=sync,
        )
        dev = abs(seen[key] - refs[nb])
        results.append(
            _harness.Result(
                f"ECE {size}, {nb} bins",
                "per-bin mask loop (bensemble 0.2)",
                t_loop,
                t_ours,
                abs(vals[nb] - refs[nb]),
                TARGETS[key],
                f"loop off by {dev:.1e}",
            )
        )

    # 2. vs torchmetrics (l1) at 15 and 200 bins
    for nb in (15, 200):
        t_tm, t_ours = _harness.measure_interleaved(
            [keep("tm", lambda nb=nb: torchmetrics_ece(probs, targets, nb)), ours(nb)],
            repeats=rep,
            sync=sync,
        )
        dev = abs(seen["tm"] - refs[nb])
        results.append(
            _harness.Result(
                f"ECE {size}, {nb} bins",
                "torchmetrics multiclass_calibration_error",
                t_tm,
                t_ours,
                abs(vals[nb] - refs[nb]),
                TARGETS["torchmetrics"] if nb == 15 else None,
                f"torchmetrics off by {dev:.1e} (float32 sums)",
            )
        )

    # 3. vs the read-once floor: probs.max(dim=1) alone
    t_floor, t_top, t_ours = _harness.measure_interleaved(
        [lambda: probs.max(dim=1), lambda: _top_label(probs), ours(15)], repeats=2 * rep, sync=sync
    )
    # the same in CPU time (all threads): on a shared box it leaves out the waits for a core
    cpu_note = ""
    if device.type == "cpu":
        c_floor, c_ours = _harness.measure_interleaved(
            [lambda: probs.max(dim=1), ours(15)], repeats=2 * rep, clock=time.process_time
        )
        cpu_note = f"; in CPU time {c_ours * 1e3:.1f} vs {c_floor * 1e3:.1f} ms = "
        cpu_note += f"{c_ours / c_floor:.2f}x"
    results.append(
        _harness.Result(
            f"ECE {size}, 15 bins",
            "probs.max(dim=1) alone (floor)",
            t_floor,
            t_ours,
            abs(vals[15] - refs[15]),
            TARGETS["floor"],
            f"ours = {t_ours / t_floor:.2f}x the floor (target <= 1.6x){cpu_note}; our "
            f"top-label step (argmax of the integer view + gather) takes {t_top * 1e3:.1f} ms",
        )
    )

    # 4. classwise ECE vs the per-class mask loop
    cw_ref = reference_classwise(probs, targets, 15)
    cw = classwise_calibration_error(probs, targets, 15)
    t_loop, t_ours = _harness.measure_interleaved(
        [
            keep("cw", lambda: classwise_mask_loop(probs, targets, 15)),
            lambda: classwise_calibration_error(probs, targets, 15),
        ],
        repeats=rep,
        sync=sync,
    )
    dev = abs(seen["cw"] - cw_ref)
    results.append(
        _harness.Result(
            f"classwise ECE {size}, 15 bins",
            "per-class per-bin mask loop",
            t_loop,
            t_ours,
            abs(cw - cw_ref),
            None,
            f"loop off by {dev:.1e}",
        )
    )

    worst = max(r.agreement for r in results if isinstance(r.agreement, float))
    notes = [
        f"Workload: softmax(2 randn) probabilities, N={args.n}, K={args.k}, float32, "
        f"device {device}, torch threads {threads}; our time includes input validation.",
        f"Agreement: |ours - float64 per-bin loop| (worst {worst:.1e}; target <= {AGREEMENT:g}).",
    ]
    section = "bench_metrics" if device.type == "cpu" else f"bench_metrics ({device.type})"
    if args.no_write:
        print(_harness.format_table(results))
    else:
        _harness.write_results(results, section=section, notes=notes, device=str(device))
    missed = [r for r in results if r.met is False]
    if worst > AGREEMENT:
        print(f"bench_metrics: agreement {worst:.1e} above {AGREEMENT:g}")
    for r in missed:
        print(f"bench_metrics: target missed: {r.workload} vs {r.baseline}: {r.ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
