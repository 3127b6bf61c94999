"""Benchmark: MC dropout sampling, computing the deterministic prefix once.

Every layer before the first dropout module is deterministic, so ``StochasticMembers`` runs it
once per call and samples only the rest (found automatically for ``nn.Sequential`` models).
Members are fixed hypotheses (per-member seeds drawn once at construction, masks of shape
``[1, *features]``), so every timed call evaluates the same ``k`` members; the first call also
looks for functional dropout and is excluded from the timings (warm-up).

Workloads (k = 30 passes, float32, eval-mode batch norm):
* CNN: 1x28x28 input, Conv(8)-BN-ReLU-Pool-Conv(16)-BN-ReLU-Pool-Linear(784, 128)-ReLU-
  Dropout(0.5)-Linear(128, 10), batch 128 - the dropout sits in the classifier head.
* MLP: Linear(784, 512)-ReLU-Dropout(0.5)-Linear(512, 512)-ReLU-Dropout(0.5)-Linear(512, 10),
  batch 128 - dropout after the first hidden layer.

Baselines, in this process:
* "loop, same masks" - ``StochasticMembers(..., reuse_prefix=False)``: k full forward passes with
  the same per-pass masks and generator; ours must match it bit for bit (agreement column).
* "guide loop" - the practitioner's guide's recipe: eval mode, dropout modules in train mode,
  k full forward passes (torch's per-row masks), as a user would write it.
* "repeat" - ``strategy="repeat"`` (k copies of the batch per forward pass, meant for GPUs)
  against our default loop: reported, no target (it loses on the conv net, and its memory grows
  with k, which is why it is opt-in).

Run: ``python benchmarks/bench_mc_dropout.py [--device cpu|cuda] [--repeats 5] [--threads 1]
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

from bensemble.core import StochasticMembers  # noqa: E402
from bensemble.core.member import DROPOUT_TYPES  # noqa: E402

K = 30
BATCH = 128


def make_cnn() -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 7 * 7, 128),
        nn.ReLU(),
        nn.Dropout(0.5),
        nn.Linear(128, 10),
    )


def make_mlp() -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(784, 512),
        nn.ReLU(),
        nn.Dropout(0.5),
        nn.Linear(512, 512),
        nn.ReLU(),
        nn.Dropout(0.5),
        nn.Linear(512, 10),
    )


@torch.no_grad()
def guide_loop(model: nn.Module, x: torch.Tensor, k: int) -> torch.Tensor:
    """The guide's MC-dropout recipe: eval, dropout modules on, k passes, flags restored."""
    flags = [(m, m.training) for m in model.modules()]
    try:
        model.eval()
        for m in model.modules():
            if isinstance(m, DROPOUT_TYPES):
                m.train()
        return torch.stack([model(x) for _ in range(k)])
    finally:
        for m, flag in flags:
            m.training = flag


def bench(name, model, x, k, repeats, sync, device) -> list[_harness.Result]:
    model = model.to(device).eval()

    def members(**kw) -> StochasticMembers:
        gen = torch.Generator(device=device).manual_seed(0)
        return StochasticMembers(model, num_samples=k, generator=gen, **kw)

    ours, loop = members(), members(reuse_prefix=False)
    repeat = members(strategy="repeat")
    agreement = float((ours.predict_all(x) - loop.predict_all(x)).abs().max())
    t_loop, t_guide, t_ours, t_repeat = _harness.measure_interleaved(
        [
            lambda: loop.predict_all(x),
            lambda: guide_loop(model, x, k),
            lambda: ours.predict_all(x),
            lambda: repeat.predict_all(x),
        ],
        repeats=repeats,
        sync=sync,
    )
    target = 4.0 if name == "CNN" else 1.2
    workload = f"MC dropout {name}, k={k}, batch {x.shape[0]}"
    identical = "bit-identical" if agreement == 0.0 else agreement
    return [
        _harness.Result(
            workload,
            "loop, same masks",
            t_loop,
            t_ours,
            identical,
            target,
            "ours = prefix once + sampled head",
        ),
        _harness.Result(
            workload, "guide loop", t_guide, t_ours, None, None, "per-row masks (torch's dropout)"
        ),
        _harness.Result(
            workload,
            "ours (loop)",
            t_ours,
            t_repeat,
            None,
            None,
            "ours = strategy='repeat' (k copies of the batch per pass; opt-in)",
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    parser.add_argument("--quick", action="store_true", help="k = 10, 3 repeats")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    k, repeats = (10, 3) if args.quick else (K, args.repeats)
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    cnn_x = torch.randn(BATCH, 1, 28, 28, generator=gen).to(device)
    mlp_x = torch.randn(BATCH, 784, generator=gen).to(device)
    results = bench("CNN", make_cnn(), cnn_x, k, repeats, sync, device)
    results += bench("MLP", make_mlp(), mlp_x, k, repeats, sync, device)
    notes = [
        "Workloads and baselines: see the docstring of benchmarks/bench_mc_dropout.py; "
        f"medians of {repeats} interleaved runs after one warm-up.",
    ]
    section = "bench_mc_dropout" + ("" if device.type == "cpu" else f" ({device.type})")
    if args.no_write or args.quick:  # a quick run never replaces the recorded numbers
        print(_harness.format_table(results))
    else:
        _harness.write_results(results, section=section, notes=notes, device=str(device))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
