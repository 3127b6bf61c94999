"""Tests of the EECE binning backends (K-means fit and nearest-centroid assignment)."""

import importlib.util
import math

import numpy as np
import pytest
import torch

from bensemble.datasets import make_toy_gaussians
from bensemble.metrics import assign_bins, fit_bins
from bensemble.metrics.binning import KMeansBinning
from bensemble.metrics.binning._fit import (
    BACKENDS,
    _fit,
    _kmeans_plusplus,
    kmeans_inertia,
    resolve_seed,
)

F64 = torch.float64


def _reference_numpy_nearest(x: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Brute force: explicit differences, first index on ties."""
    d = ((x[:, None, :] - c[None, :, :]) ** 2).sum(-1)
    return d.argmin(1), d.min(1)


def _blobs(n_per: int, centres: torch.Tensor, sd: float, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = centres.repeat_interleave(n_per, 0)
    return x + sd * torch.randn(x.shape, generator=g, dtype=F64)


def _toy_vectors(n: int, h: int, seed: int) -> torch.Tensor:
    """Member vectors [N, H] of a logistic 'posterior' on 1-D inputs (coherent members)."""
    g = torch.Generator().manual_seed(seed)
    s = 3 * torch.randn(n, generator=g, dtype=F64)
    slope = 1 + 0.3 * torch.randn(h, generator=g, dtype=F64)
    shift = 0.5 * torch.randn(h, generator=g, dtype=F64)
    return torch.sigmoid(s[:, None] * slope[None, :] + shift[None, :])


def _toy_problem_vectors(n: int, h: int, seed: int) -> torch.Tensor:
    """Member vectors [N, H] of logistic members on the two-Gaussian toy problem: most rows sit
    near the corners 0 and 1, a sparse minority spreads in between."""
    data = make_toy_gaussians(n, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    slope = 1 + 0.3 * torch.randn(h, generator=g, dtype=F64)
    shift = 0.5 * torch.randn(h, generator=g, dtype=F64)
    return torch.sigmoid(-(5 / 3) * data.x.sum(1)[:, None] * slope + shift)


def _fit_default(x, n_bins, **kw):
    options = {
        "backend": "torch",
        "seed": 0,
        "subsample": None,
        "max_iter": 300,
        "tol": 1e-4,
        "batch_size": 8192,
    }
    options.update(kw)
    return _fit(x, n_bins, **options)


# ----------------------------------------------------------------------------- assignment


@pytest.mark.parametrize(
    "n, h, m",
    [
        pytest.param(50, 3, 4, id="small"),
        pytest.param(3000, 5, 1000, id="many-chunks"),  # 524 rows per chunk at M = 1000
        pytest.param(200, 1, 7, id="one-member"),
    ],
)
def test_assign_bins_matches_brute_force(n, h, m):
    g = torch.Generator().manual_seed(n + m)
    x = torch.rand(n, h, generator=g, dtype=F64)
    c = torch.rand(m, h, generator=g, dtype=F64)
    ids = assign_bins(x, c)
    ref_ids, ref_d = _reference_numpy_nearest(x.numpy(), c.numpy())
    assert ids.dtype == torch.int64
    # matrix-product distances may flip exact near-ties only; compare distances to be robust
    d_ours = ((x - c[ids]) ** 2).sum(1).numpy()
    np.testing.assert_allclose(d_ours, ref_d, rtol=1e-12, atol=1e-14)
    assert (ids.numpy() == ref_ids).mean() > 0.999
    assert kmeans_inertia(x, c) == pytest.approx(ref_d.sum(), rel=1e-12)


def test_assign_bins_ties_go_to_the_lower_index():
    c = torch.tensor([[0.0, 0.0], [1.0, 1.0], [0.0, 0.0]], dtype=F64)
    x = torch.tensor([[0.0, 0.0], [0.5, 0.5], [1.0, 1.0]], dtype=F64)
    assert assign_bins(x, c).tolist() == [0, 0, 1]


def test_assign_bins_accepts_views_and_numpy():
    p = torch.rand(4, 100, generator=torch.Generator().manual_seed(0), dtype=F64)
    c = p.T[:5].clone()
    assert torch.equal(assign_bins(p.T, c), assign_bins(p.T.contiguous().numpy(), c.numpy()))


# ----------------------------------------------------------------------------- fitting


def test_fit_recovers_separated_blobs():
    centres = torch.tensor([[0.1, 0.1, 0.1], [0.9, 0.1, 0.5], [0.1, 0.9, 0.9], [0.8, 0.8, 0.2]])
    x = _blobs(200, centres.double(), 0.01, seed=1)
    c = fit_bins(x, 4, seed=3)
    order = torch.argsort(c[:, 0] * 10 + c[:, 1])
    ref = centres.double()[torch.argsort(centres[:, 0] * 10 + centres[:, 1])]
    torch.testing.assert_close(c[order], ref, atol=0.005, rtol=0)


def test_lloyd_fixed_point_centroids_are_cell_means():
    x = _blobs(100, torch.rand(6, 2, generator=torch.Generator().manual_seed(2)).double(), 0.05, 4)
    fit = _fit_default(x, 6, tol=0.0)
    assert fit.converged
    ids = assign_bins(x, fit.centroids)
    means = torch.zeros_like(fit.centroids).index_add_(0, ids, x)
    means /= torch.bincount(ids, minlength=fit.centroids.shape[0])[:, None]
    torch.testing.assert_close(fit.centroids, means, atol=1e-6, rtol=0)  # float32 fit


def test_kmeans_plusplus_picks_distinct_rows():
    x = torch.rand(300, 4, generator=torch.Generator().manual_seed(0))
    rows = _kmeans_plusplus(x, 50, torch.Generator().manual_seed(1))
    assert rows.shape == (50,) and rows.unique().numel() == 50


@pytest.mark.parametrize("backend", ["torch", "sklearn", "minibatch"])
def test_bins_capped_at_distinct_rows(backend):
    distinct = torch.tensor([[0.1, 0.2], [0.3, 0.3], [0.9, 0.1], [0.5, 0.5], [0.0, 1.0]], dtype=F64)
    x = distinct.repeat(40, 1)
    fit = _fit_default(x, 10, backend=backend)
    torch.testing.assert_close(
        torch.sort(fit.centroids[:, 0] * 10 + fit.centroids[:, 1]).values,
        torch.sort(distinct[:, 0] * 10 + distinct[:, 1]).values,
    )
    assert fit.inertia == pytest.approx(0.0, abs=1e-12)


def test_cap_when_bins_exceed_rows():
    x = torch.rand(7, 3, generator=torch.Generator().manual_seed(5), dtype=F64)
    c = fit_bins(x, 20, seed=0)
    assert c.shape == (7, 3)
    assert kmeans_inertia(x, c) == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("backend", ["torch", "sklearn", "minibatch"])
def test_no_empty_bins_on_the_fitted_rows(backend):
    x = _toy_vectors(3000, 6, seed=1)
    fit = _fit_default(x, 60, backend=backend)
    ids = assign_bins(x, fit.centroids)
    assert fit.centroids.shape[1] == 6 and fit.centroids.dtype == F64
    # Every kept centroid owned a fitted row; with float64 reassignment at most a rare near-tie
    # can move the only row of a cell.
    counts = torch.bincount(ids, minlength=fit.centroids.shape[0])
    assert int((counts == 0).sum()) <= 1
    assert fit.backend == backend and fit.n_fit_rows == 3000


def test_torch_matches_sklearn_inertia():
    x = _toy_vectors(8000, 10, seed=2)
    ours = _fit_default(x, 100, backend="torch", seed=1)
    theirs = _fit_default(x, 100, backend="sklearn", seed=1)
    assert ours.inertia == pytest.approx(theirs.inertia, rel=0.03)
    assert ours.converged and theirs.converged


def test_seeds_reproduce_and_differ():
    x = _toy_vectors(2000, 4, seed=3)
    a = fit_bins(x, 30, seed=11)
    torch.testing.assert_close(a, fit_bins(x, 30, seed=11), rtol=0, atol=0)
    g = torch.Generator().manual_seed(5)
    b = fit_bins(x, 30, generator=g)
    g = torch.Generator().manual_seed(5)
    torch.testing.assert_close(b, fit_bins(x, 30, generator=g), rtol=0, atol=0)
    assert not torch.equal(a, fit_bins(x, 30, seed=12))
    assert resolve_seed(None, 7, "f") == 7


def test_subsample_fits_on_a_seeded_subset():
    x = _toy_vectors(5000, 3, seed=4)
    fit = _fit_default(x, 20, subsample=1000, seed=2)
    assert fit.n_fit_rows == 1000 and fit.settings["subsample"] == 1000
    again = _fit_default(x, 20, subsample=1000, seed=2)
    torch.testing.assert_close(fit.centroids, again.centroids, rtol=0, atol=0)
    full = _fit_default(x, 20, subsample=None, seed=2)
    assert full.n_fit_rows == 5000
    # A subsample fit is a good partition of all rows too (inertia within a few percent).
    assert kmeans_inertia(x, fit.centroids) == pytest.approx(
        kmeans_inertia(x, full.centroids), rel=0.1
    )
    # No subsampling at or below the threshold.
    assert _fit_default(x, 20, subsample=5000).n_fit_rows == 5000


def test_refinement_steps_lower_the_inertia_on_all_rows():
    x = _toy_vectors(6000, 4, seed=6)
    inertia = [
        kmeans_inertia(x, _fit_default(x, 40, subsample=1500, refine=r, seed=1).centroids)
        for r in range(3)
    ]
    assert inertia[0] >= inertia[1] >= inertia[2]
    assert inertia[2] < 0.995 * inertia[0]


def test_one_refinement_step_is_a_lloyd_step_over_all_rows():
    x = _toy_vectors(5000, 3, seed=7)
    start = _fit_default(x, 25, subsample=1000, refine=0, seed=2).centroids
    refined = _fit_default(x, 25, subsample=1000, refine=1, seed=2).centroids
    ids = assign_bins(x, start)
    counts = torch.bincount(ids, minlength=start.shape[0])
    means = torch.zeros_like(start).index_add_(0, ids, x) / counts[:, None]
    torch.testing.assert_close(refined, means[counts > 0], atol=1e-5, rtol=0)


def test_minibatch_keeps_sparse_clusters():
    # scikit-learn's default reassignment_ratio=0.01 made the inertia several times worse here.
    x = _toy_problem_vectors(20_000, 6, seed=8)
    ours = _fit_default(x, 100, backend="torch", seed=0)
    mini = _fit_default(x, 100, backend="minibatch", seed=0)
    assert mini.inertia < 1.25 * ours.inertia


def test_auto_resolves_to_torch():
    x = _toy_vectors(500, 3, seed=5)
    assert _fit_default(x, 5, backend="auto").backend == "torch"


@pytest.mark.skipif(importlib.util.find_spec("faiss") is not None, reason="faiss is installed")
def test_faiss_backend_without_faiss_says_how_to_install():
    with pytest.raises(ValueError, match="faiss"):
        fit_bins(_toy_vectors(500, 3, seed=5), 5, backend="faiss", seed=0)


# ----------------------------------------------------------------------------- validation

X = torch.rand(20, 3, dtype=F64)


@pytest.mark.parametrize(
    "call, argument",
    [
        pytest.param(lambda: fit_bins(X[:, 0], 3), "member_vectors", id="vectors-1d"),
        pytest.param(lambda: fit_bins(X, 0), "n_bins", id="n-bins-zero"),
        pytest.param(lambda: fit_bins(X, 3, backend="kmeans"), "backend", id="backend"),
        pytest.param(lambda: fit_bins(X, 3, max_iter=0), "max_iter", id="max-iter"),
        pytest.param(lambda: fit_bins(X, 3, tol=-1.0), "tol", id="tol"),
        pytest.param(lambda: fit_bins(X, 3, subsample=0), "subsample", id="subsample"),
        pytest.param(lambda: fit_bins(X, 3, refine=-1), "refine", id="refine"),
        pytest.param(
            lambda: fit_bins(X, 3, backend="minibatch", batch_size=100), "batch_size", id="batch"
        ),
        pytest.param(
            lambda: fit_bins(X, 3, seed=1, generator=torch.Generator()), "generator", id="both"
        ),
        pytest.param(lambda: fit_bins(X, 3, seed=-1), "seed", id="seed-negative"),
        pytest.param(lambda: fit_bins(X, 3, coreset=0), "coreset", id="coreset"),
        pytest.param(lambda: fit_bins(X, 3, lloyd_rtol=-1e-3), "lloyd_rtol", id="rtol"),
        pytest.param(lambda: fit_bins(X, 3, lloyd_rtol=None), "lloyd_rtol", id="rtol-none"),
        pytest.param(lambda: KMeansBinning(lloyd_rtol=math.nan), "lloyd_rtol", id="km-rtol"),
        pytest.param(lambda: KMeansBinning(coreset=0), "coreset", id="km-coreset"),
        pytest.param(lambda: KMeansBinning(batch_size=0), "batch_size", id="km-batch"),
        pytest.param(lambda: assign_bins(X, torch.rand(4, 2)), "centroids", id="width"),
        pytest.param(lambda: assign_bins(X, torch.rand(4)), "centroids", id="centroids-1d"),
        pytest.param(lambda: kmeans_inertia(X, torch.rand(4, 5)), "centroids", id="inertia"),
    ],
)
def test_bad_input_names_the_argument(call, argument):
    with pytest.raises(ValueError, match=f"`{argument}`"):
        call()


def test_kmeans_binning_keeps_lloyd_rtol_none_for_the_per_mode_default():
    assert KMeansBinning().lloyd_rtol is None
    assert KMeansBinning(lloyd_rtol=1e-3).lloyd_rtol == 1e-3
    assert KMeansBinning(lloyd_rtol=0).lloyd_rtol == 0.0


def test_backend_error_lists_the_options():
    with pytest.raises(ValueError) as err:
        fit_bins(X, 3, backend="nope")
    for name in BACKENDS:
        assert repr(name) in str(err.value)
