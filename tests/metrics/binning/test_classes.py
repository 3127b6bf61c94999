"""Batched classwise K-means (bensemble.metrics.binning._classes): class for class bit-identical to
the single-threaded per-class loop, whatever the batching, the workers and the stopping rule."""

from __future__ import annotations

import pytest
import torch

from bensemble.metrics import expected_epistemic_calibration_error, fit_bins
from bensemble.metrics.binning._batched import _lloyd_batch, _seed_batch
from bensemble.metrics.binning._classes import MAX_CHUNK_CLASSES, _chunk_size, fit_classes
from bensemble.metrics.binning._fit import DEFAULT_LLOYD_RTOL, fit_assign
from bensemble.metrics.binning._lloyd import _kmeans_plusplus, _lloyd
from bensemble.metrics.binning._threads import single_threaded

F64 = torch.float64


def _classes(k=6, n=400, h=5, seed=0):
    """``k`` classes of ``[n, h]`` member vectors (softmax one-vs-rest probabilities)."""
    g = torch.Generator().manual_seed(seed)
    z = 2 * torch.randn(h, n, k, generator=g, dtype=F64)
    z += 2 * torch.randn(1, n, k, generator=g, dtype=F64)
    p = torch.softmax(z, -1)
    return [p[:, :, c].T for c in range(k)]  # non-contiguous views, as the EECE passes them


def _options(**kw):
    return {"subsample": 50_000, "refine": 2, "max_iter": 300, "tol": 1e-4, **kw}


def _loop(xs, n_bins, seed, options):
    with single_threaded():
        return [
            fit_assign(
                x, n_bins, backend="torch", seed=seed, fit_options={**options, "batch_size": 8192}
            )
            for x in xs
        ]


def _batched(xs, n_bins, seed, options, workers):
    def fallback(k):
        return fit_assign(
            xs[k], n_bins, backend="torch", seed=seed, fit_options={**options, "batch_size": 8192}
        )

    options = {"coreset": None, "lloyd_rtol": 0.0, **options}
    return fit_classes(
        lambda k: xs[k], len(xs), n_bins, seed=seed, fallback=fallback, workers=workers, **options
    )


def _assert_same(loop, batched):
    assert len(loop) == len(batched)
    for (ids_a, c_a, info_a), (ids_b, c_b, info_b) in zip(loop, batched, strict=True):
        assert torch.equal(ids_a, ids_b)
        assert torch.equal(c_a, c_b)
        assert info_a == info_b


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize(
    "options",
    [
        _options(),  # converges (strict or by tolerance)
        _options(max_iter=3),  # stops at max_iter: labels re-assigned to the final centroids
        _options(tol=0.0),  # only the strict rule stops
        _options(subsample=250),  # subsample fit, then refinement over every row
        _options(lloyd_rtol=1e-3),  # the classwise default's rule (a looser rtol)
        _options(lloyd_rtol=3e-4, coreset=100),  # both rules, the coreset fit
    ],
)
def test_batched_fits_equal_the_single_threaded_loop(options, workers):
    xs = _classes()
    assert _chunk_size(len(xs), 400, 5, workers) > 1  # really batched
    _assert_same(_loop(xs, 12, 7, options), _batched(xs, 12, 7, options, workers))


@pytest.mark.parametrize("rtol", [0.0, 3e-4])
def test_classes_with_few_distinct_rows_and_duplicates_take_the_per_class_path(rtol):
    xs = [x.clone() for x in _classes(k=5, n=300)]
    xs[1] = xs[1][:3].repeat(100, 1)  # 3 distinct rows < 12 bins
    xs[2][100:] = xs[2][:200]  # duplicated rows, still plenty of distinct ones
    xs[3] = xs[3][:12].repeat(25, 1)  # exactly as many distinct rows as bins
    # distinct in float64, only 4 distinct rows in float32: the seeding runs out of rows
    base = 0.5 + 0.125 * torch.arange(20, dtype=F64).view(4, 5) / 20
    xs[4] = base.repeat(75, 1) + 1e-12 * torch.arange(300, dtype=F64)[:, None]
    assert torch.unique(xs[4].to(torch.float32), dim=0).shape[0] == 4
    opts = _options(lloyd_rtol=rtol)
    _assert_same(_loop(xs, 12, 3, opts), _batched(xs, 12, 3, opts, 2))


def test_one_class_and_tiny_classes_with_the_default_rule():
    xs = _classes(k=4, n=200)
    opts = _options(lloyd_rtol=DEFAULT_LLOYD_RTOL)
    _assert_same(_loop(xs[:1], 10, 1, opts), _batched(xs[:1], 10, 1, opts, 2))  # K = 1
    tiny = [xs[0][:3], xs[1][:1], xs[2][:12], xs[3]]  # fewer rows than bins, one row
    _assert_same(_loop(tiny, 10, 1, opts), _batched(tiny, 10, 1, opts, 2))


def test_one_class_and_rows_of_different_classes_never_mix():
    xs = _classes(k=3, n=200)
    _assert_same(_loop(xs[:1], 10, 1, _options()), _batched(xs[:1], 10, 1, _options(), 2))
    # a class moved to another batch position gets the same bins
    swapped = [xs[2], xs[0], xs[1]]
    out = _batched(swapped, 10, 1, _options(), 1)
    ref = _batched(xs, 10, 1, _options(), 1)
    for a, b in zip(out, [ref[2], ref[0], ref[1]], strict=True):
        assert torch.equal(a[0], b[0])


def test_batched_seeding_and_lloyd_equal_the_per_class_functions():
    xs = [x.contiguous().to(torch.float32) for x in _classes(k=4, n=300)]
    x = torch.stack(xs)
    with single_threaded():
        gens = [torch.Generator().manual_seed(5) for _ in xs]
        rows, exhausted = _seed_batch(x, 9, gens)
        assert not exhausted.any()
        start = torch.stack([xi[r] for xi, r in zip(xs, rows, strict=True)])
        fits = _lloyd_batch(x, start, 300, [1e-6] * 4)
        for k, xi in enumerate(xs):
            ref_rows = _kmeans_plusplus(xi, 9, torch.Generator().manual_seed(5))
            assert torch.equal(rows[k], ref_rows)
            c, labels, n_iter, converged = _lloyd(xi, xi[ref_rows].clone(), 300, 1e-6)
            c_b, labels_b, n_iter_b, converged_b = fits[k]
            assert torch.equal(c, c_b)
            assert (n_iter, converged) == (n_iter_b, converged_b)
            if labels_b is not None:  # strict stop: the batch's labels are the final ones
                assert torch.equal(labels, labels_b)


@pytest.mark.parametrize("lloyd_rtol", [0.0, DEFAULT_LLOYD_RTOL])
def test_classwise_eece_equals_per_class_fit_bins(lloyd_rtol):
    # lloyd_rtol=0 is the exact option: the bins of the exact per-class fits, unchanged
    g = torch.Generator().manual_seed(2)
    h, n, k = 4, 600, 7
    z = 2 * torch.randn(h, n, k, generator=g, dtype=F64) + 2 * torch.randn(1, n, k, generator=g)
    members = torch.softmax(z, -1)
    y = torch.randint(0, k, (n,), generator=g)
    details = expected_epistemic_calibration_error(
        members, y, n_bins=20, seed=11, return_details=True, lloyd_rtol=lloyd_rtol
    )
    with single_threaded():
        cents = [fit_bins(members[:, :, c].T, 20, seed=11, lloyd_rtol=lloyd_rtol) for c in range(k)]
    expected = expected_epistemic_calibration_error(
        members, y, binning="kmeans_fit", centroids=cents
    )
    assert details.value == expected
    assert details.n_bins_fitted == max(c.shape[0] for c in cents)
    if lloyd_rtol:
        assert details.backend_settings["lloyd_rtol"] == lloyd_rtol


def test_threads_restored_and_errors_propagate():
    xs = _classes(k=4, n=200)
    before = torch.get_num_threads()

    def boom(k):
        raise ValueError(f"class {k} failed")

    xs[2] = xs[2][:2].repeat(100, 1)  # forces class 2 onto the fallback
    with pytest.raises(ValueError, match="class 2 failed"):
        fit_classes(lambda k: xs[k], 4, 10, seed=0, fallback=boom, workers=2, **_options())
    assert torch.get_num_threads() == before


def test_chunk_size_bounds_the_chunk_and_feeds_every_worker():
    assert _chunk_size(1000, 50_000, 10, 2) == 8  # 2^22 elements: 8 classes of 50,000 x 10
    assert _chunk_size(1000, 5_000, 10, 2) == MAX_CHUNK_CLASSES
    assert _chunk_size(1000, 10**6, 10, 2) == 1  # huge classes: one at a time
    assert _chunk_size(10, 1000, 10, 2) == 5  # both workers get classes
    assert _chunk_size(3, 10, 5, 1) == 3


class _Block:
    """Member vectors offering ``block(a, b)`` like the EECE's (a contiguous ``[b - a, N, H]``)."""

    def __init__(self, xs):
        self.xs = xs

    def __call__(self, k):
        return self.xs[k]

    def block(self, a, b):
        return torch.stack([x.contiguous() for x in self.xs[a:b]])


@pytest.mark.parametrize("max_batch", [3, None])
def test_final_bins_from_the_chunk_block_equal_the_stacked_group_and_the_dense_assign(max_batch):
    # classes 1 and 4 have 2 distinct rows (fallback): the sorted group is a strict subset of the
    # chunk, so the float64 rows are gathered from the block at positions != 0..C-1
    xs = [x.contiguous() for x in _classes(k=6, n=1500)]
    for k in (1, 4):
        xs[k] = xs[k][torch.arange(1500) % 2].clone()

    def run(vectors):
        def fallback(k):
            return fit_assign(xs[k], 12, backend="torch", seed=3, fit_options=_options())

        return fit_classes(
            vectors,
            len(xs),
            12,
            seed=3,
            fallback=fallback,
            workers=1,
            max_batch=max_batch,
            **_options(subsample=None, lloyd_rtol=3e-4),
        )

    plain, blocked = run(lambda k: xs[k]), run(_Block(xs))
    _assert_same(plain, blocked)
    for x, (ids, centroids, _) in zip(xs, blocked, strict=True):
        dense = torch.cdist(x, centroids).argmin(1)  # exact nearest on this random data
        assert torch.equal(ids, dense)
