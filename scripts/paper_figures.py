"""Regenerate the figures of the README and the guide into ``docs/figures/``.

    PYTHONPATH=. python scripts/paper_figures.py [--out docs/figures] [--only toy|digits]
                                                 [--grid 60] [--seed 0]

* ``toy_eu_maps.png`` (figures 2 and 6 of the paper): the nine methods trained on the paper's 10
  toy points (networks full batch, 1000 Adam steps, as ``bensemble reproduce toy``); per method
  its EU map beside its members' squared error ``E_h[(eta - h)^2]``, one colour scale per pair.
  For the illustrative methods (Centroids, Likelihood, EK-NN) the EU map is the one they
  report, and the members are drawn from it (``phi ~ N(h, sqrt(EU))``, the default convention
  of ``reproduce toy``): fig. 2(a). Every method is scored by
  :func:`bensemble.experiments._scores.score_method`, as in ``reproduce toy``; colour bars
  start at 0.
* ``digits_reliability.png``, ``digits_epistemic_reliability.png``,
  ``digits_risk_coverage.png``: a deep ensemble (10 MLPs, the paper's settings) on
  scikit-learn's digits, before and after temperature scaling fitted on a calibration split:
  the reliability diagram with its count panel, the classwise epistemic reliability diagrams
  (one colour per class, before / after on shared axes) and the risk-coverage curves with the
  oracle and random references.

About 3-6 minutes on two busy CPU cores (the toy networks dominate).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

DPI = 110


def _save(fig, out: Path, name: str) -> None:
    path = out / name
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    print(f"wrote {path}")


def toy_maps(out: Path, side: int, seed: int) -> None:
    from dataclasses import replace

    from bensemble.datasets import make_toy_gaussians, make_toy_grid
    from bensemble.experiments._scores import score_method
    from bensemble.experiments.illustrative import Convention
    from bensemble.methods.zoo import ILLUSTRATIVE_METHODS, PAPER_ORDER, ZooSettings
    from bensemble.plots import plot_toy_maps, toy_map_pairs

    settings = replace(ZooSettings(), epochs=1000, batch_size=None)  # as `reproduce toy`
    train = make_toy_gaussians(10, seed=seed)
    grid = make_toy_grid(side, seed=seed + 10_000)
    eu, error = {}, {}
    for method in PAPER_ORDER:  # scored as `reproduce toy` scores them (default convention)
        start = time.perf_counter()
        result = score_method(
            method, (train.x, train.y), (grid.x, grid.y), settings=settings, seed=seed,
            conventions=(Convention(),), n_bins=100,
        )  # fmt: skip
        eu[method] = result.eu
        error[method] = ((grid.eta[None, :] - result.members) ** 2).mean(dim=0)
        print(
            f"  toy: {method:<20} mean EU {float(eu[method].mean()):.4f}, mean squared error "
            f"{float(error[method].mean()):.4f} ({time.perf_counter() - start:.1f} s)",
            file=sys.stderr,
        )
    panels, pairs = toy_map_pairs(
        eu, error, reported=[m for m in PAPER_ORDER if m in ILLUSTRATIVE_METHODS]
    )
    fig = plot_toy_maps(
        grid.x, panels, groups=pairs, ncols=6, points=train.x, point_labels=train.y,
        panel_size=3.0,
    )  # fmt: skip
    fig.suptitle(
        f"Toy problem, 10 training points, seed {seed}: per method, EU(x) beside the members' "
        "squared error, one colour scale per pair (reported EU for the illustrative methods)"
    )
    _save(fig, out, "toy_eu_maps.png")


def digits(out: Path, seed: int) -> None:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    from bensemble.calibration import fit_temperature
    from bensemble.methods.zoo import ZooSettings, member_probs
    from bensemble.metrics import expected_epistemic_calibration_error, selective_confidence
    from bensemble.plots import (
        EpistemicReliabilityDisplay,
        ReliabilityDisplay,
        RiskCoverageDisplay,
        plot_epistemic_reliability_panels,
    )

    data = load_digits()
    x = torch.tensor(data.data / 16.0, dtype=torch.float32)
    y = torch.tensor(data.target, dtype=torch.int64)
    idx = torch.arange(len(y)).numpy()
    train, rest = train_test_split(idx, test_size=0.4, random_state=seed, stratify=data.target)
    cal, test = train_test_split(rest, test_size=0.5, random_state=seed, stratify=data.target[rest])
    members = member_probs(
        "Deep Ensemble", x[train], y[train], torch.cat([x[cal], x[test]]),
        settings=ZooSettings(), seed=seed,
    )  # fmt: skip
    m_cal, m_test = members[:, : len(cal)], members[:, len(cal) :]
    y_cal, y_test = y[cal], y[test]
    logits = torch.log(m_cal.clamp_min(1e-12))
    temperature = fit_temperature(logits, y_cal, ensemble=True)
    scaled = torch.softmax(torch.log(m_test.clamp_min(1e-12)) / temperature, dim=-1)
    stages = {"before": m_test, f"after (T = {temperature:.2f})": scaled}

    fig, (ax, below) = plt.subplots(
        2, 1, sharex=True, figsize=(7.5, 6.2), gridspec_kw={"height_ratios": [3, 1]},
        layout="constrained",
    )  # fmt: skip
    for name, p in stages.items():
        ReliabilityDisplay.from_predictions(p.mean(0), y_test, n_bins=10, name=name).plot(
            ax=ax, counts_ax=below
        )
    ax.set_title(f"Deep ensemble, digits ({len(test)} test points)")
    _save(fig, out, "digits_reliability.png")

    displays = {}
    for name, p in stages.items():
        details = expected_epistemic_calibration_error(p, y_test, 4, seed=seed, return_details=True)
        displays[f"classwise EECE, {name}"] = EpistemicReliabilityDisplay.from_details(
            details, name=name.split(" ")[0]
        )
    fig = plot_epistemic_reliability_panels(displays, panel_size=5.0)
    _save(fig, out, "digits_epistemic_reliability.png")

    fig, ax = plt.subplots(figsize=(6.0, 4.5), layout="constrained")
    correct = (m_test.mean(0).argmax(-1) == y_test).double()
    for score in ("max_probability", "negative_mutual_information"):
        conf = selective_confidence(m_test, score)
        RiskCoverageDisplay.from_predictions(conf, correct, name=score).plot(ax=ax)
    ax.set_title("Deep ensemble on digits: selective risk")
    _save(fig, out, "digits_risk_coverage.png")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/figures", help="folder (docs/figures)")
    parser.add_argument("--only", choices=("toy", "digits"), help="one part only")
    parser.add_argument("--grid", type=int, default=60, help="toy grid side (60)")
    parser.add_argument("--seed", type=int, default=0, help="seed (0)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    if args.only in (None, "digits"):
        digits(out, args.seed)
    if args.only in (None, "toy"):
        toy_maps(out, args.grid, args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
