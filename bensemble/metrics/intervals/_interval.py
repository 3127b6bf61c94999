r"""Confidence intervals from bootstrap replicates: percentile, and the L1 two-step interval.

**Percentile** (:func:`percentile_interval`): the ``(1 - level) / 2`` and ``(1 + level) / 2``
quantiles of the replicate values. Right for smooth statistics (means, AUROC): accuracy, NLL,
Brier score, coverage.

**L1 two-step** (:func:`l1_norm_interval`), for the binned calibration errors. Each of them is
the L1 norm of a vector of per-bin population quantities, ``CE = sum_j |T_j|`` (the ECE:
``T_b = E[(correct - conf) 1{conf in b}]``), estimated by ``sum_j |T^_j|`` with ``T^`` nearly
unbiased and nearly Gaussian. Near ``T_j = 0`` the map ``T -> |T|`` is not differentiable: the
estimate is biased upwards by about ``sum_j sd_j sqrt(2 / pi)`` and a percentile interval of a
bootstrap of it excludes the truth (2.8% coverage for a calibrated model at n = 2,000). With
``Z = T^ - T`` (its law estimated by the centred replicates ``Z*``):

* upper bound, the smaller of two bounds at level ``a/4`` each (Bonferroni):

  - linear: ``|T_j| - |T^_j| <= -sign(T_j) Z_j`` for every ``T_j`` (triangle inequality), so
    ``CE <= sum_j |T^_j| + q_{1 - a/4}(-sum_j s_j Z*_j)`` with ``s_j = sign(T^_j)``, whatever
    ``T`` is (the sign pattern does not matter when the coordinates are independent; their
    correlation is weak for disjoint bins). Tight for a clearly miscalibrated model;
  - debiased squared error mapped back (Cauchy-Schwarz, as Kumar et al. 2019 bound the L1
    error by the L2 one): ``CE <= sqrt(sum_j v_j) sqrt(A)``, ``A = sum_j T_j^2 / v_j``,
    ``v_j = sd_j``; ``A`` has the unbiased estimate ``sum_j (T^_j^2 - sd_j^2) / v_j`` with
    variance ``sum_j (4 T_j^2 sd_j^2 + 2 sd_j^4) / v_j^2`` (``T_j^2`` estimated by
    ``max(T^_j^2 - sd_j^2, 0)``), whose normal upper bound bounds ``A``. Tight near zero, where
    the plug-in error is mostly noise; it may fall below the plug-in value, which the upper end
    never does (it is clamped there, so the reported value is always inside);
* lower bound (Romano, Shaikh & Wolf's two-step method, Econometrica 2014): with probability
  ``1 - beta`` every ``|T_j| >= t_j = max(0, |T^_j| - k sd_j)`` (``k`` the Bonferroni normal
  quantile ``z_{1 - beta / (2J)}``), and the deficit ``sum_j (|T_j + Z_j| - |T_j|)`` is, for
  every fixed ``Z``, non-increasing in each ``|T_j|``; so its worst case over that region is at
  ``t``, and ``CE >= sum_j |T^_j| - q_{1 - a/2 + beta}(sum_j (|t_j + s_j Z*_j| - t_j))`` with
  probability at least ``1 - a/2`` (clamped at 0). A bin whose sign is not established counts
  with ``|Z_j|``, a bin far from 0 with ``s_j Z_j``: the interval is the usual normal-theory
  interval for a clearly miscalibrated model, and its lower end is 0 whenever the data do not
  reject ``T = 0`` (the model's own consistency null) at level ``a/2 - beta``.

``beta = (1 - level) / 20`` (a tenth of the lower tail, as Romano, Shaikh & Wolf recommend).
Validity rests on the bootstrap's estimate of the law of ``Z`` (a sum over samples: the usual
central-limit conditions, which a bin with a handful of points meets poorly; such a bin's
``|T_j|`` is at most its mass).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bensemble._validation import as_float_tensor

__all__ = ["Interval", "l1_norm_interval", "percentile_interval"]

_F64 = torch.float64


@dataclass(frozen=True)
class Interval:
    """A point value and its confidence interval, with what the interval is for.

    Attributes:
        point: the metric of the data themselves (unit weights): the value a metric function
            reports.
        low: lower end.
        high: upper end.
        level: nominal coverage (e.g. 0.95).
        method: ``"percentile"`` (bootstrap percentiles) or ``"l1-two-step"``
            (:func:`l1_norm_interval`).
        covers: what the interval is a confidence interval for, in one sentence.
        estimate: the value the interval is built around: ``point`` except for the EECE, whose
            per-bin terms are bias-corrected first (``estimate`` may then be below ``point``).
        n_replicates: bootstrap replicates behind the interval.
    """

    point: float
    low: float
    high: float
    level: float
    method: str
    covers: str
    estimate: float
    n_replicates: int

    def contains(self, value: float) -> bool:
        """Whether ``low <= value <= high``."""
        return self.low <= value <= self.high


def percentile_interval(values: torch.Tensor, level: float = 0.95) -> tuple[float, float] | None:
    """``(low, high)`` percentiles of the finite replicate ``values [R]``.

    Returns ``None`` when fewer than half of the replicates are finite (e.g. an AUROC of
    resamples without errors).

    Example:
        >>> low, high = percentile_interval(torch.arange(101, dtype=torch.float64), 0.9)
        >>> round(low, 6), round(high, 6)
        (5.0, 95.0)
    """
    fn = "percentile_interval"
    values = as_float_tensor(values, "values", fn, ndim=1, finite=False)
    _check_level(level, fn)
    v = values[torch.isfinite(values)].to(_F64)
    if v.numel() == 0 or 2 * v.numel() < values.numel():
        return None
    q = torch.tensor([(1.0 - level) / 2.0, (1.0 + level) / 2.0], dtype=_F64)
    low, high = torch.quantile(v, q).tolist()
    return float(low), float(high)


def l1_norm_interval(
    estimate: torch.Tensor,
    replicates: torch.Tensor,
    level: float = 0.95,
    *,
    beta: float | None = None,
) -> tuple[float, float]:
    """Confidence interval for ``sum_j |T_j|`` (the module docstring derives it).

    Args:
        estimate: ``[J]`` the estimate ``T^`` of the per-bin vector (nearly unbiased).
        replicates: ``[R, J]`` its bootstrap replicates (centred here on their mean, which
            removes the bootstrap's own bias of non-linear per-bin terms).
        level: nominal two-sided coverage.
        beta: first-step level of the lower bound (default ``(1 - level) / 20``).

    Returns:
        ``(low, high)`` with ``0 <= low <= sum |T^| <= high``; ``(sum |T^|, sum |T^|)`` when
        fewer than 2 replicates are finite or no coordinate varies.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> z = 0.01 * torch.randn(400, 8, generator=g, dtype=torch.float64)
        >>> low, high = l1_norm_interval(torch.zeros(8, dtype=torch.float64) + 0.001, z)
        >>> low, round(high, 3)  # noise only: low 0, high from the debiased squared error
        (0.0, 0.029)
    """
    fn = "l1_norm_interval"
    t_hat = as_float_tensor(estimate, "estimate", fn, ndim=1).cpu()
    reps = as_float_tensor(replicates, "replicates", fn, ndim=2, finite=False).cpu()
    if reps.shape[1] != t_hat.shape[0]:
        raise ValueError(
            f"{fn}: `replicates` must have one column per coordinate of `estimate` "
            f"({t_hat.shape[0]}) (got shape {tuple(reps.shape)})"
        )
    _check_level(level, fn)
    if beta is not None:
        ok = isinstance(beta, (int, float)) and not isinstance(beta, bool)
        if not ok or not 0.0 < float(beta) < (1.0 - level) / 2.0:
            raise ValueError(
                f"{fn}: `beta` must lie in (0, (1 - level) / 2) = (0, {(1.0 - level) / 2.0:g}) "
                f"(got {beta!r})"
            )
    reps = reps[torch.isfinite(reps).all(1)]
    norm = float(t_hat.abs().sum())
    if reps.shape[0] < 2:
        return norm, norm
    alpha = 1.0 - level
    beta = alpha / 20.0 if beta is None else beta
    z = reps - reps.mean(0)
    sd = z.std(0)
    live = sd > 0
    j = int(live.sum())
    if j == 0:
        return norm, norm
    sign = torch.where(t_hat < 0, -1.0, 1.0).to(_F64)
    k = float(torch.special.ndtri(torch.tensor(1.0 - beta / (2.0 * j), dtype=_F64)))
    t_low = (t_hat.abs() - k * sd).clamp_min(0.0)
    deficit = ((t_low + sign * z).abs() - t_low).sum(1)  # [R]
    low = max(0.0, norm - _quantile(deficit, 1.0 - alpha / 2.0 + beta))
    high = norm + _quantile(-(sign * z).sum(1), 1.0 - alpha / 4.0)
    # Cauchy-Schwarz: sum |T| <= sqrt(sum v) sqrt(sum T^2 / v), v = sd, with an upper bound
    # of sum T^2 / v from its debiased estimate sum (T^2 - sd^2) / v, whose variance is
    # sum (4 T^2 sd^2 + 2 sd^4) / v^2 (Gaussian Z), T^2 estimated by max(T^2 - sd^2, 0)
    v, th = sd[live], t_hat[live]
    squared = float(((th * th - v * v) / v).sum())
    signal = (th * th - v * v).clamp_min(0.0)
    spread = float((4.0 * signal + 2.0 * v * v).sum()) ** 0.5
    z_quarter = float(torch.special.ndtri(torch.tensor(1.0 - alpha / 4.0, dtype=_F64)))
    bound = max(squared + z_quarter * spread, 0.0)
    high = min(high, (float(v.sum()) * bound) ** 0.5)
    return min(low, norm), max(high, norm)


def _check_level(level: object, fn: str) -> None:
    ok = isinstance(level, (int, float)) and not isinstance(level, bool)
    if not ok or not 0.0 < float(level) < 1.0:
        raise ValueError(f"{fn}: `level` must lie in (0, 1) (got {level!r})")


def _quantile(values: torch.Tensor, q: float) -> float:
    return float(torch.quantile(values, torch.tensor(q, dtype=_F64)))
