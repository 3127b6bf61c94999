"""Time ``evaluate_predictions`` and its bootstrap at N = 200,000 (M = 5 members, K = 10 classes).

In one run: the whole call with ``bootstrap=0`` and ``bootstrap=200`` (wall clock and this
process's CPU time, which a loaded shared machine inflates less than the wall clock), each with
the per-stage lines ``bensemble evaluate`` writes on a terminal, so the cost of the intervals is
their difference; then the bootstrap stage of the ``bootstrap=0`` evaluation taken apart (as
``summarise`` runs it, with one torch thread): registering the statistics, building the sparse
design, the replicates (weights drawn and one sparse product per block) and the calibrated-ECE
reference. Run: ``PYTHONPATH=. python benchmarks/bench_evaluate_bootstrap.py [N]``.
"""

from __future__ import annotations

import io
import sys
import time

import torch

from bensemble.app.evaluate import evaluate_predictions
from bensemble.app.evaluate_summary import _calibrated_q95, bootstrap_plan
from bensemble.metrics._kmeans_batched import single_threaded

B = 200


class _Terminal(io.StringIO):
    def isatty(self) -> bool:  # the stage lines are written on a terminal only
        return True


def _timed(label: str, fn):
    start, cpu = time.perf_counter(), time.process_time()
    out = fn()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    print(f"  {label:<34} {wall:6.2f} s wall  {cpu:6.2f} s CPU")
    return out, wall, cpu


def main(n: int = 200_000, m: int = 5, k: int = 10) -> None:
    g = torch.Generator().manual_seed(0)
    true = 2.0 * torch.randn(n, k, generator=g, dtype=torch.float64)
    labels = torch.multinomial(torch.softmax(true, 1), 1, generator=g).squeeze(1)
    members = torch.softmax(2.0 * (true + 0.3 * torch.randn(m, n, k, generator=g)), -1)
    print(f"N = {n}, M = {m}, K = {k}, torch threads = {torch.get_num_threads()}")
    totals, first = {}, None
    for b in (0, B):
        stream, real = _Terminal(), sys.stderr
        sys.stderr = stream
        start, cpu = time.perf_counter(), time.process_time()
        try:
            ev = evaluate_predictions(
                members, labels, calibration_split=0.2, bootstrap=b, progress=True
            )
        finally:
            sys.stderr = real
        totals[b] = (time.perf_counter() - start, time.process_time() - cpu)
        first = first or ev
        print(f"\nbootstrap={b}: {totals[b][0]:.1f} s wall (CPU {totals[b][1]:.1f} s)")
        print(stream.getvalue().rstrip())
    (w0, c0), (w1, c1) = totals[0], totals[B]
    print(f"\nintervals cost: +{w1 - w0:.1f} s wall, +{c1 - c0:.1f} s CPU ({c1 / c0:.2f}x CPU)")

    first.setup["bootstrap"] = B
    print(f"\nbootstrap stage, {B} replicates, n = {first.labels.shape[0]} reported points:")
    with single_threaded():
        plan, *t1 = _timed("register statistics", lambda: bootstrap_plan(first))
        _, *t2 = _timed("sparse design", plan._design.matrix)
        _, *t3 = _timed(
            f"replicates ({plan._design.entries:,} entries)", lambda: plan.run(B, seed=0)
        )
        _, *t4 = _timed("calibrated-ECE reference", lambda: _calibrated_q95(first))
    wall, cpu = (sum(t[i] for t in (t1, t2, t3, t4)) for i in (0, 1))
    print(f"  {'bootstrap stage in all':<34} {wall:6.2f} s wall  {cpu:6.2f} s CPU")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000)
