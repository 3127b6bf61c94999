"""The input check of a fitted scikit-learn-style estimator's ``predict*`` methods."""

from __future__ import annotations

from typing import Any

import torch
from sklearn.exceptions import NotFittedError

from bensemble._validation import as_float_tensor

__all__ = ["check_fitted_features"]


def check_fitted_features(estimator: Any, X: Any, method: str, fitted_attr: str) -> torch.Tensor:
    """``X`` as a float tensor ``[N, D]`` for ``estimator.method``, after ``fit`` saw ``D``
    features.

    Raises :class:`sklearn.exceptions.NotFittedError` while ``estimator`` lacks
    ``fitted_attr`` (set by its ``fit``), and ``ValueError`` for an ``X`` that is not 2-D or
    whose feature count differs from ``estimator.n_features_in_``.
    """
    name = type(estimator).__name__
    fn = f"{name}.{method}"
    if not hasattr(estimator, fitted_attr):
        raise NotFittedError(f"{fn}: this {name} is not fitted yet; call fit(X, y) before {method}")
    X = as_float_tensor(X, "X", fn, ndim=2)
    if X.shape[1] != estimator.n_features_in_:
        raise ValueError(
            f"{fn}: `X` must have {estimator.n_features_in_} features, as seen in fit "
            f"(got shape {tuple(X.shape)})"
        )
    return X
