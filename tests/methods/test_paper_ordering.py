"""The robust part of the paper's ranking, on its toy problem with its hyper-parameters.

50 training points, 10,000 test points, appendix B.1.1 settings (``ZooSettings()``), EECE with
100 K-means bins, nothing tuned to the outcome. Active methods are scored with their member
variance as EU (the default); illustrative methods with the EU they *report*
(``eu=estimator.epistemic_uncertainty(x)``), since that is the uncertainty they announce and the
members ``N(h, sqrt(EU))`` are only the paper's device for sampling them.

What we assert is what held on every seed we tried (0, 1, 2): Centroids and EK-NN are worse
than every active method, and the illustrative methods as a group are worse than the active
ones. The relative-likelihood method sits level with the random forest (0.0178 vs 0.0174,
0.0130 vs 0.0161, 0.0149 vs 0.0176 on seeds 0-2), so "every illustrative method is worse than
every active method" is reported in the table, not asserted.
"""

import pytest
import torch

from bensemble.datasets import make_toy_gaussians
from bensemble.methods import Centroids, EvidentialKNN, RelativeLikelihood
from bensemble.methods.zoo import ACTIVE_METHODS, ZooSettings, member_probs
from bensemble.metrics import (
    accuracy,
    binary_calibration_error,
    expected_epistemic_calibration_error,
    true_epistemic_calibration_error,
)

ILLUSTRATIVE = {"Centroids": Centroids, "Likelihood": RelativeLikelihood, "EK-NN": EvidentialKNN}


@pytest.fixture(scope="module")
def table():
    torch.set_num_threads(1)
    train = make_toy_gaussians(50, seed=100)
    test = make_toy_gaussians(10_000, seed=200)
    rows = {}
    for name in ACTIVE_METHODS:
        probs = member_probs(name, train.x, train.y, test.x, settings=ZooSettings(), seed=0)
        rows[name] = (probs[..., 1], None)
    for name, cls in ILLUSTRATIVE.items():
        estimator = cls().fit(train.x, train.y)
        generator = torch.Generator().manual_seed(0)
        probs = estimator.sample_members(test.x, 100, generator=generator)
        rows[name] = (probs[..., 1], estimator.epistemic_uncertainty(test.x))
    out = {}
    for name, (positive, eu) in rows.items():
        out[name] = {
            "EECE": expected_epistemic_calibration_error(
                positive, test.y, n_bins=100, eu=eu, seed=0, binary=True
            ),
            "TECE": true_epistemic_calibration_error(positive, test.eta, eu=eu, binary=True),
            "ECE": binary_calibration_error(positive, test.y, binary=True),
            "accuracy": accuracy(torch.stack([1 - positive.mean(0), positive.mean(0)], 1), test.y),
        }
    print("\nmethod               EECE    TECE    ECE     accuracy")
    for name, row in sorted(out.items(), key=lambda kv: kv[1]["EECE"]):
        values = "  ".join(f"{row[key]:.4f}" for key in ("EECE", "TECE", "ECE", "accuracy"))
        print(f"{name:<20} {values}")
    return out


@pytest.mark.slow
def test_centroids_and_eknn_are_worse_than_every_active_method(table):
    worst_active = max(table[name]["EECE"] for name in ACTIVE_METHODS)
    for name in ("Centroids", "EK-NN"):
        assert table[name]["EECE"] > worst_active, (name, table)


@pytest.mark.slow
def test_illustrative_methods_are_worse_as_a_group(table):
    active = [table[name]["EECE"] for name in ACTIVE_METHODS]
    illustrative = [table[name]["EECE"] for name in ILLUSTRATIVE]
    assert min(illustrative) > sorted(active)[len(active) // 2]  # above the active median
    assert sum(illustrative) / 3 > 2 * max(active)


@pytest.mark.slow
def test_active_methods_are_accurate_and_eece_tracks_tece(table):
    for name in ACTIVE_METHODS:
        row = table[name]
        assert row["accuracy"] >= 0.9, (name, row)
        # EECE estimates TECE: with 100 bins on 10,000 points they agree to a few thousandths.
        assert abs(row["EECE"] - row["TECE"]) < 0.006, (name, row)
