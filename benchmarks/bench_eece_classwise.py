"""Classwise EECE K-means at K = 100 and K = 1000 classes: the path the classwise EECE runs now
(``bensemble.metrics._kmeans_classes.fit_classes`` with its default ``lloyd_rtol = 3e-4``: batched
chunks of classes on single-threaded workers, Lloyd stopped once a step improves the inertia by
at most 3e-4 of it) vs the previous sequential per-class loop (``_fit`` then ``_assign`` per class,
exact, with ``--threads`` intra-op threads), in the same run.

Workload: H = 10 members, 100 bins per class (the EECE default). The member vectors of class
``k`` are ``sigmoid(z - log(K - 1) + 2 u)`` with ``z`` standard normal per member and point and
``u`` per point (the one-vs-rest probability of a K-class softmax with spread logits). Both paths
fit the same classes with the same seed.

* Rows "N = 50,000": the issue's workload. A full K = 1000 loop takes minutes on the 2-core
  machine, so each row times both paths on the same ``S`` classes (``--classes``, default 8) of
  the K-class problem; per-class fits are independent, so the ratio is the K-class ratio.
* Rows "N = 2,000": small classes (``--small-classes``, default 100 classes).

Columns: the times are CPU seconds of all threads (robust to the load of a shared machine; the
ratio and the target are on CPU time), wall times are in the note. ``agreement`` is the worst
class's relative excess of within-bin sum of squares (inertia) over the loop's; the note gives
the worst, best and all-classes ratios, and the fraction of classes whose bins under the exact
option (``lloyd_rtol=0``) equal those of the loop run with one intra-op thread (1.0 expected:
bit-identical by construction).

Run: ``python benchmarks/bench_eece_classwise.py [--threads 1] [--busy 0] [--quick]``; ``--busy B``
starts B spinning processes for the timed part (an oversubscribed machine), ``--quick`` prints
without writing ``results.md``. ``--sweep`` prints the batch-size sweep behind
``MAX_BATCH_SCORES`` (one thread, one class at a time vs batches).
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import _harness  # noqa: E402

from bensemble.metrics import _kmeans_classes  # noqa: E402
from bensemble.metrics._epistemic_checks import partition  # noqa: E402
from bensemble.metrics._kmeans import DEFAULT_LLOYD_RTOL, _assign, _fit  # noqa: E402
from bensemble.metrics._kmeans_batched import single_threaded  # noqa: E402

N_BINS, H, SEED = 100, 10, 0


def _class_vectors(n_classes: int, classes: int, n: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(n_classes)
    out = []
    for _ in range(classes):
        z = torch.randn(n, H, generator=g, dtype=torch.float64)
        u = torch.randn(n, 1, generator=g, dtype=torch.float64)
        out.append(torch.sigmoid(z - math.log(n_classes - 1) + 2 * u))
    return out


def previous_loop(xs: list[torch.Tensor]) -> list[torch.Tensor]:
    """The previous classwise path: one ``_fit`` per class, then its bins, one after another."""
    return [_assign(x, _fit(x, N_BINS, seed=SEED).centroids)[0] for x in xs]


def ours(
    xs: list[torch.Tensor],
    workers: int | None = None,
    max_batch: int | None = None,
    lloyd_rtol: float = DEFAULT_LLOYD_RTOL,
    coreset: int | None = None,
) -> list[torch.Tensor]:
    """What the classwise EECE runs now (``lloyd_rtol=0``: its exact option)."""

    def fallback(k):
        return partition(
            xs[k],
            binning="kmeans",
            n_bins=N_BINS,
            centroids=None,
            backend="torch",
            seed=SEED,
            fit_options={
                "subsample": 50_000,
                "refine": 2,
                "max_iter": 300,
                "tol": 1e-4,
                "batch_size": 8192,
                "coreset": coreset,
                "lloyd_rtol": lloyd_rtol,
            },
        )

    out = _kmeans_classes.fit_classes(
        lambda k: xs[k],
        len(xs),
        N_BINS,
        seed=SEED,
        fallback=fallback,
        workers=workers,
        max_batch=max_batch,
        coreset=coreset,
        lloyd_rtol=lloyd_rtol,
    )
    return [ids for ids, _, _ in out]


def _within_ss(x: torch.Tensor, ids: torch.Tensor) -> float:
    m = int(ids.max()) + 1
    counts = torch.bincount(ids, minlength=m).clamp_min(1)[:, None].to(x.dtype)
    means = torch.zeros(m, x.shape[1], dtype=x.dtype).index_add_(0, ids, x) / counts
    return float(((x - means[ids]) ** 2).sum())


def _timed(fn, cpu: list[float] | None = None):
    """Wall time of ``fn()`` (and its CPU time, all threads, appended to ``cpu``)."""
    c, t = time.process_time(), time.perf_counter()
    out = fn()
    wall = time.perf_counter() - t
    if cpu is not None:
        cpu.append(time.process_time() - c)
    return wall, out


def _busy(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def _row(label, xs, threads, target):
    """Loop vs ours (the default: Lloyd stopped at lloyd_rtol = 3e-4) in one run.
    Time columns are CPU seconds (all threads): robust to the load of a shared machine."""
    torch.set_num_threads(threads)
    cpu: list[float] = []
    t_loop, loop = _timed(lambda: previous_loop(xs), cpu)
    t_ours, mine = _timed(lambda: ours(xs), cpu)
    _, exact = _timed(lambda: ours(xs, lloyd_rtol=0.0))
    if threads == 1:
        loop1 = loop
    else:
        with single_threaded():
            loop1 = previous_loop(xs)
    same = sum(torch.equal(a, b) for a, b in zip(exact, loop1, strict=True)) / len(xs)
    ref = [_within_ss(x, b) for x, b in zip(xs, loop, strict=True)]
    ratios = [_within_ss(x, a) / r for x, a, r in zip(xs, mine, ref, strict=True)]
    total = sum(_within_ss(x, a) for x, a in zip(xs, mine, strict=True)) / sum(ref)
    return _harness.Result(
        label,
        f"previous per-class loop, {threads} torch thread(s) (CPU s)",
        cpu[0],
        cpu[1],
        max(ratios) - 1,
        target=target,
        note=f"wall {t_loop:.2f} s -> {t_ours:.2f} s ({t_loop / t_ours:.2f}x); inertia ours / "
        f"loop: worst class {max(ratios):.4f}, best {min(ratios):.4f}, all classes {total:.4f}; "
        f"exact option (lloyd_rtol=0) bins identical to the 1-thread loop: {same:.0%} of classes",
    )


def sweep() -> None:
    torch.set_num_threads(1)
    for n, classes in ((1000, 40), (2000, 40), (5000, 16), (10000, 8), (20000, 4)):
        xs = _class_vectors(1000, classes, n)
        t_one, _ = _timed(lambda xs=xs: ours(xs, workers=1, max_batch=1))
        t_batch, _ = _timed(lambda xs=xs: ours(xs, workers=1))
        size = _kmeans_classes._chunk_size(classes, n, N_BINS, 1)
        print(
            f"N={n:>6} {classes} classes: one at a time {t_one:.3f} s, batches of {size} "
            f"{t_batch:.3f} s ({t_one / t_batch:.2f}x)"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="print only, fewer classes")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1)")
    parser.add_argument("--classes", type=int, default=8, help="classes timed at N=50,000 (8)")
    parser.add_argument("--small-classes", type=int, default=100, help="classes at N=2,000")
    parser.add_argument("--busy", type=int, default=0, help="spinning processes while timing")
    parser.add_argument("--sweep", action="store_true", help="batch-size sweep, then exit")
    args = parser.parse_args(argv)
    if args.sweep:
        sweep()
        return 0
    classes = 2 if args.quick else args.classes
    small = 40 if args.quick else args.small_classes
    busy = _busy(args.busy)
    try:
        load = os.getloadavg()[0]
        results = []
        for n_classes in (100, 1000):
            xs = _class_vectors(n_classes, classes, 50_000)
            results.append(
                _row(
                    f"classwise K-means K={n_classes}, N=50,000: {classes} of {n_classes} classes",
                    xs,
                    args.threads,
                    5.0 if n_classes == 1000 else None,
                )
            )
        xs = _class_vectors(1000, small, 2_000)
        results.append(
            _row(
                f"classwise K-means K=1000, N=2,000: {small} of 1000 classes",
                xs,
                args.threads,
                None,
            )
        )
        load = max(load, os.getloadavg()[0])
    finally:
        for p in busy:
            p.kill()
            p.wait()
    notes = [
        f"torch threads: {args.threads}; H = 10, 100 bins per class; {args.busy} extra spinning "
        f"processes; load average (1 min) up to {load:.1f} during the run",
        "time columns: CPU seconds of all threads (robust to the load other jobs put on the "
        "machine); ratio and target on CPU time; wall times in the note",
        "agreement: worst class's relative excess of within-bin sum of squares (inertia) over "
        "the loop's (negative: ours lower); ours = the default (batched, Lloyd stopped once a step "
        "improves the inertia by <= 3e-4 of it)",
    ]
    if args.quick:
        print(_harness.format_table(results))
        print("\n".join(notes))
    else:
        plural = "s" if args.threads > 1 else ""
        section = f"bench_eece_classwise, lloyd_rtol default ({args.threads} thread{plural}"
        section += f", {args.busy} busy)" if args.busy else ")"
        _harness.write_results(results, section=section, notes=notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
