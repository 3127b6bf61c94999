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

Member predictions are ``[M, N, K]``; the binary positive-class form ``[M, N]`` is read only with
``binary=True`` (a 2-D array is never guessed; see
:func:`bensemble._validation.as_member_stack`). The maths runs in float64 and the per-sample
results come back in the input's floating dtype (float16 / bfloat16 inputs give float32).

These are properties of the member distribution; calling them aleatoric / epistemic assumes
the members stand for a posterior over models.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from bensemble._validation import (
    as_float_tensor,
    as_member_stack,
    as_probs,
    check_positive,
    output_dtype,
    to_tensor,
)

__all__ = [
    "decompose_classification_uncertainty",
    "decompose_regression_uncertainty",
    "variance_decomposition",
    "entropy",
]


def _entropy(p: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of validated probabilities along the last axis, ``0 log 0 = 0``."""
    return torch.special.entr(p).sum(dim=-1) + 0.0  # + 0.0 turns -0.0 into 0.0


def entropy(probs: Any) -> torch.Tensor:
    """Shannon entropy in nats along the last axis, with ``0 log 0 = 0``.

    Args:
        probs: probabilities ``[..., K]`` (any rank >= 1): finite, in ``[0, 1]``, summing to 1
            along the last axis (within ``1e-4``; ``1e-2`` for float16 / bfloat16).

    Returns:
        ``[...]`` entropies, computed in float64 and returned in the input's floating dtype
        (float32 for float16 / bfloat16 input).

    Example:
        >>> entropy(torch.tensor([[0.5, 0.5], [1.0, 0.0]]))
        tensor([0.6931, 0.0000])
    """
    fn = "entropy"
    t = to_tensor(probs, "probs", fn)
    if t.ndim < 1:
        raise ValueError(
            f"{fn}: `probs` must be at least 1-D [..., K] (got shape {tuple(t.shape)})"
        )
    p = as_probs(t, "probs", fn, ndim=t.ndim, min_classes=1)
    return _entropy(p).to(output_dtype(t))


def _members(probs: Any, fn: str, binary: bool, from_logits: bool) -> tuple[torch.Tensor, Any]:
    """Validated float64 ``[M, N, K]`` (``[M, N]`` with ``binary=True``) and the output dtype."""
    t = to_tensor(probs, "probs", fn)
    return as_member_stack(t, "probs", fn, binary=binary, from_logits=from_logits), output_dtype(t)


def decompose_classification_uncertainty(
    probs: Any, eps: float = 1e-8, *, from_logits: bool = False, binary: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Total, aleatoric and epistemic uncertainty (nats) of member predictions.

    ``total = H[mean_m p_m]``, ``aleatoric = mean_m H[p_m]`` and
    ``epistemic = total - aleatoric`` (the mutual information, clamped at 0 against rounding).
    Computed in float64 with ``x log x = 0`` at ``x = 0`` (``torch.special.xlogy``), so no
    epsilon biases the result.

    Args:
        probs: member probabilities ``[M, N, K]`` (``[M, N]`` positive-class probabilities of a
            binary task with ``binary=True``); logits with ``from_logits=True``.
        eps: kept for bensemble 0.2 signature compatibility and ignored (the exact
            ``0 log 0 = 0`` convention needs no epsilon); must be ``>= 0``.
        from_logits: apply the softmax (sigmoid with ``binary=True``) to ``probs`` first.
        binary: read a 2-D ``probs`` as ``[M, N]`` positive-class members. Without it a 2-D
            array is an error (one model's ``[N, K]`` probabilities are not member predictions).

    Returns:
        ``(total, aleatoric, epistemic)``, each ``[N]`` in the input's floating dtype (float32
        for float16 / bfloat16), computed in float64.

    Example:
        >>> p = torch.tensor([[[.99, .01]], [[.02, .98]], [[.97, .03]]])
        >>> [round(float(u), 4) for u in decompose_classification_uncertainty(p)]
        [0.641, 0.0963, 0.5448]
    """
    fn = "decompose_classification_uncertainty"
    check_positive(eps, "eps", fn, allow_zero=True)
    p, out = _members(probs, fn, binary, from_logits)
    if binary:
        p = torch.stack([1.0 - p, p], dim=-1)
    total = _entropy(p.mean(dim=0))
    aleatoric = _entropy(p).mean(dim=0)
    epistemic = (total - aleatoric).clamp_min(0.0)
    return total.to(out), aleatoric.to(out), epistemic.to(out)


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
        ``(total, aleatoric, epistemic)``, ``[N]`` or ``[N, D]``, computed in float64 and
        returned in the floating dtype of ``means`` (float32 for float16 / bfloat16).
    """
    fn = "decompose_regression_uncertainty"
    out = output_dtype(to_tensor(means, "means", fn))
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
    # two passes (mean, then mean squared deviation): the population variance, several times
    # faster than torch.var over a short member axis on the CPU
    epistemic = (mu - mu.mean(dim=0)).square().mean(dim=0)
    total = aleatoric + epistemic
    largest = float(total.max()) if total.numel() else 0.0
    if not math.isfinite(largest) or largest > torch.finfo(out).max:
        raise ValueError(
            f"{fn}: `means` and `variances` must give a total variance that fits in {out} (got "
            f"a largest total of {largest:.4g}); rescale the targets or pass float64 inputs"
        )
    return total.to(out), aleatoric.to(out), epistemic.to(out)


def variance_decomposition(
    probs: Any, *, from_logits: bool = False, binary: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean prediction and the epistemic variance ``EU = Var_m[p_m]`` over members.

    ``mean = (1/M) sum_m p_m`` and ``EU = (1/M) sum_m (p_m - mean)^2`` (population variance),
    per class. This is the epistemic uncertainty that the expected epistemic calibration error
    compares with the squared error of the mean.

    Args:
        probs: member probabilities ``[M, N, K]``, or ``[M, N]`` positive-class probabilities
            of a binary task with ``binary=True``; logits with ``from_logits=True``.
        from_logits: apply the softmax (``[M, N, K]``) or sigmoid (``binary=True``) first.
        binary: read a 2-D ``probs`` as ``[M, N]`` positive-class members (a 2-D array is
            an error without it).

    Returns:
        ``(mean, eu)``: ``[N, K]`` (or ``[N]`` with ``binary=True``), computed in float64 and
        returned in the input's floating dtype (float32 for float16 / bfloat16).
    """
    fn = "variance_decomposition"
    p, out = _members(probs, fn, binary, from_logits)
    return p.mean(dim=0).to(out), p.var(dim=0, unbiased=False).to(out)
