"""Tests for bensemble.utils (bensemble 0.2 compatibility helpers)."""

import numpy as np
import pytest
import torch
from scipy import stats
from torch import nn

from bensemble.layers import BayesianLinear
from bensemble.layers.conv import BayesianConv2d
from bensemble.utils import (
    enable_dropout,
    get_total_kl,
    predict_with_uncertainty,
    standard_normal_cdf,
    standard_normal_pdf,
)


def test_pdf_cdf_match_scipy():
    x = torch.linspace(-30, 8, 401, dtype=torch.float64)
    torch.testing.assert_close(
        standard_normal_pdf(x), torch.from_numpy(stats.norm.pdf(x.numpy())), rtol=1e-12, atol=0
    )
    torch.testing.assert_close(
        standard_normal_cdf(x), torch.from_numpy(stats.norm.cdf(x.numpy())), rtol=1e-10, atol=0
    )
    # numpy input and gradients
    assert isinstance(standard_normal_cdf(np.array([0.0, 1.0])), torch.Tensor)
    z = torch.tensor([0.3], requires_grad=True)
    standard_normal_cdf(z).sum().backward()
    torch.testing.assert_close(z.grad, standard_normal_pdf(z.detach()))


def test_enable_dropout_every_kind():
    kinds = [
        nn.Dropout(0.5),
        nn.Dropout1d(0.5),
        nn.Dropout2d(0.5),
        nn.Dropout3d(0.5),
        nn.AlphaDropout(0.5),
        nn.FeatureAlphaDropout(0.5),
    ]
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2), *kinds).eval()
    enable_dropout(model)
    assert all(m.training for m in kinds)
    assert not model[0].training and not model[1].training and not model.training


def _bayes_model():
    torch.manual_seed(0)
    return nn.Sequential(
        BayesianConv2d(1, 2, 3),
        nn.Flatten(),
        nn.Dropout(0.2),
        BayesianLinear(2 * 3 * 3, 4),
        nn.ReLU(),
        nn.Sequential(BayesianLinear(4, 1)),
    )


def test_get_total_kl_sums_layers():
    model = _bayes_model()
    expected = sum(m.kl_divergence() for m in model.modules() if hasattr(m, "kl_divergence"))
    got = get_total_kl(model)
    torch.testing.assert_close(got, expected)
    assert got.requires_grad
    torch.testing.assert_close(get_total_kl(nn.Linear(2, 2)), torch.tensor(0.0))


def test_get_total_kl_does_not_double_count_a_container():
    class Wrapper(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = BayesianLinear(3, 2)

        def kl_divergence(self):
            return self.inner.kl_divergence()

    model = nn.Sequential(Wrapper(), BayesianLinear(2, 2))
    expected = model[0].inner.kl_divergence() + model[1].kl_divergence()
    torch.testing.assert_close(get_total_kl(model), expected)


def test_predict_with_uncertainty_shapes_and_flags():
    model = _bayes_model().train()
    model[1].eval()
    before = {name: m.training for name, m in model.named_modules()}
    x = torch.randn(5, 1, 5, 5)
    mean, std = predict_with_uncertainty(model, x, num_samples=50)
    assert mean.shape == std.shape == (5, 1)
    assert (std > 0).all()
    assert {name: m.training for name, m in model.named_modules()} == before


def test_predict_with_uncertainty_generator_reproducible_and_mean_close():
    model = _bayes_model().eval()
    x = torch.randn(5, 1, 5, 5)
    a = predict_with_uncertainty(model, x, 400, generator=torch.Generator().manual_seed(0))
    b = predict_with_uncertainty(model, x, 400, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert all(m.sample_generator is None for m in model.modules() if hasattr(m, "w_mu"))
    # with small posterior noise the MC mean is near the mean-weight output
    with torch.no_grad():
        det = model(x)
    assert ((a[0] - det).abs() < 4 * a[1] / 20 + 0.05).all()


def test_predict_with_uncertainty_restores_flags_when_forward_raises():
    class Boom(nn.Module):
        def forward(self, x):
            raise RuntimeError("boom")

    model = nn.Sequential(BayesianLinear(2, 2), nn.Dropout(0.1), Boom()).train()
    model[0].eval()
    gen = torch.Generator()
    with pytest.raises(RuntimeError, match="boom"):
        predict_with_uncertainty(model, torch.randn(3, 2), 5, generator=gen)
    assert model.training and model[1].training and model[2].training
    assert not model[0].training and model[0].sample_generator is None


def test_bad_arguments():
    with pytest.raises(ValueError, match="`num_samples`"):
        predict_with_uncertainty(nn.Linear(2, 2), torch.randn(3, 2), num_samples=1)
    with pytest.raises(ValueError, match="`model`"):
        get_total_kl("model")
    with pytest.raises(ValueError, match="`model`"):
        enable_dropout(None)
    with pytest.raises(ValueError, match="`generator`"):
        predict_with_uncertainty(nn.Linear(2, 2), torch.randn(3, 2), generator=0)


class _BayesNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = BayesianLinear(4, 16)
        self.b = BayesianLinear(16, 2)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def _trained_bayesian_net():
    torch.manual_seed(0)
    net = _BayesNet()
    with torch.no_grad():  # a spread of signal-to-noise ratios
        for layer in (net.a, net.b):
            layer.w_rho.uniform_(-4.0, 0.0)
    return net


def test_prune_model_keeps_kl_finite_and_decreasing_in_threshold():
    import copy

    from bensemble.utils import prune_model

    base = _trained_bayesian_net()
    kls, sparsities = [float(get_total_kl(base).detach())], [0.0]
    for threshold in (0.1, 0.5, 0.83, 2.0, 5.0, 1e9):
        net = copy.deepcopy(base)
        sparsities.append(prune_model(net, threshold=threshold))
        kl = get_total_kl(net)
        assert bool(torch.isfinite(kl))
        kls.append(float(kl.detach()))
        # pruned weights are exactly zero in sampled forward passes and excluded from the SNR
        net.train()
        mask = net.a.w_mask.bool()
        assert bool((net.a.sample_weights()[0][~mask] == 0).all())
        assert bool(torch.isfinite(net.a._get_snr_dict()["w_mu"]).all())
    assert all(b <= a for a, b in zip(kls, kls[1:]))
    assert all(b >= a for a, b in zip(sparsities, sparsities[1:]))
    assert kls[-1] == 0.0 and sparsities[-1] == 1.0


def test_prune_model_sparsity_matches_masks_and_training_cannot_revive():
    from bensemble.utils import prune_model

    net = _trained_bayesian_net()
    masks = [layer.get_pruning_masks(0.83) for layer in (net.a, net.b)]
    n_pruned = sum(int((m == 0).sum()) for d in masks for m in d.values())
    n_total = sum(m.numel() for d in masks for m in d.values())
    assert prune_model(net, 0.83) == pytest.approx(n_pruned / n_total)
    # pruning again at a lower threshold keeps what was pruned
    assert prune_model(net, 0.1) == pytest.approx(n_pruned / n_total)
    opt = torch.optim.SGD(net.parameters(), lr=0.5)
    net.train()
    for _ in range(3):
        opt.zero_grad()
        (net(torch.randn(8, 4)).pow(2).sum() + get_total_kl(net)).backward()
        opt.step()
    net.eval()
    x = torch.randn(5, 4)
    w_mu, _, b_mu, _ = net.a._moments()
    assert bool((w_mu[net.a.w_mask == 0] == 0).all())
    torch.testing.assert_close(net.a(x), torch.nn.functional.linear(x, w_mu, b_mu))
    with pytest.raises(ValueError, match="`threshold` must be a finite number >= 0"):
        prune_model(net, -1.0)
