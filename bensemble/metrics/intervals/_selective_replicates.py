r"""Poisson-bootstrap replicates of the misclassification AUROC and the AURC (exact, end of pass).

These two are ranking statistics: they need every confidence at once (as their point values do:
``bensemble evaluate`` already gathers the confidence and correctness of every sample for them),
so they are not a mergeable per-bin state. They use the same counter-based weights as the
states, so sharding never changes them either: :func:`selective_replicates` sorts the samples by
confidence once and computes every replicate exactly from per-tie-group weighted counts, a
block of replicates at a time (weights regenerated from the samples' global indices).

With the samples in decreasing confidence, tie group ``g`` holding weight ``s_g`` of which
``e_g`` errors and ``c_g = s_g - e_g`` correct, ``a_g`` the weight before it (``E_g``, ``C_g``
its errors and correct points), ``E``, ``C``, ``W`` the totals:

* misclassification AUROC of the score ``1 - confidence`` (ties count one half, as
  :func:`~bensemble.metrics.auroc`): ``sum_g e_g (C_g + c_g / 2) / (E C)``; NaN without an error
  or without a correct point;
* AURC ``(1/W) sum_{i=1..W} err(i) / i`` with the errors of a group spread evenly over its
  positions ``a_g + 1 .. a_g + s_g`` (:func:`~bensemble.metrics.aurc`'s ties): an error at
  position ``p`` adds ``H[W] - H[p - 1]`` (``H`` the harmonic numbers), so
  ``W AURC = E H[W] - sum_g [e_g (H[a_g + s_g] - 1) + (e_g / s_g) a_g (H[a_g + s_g] - H[a_g])]``.

Only *units* need these sums: a tie group holding errors and correct points, or a maximal run
of groups holding only errors (over such a run both formulas telescope to one term); groups of
correct points add only weight. Cost: one segment sum of the counts over all samples, the rest
over the units (about 0.6 s of CPU for 200,000 samples x 200 replicates; ``python
benchmarks/bench_interval_coverage.py --bundle`` times it with the rest of a report).

Integer weights are resample counts, so replicate ``r`` is exactly the statistic of the data
repeated ``w[:, r]`` times; row 0 (unit weights) is the point value. :func:`selective_intervals`
turns the rows into percentile intervals, which is also how ``bensemble evaluate`` reports them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from bensemble._validation import as_binary, as_float_tensor
from bensemble.metrics.intervals._interval import Interval, percentile_interval
from bensemble.metrics.intervals._poisson import resolve_seed, sample_indices, weight_block
from bensemble.metrics.intervals._replicates import LEVEL, check_level, check_replicates

__all__ = ["selective_intervals", "selective_replicates"]

_BLOCK_ENTRIES = 1 << 22  # weights of one block of replicates: [n, b], about 32 MiB as int64


def _check(confidence: Any, correct: Any, sample_index: Any, fn: str):
    c = as_float_tensor(confidence, "confidence", fn, ndim=1).cpu().numpy()
    ok = as_binary(correct, "correct", fn, n=c.shape[0], dtype=torch.bool).cpu().numpy()
    index = sample_indices(sample_index, fn)
    if index.shape[0] != c.shape[0]:
        raise ValueError(
            f"{fn}: `sample_index` must have one global index per sample ({c.shape[0]}) "
            f"(got {index.shape[0]})"
        )
    return c, ok, index


def selective_replicates(
    confidence: Any,
    correct: Any,
    sample_index: Any,
    n_replicates: int = 200,
    *,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Misclassification AUROC and AURC of the data (row 0) and of ``R`` Poisson replicates.

    Args:
        confidence: ``[n]`` confidence ``max_k p_k`` (larger = more confident).
        correct: ``[n]`` 1 where the prediction is right (bool, int or 0/1 float).
        sample_index: ``[n]`` global indices of the samples (``range`` or integers): the same as
            the replicate states saw, so the weights are theirs.
        n_replicates: replicates ``R``.
        seed: the states' seed (an integer; resolve ``None`` once, e.g. ``ReplicateState.seed``).

    Returns:
        ``(auroc [R + 1], aurc [R + 1])`` float64 (AUROC NaN where a replicate has no error or no
        correct point; AURC NaN where a replicate holds no sample at all, every weight 0: with
        ``n`` samples that happens in ``exp(-n)`` of the replicates).

    Example:
        >>> auroc, aurc = selective_replicates([0.9, 0.8, 0.7, 0.6], [1, 1, 0, 0], range(4), 5)
        >>> float(auroc[0]), round(float(aurc[0]), 6)
        (1.0, 0.208333)
    """
    fn = "selective_replicates"
    c, ok, index = _check(confidence, correct, sample_index, fn)
    r = check_replicates(n_replicates, fn)
    seed = resolve_seed(seed, fn)
    order = np.argsort(-c, kind="stable")
    c, err, index = c[order], ~ok[order], index[order]
    n = c.shape[0]
    first, last, err_pos, first_err = _units(c, err)
    # the samples between and inside units, as segments: [0, first_0, last_0 + 1, first_1, ...]
    cuts = np.unique(np.r_[0, first, last + 1])
    cuts = cuts[cuts < n]
    at_first, at_end = np.searchsorted(cuts, first), np.searchsorted(cuts, last + 1)
    block = max(2, (_BLOCK_ENTRIES // max(n, 1)) // 2 * 2)
    harmonic = np.zeros(1)
    auroc, aurc = np.empty(r + 1), np.empty(r + 1)
    blocks = [(None, slice(0, 1))]  # the unit weights (row 0), then blocks of replicates
    blocks += [(f, slice(f + 1, min(r, f + block) + 1)) for f in range(0, r, block)]
    for start, rows in blocks:
        if start is None:
            w = np.ones((n, 1), dtype=np.uint8)
        else:  # [n, b] counts in decreasing confidence; sums over runs of whole rows
            w = weight_block(index, rows.stop - rows.start, seed, first_replicate=start)
        if first.size == 0:  # no error: no error in any replicate
            auroc[rows], aurc[rows] = np.nan, 0.0
            continue
        upto = np.cumsum(np.add.reduceat(w, cuts, axis=0, dtype=np.int64), 0)  # [segments, b]
        upto = np.concatenate([np.zeros((1, w.shape[1]), np.int64), upto]).astype(np.float64)
        before, total = upto[at_first], upto[-1]  # weight before each unit [U, b]; totals [b]
        size = upto[at_end] - before
        e = np.add.reduceat(w[err_pos], first_err, axis=0, dtype=np.int64).astype(np.float64)
        errors_before = np.cumsum(e, 0) - e
        errors = errors_before[-1] + e[-1]
        with np.errstate(invalid="ignore", divide="ignore"):
            half = before - errors_before + 0.5 * (size - e)
            auroc[rows] = np.einsum("ub,ub->b", e, half) / (errors * (total - errors))
        top = int(total.max())
        if harmonic.shape[0] <= top:
            harmonic = np.r_[0.0, np.cumsum(1.0 / np.arange(1, top + 1, dtype=np.float64))]
        low = before.astype(np.int64)
        high = harmonic[low + size.astype(np.int64)]
        share = np.divide(e, size, out=np.zeros_like(e), where=size > 0)
        # W AURC = E H[W] - sum_u [e_u (H[a_u + s_u] - 1) + (e_u / s_u) a_u (H[a_u + s_u] - H[a_u])]
        spread = np.einsum("ub,ub->b", e, high - 1.0)
        spread += np.einsum("ub,ub->b", share * before, high - harmonic[low])
        with np.errstate(invalid="ignore", divide="ignore"):
            aurc[rows] = (errors * harmonic[total.astype(np.int64)] - spread) / total
    return torch.from_numpy(auroc), torch.from_numpy(aurc)


def _units(c: np.ndarray, err: np.ndarray) -> tuple[np.ndarray, ...]:
    """Units of the sorted samples (``c`` decreasing): a tie group holding both errors and
    correct points, or a maximal run of groups holding only errors (correct-only groups add
    only weight). Returns the first and last sample of every unit, the positions of the errors
    and, per unit, the index (among the errors) of its first error."""
    n = c.shape[0]
    starts = np.flatnonzero(np.r_[True, c[1:] != c[:-1]])
    ends = np.r_[starts[1:], n] - 1
    errors = np.add.reduceat(err.astype(np.int64), starts) if n else np.zeros(0, np.int64)
    size = ends - starts + 1
    kind = (errors > 0).astype(np.int8) + ((errors > 0) & (errors < size))  # 0, 1 pure, 2 mixed
    previous = np.r_[0, kind[:-1]]
    opens = (kind == 2) | ((kind == 1) & (previous != 1))
    closes = (kind == 2) | ((kind == 1) & (np.r_[kind[1:], 0] != 1))
    first, last = starts[opens], ends[closes]
    err_pos = np.flatnonzero(err)
    first_err = np.searchsorted(err_pos, first, side="left")
    return first, last, err_pos, first_err


def selective_intervals(
    auroc: Any, aurc: Any, *, level: float = LEVEL
) -> dict[str, Interval | None]:
    """Percentile intervals of the misclassification AUROC and the AURC from their replicates.

    Args:
        auroc, aurc: ``[R + 1]`` each, as :func:`selective_replicates` returns them: row 0 the
            data's value, then ``R >= 1`` replicates (NaN where a replicate has none).
        level: the intervals' confidence level in ``(0, 1)``.

    Returns:
        ``{"error_auroc": Interval | None, "aurc": Interval | None}``. A metric gets ``None``
        rather than an interval when its data value is not finite (an AUROC without an error
        or without a correct point) or when fewer than half of its replicates are finite:
        no zero-width interval stands in for a missing one. Both cover the population value
        of the fixed model's ranking (sampling variability of the evaluated points).

    Example:
        >>> reps = selective_replicates([0.9, 0.8, 0.7, 0.6] * 25, [1, 1, 0, 1] * 25, range(100))
        >>> out = selective_intervals(*reps, level=0.9)
        >>> out["aurc"].low <= out["aurc"].point <= out["aurc"].high
        True
    """
    fn = "selective_intervals"
    level = check_level(level, fn)
    rows = {}
    for name, values in (("auroc", auroc), ("aurc", aurc)):
        rows[name] = as_float_tensor(values, name, fn, ndim=1, finite=False).to(torch.float64)
        if rows[name].shape[0] < 2:
            raise ValueError(
                f"{fn}: `{name}` must hold the data's value and at least one replicate "
                f"([R + 1], R >= 1) (got {rows[name].shape[0]} values)"
            )
    if rows["auroc"].shape != rows["aurc"].shape:
        raise ValueError(
            f"{fn}: `aurc` must have the shape of `auroc` {tuple(rows['auroc'].shape)} "
            f"(got {tuple(rows['aurc'].shape)})"
        )
    out: dict[str, Interval | None] = {}
    for name, values, what in (
        ("error_auroc", rows["auroc"], "misclassification AUROC of the score 1 - confidence"),
        ("aurc", rows["aurc"], "area under the risk-coverage curve of the confidence"),
    ):
        point = float(values[0])
        ci = percentile_interval(values[1:], level) if math.isfinite(point) else None
        if ci is None:
            out[name] = None
            continue
        covers = f"the population {what} (the model fixed; sampling variability of the points)"
        n_replicates = values.shape[0] - 1
        out[name] = Interval(point, ci[0], ci[1], level, "percentile", covers, point, n_replicates)
    return out
