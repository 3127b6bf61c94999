"""Classwise EECE K-means at K = 100 and K = 1000 classes: concurrent single-threaded per-class
fits (``bensemble.metrics._kmeans_batched.map_classes``, today's path) vs the previous
sequential per-class loop with torch's intra-op threads.

Workload: N = 50,000 points, H = 10 members, 100 bins per class (the EECE default). The member
vectors of class ``k`` are ``sigmoid(z - log(K - 1) + 2 u)`` with ``z`` standard normal per
member and point and ``u`` per point (the one-vs-rest probability of a K-class softmax with
spread logits). Both paths fit the same classes with the same seed. Ours is bit-identical to the
loop run with one intra-op thread (checked, in the note); against the loop with N threads,
reductions sum in another order and k-means++ may break near-ties differently, so the 'agreement'
column is the largest relative difference in K-means inertia (target <= 1%).

Both paths are linear in K (K independent fits), and the previous loop costs 10-50 s per class on
the loaded 2-core benchmark machine, so a full K = 1000 loop (hours) is out of reach here: each
row times both paths on the same ``S`` classes (``--classes``, default 2) of the K-class problem;
the ratio is the measured one, and the per-K totals in the notes are ``K / S`` times the
measured times.

Run: ``python benchmarks/bench_eece_classwise.py [--quick] [--threads 2] [--classes 2]``
(``--quick``: N = 10,000, 1 run).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import _harness  # noqa: E402

from bensemble.metrics._kmeans import _fit  # noqa: E402
from bensemble.metrics._kmeans_batched import map_classes, single_threaded  # noqa: E402


def _class_vectors(n_classes: int, classes: int, n: int, h: int = 10) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(n_classes)
    out = []
    for _ in range(classes):
        z = torch.randn(n, h, generator=g, dtype=torch.float64)
        u = torch.randn(n, 1, generator=g, dtype=torch.float64)
        out.append(torch.sigmoid(z - math.log(n_classes - 1) + 2 * u))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 10,000, one run, no file")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads (2)")
    parser.add_argument("--classes", type=int, default=2, help="classes timed per K (2)")
    parser.add_argument("--runs", type=int, default=2, help="runs per K (2)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    n = 10_000 if args.quick else 50_000
    runs = 1 if args.quick else args.runs
    results, notes = [], [f"torch threads: {args.threads}; N = {n:,}, H = 10, 100 bins per class"]
    for n_classes in (100, 1000):
        xs = _class_vectors(n_classes, args.classes, n)
        for run in range(runs):
            t = time.perf_counter()
            ours = map_classes(lambda k, xs=xs: _fit(xs[k], 100, seed=0), len(xs))
            t_ours = time.perf_counter() - t
            t = time.perf_counter()
            loop = [_fit(x, 100, seed=0) for x in xs]
            t_loop = time.perf_counter() - t
            # same algorithm, but 1 vs N threads sum in a different order: ties in k-means++
            # can then pick other centres, so compare the objective (inertia) ...
            diff = max(abs(a.inertia - b.inertia) / b.inertia for a, b in zip(ours, loop))
            # ... and check bit-identity against the loop run with one thread, as ours is
            with single_threaded():
                loop1 = [_fit(x, 100, seed=0) for x in xs]
            same = all(torch.equal(a.centroids, b.centroids) for a, b in zip(ours, loop1))
            results.append(
                _harness.Result(
                    f"classwise K-means K={n_classes}: {args.classes} of {n_classes} classes "
                    f"(run {run + 1})",
                    "sequential per-class loop",
                    t_loop,
                    t_ours,
                    diff,
                    target=5.0 if n_classes == 1000 else None,
                    note="agreement: max relative inertia difference to the loop; centroids "
                    + ("identical" if same else "DIFFER")
                    + " to the 1-thread loop",
                )
            )
            scale = n_classes / len(xs)
            notes.append(
                f"K={n_classes} run {run + 1}: extrapolated to all {n_classes} classes: loop "
                f"{t_loop * scale:.0f} s, ours {t_ours * scale:.0f} s"
            )
    if args.quick:
        print(_harness.format_table(results))
        print("\n".join(notes))
    else:
        _harness.write_results(results, notes=notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
