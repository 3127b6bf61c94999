"""Uncertainty decompositions of member predictions (entropy and variance views)."""

from bensemble.uncertainty.decomposition import (
    decompose_classification_uncertainty,
    decompose_regression_uncertainty,
    entropy,
    variance_decomposition,
)

__all__ = [
    "decompose_classification_uncertainty",
    "decompose_regression_uncertainty",
    "variance_decomposition",
    "entropy",
]
