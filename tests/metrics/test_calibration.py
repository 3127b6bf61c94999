"""Tests for bensemble.metrics.calibration and its binning kernels (bensemble.metrics._binning).

References (independent implementations written here):
* ``_reference_numpy_*``: plain float64 numpy loops over bins (and classes);
* ``_reference_bensemble_*``: bensemble 0.2.2's per-bin mask loop, re-implemented from its
  description (float32 edges from ``torch.linspace``, ``conf > lower & conf <= upper`` compared in
  the input dtype, float32 accumulation);
* ``_reference_torchmetrics_ece``: ``torchmetrics.functional.classification.
  multiclass_calibration_error`` (bins ``[lower, upper)`` plus a bin of its own for 1.0, float32
  sums);
* ``_reference_guide_ece``: the practitioner's guide's ``ece`` (bins ``[lower, upper)``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from bensemble.metrics import (
    CalibrationBins,
    binned_calibration_stats,
    calibration_error,
    calibration_error_from_bins,
    classwise_calibration_error,
    expected_calibration_error,
    maximum_calibration_error,
    reliability_diagram,
)
from bensemble.metrics._binning import (
    bucketize_ids,
    comparison_edges,
    grid_edges,
    quantile_edges,
    uniform_bin_ids,
)

NORMS = ("l1", "l2", "max")
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


# ----------------------------------------------------------------------------- data helpers


def _probs(
    seed: int,
    n: int,
    k: int,
    dtype=torch.float64,
    scale: float = 2.0,
    on_edges=0.0,
    n_bins: int = 15,
):
    """Softmax probabilities; a fraction ``on_edges`` of rows has its top probability exactly on
    a bin edge (as seen in ``dtype``), plus a few rows at confidence 1."""
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(scale * torch.randn(n, k, generator=g, dtype=torch.float64), 1)
    y = torch.randint(0, k, (n,), generator=g)
    m = int(on_edges * n)
    if m:
        edges = comparison_edges(n_bins, dtype)
        edges = edges[edges >= 1.0 / k]
        c = edges[torch.randint(0, len(edges), (m,), generator=g)]
        rows = ((1.0 - c) / (k - 1))[:, None].expand(m, k).clone()
        cls = torch.randint(0, k, (m,), generator=g)
        rows[torch.arange(m), cls] = c
        p[:m] = rows
        p[m : m + 3] = torch.nn.functional.one_hot(y[m : m + 3], k).double()  # confidence 1.0
    return p.to(dtype), y


def _brute_bin_ids(values: torch.Tensor, n_bins: int) -> torch.Tensor:
    """Bin of each value by comparing it with every edge in its own dtype (0 -> bin 0)."""
    e = torch.linspace(0, 1, n_bins + 1).to(values.dtype)
    inside = (values[:, None] > e[None, :-1]) & (values[:, None] <= e[None, 1:])
    return inside.to(torch.int64).argmax(1)  # a row with no True (value 0) gives 0


# ----------------------------------------------------------------------------- references


def _reference_numpy_calibration_error(conf, correct, edges, norm="l1"):
    """Plain float64 loop over bins ``(lo, hi]`` (0 in bin 0) with explicit float64 edges."""
    conf = np.asarray(conf, dtype=np.float64)
    correct = np.asarray(correct, dtype=np.float64)
    edges = np.asarray(edges, dtype=np.float64)
    n = len(conf)
    l1 = l2 = mx = 0.0
    for b in range(len(edges) - 1):
        mask = (conf > edges[b]) & (conf <= edges[b + 1])
        if b == 0:
            mask |= conf == 0.0
        if mask.any():
            gap = abs(correct[mask].mean() - conf[mask].mean())
            l1 += mask.sum() / n * gap
            l2 += mask.sum() / n * gap**2
            mx = max(mx, gap)
    return {"l1": l1, "l2": np.sqrt(l2), "max": mx}[norm]


def _numpy_grid(n_bins, dtype=torch.float64):
    """bensemble's grid (torch's float32 linspace) as seen in ``dtype``, as float64 numpy."""
    return comparison_edges(n_bins, dtype).numpy()


def _reference_numpy_ece(probs, targets, n_bins, norm="l1", edges=None):
    p = probs.double().numpy()
    conf = p.max(1)
    correct = p.argmax(1) == targets.numpy()
    edges = _numpy_grid(n_bins, probs.dtype) if edges is None else edges
    return _reference_numpy_calibration_error(conf, correct, edges, norm)


def _reference_numpy_classwise(probs, targets, n_bins, norm="l1"):
    p = probs.double().numpy()
    y = targets.numpy()
    edges = _numpy_grid(n_bins, probs.dtype)
    per_class = [
        _reference_numpy_calibration_error(p[:, k], y == k, edges, norm) for k in range(p.shape[1])
    ]
    return float(np.mean(per_class))


def _reference_numpy_quantile_edges(conf, n_bins):
    c = np.sort(np.asarray(conf, dtype=np.float64))
    n = len(c)
    ranks = [-(-k * n // n_bins) for k in range(1, n_bins)]  # ceil(k N / n)
    return np.concatenate([[0.0], c[np.array(ranks, dtype=int) - 1], [1.0]])


def _reference_bensemble_ece(probs: torch.Tensor, targets: torch.Tensor, n_bins: int) -> float:
    confidences, predictions = torch.max(probs, dim=1)
    accuracies = predictions.eq(targets)
    edges = torch.linspace(0, 1, n_bins + 1, device=probs.device)
    total = torch.zeros(1, device=probs.device)
    for lower, upper in zip(edges[:-1], edges[1:]):
        in_bin = (confidences > lower) & (confidences <= upper)
        weight = in_bin.float().mean()
        if weight.item() > 0.0:
            gap = torch.abs(confidences[in_bin].mean() - accuracies[in_bin].float().mean())
            total += weight * gap
    return total.item()


def _reference_bensemble_reliability(probs, targets, n_bins):
    confidences, predictions = torch.max(probs, dim=1)
    accuracies = predictions.eq(targets)
    edges = torch.linspace(0, 1, n_bins + 1, device=probs.device)
    out = {"confidences": [], "accuracies": [], "proportions": [], "counts": []}
    for lower, upper in zip(edges[:-1], edges[1:]):
        in_bin = (confidences > lower) & (confidences <= upper)
        weight = in_bin.float().mean().item()
        out["counts"].append(int(in_bin.sum()))
        if weight > 0.0:
            out["accuracies"].append(accuracies[in_bin].float().mean().item())
            out["confidences"].append(confidences[in_bin].mean().item())
            out["proportions"].append(weight)
        else:
            out["accuracies"].append(0.0)
            out["confidences"].append((lower.item() + upper.item()) / 2.0)
            out["proportions"].append(0.0)
    return out


def _reference_torchmetrics_ece(probs, targets, n_bins, norm="l1"):
    from torchmetrics.functional.classification import multiclass_calibration_error

    value = multiclass_calibration_error(
        probs, targets, num_classes=probs.shape[1], n_bins=n_bins, norm=norm
    )
    return float(value)


def _reference_guide_ece(confidences, correct, n_bins=10):
    """The guide's rule: bin index min(floor(c * n), n - 1), i.e. bins [lower, upper)."""
    c = np.asarray(confidences, dtype=float)
    y = np.asarray(correct, dtype=float)
    idx = np.minimum((c * n_bins).astype(int), n_bins - 1)
    total = 0.0
    for b in range(n_bins):
        mask = idx == b
        if mask.any():
            total += mask.mean() * abs(y[mask].mean() - c[mask].mean())
    return total


def _guide_data():
    rng = np.random.default_rng(0)
    p_true = rng.uniform(0.5, 1.0, 5000)
    correct = (rng.uniform(size=5000) < p_true).astype(float)
    return p_true, np.clip(p_true**0.4, 0, 1), correct


# ----------------------------------------------------------------------------- edge rule / kernels


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n_bins", [1, 2, 3, 10, 15, 200, 3000])
def test_uniform_bin_ids_match_brute_force_edge_comparison(dtype, n_bins):
    g = torch.Generator().manual_seed(n_bins)
    edges = torch.linspace(0, 1, n_bins + 1).to(dtype)
    values = torch.cat([torch.rand(3000, generator=g).to(dtype), edges, edges.nextafter(edges * 2)])
    values = values.clamp(0, 1)
    expected = _brute_bin_ids(values, n_bins)
    ids = uniform_bin_ids(values, n_bins)
    assert ids.dtype == torch.int32
    torch.testing.assert_close(ids.long(), expected, rtol=0, atol=0)
    ids_b = bucketize_ids(values.double(), comparison_edges(n_bins, dtype))
    torch.testing.assert_close(ids_b, expected, rtol=0, atol=0)


def test_uniform_bin_ids_groups_offset_by_stride():
    v = torch.tensor([0.0, 0.3, 1.0, 0.55]).double()
    groups = torch.tensor([0, 1, 2, 1])
    ids = uniform_bin_ids(v, 4, groups=groups, n_groups=3)
    assert ids.tolist() == [0, 5 + 1, 10 + 3, 5 + 2]


def test_edge_rule_pinned_values():
    # n_bins=4: edges 0, .25, .5, .75, 1 are exact in every dtype; (lower, upper], 0 -> bin 0
    for dtype in (torch.float64, torch.float32, torch.float16):
        v = torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0, 0.2500001, 0.9999], dtype=dtype)
        bins = binned_calibration_stats(v, torch.ones(7, dtype=torch.bool), n_bins=4)
        ids = uniform_bin_ids(v, 4)
        expected_last = 1 if dtype != torch.float16 else 0  # 0.2500001 rounds to .25 in half
        assert ids.tolist() == [0, 0, 1, 2, 3, expected_last, 3], dtype
        assert bins.counts.sum().item() == 7
    # bensemble's float32 grid: edge 7 of 10 bins is 0.699999988 < 0.7 (float64), edge 3 is
    # 0.300000012 > 0.3, so float64 0.7 is in bin 7 and 0.3 in bin 2; float32(0.7) *is* edge 7.
    v64 = torch.tensor([0.7, 0.3], dtype=torch.float64)
    assert uniform_bin_ids(v64, 10).tolist() == [7, 2]
    v32 = torch.tensor([0.7, 0.3], dtype=torch.float32)
    assert uniform_bin_ids(v32, 10).tolist() == [6, 2]
    # float16: the grid is rounded to half, float16(0.7) equals the rounded edge 7 -> bin 6
    v16 = torch.tensor([0.7], dtype=torch.float16)
    assert uniform_bin_ids(v16, 10).tolist() == [6]


def test_confidence_one_and_zero():
    d = binned_calibration_stats([0.0, 1.0, 1.0], [0, 1, 0], n_bins=5)
    assert d.counts.tolist() == [1.0, 0.0, 0.0, 0.0, 2.0]
    assert calibration_error([0.0, 1.0], [0, 1], n_bins=5) == 0.0


def test_grid_edges_are_bensembles_float32_linspace():
    e = grid_edges(15)
    assert e.dtype == torch.float64
    torch.testing.assert_close(e, torch.linspace(0, 1, 16).double(), rtol=0, atol=0)


# ----------------------------------------------------------------------------- bensemble 0.2


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16])
@pytest.mark.parametrize("n_bins", [1, 10, 15, 200])
def test_ece_matches_bensemble_loop_including_values_on_edges(dtype, n_bins):
    probs, y = _probs(n_bins, 3000, 4, dtype, on_edges=0.3, n_bins=n_bins)
    ours = expected_calibration_error(probs, y, n_bins)
    tol = {torch.float64: 1e-6, torch.float32: 1e-6, torch.float16: 2e-3}[dtype]
    assert ours == pytest.approx(_reference_bensemble_ece(probs, y, n_bins), abs=tol)
    # same bins exactly: counts per bin equal bensemble's mask counts
    d = reliability_diagram(probs, y, n_bins)
    assert d["counts"] == _reference_bensemble_reliability(probs, y, n_bins)["counts"]
    # and float64 accumulation agrees with a float64 loop to 1e-12
    assert ours == pytest.approx(_reference_numpy_ece(probs, y, n_bins), abs=1e-12)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_reliability_diagram_matches_bensemble(dtype):
    probs, y = _probs(3, 500, 3, dtype, scale=0.7, on_edges=0.2)
    ours = reliability_diagram(probs, y, n_bins=15)
    ref = _reference_bensemble_reliability(probs, y, n_bins=15)
    assert set(ours) == {"confidences", "accuracies", "proportions", "counts", "edges"}
    for key in ("confidences", "accuracies", "proportions"):
        assert len(ours[key]) == 15
        np.testing.assert_allclose(ours[key], ref[key], rtol=0, atol=1e-6)
    assert ours["counts"] == ref["counts"]
    assert ours["edges"] == torch.linspace(0, 1, 16).tolist()
    empty = [b for b, c in enumerate(ours["counts"]) if c == 0]
    assert empty, "the data should leave some bins empty (confidence >= 1/3)"
    for b in empty:  # empty bin: exact midpoint, accuracy 0, proportion 0 (bensemble 0.2)
        assert ours["confidences"][b] == ref["confidences"][b]
        assert ours["accuracies"][b] == 0.0 and ours["proportions"][b] == 0.0
    assert sum(ours["counts"]) == 500


# ----------------------------------------------------------------------------- torchmetrics


def test_ece_agrees_with_torchmetrics_on_generic_data_float32_drift():
    """Generic float32 data at 10^6 rows: torchmetrics (float32 sums) agrees to ~1e-6.

    Our float64 sums agree with a float64 reference to 1e-12; torchmetrics drifts further.
    """
    g = torch.Generator().manual_seed(0)
    logits = 2.0 * torch.randn(1_000_000, 3, generator=g)
    probs = torch.softmax(logits, 1)
    y = torch.randint(0, 3, (1_000_000,), generator=g)
    ours = expected_calibration_error(probs, y, 15)
    ref64 = _reference_numpy_ece(probs, y, 15)
    tm = _reference_torchmetrics_ece(probs, y, 15)
    assert abs(ours - ref64) <= 1e-12
    assert abs(ours - tm) <= 1e-5
    assert abs(tm - ref64) >= abs(ours - ref64)


@pytest.mark.parametrize("norm", NORMS)
def test_ece_norms_agree_with_torchmetrics_small(norm):
    probs, y = _probs(11, 2000, 5, torch.float32)
    ours = expected_calibration_error(probs, y, 10, norm=norm)
    assert ours == pytest.approx(_reference_torchmetrics_ece(probs, y, 10, norm), abs=2e-6)


def test_torchmetrics_convention_differs_only_on_edges():
    # confidence exactly 1.0 (wrong) shares the last bin with 0.95 (right) here; torchmetrics
    # gives 1.0 a bin of its own: 0.5 * |0 - 1| + 0.5 * |1 - 0.95| = 0.525 instead of 0.475.
    probs = torch.tensor([[1.0, 0.0], [0.95, 0.05]])
    y = torch.tensor([1, 0])
    assert expected_calibration_error(probs, y, 15) == pytest.approx(0.475, abs=1e-7)
    assert _reference_torchmetrics_ece(probs, y, 15) == pytest.approx(0.525, abs=1e-6)
    # an interior edge: 0.5 is in bin 0 = (0, .5] here and in bin 1 = [.5, 1) there
    probs = torch.tensor([[0.5, 0.5], [0.9, 0.1]])
    y = torch.tensor([1, 0])
    assert reliability_diagram(probs, y, 2)["counts"] == [1, 1]
    assert expected_calibration_error(probs, y, 2) == pytest.approx(0.3, abs=1e-7)
    assert _reference_torchmetrics_ece(probs, y, 2) == pytest.approx(0.2, abs=1e-6)  # one bin


# ----------------------------------------------------------------------------- float64 references


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_ece_norms_match_numpy_loop(norm, dtype):
    probs, y = _probs(5, 1500, 6, dtype, on_edges=0.2)
    ours = expected_calibration_error(probs, y, 15, norm=norm)
    assert ours == pytest.approx(_reference_numpy_ece(probs, y, 15, norm), abs=1e-12)
    if norm == "max":
        assert maximum_calibration_error(probs, y, 15) == ours


@pytest.mark.parametrize("norm", NORMS)
def test_quantile_binning_matches_numpy_loop(norm):
    probs, y = _probs(6, 1003, 4, torch.float64)
    conf = probs.max(1).values.numpy()
    edges = _reference_numpy_quantile_edges(conf, 10)
    ours = expected_calibration_error(probs, y, 10, norm=norm, binning="quantile")
    assert ours == pytest.approx(_reference_numpy_ece(probs, y, 10, norm, edges=edges), abs=1e-12)
    # inner edges are numpy's inverted-CDF quantiles
    np.testing.assert_array_equal(
        edges[1:-1], np.quantile(conf, np.arange(1, 10) / 10, method="inverted_cdf")
    )


def test_quantile_bins_have_equal_mass_and_ties_stay_together():
    g = torch.Generator().manual_seed(1)
    c = torch.rand(1003, generator=g, dtype=torch.float64)
    bins = binned_calibration_stats(c, torch.zeros(1003, dtype=torch.bool), 10, "quantile")
    assert bins.counts.max() - bins.counts.min() <= 1
    assert bins.counts.sum() == 1003
    # ties: 600 copies of 0.9 cannot be split; later bins are empty, the bin count stays 10
    c = torch.cat([torch.full((600,), 0.9, dtype=torch.float64), torch.rand(400, generator=g) / 2])
    bins = binned_calibration_stats(c, torch.ones(1000), 10, "quantile")
    assert bins.n_bins == 10 and bins.counts.sum() == 1000
    assert (bins.counts == 600).sum() == 1 and (bins.counts == 0).sum() >= 5
    d = reliability_diagram(
        torch.stack([c, 1 - c], 1), torch.zeros(1000, dtype=torch.long), 10, binning="quantile"
    )
    assert len(d["edges"]) == 11 and sum(d["counts"]) == 1000


def test_quantile_edges_per_column():
    g = torch.Generator().manual_seed(2)
    v = torch.rand(101, 3, generator=g, dtype=torch.float64)
    e = quantile_edges(v, 5)
    assert e.shape == (3, 6)
    for k in range(3):
        np.testing.assert_array_equal(e[k].numpy(), _reference_numpy_quantile_edges(v[:, k], 5))


# ----------------------------------------------------------------------------- classwise


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("binning", ["uniform", "quantile"])
def test_classwise_matches_numpy_loop(norm, dtype, binning):
    probs, y = _probs(7, 1200, 5, dtype, scale=1.0)
    ours = classwise_calibration_error(probs, y, 10, norm=norm, binning=binning)
    if binning == "uniform":
        ref = _reference_numpy_classwise(probs, y, 10, norm)
    else:
        p = probs.double().numpy()
        ref = np.mean(
            [
                _reference_numpy_calibration_error(
                    p[:, k], y.numpy() == k, _reference_numpy_quantile_edges(p[:, k], 10), norm
                )
                for k in range(5)
            ]
        )
    assert ours == pytest.approx(ref, abs=1e-12)


@given(seed=st.integers(0, 2**31 - 1), n_bins=st.integers(1, 30))
def test_classwise_binary_equals_positive_class_calibration_error(seed, n_bins):
    """K = 2: classwise ECE is the mean of the two one-vs-rest errors; on generic data (no value
    on an edge) both classes give the same number, that of the positive-class probability."""
    rng = np.random.default_rng(seed)
    p1 = rng.uniform(0, 1, 300)
    y = (rng.uniform(size=300) < p1**1.5).astype(np.int64)
    probs = np.stack([1 - p1, p1], 1)
    cw = classwise_calibration_error(probs, y, n_bins)
    per_class = [calibration_error(probs[:, k], y == k, n_bins) for k in (0, 1)]
    assert cw == pytest.approx(np.mean(per_class), abs=1e-12)
    assert per_class[0] == pytest.approx(per_class[1], abs=1e-9)


# ----------------------------------------------------------------------------- properties


@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 300),
    k=st.integers(2, 6),
    n_bins=st.integers(1, 40),
    binning=st.sampled_from(["uniform", "quantile"]),
)
def test_ranges_norm_order_and_sample_order_invariance(seed, n, k, n_bins, binning):
    probs, y = _probs(seed, n, k, scale=float(seed % 5))
    l1, l2, mx = (
        expected_calibration_error(probs, y, n_bins, norm=nm, binning=binning) for nm in NORMS
    )
    assert 0.0 <= l1 <= l2 + 1e-12 and l2 <= mx + 1e-12 and mx <= 1.0
    cw = classwise_calibration_error(probs, y, n_bins, binning=binning)
    assert 0.0 <= cw <= 1.0
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    assert expected_calibration_error(probs[perm], y[perm], n_bins, binning=binning) == (
        pytest.approx(l1, abs=1e-12)
    )
    assert classwise_calibration_error(probs[perm], y[perm], n_bins, binning=binning) == (
        pytest.approx(cw, abs=1e-12)
    )


def test_one_bin_is_mean_confidence_minus_accuracy():
    probs, y = _probs(8, 400, 3)
    conf, pred = probs.max(1)
    expected = abs(conf.mean().item() - (pred == y).double().mean().item())
    assert expected_calibration_error(probs, y, 1) == pytest.approx(expected, abs=1e-14)


def test_from_logits_equals_float64_softmax():
    g = torch.Generator().manual_seed(9)
    z = 3 * torch.randn(500, 4, generator=g)
    y = torch.randint(0, 4, (500,), generator=g)
    p = torch.softmax(z.double(), 1)
    for fn in (expected_calibration_error, classwise_calibration_error, maximum_calibration_error):
        assert fn(z, y, from_logits=True) == fn(p, y)
    assert reliability_diagram(z, y, from_logits=True) == reliability_diagram(p, y)


def test_numpy_and_torch_inputs_agree():
    probs, y = _probs(10, 300, 3, torch.float32)
    assert expected_calibration_error(probs.numpy(), y.numpy()) == expected_calibration_error(
        probs, y
    )
    assert classwise_calibration_error(probs.numpy(), y.numpy().astype(np.int32)) == (
        classwise_calibration_error(probs, y)
    )
    strided = probs.t().contiguous().t()  # column-major layout
    for fn in (expected_calibration_error, classwise_calibration_error):
        assert fn(strided, y, 10) == pytest.approx(fn(probs, y, 10), abs=1e-15)


# ----------------------------------------------------------------------------- guide


def test_guide_printed_numbers_reproduced():
    p_true, overconf, correct = _guide_data()
    assert round(calibration_error(p_true, correct, n_bins=10), 4) == 0.0132
    assert round(calibration_error(overconf, correct, n_bins=10), 4) == 0.1457


def test_guide_edge_rule_makes_no_difference_on_its_example():
    """The guide bins [lower, upper) with exact k/n; no draw lies on an edge, so the numbers are
    the same to rounding (not only to the 4 printed decimals)."""
    p_true, overconf, correct = _guide_data()
    for c in (p_true, overconf):
        assert calibration_error(c, correct, n_bins=10) == pytest.approx(
            _reference_guide_ece(c, correct), abs=1e-12
        )


def test_calibration_error_accepts_bool_int_float_correctness():
    c = np.array([0.2, 0.7, 0.9, 1.0])
    values = [
        calibration_error(c, corr, n_bins=2)
        for corr in (
            np.array([False, True, False, True]),
            np.array([0, 1, 0, 1]),
            np.array([0.0, 1.0, 0.0, 1.0]),
            torch.tensor([0, 1, 0, 1], dtype=torch.uint8),
        )
    ]
    assert values == [pytest.approx(0.2, abs=1e-15)] * 4


# ----------------------------------------------------------------------------- bins objects


def test_calibration_bins_properties_and_addition():
    bins = binned_calibration_stats([0.2, 0.7, 0.9, 1.0], [0, 1, 0, 1], n_bins=4)
    assert isinstance(bins, CalibrationBins)
    for t in (bins.edges, bins.counts, bins.sum_confidence, bins.sum_correct):
        assert t.dtype == torch.float64
    assert bins.edges.shape == (5,) and bins.counts.shape == (4,)
    assert bins.counts.tolist() == [1.0, 0.0, 1.0, 2.0]
    torch.testing.assert_close(
        bins.mean_confidence, torch.tensor([0.2, 0.375, 0.7, 0.95], dtype=torch.float64)
    )
    torch.testing.assert_close(bins.accuracy, torch.tensor([0.0, 0.0, 1.0, 0.5]).double())
    torch.testing.assert_close(bins.weights, torch.tensor([0.25, 0.0, 0.25, 0.5]).double())
    assert not bool(torch.isnan(bins.mean_confidence).any())
    both = bins + bins
    assert both.counts.tolist() == [2.0, 0.0, 2.0, 4.0]
    assert calibration_error_from_bins(both) == pytest.approx(calibration_error_from_bins(bins))
    with pytest.raises(ValueError, match="same edges"):
        bins + binned_calibration_stats([0.5], [1], n_bins=3)


def test_calibration_error_from_bins_rejects_bad_input():
    bins = binned_calibration_stats([0.5], [1], n_bins=3)
    empty = CalibrationBins(
        bins.edges, bins.counts * 0, bins.sum_confidence * 0, bins.sum_correct * 0
    )
    with pytest.raises(ValueError, match="calibration_error_from_bins: `bins` must hold"):
        calibration_error_from_bins(empty)
    with pytest.raises(ValueError, match="`bins` must be a CalibrationBins"):
        calibration_error_from_bins({"counts": [1]})
    with pytest.raises(ValueError, match="`norm` must be one of 'l1', 'l2', 'max'"):
        calibration_error_from_bins(bins, "l3")


# ----------------------------------------------------------------------------- devices


@CUDA
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_cuda_matches_cpu(dtype):
    probs, y = _probs(12, 5000, 4, dtype, on_edges=0.2)
    for fn in (expected_calibration_error, classwise_calibration_error):
        assert fn(probs.cuda(), y.cuda()) == pytest.approx(fn(probs, y), abs=1e-12)
    assert (
        reliability_diagram(probs.cuda(), y.cuda())["counts"]
        == (_reference_bensemble_reliability(probs.cuda(), y.cuda(), 15)["counts"])
    )


# ----------------------------------------------------------------------------- validation

PROB_METRICS = [
    pytest.param(expected_calibration_error, id="ece"),
    pytest.param(maximum_calibration_error, id="mce"),
    pytest.param(classwise_calibration_error, id="classwise"),
    pytest.param(reliability_diagram, id="reliability"),
]

_P = np.array([[0.7, 0.3], [0.4, 0.6]])
_Y = np.array([0, 1])

BAD_PROB_INPUTS = [
    pytest.param(np.array([0.7, 0.3]), _Y, "`probs` must be 2-D", id="probs-1d"),
    pytest.param(np.stack([_P, _P]), _Y, "`probs` must be 2-D", id="probs-3d"),
    pytest.param(np.zeros((0, 2)), np.zeros(0, dtype=int), "`probs` must not be empty", id="empty"),
    pytest.param(np.array([[np.nan, 1.0], [0.4, 0.6]]), _Y, "`probs` must be finite", id="nan"),
    pytest.param(np.array([[np.inf, 0.0], [0.4, 0.6]]), _Y, "`probs` must be finite", id="inf"),
    pytest.param(
        np.array([[1.2, -0.2], [0.4, 0.6]]),
        _Y,
        r"`probs` must hold probabilities in "
        r"\[0, 1\].*from_logits",
        id="range",
    ),
    pytest.param(
        np.array([[2.0, 0.5], [0.4, 0.6]]) / 2,
        _Y,
        "`probs` must have rows summing to 1.*logits.*from_logits=True",
        id="rows-not-summing",
    ),
    pytest.param(np.ones((2, 1)), _Y, "`probs` must have at least 2 classes", id="one-class"),
    pytest.param(_P, np.array([0.0, 1.0]), "`labels` must have an integer dtype", id="float-y"),
    pytest.param(_P, np.array([0, 2]), r"`labels` must lie in \[0, 1\]", id="y-too-big"),
    pytest.param(_P, np.array([-1, 0]), r"`labels` must lie in \[0, 1\]", id="y-negative"),
    pytest.param(_P, np.array([0, 1, 1]), "`labels` must have the same length", id="length"),
    pytest.param(_P, np.array([[0], [1]]), "`labels` must be 1-D", id="y-2d"),
    pytest.param("probs", _Y, "`probs` must be", id="string"),
]


@pytest.mark.parametrize("fn", PROB_METRICS)
@pytest.mark.parametrize(("probs", "targets", "match"), BAD_PROB_INPUTS)
def test_bad_inputs_raise_value_error_naming_argument(fn, probs, targets, match):
    with pytest.raises(ValueError, match=f"^{fn.__name__}: .*{match}|^{fn.__name__}: {match}"):
        fn(probs, targets)


BAD_OPTIONS = [
    pytest.param({"n_bins": 0}, "`n_bins` must be an integer >= 1", id="n_bins-0"),
    pytest.param({"n_bins": -3}, "`n_bins` must be an integer >= 1", id="n_bins-neg"),
    pytest.param({"n_bins": 2.5}, "`n_bins` must be an integer >= 1", id="n_bins-float"),
    pytest.param({"n_bins": True}, "`n_bins` must be an integer >= 1", id="n_bins-bool"),
    pytest.param({"n_bins": "15"}, "`n_bins` must be an integer >= 1", id="n_bins-str"),
    pytest.param(
        {"binning": "kmeans"}, "`binning` must be one of 'uniform', 'quantile'", id="binning"
    ),
]


@pytest.mark.parametrize("fn", PROB_METRICS)
@pytest.mark.parametrize(("kwargs", "match"), BAD_OPTIONS)
def test_bad_options_raise(fn, kwargs, match):
    with pytest.raises(ValueError, match=f"^{fn.__name__}: {match}"):
        fn(_P, _Y, **kwargs)


@pytest.mark.parametrize(
    "fn", [expected_calibration_error, classwise_calibration_error, calibration_error]
)
def test_unknown_norm_lists_valid_options(fn):
    args = (_P, _Y) if fn is not calibration_error else (_P[:, 0], _Y)
    with pytest.raises(
        ValueError, match=f"^{fn.__name__}: `norm` must be one of 'l1', 'l2', 'max' \\(got 'l3'\\)"
    ):
        fn(*args, norm="l3")


@pytest.mark.parametrize("fn", [calibration_error, binned_calibration_stats])
@pytest.mark.parametrize(
    ("conf", "correct", "match"),
    [
        pytest.param([[0.5]], [1], "`confidences` must be 1-D", id="conf-2d"),
        pytest.param([1.5, 0.2], [1, 0], r"`confidences` must lie in \[0, 1\]", id="conf-range"),
        pytest.param([np.nan, 0.2], [1, 0], "`confidences` must be finite", id="conf-nan"),
        pytest.param(np.zeros(0), [], "`confidences` must not be empty", id="empty"),
        pytest.param([0.5, 0.2], [1, 2], "`correct` must contain only 0 and 1", id="correct-2"),
        pytest.param([0.5, 0.2], [1, 0.5], "`correct` must contain only 0 and 1", id="half"),
        pytest.param([0.5, 0.2], [1, 0, 1], "`correct` must have length 2", id="length"),
        pytest.param([0.5, 0.2], [[1, 0]], "`correct` must be 1-D", id="correct-2d"),
    ],
)
def test_low_level_bad_inputs(fn, conf, correct, match):
    with pytest.raises(ValueError, match=f"^{fn.__name__}: {match}"):
        fn(conf, correct)


def test_brier_rejected_member_stack_is_not_our_concern_but_ece_rejects_it_too():
    stack = np.stack([_P, _P, _P])
    with pytest.raises(ValueError, match=r"`probs` must be 2-D \(got shape \(3, 2, 2\)\)"):
        expected_calibration_error(stack, _Y)
