"""The sparse design of :class:`~bensemble.app.bootstrap.BootstrapPlan` and its reductions.

Every statistic of a bootstrap plan is a function of weighted per-row sums: :class:`Design`
holds the sparse ``[rows, n]`` matrix whose product with a block of replicate weights gives
them, and :func:`finish_statistic` / :func:`selective_statistics` turn those sums into the
statistics (means, binned gaps, the EECE; the misclassification AUROC and the AURC). The
formulas are in :mod:`bensemble.app.bootstrap`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["Design", "finish_statistic", "selective_statistics"]

_SELECTIVE_CHUNK = 2048
_F64 = torch.float64


class Design:
    """A sparse ``[rows, n]`` matrix built column by column: every statistic adds, per point,
    ``c`` entries (``rows``, ``values`` ``[n, c]``; zero values are allowed). Stored point-major,
    the entries already are the CSC layout (one column per point): no sort, no conversion."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.parts: list[tuple[np.ndarray, np.ndarray]] = []
        self.size = 0
        self.entries = 0
        self._matrix: Any = None

    def add(self, rows: Any, values: Any, slots: int) -> slice:
        start = self.size
        r = torch.as_tensor(rows).reshape(self.n, -1).numpy()
        r = r.astype(np.int32 if start + slots < 2**31 else np.int64, copy=False)
        v = torch.as_tensor(values, dtype=_F64).reshape(self.n, -1).numpy()
        self.parts.append((r + start if start else r, v))
        self.size += slots
        self.entries += r.size
        self._matrix = None
        return slice(start, start + slots)

    def matrix(self):
        from scipy import sparse

        if not self.parts:
            return None
        if self._matrix is None:
            rows = np.concatenate([p[0] for p in self.parts], axis=1).reshape(-1)
            vals = np.concatenate([p[1] for p in self.parts], axis=1).reshape(-1)
            indptr = np.arange(self.n + 1, dtype=rows.dtype) * (rows.size // max(self.n, 1))
            # CSC (one column per point): the product with a row-major [n, b] block walks both once
            self._matrix = sparse.csc_matrix((vals, rows, indptr), shape=(self.size, self.n))
        return self._matrix


def finish_statistic(kind: str, s: torch.Tensor, shape: Any, n: int) -> torch.Tensor:
    """A statistic from its per-row weighted sums ``s [rows, b]``."""
    if kind == "mean":
        return s[0] / n
    if kind == "gap":
        groups, n_bins = shape
        return s.abs().view(groups, n_bins, -1).sum(1).mean(0) / n
    h, groups, slots = shape
    s = s.reshape(groups * slots, h + 3, -1).transpose(0, 1)
    counts, sum_y, sum_eu, sum_p = s[0], s[1], s[2], s[3:]
    denom = counts.clamp_min(1.0)
    acc = sum_y / denom
    squared_error = ((acc[None] - sum_p / denom[None]) ** 2).mean(0)
    weighted = torch.where(counts > 0, counts * (squared_error - sum_eu / denom).abs(), 0.0)
    return weighted.view(groups, slots, -1).sum(1).mean(0) / n


def selective_statistics(
    s: np.ndarray, r: int, n: int, g: np.ndarray
) -> tuple[torch.Tensor, torch.Tensor]:
    """AUROC and AURC per replicate from the rows ``s [3R, b]`` of
    :meth:`~bensemble.app.bootstrap.BootstrapPlan.selective` (``g``: ``BootstrapPlan._g``).
    For tie group ``g`` in decreasing confidence:
    ``s_g`` its weight, ``e_g`` its errors, ``c_g = s_g - e_g`` its correct points, ``a_g``,
    ``E_g`` and ``C_g = a_g - E_g`` the weight, errors and correct points before it:

    * AUROC of the errors under the score ``-confidence``: ``sum_g e_g (C_g + c_g / 2) / (E C)``
      (more confident is a lower score); NaN without errors or without correct points;
    * AURC ``= (1 / n) sum_i err(i) / i`` with the errors of a group spread evenly over its
      positions ``a_g + 1 .. a_g + s_g``, each adding ``e_g / s_g`` to ``err(i)`` for every
      ``i`` at or after it: ``n AURC = E H[n] - sum_g (e_g / s_g) (G[a_g + s_g] - G[a_g])``,
      ``G[m] = sum_{t < m} H[t]``.

    Groups without errors add nothing but their weight; a run of groups with only errors has
    the same ``C_g``, no ``c_g`` and ``e_g / s_g = 1``, so it adds up like one group (the ``G``
    differences telescope): the ``R`` units of
    :meth:`~bensemble.app.bootstrap.BootstrapPlan.selective` suffice.
    """
    b = s.shape[1]
    if r == 0:  # no error in the sample: no error in any resample
        return torch.full((b,), float("nan"), dtype=_F64), torch.zeros(b, dtype=_F64)
    u, spread_sum = np.zeros(b), np.zeros(b)
    upto_carry, errors_carry = np.zeros(b), np.zeros(b)
    # cache-sized blocks of error groups (the running sums carried over): every elementwise
    # step then works in cache instead of streaming [R, b] temporaries through memory
    for start in range(0, r, _SELECTIVE_CHUNK):
        stop = min(start + _SELECTIVE_CHUNK, r)
        upto = np.cumsum(s[start:stop], axis=0)
        upto += upto_carry
        errors, correct = s[r + start : r + stop], s[2 * r + start : 2 * r + stop]
        errors_upto = np.cumsum(errors, axis=0)
        errors_upto += errors_carry
        upto_carry, errors_carry = upto[-1], errors_upto[-1]
        # correct points before the unit plus half of its own: upto - errors_upto - c / 2
        half = (upto - errors_upto) - 0.5 * correct
        u += np.einsum("ij,ij->j", errors, half)
        size = errors + correct
        # counts are exact integers in float64: the casts are exact
        spread = g[upto.astype(np.int64)] - g[(upto - size).astype(np.int64)]
        spread /= np.maximum(size, 1.0)  # an empty group has no errors
        spread_sum += np.einsum("ij,ij->j", errors, spread)
    total = errors_carry
    with np.errstate(divide="ignore", invalid="ignore"):
        auroc = u / (total * (n - total))
    aurc = (total * g[-1] - spread_sum) / n
    return torch.from_numpy(auroc), torch.from_numpy(aurc)
