"""The per-fit K-means driver and the array-level functions :func:`fit_bins`,
:func:`assign_bins`, :func:`kmeans_inertia` (the design and its measurements:
:mod:`bensemble.metrics.binning`).

``_fit`` fits one partition of ``[N, H]`` member vectors: seeded subsample (``N > subsample``),
the distinct-rows cap (fewer distinct rows than bins: every distinct row is its own centroid,
the exact optimum), the backend's fit, ``refine`` Lloyd passes over every row after a subsample
fit, empty clusters dropped. :func:`fit_assign` adds the float64 nearest-centroid assignment of
the rows (ties to the lower index).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from bensemble._seeds import DEFAULT_SEED, is_default_seed
from bensemble._validation import (
    as_float_tensor,
    check_option,
    check_positive,
    check_positive_int,
)
from bensemble.metrics.binning import _coreset
from bensemble.metrics.binning._backends import _fit_faiss, _fit_sklearn
from bensemble.metrics.binning._classes import _prepare, fit_group
from bensemble.metrics.binning._lloyd import _fit_torch, _kmeans_plusplus, _lloyd  # noqa: F401
from bensemble.metrics.binning._nearest import (  # noqa: F401
    _assign,
    _chunks,
    _n_distinct_at_least,
    _refine,
)

__all__ = [
    "BACKENDS",
    "DEFAULT_SUBSAMPLE",
    "DEFAULT_REFINE",
    "DEFAULT_CORESET",
    "DEFAULT_LLOYD_RTOL",
    "FitOptions",
    "KMeansFit",
    "fit_assign",
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
#: A coreset size for ``coreset=`` (opt-in; :mod:`bensemble.metrics.binning._coreset`).
DEFAULT_CORESET = 10_000
#: The classwise EECE's Lloyd stopping rule: stop when a step lowers the inertia by at most this
#: fraction of it (measured in :mod:`bensemble.metrics.binning._classes`). Top-label and binary
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


@dataclass(frozen=True)
class FitOptions:
    """The K-means options of one fit (each as :func:`fit_bins` documents it), validated by
    :func:`_check_fit_options`; the defaults are :func:`fit_bins`'s."""

    subsample: int | None = DEFAULT_SUBSAMPLE
    refine: int = DEFAULT_REFINE
    max_iter: int = 300
    tol: float = 1e-4
    batch_size: int = MIN_MINIBATCH
    coreset: int | None = None
    lloyd_rtol: float = 0.0


def resolve_seed(generator: torch.Generator | None, seed: int | None, fn: str) -> int:
    """An integer seed under the library's rule (:mod:`bensemble._seeds`): ``seed`` (default
    :data:`~bensemble._seeds.DEFAULT_SEED`, i.e. 0), else drawn from ``generator`` (which wins
    over the default seed, not over an explicit one), else (``seed=None``) from torch's global
    RNG."""
    if generator is not None and seed is not None and not is_default_seed(seed):
        raise ValueError(f"{fn}: pass either `generator` or `seed`, not both (got both)")
    if generator is not None:
        seed = None
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
    x: torch.Tensor, n_bins: int, *, backend: str = "auto", seed: int, **options: Any
) -> KMeansFit:
    """Fit on validated float64 rows ``x [N, H]`` with a resolved seed; ``options``: fields of
    :class:`FitOptions` (its defaults for the others)."""
    opts = FitOptions(**options)
    resolved = "torch" if backend == "auto" else backend
    g, x_fit, n_clusters, plain, tol_abs = _prepare(x, n_bins, seed, opts.subsample, opts.tol)
    n, n_fit = x.shape[0], x_fit.shape[0]
    settings: dict[str, Any] = {
        "n_bins": n_bins,
        "max_iter": opts.max_iter,
        "tol": opts.tol,
        "subsample": opts.subsample,
    }
    subsampled = n_fit < n
    if subsampled:
        settings["refine"] = opts.refine
    if opts.coreset is not None and resolved == "torch":
        settings["coreset"] = opts.coreset
    if opts.lloyd_rtol > 0 and resolved == "torch":
        settings["lloyd_rtol"] = opts.lloyd_rtol
    if not plain:
        # Fewer distinct rows than bins: each distinct row is its own centroid (exact optimum).
        centroids = torch.unique(x_fit, dim=0)
        labels, _ = _assign(x_fit, centroids)
        n_iter, converged = 0, True
    else:
        if resolved == "torch" and _coreset.applies(opts.coreset, n_fit):
            centroids, labels, n_iter, converged = _coreset.fit_torch_coreset(
                x_fit, n_clusters, g, opts.max_iter, tol_abs, opts.coreset
            )
        elif resolved == "torch" and opts.lloyd_rtol > 0:
            # the classwise path's fit of one class (bensemble.metrics.binning._classes)
            state = g.get_state()
            (fitted,) = fit_group(
                [x_fit], [g], n_clusters, opts.max_iter, [tol_abs], opts.lloyd_rtol
            )
            centroids, labels, n_iter, converged, exhausted = fitted
            centroids = centroids.to(torch.float64)
            if exhausted:  # fewer distinct float32 rows than clusters: seed densely, afresh
                g.set_state(state)
                centroids, labels, n_iter, converged = _fit_torch(
                    x_fit, n_clusters, g, opts.max_iter, tol_abs, opts.lloyd_rtol
                )
        elif resolved == "torch":
            centroids, labels, n_iter, converged = _fit_torch(
                x_fit, n_clusters, g, opts.max_iter, tol_abs, opts.lloyd_rtol
            )
        elif resolved in ("sklearn", "minibatch"):
            if resolved == "minibatch":
                settings["batch_size"] = opts.batch_size
            centroids, labels, n_iter, converged = _fit_sklearn(
                x_fit,
                n_clusters,
                seed,
                opts.max_iter,
                opts.tol,
                opts.batch_size,
                resolved == "minibatch",
            )
        else:
            centroids, labels, n_iter, converged = _fit_faiss(
                x_fit, n_clusters, seed, opts.max_iter
            )
    counts = torch.bincount(labels, minlength=centroids.shape[0])
    centroids = centroids.to(torch.float64)
    if subsampled:
        for _ in range(opts.refine):
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


def _check_fit_options(
    fn, backend, subsample, refine, max_iter, tol, batch_size, coreset, lloyd_rtol
) -> FitOptions:
    """``ValueError`` unless ``backend`` and the options are valid; the options as given, but
    ``batch_size``, ``coreset`` and ``lloyd_rtol`` as checked."""
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
    if coreset is not None:
        coreset = check_positive_int(coreset, "coreset", fn)
    lloyd_rtol = check_positive(lloyd_rtol, "lloyd_rtol", fn, allow_zero=True)
    return FitOptions(subsample, refine, max_iter, tol, batch_size, coreset, lloyd_rtol)


def fit_bins(
    member_vectors,
    n_bins: int,
    *,
    backend: str = "auto",
    generator: torch.Generator | None = None,
    seed: int | None = DEFAULT_SEED,
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
        generator: source of the seed (wins over the default ``seed``; an explicit ``seed``
            together with a generator is an error).
        seed: integer seed for the subsample and the K-means initialisation (fixed default 0:
            identical calls fit identical bins; ``None``: a seed drawn from torch's global
            RNG, fresh on every call).
        subsample: fit on this many rows drawn without replacement when ``N`` is larger
            (``None``: every row).
        refine: after a subsample fit, this many Lloyd steps over every row (chunked).
        max_iter: maximum Lloyd iterations.
        tol: convergence tolerance relative to the mean feature variance.
        batch_size: mini-batch size of the ``"minibatch"`` backend (``>= 8192``).
        coreset: ``"torch"`` backend only: with more than ``2 * coreset`` rows to fit, fit on a
            weighted coreset of this many rows, then Lloyd steps over every row until one
            improves the inertia by less than 0.1% (:mod:`bensemble.metrics.binning._coreset`;
            opt-in). ``None`` (default): the exact fit.
        lloyd_rtol: ``"torch"`` backend only: the classwise EECE's fast fit - seeds from a
            stratified sample of the rows, Lloyd on projection-sorted rows stopped when a step
            lowers the inertia by at most this fraction of it (``3e-4`` is the classwise EECE's
            default, :data:`DEFAULT_LLOYD_RTOL`; :mod:`bensemble.metrics.binning`); ``0``
            (default): the exact fit.

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
    options = _check_fit_options(
        fn, backend, subsample, refine, max_iter, tol, batch_size, coreset, lloyd_rtol
    )
    seed = resolve_seed(generator, seed, fn)
    return _fit(x, n_bins, backend=backend, seed=seed, **asdict(options)).centroids


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


def fit_assign(
    x: torch.Tensor, n_bins: int, *, backend: str, seed: int, fit_options: dict[str, Any]
) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    """Fit on the rows ``x [N, H]`` and assign them: ``(bin ids [N], centroids [M', H], info)``
    (``info``: the backend, fitted bins, iterations, convergence, rows fitted, settings)."""
    fit = _fit(x, n_bins, backend=backend, seed=seed, **fit_options)
    ids, _ = _assign(x, fit.centroids)
    info = {
        "backend": fit.backend,
        "n_bins_fitted": fit.centroids.shape[0],
        "n_iter": fit.n_iter,
        "converged": fit.converged,
        "n_fit_rows": fit.n_fit_rows,
        **fit.settings,
    }
    return ids, fit.centroids, info
