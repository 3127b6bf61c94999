"""Percentile bootstrap intervals for the reports of ``bensemble evaluate`` and ``bensemble demo``.

A bootstrap replicate resamples the ``n`` reported points with replacement; replicate ``b`` is
described by its multinomial counts ``w[b, i]`` (how often point ``i`` was drawn; ``sum_i w[b, i]
= n``). Every headline metric is a function of weighted sums over points, so all replicates are
computed at once, never one Python iteration per replicate:

* means (accuracy, NLL, Brier, coverage, set size, ...): ``w @ v / n``;
* binned calibration gaps (ECE, classwise ECE) with the bins of the full sample held fixed (an
  equal-width bin does not move when points are resampled): per-bin sums ``A @ w.T`` with a sparse
  ``[bins, n]`` design ``A`` (one column product per block of replicates), then
  ``sum_b |sum_{i in b} w_i (correct_i - conf_i)| / n``;
* the EECE with the K-means partition of the full sample held fixed (the centroids are *not*
  refitted per replicate; the interval therefore leaves out the variability of the clustering);
* ranking metrics (misclassification AUROC, AURC) from per-tie-group weighted counts in one
  sort by confidence: the
  Mann-Whitney statistic with ties counted one half, and the AURC of the resample in closed form
  with harmonic numbers (a point drawn ``w`` times forms ``w`` tied copies).

Replicates are drawn in blocks of at most ``2**23 / n`` (about 40 at ``n = 200,000``) to bound
memory; one ``torch.Generator`` seeded with ``seed`` draws them in sequence, so the result does not
depend on the block size. The interval is the percentile interval ``[q_{2.5%}, q_{97.5%}]`` of the
replicate values (NaN replicates, e.g. an AUROC of a resample without errors, are left out); for
the binned calibration errors (ECE, classwise ECE, EECE), which resampling biases upwards, it is
shifted down by the bootstrap bias estimate (:func:`percentile_interval`).
:func:`calibrated_ece_null` gives the ECE's sampling distribution for a perfectly calibrated
model with the same confidences (labels redrawn from the confidences), the reference the verdict
of :mod:`bensemble.app.verdict` compares the ECE with.

Example:
    >>> plan = BootstrapPlan(4)
    >>> plan.mean("accuracy", torch.tensor([1.0, 1.0, 0.0, 1.0]))
    >>> values = plan.run(200, seed=0)["accuracy"]
    >>> values.shape, percentile_interval(values)[0] <= 0.75 <= percentile_interval(values)[1]
    (torch.Size([200]), True)
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

__all__ = [
    "DEFAULT_BOOTSTRAP",
    "LEVEL",
    "MAX_BOOTSTRAP",
    "MAX_DESIGN_ENTRIES",
    "BootstrapPlan",
    "calibrated_ece_null",
    "check_bootstrap",
    "multinomial_weights",
    "percentile_interval",
]

#: Replicates of ``--bootstrap`` when not given.
DEFAULT_BOOTSTRAP = 200
#: Most replicates accepted.
MAX_BOOTSTRAP = 100_000
#: Coverage of the percentile intervals.
LEVEL = 0.95
_BLOCK_ENTRIES = 1 << 23
#: Most non-zero entries of the sparse design (about 1.6 GB with its indices); a statistic that
#: would exceed it is skipped (:meth:`BootstrapPlan.room`) and reported without an interval.
MAX_DESIGN_ENTRIES = 1 << 26
_F64 = torch.float64


def check_bootstrap(value: Any, name: str, fn: str) -> int:
    """A replicate count in ``[0, MAX_BOOTSTRAP]`` (0 switches the bootstrap off)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Integral)
        or not 0 <= int(value) <= MAX_BOOTSTRAP
    ):
        raise ValueError(
            f"{fn}: `{name}` must be an integer in [0, {MAX_BOOTSTRAP}] (0 disables the "
            f"bootstrap) (got {value!r})"
        )
    return int(value)


def multinomial_weights(n: int, n_boot: int, *, seed: int) -> Iterator[torch.Tensor]:
    """Blocks ``[b, n]`` (float64) of multinomial counts, ``n_boot`` rows in all, each summing to n.

    One generator seeded with ``seed`` draws ``n`` indices per replicate in sequence, so the
    replicates do not depend on the block size.
    """
    g = torch.Generator().manual_seed(seed)
    block = max(1, _BLOCK_ENTRIES // max(n, 1))
    for start in range(0, n_boot, block):
        b = min(block, n_boot - start)
        idx = torch.randint(n, (b, n), generator=g)
        idx += torch.arange(b)[:, None] * n
        yield torch.bincount(idx.view(-1), minlength=b * n).view(b, n).to(_F64)


def percentile_interval(
    values: torch.Tensor, level: float = LEVEL, *, debias_from: float | None = None
) -> tuple[float, float] | None:
    """``(low, high)`` percentiles of the finite replicate values; ``None`` if under half are.

    With ``debias_from`` (the sample's own value ``v``), both ends move down by the bootstrap
    bias estimate ``mean(values) - v`` and are clamped at 0. This is for the binned calibration
    errors: an absolute value of a noisy per-bin sum is biased upwards, and a resample (whose
    duplicated points add noise) more so, so their raw percentile interval sits above the value.
    """
    v = values[torch.isfinite(values)]
    if v.numel() == 0 or 2 * v.numel() < values.numel():
        return None
    q = torch.tensor([(1.0 - level) / 2.0, (1.0 + level) / 2.0], dtype=v.dtype)
    low, high = torch.quantile(v, q).tolist()
    if debias_from is not None:
        bias = float(v.mean()) - debias_from
        low, high = max(low - bias, 0.0), max(high - bias, 0.0)
    return float(low), float(high)


class _Design:
    """Rows of a sparse ``[rows, n]`` matrix, added statistic by statistic."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.rows: list[np.ndarray] = []
        self.cols: list[np.ndarray] = []
        self.vals: list[np.ndarray] = []
        self.size = 0
        self.entries = 0

    def add(self, ids: torch.Tensor, points: torch.Tensor, values: torch.Tensor, slots: int):
        start = self.size
        self.rows.append(ids.reshape(-1).to(torch.int64).numpy() + start)
        self.cols.append(points.reshape(-1).to(torch.int64).numpy())
        self.vals.append(values.reshape(-1).to(_F64).numpy())
        self.size += slots
        self.entries += self.vals[-1].shape[0]
        return slice(start, start + slots)

    def matrix(self):
        from scipy import sparse

        if not self.rows:
            return None
        data = (np.concatenate(self.vals), (np.concatenate(self.rows), np.concatenate(self.cols)))
        # CSC (one column per point): the product with a row-major [n, b] block walks both once
        return sparse.csc_matrix(data, shape=(self.size, self.n))


class BootstrapPlan:
    """Statistics of one sample of ``n`` points, evaluated for many bootstrap replicates at once.

    Register statistics (:meth:`mean`, :meth:`binned_gap`, :meth:`eece`, :meth:`auroc`,
    :meth:`aurc`), then :meth:`run` them over ``n_boot`` replicates (or :meth:`evaluate` them for
    given weights; all-ones weights give the statistics of the sample itself).
    """

    def __init__(self, n: int) -> None:
        self.n = int(n)
        self._design = _Design(self.n)
        self._binned: dict[str, Any] = {}
        self._ranked: dict[str, Any] = {}
        self._names: list[str] = []  # registration order
        #: statistics left out because their design would not fit (:meth:`room`)
        self.skipped: list[str] = []

    # ------------------------------------------------------------------ registration
    def room(self, name: str, entries: int) -> bool:
        """Whether a statistic of ``entries`` design entries fits :data:`MAX_DESIGN_ENTRIES`;
        if not, ``name`` is added to :attr:`skipped` (the caller registers nothing)."""
        if self._design.entries + entries <= MAX_DESIGN_ENTRIES:
            return True
        self.skipped.append(name)
        return False

    def _points(self, repeat: int = 1) -> torch.Tensor:
        return torch.arange(self.n).repeat_interleave(repeat)

    def mean(self, name: str, values: torch.Tensor) -> None:
        """``sum_i w_i v_i / n`` for per-point ``values [n]``."""
        v = torch.as_tensor(values, dtype=_F64).reshape(-1)
        rows = self._design.add(torch.zeros(self.n), self._points(), v, 1)
        self._binned[name] = ("mean", rows, None)
        self._names.append(name)

    def binned_gap(self, name: str, ids: torch.Tensor, gaps: torch.Tensor, n_bins: int) -> None:
        """``mean_g sum_b |sum_i w_i gap_ig [id_ig = b]| / n``: the ECE (one group, ``gap =
        correct - confidence``) or the classwise ECE (``ids, gaps [n, K]``, ``gap = [y = k] -
        p_k``, ``ids`` in ``[0, n_bins)`` per class)."""
        ids = torch.as_tensor(ids).to(torch.int64)
        groups = 1 if ids.ndim == 1 else ids.shape[1]
        flat = (ids.reshape(self.n, groups) + torch.arange(groups) * n_bins).reshape(-1)
        rows = self._design.add(flat, self._points(groups), gaps, groups * n_bins)
        self._binned[name] = ("gap", rows, (groups, n_bins))
        self._names.append(name)

    def eece(
        self,
        name: str,
        cols: torch.Tensor,
        outcome: torch.Tensor,
        eu: torch.Tensor,
        flat_ids: torch.Tensor,
        groups: int,
        slots: int,
    ) -> None:
        """The EECE with a fixed partition: ``cols [H, G * n]`` member probabilities (group-major),
        ``outcome``, ``eu`` and ``flat_ids`` (``id + g * slots``) ``[G * n]``."""
        h = cols.shape[0]
        points = torch.arange(self.n).repeat(groups)
        size = groups * slots
        first = self._design.add(flat_ids, points, torch.ones(flat_ids.shape[0]), size)
        for values in (outcome, eu, *cols):
            self._design.add(flat_ids, points, values, size)
        rows = slice(first.start, first.start + (h + 3) * size)
        self._binned[name] = ("eece", rows, (h, groups, slots))
        self._names.append(name)

    def selective(
        self, auroc_name: str, aurc_name: str, confidence: torch.Tensor, correct: torch.Tensor
    ) -> None:
        """Misclassification AUROC of the score ``-confidence`` (positives: the errors; ties count
        1/2, as :func:`bensemble.metrics.auroc`) and the AURC of ``confidence`` (ties spread
        evenly, as :func:`bensemble.metrics.aurc`): both from one pass of per-tie-group weights
        in decreasing confidence."""
        c, order = torch.sort(torch.as_tensor(confidence, dtype=_F64), descending=True, stable=True)
        _, inverse = torch.unique_consecutive(c, return_inverse=True)
        distinct = int(inverse[-1]) + 1 if inverse.numel() else 0
        err = 1.0 - torch.as_tensor(correct, dtype=_F64)[order]
        grouping = None if distinct == self.n else inverse  # no ties: a group is a point
        self._ranked[(auroc_name, aurc_name)] = (order, grouping, distinct, err)
        self._names += [auroc_name, aurc_name]

    # ------------------------------------------------------------------ evaluation
    def run(self, n_boot: int, *, seed: int) -> dict[str, torch.Tensor]:
        """Every statistic for ``n_boot`` replicates: ``name -> [n_boot]`` float64."""
        matrix = self._design.matrix()
        parts = [self._block(w, matrix) for w in multinomial_weights(self.n, n_boot, seed=seed)]
        if not parts:
            return {k: torch.empty(0, dtype=_F64) for k in self._names}
        return {k: torch.cat([p[k] for p in parts]) for k in self._names}

    def evaluate(self, weights: torch.Tensor) -> dict[str, torch.Tensor]:
        """Every statistic for the given weights ``[b, n]`` (rows summing to ``n``)."""
        return self._block(torch.as_tensor(weights, dtype=_F64), self._design.matrix())

    def _block(self, w: torch.Tensor, matrix: Any) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        if matrix is not None:
            sums = torch.from_numpy(np.asarray(matrix @ np.ascontiguousarray(w.T.numpy())))
            for name, (kind, rows, shape) in self._binned.items():
                out[name] = _finish(kind, sums[rows], shape, self.n)
        for (auroc_name, aurc_name), (order, grouping, groups, err) in self._ranked.items():
            size = w[:, order]
            errors = size * err
            if grouping is not None:
                zeros = torch.zeros(w.shape[0], groups, dtype=_F64)
                size = zeros.index_add(1, grouping, size)
                errors = zeros.index_add(1, grouping, errors)
            out[auroc_name], out[aurc_name] = _selective(size, errors, self._harmonic())
        return out

    def _harmonic(self) -> torch.Tensor:
        """``H[m] = sum_{i <= m} 1 / i`` for ``m = 0..n`` (``H[0] = 0``)."""
        if getattr(self, "_h", None) is None:
            steps = 1.0 / torch.arange(1, self.n + 1, dtype=_F64)
            self._h = torch.cat([torch.zeros(1, dtype=_F64), torch.cumsum(steps, 0)])
        return self._h


def _finish(kind: str, s: torch.Tensor, shape: Any, n: int) -> torch.Tensor:
    """A statistic from its per-row weighted sums ``s [rows, b]``."""
    if kind == "mean":
        return s[0] / n
    if kind == "gap":
        groups, n_bins = shape
        return s.abs().view(groups, n_bins, -1).sum(1).mean(0) / n
    h, groups, slots = shape
    s = s.view(h + 3, groups * slots, -1)
    counts, sum_y, sum_eu, sum_p = s[0], s[1], s[2], s[3:]
    denom = counts.clamp_min(1.0)
    acc = sum_y / denom
    squared_error = ((acc[None] - sum_p / denom[None]) ** 2).mean(0)
    weighted = torch.where(counts > 0, counts * (squared_error - sum_eu / denom).abs(), 0.0)
    return weighted.view(groups, slots, -1).sum(1).mean(0) / n


def _selective(
    size: torch.Tensor, errors: torch.Tensor, harmonic: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per replicate, from group weights / weighted errors ``[b, G]`` in decreasing confidence
    (``harmonic [n + 1]``: the harmonic numbers, ``n`` the points of every replicate):

    * AUROC of the errors under the score ``-confidence``: ``sum_g e_g (C_g + c_g / 2) / (E C)``
      with ``c_g = s_g - e_g`` the correct points of group ``g`` and ``C_g`` those of the groups
      before it (more confident, i.e. a lower score); NaN without errors or without correct points;
    * AURC: positions ``a+1..a+s`` of a group (``a`` points before it, ``E_g`` errors before it)
      hold ``E_g + (i - a) e / s`` errors, so ``sum_i err(i) / i`` over the group is
      ``(H[a + s] - H[a]) (E_g - a e / s) + e``.
    """
    n = harmonic.shape[0] - 1
    upto = torch.cumsum(size, 1)
    before = upto - size
    errors_before = torch.cumsum(errors, 1) - errors
    total_errors = errors.sum(1)
    correct_here = size - errors
    u = (errors * (before - errors_before + 0.5 * correct_here)).sum(1)
    auroc = u / (total_errors * (n - total_errors))
    # counts are exact integers in float64: .long() is exact
    d_h = harmonic[upto.long()] - harmonic[before.long()]
    rate = errors / size.clamp_min(1.0)  # an empty group has no errors: 0
    aurc = ((d_h * (errors_before - rate * before)).sum(1) + total_errors) / n
    return auroc, aurc


def calibrated_ece_null(
    confidence: torch.Tensor, ids: torch.Tensor, n_bins: int, n_draws: int, *, seed: int
) -> torch.Tensor:
    """ECE of ``n_draws`` label sets redrawn from the model itself (``correct_i ~ Bernoulli(
    confidence_i)``), bins ``ids [n]`` fixed: what a perfectly calibrated model with these
    confidences would score at this sample size. Returns ``[n_draws]``."""
    c = torch.as_tensor(confidence, dtype=_F64).reshape(-1)
    n = c.shape[0]
    design = _Design(n)
    design.add(torch.as_tensor(ids), torch.arange(n), torch.ones(n), n_bins)
    matrix = design.matrix()
    g = torch.Generator().manual_seed(seed)
    block = max(1, _BLOCK_ENTRIES // max(n, 1))
    out = []
    for start in range(0, n_draws, block):
        b = min(block, n_draws - start)
        gaps = torch.bernoulli(c.expand(b, n), generator=g) - c
        sums = np.asarray(matrix @ np.ascontiguousarray(gaps.T.numpy()))
        out.append(torch.from_numpy(np.abs(sums).sum(0)) / n)
    return torch.cat(out) if out else torch.empty(0, dtype=_F64)
