"""Conformal thresholds: the rank ``k = ceil((n + 1)(1 - alpha))`` and its order statistics.

The order-statistic half of split conformal classification (formula and conventions:
:mod:`bensemble.conformal.split`): the exact rank, the marginal threshold and the per-class
(Mondrian) thresholds, exact k-th smallest selection, and the warnings for calibration sets too
small for ``alpha``. :class:`~bensemble.conformal.split.SplitConformalClassifier` and the
public functions re-exported by :mod:`bensemble.conformal` are built on these.
"""

from __future__ import annotations

import math
import warnings
from fractions import Fraction
from typing import Any

import numpy as np
import torch

from bensemble._validation import (
    as_float_tensor,
    as_labels,
    check_count,
    check_positive_int,
    check_probability,
)

__all__ = [
    "class_conditional_quantiles",
    "class_quantiles",
    "conformal_quantile",
    "conformal_rank",
    "kth_smallest",
    "minimum_calibration_size",
    "warn_infinite",
    "warn_infinite_classes",
]


def conformal_rank(n: int, alpha: float) -> int:
    """The rank ``k = ceil((n + 1)(1 - alpha))`` in exact rational arithmetic.

    ``alpha`` is taken as the decimal it prints as, so ``conformal_rank(9, 0.1) == 9`` exactly.

    Args:
        n: number of calibration scores (``>= 0``).
        alpha: miscoverage level in ``(0, 1)``.

    Returns:
        ``k`` (may exceed ``n``, which means "threshold +inf").

    Example:
        >>> conformal_rank(9, 0.1), conformal_rank(2000, 0.1), conformal_rank(5, 0.1)
        (9, 1801, 6)
    """
    fn = "conformal_rank"
    n = check_positive_int(n, "n", fn, minimum=0)
    alpha = check_probability(alpha, "alpha", fn)
    return math.ceil((n + 1) * (1 - Fraction(repr(alpha))))


def minimum_calibration_size(alpha: float) -> int:
    """The smallest ``n`` with a finite threshold, ``k = ceil((n + 1)(1 - alpha)) <= n``.

    That is ``n >= 1/alpha - 1`` (exact rational arithmetic, ``alpha`` read as it prints).

    Example:
        >>> minimum_calibration_size(0.1), minimum_calibration_size(0.05)
        (9, 19)
    """
    a = Fraction(repr(check_probability(alpha, "alpha", "minimum_calibration_size")))
    return math.ceil(1 / a - 1)


def warn_infinite(fn: str, n: int, alpha: float, stacklevel: int = 3) -> None:
    warnings.warn(
        f"{fn}: {n} calibration scores are too few for alpha={alpha}: a finite threshold needs "
        f"n >= 1/alpha - 1 = {minimum_calibration_size(alpha)}, so the threshold is +inf and "
        "every prediction set is the full label set. Use more calibration data or a larger "
        "alpha.",
        UserWarning,
        stacklevel=stacklevel,
    )


def warn_infinite_classes(
    fn: str, thresholds: torch.Tensor, counts: torch.Tensor, alpha: float, stacklevel: int = 3
) -> None:
    classes = torch.isinf(thresholds).nonzero().flatten()
    if classes.numel() == 0:
        return
    listed = classes.tolist()
    shown = listed if len(listed) <= 20 else listed[:20] + ["..."]
    warnings.warn(
        f"{fn}: classes {shown} have too few calibration examples for alpha={alpha} (counts "
        f"{counts[classes].tolist()[:20]}; a finite threshold needs n_c >= 1/alpha - 1 = "
        f"{minimum_calibration_size(alpha)}); their thresholds are +inf, so these labels are "
        "in every prediction set.",
        UserWarning,
        stacklevel=stacklevel,
    )


def conformal_quantile(scores: Any, alpha: float) -> float:
    """The conformal threshold: the k-th smallest of ``scores``, ``k = ceil((n + 1)(1 - alpha))``.

    Args:
        scores: calibration scores ``[n]`` (the score of each example's true label).
        alpha: miscoverage level in ``(0, 1)``.

    Returns:
        The threshold as a float; ``inf`` when ``k > n`` (``n < 1/alpha - 1``), with a
        :class:`UserWarning`.

    Example:
        >>> conformal_quantile(torch.arange(1.0, 10.0), 0.1)  # n = 9: the maximum
        9.0
        >>> conformal_quantile(torch.arange(1.0, 6.0), 0.1)  # n = 5: k = 6 > n
        inf
    """
    fn = "conformal_quantile"
    alpha = check_probability(alpha, "alpha", fn)
    s = as_float_tensor(scores, "scores", fn, ndim=1)
    k = conformal_rank(s.shape[0], alpha)
    if k > s.shape[0]:
        warn_infinite(fn, s.shape[0], alpha)
        return math.inf
    return kth_smallest(s, k)


def class_conditional_quantiles(
    scores: Any, labels: Any, num_classes: int, alpha: float
) -> torch.Tensor:
    """Per-class conformal thresholds (Mondrian by true label).

    Args:
        scores: calibration scores ``[n]``.
        labels: true labels ``[n]`` in ``[0, num_classes)``.
        num_classes: ``K``.
        alpha: miscoverage level in ``(0, 1)``.

    Returns:
        Thresholds ``[K]`` (float64); ``inf`` for a class with ``k_c > n_c`` (few or no examples),
        with a :class:`UserWarning` naming those classes.

    Example:
        >>> scores, labels = torch.arange(1.0, 11.0), torch.tensor([0] * 9 + [1])
        >>> class_conditional_quantiles(scores, labels, 3, 0.1)
        tensor([9., inf, inf], dtype=torch.float64)
    """
    fn = "class_conditional_quantiles"
    alpha = check_probability(alpha, "alpha", fn)
    num_classes = check_count(num_classes, "num_classes", fn, per_count=4)  # counts, thresholds
    s = as_float_tensor(scores, "scores", fn, ndim=1)
    y = as_labels(labels, "labels", fn, n=s.shape[0], num_classes=num_classes, device=s.device)
    thresholds = class_quantiles(s, y, num_classes, alpha)
    warn_infinite_classes(fn, thresholds, torch.bincount(y, minlength=num_classes), alpha)
    return thresholds


def kth_smallest(s: torch.Tensor, k: int) -> float:
    """Exact k-th smallest (1-based) of a 1-D tensor, by selection rather than sorting.

    On the CPU this is numpy's introselect (:func:`numpy.partition`, on a zero-copy view), which
    measured several times faster than :func:`torch.kthvalue` there; elsewhere
    :func:`torch.kthvalue`. Both return an element of ``s`` itself, so the value is exact.
    """
    if s.device.type == "cpu":
        values = s.numpy()
        return float(np.partition(values, k - 1)[k - 1])
    return float(torch.kthvalue(s, k).values)


def class_quantiles(s: torch.Tensor, y: torch.Tensor, k: int, alpha: float) -> torch.Tensor:
    """Vectorised per-class order statistics: sort by score, then stably by label."""
    counts = torch.bincount(y, minlength=k)
    order = torch.argsort(s, stable=True)
    order = order[torch.argsort(y[order], stable=True)]
    grouped = s[order]
    offsets = torch.cumsum(counts, 0) - counts
    # The rank depends on n_c only; exact integer ranks for the (few) distinct counts.
    distinct = torch.unique(counts)
    ranks = torch.tensor(
        [conformal_rank(int(c), alpha) for c in distinct.tolist()], dtype=torch.int64
    ).to(s.device)
    k_c = ranks[torch.searchsorted(distinct, counts)]
    valid = k_c <= counts
    position = (offsets + k_c - 1).clamp(0, max(s.shape[0] - 1, 0))
    inf = torch.full((k,), math.inf, dtype=torch.float64, device=s.device)
    return torch.where(valid, grouped[position], inf)
