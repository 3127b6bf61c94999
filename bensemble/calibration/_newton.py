"""Exact 1-D solver for the temperature of temperature scaling.

Write ``b = 1 / T`` for the inverse temperature and ``z`` for one row of logits. The mean
negative log-likelihood of the scaled softmax,

    NLL(b) = mean_i [ logsumexp_k(b z_ik) - b z_iy ],

is convex in ``b``: with ``p_i = softmax(b z_i)`` its derivatives are

    NLL'(b)  = mean_i ( E_{p_i}[z] - z_iy )           (gradient)
    NLL''(b) = mean_i Var_{p_i}[z]  >= 0             (curvature)

so a safeguarded Newton iteration on ``b`` reaches the optimum in a handful of passes over the
data. Every pass works on the logits shifted so that each row's maximum is 0 (``zc = z - max z``;
the shift changes neither the softmax nor the gradient) and reduces in float64, so ``exp`` can
never overflow and the gradient is exact to rounding.

Whether a finite positive optimum exists is decided before any iteration, from the two limits of
the monotone gradient: ``NLL'(0) = mean(mean_k zc - zc_y)`` must be negative (otherwise the
logits are no better than uniform and ``T -> inf`` is optimal), and ``NLL'(inf) = -mean(zc_y)``
must be positive (otherwise every label is a row maximum - separable data - and ``T -> 0`` is
optimal).

These decisions never rest on rounding, so the same data give the same outcome on every device,
thread count and row order:

* a row whose spread ``max_k z - min_k z`` is at most :data:`FLAT_ULPS` units in the last place
  of its largest ``|z|`` (in the input's dtype) is a tie: its centred logits are set to exactly
  0. Such differences are what two summation orders of the same logit give; they carry no
  information about the label, and a fit on them would amplify rounding noise. When every row
  is a tie the NLL does not depend on ``T`` at all (``log K`` for every ``T``), which is treated
  like uninformative logits: ``T_max``;
* ``NLL'(0)`` counts as negative only beyond its rounding-error bound
  ``2 (N + K) eps64 mean_i(max_k zc_i - min_k zc_i)``; within it the logits are read as no
  better than uniform (``T_max``).
 A bracket ``[lo, hi]`` on the sign of the gradient keeps every iterate inside the
admissible range ``[1 / T_max, 1 / T_min]`` (so ``b`` stays positive); a Newton step that leaves
the bracket is replaced by a probe of the range end or a geometric bisection. If the iteration
meets a non-finite value or runs out of iterations, scipy's bounded scalar search on ``log T``
takes over. An optimum outside the admissible range is reported (:class:`CalibrationFitError` or
a warning), never returned silently.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = [
    "CalibrationFitError",
    "TemperatureFit",
    "SolverSettings",
    "DEFAULT_TEMPERATURE_BOUNDS",
    "FLAT_ULPS",
]

#: Admissible temperature range: ``log T`` in ``[-4, 4]`` as in the practitioner's guide.
DEFAULT_TEMPERATURE_BOUNDS: tuple[float, float] = (math.exp(-4.0), math.exp(4.0))

# Newton stops when the step is below this fraction of ``b``, or when the Newton decrement
# g^2 / (2 h) (the NLL gain the step predicts) is below _DECREMENT_ATOL; it then takes that last
# step without evaluating it: by quadratic convergence the result is within O(step^2) of the
# optimum in b, i.e. ~1e-12 relative in T and far below 1e-16 in NLL.
_STEP_RTOL = 1e-10
_DECREMENT_ATOL = 1e-12
# The bounded fallback search: absolute tolerance on log T, and how close to an end is "at" it.
_FALLBACK_XATOL = 1e-10
_FALLBACK_EDGE = 1e-2
#: A row whose spread is at most this many units in the last place (of the input dtype, at the
#: row's largest magnitude) is a tie.
FLAT_ULPS = 8
_EPS64 = 2.0**-52


class CalibrationFitError(RuntimeError):
    """A post-hoc calibrator could not be fitted to a well-determined optimum.

    Raised with ``on_boundary="raise"`` when the NLL-optimal temperature lies at (or beyond) the
    end of the admissible range: ``T -> 0`` for separable validation data where every label is
    the top class, ``T -> inf`` when the logits are no better than a uniform guess, or when the
    logits are constant within every row (the default ``"warn"`` returns the boundary value
    with a warning instead).
    """


@dataclass(frozen=True)
class TemperatureFit:
    """Outcome of a temperature fit.

    Attributes:
        temperature: The fitted temperature ``T``.
        nll: Mean negative log-likelihood (nats) of ``softmax(logits / T)`` on the fitting data.
        n_iter: Newton iterations (or objective evaluations of the fallback search).
        converged: Whether the solver met its tolerance at an interior optimum.
        solver: ``"newton"`` or ``"bounded"`` (scipy's bounded scalar search, the fallback).
        at_boundary: Whether the optimum lies at an end of the admissible range (only returned
            with ``on_boundary="warn"``, the default; ``"raise"`` raises instead).
    """

    temperature: float
    nll: float
    n_iter: int
    converged: bool
    solver: str
    at_boundary: bool = False


class _CentredLogits:
    """Float64 logits shifted to row maximum 0, with scratch space for the Newton passes."""

    def __init__(
        self, logits64: torch.Tensor, labels: torch.Tensor, *, owned: bool, eps: float = 0.0
    ) -> None:
        row_max = logits64.amax(dim=1, keepdim=True)
        row_min = logits64.amin(dim=1, keepdim=True)
        # ``owned``: logits64 is a private copy we may overwrite (saves one [N, K] allocation).
        self.zc = logits64.sub_(row_max) if owned else logits64 - row_max
        if eps > 0.0:  # rows flat to within rounding of the input dtype are exact ties
            scale = torch.maximum(row_max.abs(), row_min.abs())
            self.zc.masked_fill_((row_max - row_min) <= FLAT_ULPS * eps * scale, 0.0)
        self.zc_label = self.zc.gather(1, labels.unsqueeze(1)).squeeze(1)
        self.buf = torch.empty_like(self.zc)

    def gradient_limits(self) -> tuple[float, float, bool, float]:
        """``NLL'(0)``, ``NLL'(inf)``, whether every row is constant, and the rounding bound
        of the computed ``NLL'(0)``."""
        row_mean = self.zc.mean(dim=1)  # <= 0, and 0 exactly for a constant row
        stats = torch.stack(
            [
                (row_mean - self.zc_label).mean(),
                -self.zc_label.mean(),
                (row_mean < 0).any(),
                -self.zc.amin(dim=1).mean(),
            ]
        )
        g_zero, g_inf, varies, mean_spread = stats.tolist()
        n, k = self.zc.shape
        return g_zero, g_inf, not varies, 2.0 * (n + k) * _EPS64 * mean_spread

    def _exp_sum(self, b: float) -> torch.Tensor:
        torch.mul(self.zc, b, out=self.buf)
        self.buf.exp_()
        return self.buf.sum(dim=1)

    def nll(self, b: float) -> float:
        """Mean NLL of ``softmax(b z)``."""
        s0 = self._exp_sum(b)
        return float((s0.log() - b * self.zc_label).mean())

    def evaluate(self, b: float) -> tuple[float, float, float]:
        """``(NLL(b), NLL'(b), NLL''(b))`` in one pass of ``exp``."""
        s0 = self._exp_sum(b)  # buf = exp(b zc)
        s1 = self.buf.mul_(self.zc).sum(dim=1)  # buf = zc exp(b zc)
        s2 = torch.einsum("nk,nk->n", self.buf, self.zc)  # row-wise dots, no temporary
        m1 = s1 / s0
        var = (s2 / s0 - m1 * m1).clamp_min_(0.0)
        stats = torch.stack(
            [(s0.log() - b * self.zc_label).mean(), (m1 - self.zc_label).mean(), var.mean()]
        )
        nll, grad, curv = stats.tolist()  # one host synchronisation
        return nll, grad, curv


def _boundary(
    message: str,
    *,
    on_boundary: str,
    temperature: float,
    data: _CentredLogits | Callable[[float], float],
    n_iter: int,
    solver: str,
    stacklevel: int = 5,
) -> TemperatureFit:
    if on_boundary == "raise":
        raise CalibrationFitError(
            message + " With on_boundary='warn' (the default) the boundary value is returned "
            "with a warning; or widen `bounds`."
        )
    # stacklevel 5: _boundary <- solve_temperature <- _fit_temperature <- fit <- the caller
    warnings.warn(message + " Returning the boundary value.", RuntimeWarning, stacklevel=stacklevel)
    nll = data.nll if isinstance(data, _CentredLogits) else data
    return TemperatureFit(temperature, nll(1.0 / temperature), n_iter, False, solver, True)


@dataclass(frozen=True)
class SolverSettings:
    """Everything a temperature solve is told besides the data (values already validated).

    The single-model solver (:func:`solve_temperature`) and the ensemble solver
    (:func:`bensemble.calibration._ensemble.solve_ensemble_temperature`) take the same settings.

    Attributes:
        init_temp: Starting temperature (every fit starts here: no warm start).
        bounds: Admissible ``(T_min, T_max)``.
        max_iter: Newton iteration budget before the bounded fallback takes over.
        on_boundary: ``"raise"`` or ``"warn"`` for an optimum at an end of ``bounds``.
        fn: Caller name for messages.
        owned: Whether the logits are a private copy that may be overwritten.
        eps: Machine epsilon of the dtype the logits came in (0 for exact integers): rows flat
            to within :data:`FLAT_ULPS` of it are ties.
        stacklevel: Of a boundary warning (5: the caller of ``fit``).
    """

    init_temp: float
    bounds: tuple[float, float]
    max_iter: int
    on_boundary: str
    fn: str
    owned: bool = False
    eps: float = 0.0
    stacklevel: int = 5


def solve_temperature(
    logits64: torch.Tensor, labels: torch.Tensor, settings: SolverSettings
) -> TemperatureFit:
    """Fit ``T`` by safeguarded Newton on ``b = 1 / T`` (inputs already validated).

    Args:
        logits64: Float64 logits ``[N, K]``, finite, ``K >= 2``, on the device to compute on.
        labels: Int64 labels ``[N]`` in ``[0, K)`` on the same device.
        settings: The solve's :class:`SolverSettings`.

    Returns:
        The :class:`TemperatureFit`.
    """
    fn, on_boundary, stacklevel = settings.fn, settings.on_boundary, settings.stacklevel
    t_min, t_max = settings.bounds
    b_min, b_max = 1.0 / t_max, 1.0 / t_min
    data = _CentredLogits(logits64, labels, owned=settings.owned, eps=settings.eps)
    g_zero, g_inf, constant, g_zero_error = data.gradient_limits()
    where = dict(on_boundary=on_boundary, data=data, solver="newton", stacklevel=stacklevel)
    if constant:
        return _boundary(
            f"{fn}: the logits are constant within every row (to within {FLAT_ULPS} units in "
            "the last place of their dtype), so the NLL does not depend on the temperature and "
            f"the logits carry no information; the uninformative end T_max = {t_max:.4g} "
            "applies.",
            temperature=t_max,
            n_iter=0,
            **where,
        )
    if g_inf <= 0.0:
        return _boundary(
            f"{fn}: every label is a top-scoring class (the data are separable), so the NLL "
            f"keeps falling as T -> 0; the optimum lies below T_min = {t_min:.4g}.",
            temperature=t_min,
            n_iter=0,
            **where,
        )
    if g_zero >= -g_zero_error:
        return _boundary(
            f"{fn}: the logits predict the labels no better than a uniform guess, so the NLL "
            f"keeps falling as T -> inf; the optimum lies above T_max = {t_max:.4g}.",
            temperature=t_max,
            n_iter=0,
            **where,
        )

    lo, hi = b_min, b_max  # the optimum lies in [lo, hi]
    lo_known = hi_known = False  # whether the gradient sign was observed at lo / hi
    b = min(max(1.0 / settings.init_temp, b_min), b_max)
    for it in range(1, settings.max_iter + 1):
        nll, grad, curv = data.evaluate(b)
        if not (math.isfinite(nll) and math.isfinite(grad) and math.isfinite(curv)) or curv <= 0:
            break
        if grad < 0.0:
            lo, lo_known = b, True
        elif grad > 0.0:
            hi, hi_known = b, True
        else:
            return TemperatureFit(1.0 / b, nll, it, True, "newton")
        if b >= b_max and grad < 0.0:
            return _boundary(
                f"{fn}: the NLL optimum lies below T_min = {t_min:.4g} (the lower end of "
                "`bounds`).",
                temperature=t_min,
                n_iter=it,
                **where,
            )
        if b <= b_min and grad > 0.0:
            return _boundary(
                f"{fn}: the NLL optimum lies above T_max = {t_max:.4g} (the upper end of "
                "`bounds`).",
                temperature=t_max,
                n_iter=it,
                **where,
            )
        step = -grad / curv
        b_new = b + step
        decrement = 0.5 * grad * grad / curv  # predicted NLL gain of the Newton step
        if abs(step) <= _STEP_RTOL * b or decrement <= _DECREMENT_ATOL:
            if lo < b_new < hi:  # the last step: its error is O(step^2), NLL error O(step^3)
                return TemperatureFit(1.0 / b_new, nll - decrement, it, True, "newton")
            return TemperatureFit(1.0 / b, nll, it, True, "newton")
        if not lo < b_new < hi:
            if b_new >= hi and not hi_known:
                b_new = b_max  # probe the end of the range
            elif b_new <= lo and not lo_known:
                b_new = b_min
            else:
                b_new = math.sqrt(lo * hi)  # geometric bisection of the bracket
        b = b_new
    return solve_bounded(
        data.nll, t_min, t_max, on_boundary=on_boundary, fn=fn, stacklevel=stacklevel + 1
    )


def solve_bounded(
    nll: Callable[[float], float],
    t_min: float,
    t_max: float,
    *,
    on_boundary: str,
    fn: str,
    stacklevel: int,
    solver: str = "bounded",
) -> TemperatureFit:
    """Scipy's bounded Brent search of ``nll(b = 1 / T)`` on ``log T`` in ``[log T_min, log T_max]``
    (the Newton fallback; the ensemble fit's refinement)."""
    from scipy.optimize import minimize_scalar

    lo, hi = math.log(t_min), math.log(t_max)
    result = minimize_scalar(
        lambda log_t: nll(math.exp(-log_t)),
        bounds=(lo, hi),
        method="bounded",
        options={"xatol": _FALLBACK_XATOL, "maxiter": 500},
    )
    log_t = float(result.x)
    n_eval = int(result.nfev)
    if not (result.success and math.isfinite(float(result.fun))):
        raise CalibrationFitError(f"{fn}: the temperature search failed ({result.message}).")
    if log_t - lo < _FALLBACK_EDGE or hi - log_t < _FALLBACK_EDGE:
        end = "T_min" if log_t - lo < _FALLBACK_EDGE else "T_max"
        value = t_min if end == "T_min" else t_max
        return _boundary(
            f"{fn}: the temperature search stopped at the end of its range ({end} = {value:.4g}).",
            on_boundary=on_boundary,
            temperature=value,
            data=nll,
            n_iter=n_eval,
            solver=solver,
            stacklevel=stacklevel,
        )
    return TemperatureFit(math.exp(log_t), float(result.fun), n_eval, True, solver)
