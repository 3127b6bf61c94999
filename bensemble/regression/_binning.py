"""The regression EECE's bins: K-means cells of the members' mean vectors - the one place that
calls bensemble's K-means.

A point's member vector is ``v_n = (mu_1(x_n), ..., mu_H(x_n))`` ``[H]``. Members are
exchangeable, so they are first put into the classification EECE's canonical, data-derived
order (:func:`bensemble.metrics._epistemic_checks.canonical_member_order`): any permutation of
the member axis then gives bit-identical bins. Centroids given by a caller are in *their* member
order and are permuted the same way.

Today this calls :func:`bensemble.metrics.fit_bins` / :func:`bensemble.metrics.assign_bins` on the
``[N, H]`` rows; when the binning objects land (``KMeansBinning(...).fit(x)`` /
``.assign(x)``), only :func:`fit_centroids` and :func:`assign` change.
"""

from __future__ import annotations

from typing import Any

import torch

from bensemble._validation import as_float_tensor
from bensemble.metrics import assign_bins, fit_bins
from bensemble.metrics._epistemic_checks import (
    auto_n_bins,
    canonical_member_order,
    resolve_n_bins,
)

__all__ = [
    "assign",
    "auto_n_bins",
    "canonical",
    "check_centroids",
    "fit_centroids",
    "resolve_n_bins",
]


def canonical(means: torch.Tensor) -> torch.Tensor | None:
    """The member permutation that sorts ``means [H, N]`` into the canonical order (or None)."""
    return canonical_member_order(means)


def _frame(vectors: torch.Tensor) -> tuple[float, float]:
    """One shift and one scale for every coordinate: ``(v - shift) / scale`` is O(1).

    K-means runs in float32; targets in the thousands (or 1e30) would lose the members' spread to
    rounding, or overflow the squared distances. A common affine map of all coordinates keeps
    every nearest-centroid relation and the K-means objective up to a factor, so the partition is
    that of the raw vectors, computed where float32 resolves it.
    """
    shift = float(vectors.mean())
    scale = float((vectors - shift).abs().max())
    return shift, (scale if scale > 0 else 1.0)


def fit_centroids(vectors: torch.Tensor, n_bins: int, seed: int) -> torch.Tensor:
    """K-means centroids ``[B', H]`` (float64, ``B' <= n_bins``) of the rows ``vectors [N, H]``."""
    shift, scale = _frame(vectors)
    return fit_bins((vectors - shift) / scale, n_bins, seed=seed) * scale + shift


def assign(vectors: torch.Tensor, centroids: torch.Tensor) -> torch.Tensor:
    """Nearest-centroid bin ids ``[N]`` (int64; ties to the lower index)."""
    shift, scale = _frame(vectors)
    return assign_bins((vectors - shift) / scale, (centroids - shift) / scale)


def check_centroids(centroids: Any, width: int, fn: str) -> torch.Tensor:
    """``[B, H]`` finite float64 centroids, one column per member."""
    c = as_float_tensor(centroids, "centroids", fn, ndim=2)
    if c.shape[1] != width:
        raise ValueError(
            f"{fn}: `centroids` must have {width} columns, one per member (got shape "
            f"{tuple(c.shape)})"
        )
    return c
