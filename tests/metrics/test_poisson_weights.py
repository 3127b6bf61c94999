"""Counter-based Poisson(1) bootstrap weights: the documented hash (a plain-Python reference),
Poisson(1) statistics, independence, and identical weights under any chunking."""

from __future__ import annotations

import math
from decimal import Decimal, getcontext

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from bensemble.metrics.intervals import poisson_weights
from bensemble.metrics.intervals._poisson import POISSON_THRESHOLDS, poisson_counts, weight_block

MASK = (1 << 64) - 1


def _mix(z: int) -> int:
    z &= MASK
    z ^= z >> 30
    z = (z * 0xBF58476D1CE4E5B9) & MASK
    z ^= z >> 27
    z = (z * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def _reference_python_poisson_weight(seed: int, i: int, r: int) -> int:
    """The module docstring's generator, one weight at a time, in Python integers."""
    golden = 0x9E3779B97F4A7C15
    key = _mix(seed ^ 0x5DEECE66D1CE4E5B)
    a = _mix(key + (i + 1) * golden)
    b = _mix(_mix(key ^ 0x2545F4914F6CDD1D) + (r // 2 + 1) * golden)
    h = _mix(a ^ b)
    u = (h >> 32) if r % 2 else (h & 0xFFFFFFFF)
    getcontext().prec = 50
    total, term, k = Decimal(0), Decimal(1), 0
    e = Decimal(1).exp()
    while True:  # inverse CDF of Poisson(1) on the 32-bit grid
        total += term / e
        if u < int((total * 2**32).to_integral_value()) or k >= 12:
            return k
        k += 1
        term /= k


def test_thresholds_are_the_poisson_cdf_on_the_32_bit_grid():
    expected = [round(stats.poisson.cdf(k, 1.0) * 2**32) for k in range(12)]
    # scipy's float64 CDF can be one unit off in the last place: allow 1 / 2^32
    assert np.abs(POISSON_THRESHOLDS.astype(np.int64) - np.array(expected)).max() <= 1
    assert (np.diff(POISSON_THRESHOLDS.astype(np.int64)) > 0).all()


def test_inverse_cdf_is_exact_at_every_threshold():
    t = POISSON_THRESHOLDS.astype(np.int64)
    u = np.unique(np.clip(np.concatenate([t - 1, t, t + 1, [0, 2**32 - 1]]), 0, 2**32 - 1))
    u = np.concatenate([u, np.arange(0, 2**32, 2**32 // 4096)]).astype(np.uint32)
    out = np.empty(u.shape, dtype=np.uint8)
    poisson_counts(u, out, np.empty_like(u))
    assert out.tolist() == np.searchsorted(t, u.astype(np.int64), side="right").tolist()


@pytest.mark.parametrize("seed", [0, 1, 2**63 + 5])
def test_matches_the_plain_python_reference(seed):
    index = [0, 1, 7, 1000, 123456789, 2**40 + 3]
    w = poisson_weights(index, 9, seed=seed)
    ref = [[_reference_python_poisson_weight(seed, i, r) for r in range(9)] for i in index]
    assert w.tolist() == ref


def test_reference_reaches_the_upper_cell():
    # the rare top 16-bit cell holds several thresholds: force it through the kernel's
    # exact path by checking every weight >= 6 of a large draw against the reference
    w = weight_block(np.arange(200_000, dtype=np.uint64), 16, 3)
    rows, cols = np.nonzero(w >= 6)
    assert rows.size > 0
    for i, r in list(zip(rows.tolist(), cols.tolist()))[:40]:
        assert w[i, r] == _reference_python_poisson_weight(3, i, r)


def test_poisson_one_moments_and_goodness_of_fit():
    w = weight_block(np.arange(100_000, dtype=np.uint64), 64, 11).astype(np.float64)
    n = w.size
    assert abs(w.mean() - 1.0) < 5.0 / math.sqrt(n)  # sd of the mean is 1 / sqrt(n)
    assert abs(w.var() - 1.0) < 5.0 * math.sqrt(3.0 / n)  # Var(sample var) ~ (mu4 - 1) / n
    counts = np.bincount(w.astype(np.int64).ravel(), minlength=8)
    observed = np.append(counts[:6], counts[6:].sum())
    p = stats.poisson.pmf(np.arange(6), 1.0)
    expected = n * np.append(p, 1.0 - p.sum())
    assert stats.chisquare(observed, expected).pvalue > 1e-3


def test_independent_across_replicates_and_samples():
    w = weight_block(np.arange(50_000, dtype=np.uint64), 40, 5).astype(np.float64)
    # each empirical correlation of independent Poisson(1) columns has sd 1 / sqrt(n)
    corr_r = ((w[:, :-1] - 1) * (w[:, 1:] - 1)).mean(0)  # adjacent replicates, both halves
    assert np.abs(corr_r).max() < 5.0 / math.sqrt(50_000)
    corr_i = ((w[:-1] - 1) * (w[1:] - 1)).mean(0)  # adjacent samples
    assert np.abs(corr_i).max() < 5.0 / math.sqrt(50_000)
    # the two 32-bit halves of one hash: a contingency test of independence on {0, 1, 2, 3+}
    a = np.minimum(w[:, 0::2], 3).astype(int).ravel()
    b = np.minimum(w[:, 1::2], 3).astype(int).ravel()
    table = np.zeros((4, 4))
    np.add.at(table, (a, b), 1)
    assert stats.chi2_contingency(table).pvalue > 1e-3
    # sample keys are a splitmix stream: a sample far away is independent too
    far = weight_block(np.arange(2**40, 2**40 + 50_000, dtype=np.uint64), 40, 5)
    corr_far = ((w - 1) * (far.astype(np.float64) - 1)).mean(0)
    assert np.abs(corr_far).max() < 5.0 / math.sqrt(50_000)


@given(cuts=st.lists(st.integers(1, 999), max_size=8, unique=True), r=st.integers(1, 33))
def test_any_chunking_gives_the_same_weights(cuts, r):
    whole = poisson_weights(range(0, 1000), r, seed=4)
    edges = [0, *sorted(cuts), 1000]
    parts = [poisson_weights(range(a, b), r, seed=4) for a, b in zip(edges[:-1], edges[1:])]
    assert torch.equal(torch.cat(parts), whole)


def test_index_arrays_permutations_and_prefix_in_replicates():
    whole = poisson_weights(range(0, 500), 20, seed=9)
    perm = torch.randperm(500, generator=torch.Generator().manual_seed(0))
    assert torch.equal(poisson_weights(perm, 20, seed=9), whole[perm])
    assert torch.equal(poisson_weights(np.arange(500), 20, seed=9), whole)
    assert torch.equal(poisson_weights(range(0, 500), 7, seed=9), whole[:, :7])


def test_seeds():
    a = poisson_weights(range(0, 300), 10)
    assert torch.equal(a, poisson_weights(range(0, 300), 10))  # fixed default seed
    assert not torch.equal(a, poisson_weights(range(0, 300), 10, seed=1))
    assert not torch.equal(poisson_weights(range(300), 10, seed=None), a)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"sample_index": [-1, 2], "n_replicates": 3}, "sample_index"),
        ({"sample_index": [0.5, 2.0], "n_replicates": 3}, "sample_index"),
        ({"sample_index": [[0, 1]], "n_replicates": 3}, "sample_index"),
        ({"sample_index": range(5, 0, -1), "n_replicates": 3}, "sample_index"),
        ({"sample_index": range(4), "n_replicates": 0}, "n_replicates"),
        ({"sample_index": range(4), "n_replicates": True}, "n_replicates"),
        ({"sample_index": range(4), "n_replicates": 2.0}, "n_replicates"),
        ({"sample_index": range(4), "n_replicates": 3, "seed": -1}, "seed"),
        ({"sample_index": range(4), "n_replicates": 3, "seed": 1.5}, "seed"),
    ],
)
def test_bad_input_names_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        poisson_weights(**kwargs)


def test_empty_index_gives_an_empty_block():
    assert poisson_weights([], 5).shape == (0, 5)
