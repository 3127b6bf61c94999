"""Epistemic recalibration: temperature-scale the members' centre and rescale their spread."""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
from torch import nn

from bensemble._validation import (
    as_labels,
    check_bool,
    check_option,
    check_positive_int,
)
from bensemble.calibration._api import PROB_FLOOR, check_min_prob
from bensemble.calibration._inputs import check_bounds, member_logits, state_tensor
from bensemble.calibration._newton import (
    DEFAULT_TEMPERATURE_BOUNDS,
    CalibrationFitError,
    SolverSettings,
    solve_temperature,
)
from bensemble.calibration._spread import PooledNLL, solve_spread

__all__ = ["DEFAULT_SPREAD_BOUNDS", "EpistemicRecalibrator"]

_F64 = torch.float64
#: Admissible spread factors ``(s_min, s_max)``: ``log s`` in ``[-7, 4]``.
DEFAULT_SPREAD_BOUNDS: tuple[float, float] = (math.exp(-7.0), math.exp(4.0))
ON_BOUNDARY = ("warn", "raise")


class EpistemicRecalibrator(nn.Module):
    r"""Recalibrate member predictions: temperature for their centre, a factor for their spread.

    For member logits ``z_m`` ``[M, N, K]`` with centre ``zbar = mean_m z_m``,

    .. math:: z'_m = \bar z / T + s\,(z_m - \bar z),

    so ``T`` temperature-scales the centre (for ``s -> 0`` the members collapse onto
    ``softmax(zbar / T)``, ordinary temperature scaling of the centre) and ``s`` stretches
    (``s > 1``) or shrinks (``s < 1``) the members' disagreement around it; ``T = s = 1`` is the
    identity, the state before :meth:`fit`. Member probabilities are read as logits through
    ``log max(p, min_prob)`` (the map ignores per-row shifts; the floor keeps members with exact
    zeros, e.g. trees, finite); binary members ``[M, N]`` (``binary=True``) through
    ``(log(1 - p), log p)``, i.e. the map acts on their log-odds. Pass logits when you have
    them: probabilities near 0 or 1 have lost the digits their logits had.

    **The fit.** ``(T, s)`` minimise the NLL of the pooled prediction ``mean_m softmax(z'_m)``
    on the calibration data (exact Newton on ``(log T, log s)`` in float64, started from the
    temperature of the collapsed members and the best of a scan over ``log s``). The map moves
    the pooled prediction in a spread-dependent way - stretching the members flattens the pooled
    probabilities most where the members disagree - so the fit makes the pooled prediction
    calibrated *given the members' disagreement*, which is what the TECE measures
    (``E_x (P(y | members) - pooled)^2`` with the default ``EU``), with a proper scoring rule and
    no bins. Members built ``c`` times too narrow or too wide around a known truth get
    ``s = 1 / c`` back within a few percent (tests/calibration/test_recalibration.py).

    Why not choose ``s`` by the binned EECE itself, with its bins held fixed: per bin the EECE's
    term is ``(acc - conf)^2 - D`` where ``D = trust - Var_h conf_h >= 0`` is the spread of the
    member deviations *within* the bin, and ``D`` grows like ``s^2``; the scan settles where
    ``s^2 D`` cancels the (partly label-noise) squared bias, below the right spread. On the
    synthetic members above it picks ``s`` 1.5 to 3.5 times below ``1 / c`` when the members are
    fixed functions and 4 to 14 times below (toward collapse) when their deviations are drawn at
    every point, leaving the pooled prediction's squared error to the truth (the TECE) two to
    three orders of magnitude above the pooled-NLL fit's (tests/calibration/
    test_recalibration.py, ``benchmarks/epistemic_recalibration.py``).

    **Streaming.** The map acts on each sample's members alone: fit on an in-memory calibration
    part (the fit holds it in float64, about eight copies of ``[M, N, K]`` at its peak), then
    :meth:`transform` chunk by chunk (``[M, chunk, K]``); chunks give the rows of
    the whole.

    Args:
        from_logits: Whether the inputs are member logits (``[M, N, K]``; ``[M, N]`` log-odds
            with ``binary=True``) rather than probabilities. The output of :meth:`transform`
            is in the same representation.
        binary: Inputs are ``[M, N]`` positive-class predictions of a binary task.
        temperature_bounds: Admissible ``(T_min, T_max)``; default ``(e^-4, e^4)``.
        spread_bounds: Admissible ``(s_min, s_max)``; default ``(e^-7, e^4)``.
        min_prob: Floor of the probabilities before the logarithm (``0 < min_prob < 1``).
        on_boundary: ``"warn"`` (default: warn, keep the bound) or ``"raise"``
            (:class:`~bensemble.calibration.CalibrationFitError`) when the optimum lies at an
            end of the bounds (e.g. ``s_min``: the members' spread only hurts the pooled NLL).
        max_iter: Newton iteration budget.

    Attributes:
        log_temperature, log_spread: float64 buffers ``[1]``, ``log T`` and ``log s``.
        temperature_, spread_: ``T`` and ``s`` as Python floats.
        converged_, at_boundary_, n_iter_, nll_: Set by :meth:`fit` (``nll_``: the pooled NLL
            in nats on the fitting data); ``at_boundary_`` names the bounds reached.

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> centre = 2 * torch.randn(1, 4000, 3, generator=g, dtype=torch.float64)
        >>> noise = torch.randn(8, 4000, 3, generator=g, dtype=torch.float64)
        >>> noise = noise - noise.mean(0)  # members centred on the truth's centre
        >>> truth = torch.softmax(centre + noise, -1).mean(0)  # the well-spread members' pool
        >>> labels = torch.multinomial(truth, 1, generator=g).squeeze(1)
        >>> narrow = torch.softmax(centre + 0.5 * noise, -1)  # spread too narrow by c = 0.5
        >>> recal = EpistemicRecalibrator().fit(narrow, labels)
        >>> abs(recal.spread_ - 2.0) < 0.2, abs(recal.temperature_ - 1.0) < 0.1
        (True, True)
        >>> recal.transform(narrow).shape
        torch.Size([8, 4000, 3])
    """

    def __init__(
        self,
        *,
        from_logits: bool = False,
        binary: bool = False,
        temperature_bounds: tuple[float, float] = DEFAULT_TEMPERATURE_BOUNDS,
        spread_bounds: tuple[float, float] = DEFAULT_SPREAD_BOUNDS,
        min_prob: float = PROB_FLOOR,
        on_boundary: str = "warn",
        max_iter: int = 100,
    ) -> None:
        super().__init__()
        fn = "EpistemicRecalibrator"
        self.from_logits = check_bool(from_logits, "from_logits", fn)
        self.binary = check_bool(binary, "binary", fn)
        self.temperature_bounds = check_bounds(temperature_bounds, fn)
        self.spread_bounds = _check_spread_bounds(spread_bounds, fn)
        self.min_prob = check_min_prob(min_prob, fn)
        self.on_boundary = check_option(on_boundary, "on_boundary", ON_BOUNDARY, fn)
        self.max_iter = check_positive_int(max_iter, "max_iter", fn)
        self.register_buffer("log_temperature", torch.zeros(1, dtype=_F64))
        self.register_buffer("log_spread", torch.zeros(1, dtype=_F64))

    @property
    def temperature_(self) -> float:
        """The temperature ``T`` applied to the members' centre."""
        return math.exp(float(self.log_temperature.reshape(-1)[0]))

    @property
    def spread_(self) -> float:
        """The factor ``s`` applied to the members' deviations from their centre."""
        return math.exp(float(self.log_spread.reshape(-1)[0]))

    # ---------------------------------------------------------------- inputs
    def _member_logits(self, value: Any, fn: str) -> tuple[torch.Tensor, torch.dtype]:
        """Float64 member logits ``[M, N, K]`` (``K = 2`` for binary input) and output dtype."""
        return member_logits(
            value, fn, from_logits=self.from_logits, binary=self.binary, min_prob=self.min_prob
        )

    def _mapped(self, z: torch.Tensor) -> torch.Tensor:
        t = torch.exp(self.log_temperature.to(device=z.device, dtype=_F64))
        s = torch.exp(self.log_spread.to(device=z.device, dtype=_F64))
        centre = z.mean(dim=0)
        return centre / t + s * (z - centre)

    # ---------------------------------------------------------------- fit / transform
    def fit(self, member_probs: Any, labels: Any) -> EpistemicRecalibrator:
        """Fit ``(T, s)`` by the pooled NLL on a calibration split.

        Args:
            member_probs: Member probabilities ``[M, N, K]`` (``[M, N]`` with ``binary=True``;
                logits with ``from_logits=True``), held out from training. Not modified.
            labels: Integer labels ``[N]`` in ``[0, K)``.

        Returns:
            ``self``. A refused input raises ``ValueError`` and leaves the previous fit.
        """
        fn = "EpistemicRecalibrator.fit"
        self.temperature_bounds = check_bounds(self.temperature_bounds, fn)
        self.spread_bounds = _check_spread_bounds(self.spread_bounds, fn)
        check_option(self.on_boundary, "on_boundary", ON_BOUNDARY, fn)
        max_iter = check_positive_int(self.max_iter, "max_iter", fn)
        z, _ = self._member_logits(member_probs, fn)
        y = as_labels(labels, "labels", fn, n=z.shape[1], num_classes=z.shape[2], device=z.device)
        objective = PooledNLL(z, y)
        with warnings.catch_warnings():  # the collapsed members' temperature: a start only
            warnings.simplefilter("ignore", RuntimeWarning)
            start = SolverSettings(1.0, self.temperature_bounds, 100, "warn", fn, owned=True)
            centre = solve_temperature(objective.zbar.clone(), y, start)
        if objective.has_spread():
            t_box = tuple(math.log(1.0 / t) for t in reversed(self.temperature_bounds))
            s_box = tuple(math.log(s) for s in self.spread_bounds)
            fit = solve_spread(objective, (t_box, s_box), -math.log(centre.temperature), max_iter)
            temperature, spread, converged = fit.temperature, fit.spread, fit.converged
            ends, n_iter, nll = fit.at_boundary, fit.n_iter, fit.nll
        else:  # every member identical: nothing to rescale
            warnings.warn(
                f"{fn}: the members are identical (no spread to rescale); only the "
                "temperature is fitted and the spread factor stays 1.",
                RuntimeWarning,
                stacklevel=2,
            )
            temperature, spread, converged = centre.temperature, 1.0, centre.converged
            n_iter, nll = centre.n_iter, centre.nll
            t_min = self.temperature_bounds[0]
            ends = (("T_min" if temperature <= t_min else "T_max"),) if centre.at_boundary else ()
        if ends:
            message = (
                f"{fn}: the pooled-NLL optimum lies at the end of the bounds ({', '.join(ends)}): "
                f"T = {temperature:.4g}, s = {spread:.4g}. At s_min the members' spread only "
                "hurts the pooled prediction."
            )
            if self.on_boundary == "raise":
                raise CalibrationFitError(message + " Widen the bounds or use on_boundary='warn'.")
            warnings.warn(message + " Keeping the bound.", RuntimeWarning, stacklevel=2)
        log_t, log_s = math.log(temperature), math.log(spread)
        with torch.no_grad():
            self.log_temperature.fill_(log_t)
            self.log_spread.fill_(log_s)
        self.converged_, self.at_boundary_ = converged, ends
        self.n_iter_, self.nll_ = n_iter, nll
        return self

    def transform(self, member_probs: Any) -> torch.Tensor:
        """Recalibrated members, in the representation and layout of the input.

        Args:
            member_probs: ``[M, N, K]`` member probabilities (``[M, N]`` with ``binary=True``;
                logits / log-odds with ``from_logits=True``). Any ``N``: a chunk of a stream.

        Returns:
            ``[M, N, K]`` (``[M, N]``) member probabilities - or member logits (log-odds) with
            ``from_logits=True`` - without gradients, float32 / float64 as the input.
        """
        fn = "EpistemicRecalibrator.transform"
        z, dtype = self._member_logits(member_probs, fn)
        with torch.no_grad():
            w = self._mapped(z)
            if self.from_logits:
                out = w[..., 1] - w[..., 0] if self.binary else w
            else:
                p = torch.softmax(w, dim=-1)
                out = p[..., 1] if self.binary else p
        return out.to(dtype)

    def predict_proba(self, member_probs: Any) -> torch.Tensor:
        """The pooled prediction ``mean_m softmax(z'_m)``: ``[N, K]`` (``[N]`` with
        ``binary=True``, the positive class), without gradients."""
        fn = "EpistemicRecalibrator.predict_proba"
        z, dtype = self._member_logits(member_probs, fn)
        with torch.no_grad():
            pooled = torch.softmax(self._mapped(z), dim=-1).mean(dim=0)
        return (pooled[..., 1] if self.binary else pooled).to(dtype)

    def forward(self, member_probs: Any) -> torch.Tensor:
        """Calling the module is :meth:`transform`."""
        return self.transform(member_probs)

    def extra_repr(self) -> str:
        mode = ", binary=True" if self.binary else ""
        return (
            f"temperature={self.temperature_:.4g}, spread={self.spread_:.4g}, "
            f"from_logits={self.from_logits}{mode}"
        )

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # noqa: ANN001
        fn = "EpistemicRecalibrator.load_state_dict"
        for name in ("log_temperature", "log_spread"):
            key = prefix + name
            if key in state_dict:
                t = state_tensor(state_dict[key], key, fn, None)  # one finite element
                state_dict[key] = t.reshape(1).to(torch.float64)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


def _check_spread_bounds(bounds: Any, fn: str) -> tuple[float, float]:
    """``(s_min, s_max)`` with ``0 < s_min < s_max`` finite."""
    try:
        return check_bounds(bounds, fn)
    except ValueError:
        raise ValueError(
            f"{fn}: `spread_bounds` must be a pair (s_min, s_max) with 0 < s_min < s_max "
            f"(got {bounds!r})"
        ) from None
