"""Tests of the K-FAC Laplace approximation (bensemble 0.2's ``LaplaceApproximation``)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from bensemble.core.ensemble import Ensemble
from bensemble.methods.kfac_laplace import LaplaceApproximation


def _linear_gaussian(n=200, sigma=0.3, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g, dtype=torch.float64)
    w_true = torch.tensor([[1.0, -2.0, 0.5], [0.3, 0.0, -1.0]], dtype=torch.float64)
    y = x @ w_true.T + 0.7 + sigma * torch.randn(n, 2, generator=g, dtype=torch.float64)
    return x, y


def _exact_posterior(x, y, sigma, tau):
    """Closed-form posterior of ``[W | b]`` (row-major) under N(0, 1/tau) priors."""
    xt = torch.cat([x, torch.ones_like(x[:, :1])], dim=1)
    precision_row = xt.T @ xt / sigma**2 + tau * torch.eye(4, dtype=x.dtype)
    cov_row = torch.linalg.inv(precision_row)
    mean = (cov_row @ xt.T @ y / sigma**2).T  # [out, in + 1]
    return mean, torch.kron(torch.eye(2, dtype=x.dtype), cov_row.contiguous())


def _set_mean(model: nn.Linear, mean: torch.Tensor) -> None:
    with torch.no_grad():
        model.weight.copy_(mean[:, :-1])
        model.bias.copy_(mean[:, -1])


@pytest.mark.parametrize("n_batches", [1, 7])
def test_linear_gaussian_posterior_covariance_is_closed_form(n_batches) -> None:
    sigma, tau = 0.3, 1.0
    x, y = _linear_gaussian(sigma=sigma)
    mean, exact_cov = _exact_posterior(x, y, sigma, tau)
    model = nn.Linear(3, 2).double()
    _set_mean(model, mean)
    loader = DataLoader(TensorDataset(x, y), batch_size=-(-200 // n_batches))
    la = LaplaceApproximation(model, "regression", prior_precision=tau, damping=0.0)
    la.compute_curvature(loader)
    la.sigma_noise = sigma
    # the estimated noise (residual RMS) is close to the true one
    assert la.sigma_noise_ == pytest.approx(sigma, rel=0.15)
    la = LaplaceApproximation(model, "regression", prior_precision=tau, sigma_noise=sigma)
    la.compute_curvature(loader)
    torch.testing.assert_close(la.posterior_covariance(""), exact_cov, rtol=1e-4, atol=1e-9)
    draws = la.sample_parameters(20_000, generator=torch.Generator().manual_seed(1))[""]
    flat = draws.reshape(20_000, -1)
    sample_cov = torch.cov(flat.T)
    rel = torch.linalg.norm(sample_cov - exact_cov) / torch.linalg.norm(exact_cov)
    assert rel < 0.10
    torch.testing.assert_close(flat.mean(0), mean.reshape(-1), atol=0.01, rtol=0)


def test_legacy_regularisation_is_far_too_narrow_and_warns() -> None:
    sigma = 0.3
    x, y = _linear_gaussian(sigma=sigma)
    mean, exact_cov = _exact_posterior(x, y, sigma, 1.0)
    model = nn.Linear(3, 2).double()
    _set_mean(model, mean)
    with pytest.warns(UserWarning, match="n times too narrow"):
        la = LaplaceApproximation(model, regularization="legacy", sigma_noise=sigma)
    la.compute_curvature((x, y))
    ratio = torch.diagonal(exact_cov) / torch.diagonal(la.posterior_covariance(""))
    assert float(ratio.min()) > 50


def test_single_example_factors_equal_autograd_ggn() -> None:
    """For one example K-FAC is exact: n A (x) G is the GGN block, activation derivatives in."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 3)).double()
    x = torch.randn(1, 3, dtype=torch.float64)
    la = LaplaceApproximation(model, "classification", prior_precision=1.0, damping=0.0)
    la.compute_curvature((x, torch.tensor([1])))
    first = model[0]
    theta0 = torch.cat([first.weight, first.bias[:, None]], dim=1).detach().reshape(-1)

    def logits(theta):
        m = theta.view(4, 4)
        h = torch.tanh(x @ m[:, :-1].T + m[:, -1])
        return model[2](h)[0]

    jac = torch.autograd.functional.jacobian(logits, theta0)  # [K, P]
    p = torch.softmax(logits(theta0), dim=0).detach()
    ggn = jac.T @ (torch.diag(p) - torch.outer(p, p)) @ jac
    precision = torch.linalg.inv(la.posterior_covariance("0"))
    torch.testing.assert_close(
        precision - torch.eye(16, dtype=torch.float64), ggn, atol=1e-8, rtol=1e-6
    )


def _trained_relu_net():
    torch.manual_seed(0)
    x = torch.linspace(-1, 1, 64)[:, None]
    y = torch.sin(3 * x) + 0.05 * torch.randn_like(x)
    model = nn.Sequential(nn.Linear(1, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    for _ in range(300):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return model, x, y


def test_predictive_variance_grows_away_from_the_data() -> None:
    model, x, y = _trained_relu_net()
    la = LaplaceApproximation(model, "regression", prior_precision=1.0)
    la.compute_curvature(DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True))
    _, var_in = la.predictive(x)
    far = torch.tensor([[-4.0], [4.0]])
    _, var_far = la.predictive(far)
    assert float(var_far.min()) > 3 * float(var_in.max())
    # Monte Carlo over sampled networks agrees on the ordering
    _, mc_far = la.predictive(far, n_samples=200, generator=torch.Generator().manual_seed(0))
    _, mc_in = la.predictive(x[::8], n_samples=200, generator=torch.Generator().manual_seed(0))
    assert float(mc_far.min()) > float(mc_in.max())


def test_classification_probit_matches_monte_carlo_and_state_is_restored() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 3))
    x, y = torch.randn(60, 2), torch.randint(0, 3, (60,))
    model.train()
    la = LaplaceApproximation(model, "classification", prior_precision=5.0)
    la.compute_curvature(DataLoader(TensorDataset(x, y), batch_size=20))
    assert model.training and all(m.training for m in model.modules())
    assert all(p.grad is None for p in model.parameters())
    probit = la.predictive(x[:10])
    mc = la.predictive(x[:10], n_samples=2000, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(probit.sum(1), torch.ones(10, dtype=torch.float64))
    assert float((probit - mc).abs().max()) < 0.05
    assert model.training


def test_ensemble_from_posterior_and_build_ensemble() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 10), nn.ReLU(), nn.Linear(10, 3))
    x, y = torch.randn(20, 5), torch.randint(0, 3, (20,))
    la = LaplaceApproximation(model, likelihood="classification")
    la.compute_curvature(DataLoader(TensorDataset(x, y), batch_size=5))
    assert la.dataset_size == 20
    ens = Ensemble.from_posterior(la, n_members=5)
    assert ens.predict_members(x).shape == (5, 20, 3)
    assert la.build_ensemble(n_members=4).predict_members(x).shape == (4, 20, 3)
    a, b = la.sample_models(2)
    assert not torch.equal(a[0].weight, b[0].weight)
    assert not torch.equal(a[0].bias, model[0].bias)  # biases are sampled too
    assert not a.training
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    m1, m2 = la.sample_models(1, generator=g1)[0], la.sample_models(1, generator=g2)[0]
    assert torch.equal(m1[2].weight, m2[2].weight)


class _TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 6)
        self.left = nn.Linear(6, 2)
        self.right = nn.Linear(6, 2)

    def forward(self, x):  # x [B, T, 4]: a token axis shared by the body layer
        h = torch.relu(self.body(x)).mean(dim=1)
        return self.left(h) + self.right(h)


def test_branching_model_with_3d_inputs() -> None:
    torch.manual_seed(0)
    model = _TwoHeads()
    x, y = torch.randn(12, 5, 4), torch.randint(0, 2, (12,))
    la = LaplaceApproximation(model, "classification")
    la.compute_curvature((x, y))
    assert set(la.factors_) == {"body", "left", "right"}
    probs = la.predictive(x)
    assert probs.shape == (12, 2) and bool(torch.isfinite(probs).all())
    assert Ensemble.from_posterior(la, n_members=3).predict_members(x).shape == (3, 12, 2)


def test_bad_arguments_raise_value_errors() -> None:
    model = nn.Linear(2, 1)
    with pytest.raises(ValueError, match="`likelihood` must be one of"):
        LaplaceApproximation(model, likelihood="magic")
    with pytest.raises(ValueError, match="`regularization` must be one of"):
        LaplaceApproximation(model, regularization="nope")
    with pytest.raises(ValueError, match="`prior_precision`"):
        LaplaceApproximation(model, prior_precision=0.0)
    with pytest.raises(ValueError, match="nn.Linear"):
        LaplaceApproximation(nn.ReLU())
    la = LaplaceApproximation(model)
    with pytest.raises(ValueError, match="call compute_curvature first"):
        la.sample_models(2)
    with pytest.raises(ValueError, match="`likelihood` could not be inferred"):
        la.compute_curvature((torch.randn(4, 2), torch.randn(4, 3)))
    with pytest.raises(ValueError, match="one target per model output"):
        LaplaceApproximation(model, "regression").fit((torch.randn(4, 2), torch.randn(4, 3)))


def test_conv_layer_single_position_factors_equal_autograd_ggn() -> None:
    """A kernel covering the whole image has one position: K-FAC is the exact GGN block."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 3, 3), nn.Flatten(), nn.Tanh(), nn.Linear(3, 3)).double()
    x = torch.randn(1, 2, 3, 3, dtype=torch.float64)
    la = LaplaceApproximation(model, "classification", prior_precision=1.0, damping=0.0)
    la.compute_curvature((x, torch.tensor([0])))
    conv = model[0]
    theta0 = torch.cat([conv.weight.reshape(3, -1), conv.bias[:, None]], 1).detach().reshape(-1)

    def logits(theta):
        m = theta.view(3, 19)
        h = nn.functional.conv2d(x, m[:, :-1].reshape(3, 2, 3, 3), m[:, -1])
        return model[3](torch.tanh(h.flatten(1)))[0]

    jac = torch.autograd.functional.jacobian(logits, theta0)
    p = torch.softmax(logits(theta0), dim=0).detach()
    ggn = jac.T @ (torch.diag(p) - torch.outer(p, p)) @ jac
    precision = torch.linalg.inv(la.posterior_covariance("0"))
    eye = torch.eye(57, dtype=torch.float64)
    torch.testing.assert_close(precision - eye, ggn, atol=1e-8, rtol=1e-6)


def test_cnn_posterior_samples_kernels_and_skips_grouped_convs() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 4, 3, groups=2),
        nn.Flatten(), nn.Linear(4 * 4 * 4, 3),
    )  # fmt: skip
    x, y = torch.randn(16, 1, 6, 6), torch.randint(0, 3, (16,))
    with pytest.warns(UserWarning, match="keep their trained weights"):
        la = LaplaceApproximation(model, "classification", prior_precision=10.0)
    la.compute_curvature(DataLoader(TensorDataset(x, y), batch_size=8))
    assert set(la.factors_) == {"0", "4"}
    a, b = la.sample_models(2, generator=torch.Generator().manual_seed(0))
    assert not torch.equal(a[0].weight, b[0].weight) and a[0].weight.shape == (4, 1, 3, 3)
    assert torch.equal(a[2].weight, model[2].weight)  # the grouped conv is left alone
    probs = la.predictive(x[:5])
    assert probs.shape == (5, 3) and bool(torch.isfinite(probs).all())
    mc = la.predictive(x[:5], n_samples=500, generator=torch.Generator().manual_seed(1))
    assert float((probs - mc).abs().max()) < 0.1
