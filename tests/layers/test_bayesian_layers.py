"""Tests for BayesianLinear and BayesianConv2d."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Normal, kl_divergence

from bensemble.core import Ensemble
from bensemble.layers import BaseBayesianLayer, BayesianLinear
from bensemble.layers.conv import BayesianConv2d


def _linear(**kw):
    torch.manual_seed(0)
    return BayesianLinear(5, 3, **kw)


def _conv(**kw):
    torch.manual_seed(0)
    return BayesianConv2d(2, 4, kernel_size=3, padding=1, **kw)


LAYERS = [
    pytest.param(_linear, (7, 5), (7, 3), id="linear"),
    pytest.param(_conv, (3, 2, 6, 6), (3, 4, 6, 6), id="conv"),
]


def _mean_output(layer, x):
    if isinstance(layer, BayesianLinear):
        return F.linear(x, layer.w_mu, layer.b_mu)
    return F.conv2d(x, layer.w_mu, layer.b_mu, padding=1)


@pytest.mark.parametrize(("make", "in_shape", "out_shape"), LAYERS)
def test_shapes_and_eval_determinism(make, in_shape, out_shape):
    layer = make().eval()
    x = torch.randn(in_shape)
    y1, y2 = layer(x), layer(x)
    assert y1.shape == out_shape
    torch.testing.assert_close(y1, y2, rtol=0, atol=0)
    torch.testing.assert_close(y1, _mean_output(layer, x))


@pytest.mark.parametrize(("make", "in_shape", "out_shape"), LAYERS)
@pytest.mark.parametrize("route", ["lrt", "weights"])
def test_sampling_is_random_with_mean_of_mean_weights(make, in_shape, out_shape, route):
    layer = make(init_sigma=0.3)
    x = torch.randn(in_shape)
    n = 3000
    if route == "lrt":
        layer.train()
        torch.manual_seed(1)
        samples = torch.stack([layer(x) for _ in range(n)]).detach()
    else:
        layer.eval()
        layer.force_sample = True
        layer.sample_generator = torch.Generator().manual_seed(1)
        with torch.no_grad():
            samples = torch.stack([layer(x) for _ in range(n)])
        layer.force_sample = False
        layer.sample_generator = None
    assert not torch.allclose(samples[0], samples[1])
    # marginal std per output: sqrt(x^2 . sigma_w^2 + sigma_b^2) = sqrt(sum x^2 + 1) * 0.3
    sq = x.pow(2)
    if isinstance(layer, BayesianLinear):
        var = F.linear(sq, torch.full_like(layer.w_mu, 0.09)) + 0.09
    else:
        var = F.conv2d(sq, torch.full_like(layer.w_mu, 0.09), padding=1) + 0.09
    std = var.sqrt()
    mean_err = (samples.mean(0) - _mean_output(layer, x).detach()) / (std / math.sqrt(n))
    assert mean_err.abs().max() < 5.0  # 5 standard errors
    torch.testing.assert_close(samples.std(0), std, rtol=0.1, atol=0.0)


def test_generator_sampling_is_reproducible_and_shared_by_rows():
    layer = _linear().eval()
    layer.force_sample = True
    x = torch.randn(1, 5).repeat(4, 1)
    layer.sample_generator = torch.Generator().manual_seed(3)
    a = layer(x)
    layer.sample_generator = torch.Generator().manual_seed(3)
    b = layer(x)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    # one weight sample per pass: identical rows give identical outputs
    torch.testing.assert_close(a, a[:1].expand_as(a), rtol=0, atol=0)
    assert not torch.allclose(a, F.linear(x, layer.w_mu, layer.b_mu))


@pytest.mark.parametrize(("make", "in_shape", "out_shape"), LAYERS)
def test_kl_matches_torch_distributions(make, in_shape, out_shape):
    layer = make(prior_sigma=0.7, init_sigma=0.2)
    with torch.no_grad():
        layer.w_rho.add_(torch.randn_like(layer.w_rho) * 0.5)
        layer.b_mu.normal_()
    expected = 0.0
    for mu, rho in ((layer.w_mu, layer.w_rho), (layer.b_mu, layer.b_rho)):
        q = Normal(mu.detach().double(), F.softplus(rho.detach().double()))
        p = Normal(torch.zeros_like(mu, dtype=torch.float64), 0.7)
        expected += float(kl_divergence(q, p).sum())
    assert isinstance(layer, BaseBayesianLayer)
    assert float(layer.kl_divergence().detach()) == pytest.approx(expected, rel=1e-4)
    layer.kl_divergence().backward()
    assert layer.w_mu.grad is not None and layer.w_rho.grad is not None


def test_init_sigma_and_weight_init():
    for init in ("kaiming", "xavier", "normal"):
        layer = BayesianLinear(50, 40, init_sigma=0.05, weight_init=init)
        torch.testing.assert_close(F.softplus(layer.w_rho), torch.full((40, 50), 0.05))
        torch.testing.assert_close(layer.b_mu, torch.zeros(40))
    # large init_sigma must not overflow in the inverse softplus
    big = BayesianLinear(2, 2, init_sigma=800.0)
    assert torch.isfinite(big.w_rho).all()
    conv = BayesianConv2d(4, 6, (3, 5), groups=2, init_sigma=0.2)
    assert conv.w_mu.shape == (6, 2, 3, 5)
    torch.testing.assert_close(F.softplus(conv.b_rho), torch.full((6,), 0.2))


def test_gradients_flow_in_training():
    layer = _linear().train()
    layer(torch.randn(4, 5)).sum().backward()
    assert layer.w_rho.grad.abs().sum() > 0 and layer.b_mu.grad.abs().sum() > 0


def test_ensemble_from_stochastic_reproducible_members():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), BayesianLinear(8, 3))
    model.eval()
    x = torch.randn(6, 4)

    def members(seed):
        ens = Ensemble.from_stochastic(
            model, num_samples=5, mode="auto", generator=torch.Generator().manual_seed(seed)
        )
        return ens.predict_members(x)

    a, b, c = members(0), members(0), members(1)
    assert a.shape == (5, 6, 3)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.allclose(a, c)
    assert not torch.allclose(a[0], a[1])
    # flags restored: the model is back in deterministic eval mode
    layer = model[2]
    assert not layer.training and not layer.force_sample and layer.sample_generator is None
    torch.testing.assert_close(model(x), model(x), rtol=0, atol=0)


def test_ensemble_bayesian_mode_with_conv():
    torch.manual_seed(0)
    model = nn.Sequential(BayesianConv2d(1, 2, 3), nn.Flatten(), nn.Linear(2 * 3 * 3, 2)).eval()
    x = torch.randn(3, 1, 5, 5)
    ens = Ensemble.from_stochastic(
        model, num_samples=4, mode="bayesian", generator=torch.Generator().manual_seed(0)
    )
    out = ens.predict_members(x)
    assert out.shape == (4, 3, 2)
    assert not torch.allclose(out[0], out[1])


BAD_ARGS = [
    pytest.param(BayesianLinear, dict(in_features=0, out_features=3), "in_features", id="in0"),
    pytest.param(BayesianLinear, dict(in_features=2, out_features=2.5), "out_features", id="out"),
    pytest.param(
        BayesianLinear, dict(in_features=2, out_features=3, prior_sigma=0.0), "prior_sigma", id="p"
    ),
    pytest.param(
        BayesianLinear, dict(in_features=2, out_features=3, init_sigma=-1), "init_sigma", id="s"
    ),
    pytest.param(
        BayesianLinear, dict(in_features=2, out_features=3, weight_init="he"), "weight_init", id="w"
    ),
    pytest.param(
        BayesianConv2d, dict(in_channels=3, out_channels=2, kernel_size=0), "kernel_size", id="k"
    ),
    pytest.param(
        BayesianConv2d,
        dict(in_channels=3, out_channels=2, kernel_size=3, prior_sigma=-1.0),
        "prior_sigma",
        id="cp",
    ),
    pytest.param(
        BayesianConv2d,
        dict(in_channels=3, out_channels=4, kernel_size=3, groups=2),
        "groups",
        id="g",
    ),
    pytest.param(
        BayesianConv2d, dict(in_channels=0, out_channels=4, kernel_size=3), "in_channels", id="c0"
    ),
    pytest.param(
        BayesianConv2d,
        dict(in_channels=2, out_channels=4, kernel_size=3, padding=-1),
        "padding",
        id="pad",
    ),
]


@pytest.mark.parametrize(("cls", "kwargs", "arg"), BAD_ARGS)
def test_bad_arguments_raise(cls, kwargs, arg):
    with pytest.raises(ValueError, match=f"`{arg}`"):
        cls(**kwargs)


def test_conv_pruning_excludes_pruned_weights_from_kl_and_snr():
    torch.manual_seed(0)
    layer = BayesianConv2d(2, 3, 3)
    with torch.no_grad():
        layer.w_rho.uniform_(-5.0, 1.0)
    before = float(layer.kl_divergence().detach())
    sparsity = layer.apply_pruning(threshold=1.0)
    assert 0.0 < sparsity < 1.0
    after = layer.kl_divergence()
    assert bool(torch.isfinite(after)) and float(after.detach()) < before
    after.backward()
    assert bool(torch.isfinite(layer.w_rho.grad).all() & torch.isfinite(layer.w_mu.grad).all())
    snr = layer._get_snr_dict()["w_mu"]
    assert bool((snr[layer.w_mask == 0] == 0).all())
    layer.force_sample = True
    x = torch.randn(1, 2, 5, 5)
    w_mu, _, b_mu, _ = layer._moments()
    layer.force_sample = False
    layer.eval()
    torch.testing.assert_close(layer(x), torch.nn.functional.conv2d(x, w_mu, b_mu))


# ------------------------------------------------------------ issue 19: dtype, state, members
def test_a_pruned_layer_state_dict_prunes_a_fresh_layer_the_same_way() -> None:
    torch.manual_seed(0)
    layer = BayesianLinear(6, 4)
    layer.apply_pruning(threshold=5.0)
    fresh = BayesianLinear(6, 4)
    fresh.load_state_dict(layer.state_dict())
    assert torch.equal(fresh.w_mask, layer.w_mask)
    assert torch.isfinite(fresh.kl_divergence())
    assert torch.equal(fresh.kl_divergence(), layer.kl_divergence())
    fresh.load_state_dict(BayesianLinear(6, 4).state_dict())  # an unpruned state unprunes
    assert "w_mask" not in dict(fresh.named_buffers())


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_a_weight_draw_is_the_same_in_every_dtype(dtype) -> None:
    torch.manual_seed(0)
    layer = BayesianLinear(5, 3)
    w32, b32 = layer.sample_weights(torch.Generator().manual_seed(4))
    w, b = layer.to(dtype).sample_weights(torch.Generator().manual_seed(4))
    tol = {torch.float64: 1e-6, torch.float16: 2e-3, torch.bfloat16: 2e-2}[dtype]
    torch.testing.assert_close(w.float(), w32, rtol=tol, atol=tol)
    torch.testing.assert_close(b.float(), b32, rtol=tol, atol=tol)


def test_conversions_reach_every_parameter_of_a_bayesian_network() -> None:
    net = torch.nn.Sequential(BayesianLinear(3, 4), torch.nn.ReLU(), BayesianConv2d(1, 2, 3))
    for convert, dtype in (
        ("double", torch.float64),
        ("half", torch.float16),
        ("float", torch.float32),
    ):
        getattr(net, convert)()
        assert {p.dtype for p in net.parameters()} == {dtype}
    assert net.share_memory() is net
