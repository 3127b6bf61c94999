"""Selective prediction: risk-coverage curve, AURC and friends against plain numpy loops."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from bensemble.metrics import (
    aurc,
    coverage_at_risk,
    excess_aurc,
    risk_at_coverage,
    risk_coverage_curve,
    selective_confidence,
)


def _reference_loop_curve(confidence, correct):
    """Coverage / risk at each distinct confidence, by a loop over thresholds."""
    n = len(confidence)
    out = []
    for t in sorted(set(confidence.tolist()), reverse=True):
        accepted = [i for i in range(n) if confidence[i] >= t]
        errors = sum(1 - correct[i] for i in accepted)
        out.append((len(accepted) / n, errors / len(accepted), t))
    return out


def _reference_loop_aurc(order_correct):
    """Classical AURC for samples already in accepted order: mean_i (errors in top i) / i."""
    errors, total = 0, 0.0
    for i, c in enumerate(order_correct, start=1):
        errors += 1 - c
        total += errors / i
    return total / len(order_correct)


def _reference_permutation_aurc(confidence, correct):
    """AURC averaged over every order consistent with decreasing confidence (tiny n only)."""
    values = []
    for perm in itertools.permutations(range(len(confidence))):
        conf = [confidence[i] for i in perm]
        if all(a >= b for a, b in zip(conf, conf[1:])):
            values.append(_reference_loop_aurc([correct[i] for i in perm]))
    return float(np.mean(values))


def _random_case(seed, n=400, levels=None):
    rng = np.random.default_rng(seed)
    confidence = rng.random(n)
    correct = (rng.random(n) < 0.3 + 0.6 * confidence).astype(int)
    if levels is not None:
        confidence = np.round(confidence * levels) / levels
    return confidence, correct


@pytest.mark.parametrize("levels", [None, 10, 3], ids=["distinct", "ties10", "ties3"])
def test_curve_matches_loop(levels):
    confidence, correct = _random_case(0, levels=levels)
    cov, risk, thr = risk_coverage_curve(confidence, correct)
    ref = np.array(_reference_loop_curve(confidence, correct))
    assert cov.dtype == risk.dtype == torch.float64
    torch.testing.assert_close(cov, torch.as_tensor(ref[:, 0]), rtol=0, atol=1e-15)
    torch.testing.assert_close(risk, torch.as_tensor(ref[:, 1]), rtol=0, atol=1e-15)
    torch.testing.assert_close(thr, torch.as_tensor(ref[:, 2]), rtol=0, atol=0)
    assert float(cov[-1]) == 1.0


@pytest.mark.parametrize("seed", range(5))
def test_aurc_matches_loop_without_ties(seed):
    confidence, correct = _random_case(seed)
    order = np.argsort(-confidence, kind="stable")
    assert aurc(confidence, correct) == pytest.approx(
        _reference_loop_aurc(correct[order].tolist()), abs=1e-12
    )


@pytest.mark.parametrize("seed", range(8))
def test_aurc_with_ties_is_the_mean_over_tie_orders(seed):
    rng = np.random.default_rng(seed)
    confidence = rng.integers(0, 3, size=7) / 2
    correct = rng.integers(0, 2, size=7)
    assert aurc(confidence, correct) == pytest.approx(
        _reference_permutation_aurc(confidence.tolist(), correct.tolist()), abs=1e-12
    )


@given(st.integers(0, 10_000), st.sampled_from([None, 2, 5]))
def test_invariant_to_sample_order(seed, levels):
    confidence, correct = _random_case(seed, n=50, levels=levels)
    perm = np.random.default_rng(seed + 1).permutation(50)
    for fn in (aurc, excess_aurc):
        assert fn(confidence[perm], correct[perm]) == pytest.approx(
            fn(confidence, correct), abs=1e-12
        )
    for a, b in zip(
        risk_coverage_curve(confidence[perm], correct[perm]),
        risk_coverage_curve(confidence, correct),
    ):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("seed", range(5))
def test_excess_aurc_is_nonnegative_and_zero_for_the_oracle(seed):
    confidence, correct = _random_case(seed, levels=4 if seed % 2 else None)
    e = int((1 - correct).sum())
    assert excess_aurc(confidence, correct) > 0
    # oracle: every correct sample above every error (ties inside each group are harmless)
    assert excess_aurc(correct.astype(float), correct) == 0.0
    oracle = _reference_loop_aurc(sorted(correct.tolist(), reverse=True))
    assert aurc(correct.astype(float), correct) == pytest.approx(oracle, abs=1e-12)
    assert aurc(confidence, correct) - excess_aurc(confidence, correct) == pytest.approx(
        oracle, abs=1e-12
    )
    r = e / len(correct)  # the continuous approximation of the oracle
    assert oracle == pytest.approx(r + (1 - r) * math.log(1 - r), abs=2e-2)


def test_risk_and_coverage_targets_match_loop():
    confidence, correct = _random_case(3, levels=20)
    ref = _reference_loop_curve(confidence, correct)
    for target in (0.05, 0.3, 0.5, 0.77, 1.0):
        expected = next(r for c, r, _ in ref if c >= target)
        assert risk_at_coverage(confidence, correct, target) == pytest.approx(expected, abs=1e-15)
    for target in (0.0, 0.1, 0.2, 0.3, 1.0):
        feasible = [c for c, r, _ in ref if r <= target]
        expected = max(feasible) if feasible else 0.0
        assert coverage_at_risk(confidence, correct, target) == pytest.approx(expected, abs=1e-15)


def test_scalars_are_python_floats():
    confidence, correct = _random_case(0)
    for value in (
        aurc(confidence, correct),
        excess_aurc(confidence, correct),
        risk_at_coverage(confidence, correct, 0.5),
        coverage_at_risk(confidence, correct, 0.2),
    ):
        assert type(value) is float


def test_selective_confidence_matches_numpy():
    g = torch.Generator().manual_seed(0)
    members = torch.softmax(torch.randn(4, 30, 5, generator=g, dtype=torch.float64), -1)
    mean = members.mean(0).numpy()
    entropy = -(mean * np.log(mean)).sum(1)
    member_entropy = -(members.numpy() * np.log(members.numpy())).sum(2).mean(0)
    variance = members.numpy().var(0).sum(1)
    expected = {
        "max_probability": mean.max(1),
        "negative_entropy": -entropy,
        "negative_mutual_information": -(entropy - member_entropy),
        "negative_variance": -variance,
    }
    for method, value in expected.items():
        torch.testing.assert_close(
            selective_confidence(members, method), torch.as_tensor(value), atol=1e-12, rtol=0
        )


@pytest.mark.parametrize(
    "confidence, correct, arg",
    [
        pytest.param([0.1, float("nan")], [0, 1], "confidence", id="nan"),
        pytest.param([[0.1, 0.2]], [0, 1], "probs", id="2-D-is-probs"),
        pytest.param([[[[0.1, 0.2]]]], [0, 1], "confidence", id="4-D"),
        pytest.param([], [], "confidence", id="empty"),
        pytest.param([0.1, 0.2], [0, 2], "correct", id="non-binary"),
        pytest.param([0.1, 0.2], [0, 1, 1], "correct", id="length"),
    ],
)
@pytest.mark.parametrize("fn", [risk_coverage_curve, aurc, excess_aurc], ids=lambda f: f.__name__)
def test_bad_inputs_raise(confidence, correct, arg, fn):
    with pytest.raises(ValueError, match=f"{fn.__name__}: `{arg}`"):
        fn(np.asarray(confidence, dtype=float), np.asarray(correct))


def test_bad_targets_raise():
    c, ok = [0.1, 0.2], [0, 1]
    with pytest.raises(ValueError, match="`coverage`"):
        risk_at_coverage(c, ok, 0.0)
    with pytest.raises(ValueError, match="`coverage`"):
        risk_at_coverage(c, ok, 1.2)
    with pytest.raises(ValueError, match="`risk`"):
        coverage_at_risk(c, ok, -0.1)
    with pytest.raises(ValueError, match="`correct`"):
        coverage_at_risk(c, [0, 3], 0.1)
    with pytest.raises(ValueError, match="`method`"):
        selective_confidence(torch.full((2, 3, 2), 0.5), "margin")
    with pytest.raises(ValueError, match="`member_probs`"):
        selective_confidence(torch.full((2, 3, 2), 0.7))
