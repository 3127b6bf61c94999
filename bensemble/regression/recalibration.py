r"""Post-hoc recalibration of regression members: variance scaling and quantile recalibration.

Both are fitted on a calibration split that played no part in training, and both have the
calibrators' surface (:mod:`bensemble.calibration`): an ``nn.Module`` with ``fit(...) -> self``,
``transform`` (no gradients; tensors or numpy arrays in), fitted values ending in ``_``, a
validated ``state_dict`` / ``load_state_dict``, and a ``repr`` with the fitted values.

* :class:`VarianceScaling` - one factor ``s > 0`` that scales the whole predictive about its mean:
  every member's mean moves to ``mean + sqrt(s) (mu_m - mean)`` and its variance to
  ``s sigma_m^2``, so the total variance (aleatoric and epistemic alike) is multiplied by ``s``
  and the predictive's shape is kept. ``s`` minimises the calibration split's NLL: in closed form,
  ``s = mean_n (y_n - mean_n)^2 / total_n``, for the Gaussian predictive; by a bounded
  one-dimensional search on ``log s`` for the mixture (Levi et al. 2022's sigma-scaling, for
  ensembles).
* :class:`QuantileRecalibration` - Kuleshov, Fenner and Ermon (2018): the PIT values
  ``u_n = F_n(y_n)`` of the calibration split and their empirical CDF ``P(u) = #{u_j <= u} / N``
  give the isotonic (non-decreasing) least-squares map ``R`` of ``u_n`` onto ``P(u_n)`` (scikit-
  learn's ``isotonic_regression``, ties pooled), linear between its steps and pinned at ``R(0) = 0``
  and ``R(1) = 1`` (also where PIT values of exactly 0 or 1 occur, so that every level in
  ``(0, 1)`` maps inside the predictive's support). The recalibrated predictive has CDF
  ``R(F(y))`` and quantiles ``Q(R^{-1}(p))`` (``R^{-1}(p) = inf{u : R(u) >= p}``).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
from torch import nn

from bensemble._validation import (
    as_float_tensor,
    check_option,
    check_positive_int,
    check_probability,
)
from bensemble.regression._distribution import cdf_pair, log_density, quantiles
from bensemble.regression._inputs import (
    PREDICTIVES,
    as_member_predictions,
    as_targets,
    require_density,
)
from bensemble.regression._isotonic import interpolate, inverse, isotonic_knots

__all__ = ["QuantileRecalibration", "VarianceScaling"]

_F64 = torch.float64
DEFAULT_SCALE_BOUNDS = (1e-4, 1e4)


def _check_bounds(bounds: Any, fn: str) -> tuple[float, float]:
    ok = isinstance(bounds, (tuple, list)) and len(bounds) == 2
    lo, hi = (float(b) for b in bounds) if ok else (math.nan, math.nan)
    if not (ok and 0 < lo < hi < math.inf):
        raise ValueError(f"{fn}: `bounds` must be (low, high) with 0 < low < high (got {bounds!r})")
    return lo, hi


def _scaled_nll(mean: torch.Tensor, means, variances, y: torch.Tensor, log_s: float) -> float:
    """Mean NLL of the mixture scaled by ``s = exp(log_s)`` about ``mean``."""
    root = math.exp(0.5 * log_s)
    centred = mean[None] + root * (means - mean[None])
    return float(-log_density(centred, variances * math.exp(log_s), y).mean())


class VarianceScaling(nn.Module):
    """One factor ``s`` on the predictive's variance, fitted by NLL (module docstring).

    Unfitted, ``s = 1`` (the identity map).

    Args:
        predictive: the NLL that is minimised: ``"mixture"`` (the members' mixture; needs
            variances > 0) or ``"gaussian"`` (the moment-matched Gaussian; closed form).
        bounds: admissible ``(s_min, s_max)``; an optimum outside is clamped with a warning.

    Attributes (after fit):
        scale_: ``s``, the variance factor (a float; ``sqrt(s)`` scales standard deviations).
        nll_: the calibration split's mean NLL at ``s``.
        converged_: whether the optimum lies strictly inside ``bounds``.

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> y = 3.0 * torch.randn(5000, generator=g, dtype=torch.float64)  # sd 3, predicted 1
        >>> members = torch.stack([torch.zeros(5000), torch.ones(5000)], -1)[None].double()
        >>> abs(VarianceScaling().fit(members, y).scale_ - 9.0) < 0.5  # 3^2
        True
    """

    def __init__(
        self,
        predictive: str = "mixture",
        *,
        bounds: tuple[float, float] = DEFAULT_SCALE_BOUNDS,
    ) -> None:
        super().__init__()
        fn = "VarianceScaling"
        self.predictive = check_option(predictive, "predictive", PREDICTIVES, fn)
        self.bounds = _check_bounds(bounds, fn)
        self.register_buffer("log_scale", torch.zeros((), dtype=_F64))

    @property
    def scale_(self) -> float:
        return float(self.log_scale.exp())

    def fit(self, member_preds: Any, labels: Any) -> VarianceScaling:
        """Fit ``s`` on a calibration split.

        Args:
            member_preds: ``[M, N, 2]`` (mean, variance) members, or ``[M, N]`` points with
                ``predictive="gaussian"``.
            labels: ``[N]`` real targets.

        Returns:
            ``self``, with ``scale_``, ``nll_`` and ``converged_``.
        """
        fn = "VarianceScaling.fit"
        members = as_member_predictions(member_preds, fn)
        y = as_targets(labels, members.n, fn, members.means.device)
        chosen = members.as_predictive(self.predictive)
        require_density(chosen, fn, self.predictive)
        lo, hi = (math.log(b) for b in self.bounds)
        mean, _, _, _ = members.moments()
        if chosen.n_members == 1:  # one Gaussian: the NLL optimum is closed-form
            z2 = (y - chosen.means[0]).square() / chosen.variances[0]
            log_s = math.log(max(float(z2.mean()), 1e-300))
        else:
            log_s = self._search(mean, chosen.means, chosen.variances, y, lo, hi)
        clamped = min(max(log_s, lo), hi)
        converged = lo < log_s < hi
        if not converged:
            warnings.warn(
                f"{fn}: the NLL optimum s = {math.exp(log_s):.4g} lies at or beyond `bounds` "
                f"{self.bounds}; clamped",
                RuntimeWarning,
                stacklevel=2,
            )
        nll = _scaled_nll(mean, chosen.means, chosen.variances, y, clamped)
        with torch.no_grad():
            self.log_scale.fill_(clamped)
        self.nll_ = nll
        self.converged_ = converged
        return self

    @staticmethod
    def _search(mean, means, variances, y, lo: float, hi: float) -> float:
        """Grid over ``log s`` then a bounded Brent search around the best grid point."""
        from scipy.optimize import minimize_scalar

        def objective(t: float) -> float:
            return _scaled_nll(mean, means, variances, y, t)

        grid = torch.linspace(lo, hi, 41, dtype=_F64).tolist()
        values = [objective(t) for t in grid]
        best = min(range(len(grid)), key=values.__getitem__)
        if best in (0, len(grid) - 1):
            return grid[best] + (-1.0 if best == 0 else 1.0)  # outside: reported as clamped
        result = minimize_scalar(
            objective,
            bounds=(grid[best - 1], grid[best + 1]),
            method="bounded",
            options={"xatol": 1e-10},
        )
        return float(result.x)

    def transform(self, member_preds: Any) -> torch.Tensor:
        """The members with the whole predictive scaled by ``s`` about its mean.

        Args:
            member_preds: ``[M, N]`` points or ``[M, N, 2]`` (mean, variance) members.

        Returns:
            The same shape: means ``mean + sqrt(s) (mu_m - mean)``, variances ``s sigma_m^2``;
            float32 / float64 as the input, no gradients.
        """
        fn = "VarianceScaling.transform"
        members = as_member_predictions(member_preds, fn)
        s = float(self.log_scale.exp())
        mean = members.means.mean(dim=0, keepdim=True)
        means = mean + math.sqrt(s) * (members.means - mean)
        if members.points:
            return means.to(members.out_dtype)
        return torch.stack([means, members.variances * s], dim=-1).to(members.out_dtype)

    def forward(self, member_preds: Any) -> torch.Tensor:
        """:meth:`transform`."""
        return self.transform(member_preds)

    def extra_repr(self) -> str:
        return f"predictive={self.predictive!r}, scale={self.scale_:.4g}"

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # noqa: ANN001
        key = prefix + "log_scale"
        if key in state_dict:
            value = state_dict[key]
            ok = isinstance(value, torch.Tensor) and value.numel() == 1
            if not ok or not math.isfinite(float(value.reshape(()))):
                raise ValueError(
                    f"VarianceScaling.load_state_dict: `{key}` must be one finite number "
                    f"(got {value!r:.60})"
                )
            state_dict[key] = value.reshape(()).to(_F64)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


class QuantileRecalibration(nn.Module):
    """Kuleshov et al. (2018) isotonic recalibration of the predictive's CDF (module docstring).

    Args:
        predictive: the CDF recalibrated: ``"mixture"`` (the members' mixture; for point members
            their empirical CDF, whose PIT takes only the values ``k / M``) or ``"gaussian"``.
        n_quantiles: the number of quantile levels ``(k - 0.5) / Q`` that :meth:`transform`
            returns as point members.

    Attributes (after fit):
        knots_x_, knots_y_: float64 numpy copies of the map's knots (``R(knots_x_) =
            knots_y_``, from ``(0, 0)`` to ``(1, 1)``).

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> y = 3.0 * torch.randn(4000, generator=g, dtype=torch.float64)  # sd 3, predicted 1
        >>> members = torch.stack([torch.zeros(4000), torch.ones(4000)], -1)[None].double()
        >>> cal = QuantileRecalibration().fit(members, y)
        >>> lower, upper = cal.predictive_interval(members[:, :1], alpha=0.1)
        >>> round(float(upper), 1)  # about 1.645 * 3
        4.9
    """

    def __init__(self, predictive: str = "mixture", *, n_quantiles: int = 99) -> None:
        super().__init__()
        fn = "QuantileRecalibration"
        self.predictive = check_option(predictive, "predictive", PREDICTIVES, fn)
        self.n_quantiles = check_positive_int(n_quantiles, "n_quantiles", fn)
        self.register_buffer("knots_x", torch.zeros(0, dtype=_F64))
        self.register_buffer("knots_y", torch.zeros(0, dtype=_F64))

    def _require_fit(self, fn: str) -> None:
        if self.knots_x.numel() == 0:
            raise ValueError(f"{fn}: this QuantileRecalibration is not fitted yet; call fit first")

    @property
    def knots_x_(self) -> Any:
        self._require_fit("QuantileRecalibration.knots_x_")
        return self.knots_x.detach().cpu().numpy().copy()

    @property
    def knots_y_(self) -> Any:
        self._require_fit("QuantileRecalibration.knots_y_")
        return self.knots_y.detach().cpu().numpy().copy()

    def _pit(self, member_preds: Any, labels: Any, fn: str) -> torch.Tensor:
        members = as_member_predictions(member_preds, fn)
        y = as_targets(labels, members.n, fn, members.means.device)
        chosen = members.as_predictive(self.predictive)
        return cdf_pair(chosen.means, chosen.variances, y)[0].cpu()

    def fit(self, member_preds: Any, labels: Any) -> QuantileRecalibration:
        """Fit the map ``R`` on a calibration split's PIT values.

        Args:
            member_preds: ``[M, N]`` points or ``[M, N, 2]`` (mean, variance) members.
            labels: ``[N]`` real targets.

        Returns:
            ``self``.
        """
        xs, ys = isotonic_knots(self._pit(member_preds, labels, "QuantileRecalibration.fit"))
        self.knots_x, self.knots_y = xs.to(self.knots_x.device), ys.to(self.knots_y.device)
        return self

    def calibration_map(self, levels: Any) -> torch.Tensor:
        """``R(u)`` for probabilities ``u`` in ``[0, 1]`` (any shape; float64 out)."""
        fn = "QuantileRecalibration.calibration_map"
        self._require_fit(fn)
        u = as_float_tensor(levels, "levels", fn, allow_empty=True)
        if u.numel() and (float(u.min()) < 0.0 or float(u.max()) > 1.0):
            raise ValueError(f"{fn}: `levels` must lie in [0, 1] (got values outside)")
        xs, ys = self.knots_x.cpu(), self.knots_y.cpu()
        return interpolate(xs, ys, u.reshape(-1).cpu()).reshape(u.shape)

    def pit(self, member_preds: Any, labels: Any) -> torch.Tensor:
        """Recalibrated PIT values ``R(F_n(y_n))`` ``[N]`` (float64), e.g. for
        :func:`~bensemble.regression.calibration_curve_from_pit` on a test split."""
        fn = "QuantileRecalibration.pit"
        self._require_fit(fn)
        u = self._pit(member_preds, labels, fn)
        return interpolate(self.knots_x.cpu(), self.knots_y.cpu(), u)

    def _quantiles(self, member_preds: Any, levels: list[float], fn: str):
        self._require_fit(fn)
        members = as_member_predictions(member_preds, fn)
        chosen = members.as_predictive(self.predictive)
        raw = torch.tensor(levels, dtype=_F64)
        inner = inverse(self.knots_x.cpu(), self.knots_y.cpu(), raw)
        tiny = torch.finfo(_F64).eps
        inner = inner.clamp(tiny, 1.0 - tiny)
        return quantiles(chosen.means, chosen.variances, inner), members.out_dtype

    def predictive_interval(
        self, member_preds: Any, alpha: float = 0.1
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The recalibrated central ``1 - alpha`` interval ``[Q'(alpha/2), Q'(1 - alpha/2)]``.

        Args:
            member_preds: ``[M, N]`` points or ``[M, N, 2]`` (mean, variance) members.
            alpha: miscoverage level in ``(0, 1)``.

        Returns:
            ``(lower, upper)``, each ``[N]``, float32 / float64 as ``member_preds``.
        """
        fn = "QuantileRecalibration.predictive_interval"
        alpha = check_probability(alpha, "alpha", fn)
        q, dtype = self._quantiles(member_preds, [alpha / 2, 1.0 - alpha / 2], fn)
        return q[0].to(dtype), q[1].to(dtype)

    def transform(self, member_preds: Any) -> torch.Tensor:
        """The recalibrated predictive as ``Q`` point members: its quantiles at ``(k - 0.5) / Q``.

        Args:
            member_preds: ``[M, N]`` points or ``[M, N, 2]`` (mean, variance) members.

        Returns:
            ``[Q, N]`` point predictions (``Q = n_quantiles``), the currency every regression
            metric takes (an approximation of the recalibrated CDF with ``Q`` atoms).
        """
        fn = "QuantileRecalibration.transform"
        levels = [(k + 0.5) / self.n_quantiles for k in range(self.n_quantiles)]
        q, dtype = self._quantiles(member_preds, levels, fn)
        return q.to(dtype)

    def forward(self, member_preds: Any) -> torch.Tensor:
        """:meth:`transform`."""
        return self.transform(member_preds)

    def extra_repr(self) -> str:
        fitted = f", knots={self.knots_x.numel()}" if self.knots_x.numel() else ", unfitted"
        return f"predictive={self.predictive!r}, n_quantiles={self.n_quantiles}{fitted}"

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # noqa: ANN001
        fn = "QuantileRecalibration.load_state_dict"
        kx, ky = prefix + "knots_x", prefix + "knots_y"
        if kx in state_dict and ky in state_dict:
            xs, ys = state_dict[kx], state_dict[ky]
            ok = (
                isinstance(xs, torch.Tensor)
                and isinstance(ys, torch.Tensor)
                and xs.ndim == 1
                and xs.shape == ys.shape
            )
            if ok and xs.numel():
                x64, y64 = xs.to(_F64), ys.to(_F64)
                ok = bool(
                    torch.isfinite(x64).all()
                    and torch.isfinite(y64).all()
                    and (x64[1:] > x64[:-1]).all()
                    and (y64[1:] >= y64[:-1]).all()
                    and x64[0] == 0
                    and y64[0] == 0
                    and x64[-1] == 1
                    and y64[-1] == 1
                )
            if not ok:
                raise ValueError(
                    f"{fn}: `{kx}` and `{ky}` must be equal-length 1-D knots of a non-decreasing "
                    "map from (0, 0) to (1, 1), x strictly increasing"
                )
            self.knots_x = torch.empty_like(xs, dtype=_F64)
            self.knots_y = torch.empty_like(ys, dtype=_F64)
            state_dict[kx], state_dict[ky] = xs.to(_F64), ys.to(_F64)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
