"""Prediction sets and intervals with coverage guarantees (split conformal).

* :class:`SplitConformalClassifier` - marginal or class-conditional (Mondrian) split conformal
  sets from LAC, APS or RAPS scores (:mod:`bensemble.conformal.split`).
* Scores of every label: :func:`lac_scores`, :func:`aps_scores`, :func:`raps_scores`.
* Set quality: :func:`coverage`, :func:`mean_set_size`, :func:`empty_set_rate`,
  :func:`per_class_coverage`, :func:`size_stratified_coverage`.
* :func:`split_calibration` - keep temperature fitting and conformal calibration on separate data.
* Regression (:mod:`bensemble.conformal.regression`): :class:`SplitConformalRegressor` (absolute
  or spread-normalised residuals of member predictions ``[M, N]`` / ``[M, N, 2]``) and
  :class:`ConformalizedQuantileRegressor` (CQR for quantile members ``[M, N, 2]``).
"""

from bensemble.conformal import metrics
from bensemble.conformal.data import CalibrationSplit, split_calibration
from bensemble.conformal.metrics import (  # noqa: F401 - exported by metrics.__all__
    SizeStratifiedCoverage,
    coverage,
    empty_set_rate,
    mean_set_size,
    per_class_coverage,
    size_stratified_coverage,
)
from bensemble.conformal.regression import (
    REGRESSION_SCORES,
    SPREADS,
    ConformalizedQuantileRegressor,
    SplitConformalRegressor,
)
from bensemble.conformal.scores import SCORES, aps_scores, lac_scores, raps_scores
from bensemble.conformal.split import (
    SplitConformalClassifier,
    class_conditional_quantiles,
    conformal_quantile,
    conformal_rank,
)

__all__ = [
    "SplitConformalClassifier",
    "SplitConformalRegressor",
    "ConformalizedQuantileRegressor",
    "REGRESSION_SCORES",
    "SPREADS",
    "conformal_rank",
    "conformal_quantile",
    "class_conditional_quantiles",
    "SCORES",
    "lac_scores",
    "aps_scores",
    "raps_scores",
    *metrics.__all__,  # the set-quality measures, listed once (in their module)
    "CalibrationSplit",
    "split_calibration",
]
