"""Tests of probabilistic backpropagation (bensemble 0.2's ``PBPEngine``)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from bensemble.core.ensemble import Ensemble
from bensemble.methods._pbp_moments import backward_moments, moments_with_grads
from bensemble.methods.pbp import PBPEngine
from bensemble.methods.probabilistic_backpropagation import PBPNet, ProbLinear, relu_moments

F64 = torch.float64


def test_relu_moments_match_monte_carlo_and_are_stable() -> None:
    m = torch.tensor([-1.0, 0.0, 0.7, 3.0], dtype=F64)
    v = torch.tensor([0.5, 1.0, 2.0, 0.1], dtype=F64)
    mean, var = relu_moments(m, v)
    draws = torch.relu(
        m
        + v.sqrt() * torch.randn(100_000, 4, dtype=F64, generator=torch.Generator().manual_seed(0))
    )
    torch.testing.assert_close(mean, draws.mean(0), atol=0.015, rtol=0)  # ~5 standard errors
    torch.testing.assert_close(var, draws.var(0), atol=0.05, rtol=0)
    assert (
        abs(
            float(relu_moments(torch.zeros(1, dtype=F64), torch.ones(1, dtype=F64))[0])
            - 1 / math.sqrt(2 * math.pi)
        )
        < 1e-12
    )
    mean, var = relu_moments(
        torch.tensor([-100.0, 0.0], dtype=F64), torch.tensor([1.0, 1e-30], dtype=F64)
    )
    assert bool(torch.isfinite(mean).all() & torch.isfinite(var).all()) and float(mean[0]) < 1e-6


def _log_z_autograd(net, x, y, noise):
    """Per-example log Z by autograd through a plain re-implementation of the moment pass."""
    zm = torch.cat([x, torch.ones(x.shape[0], 1, dtype=F64)], 1)
    zv = torch.zeros_like(zm)
    for i, layer in enumerate(net.layers):
        s = 1.0 / math.sqrt(layer.in_features + 1)
        ma = s * zm @ layer.m.T
        va = s * s * (zv @ (layer.m**2).T + zm**2 @ layer.v.T + zv @ layer.v.T)
        if i == len(net.layers) - 1:
            var = va + noise
            return (-0.5 * torch.log(2 * math.pi * var) - 0.5 * (y - ma) ** 2 / var).sum(1)
        sd = va.sqrt()
        al = ma / sd
        cdf = 0.5 * torch.special.erfc(-al / math.sqrt(2))
        pdf = torch.exp(-0.5 * al * al) / math.sqrt(2 * math.pi)
        mb = ma * cdf + sd * pdf
        vb = (ma * ma + va) * cdf + ma * sd * pdf - mb * mb
        zm = torch.cat([mb, torch.ones(x.shape[0], 1, dtype=F64)], 1)
        zv = torch.cat([vb, torch.zeros(x.shape[0], 1, dtype=F64)], 1)


def test_analytic_per_example_gradients_equal_autograd() -> None:
    torch.manual_seed(0)
    net = PBPNet([3, 5, 4, 2])
    for layer in net.layers:
        layer.v.data.uniform_(0.1, 1.0)
    x, y = torch.randn(4, 3, dtype=F64), torch.randn(4, 2, dtype=F64)
    noise = 0.3
    (mu, s2), cache = moments_with_grads(net, x)
    var = s2 + noise
    g_m, g_v = (y - mu) / var, 0.5 * ((y - mu) ** 2 / var - 1.0) / var
    grads = backward_moments(net, cache, g_m, g_v)
    for b in range(4):
        params = [p for layer in net.layers for p in (layer.m, layer.v)]
        for p in params:
            p.requires_grad_(True)
        log_z = _log_z_autograd(net, x[b : b + 1], y[b : b + 1], noise).sum()
        auto = torch.autograd.grad(log_z, params)
        for p in params:
            p.requires_grad_(False)
        for i, (d_m, d_v) in enumerate(grads):
            torch.testing.assert_close(d_m[b], auto[2 * i], rtol=1e-9, atol=1e-12)
            torch.testing.assert_close(d_v[b], auto[2 * i + 1], rtol=1e-9, atol=1e-12)


def test_update_size_one_is_sequential_adf() -> None:
    """One point absorbed at a time equals the textbook ADF update done with autograd."""
    torch.manual_seed(1)
    pbp = PBPEngine(layer_sizes=[2, 6, 1])
    ref = PBPNet([2, 6, 1])
    ref.load_state_dict(pbp.model.state_dict())
    x, y = torch.randn(3, 2, dtype=F64), torch.randn(3, 1, dtype=F64)
    noise = float(pbp.noise_variance())
    for i in range(3):
        params = [p for layer in ref.layers for p in (layer.m, layer.v)]
        for p in params:
            p.requires_grad_(True)
        grads = torch.autograd.grad(
            _log_z_autograd(ref, x[i : i + 1], y[i : i + 1], noise).sum(), params
        )
        with torch.no_grad():
            for layer, gm, gv in zip(ref.layers, grads[0::2], grads[1::2]):
                v = layer.v.clone()
                layer.m.add_(v * gm)
                layer.v.sub_(v * v * (gm * gm - 2 * gv))
        for p in params:
            p.requires_grad_(False)
        pbp._update(x[i : i + 1], y[i : i + 1])
        noise = float(pbp.noise_variance())
    for ours, theirs in zip(pbp.model.layers, ref.layers):
        torch.testing.assert_close(ours.m, theirs.m, rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(ours.v, theirs.v, rtol=1e-9, atol=1e-12)


def _regression(n, seed, sigma=0.3):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, generator=g, dtype=F64) * 6 - 3
    return x, torch.sin(x) + sigma * torch.randn(n, 1, generator=g, dtype=F64)


def test_noise_variance_and_interval_coverage_on_1d_regression() -> None:
    sigma = 0.3
    x, y = _regression(300, 1, sigma)
    xt, yt = _regression(2000, 11, sigma)
    torch.manual_seed(1)
    pbp = PBPEngine(layer_sizes=[1, 50, 1])
    history = pbp.fit(DataLoader(TensorDataset(x, y), batch_size=32), num_epochs=30, seed=1)
    assert len(history["train_rmse"]) == 30
    assert float(pbp.noise_variance()) == pytest.approx(sigma**2, rel=0.20)
    mean, var = pbp.predict(xt)
    coverage = float(((yt - mean).abs() <= 1.6448536 * var.sqrt()).double().mean())
    assert 0.85 <= coverage <= 0.95
    # float32 input works for sampled networks and ensembles
    ens = Ensemble.from_posterior(pbp, n_members=4)
    out = ens.predict_members(xt[:10].float())
    assert out.shape == (4, 10, 1) and bool(torch.isfinite(out).all())
    model = pbp.sample_models(1, generator=torch.Generator().manual_seed(0))[0]
    assert isinstance(model, nn.Sequential) and model(xt[:3].float()).shape == (3, 1)


def test_multi_output_targets_are_not_averaged() -> None:
    x = torch.randn(40, 2, dtype=F64)
    y = torch.stack([x[:, 0], -x[:, 1]], dim=1)
    pbp = PBPEngine(layer_sizes=[2, 8, 2])
    pbp.fit([(x, y)], num_epochs=2, seed=0)
    assert pbp.predict(x)[0].shape == (40, 2)
    with pytest.raises(ValueError, match=r"targets must be \[N, 2\]"):
        pbp.fit([(x, y[:, 0])], num_epochs=1)


def test_prior_enters_once() -> None:
    """Weights fed by an always-zero input learn nothing: their variance stays at the prior."""
    x = torch.randn(50, 2, dtype=F64)
    x[:, 1] = 0.0
    pbp = PBPEngine(layer_sizes=[2, 4, 1])
    prior_var = float(pbp.beta_l / (pbp.alpha_l - 1))
    pbp.fit([(x, x[:, :1] * 2)], num_epochs=3, prior_refresh=1, seed=0)
    torch.testing.assert_close(pbp.model.layers[0].v[:, 1], torch.full((4,), prior_var, dtype=F64))


def test_api_and_errors() -> None:
    assert ProbLinear(5, 3).m.shape == (3, 6)
    mz, vz = PBPNet([2, 5, 1]).forward_moments(torch.randn(10, 2, dtype=F64))
    assert mz.shape == vz.shape == (10, 1) and bool((vz >= 0).all())
    with pytest.raises(ValueError, match="Specify either"):
        PBPEngine(model=None, layer_sizes=None)
    pbp = PBPEngine(layer_sizes=[1, 3, 1])
    with pytest.raises(ValueError, match="not fitted"):
        pbp.sample_models(n_models=2)
    with pytest.raises(ValueError, match="not fitted"):
        pbp.predict(torch.zeros(2, 1))
    with pytest.raises(ValueError, match="unexpected keyword argument `foo`"):
        pbp.fit([(torch.zeros(2, 1), torch.zeros(2))], foo=1)
    history = pbp.fit(
        [(torch.randn(8, 1), torch.randn(8))],
        val_loader=[(torch.randn(4, 1), torch.randn(4))],
        num_epochs=1,
    )
    assert set(history) == {"train_rmse", "train_nlpd", "val_rmse", "val_nlpd"}
    assert pbp.build_ensemble(n_members=3).num_members == 3


# ----------------------------------------------------------- issue 19: inputs checked, dtypes


def _xy(n: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(n, 2, generator=torch.Generator().manual_seed(3), dtype=F64)
    return x, x.sum(1)


def _with_nan(t: torch.Tensor, value: float = math.nan) -> torch.Tensor:
    t = t.clone()
    t.view(-1)[1] = value
    return t


@pytest.mark.parametrize(
    "data, argument",
    [
        pytest.param(lambda: [(_with_nan(_xy()[0]), _xy()[1])], "x", id="nan-x"),
        pytest.param(lambda: [(_with_nan(_xy()[0], math.inf), _xy()[1])], "x", id="inf-x"),
        pytest.param(lambda: [(_xy()[0], _with_nan(_xy()[1]))], "y", id="nan-y"),
        pytest.param(lambda: [(torch.zeros(0, 2), torch.zeros(0))], "loader", id="no-sample"),
        pytest.param(lambda: [], "loader", id="no-batch"),
        pytest.param(lambda: [(torch.randn(4, 3), torch.randn(4))], "x", id="wrong-width"),
        pytest.param(lambda: [(["a", "b"], [1.0, 2.0])], "x", id="strings"),
        pytest.param(lambda: 5, "loader", id="not-iterable"),
    ],
)
def test_fit_refuses_bad_data_with_a_value_error(data, argument) -> None:
    pbp = PBPEngine(layer_sizes=[2, 4, 1])
    with pytest.raises(ValueError) as info:
        pbp.fit(data(), num_epochs=1)
    assert argument in str(info.value)
    assert not pbp.is_fitted


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"noise_alpha": 1.0}, id="alpha=1: infinite noise variance"),
        pytest.param({"noise_alpha": 0.5}, id="alpha<1: negative noise variance"),
        pytest.param({"noise_alpha": 1.0 + 1e-17}, id="alpha-1 rounds to 0"),
        pytest.param({"noise_beta": 1e308, "noise_alpha": 1.0 + 1e-10}, id="variance overflows"),
        pytest.param({"noise_alpha": math.inf}, id="infinite alpha"),
        pytest.param({"weight_alpha": 1.0}, id="infinite prior variance"),
        pytest.param({"weight_beta": math.nan}, id="nan beta"),
    ],
)
def test_gamma_hyperparameters_must_give_a_finite_positive_variance(kwargs) -> None:
    name = next(iter(kwargs)).split("_")[0]
    with pytest.raises(ValueError, match=f"`{name}_"):
        PBPEngine(layer_sizes=[2, 4, 1], **kwargs)


def test_predict_refuses_non_finite_inputs_and_models_with_nan_means() -> None:
    pbp = PBPEngine(layer_sizes=[2, 4, 1])
    pbp.fit([_xy()], num_epochs=1)
    with pytest.raises(ValueError, match="`x` must be finite"):
        pbp.predict(_with_nan(_xy()[0]))
    net = PBPNet([2, 4, 1])
    with torch.no_grad():
        net.layers[0].m[0, 0] = math.nan
    with pytest.raises(ValueError, match="`model` must have finite weight means"):
        PBPEngine(model=net)


def test_update_size_beyond_memory_is_refused(monkeypatch) -> None:
    import bensemble._scalar_checks as checks

    monkeypatch.setattr(checks, "MEMORY_OVERRIDE", 10_000)
    pbp = PBPEngine(layer_sizes=[2, 16, 1])
    with pytest.raises(ValueError, match=r"`update_size` must be <= \d+"):
        pbp.fit([_xy(64)], num_epochs=1, update_size=64)


@pytest.mark.parametrize("convert", ["float", "half", "double"])
def test_pbp_net_follows_dtype_conversions(convert: str) -> None:
    torch.manual_seed(0)
    net = PBPNet([2, 5, 1])
    x = _xy()[0]
    want = net(x)
    moved = getattr(net, convert)()
    expected = {"float": torch.float32, "half": torch.float16, "double": torch.float64}[convert]
    assert moved.dtype == moved.layers[0].m.dtype == expected
    back = moved.double()
    tol = {"float": 1e-6, "half": 2e-2, "double": 0.0}[convert]
    torch.testing.assert_close(back(x), want, rtol=tol, atol=tol * float(want.abs().max()))


def test_an_engine_takes_its_dtype_from_the_model_and_samples_follow_conversions() -> None:
    torch.manual_seed(0)
    pbp = PBPEngine(model=PBPNet([2, 4, 1]).float())
    assert pbp.dtype == torch.float32
    pbp.fit([_xy()], num_epochs=1)
    mean, var = pbp.predict(_xy()[0])
    assert mean.dtype == torch.float32 and bool((var > 0).all())
    member = pbp.sample_models(1, generator=torch.Generator().manual_seed(0))[0]
    out32 = member(_xy()[0])
    torch.testing.assert_close(member.double()(_xy()[0]).float(), out32, rtol=1e-5, atol=1e-6)


def test_bad_validation_data_is_refused_before_q_changes() -> None:
    pbp = PBPEngine(layer_sizes=[2, 4, 1])
    before = [layer.m.clone() for layer in pbp.model.layers]
    with pytest.raises(ValueError, match="`y` must be finite"):
        pbp.fit([_xy()], val_loader=[(_xy()[0], _with_nan(_xy()[1]))], num_epochs=2)
    assert all(torch.equal(a, layer.m) for a, layer in zip(before, pbp.model.layers))
    assert not pbp.is_fitted
    with pytest.raises(ValueError, match="`x` must be \\[B, D\\]"):
        pbp.fit([(torch.tensor(1.0), torch.tensor(2.0))], num_epochs=1)
