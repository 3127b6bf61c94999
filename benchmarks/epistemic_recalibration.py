"""Epistemic recalibration (``EpistemicRecalibrator``): synthetic members of known spread, the
digits demo's ensembles, and Fashion-MNIST when its Debian package is installed.

* ``synthetic``: ten binary members ``f + c d_m`` whose well-spread version (``c = 1``) pools
  to the truth ``P(y = 1 | x)``, with deviations ``d_m`` drawn at every point (``per point``)
  or members that are fixed linear functions (``coherent``); each row draws its own truth and
  members, and 40,000 points split into 20,000 calibration and 20,000 test points. The TECE
  (default EU:
  the squared error of the pooled prediction against the truth) is exact; the table also shows
  the spread the binned EECE would choose (classwise bins fitted once on the calibration
  members, held fixed, ``s`` scanned on a grid) and the TECE it leaves.
* ``digits``: the demo's split of scikit-learn's digits (train / calibration / test = 60 / 20 /
  20 %, stratified, seeded) and its multi-class methods (``bensemble.methods.zoo``, the paper's
  settings). The recalibrator is fitted on the calibration part; the baseline is the demo's
  temperature scaling (``T`` fitted on the pooled log-probabilities, applied to every member's
  log-probabilities). Scores on the test part: the classwise EECE (``n_bins="auto"``, seed 0),
  NLL and top-label ECE (15 bins) of the pooled prediction.
* ``fashion``: the same methods on the 64-d latent codes of the paper's convolutional
  auto-encoder (5 epochs on the 60,000 training images), classifiers on 10,000 training codes,
  the recalibrator on 2,000 other training codes, scores on the 10,000 test images.

Run: ``python benchmarks/epistemic_recalibration.py [--datasets synthetic digits fashion]
[--seeds 0 1 2] [--quick] [--write]``; ``--write`` replaces the tables in ``README.md`` and
``docs/guide/epistemic-recalibration.md`` (between ``<!-- begin epistemic_recalibration -->``
markers).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness  # noqa: E402

from bensemble import metrics as M  # noqa: E402
from bensemble.calibration import (  # noqa: E402
    EpistemicRecalibrator,
    TemperatureScaling,
    fit_temperature,
)

F64 = torch.float64
ROOT = Path(__file__).resolve().parent.parent
TARGETS = (ROOT / "README.md", ROOT / "docs" / "guide" / "epistemic-recalibration.md")
SECTION = "epistemic_recalibration"
METHODS = ("DropConnect", "Random Forest", "MC-Dropout", "Deep Ensemble", "Bayesian Deep")


# ------------------------------------------------------------------------------ synthetic
def synthetic_members(c: float, n: int, seed: int, design: str, m: int = 10):
    """``(member log-odds [m, n], labels [n], eta [n])`` with spread factor ``c``.

    ``per_point``: deviations ``sigma(x) xi_m(x)`` drawn at every point (``sigma`` log-uniform in
    ``[1, 8]``); ``coherent``: every member a fixed linear function of a 4-d input. Either way
    the ``c = 1`` members pool to the truth ``eta``.
    """
    g = torch.Generator().manual_seed(seed)
    if design == "per_point":
        centre = 3.0 * torch.randn(n, generator=g, dtype=F64)
        sigma = torch.empty(n, dtype=F64).uniform_(0.0, math.log(8.0), generator=g).exp()
        xi = torch.randn(m, n, generator=g, dtype=F64)
        deviation = sigma * (xi - xi.mean(0))
    else:
        x = 2.0 * torch.randn(n, 4, generator=g, dtype=F64)
        centre = x @ torch.randn(4, generator=g, dtype=F64)
        slopes = 0.7 * torch.randn(m, 4, generator=g, dtype=F64)
        shifts = 0.7 * torch.randn(m, 1, generator=g, dtype=F64)
        deviation = (slopes - slopes.mean(0)) @ x.T + (shifts - shifts.mean(0))
    eta = torch.sigmoid(centre + deviation).mean(0)
    labels = (torch.rand(n, generator=g, dtype=F64) < eta).long()
    return centre + c * deviation, labels, eta


def _tece(log_odds: torch.Tensor, eta: torch.Tensor) -> float:
    return M.true_epistemic_calibration_error(torch.sigmoid(log_odds), eta, binary=True)


def _eece_binary(log_odds: torch.Tensor, labels: torch.Tensor, **kw) -> float:
    return M.expected_epistemic_calibration_error(
        torch.sigmoid(log_odds), labels, binary=True, **kw
    )


def synthetic_rows(quick: bool) -> list[list[str]]:
    n = 4000 if quick else 20_000
    rows = []
    cases = [(d, c) for d in ("per_point", "coherent") for c in (0.25, 0.5, 1, 2, 4)]
    for index, (design, c) in enumerate(cases):
        # one truth and one set of members per row; its points split into calibration and test
        z, y, eta = synthetic_members(c, 2 * n, 10 + index, design)
        z_cal, y_cal, z_test, y_test, eta = z[:, :n], y[:n], z[:, n:], y[n:], eta[n:]
        recal = EpistemicRecalibrator(from_logits=True, binary=True).fit(z_cal, y_cal)
        after = recal.transform(z_test)
        t_centre = fit_temperature(torch.stack([torch.zeros(n, dtype=F64), z_cal.mean(0)], 1),
                                   y_cal)  # fmt: skip
        centre = z_test.mean(0)
        ts_only = centre / t_centre + (z_test - centre)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            bins = _eece_binary(z_cal, y_cal, n_bins=100, seed=0, return_details=True).point_bins
            cal_centre = z_cal.mean(0)

            grid = [math.exp(v) for v in torch.linspace(-5, 2, 36).tolist()]
            t = recal.temperature_
            values = [
                _eece_binary(cal_centre / t + s * (z_cal - cal_centre), y_cal, bins=bins)
                for s in grid
            ]
            s_eece = grid[min(range(len(grid)), key=values.__getitem__)]
            eece_choice = centre / recal.temperature_ + s_eece * (z_test - centre)
            eece = [_eece_binary(z, y_test, seed=0) for z in (z_test, after)]
        rows.append(
            [
                design.replace("_", " "),
                f"{c:g}",
                f"{recal.spread_:.3f}",
                f"{recal.spread_ * c:.3f}",
                f"{recal.temperature_:.3f}",
                f"{_tece(z_test, eta):.5f}",
                f"{_tece(ts_only, eta):.5f}",
                f"{_tece(after, eta):.5f}",
                f"{eece[0]:.4f} / {eece[1]:.4f}",
                f"{s_eece:.3f} ({_tece(eece_choice, eta):.5f})",
            ]
        )
    return rows


SYNTHETIC_HEADER = [
    "members",
    "c",
    "fitted s",
    "s c",
    "fitted T",
    "TECE raw",
    "TECE, T only",
    "TECE recalibrated",
    "EECE raw / recalibrated",
    "s by fixed-bin EECE (its TECE)",
]


# ------------------------------------------------------------------------------ ensembles
def _demo_split(seed: int):
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    x = torch.tensor(data.data / 16.0, dtype=torch.float32)
    y = torch.tensor(data.target, dtype=torch.int64)
    idx = np.arange(len(y))
    train, rest = train_test_split(idx, test_size=0.4, random_state=seed, stratify=data.target)
    cal, test = train_test_split(rest, test_size=0.5, random_state=seed, stratify=data.target[rest])
    return x[train], y[train], x[cal], y[cal], x[test], y[test]


def _fashion_split(seed: int, quick: bool):
    from bensemble.experiments.autoencoder import encode, train_autoencoder
    from bensemble.experiments.vision import load_fashion_mnist

    data = load_fashion_mnist()
    x_train, y_train = data["train"]
    x_test, y_test = data["test"]
    if quick:
        x_train, y_train, x_test, y_test = (
            x_train[:3000],
            y_train[:3000],
            x_test[:1000],
            y_test[:1000],
        )
    ae = train_autoencoder(x_train, latent_dim=64, epochs=1 if quick else 5, seed=seed)
    pick = torch.randperm(len(y_train), generator=torch.Generator().manual_seed(seed))
    n_fit, n_cal = (1000, 500) if quick else (10_000, 2_000)
    fit_idx, cal_idx = pick[:n_fit], pick[n_fit : n_fit + n_cal]
    codes = encode(ae, x_train[pick[: n_fit + n_cal]])
    return (
        codes[:n_fit],
        y_train[fit_idx],
        codes[n_fit:],
        y_train[cal_idx],
        encode(ae, x_test),
        y_test,
    )


def _scores(members: torch.Tensor, pooled: torch.Tensor, labels: torch.Tensor) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eece = M.expected_epistemic_calibration_error(members, labels, n_bins="auto", seed=0)
    return {
        "EECE": eece,
        "NLL": M.negative_log_likelihood(pooled, labels),
        "ECE": M.expected_calibration_error(pooled, labels, n_bins=15),
    }


def method_runs(dataset: str, seeds: list[int], quick: bool) -> dict[str, list[dict]]:
    from bensemble.methods.zoo import ZooSettings, member_probs

    settings = ZooSettings.quick() if quick else ZooSettings()
    runs: dict[str, list[dict]] = {}
    for seed in seeds:
        split = _demo_split(seed) if dataset == "digits" else _fashion_split(seed, quick)
        x_tr, y_tr, x_cal, y_cal, x_te, y_te = split
        n_cal = len(y_cal)
        for method in METHODS:
            start = time.perf_counter()
            members = member_probs(
                method, x_tr, y_tr, torch.cat([x_cal, x_te]), settings=settings, seed=seed
            )
            cal_m, test_m = members[:, :n_cal], members[:, n_cal:]
            variants = [("", {})]
            if method == "Random Forest":
                variants.append((" (min_prob=1e-6)", {"min_prob": 1e-6}))
            for suffix, kw in variants:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)  # bounds: in the table
                    recal = EpistemicRecalibrator(**kw).fit(cal_m, y_cal)
                pooled_log = cal_m.mean(0).clamp_min(1e-300).log()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    scaler = TemperatureScaling().fit(pooled_log, y_cal)
                ts_members = scaler.predict_proba(test_m.clamp_min(1e-300).log())
                ts_pooled = scaler.predict_proba(test_m.mean(0).clamp_min(1e-300).log())
                after = recal.transform(test_m)
                record = {
                    "T": recal.temperature_,
                    "s": recal.spread_,
                    "bounds": recal.at_boundary_,
                    "raw": _scores(test_m, test_m.mean(0), y_te),
                    "ts": _scores(ts_members, ts_pooled, y_te),
                    "recal": _scores(after, after.mean(0), y_te),
                    "acc": M.accuracy(after.mean(0), y_te),
                }
                runs.setdefault(method + suffix, []).append(record)
            print(
                f"{dataset} seed {seed} {method}: {time.perf_counter() - start:.0f} s", flush=True
            )
    return runs


def _ms(values: list[float], digits: int) -> str:
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} +- {statistics.stdev(values):.{digits}f}"


METHOD_HEADER = [
    "method",
    "T",
    "s",
    "EECE raw / TS / recal.",
    "NLL raw / TS / recal.",
    "ECE raw / TS / recal.",
]


def method_rows(runs: dict[str, list[dict]]) -> list[list[str]]:
    rows = []
    for method, records in runs.items():
        cells = [method]
        s_values = [r["s"] for r in records]
        ends = sorted({end for r in records for end in r["bounds"]})
        counts = [
            f"{sum(end in r['bounds'] for r in records)}/{len(records)} at {end}" for end in ends
        ]
        cells.append(_ms([r["T"] for r in records], 2))
        cells.append(_ms(s_values, 3) + (f" ({', '.join(counts)})" if counts else ""))
        for key, digits in (("EECE", 4), ("NLL", 3), ("ECE", 3)):
            parts = [
                statistics.mean(r[stage][key] for r in records) for stage in ("raw", "ts", "recal")
            ]
            cells.append(" / ".join(f"{v:.{digits}f}" for v in parts))
        rows.append(cells)
    return rows


def markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def fashion_available() -> bool:
    try:
        done = subprocess.run(
            ["dpkg", "-s", "dataset-fashion-mnist"], capture_output=True, check=False
        )
    except OSError:
        return False
    return done.returncode == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["synthetic", "digits", "fashion"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--quick", action="store_true", help="small sizes, quick zoo settings")
    parser.add_argument("--write", action="store_true", help="rewrite the README / docs tables")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    command = "python benchmarks/epistemic_recalibration.py " + " ".join(
        [f"--datasets {' '.join(args.datasets)}", f"--seeds {' '.join(map(str, args.seeds))}"]
        + (["--quick"] if args.quick else [])
    )
    blocks = [f"Regenerate: `{command} --write` ({_harness.environment()})."]
    if "synthetic" in args.datasets:
        blocks += ["", "Synthetic binary members, spread c times the truth's (exact TECE):", ""]
        blocks.append(markdown(SYNTHETIC_HEADER, synthetic_rows(args.quick)))
    for dataset in ("digits", "fashion"):
        if dataset not in args.datasets:
            continue
        if dataset == "fashion" and not fashion_available():
            blocks += ["", "Fashion-MNIST: not installed (`dpkg -s dataset-fashion-mnist`)."]
            continue
        seeds = args.seeds if dataset == "digits" else args.seeds[:1]
        runs = method_runs(dataset, seeds, args.quick)
        title = "Digits" if dataset == "digits" else "Fashion-MNIST (auto-encoder codes)"
        blocks += ["", f"{title}, test part, mean over seeds {seeds}:", ""]
        blocks.append(markdown(METHOD_HEADER, method_rows(runs)))
    text = "\n".join(blocks) + "\n"
    if args.write:
        for target in TARGETS:
            _harness.write_section(text, target, section=SECTION)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
