"""``EECEDetails.point_bins``: the bin of every point, the partition a bootstrap holds fixed."""

from __future__ import annotations

import torch

from bensemble import metrics as M
from bensemble.metrics._epistemic_checks import canonical_member_order
from bensemble.metrics.binning._fit import DEFAULT_LLOYD_RTOL


def _members(h=4, n=600, k=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, k, generator=g, dtype=torch.float64)
    p = torch.softmax(logits + 0.5 * torch.randn(h, n, k, generator=g, dtype=torch.float64), -1)
    order = canonical_member_order(p)  # canonical member order: the fit sees p as given
    p = p if order is None else p[order]
    return p, torch.multinomial(p.mean(0), 1, generator=g).squeeze(1)


def test_binary_kmeans_point_bins_are_the_nearest_fitted_centroid():
    p, y = _members()
    pb, yb = p[..., 1], (y == 1).long()
    d = M.expected_epistemic_calibration_error(
        pb, yb, n_bins=12, seed=3, binary=True, return_details=True
    )
    centroids = M.fit_bins(pb.T, 12, seed=3)
    assert d.point_bins.shape == (600,) and d.point_bins.dtype == torch.int64
    assert torch.equal(d.point_bins, M.assign_bins(pb.T, centroids))
    assert torch.equal(torch.bincount(d.point_bins, minlength=d.counts.shape[0]).double(), d.counts)


def test_classwise_point_bins_one_row_per_class_match_assign_bins():
    p, y = _members()
    d = M.expected_epistemic_calibration_error(p, y, n_bins=10, seed=1, return_details=True)
    assert d.point_bins.shape == (3, 600)
    for c in range(3):  # the classwise EECE fits with its default Lloyd stopping rule
        centroids = M.fit_bins(p[:, :, c].T, 10, seed=1, lloyd_rtol=DEFAULT_LLOYD_RTOL)
        assert torch.equal(d.point_bins[c], M.assign_bins(p[:, :, c].T, centroids)), c
        counts = torch.bincount(d.point_bins[c], minlength=d.counts.shape[1]).double()
        assert torch.equal(counts, d.counts[c])


def test_fitted_centroids_and_explicit_bins():
    p, y = _members(seed=2)
    cents = [M.fit_bins(p[:, :, c].T, 6, seed=0) for c in range(3)]
    d = M.expected_epistemic_calibration_error(
        p, y, binning="kmeans_fit", centroids=cents, return_details=True
    )
    for c in range(3):
        assert torch.equal(d.point_bins[c], M.assign_bins(p[:, :, c].T, cents[c]))
    bins = torch.arange(600) % 5 * 7  # ids 0, 7, ..., 28: per-bin arrays follow the sorted ids
    d = M.expected_epistemic_calibration_error(
        p[..., 1], (y == 1).long(), bins=bins, binary=True, return_details=True
    )
    assert torch.equal(d.point_bins, bins // 7)
