"""``bensemble demo``: a deep ensemble on scikit-learn's bundled digits, before and after scaling.

Everything runs on embedded data (nothing is downloaded). The split is train / calibration /
test; the temperature is fitted on the calibration split only and every number is reported on
the test split.
"""

from __future__ import annotations

import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

from bensemble.calibration import TemperatureScaling
from bensemble.core import Ensemble
from bensemble.methods.deep_ensemble import train_ensemble
from bensemble.metrics import (
    accuracy,
    brier_score,
    expected_calibration_error,
    negative_log_likelihood,
)


def _digits_splits(seed: int):
    data = load_digits()
    x = torch.tensor(data.data / 16.0, dtype=torch.float32)
    y = torch.tensor(data.target, dtype=torch.int64)
    idx = torch.arange(len(y)).numpy()
    train, rest = train_test_split(idx, test_size=0.4, random_state=seed, stratify=data.target)
    cal, test = train_test_split(rest, test_size=0.5, random_state=seed, stratify=data.target[rest])
    return (x[train], y[train]), (x[cal], y[cal]), (x[test], y[test])


def _row(name: str, probs: torch.Tensor, labels: torch.Tensor) -> str:
    return (
        f"{name:<28} acc={accuracy(probs, labels):.4f} "
        f"NLL={negative_log_likelihood(probs, labels):.4f} "
        f"Brier={brier_score(probs, labels):.4f} "
        f"ECE={expected_calibration_error(probs, labels):.4f}"
    )


def run_demo(*, quick: bool = False, seed: int = 0, out: str | None = None) -> dict[str, float]:
    """Train a small deep ensemble on digits and print NLL / Brier / ECE before and after scaling.

    Returns the fitted temperature and the test metrics (used by the tests).
    """
    torch.manual_seed(seed)
    (x_tr, y_tr), (x_cal, y_cal), (x_te, y_te) = _digits_splits(seed)

    def make_model() -> nn.Module:
        return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))

    members = train_ensemble(
        make_model,
        (x_tr, y_tr),
        n_members=3 if quick else 5,
        epochs=15 if quick else 60,
        batch_size=64,
        seed=seed,
    )
    ensemble = Ensemble.from_models(members)
    with torch.no_grad():
        # Log of the Bayesian model average: softmax(log p) = p, so these act as logits.
        cal_logits = ensemble.predict_proba(x_cal).clamp_min(1e-12).log()
        test_logits = ensemble.predict_proba(x_te).clamp_min(1e-12).log()
    scaler = TemperatureScaling().fit(cal_logits, y_cal)
    before = test_logits.softmax(-1)
    after = scaler(test_logits).softmax(-1)

    print(f"digits: {len(y_tr)} train / {len(y_cal)} calibration / {len(y_te)} test, "
          f"{ensemble.num_members} members")
    print(_row("ensemble (before scaling)", before, y_te))
    print(_row(f"ensemble (T = {scaler.temperature.item():.3f})", after, y_te))
    return {
        "temperature": float(scaler.temperature.item()),
        "nll_before": negative_log_likelihood(before, y_te),
        "nll_after": negative_log_likelihood(after, y_te),
        "accuracy_before": accuracy(before, y_te),
        "accuracy_after": accuracy(after, y_te),
    }
