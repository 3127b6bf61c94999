"""Where the time of ``evaluate_predictions`` goes at N = 200,000 (M = 5 members, K = 10 classes),
with and without the intervals.

In one run: the whole call with ``bootstrap=0`` and ``bootstrap=200`` (wall clock and this
process's CPU time, which a loaded shared machine inflates less than the wall clock), each with
its per-stage seconds (``Evaluation.timings``: the calibration split, the EECE's K-means, the
main pass - metrics, uncertainty, EECE sums and, with intervals, the replicate states - and the
compute stage - the selective metrics' sweep and the intervals), so the cost of the intervals is
the difference. Run: ``PYTHONPATH=. python benchmarks/bench_evaluate_bootstrap.py [N]``.
"""

from __future__ import annotations

import sys
import time

import torch

from bensemble.app.evaluate import evaluate_predictions

B = 200


def main(n: int = 200_000, m: int = 5, k: int = 10) -> None:
    g = torch.Generator().manual_seed(0)
    true = 2.0 * torch.randn(n, k, generator=g, dtype=torch.float64)
    labels = torch.multinomial(torch.softmax(true, 1), 1, generator=g).squeeze(1)
    members = torch.softmax(2.0 * (true + 0.3 * torch.randn(m, n, k, generator=g)), -1)
    print(f"N = {n}, M = {m}, K = {k}, torch threads = {torch.get_num_threads()}")
    totals = {}
    for b in (0, B):
        start, cpu = time.perf_counter(), time.process_time()
        ev = evaluate_predictions(
            members, labels, calibration_split=0.2, bootstrap=b, chunk_size="auto"
        )
        totals[b] = (time.perf_counter() - start, time.process_time() - cpu)
        print(f"\nbootstrap={b}: {totals[b][0]:.1f} s wall (CPU {totals[b][1]:.1f} s)")
        for stage, seconds in ev.timings.items():
            print(f"  {stage:<48} {seconds:6.2f} s wall")
    (w0, c0), (w1, c1) = totals[0], totals[B]
    print(f"\nintervals cost: +{w1 - w0:.1f} s wall, +{c1 - c0:.1f} s CPU ({c1 / c0:.2f}x CPU)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000)
