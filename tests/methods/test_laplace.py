"""Tests of the last-layer Laplace approximation."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from bensemble.datasets.toy import make_toy_gaussians
from bensemble.methods.deep_ensemble import train_model
from bensemble.methods.laplace import LastLayerLaplace
from bensemble.methods.mlp import make_mlp


def _tiny_problem(n_classes: int = 3, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, n_classes)).double()
    x = torch.randn(40, 3, generator=g, dtype=torch.float64)
    y = torch.randint(0, n_classes, (40,), generator=g)
    return model, x, y


def _reference_autograd_nll_hessian(model, x, y) -> torch.Tensor:
    """Hessian of the summed cross-entropy w.r.t. vec([W | b]) of the last layer, by autograd."""
    body, head = model[:-1], model[-1]
    with torch.no_grad():
        features = body(x)
    n_classes, n_features = head.weight.shape

    def nll(theta):
        matrix = theta.view(n_classes, n_features + 1)
        logits = features @ matrix[:, :-1].T + matrix[:, -1]
        return nn.functional.cross_entropy(logits, y, reduction="sum")

    theta = torch.cat([head.weight, head.bias[:, None]], dim=1).detach().reshape(-1)
    return torch.autograd.functional.hessian(nll, theta)


def _fit_logistic_map(x, y, prior_precision, seed=0):
    """nn.Linear(2, 2) trained to the MAP of NLL + prior_precision / 2 ||theta||^2 (float64)."""
    torch.manual_seed(seed)
    model = nn.Linear(2, 2).double()
    opt = torch.optim.LBFGS(
        model.parameters(),
        max_iter=500,
        tolerance_grad=1e-12,
        tolerance_change=1e-14,
        line_search_fn="strong_wolfe",
    )

    def closure():
        opt.zero_grad()
        theta = torch.cat([model.weight, model.bias[:, None]], dim=1)
        loss = nn.functional.cross_entropy(model(x), y, reduction="sum")
        loss = loss + 0.5 * prior_precision * (theta**2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return model


@pytest.fixture(scope="module")
def logistic_setup():
    data = make_toy_gaussians(30, seed=8)
    x, y = data.x, data.y
    delta = 0.7
    model = _fit_logistic_map(x, y, delta)
    laplace = LastLayerLaplace(model, prior_precision=delta).fit((x, y))
    return model, laplace, x, y, delta


@pytest.fixture(scope="module")
def paper_setup():
    data = make_toy_gaussians(50, seed=0)
    torch.manual_seed(0)
    model = train_model(make_mlp(2, 2), (data.x, data.y), epochs=20, seed=0)
    with warnings.catch_warnings():  # the paper's evidence-only fit may warn (no weight decay)
        warnings.simplefilter("ignore", UserWarning)
        laplace = LastLayerLaplace(model).fit((data.x, data.y))
    return model, laplace, data


def test_ggn_equals_autograd_hessian_of_last_layer():
    model, x, y = _tiny_problem(3)
    laplace = LastLayerLaplace(model, prior_precision=0.5).fit((x, y))
    want = _reference_autograd_nll_hessian(model, x, y)
    torch.testing.assert_close(laplace.hessian_, want, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(
        laplace.posterior_precision_, want + 0.5 * torch.eye(want.shape[0], dtype=torch.float64)
    )
    torch.testing.assert_close(
        laplace.posterior_covariance_ @ laplace.posterior_precision_,
        torch.eye(want.shape[0], dtype=torch.float64),
    )


def test_dataloader_and_tuple_give_the_same_fit():
    model, x, y = _tiny_problem(3)
    a = LastLayerLaplace(model, prior_precision=1.0).fit((x, y))
    loader = DataLoader(TensorDataset(x, y), batch_size=7, shuffle=True)
    b = LastLayerLaplace(model, prior_precision=1.0).fit(loader)
    c = LastLayerLaplace(model, prior_precision=1.0).fit((x.numpy(), y.numpy()))
    torch.testing.assert_close(a.hessian_, b.hessian_)
    torch.testing.assert_close(a.hessian_, c.hessian_)
    assert a.n_train_ == b.n_train_ == 40


def test_map_and_covariance_match_autograd_on_logistic_regression(logistic_setup):
    model, laplace, x, y, delta = logistic_setup
    theta = torch.cat([model.weight, model.bias[:, None]], dim=1).detach().reshape(-1)
    torch.testing.assert_close(laplace.mean_, theta)

    def neg_log_post(t):
        m = t.view(2, 3)
        logits = x @ m[:, :2].T + m[:, 2]
        return nn.functional.cross_entropy(logits, y, reduction="sum") + 0.5 * delta * (t**2).sum()

    grad = torch.autograd.functional.jacobian(neg_log_post, theta)
    assert float(grad.abs().max()) < 1e-6  # the test set-up really is at the MAP
    hessian = torch.autograd.functional.hessian(neg_log_post, theta)
    torch.testing.assert_close(laplace.posterior_covariance_, torch.linalg.inv(hessian))


def _reference_gauss_hermite_sigmoid(mean: np.ndarray, var: np.ndarray) -> np.ndarray:
    """E[sigmoid(d)] for d ~ N(mean, var) by 80-point Gauss-Hermite quadrature."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(80)
    d = mean[:, None] + np.sqrt(var)[:, None] * nodes[None, :]
    return (weights[None, :] / (1.0 + np.exp(-d))).sum(axis=1) / math.sqrt(2.0 * math.pi)


def test_probit_predictive_against_closed_form_on_logistic_regression(logistic_setup):
    model, laplace, x, y, delta = logistic_setup
    grid = torch.tensor([[-3.0, 2.0], [0.0, 0.0], [1.0, 1.5], [-6.0, -5.0], [4.0, -4.5]])
    grid = grid.double()
    # Independent logit-difference moments from the autograd covariance: d = (w1 - w0)^T x + ...
    cov = laplace.posterior_covariance_.view(2, 3, 2, 3)
    phi = torch.cat([grid, torch.ones(5, 1, dtype=torch.float64)], dim=1)
    diff_cov = cov[1, :, 1, :] + cov[0, :, 0, :] - cov[0, :, 1, :] - cov[1, :, 0, :]
    var = torch.einsum("ij,jk,ik->i", phi, diff_cov, phi)
    with torch.no_grad():
        logits = model(grid)
    mean = logits[:, 1] - logits[:, 0]
    probit = torch.sigmoid(mean / torch.sqrt(1 + math.pi / 8 * var))
    exact = torch.from_numpy(_reference_gauss_hermite_sigmoid(mean.numpy(), var.numpy()))

    predictive = laplace.predictive(grid)
    torch.testing.assert_close(predictive[:, 1], probit)  # MacKay's formula
    torch.testing.assert_close(predictive.sum(dim=1), torch.ones(5, dtype=torch.float64))
    # The probit approximation is within 0.02 of the exact Gaussian-logistic integral.
    assert float((predictive[:, 1] - exact).abs().max()) < 0.02
    # Monte Carlo over posterior members converges to the exact integral (4 standard errors).
    n = 20_000
    members = laplace.sample_members(grid, n, generator=torch.Generator().manual_seed(0))
    se = members[:, :, 1].std(dim=0) / math.sqrt(n)
    assert bool(((members[:, :, 1].mean(dim=0) - exact).abs() < 4 * se + 1e-12).all())
    # The members' logit differences have the Laplace mean and variance.
    member_logits = torch.log(members[:, :, 1]) - torch.log(members[:, :, 0])
    torch.testing.assert_close(
        member_logits.mean(0), mean, atol=4 * float(var.sqrt().max()) / math.sqrt(n), rtol=0
    )
    torch.testing.assert_close(member_logits.var(0), var, rtol=0.05, atol=0)


def test_generalised_probit_for_three_classes():
    model, x, y = _tiny_problem(3)
    laplace = LastLayerLaplace(model, prior_precision=2.0).fit((x, y))
    xs = x[:6]
    with torch.no_grad():
        features = model[:-1](xs)
    phi = torch.cat([features, torch.ones(6, 1, dtype=torch.float64)], dim=1)
    # Logit covariance per point from the posterior covariance, then centred: C f with C = I - 1/K.
    cov = laplace.posterior_covariance_.view(3, 6, 3, 6)
    logit_cov = torch.einsum("ij,kjlm,im->ikl", phi, cov, phi)
    centre = torch.eye(3, dtype=torch.float64) - 1.0 / 3.0
    centred_var = torch.einsum("rk,ikl,rl->ir", centre, logit_cov, centre)
    with torch.no_grad():
        logits = model(xs)
    centred = logits - logits.mean(dim=1, keepdim=True)
    want = torch.softmax(centred / torch.sqrt(1 + math.pi / 8 * centred_var), dim=1)
    torch.testing.assert_close(laplace.predictive(xs), want)


def test_marginal_likelihood_formula_and_maximisation():
    model, x, y = _tiny_problem(3)
    laplace = LastLayerLaplace(model).fit((x, y))
    hessian = _reference_autograd_nll_hessian(model, x, y)
    theta = laplace.mean_
    with torch.no_grad():
        nll = float(nn.functional.cross_entropy(model(x), y, reduction="sum"))
    n_params = theta.numel()

    def reference(delta):
        logdet = torch.linalg.slogdet(hessian + delta * torch.eye(n_params, dtype=torch.float64))
        return (
            -nll
            - 0.5 * delta * float(theta @ theta)
            + 0.5 * n_params * math.log(delta)
            - 0.5 * float(logdet.logabsdet)
        )

    for delta in (0.01, 0.3, 5.0):
        assert laplace.log_marginal_likelihood(delta) == pytest.approx(reference(delta), rel=1e-9)
    chosen = laplace.prior_precision_
    assert laplace.log_marginal_likelihood() == pytest.approx(reference(chosen), rel=1e-9)
    fine = np.exp(np.linspace(math.log(chosen) - 2, math.log(chosen) + 2, 401))
    assert reference(chosen) >= max(reference(d) for d in fine) - 1e-7


def test_prior_precision_at_grid_edge_warns():
    model, x, y = _tiny_problem(3)
    with pytest.warns(RuntimeWarning, match="edge"):
        LastLayerLaplace(model, prior_precision_bounds=(50.0, 60.0), n_prior_grid=3).fit((x, y))


def test_paper_network_accuracy_on_toy_data(paper_setup):
    _, laplace, _ = paper_setup
    test = make_toy_gaussians(10_000, seed=99)
    predictive = laplace.predictive(test.x)
    assert float((predictive.argmax(dim=1) == test.y).double().mean()) >= 0.95
    members = laplace.sample_members(test.x, 100, generator=torch.Generator().manual_seed(0))
    assert members.shape == (100, 10_000, 2)
    assert float((members.mean(dim=0).argmax(dim=1) == test.y).double().mean()) >= 0.95
    assert 1e-4 < laplace.prior_precision_ < 1e4


def test_members_determinism_and_coherence(paper_setup):
    _, laplace, data = paper_setup
    x = data.x
    a = laplace.sample_members(x, 12, generator=torch.Generator().manual_seed(3))
    b = laplace.sample_members(x, 12, generator=torch.Generator().manual_seed(3))
    rows = torch.tensor([9, 2, 40])
    sub = laplace.sample_members(x[rows], 12, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(sub, a[:, rows])
    assert not torch.equal(a, laplace.sample_members(x, 12, generator=torch.Generator()))
    assert float(a.std(dim=0).max()) > 1e-3  # members really differ


def test_sample_models_match_sample_members(paper_setup):
    model, laplace, data = paper_setup
    x = data.x[:20]
    models = laplace.sample_models(4, generator=torch.Generator().manual_seed(1))
    members = laplace.sample_members(x, 4, generator=torch.Generator().manual_seed(1))
    assert len(models) == 4
    for s, member in enumerate(models):
        assert member is not model and not member.training
        with torch.no_grad():
            probs = torch.softmax(member(x.float()).double(), dim=-1)
        torch.testing.assert_close(probs, members[s], atol=1e-5, rtol=1e-4)  # float32 copies
    # The original model is untouched.
    torch.testing.assert_close(
        torch.cat([model[-1].weight, model[-1].bias[:, None]], 1).double().reshape(-1),
        laplace.mean_,
    )


def test_seeded_instance_generator_is_used():
    model, x, y = _tiny_problem(2)
    first = LastLayerLaplace(model, prior_precision=1.0, seed=5).fit((x, y))
    second = LastLayerLaplace(model, prior_precision=1.0, seed=5).fit((x, y))
    torch.testing.assert_close(first.sample_members(x, 3), second.sample_members(x, 3))


def test_training_flags_are_restored():
    model = make_mlp(2, 2, dropout=(0.3, 0.2)).double()
    model.train()
    model[2].eval()  # a mixed state must come back exactly
    flags = [m.training for m in model.modules()]
    data = make_toy_gaussians(20, seed=0)
    laplace = LastLayerLaplace(model).fit((data.x, data.y))
    laplace.predictive(data.x)
    laplace.sample_members(data.x, 2)
    assert [m.training for m in model.modules()] == flags
    # Features are computed in eval mode (dropout off): two calls agree.
    torch.testing.assert_close(laplace.predictive(data.x), laplace.predictive(data.x))


class _Wrapped(nn.Module):
    def __init__(self, softmax: bool = False):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(2, 4), nn.ReLU())
        self.head = nn.Linear(4, 2)
        self.aux = nn.Linear(4, 4)  # registered after the head, never the output
        self.softmax = softmax

    def forward(self, x):
        out = self.head(self.body(x))
        return out.softmax(-1) if self.softmax else out


def test_last_layer_lookup():
    x, y = torch.randn(10, 2), torch.randint(0, 2, (10,))
    named = LastLayerLaplace(_Wrapped(), last_layer="head", prior_precision=1.0).fit((x, y))
    assert named.last_layer_name == "head" and named.mean_.shape == (10,)
    with pytest.raises(ValueError, match="was not called"):
        LastLayerLaplace(_Wrapped(), prior_precision=1.0).fit((x, y))  # picks `aux`
    with pytest.raises(ValueError, match="logits of its last nn.Linear"):
        LastLayerLaplace(_Wrapped(softmax=True), last_layer="head", prior_precision=1.0).fit((x, y))
    with pytest.raises(ValueError, match="last module of an nn.Sequential"):
        LastLayerLaplace(nn.Sequential(nn.Linear(2, 2), nn.Softmax(-1)))
    with pytest.raises(ValueError, match="must name an nn.Linear"):
        LastLayerLaplace(_Wrapped(), last_layer="body")
    with pytest.raises(ValueError, match="must name a submodule"):
        LastLayerLaplace(_Wrapped(), last_layer="nope")
    with pytest.raises(ValueError, match="must contain an nn.Linear"):
        LastLayerLaplace(nn.Sequential(nn.ReLU()))
    with pytest.raises(ValueError, match="bias"):
        LastLayerLaplace(nn.Linear(2, 2, bias=False))
    with pytest.raises(ValueError, match="at least 2 logits"):
        LastLayerLaplace(nn.Linear(2, 1))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        pytest.param({"likelihood": "regression"}, "`likelihood` must be one of", id="lik"),
        pytest.param({"prior_precision": -1.0}, "`prior_precision`", id="prior"),
        pytest.param({"n_prior_grid": 2}, "`n_prior_grid`", id="grid"),
        pytest.param({"prior_precision_bounds": (5.0, 1.0)}, "`prior_precision_bounds`", id="b"),
        pytest.param({"seed": 1, "generator": torch.Generator()}, "not both", id="both"),
    ],
)
def test_bad_hyper_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LastLayerLaplace(nn.Linear(2, 2), **kwargs)


def test_bad_calls():
    laplace = LastLayerLaplace(nn.Linear(2, 2), prior_precision=1.0)
    with pytest.raises(ValueError, match="not fitted"):
        laplace.predictive(torch.zeros(3, 2))
    with pytest.raises(ValueError, match="not fitted"):
        laplace.sample_models(2)
    with pytest.raises(ValueError, match="must be a torch.nn.Module"):
        LastLayerLaplace("not a model")
    x, y = torch.randn(6, 2), torch.randint(0, 2, (6,))
    with pytest.raises(ValueError, match="`y` must lie in"):
        laplace.fit((x, torch.full((6,), 2)))
    with pytest.raises(ValueError, match="same number of samples"):
        laplace.fit((x, y[:4]))
    with pytest.raises(ValueError, match="DataLoader"):
        laplace.fit(x)
    with pytest.raises(ValueError, match="at least one sample"):
        laplace.fit([])
    laplace.fit((x, y))
    with pytest.raises(ValueError, match="`n`"):
        laplace.sample_members(x, 0)
    with pytest.raises(ValueError, match="finite"):
        laplace.predictive(torch.full((2, 2), float("nan")))
