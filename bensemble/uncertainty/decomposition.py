"""Splitting the uncertainty of member predictions into aleatoric and epistemic parts.

Two views of the same stack of member probabilities ``p_m(y | x)``, ``m = 1..M``:

* **Entropy view** (Depeweg et al., 2018; the practitioner's guide), in nats::

      total      = H[ mean_m p_m ]                 (entropy of the model average)
      aleatoric  = mean_m H[ p_m ]                 (expected member entropy)
      epistemic  = total - aleatoric  >= 0         (mutual information of y and the member)

* **Variance view** (the epistemic-calibration paper): the mean prediction and
  ``EU = Var_m[p_m]``, the population variance over members, per class.

For regression members with a predicted mean and variance, the law of total variance gives
``Var[y] = mean_m sigma_m^2 + Var_m[mu_m]``.

These are properties of the member distribution; calling them aleatoric / epistemic assumes
the members stand for a posterior over models.
"""

from __future__ import annotations

from typing import Any

import torch

from bensemble._validation import (
    as_binary_member_probs,
    as_float_tensor,
    as_member_probs,
    check_positive,
)

__all__ = [
    "decompose_classification_uncertainty",
    "decompose_regression_uncertainty",
    "variance_decomposition",
    "entropy",
]


def entropy(probs: torch.Tensor) -> torch.Tensor:
    """Shannon entropy in nats along the last axis, with ``0 log 0 = 0``."""
    return -torch.special.xlogy(probs, probs).sum(dim=-1)


def _member_probs(probs: Any, fn: str, from_logits: bool) -> torch.Tensor:
    """``[M, N, K]`` float64 probabilities; ``[M, N]`` is read as P(y=1) of a binary task."""
    if getattr(probs, "ndim", None) == 2:
        p1 = as_float_tensor(probs, "probs", fn, ndim=2)
        p1 = torch.sigmoid(p1) if from_logits else as_binary_member_probs(p1, "probs", fn)
        return torch.stack([1.0 - p1, p1], dim=-1)
    return as_member_probs(probs, "probs", fn, from_logits=from_logits)


def decompose_classification_uncertainty(
    probs: Any, eps: float = 1e-8, *, from_logits: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Total, aleatoric and epistemic uncertainty (nats) of member predictions.

    ``total = H[mean_m p_m]``, ``aleatoric = mean_m H[p_m]`` and
    ``epistemic = total - aleatoric`` (the mutual information, clamped at 0 against rounding).
    Computed in float64 with ``x log x = 0`` at ``x = 0`` (``torch.special.xlogy``), so no
    epsilon biases the result.

    Args:
        probs: member probabilities ``[M, N, K]`` (or ``[M, N]`` positive-class probabilities of
            a binary task); logits with ``from_logits=True``.
        eps: kept for bensemble 0.2 signature compatibility and ignored (the exact
            ``0 log 0 = 0`` convention needs no epsilon); must be ``>= 0``.
        from_logits: apply the softmax (sigmoid for ``[M, N]``) to ``probs`` first.

    Returns:
        ``(total, aleatoric, epistemic)``, each a float64 tensor ``[N]``.

    Example:
        >>> p = torch.tensor([[[.99, .01]], [[.02, .98]], [[.97, .03]]])
        >>> [round(float(u), 4) for u in decompose_classification_uncertainty(p)]
        [0.641, 0.0963, 0.5448]
    """
    fn = "decompose_classification_uncertainty"
    check_positive(eps, "eps", fn, allow_zero=True)
    p = _member_probs(probs, fn, from_logits)
    total = entropy(p.mean(dim=0))
    aleatoric = entropy(p).mean(dim=0)
    epistemic = (total - aleatoric).clamp_min(0.0)
    return total, aleatoric, epistemic


def decompose_regression_uncertainty(
    means: Any, variances: Any
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Law of total variance for members that predict a Gaussian mean and variance.

    ``aleatoric = mean_m sigma_m^2``, ``epistemic = Var_m[mu_m]`` (population variance, divisor
    ``M``) and ``total = aleatoric + epistemic``.

    Args:
        means: member means ``[M, N]`` or ``[M, N, D]``.
        variances: member variances (``>= 0``), same shape as ``means``.

    Returns:
        ``(total, aleatoric, epistemic)``, float64 tensors ``[N]`` or ``[N, D]``.
    """
    fn = "decompose_regression_uncertainty"
    mu = as_float_tensor(means, "means", fn, ndim=(2, 3))
    var = as_float_tensor(variances, "variances", fn, ndim=(2, 3))
    if mu.shape != var.shape:
        raise ValueError(
            f"{fn}: `variances` must have the shape of `means` {tuple(mu.shape)} "
            f"(got {tuple(var.shape)})"
        )
    if float(var.min()) < 0.0:
        raise ValueError(f"{fn}: `variances` must be >= 0 (got minimum {float(var.min()):.4g})")
    aleatoric = var.mean(dim=0)
    epistemic = mu.var(dim=0, unbiased=False)
    return aleatoric + epistemic, aleatoric, epistemic


def variance_decomposition(
    probs: Any, *, from_logits: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean prediction and the epistemic variance ``EU = Var_m[p_m]`` over members.

    ``mean = (1/M) sum_m p_m`` and ``EU = (1/M) sum_m (p_m - mean)^2`` (population variance),
    per class. This is the epistemic uncertainty that the expected epistemic calibration error
    compares with the squared error of the mean.

    Args:
        probs: member probabilities ``[M, N, K]``, or ``[M, N]`` positive-class probabilities
            of a binary task; logits with ``from_logits=True``.
        from_logits: apply the softmax (``[M, N, K]``) or sigmoid (``[M, N]``) first.

    Returns:
        ``(mean, eu)``: float64 tensors ``[N, K]`` (or ``[N]`` for ``[M, N]`` input).
    """
    fn = "variance_decomposition"
    if getattr(probs, "ndim", None) == 2:
        p = as_float_tensor(probs, "probs", fn, ndim=2)
        p = torch.sigmoid(p) if from_logits else as_binary_member_probs(p, "probs", fn)
    else:
        p = as_member_probs(probs, "probs", fn, from_logits=from_logits)
    return p.mean(dim=0), p.var(dim=0, unbiased=False)
