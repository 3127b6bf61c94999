"""One temperature shared by every member of an ensemble, fitted on the averaged probabilities.

For member logits ``z_m`` (``m = 1..M``) and ``b = 1 / T`` the ensemble's probability of the label
is ``q_i(b) = mean_m softmax(b z_mi)_y``; the fit minimises

    NLL(b) = mean_i [ -log q_i(b) ]
           = mean_i [ log M - logsumexp_m (b zc_miy - logsumexp_k b zc_mik) ]

(``zc``: each member row shifted to maximum 0, rows flat to within rounding set to exact ties as
in :mod:`bensemble.calibration._newton`). Unlike single-model temperature scaling this is *not*
convex in ``b`` (its curvature is ``E_w[Var_p z] - Var_w[z_y - E_p z]`` under the members'
posterior weights ``w``), so Newton's method is not safe; instead a grid over ``log T`` (steps of
at most 0.2 over ``bounds``) finds the best basin, and Brent's root search on the gradient
refines it to rounding (scipy's bounded search on the NLL where the basin has no sign change,
at an end of ``bounds``). With one member the problem is ordinary temperature scaling and the exact
Newton solver is used.
"""

from __future__ import annotations

import math

import torch

from bensemble.calibration._newton import (
    FLAT_ULPS,
    CalibrationFitError,
    SolverSettings,
    TemperatureFit,
    _boundary,
    solve_temperature,
)

__all__: list[str] = []

_GRID_STEP = 0.2  # in log T
_GRID_MAX = 401
_XATOL = 1e-10  # Brent's absolute tolerance on log T
_EDGE = 1e-2  # an optimum within this of an end of log-bounds is "at" it


class _MemberLogits:
    """Float64 member logits ``[M, N, K]`` shifted to row maximum 0, flat rows tied."""

    def __init__(self, z64: torch.Tensor, labels: torch.Tensor, *, owned: bool, eps: float):
        row_max = z64.amax(dim=-1, keepdim=True)
        row_min = z64.amin(dim=-1, keepdim=True)
        self.zc = z64.sub_(row_max) if owned else z64 - row_max
        if eps > 0.0:
            scale = torch.maximum(row_max.abs(), row_min.abs())
            self.zc.masked_fill_((row_max - row_min) <= FLAT_ULPS * eps * scale, 0.0)
        index = labels.view(1, -1, 1).expand(self.zc.shape[0], -1, 1)
        self.zc_label = self.zc.gather(-1, index).squeeze(-1)  # [M, N]
        self.log_m = math.log(self.zc.shape[0])
        self.buf = torch.empty_like(self.zc)

    def constant(self) -> bool:
        return not bool((self.zc < 0).any())

    def nll(self, b: float) -> float:
        torch.mul(self.zc, b, out=self.buf)
        log_p_label = b * self.zc_label - torch.logsumexp(self.buf, dim=-1)  # [M, N]
        return float((self.log_m - torch.logsumexp(log_p_label, dim=0)).mean())

    def gradient(self, b: float) -> float:
        """``NLL'(b) = -mean_i sum_m w_mi (zc_miy - E_{p_mi}[zc])``, ``w`` the members'
        posterior weights ``softmax_m log p_miy``."""
        torch.mul(self.zc, b, out=self.buf)
        lse = torch.logsumexp(self.buf, dim=-1, keepdim=True)
        self.buf.sub_(lse).exp_()  # buf = p_mik
        expected = torch.einsum("mnk,mnk->mn", self.buf, self.zc)
        w = torch.softmax(b * self.zc_label - lse.squeeze(-1), dim=0)
        return float(-(w * (self.zc_label - expected)).sum(dim=0).mean())


def solve_ensemble_temperature(
    logits64: torch.Tensor, labels: torch.Tensor, settings: SolverSettings
) -> TemperatureFit:
    """Fit one ``T`` for member logits ``[M, N, K]`` (inputs already validated; ``settings``
    as for :func:`~bensemble.calibration._newton.solve_temperature`, whose exact solver serves
    one member)."""
    if logits64.shape[0] == 1:
        return solve_temperature(logits64[0], labels, settings)
    fn = settings.fn
    t_min, t_max = settings.bounds
    data = _MemberLogits(logits64, labels, owned=settings.owned, eps=settings.eps)
    where = dict(on_boundary=settings.on_boundary, data=data.nll, stacklevel=settings.stacklevel)
    if data.constant():
        return _boundary(
            f"{fn}: every member's logits are constant within every row (to within {FLAT_ULPS} "
            "units in the last place of their dtype), so the NLL does not depend on the "
            f"temperature; the uninformative end T_max = {t_max:.4g} applies.",
            temperature=t_max,
            n_iter=0,
            solver="grid",
            **where,
        )
    from scipy.optimize import brentq, minimize_scalar

    lo, hi = math.log(t_min), math.log(t_max)
    n_grid = min(_GRID_MAX, max(9, math.ceil((hi - lo) / _GRID_STEP) + 1))
    grid = [lo + (hi - lo) * i / (n_grid - 1) for i in range(n_grid)]
    values = [data.nll(math.exp(-g)) for g in grid]
    best = min(range(n_grid), key=lambda i: values[i] if math.isfinite(values[i]) else math.inf)
    if not math.isfinite(values[best]):
        raise CalibrationFitError(f"{fn}: the NLL is not finite anywhere in `bounds`.")
    a, b = grid[max(best - 1, 0)], grid[min(best + 1, n_grid - 1)]
    b_lo, b_hi = math.exp(-b), math.exp(-a)  # b = 1 / T runs the other way
    g_lo, g_hi = data.gradient(b_lo), data.gradient(b_hi)
    if 0 < best < n_grid - 1 and g_lo < 0.0 < g_hi:
        # an interior basin: the root of the gradient, to rounding (a minimiser of the NLL
        # itself can only place it to ~sqrt(eps), where the NLL stops changing)
        root, info = brentq(
            data.gradient, b_lo, b_hi, xtol=1e-300, rtol=4 * 2.0**-52, full_output=True
        )
        log_t, nll, n_eval, ok = (
            -math.log(root),
            data.nll(root),
            info.function_calls,
            info.converged,
        )
    else:
        result = minimize_scalar(
            lambda log_t: data.nll(math.exp(-log_t)),
            bounds=(a, b),
            method="bounded",
            options={"xatol": _XATOL, "maxiter": 500},
        )
        log_t, nll = float(result.x), float(result.fun)
        n_eval, ok = int(result.nfev), bool(result.success)
    if not (math.isfinite(nll) and nll <= values[best]):
        log_t, nll = grid[best], values[best]
    n_iter = n_grid + 2 + n_eval
    if log_t - lo < _EDGE or hi - log_t < _EDGE:
        end_is_min = log_t - lo < _EDGE
        value = t_min if end_is_min else t_max
        side = f"below T_min = {value:.4g}" if end_is_min else f"above T_max = {value:.4g}"
        return _boundary(
            f"{fn}: the NLL of the averaged member probabilities keeps falling toward the end "
            f"of `bounds`; the optimum lies {side}.",
            temperature=value,
            n_iter=n_iter,
            solver="grid",
            **where,
        )
    return TemperatureFit(math.exp(log_t), nll, n_iter, bool(ok), "grid")
