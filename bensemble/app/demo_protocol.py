"""The protocol ``bensemble demo`` applies to every method (see :mod:`bensemble.app.demo`).

:func:`_evaluate_method` cuts the calibration set in two halves (temperature / conformal), fits
temperature scaling on the pooled prediction, calibrates split-conformal LAC sets, and scores the
test set before and after scaling (:func:`_stage`); it then answers the report's three questions
with bootstrap intervals (:func:`bensemble.app.demo_html.method_verdicts`).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["ALPHA", "ECE_BINS"]

#: Conformal miscoverage level of the tables.
ALPHA = 0.1
#: Bins of the (top-label, equal-width) ECE and of the reliability diagrams.
ECE_BINS = 15
_TINY = torch.finfo(torch.float64).tiny


@dataclass
class _MethodRun:
    """One method's rows plus what its figures need (test split only)."""

    label: str
    rows: list[dict[str, Any]]
    fit: dict[str, Any]
    labels: torch.Tensor
    probs: dict[str, torch.Tensor]
    details: dict[str, Any]
    maps: dict[str, torch.Tensor] | None = None
    verdicts: list[dict[str, Any]] = field(default_factory=list)


def _eece_bins(n: int) -> int:
    """About ``sqrt(n)`` K-means bins (at least 5, at most 100): ~20-45 points per bin here."""
    return max(5, min(100, round(math.sqrt(n))))


def _stage(
    members: torch.Tensor,
    pooled: torch.Tensor,
    labels: torch.Tensor,
    sets: torch.Tensor,
    eta: torch.Tensor | None,
    seed: int,
) -> tuple[dict[str, Any], Any]:
    """Test metrics of one stage; ``members [H, n, K]``, ``pooled [n, K]``, ``sets [n, K]``."""
    from bensemble import metrics as M
    from bensemble.conformal import coverage, empty_set_rate, mean_set_size

    binary = members.shape[-1] == 2
    details = M.expected_epistemic_calibration_error(
        members[..., 1] if binary else members,
        labels,
        M.KMeansBinning(_eece_bins(labels.shape[0]), seed=seed),
        return_details=True,
        binary=binary,
    )
    row: dict[str, Any] = {
        "accuracy": M.accuracy(pooled, labels),
        "NLL": M.negative_log_likelihood(pooled, labels),
        "Brier": M.brier_score(pooled, labels),
        "ECE": M.expected_calibration_error(pooled, labels, n_bins=ECE_BINS),
        "EECE": details.value,
    }
    if eta is not None:
        row["TECE"] = M.true_epistemic_calibration_error(members[..., 1], eta, binary=True)
    row["coverage"] = coverage(sets, labels)
    row["set_size"] = mean_set_size(sets)
    row["empty_sets"] = empty_set_rate(sets)
    return row, details


def _evaluate_method(
    label: str,
    members: torch.Tensor,
    n_cal: int,
    y_cal: torch.Tensor,
    y_test: torch.Tensor,
    parts: Any,
    *,
    eta_test: torch.Tensor | None,
    seed: int,
) -> _MethodRun:
    """Scale, calibrate and score one method; ``members [H, n_cal + n_test, K]``."""
    from bensemble.calibration import CalibrationFitError, TemperatureScaling
    from bensemble.conformal import SplitConformalClassifier

    n_test = y_test.shape[0]
    members = members[:, : n_cal + n_test]
    pooled = members.mean(0)
    log_pooled = pooled.clamp_min(_TINY).log()
    t_idx, c_idx = parts.temperature, parts.conformal
    fit: dict[str, Any] = {
        "temperature": None,
        "converged": None,
        "nll_fit_before": float(F.cross_entropy(log_pooled[:n_cal][t_idx], y_cal[t_idx])),
        "nll_fit_after": None,
        "note": None,
    }
    stages = {"before": (members, pooled)}
    scaler = TemperatureScaling(on_boundary="warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            scaler.fit(log_pooled[:n_cal][t_idx], y_cal[t_idx])
    except CalibrationFitError as exc:
        fit["note"] = f"temperature not fitted: {' '.join(str(exc).split())}"
    else:
        notes = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        fit["note"] = " ".join(" ".join(notes).split()) or None
        fit.update(
            temperature=float(scaler.temperature.item()),
            converged=bool(scaler.converged_),
            nll_fit_after=float(scaler.nll_),
        )
        with torch.no_grad():
            scaled_members = scaler(members.clamp_min(_TINY).log()).softmax(-1)
            scaled_pooled = scaler(log_pooled).softmax(-1)
        stages["after"] = (scaled_members, scaled_pooled)

    rows, probs, details, test_stages = [], {}, {}, {}
    for stage, (m, p) in stages.items():
        cp = SplitConformalClassifier("lac", alpha=ALPHA, seed=seed)
        sets = cp.calibrate(p[:n_cal][c_idx], y_cal[c_idx]).predict_set(p[n_cal:])
        scores, details[stage] = _stage(m[:, n_cal:], p[n_cal:], y_test, sets, eta_test, seed)
        temperature = fit["temperature"] if stage == "after" else None
        rows.append({"method": label, "stage": stage, "T": temperature, **scores})
        probs[stage] = p[n_cal:]
        test_stages[stage] = (m[:, n_cal:], p[n_cal:], details[stage])
    run = _MethodRun(label, rows, fit, y_test, probs, details)
    from bensemble.app.demo_html import method_verdicts

    run.verdicts = method_verdicts(test_stages, y_test, n_bins=ECE_BINS, seed=seed)
    return run
