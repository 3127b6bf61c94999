r"""Proper scoring rules of regression member predictions: NLL, CRPS, and sharpness.

Member predictions ``[M, N]`` (points) or ``[M, N, 2]`` (mean, **variance**), real labels
``y [N]``; the predictive is the members' mixture or its moment-matched Gaussian
(``predictive=``; see :mod:`bensemble.regression`). Lower is better for all three.

Every metric is a kernel pair over float64 sums - ``_<metric>_update(members, y) -> state``
(a dict of float64 tensors that merges by addition, :func:`merge_states`) and
``_<metric>_compute(state) -> float`` - under a one-shot shell (validate, update, compute), so a
stream of chunks gives the one-shot value.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from bensemble.regression._distribution import crps_values, log_density
from bensemble.regression._inputs import (
    RegressionMembers,
    as_member_predictions,
    as_targets,
    check_predictive,
    require_density,
)

__all__ = [
    "crps",
    "crps_per_sample",
    "merge_states",
    "regression_negative_log_likelihood",
    "sharpness",
]

_F64 = torch.float64


def merge_states(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Merge two states of one kernel by addition (chunks, shards, ranks)."""
    if a.keys() != b.keys():
        raise ValueError(
            f"merge_states: `b` must have the keys of `a` {sorted(a)} (got {sorted(b)})"
        )
    return {key: a[key] + b[key].to(a[key].device) for key in a}


def _sum_state(values: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"sum": values.sum(dtype=_F64), "count": torch.tensor(values.numel(), dtype=_F64)}


def _mean_compute(state: dict[str, torch.Tensor], fn: str) -> float:
    count = float(state["count"])
    if count <= 0:
        raise ValueError(f"{fn}: the state must have seen at least one point (got count 0)")
    return float(state["sum"]) / count


# ----------------------------------------------------------------------------- NLL
def _nll_update(members: RegressionMembers, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """``{"sum": sum_n -log f_n(y_n), "count": N}`` of the members' mixture (float64)."""
    return _sum_state(-log_density(members.means, members.variances, y))


def _nll_compute(state: dict[str, torch.Tensor]) -> float:
    return _mean_compute(state, "regression_negative_log_likelihood")


def regression_negative_log_likelihood(
    member_preds: Any, labels: Any, *, predictive: str = "mixture"
) -> float:
    r"""Mean negative log-likelihood (nats) of the labels under the members' predictive.

    .. math:: \mathrm{NLL} = -\frac1N \sum_n \log \frac1M \sum_m
              \mathcal N(y_n; \mu_m(x_n), \sigma_m^2(x_n))

    (a log-sum-exp over members, float64), or with ``predictive="gaussian"`` the NLL of
    ``N(mean, total variance)``. The full Gaussian density, ``0.5 log(2 pi)`` included: for one
    member it equals Uncertainty Toolbox's ``nll_gaussian(mean, sqrt(variance), y)``. Every
    variance of the predictive must be ``> 0`` (point members have no density under
    ``"mixture"``).

    Args:
        member_preds: ``[M, N, 2]`` (mean, variance) members, or ``[M, N]`` points with
            ``predictive="gaussian"`` (then the members' mean and variance).
        labels: ``[N]`` real targets.
        predictive: ``"mixture"`` or ``"gaussian"``.

    Returns:
        The mean NLL, a Python float.

    Raises:
        ValueError: bad inputs, a zero variance, or an NLL beyond float64 (a variance far too
            small for its residual).

    Example:
        >>> import torch
        >>> p = torch.tensor([[[0.0, 1.0], [0.0, 1.0]]])  # one member: N(0, 1) at two points
        >>> round(regression_negative_log_likelihood(p, torch.tensor([0.0, 0.0])), 6)
        0.918939
    """
    fn = "regression_negative_log_likelihood"
    members = as_member_predictions(member_preds, fn)
    predictive = check_predictive(predictive, fn)
    y = as_targets(labels, members.n, fn, members.means.device)
    chosen = members.as_predictive(predictive)
    require_density(chosen, fn, predictive)
    value = _nll_compute(_nll_update(chosen, y))
    if not math.isfinite(value):
        raise ValueError(
            f"{fn}: `member_preds` must give a finite log-likelihood (got {value}); a variance is "
            "too small for its residual in float64"
        )
    return value


# ----------------------------------------------------------------------------- CRPS
def _crps_update(members: RegressionMembers, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """``{"sum": sum_n CRPS_n, "count": N}`` (float64)."""
    return _sum_state(crps_values(members.means, members.variances, y))


def _crps_compute(state: dict[str, torch.Tensor]) -> float:
    return _mean_compute(state, "crps")


def crps_per_sample(member_preds: Any, labels: Any, *, predictive: str = "mixture") -> torch.Tensor:
    r"""Continuous ranked probability score of every point, ``[N]``.

    ``CRPS(F, y) = int (F(t) - 1{y <= t})^2 dt = E|X - y| - 0.5 E|X - X'|`` (``X, X'`` independent
    draws of the predictive ``F``), in the units of ``y``; lower is better.

    * One Gaussian (``M = 1`` or ``predictive="gaussian"``): ``sigma (z (2 Phi(z) - 1) +
      2 phi(z) - 1 / sqrt(pi))``, ``z = (y - mu) / sigma`` - properscoring's ``crps_gaussian``
      and Uncertainty Toolbox's ``crps_gaussian``.
    * The members' Gaussian mixture: the closed form of Grimit et al. (2006) (formula in
      :mod:`bensemble.regression._distribution`), ``O(M^2)`` per point.
    * Point members ``[M, N]``: the energy form of their empirical distribution,
      ``(1/M) sum_m |x_m - y| - 1/(2 M^2) sum_{m, m'} |x_m - x_m'|`` (``O(M log M)`` per point) -
      properscoring's ``crps_ensemble`` (the plain estimator, not the "fair" one with
      ``M (M - 1)`` in the second denominator).

    Args:
        member_preds: ``[M, N]`` points or ``[M, N, 2]`` (mean, variance) members.
        labels: ``[N]`` real targets.
        predictive: ``"mixture"`` or ``"gaussian"`` (the moment-matched Gaussian).

    Returns:
        ``[N]`` CRPS values (``>= 0``), float32 / float64 as ``member_preds``.

    Example:
        >>> import torch
        >>> members = torch.tensor([[0.0], [1.0]])  # two point members at one point
        >>> crps_per_sample(members, torch.tensor([0.0]))  # 0.5 - (1 / 8) * 2 * 1
        tensor([0.2500])
    """
    fn = "crps_per_sample"
    members = as_member_predictions(member_preds, fn)
    predictive = check_predictive(predictive, fn)
    y = as_targets(labels, members.n, fn, members.means.device)
    chosen = members.as_predictive(predictive)
    values = crps_values(chosen.means, chosen.variances, y).clamp_min(0.0)
    return values.to(members.out_dtype)


def crps(member_preds: Any, labels: Any, *, predictive: str = "mixture") -> float:
    """Mean continuous ranked probability score (formulas: :func:`crps_per_sample`).

    Args:
        member_preds: ``[M, N]`` points or ``[M, N, 2]`` (mean, variance) members.
        labels: ``[N]`` real targets.
        predictive: ``"mixture"`` or ``"gaussian"``.

    Returns:
        The mean CRPS (units of ``y``; lower is better), a Python float.

    Example:
        >>> import torch
        >>> p = torch.tensor([[[0.0, 1.0]]])  # N(0, 1) at one point
        >>> round(crps(p, torch.tensor([0.0])), 6)  # (sqrt(2) - 1) / sqrt(pi)
        0.233695
    """
    fn = "crps"
    members = as_member_predictions(member_preds, fn)
    predictive = check_predictive(predictive, fn)
    y = as_targets(labels, members.n, fn, members.means.device)
    return max(0.0, _crps_compute(_crps_update(members.as_predictive(predictive), y)))


# ----------------------------------------------------------------------------- sharpness
def _sharpness_update(members: RegressionMembers) -> dict[str, torch.Tensor]:
    """``{"sum": sum_n total variance_n, "count": N}`` (float64)."""
    _, total, _, _ = members.moments()
    return _sum_state(total)


def _sharpness_compute(state: dict[str, torch.Tensor]) -> float:
    return math.sqrt(max(0.0, _mean_compute(state, "sharpness")))


def sharpness(member_preds: Any) -> float:
    r"""Root mean predictive variance, ``sqrt((1/N) sum_n Var[Y | x_n])``; lower is sharper.

    ``Var[Y | x] = mean_m sigma_m^2 + Var_m mu_m`` (aleatoric + epistemic, the law of total
    variance; :func:`~bensemble.uncertainty.decompose_regression_uncertainty`); for point members
    the members' variance. Uncertainty Toolbox's ``sharpness(y_std)`` is the same number for
    ``y_std = sqrt(total variance)``. Sharpness says nothing about calibration: read it beside the
    calibration curve (Gneiting et al. 2007, "maximise sharpness subject to calibration").

    Args:
        member_preds: ``[M, N]`` points or ``[M, N, 2]`` (mean, variance) members.

    Returns:
        The sharpness (units of ``y``), a Python float.

    Example:
        >>> import torch
        >>> sharpness(torch.tensor([[[0.0, 3.0]], [[2.0, 3.0]]]))  # sqrt(3 + 1)
        2.0
    """
    members = as_member_predictions(member_preds, "sharpness")
    return _sharpness_compute(_sharpness_update(members))
