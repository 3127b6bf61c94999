"""Post-hoc scalers fitted on held-out logits: temperature, vector and matrix scaling.

Each scaler learns a map of the logits ``z`` on a validation set by minimising the mean negative
log-likelihood of ``softmax(map(z))``, then applies it to new logits:

* :class:`TemperatureScaling` - ``z / T`` (one scalar; never changes the predicted class),
* :class:`VectorScaling` - ``a * z + b`` (a scale and a shift per class),
* :class:`MatrixScaling` - ``W z + b`` (full affine map, optionally with an off-diagonal penalty).

All three are ``nn.Module`` s with ``fit(logits, labels, max_iter=100) -> self`` and
``forward(logits)``; forward accepts ``[N, K]`` logits or member logits ``[M, N, K]`` (the map acts
on the last axis) and returns the input dtype. Fitting always starts from the same initial
parameters, so fitting twice on the same data gives the same answer. Parameters are stored in
float64 and round-trip through ``state_dict`` and ``torch.save``.

Temperature scaling is solved exactly by Newton's method on ``1 / T`` (see
:func:`fit_temperature`); vector and matrix scaling are convex in their parameters and are solved
by L-BFGS with a strong-Wolfe line search in float64.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bensemble._validation import (
    as_labels,
    as_logits,
    check_option,
    check_positive,
    check_positive_int,
    to_tensor,
)
from bensemble.calibration._newton import (
    DEFAULT_TEMPERATURE_BOUNDS,
    CalibrationFitError,
    TemperatureFit,
    solve_temperature,
)

__all__ = [
    "CalibrationFitError",
    "DEFAULT_TEMPERATURE_BOUNDS",
    "MatrixScaling",
    "TemperatureFit",
    "TemperatureScaling",
    "VectorScaling",
    "fit_temperature",
]

_ON_BOUNDARY = ("raise", "warn")
# L-BFGS settings for vector / matrix scaling (float64 objective).
_LBFGS_TOLERANCE_GRAD = 1e-10
_LBFGS_TOLERANCE_CHANGE = 1e-15
_LBFGS_HISTORY = 20
#: ``converged_`` of vector / matrix scaling: final max-abs gradient of the objective below this.
CONVERGENCE_GTOL = 1e-6


# ----------------------------------------------------------------------------- validation helpers
def _check_bounds(bounds: Any, fn: str) -> tuple[float, float]:
    ok = isinstance(bounds, (tuple, list)) and len(bounds) == 2
    if ok:
        try:
            lo, hi = float(bounds[0]), float(bounds[1])
        except (TypeError, ValueError):
            ok = False
        else:
            ok = math.isfinite(lo) and math.isfinite(hi) and 0.0 < lo < hi
    if not ok:
        raise ValueError(
            f"{fn}: `bounds` must be a pair (T_min, T_max) with 0 < T_min < T_max (got {bounds!r})"
        )
    return lo, hi


def _fit_inputs(
    logits: Any, labels: Any, fn: str, num_classes: int | None = None
) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """Validated float64 logits ``[N, K]``, int64 labels on their device, and whether the
    float64 logits are a private copy (safe to overwrite)."""
    raw = to_tensor(logits, "logits", fn)
    # Check finiteness in the input dtype (half the bytes of float64 for float32), then cast.
    keep = None if raw.is_floating_point() else torch.float64
    z = as_logits(raw, "logits", fn, ndim=2, dtype=keep).to(torch.float64)
    if z.shape[1] < 2:
        raise ValueError(
            f"{fn}: `logits` must have at least 2 classes on its last axis (got shape "
            f"{tuple(z.shape)})"
        )
    if num_classes is not None and z.shape[1] != num_classes:
        raise ValueError(
            f"{fn}: `logits` must have num_classes={num_classes} columns (got shape "
            f"{tuple(z.shape)})"
        )
    y = as_labels(labels, "labels", fn, n=z.shape[0], num_classes=z.shape[1], device=z.device)
    owned = raw.dtype != torch.float64  # the float64 tensor is then a fresh copy
    return z, y, owned


def _forward_input(logits: Any, fn: str, num_classes: int | None) -> tuple[torch.Tensor, Any]:
    """Logits ``[N, K]`` or ``[M, N, K]`` as a floating tensor, and the dtype to return."""
    t = logits if isinstance(logits, torch.Tensor) else to_tensor(logits, "logits", fn)
    if t.ndim not in (2, 3):
        raise ValueError(
            f"{fn}: `logits` must be 2-D [N, K] or 3-D [M, N, K] (got shape {tuple(t.shape)})"
        )
    if num_classes is not None and t.shape[-1] != num_classes:
        raise ValueError(
            f"{fn}: `logits` must have num_classes={num_classes} entries on its last axis "
            f"(got shape {tuple(t.shape)})"
        )
    if not t.is_floating_point():
        if t.is_complex() or t.dtype == torch.bool:
            raise ValueError(f"{fn}: `logits` must be real-valued (got dtype {t.dtype})")
        t = t.to(torch.get_default_dtype())
    out_dtype = t.dtype
    # Half-precision inputs are scaled in float32 and rounded back once.
    if t.dtype in (torch.float16, torch.bfloat16):
        t = t.float()
    return t, out_dtype


# ----------------------------------------------------------------------------- temperature
def _fit_temperature(
    logits: Any,
    labels: Any,
    *,
    init_temp: float,
    bounds: tuple[float, float],
    max_iter: int,
    on_boundary: str,
    fn: str,
) -> TemperatureFit:
    max_iter = check_positive_int(max_iter, "max_iter", fn)
    z, y, owned = _fit_inputs(logits, labels, fn)
    return solve_temperature(
        z,
        y,
        init_temp=init_temp,
        bounds=bounds,
        max_iter=max_iter,
        on_boundary=on_boundary,
        fn=fn,
        owned=owned,
    )


def fit_temperature(
    logits: Any,
    labels: Any,
    *,
    init_temp: float = 1.5,
    max_iter: int = 100,
    bounds: tuple[float, float] = DEFAULT_TEMPERATURE_BOUNDS,
    on_boundary: str = "raise",
) -> float:
    """NLL-optimal temperature ``T`` for ``softmax(logits / T)``.

    With ``b = 1 / T`` the mean NLL ``mean_i[logsumexp(b z_i) - b z_iy]`` is convex in ``b``,
    with gradient ``mean_i(E_p[z] - z_iy)`` and curvature ``mean_i Var_p[z]`` under
    ``p = softmax(b z_i)``. Newton's method on ``b`` (float64 reductions, a sign bracket keeping
    ``b`` positive and inside ``bounds``) converges to the optimum to rounding in a few passes;
    scipy's bounded search on ``log T`` is the fallback. Computation runs on the logits' device.

    Args:
        logits: Validation logits ``[N, K]`` (tensor or array, any real dtype, finite).
        labels: Integer class labels ``[N]`` in ``[0, K)``.
        init_temp: Starting temperature (> 0). Every fit starts here.
        max_iter: Newton iteration budget before the fallback search takes over.
        bounds: Admissible range ``(T_min, T_max)``; default ``log T`` in ``[-4, 4]``.
        on_boundary: What to do when the optimum lies at or beyond an end of ``bounds`` (for
            example ``T -> 0`` on separable data, where every label is the top class):
            ``"raise"`` (default) raises :class:`CalibrationFitError`; ``"warn"`` warns and
            returns the boundary value.

    Returns:
        The fitted temperature as a Python float.

    Raises:
        ValueError: Invalid inputs (rank, NaN/inf, float or out-of-range labels, lengths, ...).
        CalibrationFitError: The optimum is not an interior point of ``bounds``.

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> latent = torch.randn(5000, 4, generator=g, dtype=torch.float64)
        >>> labels = torch.multinomial(latent.softmax(-1), 1, generator=g).squeeze(1)
        >>> abs(fit_temperature(3 * latent, labels) - 3.0) < 0.2  # logits inflated 3x
        True
    """
    fn = "fit_temperature"
    init_temp = check_positive(init_temp, "init_temp", fn)
    bounds = _check_bounds(bounds, fn)
    check_option(on_boundary, "on_boundary", _ON_BOUNDARY, fn)
    fit = _fit_temperature(
        logits,
        labels,
        init_temp=init_temp,
        bounds=bounds,
        max_iter=max_iter,
        on_boundary=on_boundary,
        fn=fn,
    )
    return fit.temperature


class TemperatureScaling(nn.Module):
    """Temperature scaling: ``softmax(z / T)`` with one positive scalar ``T``.

    ``T`` is stored as its logarithm (``log_temperature``, float64) so it can never become
    non-positive; :attr:`temperature` gives ``T`` itself. :meth:`fit` solves for the NLL optimum
    exactly (see :func:`fit_temperature` for the method and the boundary rule).

    Dividing a row by a positive ``T`` is monotone, also in floating point, so the predicted class
    is kept: the original top logit stays a row maximum (two logits within one unit in the last
    place of each other may round to a tie).

    Args:
        init_temp: Initial temperature, and the starting point of every fit (> 0).
        bounds: Admissible ``(T_min, T_max)`` for :meth:`fit`; default ``(e^-4, e^4)``.
        on_boundary: ``"raise"`` (default) or ``"warn"`` when the optimum lies at an end of
            ``bounds``.

    Attributes (after fit):
        converged_: Whether the solver met its tolerance at an interior optimum.
        n_iter_: Newton iterations used (objective evaluations if the fallback ran).
        nll_: Mean NLL (nats) of the scaled logits on the fitting data.
        solver_: ``"newton"`` or ``"bounded"``.

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> latent = torch.randn(5000, 4, generator=g)
        >>> labels = torch.multinomial(latent.softmax(-1), 1, generator=g).squeeze(1)
        >>> scaler = TemperatureScaling().fit(3 * latent, labels)
        >>> round(scaler.temperature.item(), 1), scaler.converged_
        (3.0, True)
        >>> scaler(3 * latent).shape
        torch.Size([5000, 4])
    """

    def __init__(
        self,
        init_temp: float = 1.5,
        *,
        bounds: tuple[float, float] = DEFAULT_TEMPERATURE_BOUNDS,
        on_boundary: str = "raise",
    ) -> None:
        super().__init__()
        fn = "TemperatureScaling"
        self.init_temp = check_positive(init_temp, "init_temp", fn)
        self.bounds = _check_bounds(bounds, fn)
        self.on_boundary = check_option(on_boundary, "on_boundary", _ON_BOUNDARY, fn)
        self.log_temperature = nn.Parameter(
            torch.tensor([math.log(self.init_temp)], dtype=torch.float64)
        )

    @property
    def temperature(self) -> torch.Tensor:
        """``T = exp(log_temperature)``, a 1-element tensor (``.item()`` gives the float)."""
        return self.log_temperature.exp()

    @temperature.setter
    def temperature(self, value: float | torch.Tensor) -> None:
        t = float(value.detach().reshape(-1)[0]) if isinstance(value, torch.Tensor) else value
        t = check_positive(t, "temperature", "TemperatureScaling")
        with torch.no_grad():
            self.log_temperature.fill_(math.log(t))

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        """Scaled logits ``z / T``.

        Args:
            logits: ``[N, K]`` or member logits ``[M, N, K]``.

        Returns:
            ``logits / T`` with the shape and floating dtype of ``logits``.
        """
        z, out_dtype = _forward_input(logits, "TemperatureScaling.forward", None)
        t = self.temperature.to(device=z.device)
        info = torch.finfo(z.dtype)
        if info.tiny <= float(t.detach()) <= info.max:  # T representable in the input dtype
            return (z / t.to(z.dtype)).to(out_dtype)
        return (z.to(torch.float64) / t).to(out_dtype)

    def fit(self, logits: Any, labels: Any, max_iter: int = 100) -> TemperatureScaling:
        """Fit ``T`` to minimise the validation NLL (exact Newton solve, from ``init_temp``).

        Args:
            logits: Validation logits ``[N, K]`` (tensor or array; not modified).
            labels: Integer labels ``[N]`` in ``[0, K)``.
            max_iter: Newton iteration budget before the bounded fallback search.

        Returns:
            ``self``, with ``converged_``, ``n_iter_``, ``nll_`` and ``solver_`` set.

        Raises:
            ValueError: Invalid inputs.
            CalibrationFitError: The optimum lies at an end of ``bounds`` (``on_boundary="raise"``).
        """
        fit = _fit_temperature(
            logits,
            labels,
            init_temp=self.init_temp,
            bounds=self.bounds,
            max_iter=max_iter,
            on_boundary=self.on_boundary,
            fn="TemperatureScaling.fit",
        )
        with torch.no_grad():
            self.log_temperature.fill_(math.log(fit.temperature))
        self.converged_ = fit.converged
        self.n_iter_ = fit.n_iter
        self.nll_ = fit.nll
        self.solver_ = fit.solver
        return self

    def extra_repr(self) -> str:
        return f"temperature={self.temperature.item():.4g}"

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # noqa: ANN001
        # bensemble 0.2 stored the temperature itself under "temperature".
        legacy, key = prefix + "temperature", prefix + "log_temperature"
        if legacy in state_dict and key not in state_dict:
            old = state_dict.pop(legacy)
            state_dict[key] = old.detach().to(torch.float64).reshape(1).log()
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


# ----------------------------------------------------------------------------- affine scalers
class _AffineScaling(nn.Module):
    """Shared fit / forward for scalers that are affine in their parameters (convex NLL)."""

    _name = "_AffineScaling"

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.num_classes = check_positive_int(num_classes, "num_classes", self._name, minimum=2)

    # subclasses: the initial parameters, the map and an optional penalty
    def _initial(self, device: torch.device) -> list[torch.Tensor]:
        raise NotImplementedError

    def _map(self, z: torch.Tensor, params: list[torch.Tensor]) -> torch.Tensor:
        raise NotImplementedError

    def _penalty(self, params: list[torch.Tensor]) -> torch.Tensor | None:
        return None

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        """Calibrated logits.

        Args:
            logits: ``[N, K]`` or member logits ``[M, N, K]`` with ``K = num_classes``.

        Returns:
            The mapped logits, same shape and floating dtype as ``logits``.
        """
        z, out_dtype = _forward_input(logits, f"{self._name}.forward", self.num_classes)
        params = [p.to(device=z.device, dtype=z.dtype) for p in self.parameters()]
        return self._map(z, params).to(out_dtype)

    def fit(self, logits: Any, labels: Any, max_iter: int = 100) -> _AffineScaling:
        """Minimise the validation NLL by L-BFGS (strong-Wolfe line search, float64).

        Every fit starts from the identity map, so refitting gives the same answer.

        Args:
            logits: Validation logits ``[N, num_classes]`` (tensor or array; not modified).
            labels: Integer labels ``[N]`` in ``[0, num_classes)``.
            max_iter: L-BFGS iteration budget.

        Returns:
            ``self``, with ``converged_`` (final max-abs gradient <= ``CONVERGENCE_GTOL``),
            ``n_iter_``, ``nll_`` (mean NLL of the fitted map on the data) set.
        """
        fn = f"{self._name}.fit"
        max_iter = check_positive_int(max_iter, "max_iter", fn)
        z, y, _ = _fit_inputs(logits, labels, fn, self.num_classes)
        params = [p.requires_grad_() for p in self._initial(z.device)]
        optimizer = torch.optim.LBFGS(
            params,
            lr=1.0,
            max_iter=max_iter,
            tolerance_grad=_LBFGS_TOLERANCE_GRAD,
            tolerance_change=_LBFGS_TOLERANCE_CHANGE,
            history_size=_LBFGS_HISTORY,
            line_search_fn="strong_wolfe",
        )

        def objective() -> torch.Tensor:
            loss = F.cross_entropy(self._map(z, params), y)
            penalty = self._penalty(params)
            return loss if penalty is None else loss + penalty

        def closure() -> torch.Tensor:
            optimizer.zero_grad()
            loss = objective()
            loss.backward()
            return loss

        with torch.enable_grad():
            optimizer.step(closure)
            optimizer.zero_grad()
            objective().backward()
        gmax = max(float(p.grad.abs().max()) for p in params)
        with torch.no_grad():
            for own, fitted in zip(self.parameters(), params):
                own.copy_(fitted)
            nll = float(F.cross_entropy(self._map(z, params), y))
        self.converged_ = bool(gmax <= CONVERGENCE_GTOL)
        self.n_iter_ = int(optimizer.state[params[0]].get("n_iter", 0))
        self.nll_ = nll
        if not self.converged_:
            warnings.warn(
                f"{fn}: L-BFGS stopped after {self.n_iter_} iterations with gradient "
                f"{gmax:.2e} > {CONVERGENCE_GTOL:g}; the data may be separable (the NLL has no "
                "finite minimiser) or max_iter too small.",
                RuntimeWarning,
                stacklevel=2,
            )
        return self


class VectorScaling(_AffineScaling):
    """Vector scaling: ``softmax(a * z + b)`` with a scale ``a`` and a shift ``b`` per class.

    Can fix class-specific over- or under-confidence, and can change the predicted class.
    Fitted by L-BFGS with a strong-Wolfe line search on the (convex) mean NLL in float64.

    Args:
        num_classes: Number of classes ``K`` (>= 2).

    Attributes:
        a: Per-class scale ``[K]`` (float64), initially ones.
        b: Per-class shift ``[K]`` (float64), initially zeros.
        converged_, n_iter_, nll_: Set by :meth:`fit`.

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> latent = torch.randn(2000, 3, generator=g)
        >>> labels = torch.multinomial(latent.softmax(-1), 1, generator=g).squeeze(1)
        >>> scaler = VectorScaling(num_classes=3).fit(3 * latent, labels)
        >>> scaler.converged_, scaler(3 * latent).shape
        (True, torch.Size([2000, 3]))
    """

    _name = "VectorScaling"

    def __init__(self, num_classes: int) -> None:
        super().__init__(num_classes)
        self.a = nn.Parameter(torch.ones(self.num_classes, dtype=torch.float64))
        self.b = nn.Parameter(torch.zeros(self.num_classes, dtype=torch.float64))

    def _initial(self, device: torch.device) -> list[torch.Tensor]:
        k = self.num_classes
        return [
            torch.ones(k, dtype=torch.float64, device=device),
            torch.zeros(k, dtype=torch.float64, device=device),
        ]

    def _map(self, z: torch.Tensor, params: list[torch.Tensor]) -> torch.Tensor:
        a, b = params
        return z * a + b


class MatrixScaling(_AffineScaling):
    """Matrix scaling: ``softmax(z W^T + b)`` with a full ``K x K`` matrix and a shift.

    The most flexible affine calibrator (Guo et al., 2017); it has ``K^2 + K`` parameters and
    overfits small validation sets, which the off-diagonal penalty of Kull et al. (2019)
    counters: the fitted objective is ``NLL + off_diagonal_l2 * sum_{i != j} W_ij^2``.

    Args:
        num_classes: Number of classes ``K`` (>= 2).
        off_diagonal_l2: Penalty weight on the squared off-diagonal entries of ``W`` (>= 0).

    Attributes:
        weight: ``[K, K]`` matrix (float64), initially the identity.
        bias: ``[K]`` shift (float64), initially zeros.
        converged_, n_iter_, nll_: Set by :meth:`fit` (``nll_`` excludes the penalty).
    """

    _name = "MatrixScaling"

    def __init__(self, num_classes: int, *, off_diagonal_l2: float = 0.0) -> None:
        super().__init__(num_classes)
        self.off_diagonal_l2 = check_positive(
            off_diagonal_l2, "off_diagonal_l2", self._name, allow_zero=True
        )
        self.weight = nn.Parameter(torch.eye(self.num_classes, dtype=torch.float64))
        self.bias = nn.Parameter(torch.zeros(self.num_classes, dtype=torch.float64))

    def _initial(self, device: torch.device) -> list[torch.Tensor]:
        k = self.num_classes
        return [
            torch.eye(k, dtype=torch.float64, device=device),
            torch.zeros(k, dtype=torch.float64, device=device),
        ]

    def _map(self, z: torch.Tensor, params: list[torch.Tensor]) -> torch.Tensor:
        weight, bias = params
        return z @ weight.T + bias

    def _penalty(self, params: list[torch.Tensor]) -> torch.Tensor | None:
        if self.off_diagonal_l2 == 0.0:
            return None
        weight = params[0]
        off = weight - torch.diag_embed(torch.diagonal(weight))
        return self.off_diagonal_l2 * (off * off).sum()

    def extra_repr(self) -> str:
        return f"num_classes={self.num_classes}, off_diagonal_l2={self.off_diagonal_l2:g}"
