"""Benchmark: packed evaluation of ensembles of small MLPs against the member loop.

``Ensemble.from_models(models, packed=...)``: ``False`` loops over members (bensemble 0.2);
``True`` evaluates all members at once (shared first layer as one wide matrix product, later
layers as one ``baddbmm`` on stacked weights); ``"auto"`` (the default) packs on a CPU when
``batch <= PACK_MAX_ROWS`` and ``batch * sum(in * out) <= PACK_MAX_WORK`` (always on a GPU).

Workloads: ten ``nn.Sequential`` ReLU MLPs, float32, inputs ``[batch, in]``; the headline is the
issue's ten 20-64-64-2 MLPs at batch 64 (target >= 2x). The sweep rows show where "auto" packs
(target there: no slower than the loop by more than 5%, i.e. ratio >= 0.95) and where it loops
(ratio of the forced packed path reported to justify the rule). Each timed call runs 20
predictions; medians of interleaved runs after a warm-up. Agreement: max |packed - loop|.

Run: ``python benchmarks/bench_packed.py [--device cpu|cuda] [--repeats 5] [--threads 1]
[--quick] [--no-write]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness  # noqa: E402

from bensemble.core import Ensemble  # noqa: E402
from bensemble.core.packed import PACK_MAX_ROWS, PACK_MAX_WORK  # noqa: E402

INNER = 20
HEADLINE = ((20, 64, 64, 2), 64)
SWEEP = [
    ((20, 64, 64, 2), 8),
    ((20, 64, 64, 2), 128),
    ((20, 64, 64, 2), 256),
    ((20, 64, 64, 2), 1024),
    ((20, 128, 128, 2), 64),
    ((20, 128, 128, 2), 512),
    ((100, 256, 256, 10), 64),
    ((100, 256, 256, 10), 512),
]


def make_members(dims: tuple[int, ...], n: int, device) -> list[nn.Module]:
    torch.manual_seed(0)
    members = []
    for _ in range(n):
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
            layers.append(nn.Linear(a, b))
            if i < len(dims) - 2:
                layers.append(nn.ReLU())
        members.append(nn.Sequential(*layers).to(device))
    return members


def case(dims, batch, repeats, sync, device, headline: bool) -> _harness.Result:
    members = make_members(dims, 10, device)
    loop = Ensemble.from_models(members, packed=False)
    packed = Ensemble.from_models(members, packed=True)
    auto = Ensemble.from_models(members, packed="auto")
    x = torch.randn(batch, dims[0], generator=torch.Generator().manual_seed(1)).to(device)
    agreement = float((packed.predict_members(x) - loop.predict_members(x)).abs().max())
    picks = auto.members.use_packed(x)

    def run(ens):
        return lambda: [ens.predict_members(x) for _ in range(INNER)]

    t_loop, t_packed, t_auto = _harness.measure_interleaved(
        [run(loop), run(packed), run(auto)], repeats=repeats, warmup=2, sync=sync
    )
    arch = "-".join(map(str, dims))
    if headline:
        return _harness.Result(
            f"10 x {arch} MLPs, batch {batch}",
            "member loop",
            t_loop / INNER,
            t_packed / INNER,
            agreement,
            2.0,
            "ours = packed=True",
        )
    note = "auto packs" if picks else f"auto loops (packed alone: {t_loop / t_packed:.2f}x)"
    return _harness.Result(
        f"10 x {arch} MLPs, batch {batch}",
        "member loop",
        t_loop / INNER,
        t_auto / INNER,
        agreement,
        0.95 if picks else None,
        f"ours = packed='auto': {note}",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    parser.add_argument("--quick", action="store_true", help="headline only, 3 repeats")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    repeats = 3 if args.quick else args.repeats
    results = [case(*HEADLINE, repeats, sync, device, headline=True)]
    if not args.quick:
        results += [case(dims, b, repeats, sync, device, headline=False) for dims, b in SWEEP]
    notes = [
        f"Ten float32 ReLU MLPs; on a CPU 'auto' packs when batch <= {PACK_MAX_ROWS} and "
        f"batch * sum(in * out) <= {PACK_MAX_WORK:,}. Per-prediction medians (20 predictions "
        "per timed call).",
    ]
    section = "bench_packed" + ("" if device.type == "cpu" else f" ({device.type})")
    if args.no_write or args.quick:  # a quick run never replaces the recorded numbers
        print(_harness.format_table(results))
    else:
        _harness.write_results(results, section=section, notes=notes, device=str(device))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
