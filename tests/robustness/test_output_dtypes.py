"""Issue 11, class 6: conventions users rely on.

* Per-sample outputs (uncertainty decompositions, OOD scores, selective confidences, entropy)
  come back in the input's floating dtype, computed in float64 inside; float16 / bfloat16 inputs
  return float32 (as torch's reductions and bensemble 0.2's decomposition would keep the dtype).
* ``negative_log_likelihood(..., from_logits=True)`` uses the log-softmax: exact for any logit gap,
  no ``eps`` cap.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bensemble import metrics as M
from bensemble.uncertainty import (
    decompose_classification_uncertainty,
    decompose_regression_uncertainty,
    entropy,
    variance_decomposition,
)

F64 = torch.float64

DTYPES = [
    pytest.param(torch.float64, torch.float64, id="float64"),
    pytest.param(torch.float32, torch.float32, id="float32"),
    pytest.param(torch.float16, torch.float32, id="float16"),
    pytest.param(torch.bfloat16, torch.float32, id="bfloat16"),
]


def _members(dtype, m=4, n=25, k=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(2 * torch.randn(m, n, k, generator=g, dtype=F64), -1).to(dtype)


def _outputs(result):
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, dict):
        return [result[k] for k in sorted(result)]
    return list(result)


PER_SAMPLE = [
    pytest.param(decompose_classification_uncertainty, id="decompose"),
    pytest.param(variance_decomposition, id="variance"),
    pytest.param(M.ood_scores, id="ood_scores"),
    pytest.param(M.selective_confidence, id="selective_max_probability"),
    pytest.param(lambda p: M.selective_confidence(p, "negative_entropy"), id="selective_entropy"),
    pytest.param(lambda p: M.selective_confidence(p, "negative_variance"), id="selective_var"),
    pytest.param(lambda p: entropy(p[0]), id="entropy"),
]


@pytest.mark.parametrize("dtype, expected", DTYPES)
@pytest.mark.parametrize("call", PER_SAMPLE)
def test_per_sample_outputs_keep_the_input_dtype(call, dtype, expected):
    outputs = _outputs(call(_members(dtype)))
    assert outputs and all(t.dtype == expected for t in outputs), [t.dtype for t in outputs]


@pytest.mark.parametrize("call", PER_SAMPLE)
def test_float32_outputs_are_the_rounded_float64_computation(call):
    p = _members(torch.float32)
    low = _outputs(call(p))
    high = _outputs(call(p.to(F64)))
    for a, b in zip(low, high):
        assert torch.equal(a, b.to(torch.float32))


def test_binary_members_keep_the_input_dtype():
    p1 = torch.rand(4, 25, generator=torch.Generator().manual_seed(0), dtype=torch.float32)
    for t in decompose_classification_uncertainty(p1, binary=True):
        assert t.dtype == torch.float32
    for t in variance_decomposition(p1, binary=True):
        assert t.dtype == torch.float32


@pytest.mark.parametrize("dtype, expected", DTYPES)
def test_regression_decomposition_keeps_the_input_dtype(dtype, expected):
    g = torch.Generator().manual_seed(0)
    mu = torch.randn(4, 10, generator=g).to(dtype)
    var = torch.rand(4, 10, generator=g).to(dtype)
    for t in decompose_regression_uncertainty(mu, var):
        assert t.dtype == expected


def test_list_input_gives_float64():
    p = _members(F64).tolist()
    for t in decompose_classification_uncertainty(p):
        assert t.dtype == F64


# ----------------------------------------------------------------------------- NLL from logits


@pytest.mark.parametrize("gap", [2.0, 30.0, 50.0, 1000.0, 1e6])
def test_nll_from_logits_is_exact_for_any_gap(gap):
    logits = torch.tensor([[0.0, gap]], dtype=F64)
    nll = M.negative_log_likelihood(logits, torch.tensor([0]), from_logits=True)
    expected = gap + math.log1p(math.exp(-gap))  # -log_softmax(logits)[0]
    assert nll == pytest.approx(expected, rel=1e-12)


def test_nll_from_logits_ignores_eps_and_stays_finite_with_eps_zero():
    logits = np.array([[0.0, 800.0], [3.0, 1.0]], dtype=np.float32)
    y = np.array([0, 0])
    a = M.negative_log_likelihood(logits, y, eps=0.0, from_logits=True)
    b = M.negative_log_likelihood(logits, y, eps=0.1, from_logits=True)
    expected = (800.0 + (math.log1p(math.exp(-2.0)))) / 2
    assert a == b == pytest.approx(expected, rel=1e-12)


def test_nll_from_logits_agrees_with_cross_entropy():
    g = torch.Generator().manual_seed(0)
    logits = 20 * torch.randn(200, 5, generator=g, dtype=F64)
    y = torch.randint(0, 5, (200,), generator=g)
    expected = float(torch.nn.functional.cross_entropy(logits, y))
    assert M.negative_log_likelihood(logits, y, from_logits=True) == pytest.approx(
        expected, rel=1e-12
    )
