"""Benchmark: split conformal calibration and prediction (LAC), and the threshold selection alone.

Workload 1 - calibrate + predict: 1,000,000 x 100 float32 probabilities (softmax of 3 * N(0, 1)
logits; labels drawn from them by the Gumbel-max trick), alpha = 0.1. The same matrix is used for
calibration and prediction.

* ours     - ``SplitConformalClassifier("lac", 0.1).calibrate(probs, labels).predict_set(probs)``:
  validation in the input dtype, float64 scores of the true labels only, exact selection of the
  k-th score, then the mask as ``probs >= c`` in float32 with ``c`` the exact float32 cut-off
  equivalent to ``float64(1 - p) <= threshold`` (no float64 copy of the matrix).
* baseline - the practitioner's guide's numpy rule, written as a user would: its
  ``conformal_threshold`` (float64 copy, its checks, ``1 - P[arange, y]``, ``np.sort``, rank
  ``ceil((n + 1)(1 - alpha))``), then the set mask vectorised as ``(1 - P) <= qhat`` (the guide's
  per-row list comprehension would be far slower; this is the fair numpy version).

Workload 2 - the threshold alone: the k-th smallest (k = ceil((n + 1)(1 - alpha))) of 1,000,000
uniform float64 scores.

* ours     - ``bensemble.conformal.split.kth_smallest``: exact selection, ``np.partition``
  (introselect, zero-copy view) on the CPU and ``torch.kthvalue`` on other devices.
* baseline - ``torch.sort(scores).values[k - 1]``, the sort a torch user writes (target: ours
  >= 5x faster). For information only: ``np.sort(scores)[k - 1]`` (numpy 2's SIMD sort, the
  guide's rule) and ``torch.kthvalue`` on the CPU (which measured only ~4-5x faster than
  ``torch.sort`` here, hence numpy's introselect on the CPU).

Agreement: the thresholds are equal exactly (``==``) and the prediction-set masks identical.

Timing: all candidates of a workload are timed in alternation (``_harness.measure_interleaved``);
times are medians of ``--repeats`` runs (default 5, never fewer) after one warm-up, ratios are
``baseline / ours``. Threads: one torch thread by default (reproducible on a shared two-core box;
numpy's sort / partition are single-threaded anyway); ``--threads 0`` keeps torch's default. The
table goes to the ``bench_conformal`` section of ``benchmarks/results.md``.

Run: ``python benchmarks/bench_conformal.py [--device cpu|cuda] [--repeats 5] [--threads T]
[--quick] [--no-write]`` (``--quick``: 100,000 rows, 3 repeats, print only).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness  # noqa: E402

from bensemble.conformal import SplitConformalClassifier, conformal_rank  # noqa: E402
from bensemble.conformal.split import kth_smallest  # noqa: E402

ALPHA = 0.1
TARGET_SELECTION = 5.0


def make_workload(n: int, k: int, device: str, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    logits = 3.0 * torch.randn(n, k, generator=gen)
    gumbel = -torch.log(-torch.log(torch.rand(n, k, generator=gen).clamp_min(1e-12)))
    labels = torch.argmax(logits + gumbel, dim=1)
    probs = torch.softmax(logits, dim=1).float()
    return probs.to(device), labels.to(device)


def guide_conformal_threshold(cal_probs, cal_labels, alpha=0.1):
    """The practitioner's guide's numpy rule (checks, LAC scores, np.sort, exact rank)."""
    P = np.asarray(cal_probs, dtype=float)
    y = np.asarray(cal_labels)
    if P.ndim != 2 or len(P) == 0 or P.shape[1] < 2 or y.shape != (len(P),):
        raise ValueError("Expected probabilities (n,C) and labels (n,)")
    if (
        not 0 < alpha < 1
        or not np.isfinite(P).all()
        or np.any(P < 0)
        or not np.allclose(P.sum(1), 1)
    ):
        raise ValueError("Invalid probabilities or alpha")
    if not np.issubdtype(y.dtype, np.integer) or np.any((y < 0) | (y >= P.shape[1])):
        raise ValueError("Invalid class indices")
    scores = 1 - P[np.arange(len(y)), y]
    rank = int(np.ceil((len(scores) + 1) * (1 - alpha)))
    if rank > len(scores):
        return np.inf
    return np.sort(scores)[rank - 1]


def baseline_calibrate_predict(probs_np, labels_np):
    qhat = guide_conformal_threshold(probs_np, labels_np, ALPHA)
    mask = (1 - np.asarray(probs_np, dtype=float)) <= qhat
    return float(qhat), mask


def ours_calibrate_predict(probs, labels):
    cp = SplitConformalClassifier("lac", ALPHA).calibrate(probs, labels)
    return cp.threshold_, cp.predict_set(probs)


def _size(n: int) -> str:
    return f"{n:.0e}".replace("e+0", "e")


def run_sets(n: int, k: int, device: str, repeats: int, sync) -> tuple[_harness.Result, str]:
    probs, labels = make_workload(n, k, device)
    probs_np, labels_np = probs.cpu().numpy(), labels.cpu().numpy()
    out: dict[str, tuple] = {}

    def keep(key, fn):
        return lambda: out.__setitem__(key, fn())

    t_base, t_ours = _harness.measure_interleaved(
        [
            keep("base", lambda: baseline_calibrate_predict(probs_np, labels_np)),
            keep("ours", lambda: ours_calibrate_predict(probs, labels)),
        ],
        repeats=repeats,
        sync=sync,
    )
    (q_ours, mask_ours), (q_base, mask_base) = out["ours"], out["base"]
    same_q = q_ours == q_base
    same_mask = bool(np.array_equal(mask_ours.cpu().numpy(), mask_base))
    agreement = f"threshold {'equal' if same_q else 'DIFFERENT'}, masks " + (
        "identical" if same_mask else "DIFFERENT"
    )
    mean_size = float(mask_ours.sum(1, dtype=torch.float64).mean())
    result = _harness.Result(
        f"LAC calibrate + predict {_size(n)} x {k} f32, alpha {ALPHA}",
        "guide's numpy rule + vectorised mask",
        t_base,
        t_ours,
        agreement,
        None,
        f"threshold {q_ours!r}; mean set size {mean_size:.3f}",
    )
    note = (
        f"Workload 1: {n:,} x {k} float32 probabilities (softmax of 3 randn), Gumbel-max labels, "
        f"alpha {ALPHA}; calibrate + predict_set on the same matrix, validation included."
    )
    return result, note


def run_threshold(n: int, device: str, repeats: int, sync) -> tuple[list[_harness.Result], str]:
    gen = torch.Generator().manual_seed(1)
    scores = torch.rand(n, generator=gen, dtype=torch.float64).to(device)
    scores_np = scores.cpu().numpy()
    k = conformal_rank(n, ALPHA)
    got: dict[str, float] = {}

    def keep(key, fn):
        return lambda: got.__setitem__(key, fn())

    t_ours, t_sort, t_npsort, t_kth = _harness.measure_interleaved(
        [
            keep("ours", lambda: kth_smallest(scores, k)),
            keep("sort", lambda: float(torch.sort(scores).values[k - 1])),
            keep("npsort", lambda: float(np.sort(scores_np)[k - 1])),
            keep("kth", lambda: float(torch.kthvalue(scores, k).values)),
        ],
        repeats=repeats,
        sync=sync,
    )
    selector = "np.partition" if scores.device.type == "cpu" else "torch.kthvalue"
    workload = f"conformal threshold: k-th of {_size(n)} f64"

    def row(key, baseline, seconds, target, note):
        agreement = "equal" if got[key] == got["ours"] else "DIFFERENT"
        return _harness.Result(workload, baseline, seconds, t_ours, agreement, target, note)

    results = [
        row("sort", "torch.sort(s).values[k - 1]", t_sort, TARGET_SELECTION, f"ours = {selector}"),
        row("npsort", "np.sort(s)[k - 1] (info)", t_npsort, None, "numpy's SIMD sort"),
        row("kth", "torch.kthvalue (info)", t_kth, None, "torch's own selection"),
    ]
    note = (
        f"Workload 2: k-th smallest, k = {k:,} = ceil((n + 1)(1 - alpha)), of {n:,} uniform "
        f"float64 scores; ours = kth_smallest ({selector}). Agreement: value == ours' exactly."
    )
    return results, note


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (default 1; 0 = torch default)"
    )
    parser.add_argument("--quick", action="store_true", help="100,000 rows, 3 repeats, no write")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    n, repeats = (100_000, 3) if args.quick else (1_000_000, max(5, args.repeats))
    device = args.device
    sync = torch.cuda.synchronize if device.startswith("cuda") else None
    threads = torch.get_num_threads()
    print(f"bench_conformal: n={n:,}, device={device}, torch threads={threads}", flush=True)

    sets_result, sets_note = run_sets(n, 100, device, repeats, sync)
    thr_results, thr_note = run_threshold(n, device, repeats, sync)
    results = [sets_result, *thr_results]
    notes = [
        sets_note,
        thr_note,
        f"Device {device}, torch threads {threads}; medians of {repeats} interleaved runs after "
        "1 warm-up; baselines written in benchmarks/bench_conformal.py.",
    ]
    if args.no_write or args.quick:
        print("\n".join(notes))
        print(_harness.format_table(results))
    else:
        section = "bench_conformal" if device == "cpu" else f"bench_conformal ({device})"
        _harness.write_results(results, section=section, notes=notes, device=device)
    disagree = [r for r in results if "DIFFERENT" in str(r.agreement)]
    for r in disagree:
        print(f"bench_conformal: disagreement vs {r.baseline}: {r.agreement}")
    for r in results:
        if r.met is False:
            print(f"bench_conformal: target missed vs {r.baseline}: {r.ratio:.2f}x < {r.target}x")
    return 1 if disagree else 0


if __name__ == "__main__":
    raise SystemExit(main())
