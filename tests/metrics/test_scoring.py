"""Tests for bensemble.metrics.scoring: NLL, Brier score, accuracy.

References: ``torch.nn.functional.nll_loss`` (NLL), a direct numpy formula (Brier), plain numpy
(accuracy), and bensemble 0.2.2's formulas re-implemented here in float32.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from bensemble.metrics import accuracy, brier_score, negative_log_likelihood

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _probs(seed: int, n: int, k: int, dtype=torch.float64, scale: float = 2.0):
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(scale * torch.randn(n, k, generator=g, dtype=torch.float64), 1)
    return p.to(dtype), torch.randint(0, k, (n,), generator=g)


# ----------------------------------------------------------------------------- references


def _reference_torch_nll_loss(probs, targets, eps=1e-8):
    return F.nll_loss(torch.log(probs.double() + eps), targets).item()


def _reference_numpy_nll(probs, targets, eps=1e-8):
    p = np.asarray(probs, dtype=np.float64)
    y = np.asarray(targets)
    return float(np.mean([-np.log(p[i, y[i]] + eps) for i in range(len(y))]))


def _reference_numpy_brier(probs, targets):
    p = np.asarray(probs, dtype=np.float64)
    onehot = np.eye(p.shape[1])[np.asarray(targets)]
    return float(np.mean(np.sum((p - onehot) ** 2, axis=1)))


def _reference_numpy_accuracy(probs, targets):
    p = np.asarray(probs, dtype=np.float64)
    return float(np.mean(p.argmax(1) == np.asarray(targets)))


def _reference_bensemble_nll(probs, targets, eps=1e-8):
    return F.nll_loss(torch.log(probs + eps), targets).item()


def _reference_bensemble_brier(probs, targets):
    onehot = F.one_hot(targets, num_classes=probs.shape[-1]).float()
    return torch.mean(torch.sum((probs - onehot) ** 2, dim=1)).item()


# ----------------------------------------------------------------------------- values


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_nll_matches_torch_nll_loss(dtype):
    probs, y = _probs(0, 2000, 7, dtype)
    assert negative_log_likelihood(probs, y) == pytest.approx(
        _reference_torch_nll_loss(probs, y), abs=1e-12
    )
    assert negative_log_likelihood(probs, y) == pytest.approx(
        _reference_numpy_nll(probs.double().numpy(), y.numpy()), abs=1e-12
    )


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16])
def test_brier_matches_direct_numpy_formula(dtype):
    probs, y = _probs(1, 2000, 7, dtype)
    assert brier_score(probs, y) == pytest.approx(
        _reference_numpy_brier(probs.double().numpy(), y.numpy()), abs=1e-12
    )


def test_accuracy_matches_numpy_and_uses_first_index_on_ties():
    probs, y = _probs(2, 1000, 4)
    assert accuracy(probs, y) == _reference_numpy_accuracy(probs.numpy(), y.numpy())
    tied = torch.tensor([[0.5, 0.5], [0.5, 0.5]])
    assert accuracy(tied, torch.tensor([0, 1])) == 0.5  # argmax of a tie is class 0


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_top_label_equals_torch_max_including_ties_zeros_and_strided_input(dtype):
    """The integer-view argmax (used by accuracy and the calibration metrics) is torch.max."""
    from bensemble.metrics.scoring import _top_label

    probs, _ = _probs(7, 500, 5, dtype, scale=0.5)
    probs[:5] = torch.tensor(
        [[0.2] * 5, [0.4, 0.4, 0.2, 0, 0], [0, 0, 0, 0, 1], [0, 0.5, 0, 0.5, 0], [0, 0, 1, 0, 0]]
    ).to(dtype)
    for p in (probs, probs.t().contiguous().t(), probs[::2]):
        conf, pred = _top_label(p)
        ref = p.max(dim=1)
        torch.testing.assert_close(pred, ref.indices, rtol=0, atol=0)
        torch.testing.assert_close(conf, ref.values, rtol=0, atol=0)
    assert _top_label(probs)[1][:5].tolist() == [0, 0, 4, 1, 2]  # first index on ties


def test_bensemble_02_semantics_float32():
    probs, y = _probs(3, 3000, 5, torch.float32)
    assert negative_log_likelihood(probs, y) == pytest.approx(
        _reference_bensemble_nll(probs, y), abs=1e-6
    )
    assert brier_score(probs, y) == pytest.approx(_reference_bensemble_brier(probs, y), abs=1e-6)


def test_nll_eps_semantics():
    probs = torch.tensor([[1.0, 0.0], [0.5, 0.5]], dtype=torch.float64)
    y = torch.tensor([1, 0])
    expected = -(np.log(0.0 + 1e-8) + np.log(0.5 + 1e-8)) / 2
    assert negative_log_likelihood(probs, y) == pytest.approx(expected, rel=1e-15)
    assert negative_log_likelihood(probs, y, eps=0.0) == float("inf")
    assert negative_log_likelihood(probs, y, eps=1e-3) == pytest.approx(
        -(np.log(1e-3) + np.log(0.501)) / 2, rel=1e-15
    )


def test_brier_extremes_and_binary_factor_two():
    y = torch.tensor([0, 1])
    assert brier_score(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), y) == 0.0
    assert brier_score(torch.tensor([[0.0, 1.0], [1.0, 0.0]]), y) == 2.0
    # binary: twice the single-probability form mean((p1 - y)^2)
    p1 = np.array([0.1, 0.8, 0.6, 0.3])
    yb = np.array([0, 1, 0, 1])
    single = np.mean((p1 - yb) ** 2)
    assert brier_score(np.stack([1 - p1, p1], 1), yb) == pytest.approx(2 * single, abs=1e-15)


def test_from_logits_equals_float64_softmax():
    g = torch.Generator().manual_seed(4)
    z = 4 * torch.randn(300, 6, generator=g)
    y = torch.randint(0, 6, (300,), generator=g)
    p = torch.softmax(z.double(), 1)
    for fn in (brier_score, accuracy):
        assert fn(z, y, from_logits=True) == fn(p, y)
        assert fn(z.numpy(), y.numpy(), from_logits=True) == fn(p, y)
    # the NLL of logits is the exact log-softmax cross-entropy (no eps inside the log)
    exact = float(torch.nn.functional.cross_entropy(z.double(), y))
    assert negative_log_likelihood(z, y, from_logits=True) == pytest.approx(exact, rel=1e-13)
    assert negative_log_likelihood(z, y, from_logits=True) == pytest.approx(
        negative_log_likelihood(p, y, eps=0.0), rel=1e-12
    )


@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 200),
    k=st.integers(2, 8),
    scale=st.floats(0.0, 20.0),
)
def test_ranges_and_sample_order_invariance(seed, n, k, scale):
    probs, y = _probs(seed, n, k, scale=scale)
    nll, brier, acc = (f(probs, y) for f in (negative_log_likelihood, brier_score, accuracy))
    # bensemble 0.2's eps: a certain, correct prediction scores -log(1 + eps) ~ -1e-8
    assert -np.log1p(1e-8) - 1e-15 <= nll <= -np.log(1e-8) + 1e-9
    assert 0.0 <= brier <= 2.0
    assert 0.0 <= acc <= 1.0
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    assert negative_log_likelihood(probs[perm], y[perm]) == pytest.approx(nll, abs=1e-12)
    assert brier_score(probs[perm], y[perm]) == pytest.approx(brier, abs=1e-12)
    assert accuracy(probs[perm], y[perm]) == pytest.approx(acc, abs=1e-15)


def test_returns_python_floats():
    probs, y = _probs(5, 10, 3)
    for fn in (negative_log_likelihood, brier_score, accuracy):
        assert type(fn(probs, y)) is float


@CUDA
def test_cuda_matches_cpu():
    probs, y = _probs(6, 1000, 4, torch.float32)
    for fn in (negative_log_likelihood, brier_score, accuracy):
        assert fn(probs.cuda(), y.cuda()) == pytest.approx(fn(probs, y), abs=1e-12)


# ----------------------------------------------------------------------------- validation

METRICS = [
    pytest.param(negative_log_likelihood, id="nll"),
    pytest.param(brier_score, id="brier"),
    pytest.param(accuracy, id="accuracy"),
]
_P = np.array([[0.7, 0.3], [0.4, 0.6]])
_Y = np.array([0, 1])


@pytest.mark.parametrize("fn", METRICS)
@pytest.mark.parametrize(
    ("probs", "targets", "match"),
    [
        pytest.param(
            np.stack([_P, _P, _P]),
            _Y,
            r"`probs` must be 2-D \(got shape \(3, 2, 2\)\)",
            id="member-stack",
        ),
        pytest.param(np.array([0.7, 0.3]), _Y, "`probs` must be 2-D", id="probs-1d"),
        pytest.param(np.zeros((0, 2)), np.zeros(0, int), "`probs` must not be empty", id="empty"),
        pytest.param(np.array([[np.nan, 1.0], [0.4, 0.6]]), _Y, "`probs` must be finite", id="nan"),
        pytest.param(
            np.array([[-np.inf, 1.0], [0.4, 0.6]]), _Y, "`probs` must be finite", id="inf"
        ),
        pytest.param(
            np.array([[1.5, -0.5], [0.4, 0.6]]),
            _Y,
            r"`probs` must hold probabilities in \[0, 1\]",
            id="range",
        ),
        pytest.param(np.array([[2.0, -1.0], [3.0, 1.0]]), _Y, "from_logits=True", id="logits"),
        pytest.param(
            np.array([[0.3, 0.3], [0.4, 0.6]]),
            _Y,
            "`probs` must have rows summing to 1.*look like logits",
            id="sum",
        ),
        pytest.param(
            _P, np.array([0.0, 1.0]), "`labels` must have an integer dtype", id="float-labels"
        ),
        pytest.param(
            _P,
            np.array([0, 5]),
            r"`labels` must lie in \[0, 1\] \(got values in "
            r"\[0, 5\]\)",
            id="labels-out-of-range",
        ),
        pytest.param(_P, np.array([0]), "`labels` must have the same length", id="length"),
    ],
)
def test_bad_inputs_raise_value_error_naming_argument(fn, probs, targets, match):
    with pytest.raises(ValueError, match=f"^{fn.__name__}: .*{match}|^{fn.__name__}: {match}"):
        fn(probs, targets)


@pytest.mark.parametrize("eps", [-1e-3, float("nan"), "tiny"])
def test_nll_rejects_bad_eps(eps):
    with pytest.raises(ValueError, match="^negative_log_likelihood: `eps` must be a finite number"):
        negative_log_likelihood(_P, _Y, eps=eps)


def test_brier_member_stack_is_refused_not_silently_scored():
    """bensemble 0.2 returned a number for [M, N, K]; we refuse (average members first)."""
    stack = torch.softmax(torch.randn(3, 4, 2), -1)
    with pytest.raises(ValueError, match="brier_score: `probs` must be 2-D"):
        brier_score(stack, torch.tensor([0, 1, 0, 1]))
