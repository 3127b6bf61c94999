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

from bensemble.app._bootstrap_sums import Design, finish_statistic, selective_statistics

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
_TRANSPOSE_CHUNK = 4096
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


def _transposed(counts: torch.Tensor) -> torch.Tensor:
    """``counts [b, n]`` as a C-contiguous float64 ``[n, b]``; copied a cache-sized block of
    points at a time (about twice as fast as one strided copy of the whole block)."""
    b, n = counts.shape
    c, out = counts.numpy(), np.empty((n, b))  # numpy: no thread start per block
    for start in range(0, n, _TRANSPOSE_CHUNK):
        out[start : start + _TRANSPOSE_CHUNK] = c[:, start : start + _TRANSPOSE_CHUNK].T
    return torch.from_numpy(out)


def _weight_blocks(n: int, n_boot: int, *, seed: int) -> Iterator[torch.Tensor]:
    """The blocks of :func:`multinomial_weights`, point-major: ``[n, b]`` float64, C-contiguous
    (the layout the sparse product wants: each point's ``b`` weights side by side)."""
    g = torch.Generator().manual_seed(seed)
    block = max(1, _BLOCK_ENTRIES // max(n, 1))
    for start in range(0, n_boot, block):
        b = min(block, n_boot - start)
        idx = torch.randint(n, (b, n), generator=g)
        idx += torch.arange(b)[:, None] * n
        yield _transposed(torch.bincount(idx.view(-1), minlength=b * n).view(b, n))


def multinomial_weights(n: int, n_boot: int, *, seed: int) -> Iterator[torch.Tensor]:
    """Blocks ``[b, n]`` (float64) of multinomial counts, ``n_boot`` rows in all, each summing to n.

    One generator seeded with ``seed`` draws ``n`` indices per replicate in sequence, so the
    replicates do not depend on the block size.
    """
    for wt in _weight_blocks(n, n_boot, seed=seed):
        yield wt.T


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


class BootstrapPlan:
    """Statistics of one sample of ``n`` points, evaluated for many bootstrap replicates at once.

    Register statistics (:meth:`mean`, :meth:`binned_gap`, :meth:`eece`, :meth:`selective`),
    then :meth:`run` them over ``n_boot`` replicates (or :meth:`evaluate` them for given
    weights; all-ones weights give the statistics of the sample itself). Every statistic is a
    function of weighted per-row sums, and all rows of all statistics come from one sparse
    product per block of replicates.
    """

    def __init__(self, n: int) -> None:
        self.n = int(n)
        self._design = Design(self.n)
        self._stats: dict[Any, tuple[str, slice, Any]] = {}
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

    def mean(self, name: str, values: torch.Tensor) -> None:
        """``sum_i w_i v_i / n`` for per-point ``values [n]``."""
        v = torch.as_tensor(values, dtype=_F64).reshape(-1)
        rows = self._design.add(torch.zeros(self.n, dtype=torch.int64), v, 1)
        self._stats[name] = ("mean", rows, None)
        self._names.append(name)

    def binned_gap(self, name: str, ids: torch.Tensor, gaps: torch.Tensor, n_bins: int) -> None:
        """``mean_g sum_b |sum_i w_i gap_ig [id_ig = b]| / n``: the ECE (one group, ``gap =
        correct - confidence``) or the classwise ECE (``ids, gaps [n, K]``, ``gap = [y = k] -
        p_k``, ``ids`` in ``[0, n_bins)`` per class)."""
        ids = torch.as_tensor(ids).to(torch.int64)
        groups = 1 if ids.ndim == 1 else ids.shape[1]
        flat = ids.reshape(self.n, groups) + torch.arange(groups) * n_bins
        rows = self._design.add(flat, gaps, groups * n_bins)
        self._stats[name] = ("gap", rows, (groups, n_bins))
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
        ``outcome``, ``eu`` and ``flat_ids`` (``id + g * slots``) ``[G * n]``. Rows: per bin the
        weighted count, sum of outcomes (entries only where the outcome is non-zero), of EU and
        of every member's probability (a bin's ``h + 3`` rows adjacent)."""
        h, n = cols.shape[0], self.n
        size = groups * slots
        index = torch.int32 if (h + 3) * size < 2**31 else torch.int64
        ids = torch.as_tensor(flat_ids).to(index).reshape(groups, n).T  # [n, G]
        y = torch.as_tensor(outcome, dtype=_F64).reshape(groups, n).T
        # per point and group: count, EU and the h members' probabilities, in the rows of
        # their bin; a bin's h + 3 rows are adjacent, so a point's entries of one group hit
        # one small block of the output (cache-friendly, about 2x faster than row blocks)
        rows = ids[:, :, None] * (h + 3) + torch.tensor([0, *range(2, h + 3)], dtype=index)
        values = torch.empty(n, groups, h + 2, dtype=_F64)
        values[:, :, 0] = 1.0
        values[:, :, 1] = torch.as_tensor(eu, dtype=_F64).reshape(groups, n).T
        values[:, :, 2:] = torch.as_tensor(cols, dtype=_F64).reshape(h, groups, n).permute(2, 1, 0)
        rows, values = rows.reshape(n, -1), values.view(n, -1)
        if groups == 1 or bool(((y != 0).sum(1) <= 1).all()):
            # one-vs-rest outcomes: one entry per point, in its class's row (the rest are 0)
            k = y.abs().argmax(1, keepdim=True)
            y_rows, y = ids.gather(1, k) * (h + 3) + 1, y.gather(1, k)
        else:
            y_rows = ids * (h + 3) + 1
        rows, values = torch.cat([rows, y_rows], 1), torch.cat([values, y], 1)
        block = self._design.add(rows, values, (h + 3) * size)
        self._stats[name] = ("eece", block, (h, groups, slots))
        self._names.append(name)

    def selective(
        self, auroc_name: str, aurc_name: str, confidence: torch.Tensor, correct: torch.Tensor
    ) -> None:
        """Misclassification AUROC of the score ``-confidence`` (positives: the errors; ties count
        1/2, as :func:`bensemble.metrics.auroc`) and the AURC of ``confidence`` (ties spread
        evenly, as :func:`bensemble.metrics.aurc`).

        Points are sorted by decreasing confidence and cut into tie groups of equal confidence;
        a *unit* is a tie group holding both errors and correct points, or a maximal run of
        consecutive groups holding only errors. Both scores need three weighted sums per unit,
        design rows like any other: the weight of all points after the previous unit up to this
        one (a running sum gives the weight before the unit), the unit's errors and its correct
        points (see :func:`~bensemble.app._bootstrap_sums.selective_statistics`). ``correct``
        holds 0 and 1; weights must be integer counts (a resample's)."""
        correct = torch.as_tensor(correct, dtype=_F64).reshape(-1)
        if not bool(((correct == 0) | (correct == 1)).all()):
            raise ValueError("BootstrapPlan.selective: `correct` must hold only 0 and 1")
        c, order = torch.sort(torch.as_tensor(confidence, dtype=_F64), descending=True, stable=True)
        err = 1.0 - correct[order]
        _, group = torch.unique_consecutive(c, return_inverse=True)
        n_groups = int(group[-1]) + 1 if group.numel() else 0
        errors = torch.zeros(n_groups, dtype=_F64).index_add_(0, group, err)
        size = torch.bincount(group, minlength=n_groups)
        # 0: no error, 1: only errors, 2: both; a unit is a mixed group or a run of pure ones
        kind = (errors > 0).long() + ((errors > 0) & (errors < size)).long()
        previous = torch.cat([torch.zeros(1, dtype=torch.long), kind[:-1]])
        starts = torch.cumsum((kind == 2) | ((kind == 1) & (previous != 1)), 0)
        r = int(starts[-1]) if n_groups else 0
        if r == 0:  # no error: nothing to sum
            self._stats[(auroc_name, aurc_name)] = ("selective", slice(0, 0), 0)
            self._names += [auroc_name, aurc_name]
            return
        unit = (starts - (kind > 0).long())[group]  # the next unit at or after the point
        in_unit = (kind > 0)[group]
        point_rows = [unit.clamp_max(r - 1), torch.where(err > 0, r + unit, 2 * r + unit)]
        point_values = [(unit < r).to(_F64), in_unit.to(_F64)]
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(order.numel())
        rows = torch.stack(point_rows, 1).clamp_max(3 * r - 1)[inverse]
        block = self._design.add(rows, torch.stack(point_values, 1)[inverse], 3 * r)
        self._stats[(auroc_name, aurc_name)] = ("selective", block, r)
        self._names += [auroc_name, aurc_name]

    # ------------------------------------------------------------------ evaluation
    def run(self, n_boot: int, *, seed: int) -> dict[str, torch.Tensor]:
        """Every statistic for ``n_boot`` replicates: ``name -> [n_boot]`` float64."""
        matrix = self._design.matrix()
        parts = [self._block(w, matrix) for w in _weight_blocks(self.n, n_boot, seed=seed)]
        if not parts:
            return {k: torch.empty(0, dtype=_F64) for k in self._names}
        return {k: torch.cat([p[k] for p in parts]) for k in self._names}

    def evaluate(self, weights: torch.Tensor) -> dict[str, torch.Tensor]:
        """Every statistic for the given weights ``[b, n]`` (rows summing to ``n``)."""
        wt = torch.as_tensor(weights, dtype=_F64).T.contiguous()
        return self._block(wt, self._design.matrix())

    def _block(self, wt: torch.Tensor, matrix: Any) -> dict[str, torch.Tensor]:
        """The statistics of the replicates whose weights are the columns of ``wt [n, b]``."""
        if matrix is None:
            return {}
        sums = np.asarray(matrix @ wt.numpy())  # [rows, b]
        out: dict[str, torch.Tensor] = {}
        for name, (kind, rows, shape) in self._stats.items():
            if kind == "selective":
                out[name[0]], out[name[1]] = selective_statistics(
                    sums[rows], shape, self.n, self._g()
                )
            else:
                out[name] = finish_statistic(kind, torch.from_numpy(sums[rows]), shape, self.n)
        return out

    def _g(self) -> np.ndarray:
        """``G[m] = sum_{t < m} H[t] = m (H[m] - 1)`` for ``m = 0..n`` (``H`` the harmonic
        numbers, ``H[0] = 0``), with ``H[n]`` appended last."""
        if getattr(self, "_g_table", None) is None:
            steps = 1.0 / np.arange(1, self.n + 1, dtype=np.float64)
            h = np.concatenate([[0.0], np.cumsum(steps)])
            self._g_table = np.append(np.arange(self.n + 1) * (h - 1.0), h[-1])
        return self._g_table


def calibrated_ece_null(
    confidence: torch.Tensor, ids: torch.Tensor, n_bins: int, n_draws: int, *, seed: int
) -> torch.Tensor:
    """ECE of ``n_draws`` label sets redrawn from the model itself (``correct_i ~ Bernoulli(
    confidence_i)``), bins ``ids [n]`` fixed: what a perfectly calibrated model with these
    confidences would score at this sample size. Returns ``[n_draws]``.

    A draw is ``u_i < confidence_i`` with ``u`` uniform (exactly ``torch.bernoulli``'s draw
    from the same generator); per bin, ``sum (correct - confidence) = (successes) - (sum of
    confidences)``, the successes from one weighted ``bincount`` per block of draws."""
    c = torch.as_tensor(confidence, dtype=_F64).reshape(-1)
    n = c.shape[0]
    ids = torch.as_tensor(ids).to(torch.int64).reshape(-1)
    expected = torch.bincount(ids, weights=c, minlength=n_bins)
    g = torch.Generator().manual_seed(seed)
    block = max(1, _BLOCK_ENTRIES // max(n, 1))
    out = []
    for start in range(0, n_draws, block):
        b = min(block, n_draws - start)
        hits = torch.rand(b, n, generator=g, dtype=_F64).lt_(c)  # 1.0 where drawn correct
        flat = (ids + torch.arange(b)[:, None] * n_bins).view(-1)
        sums = torch.bincount(flat, weights=hits.view(-1), minlength=b * n_bins)
        out.append((sums.view(b, n_bins) - expected).abs().sum(1) / n)
    return torch.cat(out) if out else torch.empty(0, dtype=_F64)
