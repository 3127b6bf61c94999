"""Post-hoc scalers fitted on held-out logits: temperature, vector and matrix scaling.

Each scaler learns a map of the logits ``z`` on a validation set by minimising the mean negative
log-likelihood of ``softmax(map(z))``, then applies it to new logits:

* :class:`TemperatureScaling` - ``z / T`` (one scalar; never changes the predicted class),
* :class:`VectorScaling` - ``a * z + b`` (a scale and a shift per class),
* :class:`MatrixScaling` - ``W z + b`` (full affine map, optionally with an off-diagonal penalty).

All three are ``nn.Module`` s with ``fit(logits, labels, max_iter=100) -> self`` and
``forward(logits)``; forward accepts ``[N, K]`` logits or member logits ``[M, N, K]`` (the map acts
on the last axis) and returns the input dtype. Fitting always starts from the same initial
parameters, so fitting twice on the same data gives the same answer. Parameters are ordinary
float32 module parameters (the fit runs in float64 and stores its result); they are validated
when loaded and round-trip through ``state_dict`` and ``torch.save``.

Temperature scaling is solved exactly by Newton's method on ``1 / T`` (see
:func:`fit_temperature`; :mod:`bensemble.calibration.temperature`); vector and matrix scaling are
convex in their parameters and are solved by L-BFGS with a strong-Wolfe line search in float64
(:mod:`bensemble.calibration.affine`). This module gathers them under their bensemble 0.2 path.
"""

from __future__ import annotations

from bensemble.calibration._newton import (
    DEFAULT_TEMPERATURE_BOUNDS,
    CalibrationFitError,
    TemperatureFit,
)
from bensemble.calibration.affine import CONVERGENCE_GTOL, MatrixScaling, VectorScaling
from bensemble.calibration.temperature import TemperatureScaling, fit_temperature

__all__ = [
    "CONVERGENCE_GTOL",
    "CalibrationFitError",
    "DEFAULT_TEMPERATURE_BOUNDS",
    "MatrixScaling",
    "TemperatureFit",
    "TemperatureScaling",
    "VectorScaling",
    "fit_temperature",
]
