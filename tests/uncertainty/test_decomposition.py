"""Entropy and variance decompositions of member predictions."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from bensemble import decompose_classification_uncertainty as top_level
from bensemble.uncertainty import (
    decompose_classification_uncertainty,
    decompose_regression_uncertainty,
    entropy,
    variance_decomposition,
)


def _reference_numpy_decomposition(p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Plain float64 loops; entropy with 0 log 0 = 0."""
    m, n, k = p.shape
    total, aleatoric = np.zeros(n), np.zeros(n)
    for i in range(n):
        mean = [sum(p[j, i, c] for j in range(m)) / m for c in range(k)]
        total[i] = -sum(q * np.log(q) for q in mean if q > 0)
        aleatoric[i] = sum(-sum(q * np.log(q) for q in p[j, i] if q > 0) for j in range(m)) / m
    return total, aleatoric, np.maximum(total - aleatoric, 0.0)


def _member_probs(raw: np.ndarray) -> np.ndarray:
    """Turn non-negative raw weights into rows on the simplex (zeros allowed)."""
    raw = raw.copy()
    raw[..., 0] += 1e-3  # no all-zero row
    return raw / raw.sum(-1, keepdims=True)


member_arrays = st.tuples(st.integers(1, 5), st.integers(1, 4), st.integers(2, 4)).flatmap(
    lambda s: arrays(
        np.float64,
        s,
        elements=st.one_of(st.just(0.0), st.floats(0.0, 1.0, allow_subnormal=False)),
    )
)


# ---------------------------------------------------------------------------- the guide
@pytest.mark.parametrize(
    ("members", "expected"),
    [
        pytest.param(
            [[0.8, 0.2], [0.79, 0.21], [0.81, 0.19]], (0.5004, 0.5002, 0.0002), id="agree"
        ),
        pytest.param(
            [[0.99, 0.01], [0.02, 0.98], [0.97, 0.03]], (0.6410, 0.0963, 0.5448), id="split"
        ),
    ],
)
def test_guide_example(members, expected) -> None:
    probs = np.asarray(members)[:, None, :]  # [M=3, N=1, K=2]
    total, aleatoric, epistemic = decompose_classification_uncertainty(probs)
    got = tuple(round(float(u[0]), 4) for u in (total, aleatoric, epistemic))
    assert got == expected
    assert top_level is decompose_classification_uncertainty


# ---------------------------------------------------------------------------- properties
@given(member_arrays)
def test_matches_numpy_reference(raw: np.ndarray) -> None:
    p = _member_probs(raw)
    total, aleatoric, epistemic = decompose_classification_uncertainty(p)
    ref = _reference_numpy_decomposition(p)
    for ours, theirs in zip((total, aleatoric, epistemic), ref):
        assert ours.dtype == torch.float64
        np.testing.assert_allclose(ours.numpy(), theirs, rtol=1e-10, atol=1e-12)
    assert bool((epistemic >= 0).all())
    assert bool((total >= aleatoric - 1e-12).all())
    assert bool((total <= np.log(p.shape[-1]) + 1e-12).all())


@given(member_arrays, st.randoms(use_true_random=False))
def test_member_permutation_invariance(raw: np.ndarray, rnd) -> None:
    p = _member_probs(raw)
    order = list(range(p.shape[0]))
    rnd.shuffle(order)
    for a, b in zip(
        decompose_classification_uncertainty(p), decompose_classification_uncertainty(p[order])
    ):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_exact_zeros_and_agreeing_one_hot_members() -> None:
    probs = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 0.5, 0.5]]] * 4)  # [4, 2, 3] float32
    total, aleatoric, epistemic = decompose_classification_uncertainty(probs)
    # computed in float64, returned in the input's dtype
    torch.testing.assert_close(total, torch.tensor([0.0, np.log(2)], dtype=torch.float32))
    torch.testing.assert_close(aleatoric, total)
    assert torch.equal(epistemic, torch.zeros(2, dtype=torch.float32))
    torch.testing.assert_close(entropy(torch.tensor([0.0, 1.0])), torch.tensor(0.0))


def test_from_logits_and_binary_input() -> None:
    logits = torch.randn(5, 7, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for a, b in zip(
        decompose_classification_uncertainty(logits, from_logits=True),
        decompose_classification_uncertainty(logits.softmax(-1)),
    ):
        torch.testing.assert_close(a, b)
    p1 = torch.rand(5, 7, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    stacked = torch.stack([1 - p1, p1], dim=-1)
    for a, b in zip(
        decompose_classification_uncertainty(p1, binary=True),
        decompose_classification_uncertainty(stacked),
    ):
        torch.testing.assert_close(a, b)
    for a, b in zip(
        decompose_classification_uncertainty(torch.logit(p1), from_logits=True, binary=True),
        decompose_classification_uncertainty(p1, binary=True),
    ):
        torch.testing.assert_close(a, b)


def test_eps_is_accepted_and_ignored() -> None:
    p = np.array([[[0.7, 0.3]], [[0.1, 0.9]]])
    for a, b in zip(
        decompose_classification_uncertainty(p, eps=0.1), decompose_classification_uncertainty(p)
    ):
        assert torch.equal(a, b)


# ---------------------------------------------------------------------------- regression
def test_regression_law_of_total_variance() -> None:
    rng = np.random.default_rng(0)
    means = rng.normal(size=(6, 10, 2))
    variances = rng.uniform(0.1, 2.0, size=(6, 10, 2))
    total, aleatoric, epistemic = decompose_regression_uncertainty(means, variances)
    np.testing.assert_allclose(aleatoric.numpy(), variances.mean(0), rtol=1e-12)
    np.testing.assert_allclose(epistemic.numpy(), means.var(0, ddof=0), rtol=1e-12)
    np.testing.assert_allclose(total.numpy(), variances.mean(0) + means.var(0), rtol=1e-12)
    # Monte Carlo check of the law: variance of draws from the mixture
    draws = rng.normal(means[:, 0, 0], np.sqrt(variances[:, 0, 0]), size=(200_000, 6))
    assert abs(draws.var() - float(total[0, 0])) < 0.02 * float(total[0, 0])
    t2, a2, e2 = decompose_regression_uncertainty(means[..., 0], variances[..., 0])
    assert t2.shape == (10,)


# ---------------------------------------------------------------------------- variance view
def test_variance_decomposition() -> None:
    rng = np.random.default_rng(1)
    p = _member_probs(rng.uniform(size=(8, 12, 3)))
    mean, eu = variance_decomposition(p)
    np.testing.assert_allclose(mean.numpy(), p.mean(0), rtol=1e-12)
    np.testing.assert_allclose(eu.numpy(), p.var(0, ddof=0), rtol=1e-12, atol=1e-15)
    logits = np.log(p)
    mean_l, eu_l = variance_decomposition(logits, from_logits=True)
    torch.testing.assert_close(mean_l, mean)
    torch.testing.assert_close(eu_l, eu)
    p1 = p[..., 1] / (p[..., 0] + p[..., 1])
    mean_b, eu_b = variance_decomposition(p1, binary=True)
    assert mean_b.shape == (12,)
    np.testing.assert_allclose(eu_b.numpy(), p1.var(0), rtol=1e-12)
    mean_bl, eu_bl = variance_decomposition(np.log(p1 / (1 - p1)), from_logits=True, binary=True)
    torch.testing.assert_close(mean_bl, mean_b)
    torch.testing.assert_close(eu_bl, eu_b)


# ---------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    ("call", "match"),
    [
        pytest.param(
            lambda: decompose_classification_uncertainty(np.ones((2, 3, 2))),
            "`probs` must have rows summing to 1.*from_logits=True",
            id="logits",
        ),
        pytest.param(
            lambda: decompose_classification_uncertainty(np.full((2, 3, 2), 0.5)[0, 0]),
            r"`probs` must be member predictions \[M, N, K\]",
            id="rank",
        ),
        pytest.param(
            lambda: decompose_classification_uncertainty(np.full((3, 2), 0.5)),
            r"`probs` must be member predictions.*probs\[None\].*binary=True",
            id="2-D-without-binary",
        ),
        pytest.param(
            lambda: decompose_classification_uncertainty(np.full((2, 3, 2), np.nan)),
            "`probs` must be finite",
            id="nan",
        ),
        pytest.param(
            lambda: decompose_classification_uncertainty(np.full((2, 3), 1.5), binary=True),
            r"`probs` must hold probabilities in \[0, 1\]",
            id="binary-range",
        ),
        pytest.param(
            lambda: decompose_classification_uncertainty(np.full((2, 3, 2), 0.5), eps=-1.0),
            "`eps` must be a finite number >= 0",
            id="eps",
        ),
        pytest.param(
            lambda: decompose_regression_uncertainty(np.zeros((2, 3)), np.ones((2, 4))),
            "`variances` must have the shape of `means`",
            id="reg-shape",
        ),
        pytest.param(
            lambda: decompose_regression_uncertainty(np.zeros((2, 3)), -np.ones((2, 3))),
            "`variances` must be >= 0",
            id="reg-negative",
        ),
        pytest.param(
            lambda: decompose_regression_uncertainty(np.zeros(3), np.ones(3)),
            "`means` must be 2-D or 3-D",
            id="reg-rank",
        ),
        pytest.param(
            lambda: variance_decomposition(np.full((2, 3, 2), 0.7)),
            "variance_decomposition: `probs` must have rows summing to 1",
            id="var-sum",
        ),
    ],
)
def test_validation(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_regression_decomposition_refuses_a_variance_its_dtype_cannot_hold(dtype):
    """A spread of means near the dtype's maximum overflows: an error, never a silent inf."""
    big = torch.finfo(dtype).max / 4
    means = torch.tensor([[big, -big], [-big, big]], dtype=dtype)
    with pytest.raises(
        ValueError, match="decompose_regression_uncertainty: `means` and `variances`"
    ):
        decompose_regression_uncertainty(means, torch.ones_like(means))
