"""Temperature scaling: ``softmax(z / T)`` with one positive ``T`` fitted on held-out data."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from bensemble._validation import check_option, check_positive, check_positive_int
from bensemble.calibration._api import ScalerAPI
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


_F32 = torch.finfo(torch.float32)


def _log_parameter(t: float, fn: str, name: str) -> torch.Tensor:
    """``log t`` as the float32 parameter value ``[1]``; ``exp`` of it must be a normal float32.

    The applied temperature is ``exp`` of the float32 parameter, so it must lie in float32's
    normal range ``[1.2e-38, 3.4e38]``.
    """
    log32 = torch.tensor([math.log(t)], dtype=torch.float32)
    _check_applied(log32, fn, name, t)
    return log32


def _check_applied(log_t: torch.Tensor, fn: str, name: str, shown: Any) -> None:
    applied = float(log_t.detach().exp().reshape(-1)[0])
    if not _F32.tiny <= applied <= _F32.max:
        raise ValueError(
            f"{fn}: `{name}` must give a temperature in float32's normal range "
            f"[{_F32.tiny:.3g}, {_F32.max:.3g}] (got {shown!r})"
        )


class TemperatureScaling(ScalerAPI, nn.Module):
    """Temperature scaling: ``softmax(z / T)`` with one positive scalar ``T``.

    ``T`` is stored as its logarithm (``log_temperature``, an ordinary float32 parameter of shape
    ``[1]``) so it can never become non-positive. :meth:`fit` solves for the NLL optimum exactly
    in float64 (see :func:`fit_temperature`, which returns that float64 value, for the method and
    the boundary rule) and stores it in the parameter; the applied temperature
    ``exp(log_temperature)`` is then within ``2**-24 (|log T| + 2)`` relative of the optimum.
    :attr:`temperature` (a tensor, as in bensemble 0.2), :attr:`temperature_` (a Python float)
    and :meth:`forward` all use that applied value, so a reported ``T`` reproduces the outputs.

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

    **Inference.** ``log_temperature`` does not require gradients (the fit is the scaler's own),
    so ``scaler(logits)`` is a plain tensor whenever ``logits`` is (``.numpy()`` works);
    :meth:`transform` (scaled logits) and :meth:`predict_proba` (their softmax) take tensors or
    numpy arrays and never track gradients. ``scaler.requires_grad_(True)`` makes the
    temperature trainable by an outer optimiser again (``forward`` stays differentiable in its
    input either way).

    Attributes (after fit):
        temperature_: The fitted temperature, a Python float.
        converged_: Whether the solver met its tolerance at an interior optimum.
        at_boundary_: Whether ``temperature_`` was clamped to an end of ``bounds``.
        n_iter_: Newton iterations used (objective evaluations if the fallback ran).
        nll_: Mean NLL (nats) of the scaled logits on the fitting data, at the float64 optimum.
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
        >>> scaler.predict_proba((3 * latent).numpy()).shape  # numpy in, a plain tensor out
        torch.Size([5000, 4])
        >>> scaler.temperature.requires_grad  # bensemble 0.2's tensor view, without gradient
        False
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
        self.log_temperature = nn.Parameter(_log_parameter(self.init_temp, fn, "init_temp"))
        self.requires_grad_(False)  # fitted by fit(), not by an outer optimiser

    @property
    def temperature(self) -> torch.Tensor:
        """``T = exp(log_temperature)``, a 1-element tensor without gradient (bensemble 0.2's
        attribute; ``.item()`` or :attr:`temperature_` give the float)."""
        return self.log_temperature.detach().exp()

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
        self._store(_log_parameter(t, fn, "temperature"))

    @property
    def temperature_(self) -> float:
        """The temperature this module applies, ``exp(log_temperature)``, as a Python float."""
        return float(self.log_temperature.detach().exp().reshape(-1)[0])

    def _store(self, log_t: torch.Tensor) -> None:
        with torch.no_grad():
            self.log_temperature.copy_(log_t)

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        """Scaled logits ``z / T``.

        Args:
            logits: ``[N, K]`` or member logits ``[M, N, K]``.

        Returns:
            ``logits / T`` with the shape and floating dtype of ``logits``.
        """
        fn = "TemperatureScaling.forward"
        z, out_dtype = forward_input(logits, fn, None)
        # exp in the parameter's dtype (= temperature_); differentiable if the parameter is
        t = self.log_temperature.exp().to(device=z.device)
        value = float(t.detach().reshape(-1)[0])
        if not 0.0 < value < math.inf:
            raise ValueError(
                f"{fn}: the temperature must be finite and positive (got {value}); "
                "`log_temperature` was set outside the range of its dtype"
            )
        info = torch.finfo(z.dtype)
        if info.tiny <= value <= info.max:  # T representable in the input dtype
            return (z / t.to(z.dtype)).to(out_dtype)
        return (z.to(torch.float64) / t.to(torch.float64)).to(out_dtype)

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
        self._store(_log_parameter(fit.temperature, fn, "temperature"))
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
            value = state_tensor(state_dict[key], key, fn, None).reshape(1)
            stored = value.to(self.log_temperature.dtype)
            _check_applied(stored, fn, key, f"exp({float(value)})")
            state_dict[key] = value
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
