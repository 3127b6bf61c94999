"""The classwise EECE's ``K`` per-class ``"torch"`` K-means fits, run together.

Every class gets the fit :func:`bensemble.metrics.binning._fit._fit` gives it alone with the
same options (``tests/metrics/binning/test_classes.py``); what changes is how the work is laid
out:

* **Chunks of classes on single-threaded workers** (:func:`~._threads.map_classes`): no
  intra-op barriers, all cores busy.
* **Seeding** - with the classwise rule (``lloyd_rtol > 0``, the default) weighted greedy
  k-means++ and a few weighted Lloyd steps on a stratified 4,096-row sample of each class
  (:mod:`~._subsample_seed`, batched over the chunk, each class from its own generator; the
  sample Lloyd on projection-sorted rows like the Lloyd below); with
  ``lloyd_rtol=0`` (the exact fit) greedy k-means++ on every row, per class or batched for small
  classes (:func:`~._batched._seed_batch`, bit-identical to the per-class seeding).
* **Lloyd** - with ``lloyd_rtol > 0``, one Lloyd over all classes of a chunk on
  projection-sorted rows (:mod:`~._sorted`): each step scores a block of rows only against the
  few centroids whose projection can be nearest, exactly, and updates the cluster sums from the
  rows that moved; it stops per class once a step lowers the inertia by at most ``lloyd_rtol``
  of it. With ``lloyd_rtol=0`` the dense kernels run, bit-identical to the per-class loop of
  binary EECEs.
* **Closed form**: a class with no more distinct member vectors than bins (e.g. all but a few
  rows equal) gets every distinct row as its own centroid - the exact optimum, no iterations.

Measured (``python benchmarks/bench_eece_classwise.py``, one thread, CPU time): see
:mod:`bensemble.metrics.binning`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from bensemble.metrics.binning import _coreset, _sorted, _subsample_seed
from bensemble.metrics.binning._batched import _lloyd_batch, _seed_batch
from bensemble.metrics.binning._lloyd import _kmeans_plusplus, _lloyd
from bensemble.metrics.binning._nearest import _assign, _n_distinct_at_least, _refine
from bensemble.metrics.binning._threads import map_classes

__all__ = ["fit_classes", "MAX_BATCH_SCORES", "MAX_CHUNK_ELEMENTS"]

_F32, _F64 = torch.float32, torch.float64
#: Bound on ``classes x rows x bins`` of one batched seeding (and of one dense Lloyd batch).
#: Batching only saves per-op costs and costs cache: on the loaded 2-core benchmark machine (one
#: thread, 100 bins, H = 10) batches were 1.63x faster than one class at a time at 1,000 rows per
#: class, 1.95x at 2,000, 1.15x at 5,000 and 1.12x at 10,000; 2^21 gives 20 classes of 1,000
#: rows, 4 of 5,000, 2 of 10,000 and one from 20,000 rows.
MAX_BATCH_SCORES = 1 << 21
#: Bound on ``classes x rows x members`` of one chunk of classes (the sorted float32 rows of a
#: chunk: 16 MiB; larger chunks spill the per-step temporaries out of cache).
MAX_CHUNK_ELEMENTS = 1 << 22
#: Most classes in one chunk.
MAX_CHUNK_CLASSES = 32


def _prepare(x: torch.Tensor, n_bins: int, seed: int, subsample: int | None, tol: float):
    """The per-class prelude of ``_fit``: generator, subsample, bin cap, tolerance."""
    g = torch.Generator().manual_seed(seed)
    n = x.shape[0]
    if subsample is not None and n > subsample:
        rows = torch.randperm(n, generator=g)[:subsample].sort().values
        x_fit = x[rows].contiguous()
    else:
        x_fit = x.contiguous()
    n_fit = x_fit.shape[0]
    n_clusters = _n_distinct_at_least(x_fit, min(n_bins, n_fit))
    plain = not (n_clusters < min(n_bins, n_fit) or n_clusters == n_fit)
    tol_abs = tol * float(x_fit.var(dim=0, unbiased=False).mean()) if plain else 0.0
    return g, x_fit, n_clusters, plain, tol_abs


def _final_bins(
    source: torch.Tensor, which: torch.Tensor, fits, order: torch.Tensor
) -> list[torch.Tensor]:
    """Nearest (float64) kept centroid of every row of each class, all classes at once on rows
    in the fit's ``order`` (:func:`~._sorted.nearest`, exact; the float32 labels give the
    bounds); what :func:`_finish` assigns densely otherwise. Clusters that ended empty are
    dropped first. ``source [S, N, H]`` float64 rows of the chunk's classes, ``which [C]`` the
    positions of the fitted classes in it (their rows are gathered sorted straight from it)."""
    kept, guesses = [], []
    for c32, labels, *_ in fits:
        counts = torch.bincount(labels, minlength=c32.shape[0])
        keep = counts > 0
        kept.append(c32.to(_F64)[keep])
        guesses.append((torch.cumsum(keep, 0) - 1)[labels])
    width = max(c.shape[0] for c in kept)
    far = 1e6  # padding centroids that are never nearest
    cent = torch.full((len(fits), width, source.shape[2]), far, dtype=_F64, device=source.device)
    for i, c in enumerate(kept):
        cent[i, : c.shape[0]] = c
    rows = _sorted.SortedRows.build(source.to(_F64), order=order, groups=which)
    guess = torch.stack(guesses)  # original order
    pad = rows.x.shape[1] - rows.n
    guess = guess.gather(1, rows.order)
    if pad:
        guess = torch.cat([guess, guess[:, -1:].expand(-1, pad)], dim=1)
    near = _sorted.rows_at(cent, guess)
    upper = (rows.x - near).pow_(2).sum(2).sqrt_()
    labels, _ = _sorted.nearest(rows, cent, upper, guess)
    return [rows.unsort(labels[i], i) for i in range(len(fits))]


def _finish(x, x_fit, fitted, settings, refine, ids=None):
    """``_fit``'s epilogue and the final assignment: ``(bin ids [N], centroids, info)``
    (``ids``: the final assignment if computed already, :func:`_final_bins`)."""
    centroids32, labels, n_iter, converged = fitted
    if labels is None:
        labels = _assign(x_fit.to(_F32), centroids32)[0]
    counts = torch.bincount(labels, minlength=centroids32.shape[0])
    centroids = centroids32.to(_F64)
    subsampled = x_fit.shape[0] < x.shape[0]
    if subsampled:
        for _ in range(refine):
            centroids, counts = _refine(x, centroids)
    centroids = centroids[counts > 0]
    if ids is None:
        ids, _ = _assign(x, centroids)
    info = {
        "backend": "torch",
        "n_bins_fitted": centroids.shape[0],
        "n_iter": int(n_iter),
        "converged": bool(converged),
        "n_fit_rows": int(x_fit.shape[0]),
        **settings,
    }
    return ids, centroids, info


def _chunk_size(n_classes: int, n_rows: int, width: int, workers: int) -> int:
    """Classes per chunk: every worker gets classes, a chunk's rows fit the memory bound."""
    by_memory = max(1, MAX_CHUNK_ELEMENTS // max(1, n_rows * width))
    return max(1, min(-(-n_classes // workers), by_memory, MAX_CHUNK_CLASSES))


def fit_group(
    xs: list[torch.Tensor],
    gens: list[torch.Generator],
    n_clusters: int,
    max_iter: int,
    tols: list[float],
    lloyd_rtol: float,
    orders: list[torch.Tensor] | None = None,
) -> list[tuple[torch.Tensor, torch.Tensor | None, int, bool, bool]]:
    """Greedy k-means++ then Lloyd for classes of equal shape ``[n, H]`` (float64 rows).

    Returns per class ``(centroids float32 [M, H], labels [n] or None, n_iter, converged,
    exhausted)``; ``exhausted`` marks a seeding that ran out of distinct rows (the caller refits
    that class alone). With ``lloyd_rtol > 0`` Lloyd runs on sorted rows for all classes at once
    (exact per step, :mod:`._sorted`); with ``0`` the dense kernels run (bit-identical to the
    per-class loop). ``orders``: receives the ``[C, n]`` sorted-row order of the Lloyd fit.
    """
    x32 = torch.stack([x.to(_F32) for x in xs])
    n_cls, n, _ = x32.shape
    if lloyd_rtol > 0:
        # the classwise fit: k-means++ on a subsample of each class, Lloyd on sorted rows
        start, flags = _subsample_seed.seed(x32, n_clusters, gens, tols)
        rows = _sorted.SortedRows.build(x32)
        if orders is not None:
            orders.append(rows.order)
        fits = _sorted.fit(x32, start, max_iter, tols, lloyd_rtol, rows=rows)
        return [(*fit, bool(ex)) for fit, ex in zip(fits, flags.tolist(), strict=True)]
    batched = n_cls > 1 and n_cls * n * n_clusters <= MAX_BATCH_SCORES
    if batched:
        chosen, flags = _seed_batch(x32, n_clusters, gens)
        exhausted = flags.tolist()
    else:
        chosen = torch.empty(n_cls, n_clusters, dtype=torch.int64, device=x32.device)
        exhausted = [False] * n_cls
        for i in range(n_cls):
            picked = _kmeans_plusplus(x32[i], n_clusters, gens[i])
            exhausted[i] = picked.numel() < n_clusters
            chosen[i] = picked if not exhausted[i] else picked[:1].expand(n_clusters)
    every = torch.arange(n_cls, device=x32.device)[:, None]
    start = x32[every, chosen].clone()
    if batched:
        fits = _lloyd_batch(x32, start, max_iter, tols)
    else:
        fits = [_lloyd(x, c, max_iter, t) for x, c, t in zip(x32, start, tols, strict=True)]
    return [(*fit, bool(ex)) for fit, ex in zip(fits, exhausted, strict=True)]


def fit_classes(
    vectors: Callable[[int], torch.Tensor],
    n_classes: int,
    n_bins: int,
    *,
    seed: int,
    fallback: Callable[[int], tuple[torch.Tensor, torch.Tensor, dict[str, Any]]],
    subsample: int | None,
    refine: int,
    max_iter: int,
    tol: float,
    workers: int | None = None,
    max_batch: int | None = None,
    coreset: int | None = None,
    lloyd_rtol: float = 0.0,
) -> list[tuple[torch.Tensor, torch.Tensor, dict[str, Any]]]:
    """Bins of every class from ``"torch"`` K-means fits, class by class what the per-class fit
    (:func:`bensemble.metrics.binning._fit._fit` then the nearest-centroid assignment) gives.

    Args:
        vectors: ``k -> [N, H]`` float64 member vectors of class ``k`` (every class has ``N``).
        n_classes: ``K``.
        n_bins: requested bins per class.
        seed: the integer seed of every class's fit.
        fallback: ``k -> (bin ids, centroids, info)`` for a class that cannot run here (the
            per-class path: fewer distinct rows than bins, exhausted seeding).
        subsample, refine, max_iter, tol, coreset, lloyd_rtol: as in
            :func:`bensemble.metrics.binning.fit_bins`.
        workers: single-threaded workers (default: torch's intra-op thread count).
        max_batch: at most this many classes per chunk.

    Returns:
        Per class ``(bin ids [N], centroids [M_k, H] float64, fit info)``, in class order.
    """
    settings: dict[str, Any] = {
        "n_bins": n_bins,
        "max_iter": max_iter,
        "tol": tol,
        "subsample": subsample,
    }
    if coreset is not None:
        settings["coreset"] = coreset
    if lloyd_rtol > 0:
        settings["lloyd_rtol"] = lloyd_rtol
    first = vectors(0)
    subsampled = subsample is not None and first.shape[0] > subsample
    if subsampled:
        settings["refine"] = refine
    n_rows = min(first.shape[0], subsample) if subsample is not None else first.shape[0]
    budget = workers if workers is not None else torch.get_num_threads()
    size = _chunk_size(n_classes, n_rows, first.shape[1], max(1, budget))
    if max_batch is not None:
        size = max(1, min(size, max_batch))
    starts = list(range(0, n_classes, size))

    def run_chunk(j: int) -> list[tuple[torch.Tensor, torch.Tensor, dict[str, Any]]]:
        classes = range(starts[j], min(starts[j] + size, n_classes))
        block = getattr(vectors, "block", None)  # one strided copy for the chunk, if offered
        stack = None
        if block is not None:
            stack = block(classes.start, classes.stop)
            xs = {k: stack[k - classes.start] for k in classes}
        else:
            xs = {k: vectors(k) for k in classes}
        prepared = {k: _prepare(xs[k], n_bins, seed, subsample, tol) for k in classes}
        results: dict[int, Any] = {}
        shapes: dict[tuple[int, int], list[int]] = {}  # plain classes by (rows, clusters)
        for k in classes:
            g, x_fit, n_clusters, plain, tol_abs = prepared[k]
            if plain and _coreset.applies(coreset, x_fit.shape[0]):
                fitted = _coreset.fit_torch_coreset(
                    x_fit, n_clusters, g, max_iter, tol_abs, coreset
                )
                results[k] = _finish(xs[k], x_fit, fitted, settings, refine)
            elif plain:
                shapes.setdefault((x_fit.shape[0], n_clusters), []).append(k)
            else:
                results[k] = fallback(k)
        for (_, n_clusters), group in shapes.items():
            orders: list[torch.Tensor] = []
            fits = fit_group(
                [prepared[k][1] for k in group],
                [prepared[k][0] for k in group],
                n_clusters,
                max_iter,
                [prepared[k][4] for k in group],
                lloyd_rtol,
                orders,
            )
            done = [i for i, fit in enumerate(fits) if not fit[-1]]
            bins = {}
            if lloyd_rtol > 0 and not subsampled and done:
                # the final float64 assignment of the whole group on sorted rows (exact)
                order = orders[0][torch.tensor(done)]
                if stack is not None:  # the chunk's rows, no copy of the group's first
                    source = stack
                    which = torch.tensor([group[i] - classes.start for i in done])
                else:
                    source = torch.stack([xs[group[i]].to(_F64) for i in done])
                    which = torch.arange(len(done))
                ids = _final_bins(source, which, [fits[i] for i in done], order)
                bins = {group[i]: b for i, b in zip(done, ids, strict=True)}
            for k, (*fitted, exhausted) in zip(group, fits, strict=True):
                if exhausted:
                    results[k] = fallback(k)
                else:
                    results[k] = _finish(
                        xs[k], prepared[k][1], fitted, settings, refine, bins.get(k)
                    )
        return [results[k] for k in classes]

    chunks = map_classes(run_chunk, len(starts), workers=workers)
    return [r for chunk in chunks for r in chunk]
