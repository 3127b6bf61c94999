"""DropConnectLinear: deterministic mean in eval, one weight mask per pass while sampling."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bensemble.core.member import StochasticMembers
from bensemble.layers import DropConnectLinear, StochasticLayer


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _layer(p: float = 0.4, bias: bool = True, n_in: int = 5, n_out: int = 3) -> DropConnectLinear:
    torch.manual_seed(0)
    return DropConnectLinear(n_in, n_out, p=p, bias=bias)


def test_eval_is_the_plain_linear_layer() -> None:
    layer = _layer().eval()
    x = torch.randn(7, 5, generator=_gen())
    assert torch.equal(layer(x), F.linear(x, layer.weight, layer.bias))
    assert torch.equal(layer(x), layer(x))


def test_train_mode_is_stochastic_and_unbiased() -> None:
    """E[y] = x W^T + b; Var[y_i] = p/(1-p) sum_j x_j^2 W_ij^2 (independent Bernoulli masks)."""
    p, n = 0.4, 4000
    layer = _layer(p=p).train()
    x = torch.randn(1, 5, generator=_gen(1)).double()
    layer = layer.double()
    layer.sample_generator = _gen(2)
    with torch.no_grad():
        draws = torch.cat([layer(x) for _ in range(n)])  # [n, 3]
    expected = F.linear(x, layer.weight, layer.bias)[0]
    variance = p / (1 - p) * (x[0] ** 2 * layer.weight**2).sum(-1)
    standard_error = (variance / n).sqrt()
    assert bool(((draws.mean(0) - expected).abs() < 5 * standard_error).all())
    # the 1/(1-p) rescaling gives this variance (a missing rescale fails it)
    torch.testing.assert_close(draws.var(0), variance, rtol=0.1, atol=0)


def test_one_weight_mask_per_pass_shared_by_the_batch() -> None:
    layer = _layer(p=0.5).train()
    row = torch.randn(1, 5, generator=_gen())
    out = layer(row.expand(6, 5))
    assert bool((out == out[:1]).all())
    assert not torch.equal(layer(row), layer(row))  # but a new mask on every pass


def test_effective_weight_is_masked_and_rescaled() -> None:
    p = 0.3
    layer = _layer(p=p, bias=False, n_in=60, n_out=50).train()
    layer.sample_generator = _gen(3)
    with torch.no_grad():
        effective = layer(torch.eye(60)).T  # column j of W * m / (1 - p)
    ratio = effective / layer.weight.detach()
    kept = torch.isclose(ratio, torch.tensor(1 / (1 - p)))
    dropped = effective == 0
    assert bool((kept | dropped).all())
    fraction = float(dropped.double().mean())
    assert abs(fraction - p) < 4 * math.sqrt(p * (1 - p) / 3000)
    # the bias is never dropped
    layer_b = _layer(p=0.9).train()
    torch.testing.assert_close(layer_b(torch.zeros(3, 5)), layer_b.bias.expand(3, 3))


def test_generator_makes_passes_reproducible() -> None:
    layer = _layer().train()
    x = torch.randn(4, 5, generator=_gen())
    layer.sample_generator = _gen(7)
    a = layer(x)
    layer.sample_generator = _gen(7)
    assert torch.equal(layer(x), a)


def test_gradients_flow_through_kept_weights() -> None:
    layer = _layer(p=0.5, bias=False).train()
    layer.sample_generator = _gen(1)
    layer(torch.ones(1, 5)).sum().backward()
    grad = layer.weight.grad
    assert bool(((grad == 0) | (grad == 2)).all()) and bool((grad == 2).any())


def test_replicas_equal_one_pass_per_replica() -> None:
    layer = _layer(p=0.5).eval()
    layer.force_sample = True
    x = torch.randn(4, 2, 5, generator=_gen())
    gens = [_gen(s) for s in (1, 2, 3)]
    singles = []
    for s in (1, 2, 3):
        layer.sample_generator = _gen(s)
        singles.append(layer(x))
    layer.sample_generator = None
    layer.sample_replicas = gens
    stacked = layer(x.repeat(3, 1, 1))
    torch.testing.assert_close(stacked, torch.cat(singles), rtol=1e-6, atol=1e-6)


def test_ensemble_samples_dropconnect_and_restores_it() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), DropConnectLinear(8, 3, p=0.5)).eval()
    members = StochasticMembers(model, num_samples=10, generator=_gen())
    assert members.kinds == ("dropconnect",)  # "auto" detects it
    x = torch.randn(5, 4, generator=_gen(1))
    out = members.predict_all(x)
    assert float(out.std(0).min()) > 0
    layer = model[2]
    assert layer.training is False and layer.force_sample is False
    assert layer.sample_generator is None and layer.sample_replicas is None
    assert torch.equal(model(x), F.linear(model[1](model[0](x)), layer.weight, layer.bias))


def test_from_linear_copies_parameters() -> None:
    torch.manual_seed(0)
    linear = nn.Linear(5, 3)
    layer = DropConnectLinear.from_linear(linear, p=0.2).eval()
    x = torch.randn(4, 5)
    assert torch.equal(layer(x), linear(x))
    assert layer.p == 0.2 and isinstance(layer, StochasticLayer)
    with pytest.raises(ValueError, match="`linear` must be an nn.Linear"):
        DropConnectLinear.from_linear(nn.Conv1d(1, 1, 1))


def test_p_zero_is_deterministic_even_in_train_mode() -> None:
    layer = _layer(p=0.0).train()
    x = torch.randn(3, 5)
    assert torch.equal(layer(x), F.linear(x, layer.weight, layer.bias))


def test_init_matches_nn_linear() -> None:
    torch.manual_seed(4)
    linear = nn.Linear(6, 2)
    torch.manual_seed(4)
    layer = DropConnectLinear(6, 2)
    assert torch.equal(layer.weight, linear.weight) and torch.equal(layer.bias, linear.bias)
    assert _layer(bias=False).bias is None
    assert "p=0.4" in repr(_layer())


@pytest.mark.parametrize("p", [1.0, -0.1, 1.5, True, "0.5", None])
def test_p_validation(p) -> None:
    with pytest.raises(ValueError, match=r"DropConnectLinear: `p` must be a number in \[0, 1\)"):
        DropConnectLinear(3, 2, p=p)


@pytest.mark.parametrize(
    ("n_in", "n_out", "name"), [(0, 2, "in_features"), (3, 1.5, "out_features")]
)
def test_size_validation(n_in, n_out, name) -> None:
    with pytest.raises(ValueError, match=f"`{name}` must be an integer >= 1"):
        DropConnectLinear(n_in, n_out)


def test_stochastic_active_needs_positive_p() -> None:
    assert DropConnectLinear(3, 2, p=0.2).stochastic_active()
    assert not DropConnectLinear(3, 2, p=0.0).stochastic_active()
