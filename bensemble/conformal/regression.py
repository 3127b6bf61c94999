r"""Split conformal prediction intervals for regression members, and CQR for quantile members.

Given ``n`` calibration scores ``s_1..s_n`` and a miscoverage level ``alpha``, the threshold is
the k-th smallest score, ``k = ceil((n + 1)(1 - alpha))`` (the classification predictors' rank,
:func:`~bensemble.conformal.conformal_rank`), and under exchangeability of the calibration and
test points every interval covers with ``P(l(X) <= Y <= u(X)) >= 1 - alpha`` (marginally, over
the calibration draw and the test point). ``k > n`` (``n < 1/alpha - 1``) gives an infinite
threshold, hence intervals ``(-inf, inf)``, with a warning.

:class:`SplitConformalRegressor` (member predictions ``[M, N]`` / ``[M, N, 2]``; ``mean`` the
members' mean, ``sigma`` the predicted spread):

* ``score="absolute"``: ``s = |y - mean|``, interval ``mean +- q`` (one width everywhere);
* ``score="normalized"``: ``s = |y - mean| / sigma``, interval ``mean +- q sigma`` (Papadopoulos
  et al. 2008; Lei et al. 2018's locally weighted form) - wider where the members are less sure.
  ``sigma = sqrt(total)`` by default (``spread="total"``: aleatoric + epistemic), or the square
  root of either part; it must be ``> 0`` everywhere.

:class:`ConformalizedQuantileRegressor` - CQR (Romano, Patterson and Candes 2019) for members
that predict the ``alpha / 2`` and ``1 - alpha / 2`` quantiles, ``[M, N, 2]`` (lower, upper):
with ``lo``, ``hi`` the members' mean quantiles, ``s = max(lo - y, y - hi)`` and the interval
``[lo - q, hi + q]`` (``q`` may be negative: bands too wide shrink). With ``symmetric=False``
the two ends get their own thresholds, ``lo - q_lo`` and ``hi + q_hi`` at level ``alpha / 2``
each (Romano et al.'s asymmetric variant; coverage ``>= 1 - alpha`` by the union bound). An
interval whose ends cross after the shift is returned as the empty interval at its midpoint
(width 0; it covers nothing either way).

The thresholds are order statistics of every calibration score (no streaming form), as for the
classification sets. Coverage over 200 random splits and the widths against MAPIE and crepes:
``tests/conformal/test_regression_conformal.py``, ``benchmarks/bench_conformal_regression.py``.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from bensemble._validation import (
    as_float_tensor,
    check_bool,
    check_option,
    check_probability,
    output_dtype,
    to_tensor,
)
from bensemble.conformal._quantiles import conformal_rank, kth_smallest, warn_infinite
from bensemble.regression._inputs import RegressionMembers, as_member_predictions, as_targets

__all__ = [
    "ConformalizedQuantileRegressor",
    "REGRESSION_SCORES",
    "SPREADS",
    "SplitConformalRegressor",
]

#: The conformity scores of :class:`SplitConformalRegressor`.
REGRESSION_SCORES = ("absolute", "normalized")
#: The predicted spreads a normalized score may divide by.
SPREADS = ("total", "epistemic", "aleatoric")
_F64 = torch.float64


def _threshold(scores: torch.Tensor, alpha: float, fn: str) -> float:
    n = scores.shape[0]
    rank = conformal_rank(n, alpha)
    if rank > n:
        warn_infinite(fn, n, alpha, stacklevel=4)
        return math.inf
    return kth_smallest(scores.cpu(), rank)


def _check_calibrated(obj: Any, fn: str) -> None:
    if not hasattr(obj, "threshold_"):
        raise ValueError(
            f"{fn}: this {type(obj).__name__} is not calibrated yet; call calibrate(...) first"
        )


class SplitConformalRegressor:
    """Split conformal intervals around the members' mean (formulas: module docstring).

    Args:
        score: ``"absolute"`` or ``"normalized"``.
        alpha: miscoverage level in ``(0, 1)``.
        spread: ``"total"``, ``"epistemic"`` or ``"aleatoric"``: whose standard deviation a
            normalized score divides by (ignored by ``"absolute"``).

    Attributes (after calibrate):
        threshold_: the calibrated quantile ``q`` of the scores (a float; ``inf`` if ``k > n``).
        n_calibration_: the number of calibration points.

    Example:
        >>> import torch
        >>> members = torch.stack([torch.zeros(9), torch.ones(9)], -1)[None]  # N(0, 1) x 9
        >>> cp = SplitConformalRegressor(alpha=0.2).calibrate(members, torch.arange(1.0, 10.0))
        >>> cp.threshold_  # k = ceil(10 * 0.8) = 8: the 8th smallest |y - 0|
        8.0
        >>> cp.predict_interval(members[:, :1])
        (tensor([-8.]), tensor([8.]))
    """

    def __init__(self, score: str = "absolute", alpha: float = 0.1, *, spread: str = "total"):
        fn = "SplitConformalRegressor"
        self.score = check_option(score, "score", REGRESSION_SCORES, fn)
        self.alpha = check_probability(alpha, "alpha", fn)
        self.spread = check_option(spread, "spread", SPREADS, fn)

    def _centre_scale(self, members: RegressionMembers, fn: str):
        if self.score == "absolute":
            mean = members.means.mean(dim=0)
            return mean, torch.ones_like(mean)
        mean, total, aleatoric, epistemic = members.moments()
        variance = {"total": total, "epistemic": epistemic, "aleatoric": aleatoric}[self.spread]
        sigma = variance.sqrt()
        smallest = float(sigma.min())
        if smallest <= 0.0:
            raise ValueError(
                f"{fn}: `member_preds` must give a {self.spread} spread > 0 at every point for "
                f"score='normalized' (got a smallest standard deviation of {smallest:.4g}); use "
                "score='absolute' or another `spread`"
            )
        return mean, sigma

    def calibrate(self, member_preds: Any, labels: Any) -> SplitConformalRegressor:
        """Compute the threshold from a calibration split that played no part in training.

        Args:
            member_preds: ``[M, n]`` points or ``[M, n, 2]`` (mean, variance) members.
            labels: ``[n]`` real targets.

        Returns:
            ``self``, with ``threshold_`` and ``n_calibration_``.
        """
        fn = "SplitConformalRegressor.calibrate"
        members = as_member_predictions(member_preds, fn)
        y = as_targets(labels, members.n, fn, members.means.device)
        mean, sigma = self._centre_scale(members, fn)
        scores = (y - mean).abs() / sigma
        if not bool(torch.isfinite(scores).all()):
            raise ValueError(f"{fn}: `member_preds` must give finite scores |y - mean| / sigma")
        self.threshold_ = _threshold(scores, self.alpha, fn)
        self.n_calibration_ = int(members.n)
        return self

    def predict_interval(self, member_preds: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """``(lower, upper)`` ``[N]``: ``mean -+ q`` (absolute) or ``mean -+ q sigma``.

        Args:
            member_preds: ``[M, N]`` points or ``[M, N, 2]`` (mean, variance) members of the
                same kind as at calibration.

        Returns:
            Two ``[N]`` tensors, float32 / float64 as ``member_preds`` (``-inf`` / ``inf`` when
            the threshold is infinite).
        """
        fn = "SplitConformalRegressor.predict_interval"
        _check_calibrated(self, fn)
        members = as_member_predictions(member_preds, fn)
        mean, sigma = self._centre_scale(members, fn)
        half = self.threshold_ * sigma
        return (mean - half).to(members.out_dtype), (mean + half).to(members.out_dtype)

    def __repr__(self) -> str:
        spread = f", spread={self.spread!r}" if self.score == "normalized" else ""
        fitted = f", threshold={self.threshold_:.4g}" if hasattr(self, "threshold_") else ""
        return f"SplitConformalRegressor(score={self.score!r}, alpha={self.alpha}{spread}{fitted})"


def _member_quantiles(member_quantiles: Any, fn: str) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """The members' mean lower and upper quantiles ``[N]`` (float64) and the output dtype."""
    raw = to_tensor(member_quantiles, "member_quantiles", fn)
    if raw.ndim != 3 or raw.shape[2] != 2 or raw.shape[0] == 0 or raw.shape[1] == 0:
        raise ValueError(
            f"{fn}: `member_quantiles` must be [M, N, 2] (lower, upper) quantiles of M members "
            f"for N points, non-empty (got shape {tuple(raw.shape)})"
        )
    t = as_float_tensor(raw, "member_quantiles", fn, ndim=3)
    if float(t.abs().max()) > 1e150:
        raise ValueError(f"{fn}: `member_quantiles` must lie below 1e150 in magnitude")
    band = t.mean(dim=0)
    return band[:, 0], band[:, 1], output_dtype(raw)


class ConformalizedQuantileRegressor:
    """CQR: conformal shifts of predicted quantile bands (formulas: module docstring).

    Args:
        alpha: miscoverage level in ``(0, 1)``; the members should predict the ``alpha / 2`` and
            ``1 - alpha / 2`` quantiles (others work too: CQR corrects the band either way).
        symmetric: one threshold for both ends (``True``) or one per end (``False``).

    Attributes (after calibrate):
        threshold_: ``q`` (a float) or, with ``symmetric=False``, ``(q_lo, q_hi)``.
        n_calibration_: the number of calibration points.

    Example:
        >>> import torch
        >>> band = torch.tensor([[-1.0, 1.0]] * 9)[None]  # one member, 9 points
        >>> y = torch.tensor([-3.0, -2.0, -0.5, 0.0, 0.0, 0.5, 1.5, 2.0, 4.0])
        >>> cqr = ConformalizedQuantileRegressor(alpha=0.2).calibrate(band, y)
        >>> cqr.threshold_  # 8th smallest of max(lo - y, y - hi)
        2.0
        >>> cqr.predict_interval(band[:, :1])
        (tensor([-3.]), tensor([3.]))
    """

    def __init__(self, alpha: float = 0.1, *, symmetric: bool = True) -> None:
        fn = "ConformalizedQuantileRegressor"
        self.alpha = check_probability(alpha, "alpha", fn)
        self.symmetric = check_bool(symmetric, "symmetric", fn)

    def calibrate(self, member_quantiles: Any, labels: Any) -> ConformalizedQuantileRegressor:
        """Compute the threshold(s) on a calibration split.

        Args:
            member_quantiles: ``[M, n, 2]`` (lower, upper) quantile predictions.
            labels: ``[n]`` real targets.

        Returns:
            ``self``, with ``threshold_`` and ``n_calibration_``.
        """
        fn = "ConformalizedQuantileRegressor.calibrate"
        lo, hi, _ = _member_quantiles(member_quantiles, fn)
        y = as_targets(labels, lo.shape[0], fn, lo.device)
        if self.symmetric:
            threshold: float | tuple[float, float] = _threshold(
                torch.maximum(lo - y, y - hi), self.alpha, fn
            )
        else:
            threshold = (
                _threshold(lo - y, self.alpha / 2, fn),
                _threshold(y - hi, self.alpha / 2, fn),
            )
        self.threshold_ = threshold
        self.n_calibration_ = int(y.shape[0])
        return self

    def predict_interval(self, member_quantiles: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """``(lower, upper)`` ``[N]``: the band shifted outwards by the threshold(s).

        Args:
            member_quantiles: ``[M, N, 2]`` (lower, upper) quantile predictions.

        Returns:
            Two ``[N]`` tensors, float32 / float64 as the input; crossed ends meet at their
            midpoint.
        """
        fn = "ConformalizedQuantileRegressor.predict_interval"
        _check_calibrated(self, fn)
        lo, hi, dtype = _member_quantiles(member_quantiles, fn)
        q_lo, q_hi = (self.threshold_,) * 2 if self.symmetric else self.threshold_
        lower, upper = lo - q_lo, hi + q_hi
        crossed = lower > upper
        if bool(crossed.any()):
            middle = 0.5 * (lower + upper)
            lower = torch.where(crossed, middle, lower)
            upper = torch.where(crossed, middle, upper)
        return lower.to(dtype), upper.to(dtype)

    def __repr__(self) -> str:
        fitted = ""
        if hasattr(self, "threshold_"):
            t = self.threshold_
            shown = f"{t:.4g}" if isinstance(t, float) else f"({t[0]:.4g}, {t[1]:.4g})"
            fitted = f", threshold={shown}"
        return (
            f"ConformalizedQuantileRegressor(alpha={self.alpha}, symmetric={self.symmetric}"
            f"{fitted})"
        )
