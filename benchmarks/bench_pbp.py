"""Benchmark: PBP training epochs per second vs a per-example autograd ADF baseline.

Workload: 1-D regression, ``y = sin(x) + N(0, 0.3^2)``, 400 points (``--quick``: 200), a
``[1, 50, 1]`` ReLU PBP network in float64, one torch thread.

Baseline, in this process: bensemble 0.2's procedure - one ADF step per example, the gradients
of ``log Z`` w.r.t. the weight means and variances by one autograd backward per example (moment
pass written out below), then the same Gamma noise update. Ours: ``PBPEngine.fit`` with closed-
form per-example gradients, (a) the default ``update_size=8`` (8 points combined per update as
EP sites), (b) ``update_size=1`` (exact sequential ADF, the same algorithm as the baseline).
Agreement for (b): max |m_ours - m_baseline| after one epoch from the same start (same order).

Run: ``python benchmarks/bench_pbp.py [--repeats 3] [--threads 1] [--quick] [--no-write]``.
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness  # noqa: E402

from bensemble.methods.pbp import PBPEngine  # noqa: E402

F64 = torch.float64


def _log_z(net, x, y, noise):
    zm = torch.cat([x, torch.ones(x.shape[0], 1, dtype=F64)], 1)
    zv = torch.zeros_like(zm)
    for i, layer in enumerate(net.layers):
        s = 1.0 / math.sqrt(layer.in_features + 1)
        ma = s * zm @ layer.m.T
        va = s * s * (zv @ (layer.m**2).T + zm**2 @ layer.v.T + zv @ layer.v.T)
        if i == len(net.layers) - 1:
            var = va + noise
            return (-0.5 * torch.log(2 * math.pi * var) - 0.5 * (y - ma) ** 2 / var).sum()
        sd = va.clamp_min(1e-12).sqrt()
        al = ma / sd
        cdf = 0.5 * torch.special.erfc(-al / math.sqrt(2))
        pdf = torch.exp(-0.5 * al * al) / math.sqrt(2 * math.pi)
        mb = ma * cdf + sd * pdf
        vb = ((ma * ma + va) * cdf + ma * sd * pdf - mb * mb).clamp_min(0.0)
        zm = torch.cat([mb, torch.ones(x.shape[0], 1, dtype=F64)], 1)
        zv = torch.cat([vb, torch.zeros(x.shape[0], 1, dtype=F64)], 1)


def baseline_epoch(engine: PBPEngine, x, y, order) -> None:
    """One epoch of per-example ADF with one autograd backward per example."""
    net = engine.model
    params = [p for layer in net.layers for p in (layer.m, layer.v)]
    for i in order.tolist():
        xi, yi = x[i : i + 1], y[i : i + 1]
        for p in params:
            p.requires_grad_(True)
        a, b = engine.alpha_g, engine.beta_g
        log_z = _log_z(net, xi, yi, b / (a - 1.0))
        grads = torch.autograd.grad(log_z, params)
        for p in params:
            p.requires_grad_(False)
        with torch.no_grad():
            # the noise update uses the moments before this point's weight update
            lz = [float(_log_z(net, xi, yi, b / (a + j - 1.0))) for j in range(3)]
            for layer, gm, gv in zip(net.layers, grads[0::2], grads[1::2]):
                v = layer.v.clone()
                v_new = v - v * v * (gm * gm - 2.0 * gv)
                ok = v_new > 0
                layer.m.copy_(torch.where(ok, layer.m + v * gm, layer.m))
                layer.v.copy_(torch.where(ok, v_new, v))
            ra = math.exp(lz[0] + lz[2] - 2 * lz[1]) * float(a + 1) / float(a)
            rb = math.exp(lz[2] - lz[1]) * float(a + 1) / float(b) - math.exp(
                lz[1] - lz[0]
            ) * float(a) / float(b)
            if ra > 1.0 and rb > 0.0 and 1.0 / (ra - 1.0) > 1.0:
                engine.alpha_g = torch.tensor(1.0 / (ra - 1.0), dtype=F64)
                engine.beta_g = torch.tensor(1.0 / rb, dtype=F64)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    parser.add_argument("--quick", action="store_true", help="200 points, 1 repeat")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    n, repeats = (200, 1) if args.quick else (400, args.repeats)
    g = torch.Generator().manual_seed(0)
    x = torch.rand(n, 1, generator=g, dtype=F64) * 6 - 3
    y = torch.sin(x) + 0.3 * torch.randn(n, 1, generator=g, dtype=F64)
    torch.manual_seed(0)
    start = PBPEngine(layer_sizes=[1, 50, 1])

    # agreement: one sequential epoch in the same order, baseline vs ours (update_size=1)
    base_engine, ours_engine = copy.deepcopy(start), copy.deepcopy(start)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(1))
    baseline_epoch(base_engine, x, y, order)
    for i in order.tolist():
        ours_engine._update(x[i : i + 1], y[i : i + 1])
    agreement = max(
        float((a.m - b.m).abs().max())
        for a, b in zip(base_engine.model.layers, ours_engine.model.layers)
    )

    engines = [copy.deepcopy(start) for _ in range(3)]
    t_base, t_ours, t_seq = _harness.measure_interleaved(
        [
            lambda: baseline_epoch(engines[0], x, y, torch.randperm(n)),
            lambda: engines[1].fit([(x, y)], num_epochs=1, seed=0),
            lambda: engines[2].fit([(x, y)], num_epochs=1, update_size=1, seed=0),
        ],
        repeats=repeats,
        warmup=0,
    )
    workload = f"PBP epoch, {n} points, [1, 50, 1]"
    results = [
        _harness.Result(
            workload, "per-example autograd ADF", t_base, t_ours, None, 5.0,
            f"ours = update_size=8 (default); {1 / t_ours:.1f} vs {1 / t_base:.1f} epochs/s",
        ),
        _harness.Result(
            workload, "per-example autograd ADF", t_base, t_seq, agreement, None,
            "ours = update_size=1 (same sequential ADF, closed-form gradients)",
        ),
    ]  # fmt: skip
    notes = [
        "Workload and baseline: see the docstring of benchmarks/bench_pbp.py; "
        f"medians of {repeats} interleaved epochs; agreement = max |m| difference after one "
        "sequential epoch.",
    ]
    if args.no_write or args.quick:  # a quick run never replaces the recorded numbers
        print(_harness.format_table(results))
    else:
        _harness.write_results(results, section="bench_pbp", notes=notes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
