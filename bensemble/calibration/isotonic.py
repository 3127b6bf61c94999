"""Isotonic calibration (Zadrozny and Elkan, 2002): the non-decreasing map of a probability that
best fits the calibration labels in squared error, interpolated linearly between its steps."""

from __future__ import annotations

from typing import Any

import torch

from bensemble.calibration._api import ProbabilityCalibrator, as_numpy, in_unit_interval, require
from bensemble.calibration.histogram import combine_one_vs_all, one_vs_all_columns

__all__ = ["IsotonicCalibration"]

_F64 = torch.float64


def _pool_adjacent_violators(values: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Weighted isotonic (non-decreasing) regression of a float64 vector, scikit-learn's PAVA."""
    from sklearn.isotonic import isotonic_regression

    fitted = isotonic_regression(
        values.cpu().numpy(), sample_weight=weights.cpu().numpy(), increasing=True
    )
    return torch.from_numpy(fitted).to(device=values.device, dtype=_F64)


def fit_isotonic_steps(x: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row isotonic fits of targets ``t`` on scores ``x`` (both ``[G, N]``, float64).

    Returns the thresholds ``(xs, ys)``, each ``[G, P]``: the distinct scores with their fitted
    values, interior points of constant runs dropped (as scikit-learn's ``IsotonicRegression``
    does), rows shorter than ``P`` padded by repeating their last point. One pool-adjacent-
    violators pass solves every row: row ``g``'s targets are offset by ``2 g``, so the rows'
    fitted values never pool across a row boundary (row ``g`` lies in ``[2g, 2g + 1]``).
    """
    n_groups, n = x.shape
    order = torch.sort(x, dim=1, stable=True).indices
    xs = x.gather(1, order).reshape(-1)
    ts = t.gather(1, order).reshape(-1)
    group = torch.arange(n_groups, device=x.device).repeat_interleave(n)
    first = torch.ones_like(xs, dtype=torch.bool)  # first of its (row, score) run
    first[1:] = (xs[1:] != xs[:-1]) | (group[1:] != group[:-1])
    run = torch.cumsum(first, 0) - 1
    counts = torch.bincount(run).to(_F64)
    means = torch.bincount(run, weights=ts) / counts  # ties: the weighted mean of the targets
    ux, ug = xs[first], group[first]
    offset = 2.0 * ug.to(_F64)
    uy = (_pool_adjacent_violators(means + offset, counts) - offset).clamp_(0.0, 1.0)

    m = ux.shape[0]
    keep = torch.ones(m, dtype=torch.bool, device=x.device)
    if m > 2:
        inner = slice(1, m - 1)
        same_row = (ug[inner] == ug[:-2]) & (ug[inner] == ug[2:])
        flat = (uy[inner] == uy[:-2]) & (uy[inner] == uy[2:])
        keep[inner] = ~(same_row & flat)
    kx, ky, kg = ux[keep], uy[keep], ug[keep]
    sizes = torch.bincount(kg, minlength=n_groups)
    width = max(int(sizes.max()), 2)
    starts = torch.cumsum(sizes, 0) - sizes
    pos = torch.arange(width, device=x.device)[None, :]
    index = starts[:, None] + torch.minimum(pos, (sizes - 1)[:, None])
    return kx[index], ky[index]


def interpolate_steps(xs: torch.Tensor, ys: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Piecewise-linear interpolation of the steps ``(xs, ys)`` ``[G, P]`` at ``v`` ``[G, N]``,
    ``v`` clipped to each row's ``[xs_0, xs_last]`` (scikit-learn's ``out_of_bounds="clip"``)."""
    v = torch.minimum(torch.maximum(v, xs[:, :1]), xs[:, -1:]).contiguous()
    hi = torch.searchsorted(xs.contiguous(), v, right=False).clamp_(1, xs.shape[1] - 1)
    lo = hi - 1
    x_lo, x_hi, y_lo, y_hi = xs.gather(1, lo), xs.gather(1, hi), ys.gather(1, lo), ys.gather(1, hi)
    span = x_hi - x_lo
    weight = torch.where(span > 0, (v - x_lo) / span.clamp_min(torch.finfo(_F64).tiny), 1.0)
    return y_lo + weight * (y_hi - y_lo)


class IsotonicCalibration(ProbabilityCalibrator):
    r"""Isotonic calibration: a non-decreasing, piecewise-linear map of each probability.

    For a binary task (two classes, or ``[N]`` positive-class probabilities) the map ``m`` of the
    positive-class probability minimises ``sum_i (y_i - m(p_i))^2`` over non-decreasing
    functions (pool-adjacent-violators; tied scores share one value, the mean of their labels),
    is interpolated linearly between its steps and clipped to its range outside them - exactly
    scikit-learn's ``IsotonicRegression(out_of_bounds="clip")`` (and netcal's
    ``IsotonicRegression``), which the tests match to 1e-12. The other class gets ``1 - m(p)``.
    With ``K > 2`` classes each class gets its own one-vs-all map and every row is divided by its
    sum (a row of zeros becomes uniform), as scikit-learn's ``CalibratedClassifierCV(method=
    "isotonic")`` combines them.

    Isotonic calibration is flexible (no parametric shape) and needs more calibration data than
    the scalers: with few points per class it over-fits (steps of height ``1/n``). It keeps the
    ranking within a class but can change the predicted class when ``K > 2``.

    Args:
        from_logits: Whether ``fit`` / ``transform`` receive logits instead of probabilities.

    Attributes:
        thresholds_x, thresholds_y: ``[G, P]`` float64 buffers, the steps of each map (``G = 1``
            for two classes, ``K`` otherwise; shorter rows padded with their last step).
        thresholds_x_, thresholds_y_: The same as float64 numpy arrays.

    Example:
        >>> import torch
        >>> p = torch.tensor([0.1, 0.3, 0.4, 0.6, 0.9])
        >>> y = torch.tensor([0, 1, 0, 1, 1])
        >>> cal = IsotonicCalibration().fit(p, y)
        >>> cal.transform(torch.tensor([0.0, 0.35, 0.5, 0.75, 1.0]))
        tensor([0.0000, 0.5000, 0.7500, 1.0000, 1.0000])
    """

    _name = "IsotonicCalibration"
    _state_names = ("thresholds_x", "thresholds_y")

    def __init__(self, *, from_logits: bool = False) -> None:
        super().__init__(from_logits=from_logits)

    @property
    def thresholds_x_(self) -> Any:
        self._require_fit(f"{self._name}.thresholds_x_")
        return as_numpy(self.thresholds_x)

    @property
    def thresholds_y_(self) -> Any:
        self._require_fit(f"{self._name}.thresholds_y_")
        return as_numpy(self.thresholds_y)

    def _fit_map(self, p: torch.Tensor, log_p: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
        cols, targets = one_vs_all_columns(p, y)
        xs, ys = fit_isotonic_steps(cols.T.contiguous(), targets.T.contiguous())
        return {"thresholds_x": xs, "thresholds_y": ys}

    def _apply_map(self, p: torch.Tensor, log_p: torch.Tensor) -> torch.Tensor:
        cols, _ = one_vs_all_columns(p)
        xs, ys = self._fitted("thresholds_x"), self._fitted("thresholds_y")
        q = interpolate_steps(xs, ys, cols.T)
        return combine_one_vs_all(q.T, p.shape[1])

    def _check_state(self, state: dict[str, torch.Tensor], k: int, fn: str) -> None:
        xs, ys = state["thresholds_x"], state["thresholds_y"]
        groups = 1 if k == 2 else k
        for key, t in (("thresholds_x", xs), ("thresholds_y", ys)):
            require(
                t.ndim == 2 and t.shape[0] == groups and t.shape[1] >= 1 and t.shape == xs.shape,
                fn,
                key,
                f"have shape ({groups}, P) with P >= 1, the same for both thresholds",
                lambda t=t: f"{tuple(t.shape)}",
            )
            in_unit_interval(t, fn, key)
            require(
                bool((t[:, 1:] >= t[:, :-1]).all()),
                fn,
                key,
                "be non-decreasing along each row",
                lambda: "a decreasing step",
            )
