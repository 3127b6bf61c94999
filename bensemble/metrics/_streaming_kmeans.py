"""The classwise EECE's K-means fit streamed over a row source (see
:mod:`bensemble.metrics.streaming_eval`): every class fitted exactly as the in-memory batched
fit does, from the subsample rows gathered once for all classes, each ``refine`` Lloyd step one
streamed pass for every class and seed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from bensemble import _progress
from bensemble.metrics.binning._classes import _chunk_size, fit_group
from bensemble.metrics.binning._fit import DEFAULT_LLOYD_RTOL, DEFAULT_REFINE, DEFAULT_SUBSAMPLE
from bensemble.metrics.binning._lloyd import _fit_torch
from bensemble.metrics.binning._nearest import _assign, _chunks, _n_distinct_at_least
from bensemble.metrics.binning._threads import map_classes

__all__ = ["FIT_BUDGET", "fit_classwise_centroids"]

_F32, _F64 = torch.float32, torch.float64
#: Bytes of subsample columns held at once while fitting (classes beyond it: another group).
FIT_BUDGET = 256 << 20
_MAX_ITER, _TOL = 300, 1e-4


def _part_blocks(source: Any, positions: np.ndarray | None, block: int):
    """The part ``positions`` (in that order; ``None``: every row) block by block."""
    n_part = source.n if positions is None else len(positions)
    for start in range(0, n_part, block):
        if positions is None:
            yield source.slice(start, start + block)
        else:
            yield source.take(positions[start : start + block])
        source.release()


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


def _fit_group(fits: list[_ClassFit], rtol: float, workers: int) -> None:
    """Fit the classes of one seed: the plain ones grouped by ``(rows, bins)`` in chunks of the
    in-memory classwise fit's size (``binning._classes._chunk_size``), each chunk through that
    fit's own kernel (:func:`~bensemble.metrics.binning._classes.fit_group`: sampled seeding
    and sorted-row Lloyd) on single-threaded workers
    (:func:`~bensemble.metrics.binning._threads.map_classes`); the others alone. Every class gets
    the centroids of its fit run alone, bit for bit."""
    shapes: dict[tuple[int, int], list[_ClassFit]] = {}
    for f in fits:
        if f.plain:
            shapes.setdefault((f.x_fit.shape[0], f.n_clusters), []).append(f)
    batches: list[list[_ClassFit]] = [[f] for f in fits if not f.plain]
    for (rows, _), group in shapes.items():
        size = _chunk_size(len(group), rows, group[0].x_fit.shape[1], workers)
        batches += [group[a : a + size] for a in range(0, len(group), size)]
    map_classes(lambda i: _fit_batch(batches[i], rtol), len(batches), workers=workers)


def _fit_batch(group: list[_ClassFit], rtol: float) -> None:
    """Fit one chunk of classes (a class that is not plain goes alone)."""
    if not group[0].plain:
        group[0].fit_alone(rtol)
        return
    results = fit_group(
        [f.x_fit for f in group],
        [f.generator() for f in group],
        group[0].n_clusters,
        _MAX_ITER,
        [f.tol_abs for f in group],
        rtol,
    )
    for f, (c, labels, _, _, exhausted) in zip(group, results, strict=True):
        if exhausted:
            f.fit_alone(rtol)
        else:
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
    workers: int | None = None,
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
        workers: single-threaded workers for the classes (default: torch's intra-op threads).

    Returns:
        ``[seed][class]`` float64 centroids ``[M_k, M]`` (empty clusters dropped).
    """
    n_part = source.n if positions is None else len(positions)
    k, m = source.k, source.m
    workers = max(1, torch.get_num_threads() if workers is None else workers)
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
                _fit_group(group, DEFAULT_LLOYD_RTOL, workers)
                for c, f in zip(classes, group, strict=True):
                    fits[i][c] = f
                bar.update(1)
        if subsampled:
            for _ in range(DEFAULT_REFINE):
                _refine_pass(source, fits, positions, order, block, workers)
                bar.update(1)
    return [[f.centroids[f.counts > 0] for f in per_seed] for per_seed in fits]


def _refine_pass(source, fits, positions, order, block, workers) -> None:
    """One Lloyd step of every class and seed over every row of the part (one streamed pass;
    distances in float32, per-centroid sums in float64, as ``binning._nearest._refine``; the
    classes of a chunk on ``workers`` single-threaded workers)."""
    sums = [[torch.zeros_like(f.centroids) for f in per_seed] for per_seed in fits]
    counts = [[torch.zeros_like(f.counts) for f in per_seed] for per_seed in fits]
    ascending = None if positions is None else np.sort(positions)
    for p in _part_blocks(source, ascending, block):
        p = p if order is None else p[order]

        def one(c: int, p: torch.Tensor = p) -> None:
            x = p[:, :, c].T.contiguous()  # [b, M] float64
            for i, per_seed in enumerate(fits):
                f = per_seed[c]
                for _, xb, arg, _ in _chunks(x, f.centroids, _F32):
                    sums[i][c].index_add_(0, arg, xb)
                    counts[i][c] += torch.bincount(arg, minlength=f.centroids.shape[0])

        map_classes(one, source.k, workers=workers)
    for i, per_seed in enumerate(fits):
        for c, f in enumerate(per_seed):
            n_c = counts[i][c]
            new = sums[i][c] / n_c.clamp_min(1)[:, None].to(_F64)
            f.centroids = torch.where(n_c[:, None] > 0, new, f.centroids)
            f.counts = n_c
