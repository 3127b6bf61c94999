"""Time ``evaluate_predictions`` and its bootstrap at N = 200,000 (M = 5 members, K = 10 classes).

Prints the time of every stage (the same lines ``bensemble evaluate`` writes on a terminal) and
the whole call with ``bootstrap=0`` and ``bootstrap=200`` (wall clock and this process's CPU
time, which a loaded shared machine inflates less), so the cost of the intervals is their
difference. Run: ``PYTHONPATH=. python benchmarks/bench_evaluate_bootstrap.py [N]``.
"""

from __future__ import annotations

import io
import sys
import time

import torch

from bensemble.app.evaluate import evaluate_predictions


class _Terminal(io.StringIO):
    def isatty(self) -> bool:  # the stage lines are written on a terminal only
        return True


def main(n: int = 200_000, m: int = 5, k: int = 10) -> None:
    g = torch.Generator().manual_seed(0)
    true = 2.0 * torch.randn(n, k, generator=g, dtype=torch.float64)
    labels = torch.multinomial(torch.softmax(true, 1), 1, generator=g).squeeze(1)
    members = torch.softmax(2.0 * (true + 0.3 * torch.randn(m, n, k, generator=g)), -1)
    print(f"N = {n}, M = {m}, K = {k}, torch threads = {torch.get_num_threads()}")
    for b in (0, 200):
        stream, real = _Terminal(), sys.stderr
        sys.stderr = stream
        start, cpu = time.perf_counter(), time.process_time()
        try:
            evaluate_predictions(members, labels, calibration_split=0.2, bootstrap=b, progress=True)
        finally:
            sys.stderr = real
        total, cpu = time.perf_counter() - start, time.process_time() - cpu
        print(f"\nbootstrap={b}: {total:.1f} s in all (CPU {cpu:.1f} s)")
        print(stream.getvalue().rstrip())


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000)
