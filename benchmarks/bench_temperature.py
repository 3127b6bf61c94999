"""Benchmark: fitting the temperature of temperature scaling.

Workload: 100,000 x 100 float32 logits (synthetic: labels drawn from softmax(latent), logits =
2.5 * latent, so the NLL-optimal temperature is about 2.5), labels int64.

Methods, all in this process, each starting from T = 1.5:
* ours      - ``bensemble.calibration.TemperatureScaling().fit`` (Newton on 1/T, float64).
* baseline a - bensemble 0.2's recipe: ``nn.Parameter(T)``, ``torch.optim.LBFGS(lr=0.01,
  max_iter=50)`` without line search, cross-entropy of ``logits / T`` in float32.
* baseline b - L-BFGS with a strong-Wolfe line search on ``log T`` (lr=1, max_iter=100),
  cross-entropy in float32: the careful autograd version a user would write.

The optimum is scipy's bounded scalar search on log T over [-4, 4] with the NLL in float64 and
xatol=1e-12. Every method's fitted T is scored by its float64 NLL gap to that optimum.
Times are medians of ``--repeats`` runs (default 5, the three methods interleaved) after one
warm-up; the thread count is torch's default unless ``--threads`` is given. The table goes to
``benchmarks/results.md`` through ``benchmarks/_harness.py`` (section ``bench_temperature``).

Run: ``python benchmarks/bench_temperature.py [--device cpu|cuda] [--threads N] [--repeats 5]
[--quick] [--no-write]``.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from scipy.optimize import minimize_scalar
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness  # noqa: E402

from bensemble.calibration import TemperatureScaling  # noqa: E402

INIT_TEMP = 1.5
TARGET_VS_A = 10.0
TARGET_VS_B = 1.3
NLL_TOLERANCE = 1e-8


def make_workload(n: int, k: int, device: str, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    latent = torch.randn(n, k, generator=gen)
    labels = torch.multinomial(latent.softmax(-1), 1, generator=gen).squeeze(1)
    logits = (2.5 * latent).float()
    return logits.to(device), labels.to(device)


def fit_ours(logits, labels) -> float:
    return TemperatureScaling(init_temp=INIT_TEMP).fit(logits, labels).temperature_


def fit_lbfgs_bensemble02(logits, labels) -> float:
    """bensemble 0.2's recipe: LBFGS on T itself, lr 0.01, 50 iterations, no line search."""
    temperature = nn.Parameter(torch.full((1,), INIT_TEMP, device=logits.device))
    optimizer = torch.optim.LBFGS([temperature], lr=0.01, max_iter=50)

    def closure():
        optimizer.zero_grad()
        loss = F.cross_entropy(logits / temperature, labels)
        loss.backward()
        return loss

    optimizer.step(closure)
    return temperature.item()


def fit_lbfgs_wolfe(logits, labels) -> float:
    """L-BFGS with a strong-Wolfe line search on log T."""
    log_t = nn.Parameter(torch.full((1,), math.log(INIT_TEMP), device=logits.device))
    optimizer = torch.optim.LBFGS([log_t], lr=1.0, max_iter=100, line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        loss = F.cross_entropy(logits / log_t.exp(), labels)
        loss.backward()
        return loss

    optimizer.step(closure)
    return log_t.exp().item()


def nll64(logits, labels, temperature: float) -> float:
    return F.cross_entropy(logits.double() / temperature, labels).item()


def scipy_optimum(logits, labels) -> tuple[float, float]:
    z = logits.double()
    result = minimize_scalar(
        lambda log_t: F.cross_entropy(z / math.exp(log_t), labels).item(),
        bounds=(-4.0, 4.0),
        method="bounded",
        options={"xatol": 1e-12, "maxiter": 1000},
    )
    return math.exp(result.x), float(result.fun)


def run(n: int, k: int, device: str, repeats: int, write: bool) -> list[_harness.Result]:
    logits, labels = make_workload(n, k, device)
    t_opt, nll_opt = scipy_optimum(logits, labels)
    sync = torch.cuda.synchronize if device.startswith("cuda") else None
    fits = [fit_ours, fit_lbfgs_bensemble02, fit_lbfgs_wolfe]
    fitted = {fn: fn(logits, labels) for fn in fits}
    gaps = {fn: abs(nll64(logits, labels, t) - nll_opt) for fn, t in fitted.items()}
    # Interleaved (round-robin) timing: the three fits see the same load drift.
    seconds = dict(
        zip(
            fits,
            _harness.measure_interleaved(
                [lambda fn=fn: fn(logits, labels) for fn in fits], repeats=repeats, sync=sync
            ),
        )
    )
    size = f"{n:.0e} x {k} f32".replace("e+0", "e")
    ours = fit_ours
    baselines = [
        (fit_lbfgs_bensemble02, "a: LBFGS on T, lr 0.01, 50 it, no line search (bensemble 0.2)"),
        (fit_lbfgs_wolfe, "b: LBFGS strong-Wolfe on log T, float32"),
    ]
    results = []
    for (fn, name), target in zip(baselines, (TARGET_VS_A, TARGET_VS_B)):
        results.append(
            _harness.Result(
                f"temperature fit {size}",
                name,
                seconds[fn],
                seconds[ours],
                gaps[ours],
                target,
                f"agreement = ours' NLL - NLL*; baseline T={fitted[fn]:.4f}, "
                f"NLL gap {gaps[fn]:.1e}",
            )
        )
    notes = [
        f"Workload: {n:,} x {k} float32 logits on {device}, labels from softmax(latent), "
        "logits = 2.5 latent; every fit starts at T = 1.5.",
        f"Optimum (scipy bounded search on log T, float64, xatol 1e-12): T* = {t_opt:.6f}, "
        f"NLL* = {nll_opt:.12f}. Ours: T = {fitted[ours]:.6f}, |NLL - NLL*| = {gaps[ours]:.1e} "
        f"(target <= {NLL_TOLERANCE:g}: {'ok' if gaps[ours] <= NLL_TOLERANCE else 'MISSED'}).",
        f"Medians of {repeats} interleaved runs after 1 warm-up; ours = "
        f"{seconds[ours]:.3f} s, a = {seconds[fit_lbfgs_bensemble02]:.3f} s, "
        f"b = {seconds[fit_lbfgs_wolfe]:.3f} s.",
    ]
    if write:
        section = "bench_temperature" if device == "cpu" else f"bench_temperature ({device})"
        _harness.write_results(results, section=section, notes=notes, device=device)
    else:
        print("\n".join(notes))
        print(_harness.format_table(results))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: torch's)"
    )
    parser.add_argument("--quick", action="store_true", help="10,000 x 100 logits, 3 repeats")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    n, repeats = (10_000, 3) if args.quick else (100_000, args.repeats)
    run(n, 100, args.device, repeats, write=not (args.no_write or args.quick))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
