"""A reference for ``bensemble evaluate``'s numbers: the in-memory evaluation it replaced
(commit 67b1c64's ``evaluate_predictions``), built from the library's one-shot functions on
the whole arrays at once - no chunk, no state, no merge.

:func:`reference_evaluation` returns the report's numbers (``setup`` without the bootstrap's
reference, ``metrics``, ``selective``, ``ensemble``, ``conformal``, ``temperature``,
``per_class``) and the per-sample tensors behind them (``probs``, ``scaled``, ``labels``,
``sets``, ``members``, ``details``), for tests to compare the streaming engine with.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from bensemble import metrics as M
from bensemble.app.evaluate.calibrated import split_indices
from bensemble.calibration import TemperatureScaling
from bensemble.conformal import (
    SplitConformalClassifier,
    coverage,
    empty_set_rate,
    mean_set_size,
    per_class_coverage,
)
from bensemble.metrics.calibration import _classwise_stats, _norm_from_sums
from bensemble.uncertainty import decompose_classification_uncertainty

_F64 = torch.float64


def _scores(probs, labels, n_bins):
    return {
        "n": int(labels.shape[0]),
        "accuracy": M.accuracy(probs, labels),
        "nll": M.negative_log_likelihood(probs, labels),
        "brier": M.brier_score(probs, labels),
        "ece": M.expected_calibration_error(probs, labels, n_bins=n_bins),
        "classwise_ece": M.classwise_calibration_error(probs, labels, n_bins=n_bins),
    }


def _selective(probs, labels):
    pred = probs.argmax(1)
    conf = probs.gather(1, pred[:, None]).squeeze(1).to(_F64)
    correct = (pred == labels).to(_F64)
    errors = int((correct == 0).sum())
    both = 0 < errors < correct.shape[0]
    return {
        "error_auroc": M.auroc(1.0 - conf, 1.0 - correct) if both else None,
        "aurc": M.aurc(conf, correct),
    }


def _per_class(probs, labels, n_bins, scaled, sets):
    k = probs.shape[1]
    support = torch.bincount(labels, minlength=k)
    hits = torch.bincount(labels, weights=(probs.argmax(1) == labels).to(_F64), minlength=k)
    cols = {"support": support.tolist(), "accuracy": (hits / support.clamp_min(1)).tolist()}
    stages = {"classwise_ece": probs}
    if scaled is not None:
        stages = {"classwise_ece_unscaled": probs, "classwise_ece_scaled": scaled}
    for name, p in stages.items():
        cols[name] = _norm_from_sums(*_classwise_stats(p, labels, n_bins, "uniform"), "l1").tolist()
    if sets is not None:
        cols["coverage"] = per_class_coverage(sets, labels).tolist()
    rows = []
    for c in range(k):
        row: dict[str, Any] = {"class": c, **{name: v[c] for name, v in cols.items()}}
        if row["support"] == 0:
            row["accuracy"] = None
        rows.append(row)
    return rows


def reference_evaluation(
    member_probs: torch.Tensor,
    labels: torch.Tensor,
    *,
    calibration_split: float | None = None,
    alpha: float = 0.1,
    n_bins: int = 15,
    eece_bins: int | str = "auto",
    eece_seeds: int = 1,
    conformal_score: str = "lac",
    seed: int = 0,
    subsample: int | None = None,
) -> dict[str, Any]:
    """The numbers of ``member_probs [M, N, K]`` (float64 probabilities) and ``labels [N]``
    (``subsample``: the EECE's K-means subsample, when a test lowers the default)."""
    p = member_probs.to(_F64)
    p = p[None] if p.ndim == 2 else p
    m, n, k = p.shape
    y = labels.to(torch.int64)
    setup: dict[str, Any] = {
        "members": m,
        "samples": n,
        "classes": k,
        "n_bins": n_bins,
        "seed": seed,
        "calibration_split": calibration_split,
    }
    out: dict[str, Any] = {"conformal": None, "temperature": None, "scaled": None, "sets": None}
    if calibration_split is None:
        test = torch.arange(n)
        setup.update(n_temperature=0, n_conformal=0, n_test=n)
    else:
        temp_idx, conf_idx, test = split_indices(n, calibration_split, seed=seed)
        setup.update(n_temperature=len(temp_idx), n_conformal=len(conf_idx), n_test=len(test))
    mean = p.mean(0)
    p_test, y_test, members = mean[test], y[test], p[:, test]
    rows = [{"stage": "unscaled", "part": "all" if calibration_split is None else "test"}]
    rows[0].update(_scores(p_test, y_test, n_bins))
    selective = [{"stage": "unscaled", **_selective(p_test, y_test)}]
    if calibration_split is not None:
        log_mean = mean.clamp_min(torch.finfo(mean.dtype).tiny).log()
        scaler = TemperatureScaling(on_boundary="warn")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            scaler.fit(log_mean[temp_idx], y[temp_idx])
        t = float(scaler.temperature.item())
        notes = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        setup["temperature_converged"] = bool(scaler.converged_)
        setup["temperature_warning"] = " ".join(" ".join(notes).split()) or None
        with torch.no_grad():
            scaled_all = torch.softmax(scaler(log_mean).to(_F64), dim=-1)
        scaled = scaled_all[test]
        row = {"stage": f"temperature-scaled (T={t:.3f})", "part": "test"}
        row.update(_scores(scaled, y_test, n_bins))
        rows.append(row)
        selective.append({"stage": row["stage"], **_selective(scaled, y_test)})
        generator = torch.Generator().manual_seed(seed)
        cp = SplitConformalClassifier(conformal_score, alpha=alpha, generator=generator)
        cp.calibrate(scaled_all[conf_idx], y[conf_idx])
        sets = cp.predict_set(scaled)
        out["conformal"] = {
            "score": conformal_score,
            "alpha": alpha,
            "target_coverage": 1.0 - alpha,
            "coverage": coverage(sets, y_test),
            "mean_set_size": mean_set_size(sets),
            "empty_set_rate": empty_set_rate(sets),
            "n_calibration": len(conf_idx),
            "n_test": len(test),
        }
        out.update(temperature=t, scaled=scaled, sets=sets)
    ensemble, details = None, None
    if m > 1:
        total, aleatoric, epistemic = decompose_classification_uncertainty(members)
        more = {} if subsample is None else {"subsample": subsample}
        details = M.expected_epistemic_calibration_error(
            members,
            y_test,
            n_bins=eece_bins,
            seed=seed,
            n_seeds=eece_seeds,
            return_details=True,
            **more,
        )
        ensemble = {
            "members": m,
            "mean_total": float(total.mean()),
            "mean_aleatoric": float(aleatoric.mean()),
            "mean_epistemic": float(epistemic.mean()),
            "mean_member_variance": float(members.var(0, unbiased=False).mean()),
            "eece": float(details.value),
            "eece_sd": details.seed_sd,
            "eece_seeds": eece_seeds,
            "eece_bins": details.n_bins,
            "eece_bins_fitted": details.n_bins_fitted,
        }
    per_class = None
    if k <= 20:
        per_class = _per_class(p_test, y_test, n_bins, out["scaled"], out["sets"])
    out.update(
        setup=setup,
        metrics=rows,
        selective=selective,
        ensemble=ensemble,
        per_class=per_class,
        probs=p_test,
        labels=y_test,
        members=members,
        details=details,
    )
    return out
