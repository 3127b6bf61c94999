r"""Central prediction intervals and their quality: coverage (PICP), width (MPIW), interval score.

:func:`predictive_interval` gives the central ``1 - alpha`` interval of the members' predictive,
``[Q(alpha / 2), Q(1 - alpha / 2)]`` with ``Q(p) = inf{x : F(x) >= p}``: closed form for one
Gaussian, bisection on the mixture's CDF otherwise (exact to adjacent float64 values); for point
members the members' own order statistics (``Q(p) = x_(ceil(M p))``). The three quality
measures take any interval (``lower``, ``upper``) - these, conformal ones
(:mod:`bensemble.conformal.regression`), or a peer's - and real labels:

* coverage (PICP) ``(1/N) sum_n 1{l_n <= y_n <= u_n}`` (closed interval; higher is better up
  to the nominal ``1 - alpha``);
* mean width (MPIW) ``(1/N) sum_n (u_n - l_n)``;
* the interval score (Gneiting and Raftery 2007, eq. 43), lower is better:

  .. math:: S_\alpha(l, u; y) = (u - l) + \frac{2}{\alpha}(l - y)\,1\{y < l\}
            + \frac{2}{\alpha}(y - u)\,1\{y > u\},

  a proper scoring rule for the central ``1 - alpha`` interval, i.e. for the quantiles
  ``alpha / 2`` and ``1 - alpha / 2``.

The kernel pair ``_interval_update(lower, upper, y, alpha) -> state`` (float64 sums: covered,
width, score, count) and ``_interval_compute(state, alpha)`` serve the one-shot functions and
streams alike.
"""

from __future__ import annotations

from typing import Any

import torch

from bensemble._validation import as_float_tensor, check_probability
from bensemble.regression._distribution import quantile
from bensemble.regression._inputs import as_member_predictions, as_targets, check_predictive

__all__ = [
    "interval_coverage",
    "interval_score",
    "mean_interval_width",
    "predictive_interval",
]

_F64 = torch.float64


def predictive_interval(
    member_preds: Any, alpha: float = 0.1, *, predictive: str = "mixture"
) -> tuple[torch.Tensor, torch.Tensor]:
    """The central ``1 - alpha`` interval ``[Q(alpha / 2), Q(1 - alpha / 2)]`` of every point.

    Args:
        member_preds: ``[M, N]`` points or ``[M, N, 2]`` (mean, variance) members.
        alpha: miscoverage level in ``(0, 1)``.
        predictive: ``"mixture"`` (the members' mixture; their empirical distribution for
            points) or ``"gaussian"`` (the moment-matched Gaussian, ``mean +- z sqrt(total)``).

    Returns:
        ``(lower, upper)``, each ``[N]``, float32 / float64 as ``member_preds``.

    Example:
        >>> import torch
        >>> lower, upper = predictive_interval(torch.tensor([[[0.0, 1.0]]]), alpha=0.05)
        >>> round(float(upper), 4)  # 1.96 standard deviations
        1.96
    """
    fn = "predictive_interval"
    members = as_member_predictions(member_preds, fn)
    alpha = check_probability(alpha, "alpha", fn)
    chosen = members.as_predictive(check_predictive(predictive, fn))
    lower = quantile(chosen.means, chosen.variances, alpha / 2)
    upper = quantile(chosen.means, chosen.variances, 1.0 - alpha / 2)
    return lower.to(members.out_dtype), upper.to(members.out_dtype)


def check_interval(lower: Any, upper: Any, fn: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``[N]`` finite float64 bounds with ``lower <= upper``."""
    lo = as_float_tensor(lower, "lower", fn, ndim=1)
    hi = as_float_tensor(upper, "upper", fn, ndim=1)
    if lo.shape != hi.shape:
        raise ValueError(
            f"{fn}: `upper` must have the length of `lower` ({lo.shape[0]}) (got {hi.shape[0]})"
        )
    hi = hi.to(lo.device)
    crossed = lo > hi
    if bool(crossed.any()):
        raise ValueError(
            f"{fn}: `lower` must not exceed `upper` (got {int(crossed.sum())} crossed intervals)"
        )
    return lo, hi


def _interval_update(
    lower: torch.Tensor, upper: torch.Tensor, y: torch.Tensor, alpha: float
) -> dict[str, torch.Tensor]:
    """Float64 sums of coverage, width and interval score over the points, and their count."""
    below = (lower - y).clamp_min(0.0)
    above = (y - upper).clamp_min(0.0)
    width = upper - lower
    return {
        "covered": ((lower <= y) & (y <= upper)).sum(dtype=_F64),
        "width": width.sum(dtype=_F64),
        "score": (width + (2.0 / alpha) * (below + above)).sum(dtype=_F64),
        "count": torch.tensor(y.numel(), dtype=_F64),
    }


def _interval_compute(state: dict[str, torch.Tensor]) -> dict[str, float]:
    """``{"coverage", "width", "score"}``: the means of the summed quantities."""
    count = float(state["count"])
    if count <= 0:
        raise ValueError("interval metrics: the state must have seen at least one point")
    return {
        "coverage": float(state["covered"]) / count,
        "width": float(state["width"]) / count,
        "score": float(state["score"]) / count,
    }


def _prepare(lower: Any, upper: Any, labels: Any, fn: str):
    lo, hi = check_interval(lower, upper, fn)
    y = as_targets(labels, lo.shape[0], fn, lo.device)
    return lo, hi, y


def interval_coverage(lower: Any, upper: Any, labels: Any) -> float:
    """Prediction interval coverage probability (PICP): the fraction of labels inside.

    Args:
        lower: ``[N]`` lower bounds.
        upper: ``[N]`` upper bounds (``>= lower``).
        labels: ``[N]`` real targets.

    Returns:
        ``(1/N) sum_n 1{l_n <= y_n <= u_n}`` (closed intervals), a Python float.

    Example:
        >>> interval_coverage([0.0, 0.0], [1.0, 1.0], [1.0, 2.0])
        0.5
    """
    fn = "interval_coverage"
    lo, hi, y = _prepare(lower, upper, labels, fn)
    return _interval_compute(_interval_update(lo, hi, y, 0.5))["coverage"]


def mean_interval_width(lower: Any, upper: Any) -> float:
    """Mean prediction interval width (MPIW), ``(1/N) sum_n (u_n - l_n)``.

    Args:
        lower: ``[N]`` lower bounds.
        upper: ``[N]`` upper bounds (``>= lower``).

    Returns:
        The mean width (units of ``y``), a Python float.

    Example:
        >>> mean_interval_width([0.0, 1.0], [1.0, 4.0])
        2.0
    """
    lo, hi = check_interval(lower, upper, "mean_interval_width")
    return float((hi - lo).mean(dtype=_F64))


def interval_score(lower: Any, upper: Any, labels: Any, alpha: float) -> float:
    """Mean interval score of central ``1 - alpha`` intervals (formula: module docstring).

    Lower is better (negatively oriented, as Gneiting and Raftery define it): the width, plus
    ``2 / alpha`` times the distance of every label outside its interval. Uncertainty Toolbox's
    ``interval_score`` averages this score over a grid of levels ``p = 1 - alpha`` of Gaussian
    intervals.

    Args:
        lower: ``[N]`` lower bounds.
        upper: ``[N]`` upper bounds (``>= lower``).
        labels: ``[N]`` real targets.
        alpha: the miscoverage level the intervals were built for, in ``(0, 1)``.

    Returns:
        The mean interval score (units of ``y``), a Python float.

    Example:
        >>> interval_score([0.0], [1.0], [2.0], alpha=0.5)  # width 1 + (2 / 0.5) * 1
        5.0
    """
    fn = "interval_score"
    alpha = check_probability(alpha, "alpha", fn)
    lo, hi, y = _prepare(lower, upper, labels, fn)
    return _interval_compute(_interval_update(lo, hi, y, alpha))["score"]
