"""Beta calibration (Kull, Silva Filho and Flach, 2017): a three-parameter logistic map of the log
probability and the log complement, fitted by constrained maximum likelihood."""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
import torch.nn.functional as F

from bensemble._validation import check_positive_int
from bensemble.calibration._api import (
    PROB_FLOOR,
    ProbabilityCalibrator,
    as_numpy,
    check_min_prob,
    log_complement,
    require,
    shape_is,
)
from bensemble.calibration.histogram import combine_one_vs_all, one_vs_all_columns

__all__ = ["BetaCalibration"]

_F64 = torch.float64
_GTOL = 1e-10  # convergence: max |gradient| of the mean NLL
_HALVINGS = 40
#: The four faces of ``a, b >= 0``: free, a = 0, b = 0, both 0 (the intercept is always free).
_FACES = torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 1.0], [1.0, 0.0, 1.0], [0.0, 0.0, 1.0]])


def beta_features(log_p: torch.Tensor, log_floor: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The features ``(log p, -log(1 - p))``, each ``[G, N]``, of the one-vs-all maps of
    ``log_p [N, K]`` (``G = 1``: the positive class for ``K = 2``; ``G = K`` otherwise), both
    logarithms floored at ``log_floor``. ``log(1 - p)`` is the log-sum of the other classes'
    probabilities, exact near ``p = 1``."""
    if log_p.shape[1] == 2:
        own, rest = log_p[:, 1:], log_p[:, :1]
    else:
        own, rest = log_p, log_complement(log_p)
    return own.T.clamp_min(log_floor), -(rest.T.clamp_min(log_floor))


def _logit(u: tuple[torch.Tensor, torch.Tensor], theta: torch.Tensor) -> torch.Tensor:
    """``a u1 + b u2 + c`` for ``theta [F, G, 3]`` and features ``[G, N]`` -> ``[F, G, N]``
    (elementwise: no ``[.., N, 3]`` temporary, no reduction whose order could vary)."""
    return theta[..., 0:1] * u[0] + theta[..., 1:2] * u[1] + theta[..., 2:3]


def _mean_nll(u: tuple[torch.Tensor, torch.Tensor], t: torch.Tensor, theta: torch.Tensor):
    eta = _logit(u, theta)
    return (F.softplus(eta) - t * eta).mean(dim=-1)  # [F, G]


def fit_beta(
    u: tuple[torch.Tensor, torch.Tensor], t: torch.Tensor, max_iter: int
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The constrained MLE ``(a, b, c)`` with ``a, b >= 0`` of each map.

    Args:
        u: the features ``(log p, -log(1 - p))``, each ``[G, N]`` (:func:`beta_features`).
        t: ``[G, N]`` 0/1 targets.
        max_iter: Newton iteration budget.

    The NLL is convex, so the constrained optimum is the best feasible optimum of the four faces
    (``a, b`` free; ``a = 0``; ``b = 0``; both 0). All ``4 G`` problems run as one batch of damped
    Newton steps (a step is halved, up to 40 times, until the NLL does not increase); memory is a
    few ``[4, G, N]`` tensors.

    Returns ``(coef [G, 3], max |gradient| [G] of the chosen face, iterations)``.
    """
    mask = _FACES.to(device=t.device, dtype=_F64)[:, None, :].expand(4, t.shape[0], 3)
    theta = torch.tensor([1.0, 1.0, 0.0], dtype=_F64, device=t.device) * mask  # identity map
    nll = _mean_nll(u, t, theta)
    eye = torch.eye(3, dtype=_F64, device=t.device)
    free = mask[..., :, None] * mask[..., None, :]
    features = (u[0], u[1], torch.ones_like(u[0]))
    gmax = torch.full_like(nll, torch.inf)
    it = 0
    while it < max_iter:
        it += 1
        prob = torch.sigmoid(_logit(u, theta))
        residual = prob - t
        grad = torch.stack([(residual * f).mean(-1) for f in features], dim=-1) * mask
        gmax = grad.abs().amax(dim=-1)
        if bool((gmax <= _GTOL).all()):
            break
        curvature = prob * (1.0 - prob)
        hess = torch.empty(*nll.shape, 3, 3, dtype=_F64, device=t.device)
        for i in range(3):  # the six distinct entries of the 3 x 3 Hessians
            weighted = curvature * features[i]
            for j in range(i, 3):
                hess[..., i, j] = hess[..., j, i] = (weighted * features[j]).mean(-1)
        hess = hess * free + eye * (1.0 - free) + 1e-12 * eye  # held coordinates: identity
        step = -torch.linalg.solve(hess, grad.unsqueeze(-1)).squeeze(-1) * mask
        size = torch.ones_like(nll)
        pending = gmax > _GTOL
        for _ in range(_HALVINGS):
            trial = theta + size[..., None] * step
            trial_nll = _mean_nll(u, t, trial)
            ok = (trial_nll <= nll) | ~pending
            theta = torch.where((ok & pending)[..., None], trial, theta)
            nll = torch.where(ok & pending, trial_nll, nll)
            pending = pending & ~ok
            if not bool(pending.any()):
                break
            size = torch.where(pending, size * 0.5, size)
    feasible = (theta[..., 0] >= 0.0) & (theta[..., 1] >= 0.0)
    best = torch.where(feasible, nll, torch.inf).argmin(dim=0)  # face 3 is always feasible
    coef = theta.gather(0, best.view(1, -1, 1).expand(1, -1, 3)).squeeze(0)  # a, b >= 0
    return coef, gmax.gather(0, best.view(1, -1)).squeeze(0), it


class BetaCalibration(ProbabilityCalibrator):
    r"""Beta calibration: ``logit q = a log p - b log(1 - p) + c`` with ``a, b >= 0``.

    For a binary task (two classes, or ``[N]`` positive-class probabilities) the calibrated
    probability of the positive class is

    .. math:: \hat q(p) = \sigma\bigl(a \log p - b \log(1 - p) + c\bigr),

    the map Kull et al. (2017) derive from beta-distributed scores: it contains the identity
    (``a = b = 1, c = 0``), logistic (Platt) scaling of the log-odds (``a = b``), and maps
    shaped like an inverse sigmoid that logistic calibration cannot express. ``(a, b, c)``
    minimise the mean NLL subject to ``a, b >= 0`` (which keeps the map non-decreasing): a
    Newton solve on each face of the constraint, the best feasible one kept, which is the exact
    constrained optimum of this convex problem (the ``betacal`` package refits one face
    heuristically). ``log(1 - p)`` is computed from the other classes' probabilities (exact
    near ``p = 1``), from logits both logarithms are exact, and both are floored at
    ``log(min_prob)`` (default ``log 1e-300``: only exact zeros are changed).
    With ``K > 2`` classes each class gets its own one-vs-all map and each row is divided by its
    sum (netcal's multi-class variant is a multinomial model instead).

    Where the unconstrained optimum already has ``a, b >= 0`` this is logistic regression on the
    features ``(log p, -log(1 - p))``: the tests match scikit-learn's unpenalised
    ``LogisticRegression`` to 1e-6; netcal's ``BetaCalibration`` (scipy's L-BFGS-B with a
    finite-difference gradient) stops short of the optimum, a difference the tests bound.

    Args:
        max_iter: Newton iteration budget.
        min_prob: Floor of ``p`` and ``1 - p`` before the logarithms (``0 < min_prob < 1``);
            exact zeros (trees) need one.
        from_logits: Whether ``fit`` / ``transform`` receive logits instead of probabilities.

    Attributes:
        coef: ``[G, 3]`` float64 buffer of ``(a, b, c)`` per map (``G = 1`` for two classes).
        a_, b_, c_: ``[G]`` float64 numpy arrays of the three parameters.
        converged_: Whether every map's gradient fell below 1e-10 (set by :meth:`fit`).
        n_iter_: Newton iterations used.

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> p = torch.rand(4000, generator=g, dtype=torch.float64)
        >>> y = (torch.rand(4000, generator=g, dtype=torch.float64) < p**3).long()  # too high
        >>> cal = BetaCalibration().fit(p, y)
        >>> bool(cal.transform(torch.tensor([0.5])) < 0.3)  # the truth is 0.125
        True
    """

    _name = "BetaCalibration"
    _state_names = ("coef",)

    def __init__(
        self, max_iter: int = 100, *, min_prob: float = PROB_FLOOR, from_logits: bool = False
    ) -> None:
        super().__init__(from_logits=from_logits)
        self.max_iter = check_positive_int(max_iter, "max_iter", self._name)
        self.min_prob = check_min_prob(min_prob, self._name)

    def _check_hyperparameters(self, fn: str) -> None:
        super()._check_hyperparameters(fn)
        check_positive_int(self.max_iter, "max_iter", fn)
        check_min_prob(self.min_prob, fn)

    def _parameter(self, column: int) -> Any:
        self._require_fit(f"{self._name}.{'abc'[column]}_")
        return as_numpy(self.coef[:, column])

    @property
    def a_(self) -> Any:
        return self._parameter(0)

    @property
    def b_(self) -> Any:
        return self._parameter(1)

    @property
    def c_(self) -> Any:
        return self._parameter(2)

    def _fit_map(self, p: torch.Tensor, log_p: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
        _, targets = one_vs_all_columns(p, y)
        u = beta_features(log_p, math.log(self.min_prob))
        coef, gmax, it = fit_beta(u, targets.T.contiguous(), self.max_iter)
        converged = bool((gmax <= _GTOL * 100).all())
        if not converged:
            warnings.warn(
                f"{self._name}.fit: Newton stopped after {it} iterations with gradient "
                f"{float(gmax.max()):.2e}; the calibration data may be separable (the NLL has no "
                "finite minimiser) or max_iter too small.",
                RuntimeWarning,
                stacklevel=3,
            )
        return {"coef": coef, "converged_": converged, "n_iter_": it}

    def _apply_map(self, p: torch.Tensor, log_p: torch.Tensor) -> torch.Tensor:
        u = beta_features(log_p, math.log(self.min_prob))
        eta = _logit(u, self._fitted("coef"))  # [G, N]
        return combine_one_vs_all(torch.sigmoid(eta).T, p.shape[1])

    def _check_state(self, state: dict[str, torch.Tensor], k: int, fn: str) -> None:
        coef = state["coef"]
        shape_is(coef, (1 if k == 2 else k, 3), fn, "coef")
        require(
            bool((coef[:, :2] >= 0).all()),
            fn,
            "coef",
            "hold a, b >= 0 in its first two columns",
            lambda: f"min {float(coef[:, :2].min())}",
        )

    def _repr_options(self) -> list[str]:
        return [f"max_iter={self.max_iter}"] if self.max_iter != 100 else []
