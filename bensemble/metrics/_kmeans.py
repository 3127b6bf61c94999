"""Binning backends for the EECE: K-means partitions of the members' prediction vectors.

The EECE bins points by their whole member vector ``v_n = (p[1, n], ..., p[H, n])``. The bins
are the Voronoi cells of K-means centroids fitted on the ``[N, H]`` matrix of member vectors. This
module fits the centroids (:func:`fit_bins`) and assigns points to their nearest centroid
(:func:`assign_bins`), so a partition can be fitted once and reused.

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

Large ``N``: with ``subsample=S`` (default 50,000) and ``N > S``, the centroids are fitted on ``S``
rows drawn without replacement (seeded), then refined by ``refine`` (default 2) Lloyd steps over
every row (one chunked pass each), and every row is finally assigned to its nearest centroid in
chunks. The refinement closes most of the gap a subsample leaves: on the toy benchmark at
N = 10^6, H = 10, 200 bins, the inertia over all rows was 6.7% above a full fit's with no
refinement, 4.4% after one step and 3.6% after two. At ``N <= S`` the fit uses every row, so
small problems are unaffected.
"""

from __future__ import annotations

import math
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

__all__ = [
    "BACKENDS",
    "DEFAULT_SUBSAMPLE",
    "DEFAULT_REFINE",
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
#: Minimum mini-batch size of the ``"minibatch"`` backend.
MIN_MINIBATCH = 8192
# Elements of the [rows, M] distance block per chunk: 4 MB in float64, which stays in cache.
_CHUNK_ELEMENTS = 1 << 19


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


def _chunk_rows(n_centroids: int) -> int:
    return max(256, _CHUNK_ELEMENTS // max(n_centroids, 1))


def _argmin_rows(scores: torch.Tensor) -> torch.Tensor:
    """Row-wise argmin (first index on ties). On the CPU numpy's SIMD argmin is 2-4x faster
    than torch's for rows of a few hundred values (measured at 200 columns), so use it there."""
    if scores.device.type == "cpu":
        return torch.from_numpy(scores.numpy().argmin(axis=1).astype(np.int64, copy=False))
    return scores.argmin(dim=1)


def _chunks(x: torch.Tensor, centroids: torch.Tensor, dtype: torch.dtype):
    """Yield ``(start, rows, ids, scores)`` per cache-sized chunk of rows, where ``scores`` are
    ``||c||^2 - 2 x.c`` from one ``addmm`` in ``dtype`` and ``ids`` their row-wise argmin
    (``scores`` is overwritten by the next chunk)."""
    c = centroids.to(dtype)
    c_sq = (c * c).sum(1)
    c_t = c.T.contiguous()
    step = min(_chunk_rows(c.shape[0]), x.shape[0])
    # One reused output block: a fresh multi-MB allocation per chunk costs page faults.
    block = torch.empty(step, c.shape[0], dtype=dtype, device=x.device)
    for start in range(0, x.shape[0], step):
        xb = x[start : start + step]
        scores = torch.addmm(c_sq, xb.to(dtype), c_t, alpha=-2.0, out=block[: xb.shape[0]])
        yield start, xb, _argmin_rows(scores), scores


def _assign(
    x: torch.Tensor, centroids: torch.Tensor, *, with_distances: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Nearest centroid per row (ties -> lower index) and optionally the squared distance,
    computed in ``x``'s dtype; ``||x||^2`` is added back only for the distances."""
    n = x.shape[0]
    ids = torch.empty(n, dtype=torch.int64, device=x.device)
    dist = torch.empty(n, dtype=x.dtype, device=x.device) if with_distances else None
    for start, xb, arg, scores in _chunks(x, centroids, x.dtype):
        ids[start : start + xb.shape[0]] = arg
        if with_distances:
            best = scores.gather(1, arg[:, None].to(scores.device))[:, 0]
            dist[start : start + xb.shape[0]] = (best + (xb * xb).sum(1)).clamp_min_(0.0)
    return ids, dist


def _refine(x: torch.Tensor, centroids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One Lloyd step over every row of ``x`` (float64), chunk by chunk: distances in float32,
    per-centroid sums in float64. Returns the new centroids and the rows each one received."""
    m = centroids.shape[0]
    sums = torch.zeros_like(centroids, dtype=torch.float64)
    counts = torch.zeros(m, dtype=torch.int64, device=x.device)
    for _, xb, arg, _ in _chunks(x, centroids, torch.float32):
        arg = arg.to(x.device)
        sums.index_add_(0, arg, xb.to(torch.float64))
        counts += torch.bincount(arg, minlength=m)
    new = sums / counts.clamp_min(1)[:, None].to(torch.float64)
    return torch.where(counts[:, None] > 0, new, centroids.to(torch.float64)), counts


def _candidate_dist(
    x: torch.Tensor,
    x_t: torch.Tensor,
    x_sq: torch.Tensor,
    rows: torch.Tensor,
    closest: torch.Tensor,
) -> torch.Tensor:
    """``min(closest, ||x - x[rows]||^2)`` as ``[R, N]``.

    ``c @ x_t`` with a contiguous ``x_t = x.T`` was the fastest layout for a handful of
    candidates at every ``H`` measured (10-100; ``x @ c.T`` was up to 8x slower at H = 10), and
    the per-candidate potentials are then contiguous row sums.
    """
    d = torch.addmm(x_sq[None, :], x[rows], x_t, alpha=-2.0)
    d.add_(x_sq[rows][:, None]).clamp_min_(0.0)
    return torch.minimum(d, closest[None, :], out=d)


def _kmeans_plusplus(x: torch.Tensor, n_clusters: int, g: torch.Generator) -> torch.Tensor:
    """Greedy k-means++ seeding: each step draws ``2 + floor(ln M)`` candidates with probability
    proportional to the squared distance to the chosen centres and keeps the one that lowers the
    potential most. Returns the row indices of the centres."""
    n = x.shape[0]
    n_trials = 2 + int(math.log(n_clusters))
    x_sq = (x * x).sum(1)
    x_t = x.T.contiguous()
    chosen = torch.empty(n_clusters, dtype=torch.int64)
    chosen[0] = torch.randint(n, (1,), generator=g)
    closest = torch.full((n,), math.inf, dtype=x.dtype, device=x.device)
    closest = _candidate_dist(x, x_t, x_sq, chosen[:1], closest)[0]
    for k in range(1, n_clusters):
        cum = torch.cumsum(closest, 0, dtype=torch.float64)  # float64: exact enough to sample
        total = cum[-1]
        if not bool(total > 0):  # every row coincides with a centre: no more distinct rows
            return chosen[:k]
        draws = torch.rand(n_trials, generator=g, dtype=torch.float64).to(cum.device) * total
        candidates = torch.searchsorted(cum, draws, right=True).clamp_(max=n - 1)
        trial = _candidate_dist(x, x_t, x_sq, candidates, closest)
        best = int(trial.sum(1, dtype=torch.float64).argmin())
        chosen[k] = candidates[best]
        closest = trial[best]
    return chosen


def _lloyd(
    x: torch.Tensor, centroids: torch.Tensor, max_iter: int, tol_abs: float
) -> tuple[torch.Tensor, torch.Tensor, int, bool]:
    """Lloyd iterations; an empty cluster keeps its centre (and is dropped by the caller)."""
    m = centroids.shape[0]
    labels_old = None
    strict = converged = False
    n_iter = 0
    for n_iter in range(1, max_iter + 1):  # noqa: B007 - n_iter is reported
        labels, _ = _assign(x, centroids)
        counts = torch.bincount(labels, minlength=m)
        sums = torch.zeros_like(centroids).index_add_(0, labels, x)
        new = torch.where(
            counts[:, None] > 0, sums / counts.clamp_min(1)[:, None].to(x.dtype), centroids
        )
        shift = float(((new - centroids) ** 2).sum())
        centroids = new
        if labels_old is not None and torch.equal(labels, labels_old):
            strict = converged = True
            break
        labels_old = labels
        if shift <= tol_abs:
            converged = True
            break
    if not strict:
        labels, _ = _assign(x, centroids)
    return centroids, labels, n_iter, converged


def _n_distinct_at_least(x: torch.Tensor, n: int) -> int:
    """``min(n, number of distinct rows)``, cheaply when there are plenty of distinct rows.

    Identical rows share a random projection, so at least as many distinct projections as ``n``
    proves ``n`` distinct rows; only otherwise do we pay for the exact row-wise unique.
    """
    g = torch.Generator().manual_seed(0)
    direction = torch.rand(x.shape[1], generator=g, dtype=x.dtype).to(x.device) + 0.5
    if int(torch.unique(x @ direction).numel()) >= n:
        return n
    return min(n, int(torch.unique(x, dim=0).shape[0]))


def _fit_torch(x, n_bins, g, max_iter, tol_abs):
    # The fit runs in float32: about twice as fast, and distances between probability vectors
    # need no more precision to choose a cell. Centroids come back as float64, and every
    # assignment after the fit (the one the EECE uses) is computed in float64.
    x32 = x.to(torch.float32)
    seeds = _kmeans_plusplus(x32, n_bins, g)
    centroids, labels, n_iter, converged = _lloyd(x32, x32[seeds].clone(), max_iter, tol_abs)
    return centroids.to(torch.float64), labels, n_iter, converged


def _fit_sklearn(x, n_bins, seed, max_iter, tol, batch_size, minibatch):
    from sklearn.cluster import KMeans, MiniBatchKMeans

    x_np = x.cpu().numpy()
    if minibatch:
        model = MiniBatchKMeans(
            n_clusters=n_bins,
            init="k-means++",
            n_init=1,
            batch_size=batch_size,
            max_iter=100,
            # scikit-learn's default 0.01 moves "small" clusters - the ones covering sparse
            # regions of the member space - onto random dense points: on the toy benchmark it
            # made the inertia 6x worse. 0 keeps them.
            reassignment_ratio=0.0,
            random_state=seed % 2**32,
        )
    else:
        model = KMeans(
            n_clusters=n_bins,
            init="k-means++",
            n_init=1,
            max_iter=max_iter,
            tol=tol,
            random_state=seed % 2**32,
        )
    model.fit(x_np)
    centroids = torch.from_numpy(np.asarray(model.cluster_centers_, dtype=np.float64))
    labels = torch.from_numpy(np.asarray(model.labels_, dtype=np.int64))
    n_iter = int(model.n_iter_)
    converged = n_iter < (100 if minibatch else max_iter)
    return centroids, labels, n_iter, converged


def _fit_faiss(x, n_bins, seed, max_iter):
    try:
        import faiss
    except ImportError:
        raise ValueError(
            "fit_bins: `backend` 'faiss' needs the optional faiss-cpu package "
            "(pip install 'bensemble[faiss]'); it is not installed"
        ) from None
    x_np = np.ascontiguousarray(x.cpu().numpy(), dtype=np.float32)
    km = faiss.Kmeans(x_np.shape[1], n_bins, niter=max_iter, seed=seed % 2**31, verbose=False)
    km.train(x_np)
    centroids = torch.from_numpy(np.asarray(km.centroids, dtype=np.float64))
    labels, _ = _assign(x, centroids.to(x.dtype))
    return centroids, labels, max_iter, False


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
    if n_clusters < min(n_bins, n_fit) or n_clusters == n_fit:
        # Fewer distinct rows than bins: each distinct row is its own centroid (exact optimum).
        centroids = torch.unique(x_fit, dim=0)
        labels, _ = _assign(x_fit, centroids)
        n_iter, converged = 0, True
    else:
        tol_abs = tol * float(x_fit.var(dim=0, unbiased=False).mean())
        if resolved == "torch":
            centroids, labels, n_iter, converged = _fit_torch(
                x_fit, n_clusters, g, max_iter, tol_abs
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
