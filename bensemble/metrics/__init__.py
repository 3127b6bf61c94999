"""Scoring rules, calibration errors, epistemic calibration, selective prediction, OOD scores.

Scalar metrics return Python floats; per-sample or per-bin results return tensors or a small
dataclass. Every function accepts torch tensors or numpy arrays.
"""

# --- scoring rules and classical calibration (metrics/scoring.py, metrics/calibration.py) ---
from bensemble.metrics.scoring import (  # noqa: F401, I001
    accuracy,
    brier_score,
    negative_log_likelihood,
)
from bensemble.metrics.calibration import (  # noqa: F401, I001
    CalibrationBins,
    binned_calibration_stats,
    calibration_error,
    calibration_error_from_bins,
    classwise_calibration_error,
    expected_calibration_error,
    maximum_calibration_error,
    reliability_diagram,
)
from bensemble.metrics.streaming import CalibrationErrorMeter  # noqa: F401, I001
# --- epistemic calibration (metrics/epistemic.py) ---
from bensemble.metrics.epistemic import (  # noqa: F401, I001
    EECEDetails,
    binary_calibration_error,
    expected_epistemic_calibration_error,
    true_epistemic_calibration_error,
)
from bensemble.metrics._kmeans import assign_bins, fit_bins  # noqa: F401, I001
# --- selective prediction (metrics/selective.py) ---
from bensemble.metrics.selective import (  # noqa: F401, I001
    aurc,
    coverage_at_risk,
    excess_aurc,
    risk_at_coverage,
    risk_coverage_curve,
    selective_confidence,
)
# --- OOD / misclassification detection (metrics/ood.py) ---
from bensemble.metrics.ood import (  # noqa: F401, I001
    aupr,
    auroc,
    detection_report,
    fpr_at_95_tpr,
    fpr_at_tpr,
    misclassification_report,
    ood_scores,
)
