"""The regression currency and its checks: member predictions and real labels.

Member predictions are ``[M, N]`` point predictions or ``[M, N, 2]`` Gaussian members whose last
axis holds the **mean and the variance** (not the standard deviation, not a log-variance):
``member_preds[m, n] = (mu_m(x_n), sigma_m^2(x_n))``. Point members are read as Gaussian members
of variance 0 (atoms), so every kernel sees one form: float64 ``means [M, N]`` and
``variances [M, N]``.

The predictive distribution of a point ``x_n`` (``predictive=`` of the metrics):

* ``"mixture"`` (default): the members' equal-weight mixture ``(1/M) sum_m N(mu_m, sigma_m^2)``;
  for point members the empirical distribution of the ``M`` predictions.
* ``"gaussian"``: the moment-matched Gaussian ``N(mean, total)`` with ``mean = (1/M) sum_m mu_m``
  and ``total = aleatoric + epistemic`` (:func:`~bensemble.uncertainty.
  decompose_regression_uncertainty`) - what a tool that takes one mean and one standard deviation
  per point (Uncertainty Toolbox) sees.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from bensemble._validation import as_float_tensor, check_option, output_dtype, to_tensor
from bensemble.uncertainty import decompose_regression_uncertainty

__all__ = ["PREDICTIVES", "RegressionMembers", "split_member_predictions"]

#: The predictive distributions a metric may score (module docstring).
PREDICTIVES = ("mixture", "gaussian")
_F64 = torch.float64
#: Rows per chunk of the [M, chunk] kernels: temporaries stay O(M * chunk).
CHUNK = 1 << 15


@dataclass(frozen=True, eq=False)
class RegressionMembers:
    """Validated member predictions (float64, on the input's device).

    Attributes:
        means: ``[M, N]`` member means (point predictions).
        variances: ``[M, N]`` member variances ``>= 0`` (zeros for point members).
        points: whether the input was ``[M, N]`` point predictions.
        out_dtype: the floating dtype of per-point outputs (float32 / float64 as the input;
            half precision and integers give float32 / the default dtype).
    """

    means: torch.Tensor
    variances: torch.Tensor
    points: bool
    out_dtype: torch.dtype = torch.float64

    @property
    def n_members(self) -> int:
        return int(self.means.shape[0])

    @property
    def n(self) -> int:
        return int(self.means.shape[1])

    def moments(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(mean, total, aleatoric, epistemic)``, each ``[N]`` float64 (law of total variance)."""
        total, aleatoric, epistemic = decompose_regression_uncertainty(self.means, self.variances)
        return self.means.mean(dim=0), total, aleatoric, epistemic

    def as_predictive(self, predictive: str) -> RegressionMembers:
        """The members whose mixture is the chosen predictive (one Gaussian for "gaussian")."""
        if predictive == "mixture":
            return self
        mean, total, _, _ = self.moments()
        return RegressionMembers(mean[None], total[None], False, self.out_dtype)

    def reordered(self, order: torch.Tensor | None) -> RegressionMembers:
        """The members in the order ``order`` (``None``: as they are)."""
        if order is None:
            return self
        return RegressionMembers(
            self.means[order], self.variances[order], self.points, self.out_dtype
        )

    def rows(self, start: int, stop: int) -> RegressionMembers:
        """The members restricted to the points ``start:stop``."""
        return RegressionMembers(
            self.means[:, start:stop], self.variances[:, start:stop], self.points, self.out_dtype
        )


def as_member_predictions(
    member_preds: Any, fn: str, name: str = "member_preds"
) -> RegressionMembers:
    """Check ``[M, N]`` or ``[M, N, 2]`` (mean, variance) member predictions.

    Raises:
        ValueError: another rank or last axis, an empty axis, NaN / inf, a negative variance, or
            values whose squares overflow float64.
    """
    raw = to_tensor(member_preds, name, fn)
    if raw.is_complex() or raw.dtype == torch.bool:
        raise ValueError(f"{fn}: `{name}` must be a real-valued array (got dtype {raw.dtype})")
    layout = (
        "[M, N] point predictions or [M, N, 2] (mean, variance) pairs of M members for N points"
    )
    if raw.ndim not in (2, 3) or (raw.ndim == 3 and raw.shape[2] != 2):
        raise ValueError(f"{fn}: `{name}` must be {layout} (got shape {tuple(raw.shape)})")
    if raw.shape[0] == 0 or raw.shape[1] == 0:
        raise ValueError(f"{fn}: `{name}` must not be empty (got shape {tuple(raw.shape)})")
    t = as_float_tensor(raw, name, fn, ndim=(2, 3))
    if t.ndim == 2:
        means, variances, points = t, torch.zeros_like(t), True
        largest_variance = 0.0
    else:
        means, variances, points = t[..., 0], t[..., 1], False
        lowest, highest = (float(v) for v in torch.aminmax(variances))
        if lowest < 0.0:
            raise ValueError(
                f"{fn}: `{name}` must hold variances >= 0 in [..., 1] (got a minimum of "
                f"{lowest:.4g}); pass variances, not log-variances or standard deviations"
            )
        largest_variance = highest
    low, high = (float(v) for v in torch.aminmax(means))
    largest = max(-low, high)
    if largest > 1e150 or largest_variance > 1e300:
        raise ValueError(
            f"{fn}: `{name}` must hold means below 1e150 and variances below 1e300 in magnitude, "
            f"whose squares float64 holds (got a largest mean of {largest:.4g}); rescale the "
            "targets"
        )
    out = output_dtype(raw)
    return RegressionMembers(means.contiguous(), variances.contiguous(), points, out)


def as_targets(labels: Any, n: int, fn: str, device: torch.device | None = None) -> torch.Tensor:
    """Real labels ``[N]`` as float64 (finite, one per point, below 1e150 in magnitude)."""
    y = as_float_tensor(labels, "labels", fn, ndim=1)
    if y.shape[0] != n:
        raise ValueError(
            f"{fn}: `labels` must have one value per point of the predictions ({n}) "
            f"(got {y.shape[0]})"
        )
    if float(y.abs().max()) > 1e150:
        raise ValueError(
            f"{fn}: `labels` must lie below 1e150 in magnitude (got {float(y.abs().max()):.4g}); "
            "rescale the targets"
        )
    return y if device is None else y.to(device)


def check_predictive(predictive: Any, fn: str) -> str:
    return check_option(predictive, "predictive", PREDICTIVES, fn)


def require_density(members: RegressionMembers, fn: str, predictive: str) -> None:
    """A density needs every component's variance > 0."""
    lowest = float(members.variances.min())
    if lowest <= 0.0:
        hint = (
            "point members [M, N] have no density: pass (mean, variance) members [M, N, 2] or "
            "predictive='gaussian'"
            if members.points and predictive == "mixture"
            else "the predictive has an atom (a variance of 0)"
        )
        raise ValueError(
            f"{fn}: `member_preds` must give a predictive with a density, variances > 0 (got a "
            f"smallest variance of {lowest:.4g}); {hint}"
        )


def split_member_predictions(member_preds: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Member means and variances ``([M, N], [M, N])`` of regression member predictions.

    The bridge to :func:`~bensemble.uncertainty.decompose_regression_uncertainty`:
    ``decompose_regression_uncertainty(*split_member_predictions(p))`` gives the total,
    aleatoric (mean of the variances) and epistemic (variance of the means) parts.

    Args:
        member_preds: ``[M, N]`` point predictions (variances 0) or ``[M, N, 2]`` (mean,
            variance) pairs.

    Returns:
        ``(means, variances)``, float64 tensors ``[M, N]``.

    Example:
        >>> import torch
        >>> means, variances = split_member_predictions(torch.tensor([[[1.0, 0.5]], [[3.0, 0.5]]]))
        >>> means.squeeze(1).tolist(), variances.squeeze(1).tolist()
        ([1.0, 3.0], [0.5, 0.5])
    """
    members = as_member_predictions(member_preds, "split_member_predictions")
    return members.means.clone(), members.variances.clone()
