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
* :mod:`bensemble.conformal` - prediction sets (and regression intervals) with coverage guarantees
* :mod:`bensemble.regression` - second-order regression: metrics, regression EECE, recalibration
* :mod:`bensemble.plots` - matplotlib figures (imported lazily)
* :mod:`bensemble.datasets` - generated or bundled data
"""

import importlib as _importlib


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("bensemble")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0.0.0+unknown"


__version__ = _package_version()

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
    # bensemble 0.2's methods and neural ensemble search
    "LaplaceApproximation": "bensemble.methods.kfac_laplace",
    "PBPEngine": "bensemble.methods.pbp",
    "RandomSearcher": "bensemble.search.searchers",
    "EvolutionarySearcher": "bensemble.search.searchers",
    "NESBayesianSampler": "bensemble.search.bayesian",
    "SearchSpace": "bensemble.search.space",
}

# Sub-packages and modules reachable as attributes (``bensemble.metrics.brier_score``), imported
# on first access; not in ``__all__`` so that ``from bensemble import *`` stays cheap.
_SUBMODULES = (
    "calibration",
    "cli",
    "conformal",
    "core",
    "datasets",
    "diversity",
    "experiments",
    "integrations",
    "io",
    "layers",
    "losses",
    "methods",
    "metrics",
    "plots",
    "regression",
    "search",
    "uncertainty",
    "utils",
)

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> object:
    if name in _LAZY:
        return getattr(_importlib.import_module(_LAZY[name]), name)
    if name in _SUBMODULES:
        return _importlib.import_module(f"bensemble.{name}")
    raise AttributeError(f"module 'bensemble' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*__all__, *_SUBMODULES})
