"""Variational fully connected layer (bensemble 0.2's ``BayesianLinear``)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from bensemble._validation import (
    check_option,
    check_positive,
)
from bensemble.layers.base import check_linear_sizes
from bensemble.layers.gaussian import MeanFieldGaussianLayer

__all__ = ["BayesianLinear"]

#: Initialisations of the weight means accepted by ``weight_init``.
WEIGHT_INITS = ("kaiming", "xavier", "normal")


class BayesianLinear(MeanFieldGaussianLayer):
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
        # what __init__ allocates: mu and rho of the weights and of the biases (float32)
        self.in_features, self.out_features = check_linear_sizes(in_features, out_features, fn, 2)
        self.init_sigma = check_positive(init_sigma, "init_sigma", fn)
        self.weight_init = check_option(weight_init, "weight_init", WEIGHT_INITS, fn)

        self._create_parameters((self.out_features, self.in_features), self.out_features)
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
        self._reset_sigmas()

    def _weight_op(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return F.linear(x, weight, bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"prior_sigma={self.prior_sigma}, init_sigma={self.init_sigma}"
        )
