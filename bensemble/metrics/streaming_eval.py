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
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from bensemble import _progress
from bensemble.metrics._chunked_rows import MemberRows, open_memmap
from bensemble.metrics._eece_stats import _eece_compute, _eece_update, _member_variance
from bensemble.metrics._epistemic_checks import WARN_OCCUPANCY
from bensemble.metrics._kmeans import DEFAULT_LLOYD_RTOL, DEFAULT_REFINE, DEFAULT_SUBSAMPLE
from bensemble.metrics._kmeans_assign import _assign, _chunks, _n_distinct_at_least
from bensemble.metrics._kmeans_classes import _lloyd_batch, _seed_batch
from bensemble.metrics._kmeans_core import _fit_torch, _kmeans_plusplus, _lloyd

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

_F32, _F64 = torch.float32, torch.float64
#: Bytes of subsample columns held at once while fitting (classes beyond it: another group).
FIT_BUDGET = 256 << 20
_MAX_ITER, _TOL = 300, 1e-4


def _part_blocks(source: Any, positions: np.ndarray | None, block: int) -> Iterator[torch.Tensor]:
    """The part ``positions`` (in that order; ``None``: every row) block by block."""
    n_part = source.n if positions is None else len(positions)
    for start in range(0, n_part, block):
        if positions is None:
            yield source.slice(start, start + block)
        else:
            yield source.take(positions[start : start + block])
        source.release()


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


# ----------------------------------------------------------------------------- the fit
class _ClassFit:
    """One class's fit for one seed: its subsample columns, the state of its generator after
    the subsample draw, and (once fitted) float64 centroids with the rows each received."""

    def __init__(self, x_fit: torch.Tensor, n_bins: int, state: torch.Tensor, subsampled: bool):
        self.x_fit = x_fit
        self.state = state
        self.subsampled = subsampled
        n_fit = x_fit.shape[0]
        self.n_clusters = _n_distinct_at_least(x_fit, min(n_bins, n_fit))
        self.plain = not (self.n_clusters < min(n_bins, n_fit) or self.n_clusters == n_fit)
        self.tol_abs = _TOL * float(x_fit.var(dim=0, unbiased=False).mean()) if self.plain else 0.0
        self.centroids: torch.Tensor | None = None
        self.counts: torch.Tensor | None = None

    def generator(self) -> torch.Generator:
        g = torch.Generator()
        g.set_state(self.state)
        return g

    def finish(self, centroids32: torch.Tensor, labels: torch.Tensor | None) -> None:
        """``_fit``'s epilogue before the refinement: float64 centroids, rows per centroid."""
        if labels is None:
            labels = _assign(self.x_fit.to(_F32), centroids32)[0]
        self.counts = torch.bincount(labels, minlength=centroids32.shape[0])
        self.centroids = centroids32.to(_F64)
        self.x_fit = None  # the subsample is not needed any more

    def fit_alone(self, rtol: float) -> None:
        """The per-class path (a class the batched fit cannot take)."""
        if not self.plain:  # fewer distinct rows than bins: each distinct row is a centroid
            centroids = torch.unique(self.x_fit, dim=0)
            labels, _ = _assign(self.x_fit, centroids)
            self.counts = torch.bincount(labels, minlength=centroids.shape[0])
            self.centroids = centroids.to(_F64)
            self.x_fit = None
            return
        c, labels, _, _ = _fit_torch(
            self.x_fit, self.n_clusters, self.generator(), _MAX_ITER, self.tol_abs, rtol
        )
        self.finish(c.to(_F32), labels)


def _fit_group(fits: list[_ClassFit], rtol: float) -> None:
    """Fit the plain classes of one seed batched by ``(rows, bins)`` (as the in-memory classwise
    fit batches them), the others alone."""
    shapes: dict[tuple[int, int], list[_ClassFit]] = {}
    for f in fits:
        if f.plain:
            shapes.setdefault((f.x_fit.shape[0], f.n_clusters), []).append(f)
        else:
            f.fit_alone(rtol)
    for (_, n_clusters), group in shapes.items():
        if len(group) == 1:
            (f,) = group
            x32 = f.x_fit.to(_F32)
            rows = _kmeans_plusplus(x32, n_clusters, f.generator())
            if rows.numel() < n_clusters:  # ran out of distinct rows: the per-class path
                f.fit_alone(rtol)
                continue
            c, labels, _, _ = _lloyd(x32, x32[rows].clone(), _MAX_ITER, f.tol_abs, rtol)
            f.finish(c, labels)
            continue
        x32 = torch.stack([f.x_fit.to(_F32) for f in group])
        seeds, exhausted = _seed_batch(x32, n_clusters, [f.generator() for f in group])
        every = torch.arange(len(group))[:, None]
        results = _lloyd_batch(
            x32, x32[every, seeds].clone(), _MAX_ITER, [f.tol_abs for f in group], rtol
        )
        del x32
        for i, f in enumerate(group):
            if bool(exhausted[i]):
                f.fit_alone(rtol)
            else:
                c, labels, _, _ = results[i]
                f.finish(c, labels)


def _subsample_rows(n_part: int, seed: int, subsample: int) -> tuple[np.ndarray, torch.Tensor]:
    """The sorted part rows the fit of ``seed`` draws, and its generator's state after the draw."""
    g = torch.Generator().manual_seed(seed)
    if n_part > subsample:
        rows = torch.randperm(n_part, generator=g)[:subsample].sort().values.numpy()
    else:
        rows = np.arange(n_part)
    return rows, g.get_state()


def _gather_columns(source, rows, classes, order, block) -> list[torch.Tensor]:
    """``[len(rows), M]`` float64 member columns of each class in ``classes`` at the source
    rows ``rows`` (in that order), ``block`` rows per read."""
    out: list[list[torch.Tensor]] = [[] for _ in classes]
    index = torch.as_tensor(list(classes))
    for start in range(0, len(rows), block):
        p = source.take(rows[start : start + block])
        source.release()
        p = p if order is None else p[order]
        cols = p[:, :, index].permute(2, 1, 0)  # [C, b, M]
        for i in range(len(classes)):
            out[i].append(cols[i].contiguous())
    m = source.m
    return [torch.cat(parts) if parts else torch.empty(0, m, dtype=_F64) for parts in out]


def fit_classwise_centroids(
    source: Any,
    n_bins: int,
    seeds: list[int],
    *,
    positions: np.ndarray | None = None,
    order: torch.Tensor | None = None,
    block: int = 65_536,
    progress: bool = False,
) -> list[list[torch.Tensor]]:
    """Per seed, the per-class K-means centroids exactly as the in-memory classwise EECE fits
    them on the part ``positions`` of ``source`` (module docstring; members in ``order``).

    Args:
        source: a row source (module docstring).
        n_bins: bins asked for per class (``"auto"`` already resolved).
        seeds: the K-means seed of each partition.
        positions: the part's rows in the part's order (``None``: every row, in order).
        order: the canonical member order (:func:`canonical_order_chunked`).
        block: rows per read.
        progress: a tqdm bar over the fits and passes (on a terminal only).

    Returns:
        ``[seed][class]`` float64 centroids ``[M_k, M]`` (empty clusters dropped).
    """
    n_part = source.n if positions is None else len(positions)
    k, m = source.k, source.m
    draws = [_subsample_rows(n_part, s, DEFAULT_SUBSAMPLE) for s in seeds]
    subsampled = n_part > DEFAULT_SUBSAMPLE
    # classes per group: their subsample columns for every seed fit FIT_BUDGET
    per_class = max(1, len(seeds) * min(n_part, DEFAULT_SUBSAMPLE) * m * 8)
    size = max(1, min(k, FIT_BUDGET // per_class))
    groups = [list(range(a, min(a + size, k))) for a in range(0, k, size)]
    fits: list[list[_ClassFit | None]] = [[None] * k for _ in seeds]
    steps = len(groups) * len(seeds) + (DEFAULT_REFINE if subsampled else 0)
    with _progress.progress(
        total=steps, enabled=progress, desc="EECE K-means", unit="steps", leave=False
    ) as bar:
        for classes in groups:
            for i, (rows, state) in enumerate(draws):
                part_rows = rows if positions is None else positions[rows]
                cols = _gather_columns(source, part_rows, classes, order, block)
                group = [_ClassFit(x, n_bins, state, subsampled) for x in cols]
                del cols
                _fit_group(group, DEFAULT_LLOYD_RTOL)
                for c, f in zip(classes, group, strict=True):
                    fits[i][c] = f
                bar.update(1)
        if subsampled:
            for _ in range(DEFAULT_REFINE):
                _refine_pass(source, fits, positions, order, block)
                bar.update(1)
    return [[f.centroids[f.counts > 0] for f in per_seed] for per_seed in fits]


def _refine_pass(source, fits, positions, order, block) -> None:
    """One Lloyd step of every class and seed over every row of the part (one streamed pass;
    distances in float32, per-centroid sums in float64, as ``_kmeans_assign._refine``)."""
    sums = [[torch.zeros_like(f.centroids) for f in per_seed] for per_seed in fits]
    counts = [[torch.zeros_like(f.counts) for f in per_seed] for per_seed in fits]
    ascending = None if positions is None else np.sort(positions)
    for p in _part_blocks(source, ascending, block):
        p = p if order is None else p[order]
        for c in range(source.k):
            x = p[:, :, c].T.contiguous()  # [b, M] float64
            for i, per_seed in enumerate(fits):
                f = per_seed[c]
                for _, xb, arg, _ in _chunks(x, f.centroids, _F32):
                    sums[i][c].index_add_(0, arg, xb)
                    counts[i][c] += torch.bincount(arg, minlength=f.centroids.shape[0])
    for i, per_seed in enumerate(fits):
        for c, f in enumerate(per_seed):
            n_c = counts[i][c]
            new = sums[i][c] / n_c.clamp_min(1)[:, None].to(_F64)
            f.centroids = torch.where(n_c[:, None] > 0, new, f.centroids)
            f.counts = n_c


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
