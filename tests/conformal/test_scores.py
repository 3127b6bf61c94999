"""Nonconformity scores against plain float64 loops."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from bensemble.conformal import aps_scores, lac_scores, raps_scores


def _reference_loop_aps(probs, u=None, k_reg=0, lam=0.0):
    """APS / RAPS by a loop over samples and labels (ties ranked by class index).

    Non-randomised (``u is None``): the mass ranked strictly above the label (Romano et al.).
    """
    n, k = probs.shape
    out = np.zeros((n, k))
    for i in range(n):
        order = sorted(range(k), key=lambda j: (-probs[i, j], j))
        for y in range(k):
            r = order.index(y)  # 0-based rank
            above = sum(probs[i, order[j]] for j in range(r))
            own = 0.0 if u is None else u[i] * probs[i, y]  # non-randomised: u = 0
            out[i, y] = above + own + lam * max(0, (r + 1) - k_reg)
    return out


def _random_probs(seed, n=40, k=6, ties=False):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(k) * 0.8, size=n)
    if ties:
        p = np.round(p * 8) + 1e-3
        p /= p.sum(1, keepdims=True)
    return p


@pytest.mark.parametrize("ties", [False, True], ids=["distinct", "ties"])
def test_aps_matches_loop(ties):
    p = _random_probs(0, ties=ties)
    torch.testing.assert_close(
        aps_scores(p, randomized=False), torch.as_tensor(_reference_loop_aps(p))
    )


@pytest.mark.parametrize("ties", [False, True], ids=["distinct", "ties"])
def test_randomized_aps_matches_loop_with_the_same_uniforms(ties):
    p = _random_probs(1, ties=ties)
    u = torch.rand(p.shape[0], generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    got = aps_scores(p, randomized=True, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(got, torch.as_tensor(_reference_loop_aps(p, u.numpy())))


@pytest.mark.parametrize("k_reg, lam", [(0, 0.2), (1, 0.01), (3, 0.5), (10, 1.0)])
@pytest.mark.parametrize("randomized", [False, True])
def test_raps_matches_loop(k_reg, lam, randomized):
    p = _random_probs(2, ties=True)
    g = torch.Generator().manual_seed(9)
    u = torch.rand(p.shape[0], generator=g, dtype=torch.float64).numpy() if randomized else None
    got = raps_scores(
        p, k_reg=k_reg, lam=lam, randomized=randomized, generator=torch.Generator().manual_seed(9)
    )
    torch.testing.assert_close(got, torch.as_tensor(_reference_loop_aps(p, u, k_reg, lam)))


def test_raps_with_zero_penalty_is_aps():
    p = _random_probs(3)
    torch.testing.assert_close(
        raps_scores(p, lam=0.0, randomized=False), aps_scores(p, randomized=False)
    )


@given(st.integers(0, 2**31 - 1))
def test_scores_increase_with_rank_so_sets_are_top_k(seed):
    p = torch.as_tensor(_random_probs(seed % 1000, n=20, k=5))
    g = torch.Generator().manual_seed(seed)
    for s in (lac_scores(p), aps_scores(p, generator=g), raps_scores(p, lam=0.3, generator=g)):
        order = torch.argsort(p, dim=1, descending=True, stable=True)
        assert bool((torch.diff(s.gather(1, order), dim=1) >= -1e-12).all())


def test_member_stacks_are_scored_on_their_mean():
    rng = np.random.default_rng(4)
    members = np.stack([rng.dirichlet(np.ones(5), size=30) for _ in range(4)])
    mean = members.mean(0)
    torch.testing.assert_close(lac_scores(members), lac_scores(mean))
    torch.testing.assert_close(
        aps_scores(members, randomized=False), aps_scores(mean, randomized=False)
    )


def test_scores_are_float64_from_float32():
    p = torch.tensor([[0.25, 0.75]], dtype=torch.float32)
    for s in (lac_scores(p), aps_scores(p), raps_scores(p)):
        assert s.dtype == torch.float64


@pytest.mark.parametrize(
    "call, arg",
    [
        pytest.param(lambda: lac_scores([[0.5, 0.6]]), "probs", id="lac-rows"),
        pytest.param(lambda: aps_scores([[0.5, float("nan")]]), "probs", id="aps-nan"),
        pytest.param(lambda: aps_scores([[0.5, 0.5]], randomized=1), "randomized", id="aps-rand"),
        pytest.param(lambda: aps_scores([[0.5, 0.5]], generator=1), "generator", id="aps-gen"),
        pytest.param(lambda: raps_scores([[0.5, 0.5]], k_reg=-1), "k_reg", id="raps-k_reg"),
        pytest.param(lambda: raps_scores([[0.5, 0.5]], lam=-1.0), "lam", id="raps-lam"),
        pytest.param(lambda: raps_scores([0.5, 0.5]), "probs", id="raps-1-D"),
    ],
)
def test_bad_inputs_raise(call, arg):
    with pytest.raises(ValueError, match=f"`{arg}`"):
        call()
