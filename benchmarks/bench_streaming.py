"""Streaming / distributed evaluation: memory of a memory-mapped evaluation, DDP sync cost, and
``bensemble evaluate`` (in memory and ``--chunk-size``) against the previous implementation.

Three measurements, each a ratio of two runs made by this script in the same session:

1. **Peak RSS**, ``bensemble evaluate P.npy --labels Y.npy --bootstrap 0 --json`` on an ``N x
   10`` float32 probability file (``N = 10^7``; ``--quick``: ``10^6``): with ``--chunk-size
   65536`` (the file memory-mapped, read chunk by chunk) vs without (the file loaded, as
   float64) - each in a fresh child process, peak RSS from ``VmHWM`` in the child's
   ``/proc/self/status`` (``getrusage``'s ``ru_maxrss`` where that is missing: on Linux a child
   inherits the parent's ``ru_maxrss`` across fork + exec, and the parent has just written the
   file through a memory map). Agreement: the largest relative difference over every number of
   the two JSON outputs.
2. **DDP sync time** over 2 gloo processes on loopback at ``10^6`` and ``4 * 10^6`` rows per rank:
   our :func:`bensemble.integrations.sync_` of a :class:`CalibrationErrorMeter` (45 float64
   numbers) vs torchmetrics' ``MulticlassCalibrationError`` (its ``compute()`` gathers every
   sample's confidence and accuracy). Timed: the synchronising call, median of 5.
3. ``bensemble evaluate L.npy --labels Y.npy --logits --json`` on ``200,000 x 5 x 10`` float32
   logits (``--quick``: 2,000), each run a fresh process: the previous implementation (the code
   of commit ``b135e44``, the last before issue 13, extracted with ``git archive``; its
   defaults: EECE 100 bins, no intervals) vs ours with the same work (``--eece-bins 100
   --bootstrap 0``), the same with ``--chunk-size 65536``, and ours with today's defaults (EECE
   ``auto`` bins, 200 bootstrap replicates), on a quiet machine and with ``--busy`` (2)
   spinning processes during both runs (the oversubscribed machine of the issue's 65 s).
   Agreement: largest relative difference over the numbers both report.

Run: ``python benchmarks/bench_streaming.py [--quick] [--only rss|ddp|evaluate] [--busy 2]``
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

# ----------------------------------------------------------------------------- helpers


def _numbers(payload, path=""):
    """Every number of a JSON payload, keyed by its path (the setup/inputs excluded)."""
    if isinstance(payload, dict):
        out = {}
        for key, value in payload.items():
            if key not in ("inputs", "report", "setup"):
                out.update(_numbers(value, f"{path}.{key}"))
        return out
    if isinstance(payload, list):
        out = {}
        for i, value in enumerate(payload):
            out.update(_numbers(value, f"{path}[{i}]"))
        return out
    if isinstance(payload, float):
        return {path: payload}
    return {}


def _max_rel_diff(a: dict, b: dict) -> float:
    na, nb = _numbers(a), _numbers(b)
    if set(na) != set(nb):
        raise AssertionError(f"different numbers reported: {sorted(set(na) ^ set(nb))}")
    return max(
        (abs(na[k] - nb[k]) / max(abs(nb[k]), 1e-300) for k in na if na[k] != nb[k]),
        default=0.0,
    )


def _evaluate_cli(argv: list[str]) -> dict:
    """``bensemble evaluate ARGV --json`` in this process; its JSON output."""
    import contextlib
    import io

    from bensemble.cli import main

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(["evaluate", *argv, "--json"])
    if code != 0:
        raise RuntimeError(f"bensemble evaluate {' '.join(argv)} exited {code}")
    return json.loads(buffer.getvalue())


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
    """(child process) ``bensemble evaluate`` of the file one way; print peak RSS (bytes),
    seconds and the command's JSON output as one JSON line."""
    import bensemble.app.evaluate_stream  # noqa: F401
    import bensemble.cli  # noqa: F401 - imported before the baseline is read

    base = _peak_rss()  # after the imports
    start = time.perf_counter()
    argv = [path, "--labels", labels, "--bootstrap", "0"]  # the report --chunk-size writes
    argv += ["--chunk-size", "65536"] if mode == "memmap" else []
    out = _evaluate_cli(argv)
    seconds = time.perf_counter() - start
    print(json.dumps({"rss": _peak_rss(), "base": base, "seconds": seconds, "out": out}))


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
            rows.append(
                _harness.Result(
                    f"peak RSS, `bensemble evaluate` {n:.0e} x {k} float32 .npy (run {rep + 1})",
                    "materialised (no --chunk-size)",
                    full["rss"] / 2**20,
                    mm["rss"] / 2**20,
                    _max_rel_diff(mm["out"], full["out"]),
                    target=10.0 if n >= 10**7 else None,  # the target is at 10^7
                    note="'times' are MiB of peak RSS; ours: --chunk-size 65536; agreement: "
                    "max relative difference of every number",
                )
            )
            notes.append(
                f"RSS run {rep + 1}: materialised {full['rss'] / 2**20:.0f} MiB in "
                f"{full['seconds']:.1f} s, --chunk-size {mm['rss'] / 2**20:.0f} MiB in "
                f"{mm['seconds']:.1f} s; above the post-import baseline: materialised "
                f"{(full['rss'] - full['base']) / 2**20:.0f} MiB, --chunk-size "
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


#: The last commit before issue 13's work: its ``bensemble evaluate`` is the "65 s path" (the
#: classwise EECE's K-means fits one after another with torch's default threads, no intervals).
PREVIOUS_COMMIT = "b135e44"


def _previous_tree(tmp: str) -> str:
    """``bensemble/`` as of :data:`PREVIOUS_COMMIT`, extracted under ``tmp``; its root."""
    root = os.path.join(tmp, "previous")
    os.makedirs(root)
    try:
        archive = subprocess.run(
            ["git", "-C", str(HERE.parent), "archive", PREVIOUS_COMMIT, "bensemble"],
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise SystemExit(
            f"bench_streaming: the baseline is `bensemble evaluate` at commit {PREVIOUS_COMMIT}; "
            f"this needs a git clone with that commit ({exc})"
        ) from exc
    subprocess.run(["tar", "-x", "-C", root], input=archive, check=True)
    return root


def _evaluate_child(root: str, argv: list[str]) -> tuple[dict, float, float]:
    """``bensemble evaluate ARGV --json`` of the package under ``root`` in a fresh process:
    its JSON, wall seconds and CPU seconds (all threads)."""
    code = "import sys; from bensemble.cli import main; sys.exit(main(sys.argv[1:]))"
    env = dict(os.environ, PYTHONPATH=root)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code, "evaluate", *argv, "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,  # `python -c` puts the working directory first on sys.path
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"bensemble evaluate ({root}) exited {proc.returncode}: {proc.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return json.loads(proc.stdout), wall, cpu


def _common_rel_diff(a: dict, b: dict) -> str:
    """Largest relative difference over the numbers both payloads report, and where."""
    na, nb = _numbers(a), _numbers(b)
    diffs = [(abs(na[k] - nb[k]) / max(abs(nb[k]), 1e-300), k) for k in set(na) & set(nb)]
    worst, key = max(diffs, default=(0.0, "-"))
    return f"{worst:.1e} ({key.lstrip('.')})"


def bench_evaluate(n: int, busy: int) -> tuple[list[_harness.Result], list[str]]:
    from bensemble.metrics.epistemic import auto_n_bins

    g = torch.Generator().manual_seed(0)
    z = 2 * torch.randn(5, n, 10, generator=g, dtype=torch.float64)
    z += 2 * torch.randn(1, n, 10, generator=g, dtype=torch.float64)
    y = torch.randint(0, 10, (n,), generator=g)
    rows, notes = [], []
    with tempfile.TemporaryDirectory(prefix="bench-evaluate-") as tmp:
        previous, ours = _previous_tree(tmp), str(HERE.parent)
        path, labels = os.path.join(tmp, "logits.npy"), os.path.join(tmp, "labels.npy")
        np.save(path, z.to(torch.float32).numpy())
        np.save(labels, y.numpy())
        argv = [path, "--labels", labels, "--logits"]
        same = [*argv, "--bootstrap", "0", "--eece-bins", "100"]  # the previous defaults
        runs = {
            "same work (EECE 100 bins, no intervals)": same,
            "chunked, same work": [*same, "--chunk-size", "65536"],
            f"defaults (EECE {auto_n_bins(n)} bins, 200 bootstrap replicates)": argv,
        }
        for load in (0, busy) if busy else (0,):
            spinners = [
                subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(load)
            ]
            try:
                base, t_base, c_base = _evaluate_child(previous, argv)
                timed = {name: _evaluate_child(ours, args) for name, args in runs.items()}
            finally:
                for p in spinners:
                    p.kill()
                    p.wait()
            condition = f"{load} busy processes" if load else "quiet"
            for name, (out, t, c) in timed.items():
                agreement = None if name.startswith("defaults") else _common_rel_diff(out, base)
                rows.append(
                    _harness.Result(
                        f"`bensemble evaluate` {n:,} x 5 x 10 logits, ours: {name}; {condition}",
                        f"previous implementation (commit {PREVIOUS_COMMIT}, its defaults: "
                        "EECE 100 bins, no intervals)",
                        t_base,
                        t,
                        agreement,
                        target=5.0,
                        note=f"wall clock of a fresh process each; CPU {c_base:.1f} s vs {c:.1f} s"
                        + (
                            ""
                            if agreement is None
                            else "; agreement: max relative difference of the numbers both report"
                        ),
                    )
                )
    notes.append(
        f"evaluate: baseline = `bensemble evaluate` as of commit {PREVIOUS_COMMIT} (before issue "
        f"13), run from `git archive`; ours = this tree; each a fresh process; {busy} busy = that "
        "many spinning processes during both runs (the oversubscribed machine of the issue's 65 s)"
    )
    return rows, notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, no results file")
    parser.add_argument("--only", choices=("rss", "ddp", "evaluate"), default=None)
    parser.add_argument("--repeats", type=int, default=1, help="RSS runs (each a fresh process)")
    parser.add_argument(
        "--busy", type=int, default=2, help="spinning processes in the loaded evaluate rows (2)"
    )
    parser.add_argument("--probe", nargs=3, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe:
        _probe_rss(*args.probe)
        return 0
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    results, notes = (
        [],
        [
            f"torch threads: {torch.get_num_threads()}; load average at the start: {load} "
            f"({os.cpu_count()} CPUs); command: `python benchmarks/bench_streaming.py"
            + (" --quick" if args.quick else "")
            + (f" --only {args.only}" if args.only else "")
            + "`"
        ],
    )
    if args.only in (None, "rss"):
        r, n = bench_rss(10**6 if args.quick else 10**7, 1 if args.quick else args.repeats)
        results += r
        notes += n
        print(_harness.format_table(r), *n, sep="\n", file=sys.stderr, flush=True)
    if args.only in (None, "ddp"):
        r, n = bench_ddp([10**5] if args.quick else [10**6, 4 * 10**6])
        results += r
        notes += n
        print(_harness.format_table(r), *n, sep="\n", file=sys.stderr, flush=True)
    if args.only in (None, "evaluate"):
        r, n = bench_evaluate(2_000 if args.quick else 200_000, args.busy)
        results += r
        notes += n
        print(_harness.format_table(r), *n, sep="\n", file=sys.stderr, flush=True)
    if args.quick or args.only is not None:
        print(_harness.format_table(results))
        print("\n".join(notes))
    else:
        _harness.write_results(results, notes=notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
