"""A/B benchmark: this checkout's ``bensemble.core`` against an older commit, in one process.

On a shared, loaded machine absolute times drift by 2x between runs, so comparing two runs of
``bench_mc_dropout.py`` says little. This script imports the older package under another name
(``git archive <ref> bensemble`` into a temporary folder, imports rewritten to
``bensemble_old``) and times old and new code in alternation on the workloads of
``bench_mc_dropout.py`` (CNN and MLP, k = 30, batch 128: ``StochasticMembers.predict_all``) and
``bench_packed.py`` (ten 20-64-64-2 MLPs, batch 64: ``Ensemble.predict_members`` packed, and
the member loop). Each repeat times old and new back to back; the ratio column is the median of
these paired new / old ratios (< 1.10 is the issue-10 budget for fixed hypotheses on MC
dropout). Note that the old member loop ran train-mode members in train mode (issue 10's
defect 1); the new one switches them to eval mode and back, which costs a flag flip per module.

Run: ``python benchmarks/bench_core_ab.py [--old-ref 84922cc] [--repeats 21] [--threads 1]``.
"""

from __future__ import annotations

import argparse
import importlib
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_mc_dropout  # noqa: E402
import bench_packed  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def load_old(ref: str, folder: Path):
    """The package at ``ref`` imported as ``bensemble_old``."""
    archive = folder / "old.tar"
    with archive.open("wb") as f:
        subprocess.run(["git", "-C", str(ROOT), "archive", ref, "bensemble"], stdout=f, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")
    (folder / "bensemble").rename(folder / "bensemble_old")
    pattern = re.compile(r"\bbensemble\.")
    for path in (folder / "bensemble_old").rglob("*.py"):
        text = path.read_text()
        text = pattern.sub("bensemble_old.", text)
        text = re.sub(r"^(\s*)(from|import) bensemble\b", r"\1\2 bensemble_old", text, flags=re.M)
        path.write_text(text)
    sys.path.insert(0, str(folder))
    return importlib.import_module("bensemble_old.core")


def paired(old_fn, new_fn, repeats: int) -> tuple[float, float, float]:
    """Median old time, median new time and the median of per-repeat new / old ratios.

    Each repeat times both back to back (order alternating), so a ratio sees one load level.
    """
    for fn in (old_fn, new_fn, old_fn, new_fn):  # warm-up
        fn()
    t_old, t_new, ratios = [], [], []
    for r in range(repeats):
        pair = {}
        for name in ("old", "new") if r % 2 == 0 else ("new", "old"):
            fn = old_fn if name == "old" else new_fn
            start = time.perf_counter()
            fn()
            pair[name] = time.perf_counter() - start
        t_old.append(pair["old"])
        t_new.append(pair["new"])
        ratios.append(pair["new"] / pair["old"])
    return statistics.median(t_old), statistics.median(t_new), statistics.median(ratios)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old-ref", default="84922cc")
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    import bensemble.core as new

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        old = load_old(args.old_ref, Path(tmp))
        gen = torch.Generator().manual_seed(0)
        inputs = {
            "CNN": (bench_mc_dropout.make_cnn(), torch.randn(128, 1, 28, 28, generator=gen)),
            "MLP": (bench_mc_dropout.make_mlp(), torch.randn(128, 784, generator=gen)),
        }
        for name, (model, x) in inputs.items():
            model.eval()
            a = old.StochasticMembers(model, 30, generator=torch.Generator().manual_seed(0))
            b = new.StochasticMembers(model, 30, generator=torch.Generator().manual_seed(0))
            timing = paired(
                lambda a=a, x=x: a.predict_all(x), lambda b=b, x=x: b.predict_all(x), args.repeats
            )
            results.append((f"MC dropout {name}, k=30, batch 128", *timing))
        members = bench_packed.make_members((20, 64, 64, 2), 10, "cpu")
        x = torch.randn(64, 20, generator=gen)
        for packed in (True, False):
            a = old.Ensemble.from_models(members, packed=packed)
            b = new.Ensemble.from_models(members, packed=packed)
            t_old, t_new, ratio = paired(
                lambda a=a: [a.predict_members(x) for _ in range(20)],
                lambda b=b: [b.predict_members(x) for _ in range(20)],
                args.repeats,
            )
            label = "packed" if packed else "member loop"
            results.append(
                (f"10 x 20-64-64-2 MLPs, batch 64, {label}", t_old / 20, t_new / 20, ratio)
            )
    print(f"old = {args.old_ref}, new = working tree; {args.repeats} paired repeats")
    print("| workload | old (median) | new (median) | median of paired new / old |")
    print("|---|---:|---:|---:|")
    for name, t_old, t_new, ratio in results:
        print(f"| {name} | {t_old * 1e3:.3f} ms | {t_new * 1e3:.3f} ms | {ratio:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
