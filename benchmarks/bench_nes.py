"""Benchmark: NES forward selection on cached predictions vs per-candidate re-evaluation.

Workload: a pool of 30 trained-size MLPs (20-64-64-10, float32, random weights; selection cost
does not depend on training), a validation set of 2,000 points in batches of 250, ensembles of
10 members (``--quick``: 1,000 points, 5 members), criterion = mean NLL of the average softmax.

Baseline, in this process: bensemble 0.2's procedure - at every greedy step, for every remaining
candidate, the criterion re-runs each member of ``selected + [candidate]`` over the whole
validation loader (written out below as ``baseline_forward_select``). Ours:
``bensemble.search.forward_select`` with ``classification_nll_criterion``: each member runs once,
selection scores all candidates per step from the cached ``[P, N, K]`` probabilities. Agreement:
both must pick the same members in the same order.

Run: ``python benchmarks/bench_nes.py [--repeats 3] [--threads 1] [--quick] [--no-write]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness  # noqa: E402

from bensemble.search import classification_nll_criterion, forward_select  # noqa: E402

POOL = 30


def bensemble_style_nll(members, loader, device) -> float:
    """bensemble 0.2's criterion: run every member over the loader, NLL of the mean softmax."""
    with torch.no_grad():
        probs, labels = [], None
        for model in members:
            model.eval()
            batches, ys = [], []
            for x, y in loader:
                batches.append(F.softmax(model(x.to(device)), dim=-1))
                ys.append(y)
            probs.append(torch.cat(batches))
            labels = torch.cat(ys) if labels is None else labels
        mean = torch.stack(probs).mean(0)
        return float(-torch.log(mean[torch.arange(len(labels)), labels] + 1e-12).mean())


def baseline_forward_select(pool, loader, size, device):
    """Greedy selection without replacement, one criterion call per candidate and step."""
    selected: list[nn.Module] = []
    for _ in range(size):
        best, best_score = None, float("inf")
        for candidate in pool:
            if any(candidate is s for s in selected):
                continue
            score = bensemble_style_nll(selected + [candidate], loader, device)
            if score < best_score:
                best, best_score = candidate, score
        selected.append(best)
    return selected


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    parser.add_argument("--quick", action="store_true", help="1,000 points, 5 members, 1 repeat")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    n_val, size, repeats = (1000, 5, 1) if args.quick else (2000, 10, args.repeats)
    torch.manual_seed(0)
    pool = [
        nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
        for _ in range(POOL)
    ]
    x = torch.randn(n_val, 20)
    y = torch.randint(0, 10, (n_val,))
    loader = DataLoader(TensorDataset(x, y), batch_size=250)
    device = torch.device("cpu")

    ours = forward_select(pool, loader, size, device, classification_nll_criterion)
    base = baseline_forward_select(pool, loader, size, device)
    same = [id(m) for m in ours] == [id(m) for m in base]
    t_base, t_ours = _harness.measure_interleaved(
        [
            lambda: baseline_forward_select(pool, loader, size, device),
            lambda: forward_select(pool, loader, size, device, classification_nll_criterion),
        ],
        repeats=repeats,
        warmup=0,
    )
    results = [
        _harness.Result(
            f"forward select {size} of {POOL} MLPs, {n_val} val points",
            "per-candidate re-evaluation",
            t_base,
            t_ours,
            "same selection" if same else "DIFFERENT selection",
            20.0,
            "ours = cached [P, N, K] predictions",
        )
    ]
    notes = [
        "Workload and baseline: see the docstring of benchmarks/bench_nes.py; "
        f"medians of {repeats} interleaved runs.",
    ]
    if args.no_write or args.quick:  # a quick run never replaces the recorded numbers
        print(_harness.format_table(results))
    else:
        _harness.write_results(results, section="bench_nes", notes=notes)
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
