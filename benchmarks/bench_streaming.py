"""Streaming / distributed evaluation: memory of a memory-mapped evaluation, DDP sync cost, and
``bensemble evaluate``'s classwise-EECE path against the previous implementation.

Three measurements, each a ratio of two runs made by this script in the same session:

1. **Peak RSS**, evaluating a ``N x 10`` probability ``.npy`` file (``N = 10^7``; ``--quick``:
   ``10^6``): ``evaluate_chunked(open_memmap(path))`` vs the materialised run
   ``evaluate_predictions(np.load(path))`` - each in a fresh subprocess, peak RSS from
   ``VmHWM`` in ``/proc/self/status``.
2. **DDP sync time** over 2 gloo processes on loopback at ``10^6`` and ``4 * 10^6`` rows per rank:
   our :func:`bensemble.integrations.sync_` of a :class:`CalibrationErrorMeter` (45 float64
   numbers) vs torchmetrics' ``MulticlassCalibrationError`` (its ``compute()`` gathers every
   sample's confidence and accuracy). Timed: the synchronising call, median of 5.
3. ``evaluate_predictions`` on ``200,000 x 5 x 10`` logits (``--quick``: 20,000): today's path
   (the K per-class K-means fits run concurrently, single-threaded kernels) vs the previous
   implementation (the same fits in a sequential loop with torch's default threads), kept here
   as the baseline by running the same code with ``map_classes`` replaced by that loop.

Run: ``python benchmarks/bench_streaming.py [--quick] [--only rss|ddp|evaluate]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import _harness  # noqa: E402

# ----------------------------------------------------------------------------- 1. peak RSS


def _peak_rss() -> int:
    """This process's peak resident set in bytes: ``VmHWM`` of ``/proc/self/status`` (reset by
    ``exec``, unlike ``getrusage``'s ``ru_maxrss``, which a child inherits from the parent's
    peak across fork + exec), else ``ru_maxrss``."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def _probe_rss(mode: str, path: str, labels: str) -> None:
    """(subprocess) evaluate the file one way; print peak RSS (bytes) and seconds as JSON."""
    from bensemble.app.evaluate import evaluate_predictions
    from bensemble.metrics.streaming_eval import evaluate_chunked, open_memmap

    base = _peak_rss()  # after the imports
    start = time.perf_counter()
    y = np.load(labels)
    if mode == "memmap":
        out = evaluate_chunked(open_memmap(path), y, progress=False)
    else:
        out = evaluate_predictions(np.load(path), y).metrics[0]
    seconds = time.perf_counter() - start
    rss = _peak_rss()
    print(
        json.dumps(
            {"rss": rss, "base": base, "seconds": seconds, "ece": out["ece"], "nll": out["nll"]}
        )
    )


def _run_probe(*args: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(HERE.parent))
    proc = subprocess.run(
        [sys.executable, __file__, "--probe", *args],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bench_rss(n: int, repeats: int) -> tuple[list[_harness.Result], list[str]]:
    k = 10
    with tempfile.TemporaryDirectory(prefix="bench-stream-") as tmp:
        path, labels = os.path.join(tmp, "probs.npy"), os.path.join(tmp, "labels.npy")
        g = np.random.default_rng(0)
        out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, k))
        for a in range(0, n, 1 << 20):
            z = g.standard_normal((min(n, a + (1 << 20)) - a, k)).astype(np.float64) * 2
            p = np.exp(z - z.max(1, keepdims=True))
            out[a : a + len(z)] = p / p.sum(1, keepdims=True)
        out.flush()
        del out
        np.save(labels, g.integers(0, k, n))
        rows, notes = [], []
        for rep in range(repeats):
            full = _run_probe("materialised", path, labels)
            mm = _run_probe("memmap", path, labels)
            agreement = max(abs(full["ece"] - mm["ece"]), abs(full["nll"] - mm["nll"]))
            rows.append(
                _harness.Result(
                    f"peak RSS, evaluate {n:.0e} x {k} float32 .npy (run {rep + 1})",
                    "materialised np.load",
                    full["rss"] / 2**20,
                    mm["rss"] / 2**20,
                    agreement,
                    target=10.0,
                    note="'times' are MiB of peak RSS",
                )
            )
            notes.append(
                f"RSS run {rep + 1}: materialised {full['rss'] / 2**20:.0f} MiB in "
                f"{full['seconds']:.1f} s, memmap {mm['rss'] / 2**20:.0f} MiB in "
                f"{mm['seconds']:.1f} s; above the post-import baseline: materialised "
                f"{(full['rss'] - full['base']) / 2**20:.0f} MiB, memmap "
                f"{(mm['rss'] - mm['base']) / 2**20:.0f} MiB (baseline "
                f"{mm['base'] / 2**20:.0f} MiB: Python + torch + bensemble)"
            )
    return rows, notes


# ----------------------------------------------------------------------------- 2. DDP sync


def _ddp_worker(rank: int, world: int, init_file: str, rows: int, out_file: str) -> None:
    import torch.distributed as dist
    from torchmetrics.classification import MulticlassCalibrationError

    from bensemble.integrations import sync_
    from bensemble.metrics import CalibrationErrorMeter

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    g = torch.Generator().manual_seed(rank)
    probs = torch.softmax(2 * torch.randn(rows, 10, generator=g), -1)
    y = torch.randint(0, 10, (rows,), generator=g)
    times = {"ours": [], "torchmetrics": []}
    for _ in range(5):
        meter = CalibrationErrorMeter(15).update(probs, y)
        tm = MulticlassCalibrationError(num_classes=10, n_bins=15)
        tm.update(probs, y)
        dist.barrier()
        t = time.perf_counter()
        sync_(meter)
        times["ours"].append(time.perf_counter() - t)
        dist.barrier()
        t = time.perf_counter()
        tm.sync()  # torchmetrics' DDP sync: all_gather of the per-sample states
        times["torchmetrics"].append(time.perf_counter() - t)
        tm.unsync()
    if rank == 0:
        Path(out_file).write_text(json.dumps({k: sorted(v)[2] for k, v in times.items()}))
    dist.destroy_process_group()


def bench_ddp(sizes: list[int]) -> tuple[list[_harness.Result], list[str]]:
    import torch.multiprocessing as mp

    rows = []
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="bench-ddp-") as tmp:
            out = os.path.join(tmp, "times.json")
            mp.spawn(_ddp_worker, args=(2, os.path.join(tmp, "store"), n, out), nprocs=2)
            t = json.loads(Path(out).read_text())
        rows.append(
            _harness.Result(
                f"DDP sync of the ECE state, 2 gloo ranks, {n:.0e} rows/rank",
                "torchmetrics MulticlassCalibrationError.sync()",
                t["torchmetrics"],
                t["ours"],
                note="ours: one all_reduce of 45 float64",
            )
        )
    return rows, ["DDP: median of 5 syncs, rank 0's clock, 1 torch thread per rank"]


# ----------------------------------------------------------------------------- 3. evaluate


def bench_evaluate(n: int) -> tuple[list[_harness.Result], list[str]]:
    import bensemble.metrics.epistemic as ep
    from bensemble.app.evaluate import evaluate_predictions

    g = torch.Generator().manual_seed(0)
    z = 2 * torch.randn(5, n, 10, generator=g, dtype=torch.float64)
    z += 2 * torch.randn(1, n, 10, generator=g, dtype=torch.float64)
    probs = torch.softmax(z, -1)
    y = torch.randint(0, 10, (n,), generator=g)

    def previous_loop(fit_one, n_classes, **_):  # the implementation before issue 13
        return [fit_one(k) for k in range(n_classes)]

    current = ep.map_classes
    t0 = time.perf_counter()
    ours = evaluate_predictions(probs, y, seed=0).ensemble["eece"]
    t_ours = time.perf_counter() - t0
    ep.map_classes = previous_loop
    try:
        t0 = time.perf_counter()
        base = evaluate_predictions(probs, y, seed=0).ensemble["eece"]
        t_base = time.perf_counter() - t0
    finally:
        ep.map_classes = current
    row = _harness.Result(
        f"evaluate_predictions {n:,} x 5 x 10 (EECE 100 bins)",
        "previous: sequential per-class K-means",
        t_base,
        t_ours,
        abs(ours - base),
        target=5.0,
        note="agreement: |EECE ours - previous|",
    )
    return [row], [f"evaluate: {torch.get_num_threads()} torch threads in the caller"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, no results file")
    parser.add_argument("--only", choices=("rss", "ddp", "evaluate"), default=None)
    parser.add_argument("--repeats", type=int, default=2, help="RSS runs (each a fresh process)")
    parser.add_argument("--probe", nargs=3, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe:
        _probe_rss(*args.probe)
        return 0
    results, notes = [], [f"torch threads: {torch.get_num_threads()}"]
    if args.only in (None, "rss"):
        r, n = bench_rss(10**6 if args.quick else 10**7, 1 if args.quick else args.repeats)
        results += r
        notes += n
    if args.only in (None, "ddp"):
        r, n = bench_ddp([10**5] if args.quick else [10**6, 4 * 10**6])
        results += r
        notes += n
    if args.only in (None, "evaluate"):
        r, n = bench_evaluate(20_000 if args.quick else 200_000)
        results += r
        notes += n
    if args.quick or args.only is not None:
        print(_harness.format_table(results))
        print("\n".join(notes))
    else:
        _harness.write_results(results, notes=notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
