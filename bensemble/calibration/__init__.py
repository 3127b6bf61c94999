"""Post-hoc calibration of classifier logits.

* :class:`TemperatureScaling` - one temperature, solved exactly (Newton on ``1 / T``).
* :class:`VectorScaling` - per-class scale and shift.
* :class:`MatrixScaling` - full affine map, with optional off-diagonal regularisation.
* :func:`fit_temperature` - the functional temperature fit.
* :class:`CalibrationFitError` - raised when a fit has no well-determined optimum.
"""

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
    "CalibrationFitError",
    "DEFAULT_TEMPERATURE_BOUNDS",
    "MatrixScaling",
    "TemperatureFit",
    "TemperatureScaling",
    "VectorScaling",
    "fit_temperature",
]
