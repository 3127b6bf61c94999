"""Mean-field Gaussian weight layers: the sampling machinery shared by the Bayesian layers.

A subclass holds ``w_mu``/``w_rho`` and ``b_mu``/``b_rho`` (``q = N(mu, softplus(rho)^2)``) and
implements one operation, :meth:`MeanFieldGaussianLayer._apply` (``F.linear``, ``F.conv2d``,
...), which must be linear in ``x`` and in its weights. The forward pass is then:

* not sampling (eval mode): ``_apply(x, w_mu, b_mu)``;
* an ensemble's ``force_sample`` or a ``sample_generator``: **one** weight draw per pass,
  shared by every row, so a pass is one coherent network (reproducible given the generator);
* plain train mode: the local reparameterisation trick (Kingma et al., 2015),
  ``mean + eps * sqrt(_apply(x^2, sigma_w^2, sigma_b^2))`` with independent ``eps`` per output.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from bensemble.layers.base import BaseBayesianLayer

__all__ = ["MeanFieldGaussianLayer", "gaussian_noise", "inverse_softplus"]

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


class MeanFieldGaussianLayer(BaseBayesianLayer):
    """Base of layers with a factorised Gaussian posterior over weights and bias.

    Subclasses call :meth:`_create_parameters` in ``__init__``, set ``init_sigma`` and implement
    :meth:`_apply` and ``reset_parameters`` (which may call :meth:`_reset_sigmas`).
    """

    init_sigma: float

    def _create_parameters(self, weight_shape: tuple[int, ...], bias_size: int) -> None:
        self.w_mu = nn.Parameter(torch.empty(weight_shape))
        self.w_rho = nn.Parameter(torch.empty(weight_shape))
        self.b_mu = nn.Parameter(torch.empty(bias_size))
        self.b_rho = nn.Parameter(torch.empty(bias_size))

    def _reset_sigmas(self) -> None:
        """Zero bias means and every posterior ``sigma`` equal to ``init_sigma``."""
        with torch.no_grad():
            self.b_mu.zero_()
            rho = inverse_softplus(self.init_sigma)
            self.w_rho.fill_(rho)
            self.b_rho.fill_(rho)

    def _apply(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def sample_weights(
        self, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One draw ``(weight, bias)`` from the posterior (differentiable in mu and rho)."""
        weight = self.w_mu + F.softplus(self.w_rho) * gaussian_noise(
            self.w_mu.shape, self.w_mu, generator
        )
        bias = self.b_mu + F.softplus(self.b_rho) * gaussian_noise(
            self.b_mu.shape, self.b_mu, generator
        )
        return weight, bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.sampling:
            return self._apply(x, self.w_mu, self.b_mu)
        if self.force_sample or self.sample_generator is not None:
            return self._apply(x, *self.sample_weights(self.sample_generator))
        mean = self._apply(x, self.w_mu, self.b_mu)
        var = self._apply(x.pow(2), F.softplus(self.w_rho).pow(2), F.softplus(self.b_rho).pow(2))
        return mean + torch.randn_like(mean) * torch.sqrt(var + _VAR_FLOOR)
