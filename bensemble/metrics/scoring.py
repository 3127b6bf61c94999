"""Proper scoring rules and accuracy for class probabilities ``probs [N, K]``.

Every function takes ``probs [N, K]`` (probabilities, or logits with ``from_logits=True``, which
applies the softmax in float64) and integer labels ``labels [N]`` (bensemble 0.2's keyword
``targets=`` still works, deprecated), as torch tensors or numpy arrays of any float dtype on any
device, and returns a Python float computed in float64. Without ``from_logits`` a matrix whose
rows do not sum to 1 is rejected (``bensemble._validation.as_probs``); a member stack
``[M, N, K]`` is rejected too (average the members first).
"""

from __future__ import annotations

from typing import Any

import torch

from bensemble._renamed import renamed_keywords
from bensemble._validation import as_labels, as_logits, as_probs, check_bool, check_positive

__all__ = ["negative_log_likelihood", "brier_score", "accuracy"]

_F64 = torch.float64


def _check_probs_targets(
    probs: Any, labels: Any, fn: str, from_logits: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Validated ``probs [N, K]`` and int64 ``labels [N]`` on the same device.

    Probabilities keep their floating dtype (the checks run in it, without a float64 copy of the
    matrix); ``from_logits=True`` returns the float64 softmax.
    """
    p = as_probs(probs, "probs", fn, from_logits=from_logits, dtype=_F64 if from_logits else None)
    y = as_labels(labels, "labels", fn, n=p.shape[0], num_classes=p.shape[1], device=p.device)
    return p, y


# Same-size integer types: for non-negative floats the bit patterns order like the values.
_INT_VIEW = {
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
    torch.float32: torch.int32,
    torch.float64: torch.int64,
}


def _top_label(probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-label confidence and prediction of validated ``probs [N, K]``.

    Same result as ``probs.max(dim=1)`` (first index on ties), computed as an ``argmax`` over the
    integer view of the values plus a gather: valid because validated probabilities are finite
    and non-negative, whose IEEE bit patterns order like the values (a row's maximum is never a
    signed zero). On the CPU this is 2-3x cheaper than ``torch.max``'s value-and-index kernel.

    Returns:
        ``(confidence [N], prediction [N] int64)``.
    """
    view = _INT_VIEW.get(probs.dtype)
    if view is None:  # pragma: no cover - as_probs only returns the dtypes above
        values, indices = probs.max(dim=1)
        return values, indices
    prediction = probs.view(view).argmax(dim=1)
    return probs.gather(1, prediction[:, None]).squeeze(1), prediction


@renamed_keywords(targets="labels")
def negative_log_likelihood(
    probs: Any, labels: Any, eps: float = 1e-8, *, from_logits: bool = False
) -> float:
    r"""Mean negative log-likelihood of the true class (bensemble 0.2 semantics).

    .. math:: \mathrm{NLL} = -\frac{1}{N}\sum_i \log(p_{i, y_i} + \varepsilon)

    A strictly proper scoring rule; lower is better. ``eps`` keeps a zero probability finite
    (``eps=0`` gives ``inf`` there); it also lets a certain, correct prediction score
    ``-log(1 + eps)``, about ``-1e-8``, as in bensemble 0.2.

    With ``from_logits=True`` the loss is the exact cross-entropy of the logits,
    ``-mean_i log_softmax(z_i)[y_i]`` in float64 (``torch.nn.functional.cross_entropy``): no
    probability is formed, so no ``eps`` is needed or applied, and a logit gap of 1000 costs
    1000 nats rather than the ``-log(eps) = 18.4`` cap of the probability form.

    Args:
        probs: ``[N, K]`` class probabilities (or logits with ``from_logits=True``).
        labels: ``[N]`` integer class labels in ``[0, K)``.
        eps: non-negative constant added inside the log of a probability (ignored with
            ``from_logits=True``).
        from_logits: ``probs`` holds logits; use the exact log-softmax.

    Returns:
        The mean NLL in nats.

    Example:
        >>> round(negative_log_likelihood([[0.5, 0.5], [0.9, 0.1]], [0, 0]), 4)
        0.3993
    """
    fn = "negative_log_likelihood"
    eps = check_positive(eps, "eps", fn, allow_zero=True)
    if check_bool(from_logits, "from_logits", fn):
        z = as_logits(probs, "probs", fn, ndim=2, min_classes=2, warn_on_simplex=True)
        y = as_labels(labels, "labels", fn, n=z.shape[0], num_classes=z.shape[1], device=z.device)
        log_p_y = torch.log_softmax(z, dim=1).gather(1, y[:, None]).squeeze(1)
        return float(-log_p_y.mean())
    p, y = _check_probs_targets(probs, labels, fn, from_logits)
    p_y = p.gather(1, y[:, None]).squeeze(1).to(_F64)
    return float(-(p_y + eps).log().mean())


@renamed_keywords(targets="labels")
def brier_score(probs: Any, labels: Any, *, from_logits: bool = False) -> float:
    r"""Multi-class Brier score: squared error summed over classes, averaged over samples.

    .. math:: \mathrm{Brier} = \frac{1}{N}\sum_i\sum_k (p_{ik} - \mathbb{1}[y_i = k])^2
              = \frac{1}{N}\sum_i \Bigl(\sum_k p_{ik}^2 - 2 p_{i,y_i} + 1\Bigr) \in [0, 2]

    On a binary task this is twice the single-probability form. A 3-D member stack
    ``[M, N, K]`` is rejected (bensemble 0.2 silently scored it).

    Args:
        probs: ``[N, K]`` class probabilities (or logits with ``from_logits=True``).
        labels: ``[N]`` integer class labels in ``[0, K)``.
        from_logits: apply the softmax over the last axis first.

    Returns:
        The Brier score; lower is better.

    Example:
        >>> round(brier_score([[0.5, 0.5], [0.9, 0.1]], [0, 0]), 4)
        0.26
    """
    fn = "brier_score"
    p, y = _check_probs_targets(probs, labels, fn, from_logits)
    p = p.to(_F64)
    per_sample = (p * p).sum(1) - 2.0 * p.gather(1, y[:, None]).squeeze(1) + 1.0
    return float(per_sample.clamp_min_(0.0).mean())


@renamed_keywords(targets="labels")
def accuracy(probs: Any, labels: Any, *, from_logits: bool = False) -> float:
    """Fraction of samples whose top-1 class (first index on ties) equals the label.

    Args:
        probs: ``[N, K]`` class probabilities (or logits with ``from_logits=True``).
        labels: ``[N]`` integer class labels in ``[0, K)``.
        from_logits: apply the softmax over the last axis first (does not change the argmax).

    Returns:
        Accuracy in ``[0, 1]``; higher is better.

    Example:
        >>> accuracy([[0.5, 0.5], [0.9, 0.1], [0.2, 0.8]], [1, 0, 1])
        0.6666666666666666
    """
    fn = "accuracy"
    p, y = _check_probs_targets(probs, labels, fn, from_logits)
    return float((_top_label(p)[1] == y).to(_F64).mean())


# ----------------------------------------------------------------------------- kernels
# Update halves (float64 sums over a validated batch) for the streaming meters; the mean is the
# sum divided by the number of samples.


def _nll_sum(p: torch.Tensor, y: torch.Tensor, eps: float, logits: bool) -> torch.Tensor:
    """Summed NLL of validated ``probs [N, K]`` (``logits=True``: float64 logits, exact
    log-softmax) and int64 ``labels [N]``."""
    if logits:
        return -torch.log_softmax(p.to(_F64), dim=1).gather(1, y[:, None]).sum()
    return -(p.gather(1, y[:, None]).to(_F64) + eps).log().sum()


def _brier_sum(p: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Summed multi-class Brier score of validated ``probs [N, K]`` and ``labels [N]``."""
    p = p.to(_F64)
    per_sample = (p * p).sum(1) - 2.0 * p.gather(1, y[:, None]).squeeze(1) + 1.0
    return per_sample.clamp_min_(0.0).sum()


def _correct_sum(p: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Number of samples whose top-1 class (first index on ties) is the label (float64)."""
    return (_top_label(p)[1] == y).to(_F64).sum()
