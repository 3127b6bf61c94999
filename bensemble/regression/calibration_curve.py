r"""The regression calibration curve, its miscalibration area, and PIT values.

For a grid of expected proportions ``p_j = j / (L - 1)``, ``j = 0..L-1``, the observed proportion
is the fraction of labels inside the predictive's central ``p_j`` interval
``[Q((1 - p_j) / 2), Q((1 + p_j) / 2)]`` (``kind="interval"``, Uncertainty Toolbox's
``prop_type="interval"``), or below its ``p_j`` quantile, ``y <= Q(p_j)`` (``kind="quantile"``).
A calibrated predictive has observed = expected; the **miscalibration area** is the area between
the curve (linear between grid points) and the diagonal, computed exactly (where a segment
crosses the diagonal, two triangles).

No interval is ever built: with ``F(y) = P(X <= y)`` and ``S(y) = P(X >= y)`` of each point
(:mod:`bensemble.regression._distribution`) and ``Q(p) = inf{x : F(x) >= p}``,

* ``y >= Q(a)``  iff  ``F(y) >= a``, and ``y <= Q(b)``  iff  ``S(y) > 1 - b``

(exact also for atoms, i.e. point members), so the curve is two sorted vectors and two
``searchsorted`` calls, ``O(N log N + L log N)``. At ``p = 1`` the central interval is the whole
support: every label is inside unless the predictive is all atoms (point members) and the label
lies outside ``[min, max]`` of them.

The kernel pair ``_calibration_update(members, y, levels, kind) -> {"inside": [L], "count"}``
(float64 counts, merged by addition) and ``_calibration_compute(state, levels)`` serve the
one-shot functions and streams.

**Against Uncertainty Toolbox** (``get_proportion_lists_vectorized``, ``miscalibration_area``,
``mean_absolute_calibration_error``): identical for ``kind="interval"`` on a Gaussian predictive
(``predictive="gaussian"``, or one member), with UT's grid ``linspace(0, 1, num_bins)``. UT's
``prop_type="quantile"`` counts ``y >= Q(1 - p)`` (its residuals are ``mean - y``), the mirror
image of ours (``y <= Q(p)``); the two agree in expectation for a calibrated predictive, and
exactly after reflecting the labels about the mean.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from bensemble._validation import as_float_tensor, check_option, check_positive_int
from bensemble.regression._distribution import cdf_pair
from bensemble.regression._inputs import (
    RegressionMembers,
    as_member_predictions,
    as_targets,
    check_predictive,
)

__all__ = [
    "RegressionCalibrationCurve",
    "calibration_curve_from_pit",
    "miscalibration_area",
    "pit_values",
    "regression_calibration_curve",
]

KINDS = ("interval", "quantile")
_F64 = torch.float64


@dataclass(frozen=True, eq=False)
class RegressionCalibrationCurve:
    """Expected vs observed proportions of a regression calibration curve (float64 tensors).

    Attributes:
        expected: ``[L]`` the grid ``linspace(0, 1, L)``.
        observed: ``[L]`` fraction of labels inside the central interval (or below the quantile)
            of each expected proportion.
        inside: ``[L]`` the counts behind ``observed`` (``observed = inside / n``).
        n: number of points.
        kind: ``"interval"`` or ``"quantile"``.
    """

    expected: torch.Tensor
    observed: torch.Tensor
    inside: torch.Tensor
    n: int
    kind: str

    @property
    def miscalibration_area(self) -> float:
        """Area between the curve and the diagonal (exact for the piecewise-linear curve)."""
        return _area(self.expected, self.observed)

    @property
    def mean_absolute_error(self) -> float:
        """``mean_j |observed_j - expected_j|`` (Uncertainty Toolbox's MACE)."""
        return float((self.observed - self.expected).abs().mean())

    @property
    def root_mean_squared_error(self) -> float:
        """``sqrt(mean_j (observed_j - expected_j)^2)`` (Uncertainty Toolbox's RMSCE)."""
        return float((self.observed - self.expected).square().mean().sqrt())


def _area(expected: torch.Tensor, observed: torch.Tensor) -> float:
    d = observed - expected
    dl, dr = d[:-1], d[1:]
    width = expected[1:] - expected[:-1]
    total = dl.abs() + dr.abs()
    crossing = dl * dr < 0
    same = width * total / 2.0
    split = width * (dl.square() + dr.square()) / (2.0 * total.clamp_min(torch.finfo(_F64).tiny))
    return float(torch.where(crossing, split, same).sum())


def grid(n_levels: int) -> torch.Tensor:
    return torch.linspace(0.0, 1.0, n_levels, dtype=_F64)


def _counts_inside(
    lower: torch.Tensor,
    upper: torch.Tensor,
    continuous: torch.Tensor,
    levels: torch.Tensor,
    kind: str,
) -> torch.Tensor:
    """``[L]`` float64 counts of labels inside (rule: module docstring)."""
    n = lower.shape[0]
    sorted_upper = torch.sort(upper).values
    if kind == "interval":
        a = (1.0 - levels) / 2.0
        below = torch.searchsorted(torch.sort(lower).values, a, right=False)  # F(y) < a
        above = torch.searchsorted(sorted_upper, a, right=True)  # S(y) <= 1 - b = a
    else:
        below = torch.zeros_like(levels, dtype=torch.int64)
        above = torch.searchsorted(sorted_upper, 1.0 - levels, right=True)  # S(y) <= 1 - p
    # p = 1: the whole support, [min atom, max atom] when there is no continuous part
    whole = levels >= 1.0
    above = torch.where(whole, ((upper <= 0) & ~continuous).sum(), above)
    if kind == "interval":
        below = torch.where(whole, ((lower <= 0) & ~continuous).sum(), below)
    return (n - below - above).to(_F64)


def _calibration_update(
    members: RegressionMembers, y: torch.Tensor, levels: torch.Tensor, kind: str
) -> dict[str, torch.Tensor]:
    """``{"inside": [L], "count": N}`` float64 counts for the grid ``levels``."""
    lower, upper = cdf_pair(members.means, members.variances, y)
    continuous = (members.variances > 0).any(dim=0)
    levels = levels.to(lower.device)
    return {
        "inside": _counts_inside(lower, upper, continuous, levels, kind),
        "count": torch.tensor(y.numel(), dtype=_F64),
    }


def _calibration_compute(
    state: dict[str, torch.Tensor], levels: torch.Tensor, kind: str
) -> RegressionCalibrationCurve:
    n = float(state["count"])
    if n <= 0:
        raise ValueError("regression_calibration_curve: the state must have seen a point")
    inside = state["inside"].to(_F64).cpu()
    return RegressionCalibrationCurve(levels.cpu(), inside / n, inside, int(n), kind)


def _check_curve_options(n_levels: Any, kind: Any, fn: str) -> tuple[int, str]:
    n_levels = check_positive_int(n_levels, "n_levels", fn, minimum=2)
    if n_levels > 1_000_000:
        raise ValueError(f"{fn}: `n_levels` must be at most 1000000 (got {n_levels})")
    return n_levels, check_option(kind, "kind", KINDS, fn)


def regression_calibration_curve(
    member_preds: Any,
    labels: Any,
    *,
    n_levels: int = 100,
    kind: str = "interval",
    predictive: str = "mixture",
) -> RegressionCalibrationCurve:
    """Observed vs expected proportions of labels in the predictive's intervals (module docs).

    Args:
        member_preds: ``[M, N]`` points or ``[M, N, 2]`` (mean, variance) members.
        labels: ``[N]`` real targets.
        n_levels: grid size ``L >= 2`` of expected proportions ``linspace(0, 1, L)``
            (Uncertainty Toolbox's ``num_bins``, default 100).
        kind: ``"interval"`` (central intervals) or ``"quantile"`` (one-sided, ``y <= Q(p)``).
        predictive: ``"mixture"`` or ``"gaussian"``.

    Returns:
        A :class:`RegressionCalibrationCurve` (with its ``miscalibration_area``).

    Example:
        >>> import torch
        >>> p = torch.tensor([[[0.0, 1.0]] * 4])  # N(0, 1) at four points
        >>> curve = regression_calibration_curve(p, [-2.0, -0.5, 0.5, 2.0], n_levels=3)
        >>> curve.observed.tolist()  # 50%: |z| <= 0.674; 100%: everything
        [0.0, 0.5, 1.0]
    """
    fn = "regression_calibration_curve"
    members = as_member_predictions(member_preds, fn)
    n_levels, kind = _check_curve_options(n_levels, kind, fn)
    y = as_targets(labels, members.n, fn, members.means.device)
    chosen = members.as_predictive(check_predictive(predictive, fn))
    levels = grid(n_levels)
    return _calibration_compute(_calibration_update(chosen, y, levels, kind), levels, kind)


def miscalibration_area(
    member_preds: Any,
    labels: Any,
    *,
    n_levels: int = 100,
    kind: str = "interval",
    predictive: str = "mixture",
) -> float:
    """Area between the regression calibration curve and the diagonal (0 is calibrated).

    Between 0 and 0.5; Uncertainty Toolbox's ``miscalibration_area`` for the same grid and a
    Gaussian predictive. Arguments: :func:`regression_calibration_curve`.

    Example:
        >>> import torch
        >>> p = torch.tensor([[[0.0, 1e-4]] * 4])  # far too sharp: nothing inside below 100%
        >>> round(miscalibration_area(p, [-2.0, -0.5, 0.5, 2.0], n_levels=101), 3)
        0.495
    """
    curve = regression_calibration_curve(
        member_preds, labels, n_levels=n_levels, kind=kind, predictive=predictive
    )
    return curve.miscalibration_area


def pit_values(member_preds: Any, labels: Any, *, predictive: str = "mixture") -> torch.Tensor:
    """Probability integral transform ``F_n(y_n) = P(X <= y_n)`` of every point, ``[N]``.

    Uniform on ``[0, 1]`` when the predictive is calibrated and continuous (the basis of
    quantile recalibration). For point members ``F`` is a step function and the PIT takes the
    values ``k / M`` (no randomisation).

    Args:
        member_preds: ``[M, N]`` points or ``[M, N, 2]`` (mean, variance) members.
        labels: ``[N]`` real targets.
        predictive: ``"mixture"`` or ``"gaussian"``.

    Returns:
        ``[N]`` values in ``[0, 1]``, float32 / float64 as ``member_preds``.

    Example:
        >>> import torch
        >>> pit_values(torch.tensor([[[0.0, 1.0]]]), [0.0])
        tensor([0.5000])
    """
    fn = "pit_values"
    members = as_member_predictions(member_preds, fn)
    y = as_targets(labels, members.n, fn, members.means.device)
    chosen = members.as_predictive(check_predictive(predictive, fn))
    lower, _ = cdf_pair(chosen.means, chosen.variances, y)
    return lower.to(members.out_dtype)


def calibration_curve_from_pit(
    pit: Any, *, n_levels: int = 100, kind: str = "interval"
) -> RegressionCalibrationCurve:
    """The calibration curve of continuous PIT values ``u_n = F_n(y_n)`` in ``[0, 1]``.

    For a continuous predictive the curve depends on the data only through the PIT: ``y`` lies
    in the central ``p`` interval iff ``(1 - p) / 2 <= u <= (1 + p) / 2``. Use it for PIT values
    of a recalibrated predictive (:meth:`~bensemble.regression.QuantileRecalibration.pit`).

    Args:
        pit: ``[N]`` PIT values in ``[0, 1]``.
        n_levels: grid size ``L >= 2``.
        kind: ``"interval"`` or ``"quantile"``.

    Returns:
        A :class:`RegressionCalibrationCurve`.

    Example:
        >>> calibration_curve_from_pit([0.1, 0.3, 0.7, 0.9], n_levels=3).observed.tolist()
        [0.0, 0.5, 1.0]
    """
    fn = "calibration_curve_from_pit"
    u = as_float_tensor(pit, "pit", fn, ndim=1)
    lo, hi = float(u.min()), float(u.max())
    if lo < 0.0 or hi > 1.0:
        raise ValueError(f"{fn}: `pit` must lie in [0, 1] (got values in [{lo:.4g}, {hi:.4g}])")
    n_levels, kind = _check_curve_options(n_levels, kind, fn)
    levels = grid(n_levels).to(u.device)
    continuous = torch.ones_like(u, dtype=torch.bool)
    state = {
        "inside": _counts_inside(u, 1.0 - u, continuous, levels, kind),
        "count": torch.tensor(u.numel(), dtype=_F64),
    }
    return _calibration_compute(state, levels, kind)
