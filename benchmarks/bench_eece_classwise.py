"""The classwise EECE at ImageNet-like ``K`` against a loop of binary EECEs, both on one thread.

Ours: ``expected_epistemic_calibration_error(p, y, KMeansBinning())`` on ``[H, N, K]`` member
probabilities (the classwise path: chunks of classes, weighted greedy k-means++ on a stratified
sample of each class, Lloyd on projection-sorted rows stopped by ``lloyd_rtol = 3e-4``).
Baseline: the loop a user would write, ``[expected_epistemic_calibration_error(p[:, :, k], y ==
k, KMeansBinning(), binary=True) for k in range(K)]`` (exact per-class fits). Both run in this
process with ``torch.set_num_threads(1)``; the ratio is on **CPU time** (``time.process_time``:
the machine is shared, CPU time leaves out waiting for a core); wall times are in the notes.

Workloads, ``H = 10`` members, bins ``"auto"`` (141 at N = 20,000, 200 at N = 50,000):

* ``imagenet-like``: a confident ensemble - logits ``N(0, 1)`` per class, the true class
  ``+U(6, 11)``, five confusable classes per image ``+U(2, 7)``, member noise ``N(0, 0.5^2)``
  (accuracy ~82%, mean top probability ~0.71, like an ImageNet deep ensemble): each class's
  member vectors are ~0 for almost every image.
* ``uncertain``: a weak classifier whose members disagree - logits ``N(0, 1.5^2)``, true class
  ``+U(1, 5)``, member noise ``N(0, 0.7^2)`` (every class's vectors a broad cloud, 22% of their
  spread off the diagonal).

At ``K = 1000`` the loop is timed on ``--loop-classes`` evenly spaced classes (default 100) and
scaled to ``K`` (the per-class fits are independent; ``--full-loop``: all of them). Agreement:
each timed class's within-bin sum of squares (K-means inertia) of our bins over the loop's -
worst class and mean; ``identical`` counts the classes whose bins equal the loop's.

Run: ``python benchmarks/bench_eece_classwise.py [--quick] [--full-loop] [--loop-classes S]
[--classes S] [--seed-spread]`` (``--quick``: K = 200 only, prints without writing
``benchmarks/results.md``; ``--classes S``: at K = 1000 both sides run on ``S`` evenly spaced
classes of the full run's data plus one "rest" class with the remaining probability - the full
run's per-class sizes at a tenth of the memory and time; the note gives the times scaled to
``K``; ``--seed-spread``: only print the exact per-class fit's own seed 1 vs seed 0 inertia at
K = 200, the noise level of the agreement column).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import _harness  # noqa: E402

from bensemble.metrics import expected_epistemic_calibration_error as eece  # noqa: E402
from bensemble.metrics._epistemic_checks import canonical_member_order  # noqa: E402
from bensemble.metrics.binning import KMeansBinning  # noqa: E402

H = 10
TARGET = 3.0
WORKLOADS = {
    # name: (background logit sd, true-class margin range, confusable classes, member sd)
    "imagenet-like": (1.0, (6.0, 11.0), 5, 0.5),
    "uncertain": (1.5, (1.0, 5.0), 0, 0.7),
}


def members(name: str, n: int, k: int, seed: int = 0, chunk: int = 2_000, keep=None):
    """``[H, N, K]`` float64 member probabilities (members in the EECE's canonical order, so the
    EECE does not copy them) and ``[N]`` labels. ``keep``: only these classes of the ``K`` (same
    per-class data as in the full run) plus one last "rest" class holding the remaining
    probability: ``[H, N, len(keep) + 1]``, labels of the other classes mapped to the rest."""
    sd, (lo, hi), confusable, member_sd = WORKLOADS[name]
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(k, (n,), generator=g)
    width = k if keep is None else len(keep) + 1
    p = torch.empty(H, n, width, dtype=torch.float64)
    for a in range(0, n, chunk):
        b = min(n, a + chunk)
        rows = torch.arange(b - a)
        z = sd * torch.randn(b - a, k, generator=g)
        z[rows, y[a:b]] += lo + (hi - lo) * torch.rand(b - a, generator=g)
        if confusable:
            c = torch.randint(k, (b - a, confusable), generator=g)
            z[rows[:, None], c] += 2.0 + 5.0 * torch.rand(b - a, confusable, generator=g)
        zh = z[None] + member_sd * torch.randn(H, b - a, k, generator=g)
        probs = torch.softmax(zh.double(), dim=-1)
        if keep is None:
            p[:, a:b] = probs
        else:
            kept = probs[:, :, keep]
            p[:, a:b, :-1] = kept
            p[:, a:b, -1] = (1.0 - kept.sum(-1)).clamp_min(0.0)
    if keep is not None:
        where = torch.full((k,), len(keep), dtype=torch.int64)
        where[torch.as_tensor(keep)] = torch.arange(len(keep))
        y = where[y]
    order = canonical_member_order(p)
    if order is not None:
        p = p[order]
    return p, y


def within_ss(x: torch.Tensor, ids: torch.Tensor) -> float:
    """Within-bin sum of squares of rows ``x [N, H]`` under the bins ``ids``."""
    m = int(ids.max()) + 1
    counts = torch.bincount(ids, minlength=m).clamp_min(1)[:, None].to(x.dtype)
    means = torch.zeros(m, x.shape[1], dtype=x.dtype).index_add_(0, ids, x) / counts
    return float(((x - means[ids]) ** 2).sum())


def _timed(fn):
    c, t = time.process_time(), time.perf_counter()
    out = fn()
    return time.process_time() - c, time.perf_counter() - t, out


def row(name: str, n: int, k: int, loop_classes: int | None, subset: int | None = None):
    keep = None if subset is None else list(range(0, k, k // subset))[:subset]
    p, y = members(name, n, k, keep=keep)
    cpu, wall, details = _timed(lambda: eece(p, y, KMeansBinning(), return_details=True))
    if keep is not None:  # both sides on the same kept classes and the rest class
        loop_classes = None
    width = p.shape[2]
    timed = list(range(width)) if loop_classes is None else list(range(0, k, k // loop_classes))
    ours_bins = details.point_bins

    def loop():
        return [
            eece(p[:, :, c], (y == c).long(), KMeansBinning(), binary=True, return_details=True)
            for c in timed
        ]

    loop_cpu, loop_wall, loop_details = _timed(loop)
    scale = width / len(timed)
    ratios, identical = [], 0
    for c, d in zip(timed, loop_details, strict=True):
        x = p[:, :, c].T
        ratios.append(within_ss(x, ours_bins[c]) / within_ss(x, d.point_bins))
        identical += int(torch.equal(ours_bins[c], d.point_bins))
    worst, mean = max(ratios), statistics.fmean(ratios)
    sampled = "" if loop_classes is None else f" (loop timed on {len(timed)} classes, x{scale:g})"
    if keep is not None:
        sampled = (
            f"; SUBSET: {len(keep)} evenly spaced classes of the K={k} run + 1 rest class, both "
            f"sides on these {width}; scaled to K: {loop_cpu * k / width:.0f} s -> "
            f"{cpu * k / width:.0f} s"
        )
    iters = details.backend_settings.get("n_iter")
    iters = list(iters) if isinstance(iters, tuple) else [iters]
    return _harness.Result(
        f"classwise EECE {name}, K={k}{'' if keep is None else f' (subset {width})'}, N={n:,}, "
        f"H={H}, {details.n_bins} bins",
        "loop of binary EECEs, 1 thread (CPU s)",
        loop_cpu * scale,
        cpu,
        f"inertia worst {worst - 1:+.2%}, mean {mean - 1:+.2%}",
        target=TARGET,
        note=f"wall {loop_wall * scale:.1f} s -> {wall:.1f} s{sampled}; bins identical to the "
        f"loop's on {identical}/{len(timed)} classes; Lloyd steps per class "
        f"{statistics.fmean(iters):.1f}; EECE {details.value:.6g} vs loop "
        f"{statistics.fmean(d.value for d in loop_details):.6g} (timed classes)",
    )


def seed_spread(name: str, n: int, k: int) -> str:
    """The exact per-class fit's own seed-to-seed spread: the loop's bins with seed 1 against
    seed 0, within-bin sum of squares per class (the reference noise of the agreement column)."""
    p, y = members(name, n, k)

    def loop_ss(seed: int) -> list[float]:
        return [
            within_ss(
                p[:, :, c].T,
                eece(
                    p[:, :, c],
                    (y == c).long(),
                    KMeansBinning(seed=seed),
                    binary=True,
                    return_details=True,
                ).point_bins,
            )
            for c in range(k)
        ]

    ratios = [a / b for a, b in zip(loop_ss(1), loop_ss(0), strict=True)]
    over = sum(r > 1.05 for r in ratios)
    return (
        f"exact per-class fit, seed 1 vs seed 0, {name} K={k} N={n:,}: inertia worst "
        f"{max(ratios) - 1:+.2%}, mean {statistics.fmean(ratios) - 1:+.2%}, {over} classes over +5%"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="K = 200 only; print, no file")
    parser.add_argument("--full-loop", action="store_true", help="time the loop on all classes")
    parser.add_argument("--loop-classes", type=int, default=100, help="loop classes at K=1000")
    parser.add_argument(
        "--classes",
        type=int,
        default=None,
        help="K=1000: both sides on this many evenly spaced classes (+1 rest class) only",
    )
    parser.add_argument(
        "--seed-spread",
        action="store_true",
        help="print the exact per-class fit's seed 1 vs seed 0 inertia at K = 200 and exit",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore", UserWarning)
    if args.seed_spread:
        for name in WORKLOADS:
            print(seed_spread(name, 20_000, 200), flush=True)
        return 0
    sizes = [(200, 20_000, None, None)]
    if not args.quick:
        loop = None if args.full_loop else args.loop_classes
        sizes.append((1000, 50_000, loop, args.classes))
    results = [row(name, n, k, s, c) for k, n, s, c in sizes for name in WORKLOADS]
    notes = [
        "both sides in this process with torch.set_num_threads(1); times are CPU seconds "
        "(time.process_time), wall times in the note; command: "
        "`python benchmarks/bench_eece_classwise.py"
        + ("" if args.classes is None else f" --classes {args.classes}")
        + "`",
        "agreement: within-bin sum of squares of our bins over the loop's, per timed class",
    ]
    if args.quick:
        print(_harness.format_table(results))
        print("\n".join(notes))
    else:
        _harness.write_results(results, notes=notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
