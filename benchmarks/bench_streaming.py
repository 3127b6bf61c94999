"""``bensemble evaluate``'s one streaming engine: memory, CPU time, a tiny file's wall time,
shards / workers / Ray agreement, and the DDP sync cost of a meter - every ratio from runs made
by this script in the same session, each ``bensemble evaluate`` a fresh process.

1. **Peak anonymous memory** (``--only memory``) of the default ``bensemble evaluate P.npy
   --labels Y.npy --json`` (200 bootstrap replicates) on float32 probability files ``10^7 x 10``
   and ``10^6 x 40`` (``--quick``: ``10^6 x 10`` and ``10^5 x 40``), above the same command on a
   1,000-row file: the parent samples the child's ``RssAnon`` (``/proc/PID/status``: memory that
   is not a page of a file, so a memory-mapped input does not count) every 2 ms. Target: the
   excess at most half the file's size. The previous implementation (commit ``67b1c64``,
   ``git archive``) is measured on the ``10^6 x 40`` file (at ``10^7`` it needs far more memory
   than a shared machine should give it).
2. **CPU time** (``--only evaluate``) of the default ``bensemble evaluate L.npy --labels Y.npy
   --logits --json`` on ``200,000 x 5 x 10`` float32 logits (``--quick``: 20,000): the previous
   implementation (commit ``67b1c64``, extracted with ``git archive`` and run outside the
   repository root) against this tree, ``--repeats`` runs each, alternating; CPU seconds of the
   child (user + system, ``resource.getrusage(RUSAGE_CHILDREN)``) - the primary figure on a
   shared machine; wall time in the notes. Target 3x. Agreement: the largest relative
   difference over the point values both report.
3. **A tiny file** (``--only tiny``): ``900 x 5 x 10`` logits, the default command writing the
   whole report folder (figures, ``report.html``), against ``python -c "import bensemble, torch,
   matplotlib"``, alternating; median wall time. Target: at most 1.5x the imports (ratio >= 0.67).
4. **Shards, workers, Ray** (``--only shards``): 200,000 x 5 x 10 logits as one file, as 4 shard
   files, with ``--workers 2``, and through ``evaluate_shards(..., backend="ray")``: every number
   of the report (intervals included) against the single file's.
5. **DDP sync** (``--only ddp``): :func:`bensemble.integrations.sync_` of a
   :class:`CalibrationErrorMeter` against torchmetrics' ``MulticlassCalibrationError.sync()``
   over 2 gloo processes.

Run: ``python benchmarks/bench_streaming.py [--quick] [--only memory|evaluate|tiny|shards|ddp]``
(each measurement replaces its own section of ``benchmarks/results.md``; ``--quick`` only prints)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
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

#: The previous implementation: the last commit before the one streaming engine.
PREVIOUS_COMMIT = "67b1c64"
#: What the ``bensemble`` console script of each version runs: ``bensemble.cli:console`` (exits
#: without the interpreter's teardown), before it ``bensemble.cli:main`` (the previous commit).
_MAIN = (
    "import sys; from bensemble import cli; "
    "cli.console() if hasattr(cli, 'console') else sys.exit(cli.main(sys.argv[1:]))"
)


# ----------------------------------------------------------------------------- helpers
def _numbers(payload, path=""):
    """Every number of a JSON payload, keyed by its path (inputs and the report excluded)."""
    if isinstance(payload, dict):
        out = {}
        for key, value in payload.items():
            if key not in ("inputs", "report"):
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


def _rel_diff(a: dict, b: dict, *, common: bool = False) -> str:
    """Largest relative difference over the numbers of two payloads (and where)."""
    na, nb = _numbers(a), _numbers(b)
    if not common and set(na) != set(nb):
        return f"different numbers: {sorted(set(na) ^ set(nb))[:3]}"
    keys = set(na) & set(nb)
    diffs = [(abs(na[k] - nb[k]) / max(abs(nb[k]), 1e-300), k) for k in keys if na[k] != nb[k]]
    worst, key = max(diffs, default=(0.0, "-"))
    return f"{worst:.1e} ({key.lstrip('.')})" if worst else "0 (identical)"


def _point_values(payload: dict) -> dict:
    """The point values of a report (intervals, verdicts and notes left out)."""
    keep = ("metrics", "selective", "ensemble", "conformal", "per_class", "temperature")
    return {key: payload.get(key) for key in keep}


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


def _child(root: str, argv: list[str], *, sample: bool = False) -> dict:
    """``python -c <main> ARGV`` with ``root`` first on ``sys.path``, run in ``root`` (so the
    working directory holds no other ``bensemble``): stdout, wall and CPU seconds, and with
    ``sample`` the peak ``RssAnon`` sampled every 2 ms."""
    env = dict(os.environ, PYTHONPATH=root, MPLBACKEND="Agg")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", _MAIN, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=root,
    )
    peak = 0
    if sample:
        status = f"/proc/{proc.pid}/status"
        while proc.poll() is None:
            try:
                text = Path(status).read_text()
            except OSError:
                break
            for line in text.splitlines():
                if line.startswith("RssAnon:"):
                    peak = max(peak, int(line.split()[1]) * 1024)
            time.sleep(0.002)
    out, err = proc.communicate()
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"bensemble {' '.join(argv)} ({root}) exited {proc.returncode}: {err}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"out": out, "wall": wall, "cpu": cpu, "peak": peak}


def _probabilities(path: str, n: int, k: int, seed: int) -> None:
    """An ``N x K`` float32 probability file, written a block at a time."""
    g = np.random.default_rng(seed)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, k))
    for a in range(0, n, 1 << 20):
        z = g.standard_normal((min(n, a + (1 << 20)) - a, k)) * 2
        p = np.exp(z - z.max(1, keepdims=True))
        out[a : a + len(z)] = p / p.sum(1, keepdims=True)
    out.flush()
    del out


def _logits(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    g = torch.Generator().manual_seed(seed)
    z = 2 * torch.randn(5, n, 10, generator=g, dtype=torch.float64)
    z += 2 * torch.randn(1, n, 10, generator=g, dtype=torch.float64)
    return z.to(torch.float32).numpy(), torch.randint(0, 10, (n,), generator=g).numpy()


# ----------------------------------------------------------------------------- 1. memory
def bench_memory(sizes: list[tuple[int, int]], previous_at: tuple[int, int] | None):
    ours = str(HERE.parent)
    rows, notes = [], []
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        previous = _previous_tree(tmp) if previous_at else None

        def files(n: int, k: int) -> list[str]:
            path, labels = os.path.join(tmp, f"p{n}x{k}.npy"), os.path.join(tmp, f"y{n}x{k}.npy")
            _probabilities(path, n, k, seed=n + k)
            np.save(labels, np.random.default_rng(k).integers(0, k, n))
            return [path, "--labels", labels, "--json"]

        tiny = _child(ours, ["evaluate", *files(1000, 10)], sample=True)["peak"]
        notes.append(f"memory: tiny run (1,000 x 10, ours) peaks at {tiny / 2**20:.0f} MiB RssAnon")
        for n, k in sizes:
            argv = ["evaluate", *files(n, k)]
            size = os.path.getsize(argv[1])
            run = _child(ours, argv, sample=True)
            excess = run["peak"] - tiny
            note = (
                f"'times' are MiB: the file's size and our peak RssAnon above the tiny run "
                f"(peak {run['peak'] / 2**20:.0f} MiB, {run['wall']:.1f} s wall, "
                f"{run['cpu']:.1f} s CPU; 200 bootstrap replicates)"
            )
            agreement = None
            if previous is not None and (n, k) == previous_at:
                prev = _child(previous, argv, sample=True)
                agreement = _rel_diff(
                    _point_values(json.loads(run["out"])), _point_values(json.loads(prev["out"]))
                )
                note += (
                    f"; previous implementation ({PREVIOUS_COMMIT}): peak "
                    f"{prev['peak'] / 2**20:.0f} MiB RssAnon, {prev['wall']:.1f} s wall, "
                    f"{prev['cpu']:.1f} s CPU; agreement: point values"
                )
            rows.append(
                _harness.Result(
                    f"peak anonymous memory above a tiny run, default `bensemble evaluate` "
                    f"{n:.0e} x {k} float32 .npy",
                    "the file's size",
                    size / 2**20,
                    max(excess, 1) / 2**20,
                    agreement,
                    target=2.0,
                    note=note,
                )
            )
    return rows, notes


# ----------------------------------------------------------------------------- 2. CPU
def bench_evaluate(n: int, repeats: int):
    ours = str(HERE.parent)
    rows, notes = [], []
    z, y = _logits(n)
    with tempfile.TemporaryDirectory(prefix="bench-evaluate-") as tmp:
        previous = _previous_tree(tmp)
        path, labels = os.path.join(tmp, "logits.npy"), os.path.join(tmp, "labels.npy")
        np.save(path, z)
        np.save(labels, y)
        variants = {
            "defaults (200 bootstrap replicates)": [],
            "--bootstrap 0": ["--bootstrap", "0"],
        }
        for name, extra in variants.items():
            argv = ["evaluate", path, "--labels", labels, "--logits", "--json", *extra]
            runs: dict[str, list[dict]] = {"previous": [], "ours": []}
            for _ in range(repeats):
                runs["previous"].append(_child(previous, argv))
                runs["ours"].append(_child(ours, argv))
            cpu = {key: statistics.median(r["cpu"] for r in v) for key, v in runs.items()}
            wall = {key: statistics.median(r["wall"] for r in v) for key, v in runs.items()}
            agreement = _rel_diff(
                _point_values(json.loads(runs["ours"][0]["out"])),
                _point_values(json.loads(runs["previous"][0]["out"])),
            )
            rows.append(
                _harness.Result(
                    f"`bensemble evaluate` {n:,} x 5 x 10 logits, {name}: CPU seconds",
                    f"previous implementation (commit {PREVIOUS_COMMIT}, git archive)",
                    cpu["previous"],
                    cpu["ours"],
                    agreement,
                    target=3.0 if not extra else None,
                    note=f"CPU time of the child (user + system), median of {repeats}, "
                    f"alternating; wall {wall['previous']:.1f} s vs {wall['ours']:.1f} s; "
                    "agreement: point values both report",
                )
            )
    notes.append(
        f"evaluate: baseline = `bensemble evaluate` as of commit {PREVIOUS_COMMIT} (the in-memory "
        "path and its bootstrap), run from `git archive` outside the repository root; ours = "
        "this tree; each run a fresh process"
    )
    return rows, notes


# ----------------------------------------------------------------------------- 3. tiny file
def bench_tiny(repeats: int):
    ours = str(HERE.parent)
    z, y = _logits(900, seed=1)
    with tempfile.TemporaryDirectory(prefix="bench-tiny-") as tmp:
        path, labels = os.path.join(tmp, "logits.npy"), os.path.join(tmp, "labels.npy")
        np.save(path, z)
        np.save(labels, y)
        imports, runs = [], []
        for i in range(repeats):
            env = dict(os.environ, PYTHONPATH=ours, MPLBACKEND="Agg")
            start = time.perf_counter()
            subprocess.run(
                [sys.executable, "-c", "import bensemble, torch, matplotlib"],
                check=True,
                env=env,
                cwd=tmp,
            )
            imports.append(time.perf_counter() - start)
            out = os.path.join(tmp, f"report{i}")
            argv = ["evaluate", path, "--labels", labels, "--logits", "--out", out]
            runs.append(_child(ours, argv))
        wall = statistics.median(r["wall"] for r in runs)
        cpu = statistics.median(r["cpu"] for r in runs)
        files = len(os.listdir(os.path.join(tmp, "report0")))
    row = _harness.Result(
        "`bensemble evaluate` 900 x 5 x 10 logits, default, report folder written "
        f"({files} files, figures and report.html)",
        '`python -c "import bensemble, torch, matplotlib"`',
        statistics.median(imports),
        wall,
        None,
        target=1 / 1.5,
        note=f"wall clock, median of {repeats} alternating runs; ours {cpu:.2f} s CPU; target: "
        "at most 1.5x the imports (ratio >= 0.67)",
    )
    return [row], []


# ----------------------------------------------------------------------------- 4. shards
def bench_shards(n: int):
    ours = str(HERE.parent)
    z, y = _logits(n, seed=2)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-shards-", dir="/tmp") as tmp:
        path, labels = os.path.join(tmp, "logits.npy"), os.path.join(tmp, "labels.npy")
        np.save(path, z)
        np.save(labels, y)
        cuts = np.linspace(0, n, 5).round().astype(int)
        shards = []
        for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:], strict=True)):
            shards.append(os.path.join(tmp, f"shard{i}.npy"))
            np.save(shards[-1], z[:, a:b])
        common = ["--labels", labels, "--logits", "--json", "--calibration-split", "0.2"]
        one = _child(ours, ["evaluate", path, *common])
        variants = {
            "4 shard files": _child(ours, ["evaluate", *shards, *common]),
            "--workers 2": _child(ours, ["evaluate", path, *common, "--workers", "2"]),
        }
        ray = _ray_run(ours, shards, labels, tmp)
        if ray is not None:
            variants["evaluate_shards(backend='ray', workers=2)"] = ray
        reference = json.loads(one["out"])
        for name, run in variants.items():
            got = json.loads(run["out"])
            rows.append(
                _harness.Result(
                    f"`bensemble evaluate` {n:,} x 5 x 10 logits (split 0.2, 200 replicates): "
                    f"{name}",
                    "one file, one process",
                    one["wall"],
                    run["wall"],
                    _rel_diff(got, reference),
                    note=f"wall; CPU {one['cpu']:.1f} s vs {run['cpu']:.1f} s (workers' CPU "
                    "included); agreement: every number of the report, intervals included",
                )
            )
    return rows, []


def _ray_run(root: str, shards: list[str], labels: str, tmp: str) -> dict | None:
    try:
        import ray  # noqa: F401
    except ImportError:
        return None
    code = (
        "import json, sys, numpy as np, tempfile\n"
        "from bensemble.app.evaluate import evaluate_shards\n"
        "d = tempfile.mkdtemp(prefix='bray', dir='/tmp')\n"
        "ev = evaluate_shards(sys.argv[2:], np.load(sys.argv[1]), backend='ray', workers=2, "
        "temp_dir=d, from_logits=True, calibration_split=0.2)\n"
        "print(json.dumps(ev.to_dict()))\n"
    )
    env = dict(os.environ, PYTHONPATH=root, MPLBACKEND="Agg")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code, labels, *shards], capture_output=True, text=True, env=env
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"evaluate_shards on Ray failed: {proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"out": proc.stdout.strip().splitlines()[-1], "wall": wall, "cpu": cpu}


# ----------------------------------------------------------------------------- 5. DDP sync
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


def bench_ddp(sizes: list[int]):
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, no results file")
    parser.add_argument(
        "--only", choices=("memory", "evaluate", "tiny", "shards", "ddp"), default=None
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs per side (evaluate, tiny)")
    args = parser.parse_args(argv)
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    command = "python benchmarks/bench_streaming.py" + (" --quick" if args.quick else "")
    command += f" --only {args.only}" if args.only else ""
    notes = [f"load average at the start: {load} ({os.cpu_count()} CPUs); `{command}`"]
    quick = args.quick
    plan = {
        "memory": lambda: bench_memory(
            [(10**6, 10), (10**5, 40)] if quick else [(10**7, 10), (10**6, 40)],
            (10**5, 40) if quick else (10**6, 40),
        ),
        "evaluate": lambda: bench_evaluate(20_000 if quick else 200_000, args.repeats),
        "tiny": lambda: bench_tiny(args.repeats if quick else max(args.repeats, 5)),
        "shards": lambda: bench_shards(20_000 if quick else 200_000),
        "ddp": lambda: bench_ddp([10**5] if quick else [10**6, 4 * 10**6]),
    }
    for name, run in plan.items():
        if args.only in (None, name):
            rows, more = run()
            if args.quick:
                print(_harness.format_table(rows), *notes, *more, sep="\n", flush=True)
            else:  # one section of benchmarks/results.md per measurement
                _harness.write_results(
                    rows, notes=[*notes, *more], section=f"bench_streaming: {name}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
