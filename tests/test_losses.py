"""Tests for bensemble.losses (GaussianLikelihood, VariationalLoss)."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bensemble.losses import GaussianLikelihood, VariationalLoss


@pytest.mark.parametrize("init", [-2.0, 0.5, -9.0])
def test_gaussian_likelihood_matches_torch(init):
    torch.manual_seed(0)
    lik = GaussianLikelihood(init_log_sigma=init)
    preds, target = torch.randn(10, 3), torch.randn(10, 3)
    sigma = F.softplus(torch.tensor(init)) + 1e-6
    ref = nn.GaussianNLLLoss(reduction="none")(preds, target, sigma.pow(2).expand_as(preds))
    torch.testing.assert_close(lik(preds, target), ref)
    assert lik.sigma == pytest.approx(float(sigma), rel=1e-6)
    assert isinstance(lik.sigma, float)


def test_gaussian_likelihood_broadcasts_samples_and_learns_sigma():
    lik = GaussianLikelihood()
    preds, target = torch.randn(4, 6), torch.randn(6)
    out = lik(preds, target)
    assert out.shape == (4, 6)
    torch.testing.assert_close(out[2], lik(preds[2], target))
    out.sum().backward()
    assert lik.log_sigma.grad is not None and lik.log_sigma.shape == (1,)


def _reference_numpy_loss(preds, target, kl, alpha, num_batches, kl_weight, sigma):
    preds, target = preds.astype(np.float64), target.astype(np.float64)
    var = sigma**2
    log_w = []
    for s in range(preds.shape[0]):
        ll = 0.0
        for i in range(preds.shape[1]):
            ll += -0.5 * (math.log(var) + (preds[s, i] - target[i]) ** 2 / var)
        log_w.append(ll - kl * kl_weight / num_batches)
    log_w = np.array(log_w)
    if alpha == 1.0:
        return -log_w.mean()
    a = (1 - alpha) * log_w
    m = a.max()
    lse = m + math.log(np.exp(a - m).sum())
    return -(lse - math.log(len(log_w))) / (1 - alpha)


@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.0, 2.0])
def test_variational_loss_matches_reference(alpha):
    torch.manual_seed(1)
    lik = GaussianLikelihood(init_log_sigma=0.3)
    loss = VariationalLoss(lik, alpha=alpha, num_batches=4, kl_weight=0.5)
    preds, target = torch.randn(5, 8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    kl = torch.tensor(3.7, dtype=torch.float64)
    got = loss(preds, target, kl)
    assert got.ndim == 0
    ref = _reference_numpy_loss(preds.numpy(), target.numpy(), 3.7, alpha, 4, 0.5, lik.sigma)
    assert float(got.detach()) == pytest.approx(ref, rel=1e-6)


def test_variational_loss_single_sample_and_multi_output():
    lik = GaussianLikelihood()
    loss = VariationalLoss(lik)
    preds, target = torch.randn(8, 2), torch.randn(8, 2)
    one = loss(preds, target, torch.tensor(1.0))
    torch.testing.assert_close(one, lik(preds, target).sum() + 1.0)
    # [S, N, D] predictions give a scalar with every non-sample axis summed
    many = VariationalLoss(lik, alpha=0.5)(torch.randn(3, 8, 2), target, torch.tensor(0.0))
    assert many.ndim == 0


def test_variational_loss_gradients_reach_kl_and_preds():
    lin = nn.Linear(3, 1)
    kl = lin.weight.pow(2).sum()
    loss = VariationalLoss(GaussianLikelihood(), num_batches=2)
    loss(lin(torch.randn(4, 3)).squeeze(-1), torch.randn(4), kl).backward()
    assert lin.weight.grad is not None


@pytest.mark.parametrize(
    ("kwargs", "arg"),
    [
        pytest.param(dict(num_batches=0), "num_batches", id="nb0"),
        pytest.param(dict(num_batches=1.5), "num_batches", id="nbf"),
        pytest.param(dict(kl_weight=-1.0), "kl_weight", id="kw"),
        pytest.param(dict(alpha=float("nan")), "alpha", id="alpha"),
    ],
)
def test_variational_loss_bad_arguments(kwargs, arg):
    with pytest.raises(ValueError, match=f"`{arg}`"):
        VariationalLoss(GaussianLikelihood(), **kwargs)


def test_bad_inputs():
    with pytest.raises(ValueError, match="`init_log_sigma`"):
        GaussianLikelihood(init_log_sigma=float("inf"))
    with pytest.raises(ValueError, match="`preds`"):
        GaussianLikelihood()(np.zeros(3), torch.zeros(3))
    with pytest.raises(ValueError, match="`likelihood_model`"):
        VariationalLoss(3)
