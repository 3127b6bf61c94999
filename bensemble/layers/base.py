"""Base classes for layers whose forward pass is random.

:class:`StochasticLayer` is the contract between a random layer and
:class:`bensemble.core.member.StochasticMembers`:

* ``stochastic_kind`` (class attribute) names the family, e.g. ``"dropconnect"`` or
  ``"bayesian"``; ``StochasticMembers(mode=...)`` selects layers by it.
* :meth:`StochasticLayer.stochastic_active` says whether a draw can change the output at all
  (an ensemble refuses layers that are all inactive).
* The layer is random when :attr:`StochasticLayer.sampling` is true, i.e. in train mode **or**
  while its ``force_sample`` flag is set; otherwise it computes its deterministic mean.
  An ensemble sets ``force_sample`` and leaves the model in eval mode, so batch norm and other
  layers keep their inference behaviour; it restores the flag afterwards.
* While an ensemble samples, ``sample_generator`` holds the :class:`torch.Generator` of the
  current forward pass. A layer draws its noise from it (see :func:`bernoulli_mask`), which makes
  members reproducible and lets an ensemble replay the same members over many batches.
* Layers with ``supports_replicas = True`` also accept ``sample_replicas``: a list of ``k``
  generators, meaning the batch axis holds ``k`` stacked copies of the input (``[k * B, ...]``),
  copy ``i`` to be computed with the noise of generator ``i``. This lets an ensemble evaluate
  several members in one forward pass (``StochasticMembers(strategy="repeat")``).

Noise that should make a member *one coherent hypothesis* (the same function for every input)
must not depend on the batch: draw it once per forward pass with a batch-free shape (a weight
mask, a weight sample), not per row.

:class:`BaseBayesianLayer` keeps bensemble 0.2's import path for variational layers with
Gaussian posteriors ``q(w) = N(mu, softplus(rho)^2)`` stored as ``<name>_mu`` / ``<name>_rho``
parameter pairs.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bensemble._seeds import DEFAULT_SEED, check_generator
from bensemble._validation import check_allocation, check_positive, check_probability

__all__ = ["StochasticLayer", "BaseBayesianLayer", "bernoulli_mask"]


def bernoulli_mask(
    shape: tuple[int, ...] | list[int] | torch.Size,
    keep_prob: float,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
    generator: torch.Generator | None = None,
    seed: int | None = DEFAULT_SEED,
) -> torch.Tensor:
    """A 0/1 mask with ``P(1) = keep_prob``, drawn from ``generator`` when one is given.

    The draw happens on the generator's device (so a CPU generator also serves a CUDA model),
    always in float32, and the mask is then moved to ``device`` and cast to ``dtype``: the same
    generator gives the same mask for every ``dtype``, so a member of an ensemble stays the same
    function when the model is converted with ``.double()`` or ``.half()``.

    Args:
        shape: shape of the mask.
        keep_prob: probability of a one.
        device: device of the returned mask (default: the generator's device, else the CPU).
        dtype: floating dtype of the returned mask.
        generator: source of randomness (its state advances: calls differ).
        seed: seed of the mask when no ``generator`` is given (default 0: identical calls give
            the same mask); ``None``: torch's global random state.

    Returns:
        Tensor of ``shape`` holding 0.0 and 1.0.
    """
    fn = "bernoulli_mask"
    try:
        dims = tuple(shape)
    except TypeError:
        dims = None
    if dims is None or not all(
        isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in dims
    ):
        raise ValueError(f"{fn}: `shape` must be a sequence of integers >= 0 (got {shape!r})")
    keep_prob = check_probability(keep_prob, "keep_prob", fn, open_interval=False)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"{fn}: `dtype` must be a floating torch.dtype (got {dtype!r})")
    check_allocation(fn, "shape", math.prod(dims), itemsize=4 + dtype.itemsize)
    generator = check_generator(generator, seed, fn)
    return draw_mask(dims, keep_prob, device=device, dtype=dtype, generator=generator)


def draw_mask(
    shape: tuple[int, ...] | torch.Size,
    keep_prob: float,
    *,
    device: torch.device | str | None,
    dtype: torch.dtype,
    generator: torch.Generator | None,
) -> torch.Tensor:
    """:func:`bernoulli_mask` without its argument checks, for the layers' inner loops (their
    shapes come from tensors that exist, their probabilities were checked at construction)."""
    draw_device = generator.device if generator is not None else device
    mask = torch.empty(shape, device=draw_device, dtype=torch.float32)
    mask.bernoulli_(keep_prob, generator=generator)
    return mask.to(device=device if device is not None else mask.device, dtype=dtype)


class StochasticLayer(nn.Module):
    """Mixin base for layers with a random forward pass (see the module docstring).

    Subclasses set ``stochastic_kind`` and read :attr:`sampling` and :attr:`sample_generator` in
    ``forward``. They must call ``super().__init__()``.
    """

    #: Family name used by ``StochasticMembers(mode=...)``.
    stochastic_kind: ClassVar[str] = "stochastic"
    #: Whether the layer understands ``sample_replicas`` (several members in one pass).
    supports_replicas: ClassVar[bool] = False

    # Class-level defaults keep the attributes readable even on half-initialised subclasses.
    force_sample: bool = False
    sample_generator: torch.Generator | None = None
    sample_replicas: list[torch.Generator] | None = None

    def __init__(self) -> None:
        super().__init__()
        self.force_sample = False
        self.sample_generator = None
        self.sample_replicas = None

    @property
    def sampling(self) -> bool:
        """True when the forward pass draws noise: train mode or ``force_sample``."""
        return self.training or self.force_sample

    def stochastic_active(self) -> bool:
        """Whether sampling can change the output (``False``: every draw is the same function).

        An ensemble whose selected layers are all inactive is refused (``M`` identical copies);
        subclasses override this (DropConnect: ``p > 0``; Bayesian layers: some ``sigma > 0``).
        """
        return True


class BaseBayesianLayer(StochasticLayer):
    """Base for variational layers with factorised Gaussian posteriors (bensemble 0.2 path).

    Every parameter pair ``<name>_mu`` / ``<name>_rho`` describes
    ``q(w) = N(mu, sigma^2)`` with ``sigma = softplus(rho)``; the prior is ``N(0, prior_sigma^2)``.

    Args:
        prior_sigma: standard deviation of the Gaussian prior (``> 0``).
    """

    stochastic_kind: ClassVar[str] = "bayesian"

    def __init__(self, prior_sigma: float = 1.0) -> None:
        super().__init__()
        self.prior_sigma = check_positive(prior_sigma, "prior_sigma", type(self).__name__)

    def stochastic_active(self) -> bool:
        """``True`` when some posterior ``sigma = softplus(rho)`` is positive (or no pairs)."""
        pairs = self._gaussian_pairs()
        if not pairs:
            return True
        with torch.no_grad():
            return any(bool((F.softplus(rho) > 0).any()) for _, _, rho in pairs)

    def _gaussian_pairs(self) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
        pairs = []
        for name, mu in self.named_parameters(recurse=False):
            if name.endswith("_mu"):
                rho = getattr(self, name[: -len("_mu")] + "_rho", None)
                if isinstance(rho, torch.Tensor):
                    pairs.append((name, mu, rho))
        return pairs

    def kl_divergence(self) -> torch.Tensor:
        """``KL(q || p)`` summed over every ``_mu`` / ``_rho`` pair.

        Per weight: ``log(s_p / s) + (s^2 + mu^2) / (2 s_p^2) - 1/2``.
        """
        total = torch.zeros(())
        for _, mu, rho in self._gaussian_pairs():
            sigma = F.softplus(rho)
            var_ratio = (sigma.pow(2) + mu.pow(2)) / (2.0 * self.prior_sigma**2)
            kl = math.log(self.prior_sigma) - torch.log(sigma) + var_ratio - 0.5
            total = total.to(kl) + kl.sum()
        return total

    def _get_snr_dict(self) -> dict[str, torch.Tensor]:
        """Signal-to-noise ratio ``|mu| / sigma`` per ``_mu`` parameter."""
        return {name: mu.abs() / F.softplus(rho) for name, mu, rho in self._gaussian_pairs()}

    def get_pruning_masks(self, threshold: float = 0.83) -> dict[str, torch.Tensor]:
        """Float masks (1 keep, 0 prune) of the weights whose SNR exceeds ``threshold``."""
        threshold = check_positive(threshold, "threshold", "get_pruning_masks", allow_zero=True)
        return {name: (snr > threshold).float() for name, snr in self._get_snr_dict().items()}

    def apply_pruning(self, threshold: float = 0.83) -> float:
        """Zero the means and collapse the variances of low-SNR weights; returns the sparsity."""
        masks = self.get_pruning_masks(threshold)
        total = pruned = 0
        with torch.no_grad():
            for name, mu, rho in self._gaussian_pairs():
                keep = masks[name].bool()
                total += keep.numel()
                pruned += int((~keep).sum())
                mu.mul_(keep)
                rho.masked_fill_(~keep, -1e8)
        return pruned / total if total else 0.0
