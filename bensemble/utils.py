"""Small helpers kept for bensemble 0.2 compatibility.

``standard_normal_pdf`` / ``standard_normal_cdf`` (the Gaussian kernels probabilistic
backpropagation needs), ``enable_dropout`` (MC dropout), ``get_total_kl``,
``predict_with_uncertainty`` and ``prune_model`` for networks built from :mod:`bensemble.layers`
Bayesian layers.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from bensemble._seeds import DEFAULT_SEED
from bensemble._validation import (
    check_allocation,
    check_generator,
    check_positive,
    check_positive_int,
    to_tensor,
)
from bensemble.layers.base import BaseBayesianLayer

__all__ = [
    "standard_normal_pdf",
    "standard_normal_cdf",
    "enable_dropout",
    "get_total_kl",
    "predict_with_uncertainty",
    "prune_model",
]

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)

#: Every torch dropout module; ``enable_dropout`` switches them all to train mode.
DROPOUT_TYPES: tuple[type[nn.Module], ...] = (
    nn.Dropout,
    nn.Dropout1d,
    nn.Dropout2d,
    nn.Dropout3d,
    nn.AlphaDropout,
    nn.FeatureAlphaDropout,
)


def _as_real(x: Any, fn: str) -> torch.Tensor:
    if isinstance(x, torch.Tensor):  # keep the autograd graph
        t = x
    else:
        t = to_tensor(x, "x", fn)
    if not t.is_floating_point():
        t = t.to(torch.get_default_dtype())
    return t


def standard_normal_pdf(x: torch.Tensor) -> torch.Tensor:
    """Density of ``N(0, 1)``: ``phi(x) = exp(-x^2 / 2) / sqrt(2 pi)``, elementwise.

    Example:
        >>> round(float(standard_normal_pdf(torch.tensor(0.0))), 6)
        0.398942
    """
    t = _as_real(x, "standard_normal_pdf")
    return torch.exp(-0.5 * t * t - _LOG_SQRT_2PI)


def standard_normal_cdf(x: torch.Tensor) -> torch.Tensor:
    """Distribution function of ``N(0, 1)``: ``Phi(x) = erfc(-x / sqrt 2) / 2``, elementwise.

    ``erfc`` keeps the lower tail accurate where ``1 + erf`` would cancel to zero.

    Example:
        >>> float(standard_normal_cdf(torch.tensor(0.0)))
        0.5
    """
    t = _as_real(x, "standard_normal_cdf")
    return 0.5 * torch.special.erfc(-t / math.sqrt(2.0))


def _check_model(model: Any, fn: str) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise ValueError(f"{fn}: `model` must be an nn.Module (got {type(model).__name__})")
    return model


def enable_dropout(model: nn.Module) -> None:
    """Put every dropout module of ``model`` (see :data:`DROPOUT_TYPES`) in train mode.

    Other modules keep their mode, so after ``model.eval(); enable_dropout(model)`` batch norm
    uses its running statistics while dropout samples (MC dropout). The caller restores the
    modes (``model.eval()``) when done.
    """
    for module in _check_model(model, "enable_dropout").modules():
        if isinstance(module, DROPOUT_TYPES):
            module.train()


def get_total_kl(model: nn.Module) -> torch.Tensor:
    """Sum of ``kl_divergence()`` over the modules of ``model`` that define it.

    A module with a ``kl_divergence`` method is taken to account for its whole subtree, so its
    descendants are not counted again. Returns a scalar tensor (0 when there is none).
    """
    model = _check_model(model, "get_total_kl")
    param = next(model.parameters(), None)
    total = torch.zeros((), device=param.device if param is not None else None)
    covered: set[int] = set()  # ids of modules inside an already counted subtree
    for module in model.modules():  # pre-order: a parent comes before its descendants
        if id(module) in covered or not callable(getattr(module, "kl_divergence", None)):
            continue
        covered.update(id(sub) for sub in module.modules())
        kl = module.kl_divergence()
        total = total.to(kl) + kl if isinstance(kl, torch.Tensor) else total + float(kl)
    return total


def predict_with_uncertainty(
    model: nn.Module,
    x: torch.Tensor,
    num_samples: int = 100,
    *,
    generator: torch.Generator | None = None,
    seed: int | None = DEFAULT_SEED,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Monte Carlo predictive mean and standard deviation of a Bayesian network.

    The model runs in eval mode with its Bayesian layers (:class:`~bensemble.layers.
    BaseBayesianLayer`) sampling, ``num_samples`` times, without gradients. Every module's
    training flag (and the layers' ``sample_generator``) is restored afterwards, also when the
    forward pass raises.

    Args:
        model: the network, ``x -> [N, *]``.
        x: its input.
        num_samples: Monte Carlo passes (``>= 2``).
        generator: source of the weight noise (one weight sample per pass, shared by the
            batch; its state advances).
        seed: seed of the weight noise when no ``generator`` is given (default 0: identical
            calls agree); ``None``: torch's global random state and the layers' own training
            noise (bensemble 0.2 behaviour).

    Returns:
        ``(mean, std)``, each ``[N, *]``: the sample mean and the unbiased sample standard
        deviation over the passes.
    """
    fn = "predict_with_uncertainty"
    model = _check_model(model, fn)
    num_samples = check_positive_int(num_samples, "num_samples", fn, minimum=2)
    generator = check_generator(generator, seed, fn)
    modules = list(model.modules())
    flags = [(m, m.training) for m in modules]
    layers = [m for m in modules if isinstance(m, BaseBayesianLayer)]
    generators = [(m, m.sample_generator) for m in layers]
    try:
        model.eval()
        for layer in layers:
            layer.train()
            if generator is not None:
                layer.sample_generator = generator
        with torch.no_grad():
            first = model(x)
            if isinstance(first, torch.Tensor):  # the [S, N, *] stack must fit in memory
                check_allocation(
                    fn, "num_samples", num_samples, per_count=2 * first.numel(),
                    itemsize=first.element_size(),
                )  # fmt: skip
            preds = torch.stack([first, *(model(x) for _ in range(num_samples - 1))])
    finally:
        for m, flag in flags:
            m.training = flag
        for m, gen in generators:
            m.sample_generator = gen
    return preds.mean(dim=0), preds.std(dim=0, unbiased=True)


def prune_model(model: nn.Module, threshold: float = 0.83) -> float:
    """Graves' signal-to-noise pruning of every Bayesian layer of ``model``, in place.

    Each :class:`~bensemble.layers.BaseBayesianLayer` removes the weights (and biases) with
    ``|mu| / sigma <= threshold`` (see ``apply_pruning``); pruned weights are exactly 0 and no
    longer count in the KL divergence, so :func:`get_total_kl` stays finite and does not grow
    as the threshold rises. 0.83 is Graves' "safe" threshold.

    Returns:
        The pruned fraction of all Bayesian parameters (earlier pruning included), in [0, 1].

    Example:
        >>> from bensemble.layers import BayesianLinear
        >>> net = nn.Sequential(BayesianLinear(4, 8), nn.ReLU(), BayesianLinear(8, 2))
        >>> 0.0 <= prune_model(net, threshold=5.0) <= 1.0
        True
    """
    fn = "prune_model"
    model = _check_model(model, fn)
    threshold = check_positive(threshold, "threshold", fn, allow_zero=True)
    total = pruned = 0
    for module in model.modules():
        if isinstance(module, BaseBayesianLayer):
            n = sum(mu.numel() for _, mu, _ in module._gaussian_pairs())
            pruned += round(module.apply_pruning(threshold) * n)
            total += n
    return pruned / total if total else 0.0
