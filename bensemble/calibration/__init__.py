"""Post-hoc calibration of classifier predictions.

Logit scalers (``transform``: calibrated logits; ``predict_proba``: their softmax):

* :class:`TemperatureScaling` - one temperature, solved exactly (Newton on ``1 / T``); also one
  temperature shared by the members of an ensemble (``fit(..., ensemble=True)``).
* :class:`VectorScaling` - per-class scale and shift.
* :class:`MatrixScaling` - full affine map, with optional off-diagonal regularisation.

Calibrators of probabilities (``[N, K]``, or ``[N]`` for a binary task; logits with
``from_logits=True``; ``transform`` and ``predict_proba`` return calibrated probabilities):

* :class:`IsotonicCalibration` - non-decreasing piecewise-linear maps (one-vs-all).
* :class:`HistogramBinningCalibration` - equal-width bins mapped to their class frequency.
* :class:`BetaCalibration` - ``sigma(a log p - b log(1 - p) + c)``, binary and one-vs-all.
* :class:`DirichletCalibration` - ``softmax(W log p + b)`` with off-diagonal and intercept
  regularisation.

Member predictions ``[M, N, K]``:

* :class:`EpistemicRecalibrator` - temperature for the members' centre, a factor for their
  spread, fitted by the pooled NLL.

Also :func:`fit_temperature` (the functional temperature fit) and :class:`CalibrationFitError`
(raised with ``on_boundary="raise"`` when a fit has no well-determined optimum).

Every calibrator is an ``nn.Module`` with ``fit(...) -> self``, ``transform``,
``predict_proba`` (tensors or numpy arrays in, tensors without gradients out), fitted values
ending in ``_`` and a validated ``state_dict`` / ``load_state_dict``.
"""

from bensemble.calibration.beta import BetaCalibration
from bensemble.calibration.dirichlet import DirichletCalibration
from bensemble.calibration.histogram import HistogramBinningCalibration
from bensemble.calibration.isotonic import IsotonicCalibration
from bensemble.calibration.recalibration import DEFAULT_SPREAD_BOUNDS, EpistemicRecalibrator
from bensemble.calibration.scaling import (
    DEFAULT_TEMPERATURE_BOUNDS,
    CalibrationFitError,
    MatrixScaling,
    TemperatureFit,
    TemperatureScaling,
    VectorScaling,
    fit_temperature,
)

__all__ = [
    "BetaCalibration",
    "CalibrationFitError",
    "DEFAULT_SPREAD_BOUNDS",
    "DEFAULT_TEMPERATURE_BOUNDS",
    "DirichletCalibration",
    "EpistemicRecalibrator",
    "HistogramBinningCalibration",
    "IsotonicCalibration",
    "MatrixScaling",
    "TemperatureFit",
    "TemperatureScaling",
    "VectorScaling",
    "fit_temperature",
]
