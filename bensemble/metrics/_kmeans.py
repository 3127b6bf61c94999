"""Binning backends for the EECE: K-means partitions of the members' prediction vectors.

The EECE bins points by their whole member vector ``v_n = (p[1, n], ..., p[H, n])``. The bins
are the Voronoi cells of K-means centroids fitted on the ``[N, H]`` matrix of member vectors. This
module fits the centroids (:func:`fit_bins`) and assigns points to their nearest centroid
(:func:`assign_bins`), so a partition can be fitted once and reused.

Layout: this module holds the public API (:func:`fit_bins`, :func:`assign_bins`,
:func:`kmeans_inertia`) and the per-fit driver ``_fit``; the chunked nearest-centroid kernels are
in :mod:`~bensemble.metrics._kmeans_assign`, the ``"torch"`` seeding and Lloyd iterations in
:mod:`~bensemble.metrics._kmeans_core`, the scikit-learn and faiss backends in
:mod:`~bensemble.metrics._kmeans_backends`. The classwise EECE fits its ``K`` per-class
partitions batched (:mod:`~bensemble.metrics._kmeans_classes`), bit-identical to a
single-threaded loop of ``_fit``.

Backends (``backend=``):

* ``"torch"`` - our own K-means: greedy k-means++ seeding (``2 + floor(ln M)`` candidates per step,
  as scikit-learn does) and Lloyd iterations, in float32 (centroids are returned in float64).
  Squared distances are ``||x||^2 - 2 x.c + ||c||^2``, computed one cache-sized chunk of rows at a
  time with a single matrix product (``addmm``) per chunk into a reused block, so memory stays
  bounded whatever ``N`` is; the row-wise argmin uses numpy's SIMD kernel on the CPU.
* ``"sklearn"`` - :class:`sklearn.cluster.KMeans` with ``n_init=1, init="k-means++"``.
* ``"minibatch"`` - :class:`sklearn.cluster.MiniBatchKMeans` (``batch_size >= 8192``,
  ``reassignment_ratio=0``: the default 0.01 moved the clusters of sparse regions onto dense
  points and made the inertia 5-10x worse on the toy benchmark).
* ``"faiss"`` - ``faiss.Kmeans`` when the optional ``faiss-cpu`` package is installed
  (``pip install bensemble[faiss]``); never installed by default.
* ``"auto"`` - ``"torch"``. The rule comes from ``benchmarks/bench_eece.py`` and fit timings on a
  2-core CPU with one thread: at every fit size measured (50,000 x 10 and 40,000 x 100 rows, 200
  bins) our fit took 1/3 to 2/3 of the CPU time of scikit-learn's ``KMeans`` (same algorithm, same
  stopping rule, inertia within 1%); MiniBatchKMeans was not faster on a 50,000-row fit and its
  inertia was ~1% worse. faiss is not installed here, so "auto" never picks it; ask for it by name.

Conventions shared by all backends (scikit-learn's defaults, as the paper used): ``max_iter=300``,
``tol=1e-4`` *relative to the mean feature variance* (Lloyd stops when the summed squared centroid
shift falls below ``tol * mean_j Var(X[:, j])``, or when no label changes). Clusters that end empty
are dropped, and the number of bins is capped at the number of distinct rows (with fewer distinct
rows than bins, every distinct row is its own centroid). Ties in the assignment go to the centroid
with the lower index.

Cheaper ``"torch"`` fits (both off by default here): ``lloyd_rtol=r`` also stops Lloyd when a
step lowers the inertia by at most ``r`` of it (the classwise EECE's default, ``r = 3e-4``: 2.3-2.6x
less CPU at 50,000 rows x 100 bins, inertia within 0.75% of the exact fit's on every class measured
there; see :mod:`~bensemble.metrics._kmeans_classes`); ``coreset=S`` fits on a weighted coreset
(:mod:`~bensemble.metrics._kmeans_coreset`).

Large ``N``: with ``subsample=S`` (default 50,000) and ``N > S``, the centroids are fitted on ``S``
rows drawn without replacement (seeded), then refined by ``refine`` (default 2) Lloyd steps over
every row (one chunked pass each), and every row is finally assigned to its nearest centroid in
chunks. The refinement closes most of the gap a subsample leaves: on the toy benchmark at
N = 10^6, H = 10, 200 bins, the inertia over all rows was 6.7% above a full fit's with no
refinement, 4.4% after one step and 3.6% after two. At ``N <= S`` the fit uses every row, so
small problems are unaffected.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from bensemble._validation import (
    as_float_tensor,
    check_option,
    check_positive,
    check_positive_int,
)
from bensemble.metrics import _kmeans_coreset

# The kernels live in _kmeans_assign / _kmeans_core / _kmeans_backends; the private names are
# re-exported here for the modules and tests that import them from this module.
from bensemble.metrics._kmeans_assign import (  # noqa: F401
    _assign,
    _chunks,
    _n_distinct_at_least,
    _refine,
)
from bensemble.metrics._kmeans_backends import _fit_faiss, _fit_sklearn
from bensemble.metrics._kmeans_core import _fit_torch, _kmeans_plusplus, _lloyd  # noqa: F401

__all__ = [
    "BACKENDS",
    "DEFAULT_SUBSAMPLE",
    "DEFAULT_REFINE",
    "DEFAULT_CORESET",
    "DEFAULT_LLOYD_RTOL",
    "KMeansFit",
    "fit_bins",
    "assign_bins",
    "kmeans_inertia",
]

#: Valid values of ``backend``.
BACKENDS = ("auto", "torch", "sklearn", "minibatch", "faiss")
#: Rows used to fit the centroids when ``N`` is larger (``subsample=None`` fits on every row).
DEFAULT_SUBSAMPLE = 50_000
#: Lloyd steps over every row after a subsample fit (each one pass over the data).
DEFAULT_REFINE = 2
#: A coreset size for ``coreset=`` (opt-in; :mod:`bensemble.metrics._kmeans_coreset`).
DEFAULT_CORESET = 10_000
#: The classwise EECE's Lloyd stopping rule: stop when a step lowers the inertia by at most this
#: fraction of it (measured in :mod:`bensemble.metrics._kmeans_classes`). Top-label and binary
#: fits, and ``fit_bins``, default to ``0`` (the exact fit).
DEFAULT_LLOYD_RTOL = 3e-4
#: Minimum mini-batch size of the ``"minibatch"`` backend.
MIN_MINIBATCH = 8192


@dataclass(frozen=True)
class KMeansFit:
    """A fitted partition and how it was obtained.

    Attributes:
        centroids: ``[M', H]`` float64 centroids (``M' <= n_bins``: empty clusters dropped and
            ``M'`` capped at the number of distinct rows).
        backend: the backend that ran (``"auto"`` resolved).
        seed: the integer seed every random draw came from.
        n_iter: Lloyd (or mini-batch) iterations run.
        converged: whether the stopping rule fired before ``max_iter``.
        n_fit_rows: rows the centroids were fitted on (the subsample size when ``N`` was larger).
        inertia: sum of squared distances of the fitted rows to their centroid.
        settings: the backend's settings (``n_bins``, ``max_iter``, ``tol``, ``subsample``, ...).
    """

    centroids: torch.Tensor
    backend: str
    seed: int
    n_iter: int
    converged: bool
    n_fit_rows: int
    inertia: float
    settings: dict[str, Any] = field(default_factory=dict)


def resolve_seed(generator: torch.Generator | None, seed: int | None, fn: str) -> int:
    """An integer seed: ``seed``, else drawn from ``generator``, else from torch's global RNG."""
    if generator is not None and seed is not None:
        raise ValueError(f"{fn}: pass either `generator` or `seed`, not both (got both)")
    if seed is not None:
        if (
            isinstance(seed, bool)
            or not isinstance(seed, (int, np.integer))
            or not 0 <= seed < 2**63
        ):
            raise ValueError(f"{fn}: `seed` must be an integer in [0, 2**63) (got {seed!r})")
        return int(seed)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise ValueError(
            f"{fn}: `generator` must be a torch.Generator (got {type(generator).__name__})"
        )
    return int(torch.randint(0, 2**62, (1,), generator=generator))


def _fit(
    x: torch.Tensor,
    n_bins: int,
    *,
    backend: str = "auto",
    seed: int,
    subsample: int | None = DEFAULT_SUBSAMPLE,
    refine: int = DEFAULT_REFINE,
    max_iter: int = 300,
    tol: float = 1e-4,
    batch_size: int = MIN_MINIBATCH,
    coreset: int | None = None,
    lloyd_rtol: float = 0.0,
) -> KMeansFit:
    """Fit on validated float64 rows ``x [N, H]`` with a resolved seed."""
    resolved = "torch" if backend == "auto" else backend
    g = torch.Generator().manual_seed(seed)
    n = x.shape[0]
    if subsample is not None and n > subsample:
        rows = torch.randperm(n, generator=g)[:subsample].sort().values
        x_fit = x[rows].contiguous()
    else:
        x_fit = x.contiguous()
    n_fit = x_fit.shape[0]
    n_clusters = _n_distinct_at_least(x_fit, min(n_bins, n_fit))
    settings: dict[str, Any] = {
        "n_bins": n_bins,
        "max_iter": max_iter,
        "tol": tol,
        "subsample": subsample,
    }
    subsampled = n_fit < n
    if subsampled:
        settings["refine"] = refine
    if coreset is not None and resolved == "torch":
        settings["coreset"] = coreset
    if lloyd_rtol > 0 and resolved == "torch":
        settings["lloyd_rtol"] = lloyd_rtol
    if n_clusters < min(n_bins, n_fit) or n_clusters == n_fit:
        # Fewer distinct rows than bins: each distinct row is its own centroid (exact optimum).
        centroids = torch.unique(x_fit, dim=0)
        labels, _ = _assign(x_fit, centroids)
        n_iter, converged = 0, True
    else:
        tol_abs = tol * float(x_fit.var(dim=0, unbiased=False).mean())
        if resolved == "torch" and _kmeans_coreset.applies(coreset, n_fit):
            centroids, labels, n_iter, converged = _kmeans_coreset.fit_torch_coreset(
                x_fit, n_clusters, g, max_iter, tol_abs, coreset
            )
        elif resolved == "torch":
            centroids, labels, n_iter, converged = _fit_torch(
                x_fit, n_clusters, g, max_iter, tol_abs, lloyd_rtol
            )
        elif resolved in ("sklearn", "minibatch"):
            if resolved == "minibatch":
                settings["batch_size"] = batch_size
            centroids, labels, n_iter, converged = _fit_sklearn(
                x_fit, n_clusters, seed, max_iter, tol, batch_size, resolved == "minibatch"
            )
        else:
            centroids, labels, n_iter, converged = _fit_faiss(x_fit, n_clusters, seed, max_iter)
    counts = torch.bincount(labels, minlength=centroids.shape[0])
    centroids = centroids.to(torch.float64)
    if subsampled:
        for _ in range(refine):
            centroids, counts = _refine(x, centroids)
    centroids = centroids[counts > 0]
    # Re-derive the inertia from the kept centroids so that all backends report it the same way.
    _, dist = _assign(x_fit, centroids, with_distances=True)
    return KMeansFit(
        centroids=centroids,
        backend=resolved,
        seed=seed,
        n_iter=int(n_iter),
        converged=bool(converged),
        n_fit_rows=int(n_fit),
        inertia=float(dist.sum()),
        settings=settings,
    )


def _check_fit_options(fn, backend, subsample, refine, max_iter, tol, batch_size):
    check_option(backend, "backend", BACKENDS, fn)
    if subsample is not None:
        check_positive_int(subsample, "subsample", fn)
    check_positive_int(refine, "refine", fn, minimum=0)
    check_positive_int(max_iter, "max_iter", fn)
    check_positive(tol, "tol", fn, allow_zero=True)
    batch_size = check_positive_int(batch_size, "batch_size", fn)
    if backend == "minibatch" and batch_size < MIN_MINIBATCH:
        raise ValueError(
            f"{fn}: `batch_size` must be >= {MIN_MINIBATCH} for the 'minibatch' backend "
            f"(got {batch_size})"
        )
    return batch_size


def fit_bins(
    member_vectors,
    n_bins: int,
    *,
    backend: str = "auto",
    generator: torch.Generator | None = None,
    seed: int | None = None,
    subsample: int | None = DEFAULT_SUBSAMPLE,
    refine: int = DEFAULT_REFINE,
    max_iter: int = 300,
    tol: float = 1e-4,
    batch_size: int = MIN_MINIBATCH,
    coreset: int | None = None,
    lloyd_rtol: float = 0.0,
) -> torch.Tensor:
    """Fit K-means centroids on member vectors, to reuse as an EECE partition.

    For an ``[H, N]`` stack of member probabilities ``p`` the member vectors are ``p.T``; for
    ``[H, N, K]`` class probabilities fit one partition per class on ``p[:, :, k].T``.

    Args:
        member_vectors: ``[N, H]`` rows to cluster (one row per point, one column per member).
        n_bins: requested number of bins ``M``.
        backend: one of :data:`BACKENDS` (see the module docstring for the ``"auto"`` rule).
        generator: source of the seed (ignored when ``seed`` is given).
        seed: integer seed for the subsample and the K-means initialisation.
        subsample: fit on this many rows drawn without replacement when ``N`` is larger
            (``None``: every row).
        refine: after a subsample fit, this many Lloyd steps over every row (chunked).
        max_iter: maximum Lloyd iterations.
        tol: convergence tolerance relative to the mean feature variance.
        batch_size: mini-batch size of the ``"minibatch"`` backend (``>= 8192``).
        coreset: ``"torch"`` backend only: with more than ``2 * coreset`` rows to fit, fit on a
            weighted coreset of this many rows, then Lloyd steps over every row until one
            improves the inertia by less than 0.1% (:mod:`bensemble.metrics._kmeans_coreset`;
            opt-in). ``None`` (default): the exact fit.
        lloyd_rtol: ``"torch"`` backend only: also stop Lloyd when a step lowers the inertia by
            at most this fraction of it (``3e-4`` is the classwise EECE's default,
            :data:`DEFAULT_LLOYD_RTOL`); ``0`` (default): the exact fit.

    Returns:
        ``[M', H]`` float64 centroids, ``M' <= min(n_bins, distinct rows)``.

    Example:
        >>> import torch
        >>> x = torch.tensor([[0.1, 0.2], [0.1, 0.2], [0.9, 0.8], [0.9, 0.7]])
        >>> fit_bins(x, 5, seed=0).shape  # capped at the 3 distinct rows
        torch.Size([3, 2])
    """
    fn = "fit_bins"
    x = as_float_tensor(member_vectors, "member_vectors", fn, ndim=2)
    n_bins = check_positive_int(n_bins, "n_bins", fn)
    batch_size = _check_fit_options(fn, backend, subsample, refine, max_iter, tol, batch_size)
    if coreset is not None:
        check_positive_int(coreset, "coreset", fn)
    check_positive(lloyd_rtol, "lloyd_rtol", fn, allow_zero=True)
    seed = resolve_seed(generator, seed, fn)
    fit = _fit(
        x,
        n_bins,
        backend=backend,
        seed=seed,
        subsample=subsample,
        refine=refine,
        max_iter=max_iter,
        tol=tol,
        batch_size=batch_size,
        coreset=coreset,
        lloyd_rtol=lloyd_rtol,
    )
    return fit.centroids


def _check_centroids(centroids, width: int, fn: str, name: str = "centroids") -> torch.Tensor:
    c = as_float_tensor(centroids, name, fn, ndim=2)
    if c.shape[1] != width:
        raise ValueError(
            f"{fn}: `{name}` must have {width} columns, one per member (got shape {tuple(c.shape)})"
        )
    return c


def assign_bins(member_vectors, centroids) -> torch.Tensor:
    """Bin id of every row: the index of its nearest centroid (squared Euclidean distance).

    Rows are processed in cache-sized chunks with one matrix product each, so any ``N`` fits in
    bounded memory. Ties go to the lower centroid index.

    Args:
        member_vectors: ``[N, H]`` rows.
        centroids: ``[M, H]`` centroids (e.g. from :func:`fit_bins` on a separate split).

    Returns:
        ``[N]`` int64 bin ids in ``[0, M)``.

    Example:
        >>> import torch
        >>> x = torch.tensor([[0.0, 0.1], [0.9, 1.0]])
        >>> assign_bins(x, torch.tensor([[1.0, 1.0], [0.0, 0.0]]))
        tensor([1, 0])
    """
    fn = "assign_bins"
    x = as_float_tensor(member_vectors, "member_vectors", fn, ndim=2)
    c = _check_centroids(centroids, x.shape[1], fn)
    return _assign(x, c)[0]


def kmeans_inertia(member_vectors, centroids) -> float:
    """Sum over rows of the squared distance to the nearest centroid (K-means' objective)."""
    fn = "kmeans_inertia"
    x = as_float_tensor(member_vectors, "member_vectors", fn, ndim=2)
    c = _check_centroids(centroids, x.shape[1], fn)
    return float(_assign(x, c, with_distances=True)[1].sum())
