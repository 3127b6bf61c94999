"""The sweep's registry: every public array-taking function, its array kinds, its checks.

Generated from the public API (issue 19): every public function whose required arguments are
glossary names (``probs``, ``logits``, ``member_probs``, ``labels``, ``targets``, ...; see
:data:`GLOSSARY`) gets an entry with the kinds those names stand for, checked by :data:`CHECKS`
(finite numbers by default). :data:`OVERRIDES` lists only what cannot be inferred. See
test_sweep.py.
"""

from __future__ import annotations

import inspect
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bensemble import calibration as cal
from bensemble import conformal as conf
from bensemble import datasets, losses, metrics, plots, utils
from bensemble import uncertainty as unc
from bensemble.metrics import intervals

sys.path.insert(0, str(Path(__file__).resolve().parent))

from public_api import public_functions  # noqa: E402
from sweep_cases import (  # noqa: E402
    Case,
    _bin_ids,
    _binned,
    _centroids,
    _ends,
    _entropy,
    _finite,
    _in,
    _intervals,
    _l1_ends,
    _nonnegative,
    _per_class,
    _quantile,
    _quantiles,
    _reliability,
    _reports,
    _same_shape_as_input,
    _selective,
    _sets,
    _split,
    _stratified,
    _tensors_in,
)


# ----------------------------------------------------------------------------- the registry
@dataclass(frozen=True)
class Entry:
    name: str
    call: Callable[..., Any]
    kinds: dict[str, str]
    check: Callable[[Any, Case], None]
    names: tuple[str, ...] = ()  # further argument names a ValueError may cite
    propagates: bool = False  # elementwise: NaN / inf in gives NaN / inf out (torch's convention)
    batched: bool = False  # takes any leading axes (elementwise / broadcasting): no bad_shape
    overflows: bool = False  # its true value of 1e30-sized input exceeds the dtype: no extreme
    with_k: bool = False  # called with num_classes=K
    tensor_only: bool = False  # an autograd module: numpy / lists refused with a ValueError
    nonfinite_ok: tuple[str, ...] = ()  # arguments where NaN / inf is documented valid (dropped)
    min_k: int = 1
    max_k: int = 1000


def _smooth(value: Any, case: Any) -> None:
    """A curve of estimated accuracies: finite and in [0, 1] on every grid point."""
    curve = value.curve
    assert bool(torch.isfinite(curve).all()), "non-finite smooth calibration curve"
    assert bool(((curve >= 0) & (curve <= 1)).all()), "curve outside [0, 1]"


def _temperature_fit(logits, labels):
    scaler = cal.TemperatureScaling().fit(logits, labels)
    return float(scaler.temperature)


def _vector_fit(logits, labels):
    k = np.shape(logits)[-1] if not isinstance(logits, torch.Tensor) else logits.shape[-1]
    return cal.VectorScaling(k).fit(logits, labels, max_iter=20)(logits).detach()


def _matrix_fit(logits, labels):
    k = np.shape(logits)[-1] if not isinstance(logits, torch.Tensor) else logits.shape[-1]
    return cal.MatrixScaling(k).fit(logits, labels, max_iter=20)(logits).detach()


def _calibrated(make: Callable[..., Any], **kw: Any) -> Callable[[Any, Any], Any]:
    """Fit a calibrator of probabilities and return its calibrated training predictions."""

    def run(probs, labels):
        return make(**kw).fit(probs, labels).transform(probs)

    return run


def _recalibrated(**kw: Any) -> Callable[[Any, Any], Any]:
    def run(member_probs, labels):
        recal = cal.EpistemicRecalibrator(max_iter=30, **kw).fit(member_probs, labels)
        return recal.transform(member_probs), recal.predict_proba(member_probs)

    return run


def _scaled_proba(make: Callable[[int], Any]) -> Callable[[Any, Any], Any]:
    def run(logits, labels):
        k = np.shape(logits)[-1] if not isinstance(logits, torch.Tensor) else logits.shape[-1]
        return make(k).fit(logits, labels, max_iter=20).predict_proba(logits)

    return run


def _conformal(score: str, class_conditional: bool = False, randomized: bool = True):
    def run(probs, labels):
        predictor = conf.SplitConformalClassifier(
            score,
            alpha=0.2,
            class_conditional=class_conditional,
            randomized=randomized,
            generator=torch.Generator().manual_seed(0),
        )
        return predictor.calibrate(probs, labels).predict_set(probs)

    return run


def _meter(probs, labels):
    return metrics.CalibrationErrorMeter(n_bins=5).update(probs, labels).compute()


def _gaussian_nll(preds, target):
    with torch.no_grad():
        return losses.GaussianLikelihood()(preds, target)


def _binary_kw(fn: Callable[..., Any]) -> dict[str, Any]:
    # the lead's shape mechanism: [M, N] positive-class members need binary=True where it exists
    return {"binary": True} if "binary" in inspect.signature(fn).parameters else {}


def _eece(member_probs, labels):
    binning = metrics.KMeansBinning(n_bins=3)
    return metrics.expected_epistemic_calibration_error(member_probs, labels, binning)


def _eece_binary(member_probs, labels):
    fn = metrics.expected_epistemic_calibration_error
    return fn(member_probs, labels, metrics.KMeansBinning(n_bins=3), **_binary_kw(fn))


def _binning(make):
    """``make()``'s binning fitted on binary members and applied to them: ``[N]`` bin ids."""

    def call(member_probs):
        return make().fit(member_probs, binary=True).assign(member_probs)

    return call


def _explicit(member_probs):
    n = len(member_probs[0])  # the sweep's cases are well-formed up to the values
    binning = metrics.ExplicitBinning(torch.arange(n) % 3)
    return binning.fit(member_probs, binary=True).assign(member_probs)


def _bce(member_probs, labels):
    fn = metrics.binary_calibration_error
    return fn(member_probs, labels, n_bins=5, **_binary_kw(fn))


def _tece(member_probs, eta):
    fn = metrics.true_epistemic_calibration_error
    return fn(member_probs, eta, **_binary_kw(fn))


P, L, MEM = "probs", "labels", "member"
#: What a generated entry's result must look like (default: every number finite).
CHECKS: dict[str, Callable[[Any, Case], None]] = {
    "accuracy": _in(0, 1),
    "brier_score": _in(0, 2),
    "negative_log_likelihood": _in(0, math.inf),
    "expected_calibration_error": _in(0, 1),
    "maximum_calibration_error": _in(0, 1),
    "classwise_calibration_error": _in(0, 1),
    "calibration_error": _in(0, 1),
    "smooth_calibration_curve": _smooth,
    "binned_calibration_stats": _binned,
    "reliability_diagram": _reliability,
    "assign_bins": _bin_ids,
    "selective_confidence": _tensors_in(-math.inf, math.inf),
    "auroc": _in(0, 1),
    "aupr": _in(0, 1),
    "fpr_at_95_tpr": _in(0, 1),
    "ood_scores": _tensors_in(-math.inf, math.inf),
    "detection_report": _reports,
    "misclassification_report": _reports,
    "decompose_regression_uncertainty": _nonnegative,
    "entropy": _entropy,
    "lac_scores": _tensors_in(0, 1),
    "coverage": _in(0, 1),
    "mean_set_size": _in(0, 1000),
    "empty_set_rate": _in(0, 1),
    "per_class_coverage": _per_class,
    "size_stratified_coverage": _stratified,
    "selective_replicates": _selective,
}
#: Entry options of generated entries (see :class:`Entry`).
FLAGS: dict[str, dict[str, Any]] = {
    "assign_bins": {"max_k": 50},
    "entropy": {"batched": True},
}

#: Entries whose call or array kinds cannot be inferred from the glossary: a keyword to fix
#: (n_bins, seed, alpha), a different kind under a glossary name (``probs`` holding member
#: stacks), a class method, or a variant of a generated entry (``name[variant]``).
OVERRIDES: list[Entry] = [
    # scoring
    Entry(
        "negative_log_likelihood[from_logits]",
        lambda probs, labels: metrics.negative_log_likelihood(probs, labels, from_logits=True),
        {"probs": "logits", "labels": L},
        _in(0, math.inf),
    ),
    # calibration errors
    Entry(
        "expected_calibration_error[from_logits]",
        lambda probs, labels: metrics.expected_calibration_error(probs, labels, from_logits=True),
        {"probs": "logits", "labels": L},
        _in(0, 1),
    ),
    Entry("CalibrationErrorMeter", _meter, {"probs": P, "labels": L}, _in(0, 1)),
    # epistemic calibration
    Entry(
        "expected_epistemic_calibration_error",
        _eece,
        {"member_probs": MEM, "labels": L},
        _in(0, 1),
        names=("n_bins",),
        max_k=50,
    ),
    Entry(
        "expected_epistemic_calibration_error[binary]",
        _eece_binary,
        {"member_probs": "binary_member", "labels": "binary_labels"},
        _in(0, 1),
        names=("n_bins",),
    ),
    Entry(
        "KMeansBinning",
        _binning(lambda: metrics.KMeansBinning(n_bins=3)),
        {"member_probs": "binary_member"},
        _bin_ids,
        names=("n_bins",),
    ),
    Entry(
        "UniformBinning",
        _binning(lambda: metrics.UniformBinning(3)),
        {"member_probs": "binary_member"},
        _bin_ids,
    ),
    Entry(
        "QuantileBinning",
        _binning(lambda: metrics.QuantileBinning(3)),
        {"member_probs": "binary_member"},
        _bin_ids,
    ),
    Entry(
        "ExplicitBinning",
        _explicit,
        {"member_probs": "binary_member"},
        _bin_ids,
        names=("bin_ids",),  # N = 0: no ids
    ),
    Entry(
        "binary_calibration_error",
        _bce,
        {"member_probs": "binary_member", "labels": "binary_labels"},
        _in(0, 1),
    ),
    Entry(
        "true_epistemic_calibration_error",
        _tece,
        {"member_probs": "binary_member", "eta": "eta"},
        _in(0, 1),
    ),
    Entry(
        "fit_bins",
        lambda member_vectors: metrics.fit_bins(member_vectors, 3, seed=0),
        {"member_vectors": "vectors"},
        _centroids,
        names=("n_bins",),
        max_k=50,
    ),
    # selective prediction: (confidence, correct) and (probs, labels)
    Entry("aurc", metrics.aurc, {"confidence": "conf", "correct": "correct"}, _in(0, 1)),
    Entry(
        "excess_aurc", metrics.excess_aurc, {"confidence": "conf", "correct": "correct"}, _in(0, 1)
    ),
    Entry(
        "risk_coverage_curve",
        metrics.risk_coverage_curve,
        {"confidence": "conf", "correct": "correct"},
        _tensors_in(-math.inf, math.inf),
    ),
    Entry(
        "aurc[probs]",
        lambda probs, labels: metrics.aurc(probs, labels),
        {"probs": P, "labels": L},
        _in(0, 1),
    ),
    Entry(
        "plot_risk_coverage",
        plots.plot_risk_coverage,
        {"confidence": "conf", "correct": "correct"},
        lambda value, case: _finite_result(value, case),
    ),
    Entry(
        "risk_coverage_curve[probs]",
        lambda probs, labels: metrics.risk_coverage_curve(probs=probs, labels=labels),
        {"probs": P, "labels": L},
        _tensors_in(0, 1),
    ),
    Entry(
        "coverage_at_risk",
        lambda confidence, correct: metrics.coverage_at_risk(confidence, correct, 0.2),
        {"confidence": "conf", "correct": "correct"},
        _in(0, 1),
        names=("risk",),
    ),
    Entry(
        "risk_at_coverage",
        lambda confidence, correct: metrics.risk_at_coverage(confidence, correct, 0.5),
        {"confidence": "conf", "correct": "correct"},
        _in(0, 1),
        names=("coverage",),
    ),
    # OOD / misclassification detection
    Entry(
        "fpr_at_tpr",
        lambda scores, is_positive: metrics.fpr_at_tpr(scores, is_positive, 0.8),
        {"scores": "scores", "is_positive": "positive"},
        _in(0, 1),
        names=("tpr",),
    ),
    # post-hoc scalers
    Entry(
        "TemperatureScaling.fit",
        _temperature_fit,
        {"logits": "logits", "labels": L},
        _in(1e-3, 1e3),
    ),
    Entry(
        "TemperatureScaling.forward",
        lambda logits: cal.TemperatureScaling(init_temp=1.5)(logits).detach(),
        {"logits": "logits"},
        _same_shape_as_input,
        propagates=True,
        batched=True,
    ),
    Entry(
        "fit_temperature",
        lambda logits, labels: cal.fit_temperature(logits, labels),
        {"logits": "logits", "labels": L},
        _in(1e-3, 1e3),
    ),
    Entry(
        "VectorScaling.fit",
        _vector_fit,
        {"logits": "logits", "labels": L},
        _same_shape_as_input,
        names=("num_classes",),
        max_k=200,
    ),
    Entry(
        "MatrixScaling.fit",
        _matrix_fit,
        {"logits": "logits", "labels": L},
        _same_shape_as_input,
        names=("num_classes",),
        max_k=200,
    ),
    Entry(
        "TemperatureScaling.predict_proba",
        _scaled_proba(lambda k: cal.TemperatureScaling()),
        {"logits": "logits", "labels": L},
        _tensors_in(0, 1),
    ),
    Entry(
        "VectorScaling.predict_proba",
        _scaled_proba(cal.VectorScaling),
        {"logits": "logits", "labels": L},
        _tensors_in(0, 1),
        names=("num_classes",),
        max_k=200,
    ),
    # calibrators of probabilities
    Entry(
        "IsotonicCalibration.fit",
        _calibrated(cal.IsotonicCalibration),
        {"probs": P, "labels": L},
        _tensors_in(0, 1),
    ),
    Entry(
        "IsotonicCalibration[from_logits]",
        _calibrated(cal.IsotonicCalibration, from_logits=True),
        {"probs": "logits", "labels": L},
        _tensors_in(0, 1),
    ),
    Entry(
        "HistogramBinningCalibration.fit",
        _calibrated(cal.HistogramBinningCalibration, n_bins=5),
        {"probs": P, "labels": L},
        _tensors_in(0, 1),
    ),
    Entry(
        "BetaCalibration.fit",
        _calibrated(cal.BetaCalibration, max_iter=30),
        {"probs": P, "labels": L},
        _tensors_in(0, 1),
    ),
    Entry(
        "BetaCalibration[from_logits]",
        _calibrated(cal.BetaCalibration, max_iter=30, from_logits=True),
        {"probs": "logits", "labels": L},
        _tensors_in(0, 1),
    ),
    Entry(
        "DirichletCalibration.fit",
        _calibrated(cal.DirichletCalibration, off_diagonal_l2=1e-2, max_iter=30),
        {"probs": P, "labels": L},
        _tensors_in(0, 1),
        max_k=200,
    ),
    # member predictions
    Entry(
        "EpistemicRecalibrator.fit",
        _recalibrated(),
        {"member_probs": MEM, "labels": L},
        _tensors_in(0, 1),
    ),
    Entry(
        "EpistemicRecalibrator[binary]",
        _recalibrated(binary=True),
        {"member_probs": "binary_member", "labels": "binary_labels"},
        _tensors_in(0, 1),
    ),
    # uncertainty decompositions
    Entry(
        "decompose_classification_uncertainty",
        unc.decompose_classification_uncertainty,
        {"probs": MEM},
        _nonnegative,
    ),
    Entry("variance_decomposition", unc.variance_decomposition, {"probs": MEM}, _nonnegative),
    # conformal
    Entry(
        "aps_scores",
        lambda probs: conf.aps_scores(probs, generator=torch.Generator().manual_seed(0)),
        {"probs": P},
        _tensors_in(0, 1),
    ),
    Entry(
        "raps_scores",
        lambda probs: conf.raps_scores(probs, generator=torch.Generator().manual_seed(0)),
        {"probs": P},
        _tensors_in(0, math.inf),
    ),
    Entry(
        "conformal_quantile",
        lambda scores: conf.conformal_quantile(scores, 0.2),
        {"scores": "conf"},
        _quantile,
        names=("alpha",),
    ),
    Entry(
        "class_conditional_quantiles",
        lambda scores, labels, num_classes: conf.class_conditional_quantiles(
            scores, labels, num_classes, 0.2
        ),
        {"scores": "conf", "labels": L},
        _quantiles,
        names=("alpha",),
        with_k=True,
    ),
    Entry("SplitConformal[lac]", _conformal("lac"), {"probs": P, "labels": L}, _sets),
    Entry("SplitConformal[aps]", _conformal("aps"), {"probs": P, "labels": L}, _sets),
    Entry(
        "SplitConformal[aps,deterministic]",
        _conformal("aps", randomized=False),
        {"probs": P, "labels": L},
        _sets,
    ),
    Entry("SplitConformal[raps]", _conformal("raps"), {"probs": P, "labels": L}, _sets),
    Entry(
        "SplitConformal[lac,class_conditional]",
        _conformal("lac", class_conditional=True),
        {"probs": P, "labels": L},
        _sets,
    ),
    Entry(
        "split_calibration",
        lambda labels: conf.split_calibration(labels, seed=0),
        {"labels": L},
        _split,
        names=("temperature_fraction",),
    ),
    # bensemble 0.2 compatibility helpers
    Entry(
        "standard_normal_pdf",
        utils.standard_normal_pdf,
        {"x": "x"},
        _tensors_in(0, 1),
        propagates=True,
        batched=True,
    ),
    Entry(
        "standard_normal_cdf",
        utils.standard_normal_cdf,
        {"x": "x"},
        _tensors_in(0, 1),
        propagates=True,
        batched=True,
    ),
    Entry(
        "GaussianLikelihood.forward",
        _gaussian_nll,
        {"preds": "x", "target": "x"},
        _tensors_in(-math.inf, math.inf),
        propagates=True,
        batched=True,
        overflows=True,  # (1e30 - -1e30)^2 / var is beyond float32
        tensor_only=True,
    ),
    # the toy problem's array-taking helpers
    Entry("toy_posterior", datasets.toy_posterior, {"x": "points"}, _tensors_in(0, 1)),
    # bootstrap intervals (bensemble.metrics.intervals)
    Entry(
        "poisson_weights",
        lambda sample_index: intervals.poisson_weights(sample_index, 5),
        {"sample_index": "index"},
        _tensors_in(0, 12),
        names=("n_replicates",),
    ),
    Entry(
        "percentile_interval",
        lambda values: intervals.percentile_interval(values, 0.9),
        {"values": "scores"},
        _ends,
        names=("level",),
        nonfinite_ok=("values",),  # replicate values may be NaN / inf: the finite ones count
    ),
    Entry(
        "selective_intervals",
        lambda auroc, aurc: intervals.selective_intervals(auroc, aurc, level=0.9),
        {"auroc": "conf", "aurc": "conf"},
        _intervals,
        nonfinite_ok=("auroc", "aurc"),  # replicates without an error are NaN: None, no interval
    ),
    Entry(
        "l1_norm_interval",
        lambda estimate, replicates: intervals.l1_norm_interval(estimate, replicates, 0.9),
        {"estimate": "coordinates", "replicates": "vectors"},
        _l1_ends,
        names=("level",),
        nonfinite_ok=("replicates",),  # a replicate row holding NaN / inf is dropped
    ),
    Entry(
        "corrupt_inputs",
        lambda x: datasets.corrupt_inputs(x, 0.3, seed=0),
        {"x": "points"},
        _tensors_in(-math.inf, math.inf),
        names=("rho",),
    ),
]


# ----------------------------------------------------------------------------- generation
#: Glossary argument name -> array kind (sweep_cases.KINDS). A public function whose required
#: arguments are all glossary names gets an entry without anyone writing it.
GLOSSARY = {
    "probs": P,
    "logits": "logits",
    "member_probs": MEM,
    "member_probs_in": MEM,
    "member_probs_out": "member_out",
    "labels": L,
    "targets": L,
    "confidences": "conf",
    "confidence": "conf",
    "conf": "conf",
    "correct": "correct",
    "scores": "scores",
    "is_positive": "positive",
    "sets": "sets",
    "member_vectors": "vectors",
    "centroids": "centroids",
    "means": "means",
    "variances": "variances",
    "eta": "eta",
    "sample_index": "index",
}


def inferred_kinds(fn: Callable[..., Any]) -> dict[str, str] | None:
    """``{argument: kind}`` from the glossary, or ``None`` when a required argument is not in
    it (or the function takes no array at all)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    required = [
        p.name
        for p in params
        if p.default is inspect.Parameter.empty
        and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    if not required or any(name not in GLOSSARY for name in required):
        return None
    return {name: GLOSSARY[name] for name in required}


def _finite_result(value: Any, case: Case) -> None:
    """Every number finite; a matplotlib figure (a plot function's result) is closed."""
    if hasattr(value, "savefig"):
        import matplotlib.pyplot as plt

        plt.close(value)
        return
    _finite(value)


def generated_entries() -> list[Entry]:
    """One entry per public function the glossary describes and no override names."""
    overridden = {e.name for e in OVERRIDES}  # "f[variant]" overrides add to "f"
    entries = []
    for name, fn in public_functions().items():
        kinds = inferred_kinds(fn)
        if kinds is None or name in overridden:
            continue
        check = CHECKS.get(name, _finite_result)
        entries.append(Entry(name, fn, kinds, check, **FLAGS.get(name, {})))
    return entries


#: The sweep: every public array-taking function (generated) plus the overrides.
REGISTRY: list[Entry] = OVERRIDES + generated_entries()

# second-order regression (bensemble.regression, bensemble.conformal.regression, the toy's truth)
from sweep_regression import REGRESSION_ENTRIES  # noqa: E402

REGISTRY += REGRESSION_ENTRIES
