"""Chunked evaluation of a memory-mapped .npy equals the in-memory evaluation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bensemble.app.evaluate import evaluate_predictions
from bensemble.metrics.streaming_eval import evaluate_chunked, open_memmap


def _members(m=3, n=700, k=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    z = 2 * torch.randn(m, n, k, generator=g, dtype=torch.float64)
    z += 2 * torch.randn(1, n, k, generator=g, dtype=torch.float64)
    return z, torch.randint(0, k, (n,), generator=g)


def _in_memory(probs, y, **kw):
    ev = evaluate_predictions(probs, y, **kw)
    out = {key: v for key, v in ev.metrics[0].items() if key not in ("stage", "part")}
    if ev.ensemble is not None:
        out.update({key: v for key, v in ev.ensemble.items() if key != "members"})
    return out


@pytest.mark.parametrize("m", [1, 3])
def test_memmapped_chunks_equal_the_in_memory_path(tmp_path, m):
    z, y = _members(m)
    probs = torch.softmax(z, -1)
    path = tmp_path / "members.npy"
    np.save(path, probs.numpy() if m > 1 else probs[0].numpy())
    arr = open_memmap(path)
    assert isinstance(arr, np.memmap)
    got = evaluate_chunked(arr, y, chunk_size=97, eece_bins=20, seed=3, progress=False)
    expected = _in_memory(probs, y, eece_bins=20, seed=3)
    assert set(got) == set(expected)
    for key, value in expected.items():
        if value is None:
            assert got[key] is None, key
        else:
            assert got[key] == pytest.approx(value, abs=1e-12, rel=1e-12), key


@pytest.mark.parametrize("perm", [[2, 0, 1], [1, 2, 0], [2, 1, 0]])
def test_eece_is_the_same_for_any_member_order(tmp_path, perm):
    """The K-means runs on the members in the EECE's canonical order, as in memory."""
    z, y = _members(3)
    probs = torch.softmax(z, -1)
    path = tmp_path / "members.npy"
    np.save(path, probs[perm].numpy())
    got = evaluate_chunked(open_memmap(path), y, chunk_size=61, eece_bins=12, progress=False)
    expected = _in_memory(probs, y, eece_bins=12, seed=0)
    assert got["eece"] == pytest.approx(expected["eece"], abs=1e-14, rel=1e-12)
    assert got.get("eece_bins_fitted") == expected["eece_bins_fitted"]


def test_several_kmeans_seeds(tmp_path):
    z, y = _members(3, n=300)
    probs = torch.softmax(z, -1)
    got = evaluate_chunked(probs.numpy(), y, chunk_size=50, eece_seeds=3, progress=False)
    expected = _in_memory(probs, y, eece_seeds=3)
    for key in ("eece", "eece_sd", "eece_seeds", "eece_bins"):
        assert got[key] == pytest.approx(expected[key], abs=1e-14, rel=1e-12), key


def test_logits_and_subsampled_kmeans_fit(tmp_path, monkeypatch):
    import bensemble.metrics._kmeans as km
    import bensemble.metrics.streaming_eval as se

    # a fit on a seeded subsample plus refinement passes streamed over the file
    monkeypatch.setattr(se, "DEFAULT_SUBSAMPLE", 300)
    monkeypatch.setattr(km, "DEFAULT_SUBSAMPLE", 300)
    z, y = _members(3, n=900)
    path = tmp_path / "logits.npy"
    np.save(path, z.numpy())
    got = evaluate_chunked(open_memmap(path), y, chunk_size=128, eece_bins=12, from_logits=True)
    from bensemble.metrics import expected_epistemic_calibration_error

    probs = torch.softmax(z, -1)
    eece = expected_epistemic_calibration_error(probs, y, n_bins=12, seed=0, subsample=300)
    assert got["eece"] == pytest.approx(eece, abs=1e-12, rel=1e-12)
    assert got["nll"] == pytest.approx(_in_memory(probs, y)["nll"], abs=1e-12)


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="evaluate_chunked: `member_probs` must be an array"):
        evaluate_chunked(np.zeros(3), [0, 1, 2])
    with pytest.raises(ValueError, match="evaluate_chunked: `chunk_size` must be"):
        evaluate_chunked(np.full((2, 2), 0.5), [0, 1], chunk_size=0)
    with pytest.raises(ValueError, match="open_memmap: `path` must be a readable .npy file"):
        open_memmap(tmp_path / "missing.npy")


def test_default_eece_bins_match_bensemble_evaluate(tmp_path):
    """Both paths default to n_bins="auto", so their default EECE is the same number."""
    z, y = _members(3)
    probs = torch.softmax(z, -1)
    got = evaluate_chunked(probs.numpy(), y, chunk_size=97, seed=3, progress=False)
    expected = _in_memory(probs, y, seed=3)
    assert got["eece"] == pytest.approx(expected["eece"], rel=1e-9, abs=1e-12)


def test_centroids_are_bit_identical_for_any_member_order():
    """The chunked K-means sees the members in the canonical order whatever order the file
    holds them in: the same centroids, bit for bit, as the in-memory fit on that order."""
    from bensemble.metrics._epistemic_checks import canonical_member_order
    from bensemble.metrics._kmeans import DEFAULT_LLOYD_RTOL, _fit
    from bensemble.metrics.streaming_eval import (
        MemberRows,
        canonical_order_chunked,
        fit_centroids_chunked,
    )

    z, _ = _members(4, n=300)
    probs = torch.softmax(z, -1)
    canonical = probs[canonical_member_order(probs)]
    rtol = DEFAULT_LLOYD_RTOL  # the classwise EECE's stopping rule
    want = [_fit(canonical[:, :, c].T, 9, seed=5, lloyd_rtol=rtol).centroids for c in range(4)]
    for perm in ([0, 1, 2, 3], [3, 1, 0, 2], [2, 3, 1, 0]):
        rows = MemberRows(probs[perm].numpy(), from_logits=False, name="p", fn="test")
        order = canonical_order_chunked(rows, block=40)
        (got,) = fit_centroids_chunked(rows, 9, [5], order=order, block=40)
        for c in range(4):
            assert torch.equal(got[c], want[c]), (perm, c)
