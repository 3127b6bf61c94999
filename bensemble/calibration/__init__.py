"""Post-hoc calibration of classifier logits.

* :class:`TemperatureScaling` - one temperature, solved exactly (Newton on ``1 / T``); also one
  temperature shared by the members of an ensemble (``fit(..., ensemble=True)``).
* :class:`VectorScaling` - per-class scale and shift.
* :class:`MatrixScaling` - full affine map, with optional off-diagonal regularisation.
* :func:`fit_temperature` - the functional temperature fit.
* :class:`CalibrationFitError` - raised with ``on_boundary="raise"`` when a fit has no
  well-determined optimum.

Modules: :mod:`~bensemble.calibration.temperature`, :mod:`~bensemble.calibration.affine`;
:mod:`~bensemble.calibration.scaling` gathers both (the bensemble 0.2 import path).
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
