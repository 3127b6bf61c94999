"""Compatibility: K-means moved to :mod:`bensemble.metrics.binning` (issue 23).

Kept only for modules that still import the private names from here
(``metrics/streaming_eval.py``, ``app/evaluate_memmap.py``, their tests); remove once they import
from :mod:`bensemble.metrics.binning._fit`.
"""

from bensemble.metrics.binning._fit import (  # noqa: F401
    BACKENDS,
    DEFAULT_CORESET,
    DEFAULT_LLOYD_RTOL,
    DEFAULT_REFINE,
    DEFAULT_SUBSAMPLE,
    MIN_MINIBATCH,
    KMeansFit,
    _check_centroids,
    _fit,
    assign_bins,
    fit_bins,
    kmeans_inertia,
    resolve_seed,
)
from bensemble.metrics.binning._nearest import _assign  # noqa: F401
