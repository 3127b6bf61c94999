"""StochasticLayer contract, bernoulli_mask and BaseBayesianLayer (KL, pruning)."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Normal, kl_divergence

from bensemble.layers import BaseBayesianLayer, StochasticLayer, bernoulli_mask
from bensemble.layers.base import BaseBayesianLayer as OldPath


class _Gaussian(BaseBayesianLayer):
    def __init__(self, prior_sigma: float = 1.0) -> None:
        super().__init__(prior_sigma)
        g = torch.Generator().manual_seed(0)
        self.w_mu = nn.Parameter(torch.randn(4, 3, generator=g))
        self.w_rho = nn.Parameter(torch.randn(4, 3, generator=g) - 2)
        self.b_mu = nn.Parameter(torch.randn(4, generator=g) * 0.01)
        self.b_rho = nn.Parameter(torch.randn(4, generator=g) - 1)
        self.other = nn.Parameter(torch.ones(2))  # not a Gaussian pair

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.w_mu, self.b_mu)


def test_sampling_flag() -> None:
    layer = _Gaussian().eval()
    assert OldPath is BaseBayesianLayer and isinstance(layer, StochasticLayer)
    assert layer.stochastic_kind == "bayesian" and not layer.sampling
    layer.force_sample = True
    assert layer.sampling
    layer.force_sample = False
    layer.train()
    assert layer.sampling


@pytest.mark.parametrize("prior_sigma", [1.0, 0.3])
def test_kl_matches_torch_distributions(prior_sigma: float) -> None:
    layer = _Gaussian(prior_sigma)
    expected = sum(
        kl_divergence(Normal(mu, F.softplus(rho)), Normal(0.0, prior_sigma)).sum()
        for mu, rho in [(layer.w_mu, layer.w_rho), (layer.b_mu, layer.b_rho)]
    )
    torch.testing.assert_close(layer.kl_divergence(), expected)
    layer.kl_divergence().backward()
    assert layer.w_mu.grad is not None and layer.other.grad is None


def test_pruning_by_signal_to_noise() -> None:
    layer = _Gaussian()
    snr = layer.w_mu.abs() / F.softplus(layer.w_rho)
    masks = layer.get_pruning_masks(threshold=5.0)
    assert set(masks) == {"w_mu", "b_mu"}
    assert torch.equal(masks["w_mu"], (snr > 5.0).float())
    n_pruned = int((masks["w_mu"] == 0).sum() + (masks["b_mu"] == 0).sum())
    sparsity = layer.apply_pruning(threshold=5.0)
    assert sparsity == pytest.approx(n_pruned / 16)
    pruned = masks["w_mu"] == 0
    assert bool((layer.w_mu[pruned] == 0).all())
    assert bool((F.softplus(layer.w_rho[pruned]) < 1e-30).all())
    with pytest.raises(ValueError, match="`threshold` must be a finite number >= 0"):
        layer.get_pruning_masks(-1.0)


def test_prior_sigma_validation() -> None:
    with pytest.raises(ValueError, match="`prior_sigma` must be a finite number > 0"):
        _Gaussian(prior_sigma=0.0)


def test_bernoulli_mask() -> None:
    a = bernoulli_mask((200, 50), 0.3, generator=torch.Generator().manual_seed(1))
    b = bernoulli_mask((200, 50), 0.3, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b) and a.dtype == torch.float32
    assert set(a.unique().tolist()) == {0.0, 1.0}
    assert abs(float(a.mean()) - 0.3) < 0.02
    c = bernoulli_mask((3,), 1.0, dtype=torch.float64)
    assert torch.equal(c, torch.ones(3, dtype=torch.float64))


def test_stochastic_active() -> None:
    """A layer whose every sigma is 0 cannot change its output: an ensemble refuses it."""
    layer = _Gaussian()
    assert layer.stochastic_active()
    layer.apply_pruning(threshold=1e9)  # prunes every weight: sigma -> softplus(-1e8) = 0
    assert not layer.stochastic_active()

    class Plain(StochasticLayer):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    assert Plain().stochastic_active()  # unknown layers count as active
