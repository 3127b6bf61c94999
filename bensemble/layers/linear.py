"""Variational fully connected layer (bensemble 0.2's ``BayesianLinear``)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from bensemble._validation import check_option, check_positive, check_positive_int
from bensemble.layers.base import BaseBayesianLayer

__all__ = ["BayesianLinear"]

#: Initialisations of the weight means accepted by ``weight_init``.
WEIGHT_INITS = ("kaiming", "xavier", "normal")

# Added under the square root of the local-reparameterisation variance.
_VAR_FLOOR = 1e-8


def inverse_softplus(sigma: float) -> float:
    """``rho`` with ``softplus(rho) = sigma`` for ``sigma > 0``."""
    # log(e^s - 1) = s + log(1 - e^-s); the second form cannot overflow for large s
    return sigma + math.log(-math.expm1(-sigma))


def gaussian_noise(
    shape: torch.Size | tuple[int, ...], like: torch.Tensor, generator: torch.Generator | None
) -> torch.Tensor:
    """Standard normal noise of ``shape`` with ``like``'s dtype and device.

    With a generator the draw happens on the generator's device (a CPU generator also serves a
    CUDA model) and is then moved next to ``like``.
    """
    if generator is None:
        return torch.randn(shape, dtype=like.dtype, device=like.device)
    draw_dtype = like.dtype if like.dtype in (torch.float32, torch.float64) else torch.float32
    eps = torch.randn(shape, dtype=draw_dtype, device=generator.device, generator=generator)
    return eps.to(device=like.device, dtype=like.dtype)


class BayesianLinear(BaseBayesianLayer):
    """A linear layer with a factorised Gaussian posterior over its weights and bias.

    ``q(W) = N(w_mu, softplus(w_rho)^2)`` and ``q(b) = N(b_mu, softplus(b_rho)^2)`` elementwise,
    prior ``N(0, prior_sigma^2)``; :meth:`kl_divergence` gives ``KL(q || p)`` in closed form.

    Forward pass on ``x [B, in_features] -> [B, out_features]`` (any leading dimensions work):

    * not sampling (eval mode): the mean function ``x w_mu^T + b_mu``.
    * sampling with an ensemble's ``force_sample`` or a ``sample_generator`` set: **one** weight
      sample ``W = w_mu + sigma_w * eps`` (and bias) per forward pass, shared by every row, so a
      pass is one coherent network drawn from ``q`` (reproducible given the generator).
    * plain train mode: the local reparameterisation trick (Kingma et al., 2015), an
      independent pre-activation sample per row,
      ``y = x w_mu^T + b_mu + eps * sqrt(x^2 sigma_w^2 ^T + sigma_b^2)``, which has the same
      per-row marginal as weight sampling and lower-variance gradients.

    Args:
        in_features: size of each input row.
        out_features: size of each output row.
        prior_sigma: standard deviation of the Gaussian prior (``> 0``).
        init_sigma: initial posterior standard deviation of every weight and bias (``> 0``).
        weight_init: initialisation of ``w_mu``: ``"kaiming"`` (He normal), ``"xavier"``
            (Glorot normal) or ``"normal"`` (as in bensemble 0.2, the default of
            :class:`torch.nn.Linear`: Kaiming uniform with ``a = sqrt(5)``). ``b_mu`` starts at 0.

    Example:
        >>> layer = BayesianLinear(4, 3).eval()
        >>> x = torch.randn(2, 4)
        >>> torch.equal(layer(x), torch.nn.functional.linear(x, layer.w_mu, layer.b_mu))
        True
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        prior_sigma: float = 1.0,
        init_sigma: float = 0.1,
        weight_init: str = "kaiming",
    ) -> None:
        fn = "BayesianLinear"
        super().__init__(prior_sigma=prior_sigma)
        self.in_features = check_positive_int(in_features, "in_features", fn)
        self.out_features = check_positive_int(out_features, "out_features", fn)
        self.init_sigma = check_positive(init_sigma, "init_sigma", fn)
        self.weight_init = check_option(weight_init, "weight_init", WEIGHT_INITS, fn)

        self.w_mu = nn.Parameter(torch.empty(self.out_features, self.in_features))
        self.w_rho = nn.Parameter(torch.empty(self.out_features, self.in_features))
        self.b_mu = nn.Parameter(torch.empty(self.out_features))
        self.b_rho = nn.Parameter(torch.empty(self.out_features))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Initialise the means per ``weight_init`` and every ``sigma`` to ``init_sigma``."""
        with torch.no_grad():
            if self.weight_init == "kaiming":
                nn.init.kaiming_normal_(self.w_mu, nonlinearity="relu")
            elif self.weight_init == "xavier":
                nn.init.xavier_normal_(self.w_mu)
            else:
                nn.init.kaiming_uniform_(self.w_mu, a=math.sqrt(5))
            self.b_mu.zero_()
            rho = inverse_softplus(self.init_sigma)
            self.w_rho.fill_(rho)
            self.b_rho.fill_(rho)

    def sample_weights(
        self, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One draw ``(W [out, in], b [out])`` from the posterior (differentiable in mu, rho)."""
        weight = self.w_mu + F.softplus(self.w_rho) * gaussian_noise(
            self.w_mu.shape, self.w_mu, generator
        )
        bias = self.b_mu + F.softplus(self.b_rho) * gaussian_noise(
            self.b_mu.shape, self.b_mu, generator
        )
        return weight, bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.sampling:
            return F.linear(x, self.w_mu, self.b_mu)
        if self.force_sample or self.sample_generator is not None:
            weight, bias = self.sample_weights(self.sample_generator)
            return F.linear(x, weight, bias)
        mean = F.linear(x, self.w_mu, self.b_mu)
        var = F.linear(x.pow(2), F.softplus(self.w_rho).pow(2)) + F.softplus(self.b_rho).pow(2)
        return mean + torch.randn_like(mean) * torch.sqrt(var + _VAR_FLOOR)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"prior_sigma={self.prior_sigma}, init_sigma={self.init_sigma}"
        )
