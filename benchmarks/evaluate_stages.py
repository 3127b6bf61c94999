"""CPU seconds per stage of the default ``bensemble evaluate`` (bootstrap on), tree against tree.

Each run is a fresh process that imports ``bensemble`` from one tree, wraps the engine's stages
(``app.evaluate.engine.prepare``: the EECE's K-means and member order; ``engine.accumulate``: the
main pass, meters and bootstrap replicate sums; ``app.evaluate.compute.evaluation_of``: the
selective sweep and the intervals) with ``time.process_time`` (every thread of the process), and
runs ``bensemble.cli.main(["evaluate", L, "--labels", Y, "--logits", "--json"])`` on 200,000 x 5
x 10 logits (``bench_streaming._logits``). Trees alternate; the table shows each stage's median.
Only trees with the streaming engine (``app/evaluate/engine.py``) have these stages.

Run: ``python benchmarks/evaluate_stages.py [--repeats 3] [--n 200000] TREE [TREE ...]``
(a tree is a folder holding the ``bensemble`` package, e.g. ``git archive <commit> bensemble |
tar -x -C /tmp/old`` then ``/tmp/old``; ``.`` is this checkout). Prints only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_streaming import _logits  # noqa: E402

_DRIVER = r"""
import contextlib, io, json, sys, time
start = time.process_time()
from bensemble import cli
import bensemble.app.evaluate.compute as compute
import bensemble.app.evaluate.engine as engine
seconds = {"imports": time.process_time() - start}
def timed(module, name):
    inner = getattr(module, name)
    def wrapper(*args, **kwargs):
        begin = time.process_time()
        try:
            return inner(*args, **kwargs)
        finally:
            seconds[name] = seconds.get(name, 0.0) + time.process_time() - begin
    setattr(module, name, wrapper)
timed(engine, "prepare"); timed(engine, "accumulate"); timed(compute, "evaluation_of")
with contextlib.redirect_stdout(io.StringIO()):
    cli.main(["evaluate", sys.argv[1], "--labels", sys.argv[2], "--logits", "--json"])
seconds["total"] = time.process_time() - start
print(json.dumps(seconds))
"""
STAGES = ("imports", "prepare", "accumulate", "evaluation_of", "total")


def run(tree: str, logits: str, labels: str) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(Path(tree).resolve()))
    out = subprocess.run(
        [sys.executable, "-c", _DRIVER, logits, labels],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        cwd=tempfile.gettempdir(),
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n", type=int, default=200_000)
    args = parser.parse_args(argv)
    z, y = _logits(args.n)
    runs: dict[str, list[dict[str, float]]] = {tree: [] for tree in args.trees}
    with tempfile.TemporaryDirectory(prefix="evaluate-stages-") as tmp:
        logits, labels = os.path.join(tmp, "logits.npy"), os.path.join(tmp, "labels.npy")
        np.save(logits, z)
        np.save(labels, y)
        for _ in range(args.repeats):
            for tree in args.trees:
                runs[tree].append(run(tree, logits, labels))
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    print(f"CPU seconds, median of {args.repeats} alternating runs; load average {load}")
    print("| tree | " + " | ".join(STAGES) + " |")
    print("|---|" + "---:|" * len(STAGES))
    for tree, rows in runs.items():
        cells = [f"{statistics.median(r.get(s, float('nan')) for r in rows):.2f}" for s in STAGES]
        print(f"| {tree} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
