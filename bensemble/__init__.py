"""bensemble: how far can you trust a classifier?

Ensembles and Bayesian approximations produce *member predictions* ``[M, N, K]``
(members, samples, classes); metrics, calibration, uncertainty decompositions, epistemic
calibration and conformal prediction consume them. Sub-packages:

* :mod:`bensemble.core` - :class:`Ensemble` and member adapters (producers)
* :mod:`bensemble.methods` - posterior approximations and second-order models (producers)
* :mod:`bensemble.layers` - stochastic layers (DropConnect, ...)
* :mod:`bensemble.metrics` - scoring rules, calibration errors, EECE, selective, OOD
* :mod:`bensemble.calibration` - post-hoc scalers
* :mod:`bensemble.uncertainty` - entropy / variance decompositions
* :mod:`bensemble.conformal` - prediction sets with coverage guarantees
* :mod:`bensemble.plots` - matplotlib figures (imported lazily)
* :mod:`bensemble.datasets` - generated or bundled data
"""

from __future__ import annotations

import importlib
from typing import Any

try:
    from importlib.metadata import PackageNotFoundError, version

    __version__ = version("bensemble")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0+unknown"

# Short names resolved lazily so that `import bensemble` stays cheap (no matplotlib, no sklearn).
_LAZY = {
    "Ensemble": "bensemble.core.ensemble",
    "ExplicitMembers": "bensemble.core.member",
    "StochasticMembers": "bensemble.core.member",
    "MCDropoutEnsembler": "bensemble.diversity.dropout",
    "TemperatureScaling": "bensemble.calibration.scaling",
    "VectorScaling": "bensemble.calibration.scaling",
    "decompose_classification_uncertainty": "bensemble.uncertainty.decomposition",
    "decompose_regression_uncertainty": "bensemble.uncertainty.decomposition",
    "SklearnMembers": "bensemble.core.sklearn_members",
    "PackedMembers": "bensemble.core.packed",
    "MatrixScaling": "bensemble.calibration.scaling",
    "variance_decomposition": "bensemble.uncertainty.decomposition",
    "SplitConformalClassifier": "bensemble.conformal",
    "expected_epistemic_calibration_error": "bensemble.metrics",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'bensemble' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
