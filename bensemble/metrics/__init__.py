"""Scoring rules, calibration errors, epistemic calibration, selective prediction, OOD scores.

Scalar metrics return Python floats; per-sample or per-bin results return tensors or a small
dataclass. Every function accepts torch tensors or numpy arrays.

* :mod:`~bensemble.metrics.scoring` - NLL, Brier, accuracy
* :mod:`~bensemble.metrics.calibration` - the ECE family and reliability data
* :mod:`~bensemble.metrics.streaming` - batch-by-batch, mergeable meters of every additive metric
* :mod:`~bensemble.metrics.epistemic` - EECE and TECE (epistemic calibration)
* :mod:`~bensemble.metrics.binning` - the EECE's binnings (K-means cells, equal-width / equal-mass
  bins of the mean prediction, explicit ids) and the K-means behind them
* :mod:`~bensemble.metrics.selective` - risk-coverage curves
* :mod:`~bensemble.metrics.smooth` - the kernel-smoothed calibration curve (Beta kernel)
* :mod:`~bensemble.metrics.ood` - AUROC / AUPR / FPR@95 for OOD and misclassification detection
* :mod:`~bensemble.metrics.intervals` - bootstrap intervals that stream, shard and merge
  (counter-based Poisson weights; intervals of the calibration errors valid near zero)
"""

from bensemble.metrics.binning import (
    ExplicitBinning,
    KMeansBinning,
    QuantileBinning,
    UniformBinning,
    assign_bins,
    fit_bins,
)
from bensemble.metrics.calibration import (
    CalibrationBins,
    binned_calibration_stats,
    calibration_error,
    calibration_error_from_bins,
    classwise_calibration_error,
    expected_calibration_error,
    maximum_calibration_error,
)
from bensemble.metrics.epistemic import (
    EECEDetails,
    binary_calibration_error,
    expected_epistemic_calibration_error,
    true_epistemic_calibration_error,
)
from bensemble.metrics.ood import (
    aupr,
    auroc,
    detection_report,
    fpr_at_95_tpr,
    fpr_at_tpr,
    misclassification_report,
    ood_scores,
)
from bensemble.metrics.reliability_data import reliability_diagram
from bensemble.metrics.scoring import accuracy, brier_score, negative_log_likelihood
from bensemble.metrics.selective import (
    aurc,
    coverage_at_risk,
    excess_aurc,
    risk_at_coverage,
    risk_coverage_curve,
    selective_confidence,
)
from bensemble.metrics.smooth import SmoothCalibrationCurve, smooth_calibration_curve
from bensemble.metrics.streaming import (
    AccuracyMeter,
    BrierMeter,
    CalibrationErrorMeter,
    ClasswiseCalibrationErrorMeter,
    NLLMeter,
)
from bensemble.metrics.streaming_epistemic import EECEMeter, UncertaintyMeter

__all__ = [
    "AccuracyMeter",
    "BrierMeter",
    "CalibrationBins",
    "CalibrationErrorMeter",
    "SmoothCalibrationCurve",
    "ClasswiseCalibrationErrorMeter",
    "EECEDetails",
    "EECEMeter",
    "ExplicitBinning",
    "KMeansBinning",
    "NLLMeter",
    "QuantileBinning",
    "UncertaintyMeter",
    "UniformBinning",
    "accuracy",
    "assign_bins",
    "aupr",
    "aurc",
    "auroc",
    "binary_calibration_error",
    "binned_calibration_stats",
    "brier_score",
    "calibration_error",
    "calibration_error_from_bins",
    "classwise_calibration_error",
    "coverage_at_risk",
    "detection_report",
    "excess_aurc",
    "expected_calibration_error",
    "expected_epistemic_calibration_error",
    "fit_bins",
    "fpr_at_95_tpr",
    "fpr_at_tpr",
    "maximum_calibration_error",
    "misclassification_report",
    "negative_log_likelihood",
    "ood_scores",
    "reliability_diagram",
    "risk_at_coverage",
    "risk_coverage_curve",
    "smooth_calibration_curve",
    "selective_confidence",
    "true_epistemic_calibration_error",
]
