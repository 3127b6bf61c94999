"""Temperature scaling: ``softmax(z / T)`` with one positive ``T`` fitted on held-out data."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from bensemble._validation import check_option, check_positive, check_positive_int
from bensemble.calibration._ensemble import solve_ensemble_temperature
from bensemble.calibration._inputs import check_bounds, fit_inputs, forward_input, state_tensor
from bensemble.calibration._newton import (
    DEFAULT_TEMPERATURE_BOUNDS,
    TemperatureFit,
    solve_temperature,
)

__all__ = ["TemperatureScaling", "fit_temperature"]

ON_BOUNDARY = ("warn", "raise")


def _fit(
    logits: Any,
    labels: Any,
    *,
    init_temp: float,
    bounds: tuple[float, float],
    max_iter: int,
    on_boundary: str,
    ensemble: bool,
    fn: str,
) -> TemperatureFit:
    max_iter = check_positive_int(max_iter, "max_iter", fn)
    if not isinstance(ensemble, bool):
        raise ValueError(f"{fn}: `ensemble` must be True or False (got {ensemble!r})")
    z, y, owned, eps = fit_inputs(logits, labels, fn, members=ensemble)
    solve = solve_ensemble_temperature if ensemble else solve_temperature
    return solve(
        z,
        y,
        init_temp=init_temp,
        bounds=bounds,
        max_iter=max_iter,
        on_boundary=on_boundary,
        fn=fn,
        owned=owned,
        eps=eps,
    )


def fit_temperature(
    logits: Any,
    labels: Any,
    *,
    init_temp: float = 1.5,
    max_iter: int = 100,
    bounds: tuple[float, float] = DEFAULT_TEMPERATURE_BOUNDS,
    on_boundary: str = "warn",
    ensemble: bool = False,
) -> float:
    """NLL-optimal temperature ``T`` for ``softmax(logits / T)``.

    With ``b = 1 / T`` the mean NLL ``mean_i[logsumexp(b z_i) - b z_iy]`` is convex in ``b``,
    with gradient ``mean_i(E_p[z] - z_iy)`` and curvature ``mean_i Var_p[z]`` under
    ``p = softmax(b z_i)``. Newton's method on ``b`` (float64 reductions, a sign bracket keeping
    ``b`` positive and inside ``bounds``) converges to the optimum to rounding in a few passes;
    scipy's bounded search on ``log T`` is the fallback. Computation runs on the logits' device.

    Rows whose logits are equal to within 8 units in the last place of their dtype count as
    ties (they carry no information), and the boundary decisions allow for rounding, so the same
    data give the same temperature on every device and in every row order.

    Args:
        logits: Validation logits ``[N, K]`` (tensor or array, any real dtype, finite); with
            ``ensemble=True`` member logits ``[M, N, K]``.
        labels: Integer class labels ``[N]`` in ``[0, K)``.
        init_temp: Starting temperature (> 0). Every fit starts here.
        max_iter: Newton iteration budget before the fallback search takes over.
        bounds: Admissible range ``(T_min, T_max)``; default ``log T`` in ``[-4, 4]``.
        on_boundary: What to do when the optimum lies at or beyond an end of ``bounds``: ``T ->
            0`` on separable data (every label is the top class), ``T -> inf`` on uninformative
            logits (no better than a uniform guess, or constant within every row).
            ``"warn"`` (default) warns (:class:`RuntimeWarning`) and returns the boundary
            value; ``"raise"`` raises :class:`CalibrationFitError`.
        ensemble: Fit one ``T`` shared by every member of ``[M, N, K]`` member logits,
            minimising the NLL of the averaged probabilities ``mean_m softmax(z_m / T)`` (see
            :class:`TemperatureScaling` for when to use it).

    Returns:
        The fitted temperature as a Python float.

    Raises:
        ValueError: Invalid inputs (rank, NaN/inf, float or out-of-range labels, lengths, ...).
        CalibrationFitError: With ``on_boundary="raise"``, an optimum at an end of ``bounds``.

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
    bounds = check_bounds(bounds, fn)
    check_option(on_boundary, "on_boundary", ON_BOUNDARY, fn)
    fit = _fit(
        logits,
        labels,
        init_temp=init_temp,
        bounds=bounds,
        max_iter=max_iter,
        on_boundary=on_boundary,
        ensemble=ensemble,
        fn=fn,
    )
    return fit.temperature


def _exp(x: float) -> float:
    """``exp(x)`` in float64, ``inf`` on overflow (``math.exp`` raises instead)."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _float32_log(t: float, fn: str, name: str) -> float:
    """``log t`` rounded to float32, checked to give a finite positive ``T`` back."""
    log32 = float(torch.tensor(math.log(t), dtype=torch.float32))
    if not 0.0 < _exp(log32) < math.inf:
        raise ValueError(f"{fn}: `{name}` must be a positive float64 temperature (got {t!r})")
    return log32


class TemperatureScaling(nn.Module):
    """Temperature scaling: ``softmax(z / T)`` with one positive scalar ``T``.

    ``T`` is stored as its logarithm (``log_temperature``, an ordinary float32 parameter of shape
    ``[1]``) so it can never become non-positive; :attr:`temperature` gives ``T`` as a tensor and
    :attr:`temperature_` as a Python float. :meth:`fit` solves for the NLL optimum exactly in
    float64 (see :func:`fit_temperature` for the method and the boundary rule); ``temperature_``
    is that float64 optimum, the parameter holds it rounded to float32 (relative error
    ``<= 6e-8 |log T|``), and :meth:`forward` applies the parameter.

    Dividing a row by a positive ``T`` is monotone, also in floating point, so the predicted class
    is kept: the original top logit stays a row maximum (two logits within one unit in the last
    place of each other may round to a tie).

    **Ensembles.** Fit on the logits you actually evaluate. For an ensemble that is its
    log-probabilities ``log mean_m softmax(z_m)`` ``[N, K]`` - what
    ``Ensemble.predict_log_proba(x)`` returns - not the mean of the member logits (a different
    model, whose probabilities are not the ensemble's). Two options were measured:

    * (a) **recommended**: ``fit(log_p, labels)`` on the ensemble's log-probabilities, applied as
      ``softmax(scaler(log_p))`` (calibrate after pooling). The fit is convex and exact, keeps
      the ensemble's predicted class, and works for every producer, including members whose
      probabilities are exactly 0 (trees).
    * (b) ``fit(member_logits, labels, ensemble=True)`` on ``[M, N, K]`` member logits (or member
      log-probabilities), applied as ``mean_m softmax(scaler(z_m))``: one ``T`` inside every
      member, then the average. Not convex; it may change the predicted class.

    On the digits demo's five ensembles (5 seeds, 10 classes, ~180 temperature-fitting
    examples; ``python benchmarks/compare_ensemble_temperature.py``) option (a) gave the lower
    mean test NLL for four of them - MC dropout 0.172 vs 0.217, DropConnect 0.220 vs 0.240,
    random forest 0.172 vs 0.409, deep ensemble 0.166 vs 0.179 - and (b) for the last-layer
    Laplace ensemble (0.164 vs 0.170); the ECE followed the same pattern except on the deep
    ensemble (0.027 vs 0.024). With many members, or members with hard zeros, the shared ``T``
    of (b) runs to ``T_min``, where the average becomes a vote count. Both options over-fit when
    the fitting set is small and nearly separable (on two of the five deep-ensemble seeds the
    fitted ``T`` - 0.18 and 0.42 for (a) - raised the test NLL): keep a few hundred examples
    for the fit.

    Args:
        init_temp: Initial temperature, and the starting point of every fit (> 0).
        bounds: Admissible ``(T_min, T_max)`` for :meth:`fit`; default ``(e^-4, e^4)``.
        on_boundary: ``"warn"`` (default: warn and clamp to the bound) or ``"raise"``
            (:class:`CalibrationFitError`) when the optimum lies at an end of ``bounds``.

    Attributes (after fit):
        temperature_: The fitted temperature, a Python float.
        converged_: Whether the solver met its tolerance at an interior optimum.
        at_boundary_: Whether ``temperature_`` was clamped to an end of ``bounds``.
        n_iter_: Newton iterations used (objective evaluations if the fallback ran).
        nll_: Mean NLL (nats) of the scaled logits on the fitting data.
        solver_: ``"newton"``, ``"bounded"`` or (``ensemble=True``) ``"grid"``.

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> latent = torch.randn(5000, 4, generator=g)
        >>> labels = torch.multinomial(latent.softmax(-1), 1, generator=g).squeeze(1)
        >>> scaler = TemperatureScaling().fit(3 * latent, labels)
        >>> round(scaler.temperature_, 1), scaler.converged_
        (3.0, True)
        >>> scaler(3 * latent).shape
        torch.Size([5000, 4])
    """

    def __init__(
        self,
        init_temp: float = 1.5,
        *,
        bounds: tuple[float, float] = DEFAULT_TEMPERATURE_BOUNDS,
        on_boundary: str = "warn",
    ) -> None:
        super().__init__()
        fn = "TemperatureScaling"
        self.init_temp = check_positive(init_temp, "init_temp", fn)
        self.bounds = check_bounds(bounds, fn)
        self.on_boundary = check_option(on_boundary, "on_boundary", ON_BOUNDARY, fn)
        log32 = _float32_log(self.init_temp, fn, "init_temp")
        self.log_temperature = nn.Parameter(torch.tensor([log32], dtype=torch.float32))
        # (T in float64, the float32 log it was stored as): temperature_ is exact while the
        # parameter still holds that value
        self._exact: tuple[float, float] | None = (self.init_temp, log32)

    @property
    def temperature(self) -> torch.Tensor:
        """``T = exp(log_temperature)``, a 1-element tensor (``.item()`` gives the float)."""
        return self.log_temperature.exp()

    @temperature.setter
    def temperature(self, value: float | torch.Tensor) -> None:
        fn = "TemperatureScaling"
        if isinstance(value, torch.Tensor):
            if value.numel() != 1 or value.dtype == torch.bool or value.is_complex():
                raise ValueError(
                    f"{fn}: `temperature` must be a positive number or a one-element real "
                    f"tensor (got shape {tuple(value.shape)}, dtype {value.dtype})"
                )
            value = float(value.detach().reshape(()))
        t = check_positive(value, "temperature", fn)
        self._store(t, _float32_log(t, fn, "temperature"))

    @property
    def temperature_(self) -> float:
        """The temperature this module applies, as a Python float (the float64 fit result)."""
        log_t = float(self.log_temperature.detach().reshape(-1)[0])
        if self._exact is not None and self._exact[1] == log_t:
            return self._exact[0]
        return _exp(log_t)

    def _store(self, t: float, log32: float) -> None:
        with torch.no_grad():
            self.log_temperature.fill_(log32)
        self._exact = (t, float(self.log_temperature.detach().reshape(-1)[0]))

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        """Scaled logits ``z / T``.

        Args:
            logits: ``[N, K]`` or member logits ``[M, N, K]``.

        Returns:
            ``logits / T`` with the shape and floating dtype of ``logits``.
        """
        fn = "TemperatureScaling.forward"
        z, out_dtype = forward_input(logits, fn, None)
        t = self.log_temperature.to(device=z.device, dtype=torch.float64).exp()
        value = float(t.detach().reshape(-1)[0])
        if not 0.0 < value < math.inf:
            raise ValueError(
                f"{fn}: the temperature must be finite and positive (got {value}); "
                "`log_temperature` was set to a value outside the float64 range"
            )
        info = torch.finfo(z.dtype)
        if info.tiny <= value <= info.max:  # T representable in the input dtype
            return (z / t.to(z.dtype)).to(out_dtype)
        return (z.to(torch.float64) / t).to(out_dtype)

    def fit(
        self, logits: Any, labels: Any, max_iter: int = 100, *, ensemble: bool = False
    ) -> TemperatureScaling:
        """Fit ``T`` to minimise the validation NLL (exact Newton solve, from ``init_temp``).

        Args:
            logits: Validation logits ``[N, K]`` (tensor or array; not modified); with
                ``ensemble=True`` member logits ``[M, N, K]``.
            labels: Integer labels ``[N]`` in ``[0, K)``.
            max_iter: Newton iteration budget before the bounded fallback search.
            ensemble: One ``T`` shared by every member, minimising the NLL of
                ``mean_m softmax(z_m / T)`` (not convex in ``1 / T``: a grid over ``log T``
                then Brent's search; ``init_temp`` and ``max_iter`` are not used).

        Returns:
            ``self``, with ``temperature_``, ``converged_``, ``at_boundary_``, ``n_iter_``,
            ``nll_`` and ``solver_`` set.

        Raises:
            ValueError: Invalid inputs.
            CalibrationFitError: The optimum lies at an end of ``bounds`` and
                ``on_boundary="raise"``.
        """
        fn = "TemperatureScaling.fit"
        # hyper-parameters a user may have reassigned since __init__
        check_positive(self.init_temp, "init_temp", fn)
        self.bounds = check_bounds(self.bounds, fn)
        check_option(self.on_boundary, "on_boundary", ON_BOUNDARY, fn)
        fit = _fit(
            logits,
            labels,
            init_temp=self.init_temp,
            bounds=self.bounds,
            max_iter=max_iter,
            on_boundary=self.on_boundary,
            ensemble=ensemble,
            fn=fn,
        )
        self._store(fit.temperature, _float32_log(fit.temperature, fn, "temperature"))
        self.converged_ = fit.converged
        self.at_boundary_ = fit.at_boundary
        self.n_iter_ = fit.n_iter
        self.nll_ = fit.nll
        self.solver_ = fit.solver
        return self

    def extra_repr(self) -> str:
        return f"temperature={self.temperature_:.4g}"

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # noqa: ANN001
        fn = "TemperatureScaling.load_state_dict"
        legacy, key = prefix + "temperature", prefix + "log_temperature"
        if legacy in state_dict and key not in state_dict:
            # bensemble 0.2 stored the temperature itself under "temperature".
            old = state_tensor(state_dict.pop(legacy), legacy, fn, None).to(torch.float64)
            t = float(old.reshape(()))
            if not t > 0.0:
                raise ValueError(f"{fn}: `{legacy}` must be a temperature > 0 (got {t})")
            state_dict[key] = torch.tensor([math.log(t)], dtype=torch.float64)
        if key in state_dict:
            value = state_tensor(state_dict[key], key, fn, None)
            log_t = float(value.to(torch.float64).reshape(()))
            log32 = float(torch.tensor(log_t, dtype=self.log_temperature.dtype))
            if not 0.0 < _exp(log32) < math.inf:
                raise ValueError(
                    f"{fn}: `{key}` must give a finite positive temperature exp(`{key}`) "
                    f"(got exp({log_t}))"
                )
            state_dict[key] = value.reshape(1)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self._exact = None
