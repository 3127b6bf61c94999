"""Scikit-learn and faiss backends of :func:`bensemble.metrics.fit_bins` (``"sklearn"``,
``"minibatch"``, ``"faiss"``); the ``"torch"`` backend is
:mod:`bensemble.metrics.binning._lloyd`."""

from __future__ import annotations

import numpy as np
import torch

from bensemble.metrics.binning._nearest import _assign

__all__ = ["_fit_sklearn", "_fit_faiss"]


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
