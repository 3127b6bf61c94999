"""Benchmark: the expected epistemic calibration error (EECE) with K-means binning.

Workloads (the toy problem: ``bensemble.datasets.make_toy_gaussians``; members are ``H``
logistic models with perturbed slope, offset and tilt - a coherent ensemble):

* A: N = 40,000 points, H = 100 members, M = 200 bins.
* B: N = 1,000,000 points, H = 10 members, M = 200 bins (issue 7, target 3).

Implementations, all in this process on the same data:

* ours - ``bensemble.metrics.expected_epistemic_calibration_error`` with its defaults
  (backend "auto" = our torch K-means: greedy k-means++ and Lloyd in float32, fitted on a seeded
  subsample of 50,000 rows when N is larger, then every row assigned to its nearest centroid in
  float64, one matrix product per chunk; per-bin sums by ``bincount`` / ``index_add_``).
* ours (sklearn / minibatch backend) - the same pipeline with the other fitting backends, for the
  "switching backends" column (workload B only).
* baseline - the straightforward numpy + scikit-learn implementation of the same formula that a
  user would write: ``sklearn.cluster.KMeans(n_clusters=M, n_init=1, init="k-means++",
  max_iter=300, tol=1e-4)`` fitted on *all* N rows, then a per-bin numpy loop.

Agreement: the EECE relative to the baseline's, and the K-means inertia of each partition over
all N rows (sum of squared distances to the nearest centroid) relative to the baseline's.

Timing: ours is the median of ``--repeats`` runs (default 5) after one warm-up, our variants
timed in alternation. Both wall time (the reported ratio) and CPU time (``time.process_time``;
with one thread it equals wall time on an idle machine and leaves out waiting for a core on a
shared one) are read around every call. The baseline is
the median of ``--repeats`` runs for workload A, but runs ONCE (no warm-up) for workload B, where
a single full scikit-learn fit takes one to two minutes. Memory: the peak resident-set increase
during one call (Linux ``VmHWM`` after resetting it through ``/proc/self/clear_refs``, minus
``VmRSS`` before the call), measured in a separate process per implementation with glibc's mmap
threshold pinned at 64 KiB (``MALLOC_MMAP_THRESHOLD_``) so that every large block is returned to
the system when freed (else a reused heap hides allocations); that setting slows
allocation-heavy code, hence not in the timing process. It covers torch, numpy and scikit-learn
allocations alike. The baseline's memory at N = 10^6 is not measured (a second full fit).

Threads: torch, numpy/BLAS and scikit-learn's OpenMP are all limited to ``--threads`` (default
1; the machine has 2 cores shared with other work).

Run: ``python benchmarks/bench_eece.py [--threads 1] [--repeats 5] [--quick]``
(``--quick``: N = 40,000 / 200,000 and 3 repeats).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bensemble.datasets import make_toy_gaussians  # noqa: E402
from bensemble.metrics import expected_epistemic_calibration_error, fit_bins  # noqa: E402
from bensemble.metrics.binning import KMeansBinning, kmeans_inertia  # noqa: E402

try:  # the shared benchmark harness, when present
    import _harness  # noqa: E402
except ImportError:  # pragma: no cover - standalone use
    _harness = None

SPEED_TARGET = 20.0  # issue 7, target 3: >= 20x faster than full scikit-learn K-means at N = 1e6
AGREEMENT = 0.05  # inertia and EECE within 5% of the full fit


# ----------------------------------------------------------------------------- workload


def make_workload(n: int, h: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Toy data and ``h`` coherent logistic members: ``p [H, N]`` float64, ``y [N]`` int64."""
    data = make_toy_gaussians(n, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    slope = 1 + 0.3 * torch.randn(h, 1, generator=g, dtype=torch.float64)
    shift = 0.5 * torch.randn(h, 1, generator=g, dtype=torch.float64)
    tilt = 0.3 * torch.randn(h, 1, generator=g, dtype=torch.float64)
    s, t = data.x.sum(1), data.x[:, 0] - data.x[:, 1]
    p = torch.sigmoid(-(5 / 3) * slope * s + shift + tilt * t)
    return p, data.y


# ----------------------------------------------------------------------------- baseline


def baseline_eece(p: np.ndarray, y: np.ndarray, n_bins: int, seed: int) -> tuple[float, float]:
    """Full scikit-learn K-means on all rows, then a per-bin numpy loop (the paper's formula)."""
    from sklearn.cluster import KMeans

    x = p.T  # [N, H]
    km = KMeans(
        n_clusters=n_bins, n_init=1, init="k-means++", max_iter=300, tol=1e-4, random_state=seed
    ).fit(x)
    labels = km.labels_
    eu = p.var(axis=0)
    n = p.shape[1]
    total = 0.0
    for m in range(n_bins):
        mask = labels == m
        if not mask.any():
            continue
        acc = y[mask].mean()
        conf = p[:, mask].mean(axis=1)
        squared_error = np.mean((acc - conf) ** 2)
        total += mask.sum() / n * abs(squared_error - eu[mask].mean())
    return float(total), float(km.inertia_)


# ----------------------------------------------------------------------------- measuring


def _status() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":")
                out[key] = int(value.split()[0]) * 1024
    return out


def peak_memory(fn) -> tuple[float | None, object]:
    """Peak RSS increase (bytes) during ``fn()``, or None where /proc cannot be reset."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        before = _status()["VmRSS"]
    except OSError:
        return None, fn()
    out = fn()
    return float(_status()["VmHWM"] - before), out


def probe_memory(n: int, h: int, n_bins: int, impl: str, threads: int) -> float | None:
    """Peak RSS increase of one call, measured in a fresh process whose glibc returns every
    block over 64 KiB to the system when freed (``MALLOC_MMAP_THRESHOLD_``), so that RSS tracks
    live memory. Kept out of the timing process: that setting slows allocation-heavy code."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "65536"}
    cmd = [sys.executable, __file__, "--threads", str(threads), "--probe"]
    cmd += [str(n), str(h), str(n_bins), impl]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    try:
        return float(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def _probe(n: int, h: int, n_bins: int, impl: str) -> None:
    p, y = make_workload(n, h)
    p_np, y_np = p.numpy(), y.numpy()

    def call():
        if impl == "baseline":
            return baseline_eece(p_np, y_np, n_bins, 0)
        binning = KMeansBinning(n_bins, seed=0, backend=impl)
        return expected_epistemic_calibration_error(p, y, binning, binary=True)

    call()  # warm-up: imports and one-off buffers are not the call's working memory
    peak, _ = peak_memory(call)
    print("nan" if peak is None else peak)


def _measure(fns, repeats: int, warmup: int) -> list[tuple[float, float]]:
    """Median (wall, CPU) seconds of each of ``fns``, timed in alternation (round-robin, as the
    shared harness's ``measure_interleaved`` does) with both clocks read around every call.

    With one thread, CPU time (``time.process_time``) equals wall time on an idle machine and
    leaves out the time spent waiting for a core on a shared one.
    """
    for _ in range(warmup):
        for fn in fns:
            fn()
    walls: list[list[float]] = [[] for _ in fns]
    cpus: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            w0, c0 = time.perf_counter(), time.process_time()
            fn()
            cpus[i].append(time.process_time() - c0)
            walls[i].append(time.perf_counter() - w0)
    return [(statistics.median(w), statistics.median(c)) for w, c in zip(walls, cpus)]


def _mb(value: float | None) -> str:
    return "n/a" if value is None else f"{value / 2**20:.0f} MB"


# ----------------------------------------------------------------------------- run


def run(n: int, h: int, n_bins: int, repeats: int, baseline_repeats: int, backends: bool):
    """Time the baseline and our variants on one workload; print and return the rows."""
    p, y = make_workload(n, h)
    p_np, y_np = p.numpy(), y.numpy()
    seed = 0

    def baseline():
        return baseline_eece(p_np, y_np, n_bins, seed)

    def ours(backend: str = "auto"):
        binning = KMeansBinning(n_bins, seed=seed, backend=backend)
        return expected_epistemic_calibration_error(p, y, binning, return_details=True, binary=True)

    # Baseline: median of `baseline_repeats` after one warm-up, or a single cold run.
    out = {}
    warm = 1 if baseline_repeats > 1 else 0
    ((t_base, cpu_base),) = _measure([lambda: out.update(base=baseline())], baseline_repeats, warm)
    v_base, inertia_base = out["base"]
    threads = torch.get_num_threads()
    mem_base = probe_memory(n, h, n_bins, "baseline", threads) if baseline_repeats > 1 else None
    rows = [
        {
            "impl": f"baseline: full sklearn KMeans + numpy loop (x{baseline_repeats})",
            "backend": "baseline",
            "repeats": baseline_repeats,
            "seconds": t_base,
            "cpu": cpu_base,
            "eece": v_base,
            "inertia": inertia_base,
            "memory": mem_base,
        }
    ]
    variants = [("ours (auto = torch)", "auto"), ("ours, sklearn backend", "sklearn")]
    if backends:
        variants += [("ours, minibatch backend", "minibatch")]
    times = _measure([lambda b=b: ours(b) for _, b in variants], repeats, 1)
    for (label, backend), (t, cpu) in zip(variants, times):
        details = ours(backend)
        mem = probe_memory(n, h, n_bins, backend, torch.get_num_threads())
        centroids = fit_bins(p.T, n_bins, seed=seed, backend=backend)
        rows.append(
            {
                "impl": f"{label} (median of {repeats})",
                "backend": backend,
                "seconds": t,
                "cpu": cpu,
                "eece": details.value,
                "inertia": kmeans_inertia(p.T, centroids),
                "memory": mem,
                "settings": details.backend_settings,
            }
        )
    print(
        f"\nEECE, N = {n:,}, H = {h}, M = {n_bins} bins; threads = {torch.get_num_threads()}; "
        f"ours fits on {rows[1]['settings']['n_fit_rows']:,} rows"
    )
    if baseline_repeats == 1:
        print("(baseline run once, no warm-up: one full scikit-learn fit at this size)")
    header = (
        f"{'implementation':<52} {'wall s':>8} {'speed-up':>9} {'CPU s':>8} {'CPU ratio':>9} "
        f"{'EECE':>9} {'dEECE':>7} {'inertia/base':>12} {'peak mem':>9}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        row["ratio"] = t_base / row["seconds"]
        row["cpu_ratio"] = cpu_base / row["cpu"]
        row["eece_rel"] = row["eece"] / v_base - 1
        row["inertia_rel"] = row["inertia"] / inertia_base
        print(
            f"{row['impl']:<52} {row['seconds']:>8.3f} {row['ratio']:>8.1f}x {row['cpu']:>8.3f} "
            f"{row['cpu_ratio']:>8.1f}x {row['eece']:>9.6f} {row['eece_rel']:>+7.1%} "
            f"{row['inertia_rel']:>12.4f} {_mb(row['memory']):>9}"
        )
    return rows


def _harness_rows(name: str, rows: list[dict], target: float | None) -> list:
    base = rows[0]
    out = []
    for row in rows[1:]:
        backend = row["backend"]
        out.append(
            _harness.Result(
                workload=name,
                baseline=f"full sklearn KMeans + numpy loop (x{base['repeats']})",
                baseline_s=base["seconds"],
                ours_s=row["seconds"],
                agreement=f"EECE {row['eece_rel']:+.1%}, inertia x{row['inertia_rel']:.3f}",
                target=target if backend == "auto" else None,
                note=f"ours = backend '{backend}'; CPU-time ratio {row['cpu_ratio']:.1f}x; "
                f"peak RSS +{_mb(row['memory'])} (baseline {_mb(base['memory'])})",
            )
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="smaller N, 3 repeats, no file")
    parser.add_argument("--only", choices=["A", "B"], default=None, help="run one workload")
    parser.add_argument("--probe", nargs=4, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.probe is not None:  # internal: one memory measurement (see probe_memory)
        n, h, n_bins, impl = args.probe
        with threadpool_limits(args.threads):
            _probe(int(n), int(h), int(n_bins), impl)
        return 0
    repeats = 3 if args.quick else args.repeats
    n_a, n_b = (10_000, 200_000) if args.quick else (40_000, 1_000_000)
    results = {}
    with threadpool_limits(args.threads):
        if args.only in (None, "A"):
            results["A"] = run(n_a, 100, 200, repeats, repeats, backends=False)
        if args.only in (None, "B"):
            results["B"] = run(n_b, 10, 200, repeats, 1, backends=True)
    lines = []
    if "B" in results:
        ours = results["B"][1]
        speed_ok = ours["ratio"] >= SPEED_TARGET
        inertia_ok = abs(ours["inertia_rel"] - 1) <= AGREEMENT
        eece_ok = abs(ours["eece_rel"]) <= AGREEMENT
        lines.append(
            f"Target 3 (N = {n_b:,}, H = 10): speed-up {ours['ratio']:.1f}x wall "
            f"({ours['cpu_ratio']:.1f}x CPU time) "
            f"(>= {SPEED_TARGET:g}x: {'met' if speed_ok else 'MISSED'}); inertia "
            f"{ours['inertia_rel']:.4f} of the full fit (within 5%: "
            f"{'met' if inertia_ok else 'MISSED'}); EECE {ours['eece_rel']:+.2%} "
            f"(within 5%: {'met' if eece_ok else 'MISSED'})."
        )
    if "A" in results:
        a = results["A"]
        lines.append(
            f"Workload A (N = {n_a:,}, H = 100): ours {a[1]['ratio']:.1f}x the baseline's speed "
            f"({'not slower' if a[1]['ratio'] >= 1 else 'SLOWER'})."
        )
    print("\n" + "\n".join(lines))
    if _harness is not None and not args.quick and args.only is None:
        table = _harness_rows(f"EECE {n_a:,} x 100, 200 bins", results["A"], 1.0)
        table += _harness_rows(f"EECE {n_b:,} x 10, 200 bins", results["B"], SPEED_TARGET)
        _harness.write_results(
            table,
            notes=[
                "Toy problem, coherent logistic members; baseline = full scikit-learn KMeans "
                "(n_init=1, k-means++, tol 1e-4) on all rows + per-bin numpy loop. Ours: torch "
                "K-means, 50,000-row seeded subsample + 2 full Lloyd refinement passes when N is "
                "larger. Medians of 5 interleaved runs after a warm-up; the 10^6-row baseline is "
                "one cold run. Agreement: EECE relative to the baseline's, inertia over all rows "
                "relative to the full fit's. Threads: 1 (torch, BLAS, OpenMP).",
                *lines,
            ],
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
