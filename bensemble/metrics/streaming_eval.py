"""The classwise EECE of member predictions larger than memory: its K-means fit and its sums,
streamed over a row source a chunk of rows at a time.

A *row source* is anything that reads validated float64 member probabilities ``[M, b, K]`` of a
dataset of ``N`` rows on demand (:class:`~bensemble.metrics._chunked_rows.MemberRows` over one
array, or the multi-shard sources of :mod:`bensemble.app.evaluate`): attributes ``m``, ``n``,
``k``, and methods ``slice(start, stop)``, ``take(rows)`` (distinct rows, in that order) and
``release(force=False)``. The functions here give the *same* partition and the same per-bin sums
as :func:`~bensemble.metrics.expected_epistemic_calibration_error` (classwise, K-means bins, its
default stopping rule) on the rows ``positions`` of the source, read instead of held:

1. :func:`canonical_order_chunked` puts the members in the EECE's canonical order (a byte-wise
   sort of each member's whole prediction array, :func:`~bensemble.metrics._epistemic_checks.
   canonical_member_order`) from the first chunk(s): a later chunk is read only while two
   members are bit-identical so far;
2. :func:`fit_classwise_centroids` fits every class's K-means exactly as the in-memory batched
   fit does (same seed, same subsample rows, same seeding and Lloyd steps, same stopping rule),
   on the subsample rows gathered from the source once for all classes; the ``refine`` Lloyd
   steps over every row each take one streamed pass that serves every class and every seed at
   once (per-centroid sums and counts, float64);
3. :class:`EECESums` assigns each chunk's member vectors to the nearest centroid (float64, as
   the in-memory assignment) and accumulates the per-bin sums; states merge by addition, so
   chunks, shards and workers combine to the one-shot value up to float64 summation order;
   :func:`eece_result` turns the sums of one state per K-means seed into the reported numbers
   and the :class:`~bensemble.metrics.epistemic.EECEDetails` of the first seed.

Memory: a chunk, the subsample columns of a group of classes (``subsample x M`` float64 each;
classes are fitted a group at a time when all of them would not fit :data:`FIT_BUDGET` bytes, each
group reading the subsample rows once) and the ``O(K * bins * M)`` sums.
"""

from __future__ import annotations

import statistics
import warnings
from typing import Any

import numpy as np
import torch

from bensemble.metrics._chunked_rows import MemberRows, open_memmap
from bensemble.metrics._eece_stats import _eece_compute, _eece_update, _member_variance
from bensemble.metrics._epistemic_checks import WARN_OCCUPANCY
from bensemble.metrics._streaming_kmeans import FIT_BUDGET, _part_blocks, fit_classwise_centroids
from bensemble.metrics.binning._nearest import _assign

__all__ = [
    "EECESums",
    "eece_columns",
    "FIT_BUDGET",
    "MemberRows",
    "canonical_order_chunked",
    "eece_result",
    "fit_classwise_centroids",
    "open_memmap",
]

_F64 = torch.float64


def canonical_order_chunked(
    source: Any, positions: np.ndarray | None = None, *, block: int = 65_536
) -> torch.Tensor | None:
    """The EECE's canonical member order of the part ``positions`` (in that order), read block
    by block: members are sorted by the bytes of their whole flattened float64 prediction array
    (:func:`~bensemble.metrics._epistemic_checks.canonical_member_order`). A byte-wise order is
    lexicographic, so each block only sorts the members still tied (bit-identical so far); the
    reading stops once no two are tied. ``None`` when the members are already in that order."""
    if source.m < 2:
        return None
    groups = [np.arange(source.m)]
    for p in _part_blocks(source, positions, block):
        if all(len(g) == 1 for g in groups):
            break
        flat = np.ascontiguousarray(p.reshape(source.m, -1).numpy())
        width = np.dtype((np.void, flat.shape[1] * flat.itemsize))
        refined = []
        for group in groups:
            if len(group) == 1:
                refined.append(group)
                continue
            keys = flat[group].view(width).ravel()
            group = group[np.argsort(keys, kind="stable")]  # stable: ties keep their order
            raw = flat[group].view(np.uint8)
            start = 0
            for i in range(1, len(group) + 1):
                if i == len(group) or not np.array_equal(raw[i], raw[start]):
                    refined.append(group[start:i])
                    start = i
        groups = refined
    order = np.concatenate(groups)
    return None if np.array_equal(order, np.arange(source.m)) else torch.from_numpy(order)


# ----------------------------------------------------------------------------- the sums
def eece_columns(member_probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The classwise EECE's member columns ``[M, K * b]`` (class-major) of ``member_probs
    [M, b, K]`` and their member variance ``[K * b]`` (the reported EU; its sum over a chunk is
    the chunk's sum of ``Var_m p_m(y = k)``)."""
    h, n, k = member_probs.shape
    cols = member_probs.permute(0, 2, 1).reshape(h, k * n)
    return cols, _member_variance(cols)


class EECESums:
    """Per-bin sums of the classwise EECE with fixed centroids (one K-means seed), chunk by chunk.

    ``update(member_probs [M, b, K], labels [b])`` (members in the canonical order) assigns every
    class's member vectors to their nearest centroid (float64) and adds the counts, outcomes,
    member variances and member probabilities of each bin (``_eece_update``, the one-shot EECE's
    kernel); it returns the bin ids ``[K, b]`` (for interval accumulators that keep the bins
    fixed). ``merge`` adds another state built on the same centroids.
    """

    def __init__(self, centroids: list[torch.Tensor]) -> None:
        self.centroids = [c.to(_F64) for c in centroids]
        self.k = len(self.centroids)
        self.slots = max(c.shape[0] for c in self.centroids)
        self.m = int(self.centroids[0].shape[1])
        size = self.k * self.slots
        self.counts = torch.zeros(size, dtype=_F64)
        self.sum_y = torch.zeros(size, dtype=_F64)
        self.sum_eu = torch.zeros(size, dtype=_F64)
        self.sum_p = torch.zeros(size, self.m, dtype=_F64)

    def update(
        self, member_probs: torch.Tensor, labels: torch.Tensor, columns: Any = None
    ) -> torch.Tensor:
        """Add a chunk; ``columns`` is :func:`eece_columns` of it when the caller has it."""
        h, n, k = member_probs.shape
        cols, eu = eece_columns(member_probs) if columns is None else columns
        outcome = (labels[None, :] == torch.arange(k)[:, None]).reshape(-1).to(_F64)
        ids = torch.stack(
            [_assign(cols[:, c * n : (c + 1) * n].T, self.centroids[c])[0] for c in range(k)]
        )
        flat = (ids + torch.arange(k)[:, None] * self.slots).reshape(-1)
        counts, sum_y, sum_eu, sum_p = _eece_update(cols, outcome, eu, flat, k * self.slots)
        self.counts += counts
        self.sum_y += sum_y
        self.sum_eu += sum_eu
        self.sum_p += sum_p
        return ids

    def merge(self, other: EECESums) -> EECESums:
        if other is self or other.counts.shape != self.counts.shape:
            raise ValueError(
                "EECESums.merge: `other` must be another state over the same bins (got "
                f"{'itself' if other is self else tuple(other.counts.shape)})"
            )
        for name in ("counts", "sum_y", "sum_eu", "sum_p"):
            getattr(self, name).add_(getattr(other, name))
        return self

    def value(self) -> float:
        stats = _eece_compute(self.counts, self.sum_y, self.sum_eu, self.sum_p)
        weighted = stats["weighted"].view(self.k, self.slots).sum(dim=1)
        return float((weighted / self.counts.view(self.k, self.slots).sum(dim=1)).mean())


def eece_result(sums: list[EECESums], seeds: list[int], n_bins: int, n: int) -> dict[str, Any]:
    """``eece`` (mean over seeds), ``eece_sd``, ``eece_seeds``, ``eece_bins`` and
    ``eece_bins_fitted`` as the in-memory EECE details report them, with its occupancy warning,
    and under ``"details"`` the :class:`~bensemble.metrics.epistemic.EECEDetails` of the first
    seed's partition (what the epistemic reliability diagram draws)."""
    from bensemble.metrics.epistemic import EECEDetails

    values = [s.value() for s in sums]
    first = sums[0]
    k = first.k
    stats = _eece_compute(first.counts, first.sum_y, first.sum_eu, first.sum_p)
    weighted = stats.pop("weighted").view(k, -1)
    fitted = int((first.counts.view(k, -1) > 0).sum(dim=1).max())
    if n / fitted < WARN_OCCUPANCY:
        warnings.warn(
            f"expected_epistemic_calibration_error: bins hold fewer than {WARN_OCCUPANCY} "
            "points on average (N / details.n_bins_fitted); the per-bin errors are "
            "noise-dominated - use fewer bins (n_bins='auto') or more points",
            UserWarning,
            stacklevel=2,
        )
    value = values[0] if len(values) == 1 else statistics.fmean(values)
    sd = statistics.stdev(values) if len(values) > 1 else None
    details = EECEDetails(
        value=value,
        **{key: v.view(k, -1) for key, v in stats.items()},
        per_class=weighted.sum(dim=1) / n,
        binning="kmeans",
        backend="torch",
        seed=seeds[0],
        n_bins=n_bins,
        n_bins_fitted=fitted,
        seeds=tuple(seeds),
        seed_values=tuple(values),
        seed_sd=sd,
    )
    return {
        "eece": value,
        "eece_sd": sd,
        "eece_seeds": len(seeds),
        "eece_bins": n_bins,
        "eece_bins_fitted": fitted,
        "details": details,
    }
