"""The epistemic reliability diagram at K = 2, 10 and 100 classes, as a user draws it.

    PYTHONPATH=. python scripts/epistemic_k_figures.py [--out docs/figures] [--seed 0]

writes ``epistemic_reliability_k2.png``, ``..._k10.png`` and ``..._k100.png``: the default
``EpistemicReliabilityDisplay.from_details(details, name="ensemble").plot()`` (the call behind
the report's figure 4) of five synthetic members of N = 3,000 points whose class frequencies
fall off linearly (so "the largest support" at K = 100 is a real choice), classwise EECE with
20 K-means bins (seed 0). It prints the Axes size in pixels of each figure: it stays that of a
diagram without a legend at every K. A few seconds of CPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

DPI = 110


def members(k: int, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Five members ``[5, n, k]`` sharing a per-point signal, and labels drawn from their mean."""
    g = torch.Generator().manual_seed(seed)
    logits = 2.0 * torch.randn(5, n, k, generator=g) + 3.0 * torch.randn(1, n, k, generator=g)
    probs = (logits + torch.linspace(2.0, 0.0, k)).softmax(-1)
    labels = torch.multinomial(probs.mean(0), 1, generator=g).squeeze(1)
    return probs, labels


def main(argv: list[str] | None = None) -> int:
    from bensemble.metrics import expected_epistemic_calibration_error
    from bensemble.metrics.binning import KMeansBinning
    from bensemble.plots import EpistemicReliabilityDisplay

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/figures", help="folder (docs/figures)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the data (0)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for k in (2, 10, 100):
        probs, labels = members(k, 3000, args.seed)
        details = expected_epistemic_calibration_error(
            probs, labels, KMeansBinning(20, seed=0), return_details=True
        )
        display = EpistemicReliabilityDisplay.from_details(details, name="ensemble").plot()
        fig = display.figure_
        fig.canvas.draw()
        box = display.ax_.get_window_extent()
        path = out / f"epistemic_reliability_k{k}.png"
        fig.savefig(path, dpi=DPI)
        plt.close(fig)
        width, height = fig.get_size_inches()
        print(
            f"K = {k:>3}: Axes {box.width:.0f} x {box.height:.0f} px at {fig.dpi:.0f} dpi "
            f"(figure {width:.2f} x {height:.2f} in) -> {path}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
