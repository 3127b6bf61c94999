"""Concurrent per-class K-means (bensemble.metrics.binning._threads): the same centroids as the
sequential per-class loop, class for class, and the thread setting restored."""

from __future__ import annotations

import pytest
import torch

from bensemble.metrics import expected_epistemic_calibration_error, fit_bins
from bensemble.metrics.binning._fit import DEFAULT_LLOYD_RTOL, _fit
from bensemble.metrics.binning._threads import map_classes, single_threaded


def _members(seed=0, h=5, n=3000, k=6):
    g = torch.Generator().manual_seed(seed)
    z = 2 * torch.randn(h, n, k, generator=g, dtype=torch.float64)
    z += 2 * torch.randn(1, n, k, generator=g, dtype=torch.float64)
    return torch.softmax(z, -1), torch.randint(0, k, (n,), generator=g)


@pytest.mark.parametrize("subsample", [None, 1000])
def test_concurrent_fits_equal_the_sequential_loop(subsample):
    members, _ = _members()
    xs = [members[:, :, k].T.contiguous() for k in range(members.shape[2])]
    loop = [_fit(x, 20, seed=7, subsample=subsample) for x in xs]
    pooled = map_classes(lambda k: _fit(xs[k], 20, seed=7, subsample=subsample), len(xs), workers=3)
    for a, b in zip(loop, pooled, strict=True):
        torch.testing.assert_close(a.centroids, b.centroids, rtol=0, atol=0)
        assert (a.n_iter, a.converged, a.inertia) == (b.n_iter, b.converged, b.inertia)


def test_classwise_eece_equals_a_loop_over_classes_with_fit_bins():
    members, y = _members(1, n=2000, k=4)
    details = expected_epistemic_calibration_error(
        members, y, n_bins=15, seed=3, return_details=True
    )
    # the classwise default stops Lloyd by the relative-inertia rule (DEFAULT_LLOYD_RTOL)
    cents = [
        fit_bins(members[:, :, k].T, 15, seed=3, lloyd_rtol=DEFAULT_LLOYD_RTOL) for k in range(4)
    ]
    expected = expected_epistemic_calibration_error(
        members, y, binning="kmeans_fit", centroids=cents
    )
    assert details.value == expected
    assert details.seed == 3


def test_threads_restored_and_errors_propagate_in_class_order():
    before = torch.get_num_threads()
    assert map_classes(lambda k: (k, torch.get_num_threads()), 5, workers=2) == [
        (k, 1) for k in range(5)
    ]
    assert torch.get_num_threads() == before

    def boom(k):
        if k == 2:
            raise ValueError("class 2 failed")
        return k

    with pytest.raises(ValueError, match="class 2 failed"):
        map_classes(boom, 4, workers=2)
    assert torch.get_num_threads() == before
    with single_threaded() as previous:
        assert previous == before and torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
