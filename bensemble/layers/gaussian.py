"""Mean-field Gaussian weight layers: the sampling machinery shared by the Bayesian layers.

A subclass holds ``w_mu``/``w_rho`` and ``b_mu``/``b_rho`` (``q = N(mu, softplus(rho)^2)``) and
implements one operation, :meth:`MeanFieldGaussianLayer._weight_op` (``F.linear``, ``F.conv2d``,
...), which must be linear in ``x`` and in its weights. The forward pass is then:

* not sampling (eval mode): ``_weight_op(x, w_mu, b_mu)``;
* an ensemble's ``force_sample`` or a ``sample_generator``: **one** weight draw per pass,
  shared by every row, so a pass is one coherent network (reproducible given the generator);
* plain train mode: the local reparameterisation trick (Kingma et al., 2015),
  ``mean + eps * sqrt(_weight_op(x^2, sigma_w^2, sigma_b^2))`` with independent ``eps`` per output.
  Training noise, like ``nn.Dropout``'s, comes from torch's global random state (seed it with
  ``torch.manual_seed``): a fixed seed per forward pass would repeat the same noise at every
  step. Draws made for prediction (:meth:`MeanFieldGaussianLayer.sample_weights`, ensembles)
  follow the library's rule: seeded, default seed 0.

Pruning (Graves 2011): :meth:`MeanFieldGaussianLayer.apply_pruning` removes the weights whose
signal-to-noise ratio ``|mu| / sigma`` is at most a threshold. A removed weight is exactly 0 in
every forward pass (its mean and standard deviation are masked, so further training cannot
revive it) and is *excluded* from :meth:`~MeanFieldGaussianLayer.kl_divergence` (a point mass at 0
is no longer a Gaussian; bensemble 0.2 kept it and its KL became infinite) and from the SNR (its
SNR is reported as 0, so it stays pruned). The masks are buffers ``<name>_mask``, saved in the
``state_dict``: loading a pruned layer's state into a fresh layer prunes it the same way, and
loading an unpruned state removes the masks.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from bensemble._seeds import DEFAULT_SEED, check_generator
from bensemble.layers.base import BaseBayesianLayer

__all__ = ["MeanFieldGaussianLayer", "gaussian_noise", "inverse_softplus"]

#: dtype every weight-noise draw is made in, whatever the layer's dtype (see gaussian_noise).
NOISE_DTYPE = torch.float32
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

    The draw is always made in float32 (:data:`NOISE_DTYPE`) and then cast, so a layer converted
    with ``.double()`` or ``.half()`` draws the *same* noise from the same generator: member ``m``
    of an ensemble stays the same function under a dtype change (to the dtype's rounding). With a
    generator the draw happens on the generator's device (a CPU generator also serves a CUDA
    model) and is then moved next to ``like``.
    """
    device = like.device if generator is None else generator.device
    eps = torch.randn(shape, dtype=NOISE_DTYPE, device=device, generator=generator)
    return eps.to(device=like.device, dtype=like.dtype)


class MeanFieldGaussianLayer(BaseBayesianLayer):
    """Base of layers with a factorised Gaussian posterior over weights and bias.

    Subclasses call :meth:`_create_parameters` in ``__init__``, set ``init_sigma`` and implement
    :meth:`_weight_op` and ``reset_parameters`` (which may call :meth:`_reset_sigmas`).
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

    def _weight_op(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    # ------------------------------------------------------------------ pruning
    def _mask(self, name: str) -> torch.Tensor | None:
        """The keep-mask (1 keep, 0 pruned) of the ``<name>_mu`` parameter, if pruned."""
        mask = getattr(self, name[: -len("_mu")] + "_mask", None)
        return mask if isinstance(mask, torch.Tensor) else None

    def _moments(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(w_mu, w_sigma, b_mu, b_sigma)`` with pruned entries exactly 0."""
        out = []
        for name in ("w_mu", "b_mu"):
            mu = getattr(self, name)
            sigma = F.softplus(getattr(self, name[:-3] + "_rho"))
            mask = self._mask(name)
            if mask is not None:
                mu, sigma = mu * mask, sigma * mask
            out += [mu, sigma]
        return out[0], out[1], out[2], out[3]

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, errors
    ) -> None:
        """Pruning masks follow the loaded state: created when it has them, dropped otherwise."""
        for name in ("w_mask", "b_mask"):
            saved = state_dict.get(prefix + name)
            if isinstance(saved, torch.Tensor):
                if name not in self._buffers:
                    mu = getattr(self, name[:1] + "_mu")
                    self.register_buffer(name, torch.ones_like(mu))
            elif name in self._buffers:
                del self._buffers[name]
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, errors
        )

    def kl_divergence(self) -> torch.Tensor:
        """``KL(q || p)`` summed over the weights and biases that are not pruned.

        Per weight: ``log(s_p / s) + (s^2 + mu^2) / (2 s_p^2) - 1/2``.
        """
        total = torch.zeros((), device=self.w_mu.device, dtype=self.w_mu.dtype)
        for name, mu, rho in self._gaussian_pairs():
            sigma = F.softplus(rho)
            mask = self._mask(name)
            if mask is not None:  # pruned entries replaced by a harmless value (finite grads)
                keep = mask.bool()
                sigma = torch.where(keep, sigma, torch.full_like(sigma, self.prior_sigma))
                mu = torch.where(keep, mu, torch.zeros_like(mu))
            # with sigma = prior_sigma and mu = 0 the term below is exactly 0
            kl = (
                math.log(self.prior_sigma)
                - torch.log(sigma)
                + (sigma.pow(2) + mu.pow(2)) / (2.0 * self.prior_sigma**2)
                - 0.5
            )
            total = total + kl.sum()
        return total

    def _get_snr_dict(self) -> dict[str, torch.Tensor]:
        """``|mu| / sigma`` per ``_mu`` parameter; 0 for pruned entries."""
        snr = {}
        for name, mu, rho in self._gaussian_pairs():
            sigma = F.softplus(rho)
            mask = self._mask(name)
            if mask is not None:
                keep = mask.bool()
                value = torch.where(keep, mu, torch.zeros_like(mu)).abs() / torch.where(
                    keep, sigma, torch.ones_like(sigma)
                )
            else:
                value = mu.abs() / sigma
            snr[name] = value
        return snr

    def apply_pruning(self, threshold: float = 0.83) -> float:
        """Prune the weights with SNR ``<= threshold``; returns the layer's pruned fraction.

        Pruned entries get ``mu = 0``, ``rho = -1e8`` and a 0 in their mask; earlier pruning
        is kept (masks only lose ones).
        """
        masks = self.get_pruning_masks(threshold)
        total = pruned = 0
        with torch.no_grad():
            for name, mu, rho in self._gaussian_pairs():
                keep = masks[name].bool()
                mu.masked_fill_(~keep, 0.0)
                rho.masked_fill_(~keep, -1e8)
                mask_name = name[: -len("_mu")] + "_mask"
                self.register_buffer(mask_name, keep.to(mu.dtype))
                total += keep.numel()
                pruned += int((~keep).sum())
        return pruned / total if total else 0.0

    def sample_weights(
        self, generator: torch.Generator | None = None, *, seed: int | None = DEFAULT_SEED
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One draw ``(weight, bias)`` from the posterior (differentiable in mu and rho).

        Args:
            generator: source of the noise (its state advances: calls differ).
            seed: seed of the noise when no ``generator`` is given (default 0: identical calls
                give the same draw); ``None``: torch's global random state.
        """
        generator = check_generator(generator, seed, f"{type(self).__name__}.sample_weights")
        w_mu, w_sigma, b_mu, b_sigma = self._moments()
        weight = w_mu + w_sigma * gaussian_noise(self.w_mu.shape, self.w_mu, generator)
        bias = b_mu + b_sigma * gaussian_noise(self.b_mu.shape, self.b_mu, generator)
        return weight, bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w_mu, w_sigma, b_mu, b_sigma = self._moments()
        if not self.sampling:
            return self._weight_op(x, w_mu, b_mu)
        if self.force_sample or self.sample_generator is not None:
            # the ensemble's generator of this pass, else (fresh noise) torch's global state
            return self._weight_op(x, *self.sample_weights(self.sample_generator, seed=None))
        mean = self._weight_op(x, w_mu, b_mu)
        var = self._weight_op(x.pow(2), w_sigma.pow(2), b_sigma.pow(2))
        return mean + torch.randn_like(mean) * torch.sqrt(var + _VAR_FLOOR)
