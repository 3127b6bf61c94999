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
