"""Second-order regression: metrics, epistemic calibration and recalibration of member predictions.

The regression currency is the classification one with real targets: **member predictions**
``[M, N]`` (point predictions of ``M`` members for ``N`` points) or ``[M, N, 2]`` (each member's
Gaussian **mean and variance**), and real ``labels [N]``. The predictive of a point is the
members' equal-weight mixture (``predictive="mixture"``; the empirical distribution for point
members) or its moment-matched Gaussian (``predictive="gaussian"``). Epistemic uncertainty is the
variance of the members' means, aleatoric the mean of their variances
(:func:`~bensemble.uncertainty.decompose_regression_uncertainty`, fed by
:func:`split_member_predictions`).

* Scoring rules (:mod:`~bensemble.regression.scoring`): :func:`regression_negative_log_likelihood`,
  :func:`crps`, :func:`crps_per_sample`, :func:`sharpness`.
* Intervals (:mod:`~bensemble.regression.intervals`): :func:`predictive_interval`,
  :func:`interval_coverage` (PICP), :func:`mean_interval_width` (MPIW), :func:`interval_score`.
* Calibration curves (:mod:`~bensemble.regression.calibration_curve`):
  :func:`regression_calibration_curve`, :func:`miscalibration_area`, :func:`pit_values`,
  :func:`calibration_curve_from_pit`.
* Epistemic calibration (:mod:`~bensemble.regression.epistemic`):
  :func:`regression_epistemic_calibration_error` (EECE; its per-bin details with
  ``return_details=True``), :func:`fit_regression_bins`,
  :func:`true_regression_epistemic_calibration_error` (TECE).
* Recalibration (:mod:`~bensemble.regression.recalibration`): :class:`VarianceScaling`,
  :class:`QuantileRecalibration`.

Conformal intervals for the same members are in :mod:`bensemble.conformal.regression`.
"""

from bensemble.regression._inputs import PREDICTIVES, split_member_predictions
from bensemble.regression.calibration_curve import (
    RegressionCalibrationCurve,
    calibration_curve_from_pit,
    miscalibration_area,
    pit_values,
    regression_calibration_curve,
)
from bensemble.regression.epistemic import (
    RegressionEECEDetails,
    fit_regression_bins,
    regression_epistemic_calibration_error,
    true_regression_epistemic_calibration_error,
)
from bensemble.regression.intervals import (
    interval_coverage,
    interval_score,
    mean_interval_width,
    predictive_interval,
)
from bensemble.regression.recalibration import QuantileRecalibration, VarianceScaling
from bensemble.regression.scoring import (
    crps,
    crps_per_sample,
    regression_negative_log_likelihood,
    sharpness,
)

__all__ = [
    "PREDICTIVES",
    "QuantileRecalibration",
    "RegressionCalibrationCurve",
    "RegressionEECEDetails",
    "VarianceScaling",
    "calibration_curve_from_pit",
    "crps",
    "crps_per_sample",
    "fit_regression_bins",
    "interval_coverage",
    "interval_score",
    "mean_interval_width",
    "miscalibration_area",
    "pit_values",
    "predictive_interval",
    "regression_calibration_curve",
    "regression_epistemic_calibration_error",
    "regression_negative_log_likelihood",
    "sharpness",
    "split_member_predictions",
    "true_regression_epistemic_calibration_error",
]
