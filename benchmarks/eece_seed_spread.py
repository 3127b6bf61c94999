"""EECE binning randomness: mean and sd over K-means seeds, our torch backend vs scikit-learn.

The EECE bins points with K-means, whose seeding is random. This script measures, on two
problems, the EECE over ``--seeds`` K-means seeds (``n_seeds=S`` of
:func:`bensemble.metrics.expected_epistemic_calibration_error`, seeds ``0..S-1``) for the default
backend (``"torch"``, what ``"auto"`` picks) and for scikit-learn's ``KMeans`` (the paper's
binning), and prints mean, sd, sd/mean and the gap between the two backends' means:

* toy - the binning study's setting (``bensemble reproduce binning``): a 10-member deep ensemble
  trained on 20 toy points, 10,000 test points, binary positive-class members;
* digits - scikit-learn's 8x8 digits (raw pixels / 16), stratified 50/50 split, a 10-member deep
  ensemble, classwise EECE over the 10 classes of the 899 test points.

Each at ``n_bins="auto"`` and at the paper's 100 bins. The members are trained once per problem
(seed 0); only the binning seed varies.

Run: ``PYTHONPATH=. python benchmarks/eece_seed_spread.py`` (about a minute on one core).
"""

from __future__ import annotations

import argparse
import warnings

import torch

from bensemble.datasets import make_toy_gaussians
from bensemble.experiments._common import single_thread, zoo_settings
from bensemble.methods.zoo import member_probs
from bensemble.metrics import expected_epistemic_calibration_error
from bensemble.metrics.binning import KMeansBinning  # noqa: E402

BACKENDS = ("torch", "sklearn")


def toy_members() -> tuple[torch.Tensor, torch.Tensor, dict]:
    train = make_toy_gaussians(20, seed=0)
    test = make_toy_gaussians(10_000, seed=10_000)
    probs = member_probs("Deep Ensemble", train.x, train.y, test.x, settings=zoo_settings(False))
    return probs[..., 1], test.y, {"binary": True}


def digits_members() -> tuple[torch.Tensor, torch.Tensor, dict]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    x = torch.tensor(data.data / 16.0, dtype=torch.float32)
    y = torch.tensor(data.target, dtype=torch.int64)
    train, test = train_test_split(
        torch.arange(len(y)).numpy(), test_size=0.5, random_state=0, stratify=data.target
    )
    probs = member_probs("Deep Ensemble", x[train], y[train], x[test], settings=zoo_settings(False))
    return probs, y[test], {}


def spread(p, y, kw, n_bins, backend: str, seeds: int) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # 100 bins on 899 digits: ~9 per bin
        binning = KMeansBinning(n_bins, seed=0, n_seeds=seeds, backend=backend)
        d = expected_epistemic_calibration_error(p, y, binning, return_details=True, **kw)
    return {"mean": d.value, "sd": d.seed_sd, "bins": d.n_bins, "fitted": d.n_bins_fitted}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="K-means seeds per backend (5)")
    args = parser.parse_args(argv)
    header = "problem  n_bins  backend  bins  mean EECE  sd        sd/mean  backend gap"
    print(header)
    print("-" * len(header))
    with single_thread():
        for name, make in (("toy", toy_members), ("digits", digits_members)):
            p, y, kw = make()
            for n_bins in ("auto", 100):
                rows = {b: spread(p, y, kw, n_bins, b, args.seeds) for b in BACKENDS}
                gap = rows["torch"]["mean"] / rows["sklearn"]["mean"] - 1.0
                for b, r in rows.items():
                    print(
                        f"{name:<7}  {str(n_bins):<6}  {b:<7}  {r['bins']:>4}  "
                        f"{r['mean']:.6f}   {r['sd']:.6f}  {r['sd'] / r['mean']:>6.1%}  "
                        + (f"{gap:+.1%} (torch vs sklearn)" if b == "torch" else "")
                    )
    print(f"\n{args.seeds} K-means seeds (0..{args.seeds - 1}) per backend; sd with divisor S - 1.")
    print("command: PYTHONPATH=. python benchmarks/eece_seed_spread.py --seeds", args.seeds)


if __name__ == "__main__":
    main()
