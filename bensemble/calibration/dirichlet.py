"""Dirichlet calibration (Kull et al., 2019): a full affine map of the log-probabilities, with the
off-diagonal and intercept regularisation (ODIR) that keeps it from over-fitting."""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
import torch.nn.functional as F

from bensemble._validation import check_positive, check_positive_int
from bensemble.calibration._api import (
    PROB_FLOOR,
    ProbabilityCalibrator,
    as_numpy,
    check_min_prob,
    shape_is,
)
from bensemble.calibration._lbfgs import CONVERGENCE_GTOL, minimise

__all__ = ["DirichletCalibration"]

_F64 = torch.float64
#: ``K^2 + K`` parameters, about 45 float64 copies of them (L-BFGS history, gradients): 1024
#: classes already take ~380 MB.
MAX_CLASSES = 1024


def odir_objective(
    log_p: torch.Tensor,
    y: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    off_diagonal_l2: float,
    intercept_l2: float,
) -> torch.Tensor:
    r"""``mean NLL + lambda / (K (K - 1)) sum_{i != j} W_ij^2 + mu / K sum_j b_j^2``."""
    k = weight.shape[0]
    loss = F.cross_entropy(log_p @ weight.T + bias, y)
    if off_diagonal_l2 > 0.0:
        off = weight - torch.diag_embed(torch.diagonal(weight))
        loss = loss + off_diagonal_l2 / (k * (k - 1)) * (off * off).sum()
    if intercept_l2 > 0.0:
        loss = loss + intercept_l2 / k * (bias * bias).sum()
    return loss


class DirichletCalibration(ProbabilityCalibrator):
    r"""Dirichlet calibration: ``q = softmax(W log p + b)`` with ``W [K, K]`` and ``b [K]``.

    The map Kull et al. (2019) derive from Dirichlet-distributed class probabilities: matrix
    scaling applied to the log-probabilities, so it calibrates any probabilistic classifier
    (trees and ensembles included, whose logits are not at hand). ``W`` and ``b`` minimise

    .. math:: \frac{1}{N}\sum_i -\log q_{i, y_i}
              + \frac{\lambda}{K(K-1)} \sum_{j \ne l} W_{jl}^2 + \frac{\mu}{K} \sum_j b_j^2,

    the paper's ODIR regularisation (off-diagonal and intercept), which shrinks the map toward a
    per-class scaling (``lambda``) and no shift (``mu``) while leaving the diagonal free; the
    paper selects both by cross-validation, typically among powers of ten. The problem is convex;
    it is solved in float64 by L-BFGS with a strong-Wolfe line search from the identity map.
    From logits the log-probabilities are exact (``log_softmax``); they are floored at
    ``log(min_prob)`` (default ``log 1e-300``: only exact zeros are changed). With
    ``lambda = mu = 0`` this is unpenalised multinomial logistic regression on ``log p``, which
    the tests match with scikit-learn to 1e-6 (and the penalised objective with scipy's
    L-BFGS-B).

    Args:
        off_diagonal_l2: ``lambda >= 0``.
        intercept_l2: ``mu >= 0``.
        max_iter: L-BFGS iteration budget.
        min_prob: Floor of the probabilities before the logarithm (``0 < min_prob < 1``); exact
            zeros (trees) need one.
        from_logits: Whether ``fit`` / ``transform`` receive logits instead of probabilities.

    Attributes:
        weight, bias: float64 buffers ``[K, K]`` and ``[K]`` of the fitted map.
        weight_, bias_: The same as float64 numpy arrays.
        converged_: Whether the final max-abs gradient is at most 1e-6 (set by :meth:`fit`).
        n_iter_, nll_: L-BFGS iterations; mean NLL of the fitted map on the fitting data.

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> logits = torch.randn(3000, 3, generator=g, dtype=torch.float64)
        >>> y = torch.multinomial(logits.softmax(-1), 1, generator=g).squeeze(1)
        >>> cal = DirichletCalibration(off_diagonal_l2=1e-2).fit((3 * logits).softmax(-1), y)
        >>> bool(abs(cal.weight_.diagonal() - 1 / 3).max() < 0.1)  # undoes the factor 3
        True
    """

    _name = "DirichletCalibration"
    _state_names = ("weight", "bias")

    def __init__(
        self,
        off_diagonal_l2: float = 0.0,
        intercept_l2: float = 0.0,
        *,
        max_iter: int = 200,
        min_prob: float = PROB_FLOOR,
        from_logits: bool = False,
    ) -> None:
        super().__init__(from_logits=from_logits)
        fn = self._name
        self.off_diagonal_l2 = check_positive(
            off_diagonal_l2, "off_diagonal_l2", fn, allow_zero=True
        )
        self.intercept_l2 = check_positive(intercept_l2, "intercept_l2", fn, allow_zero=True)
        self.max_iter = check_positive_int(max_iter, "max_iter", fn)
        self.min_prob = check_min_prob(min_prob, fn)

    @property
    def weight_(self) -> Any:
        self._require_fit(f"{self._name}.weight_")
        return as_numpy(self.weight)

    @property
    def bias_(self) -> Any:
        self._require_fit(f"{self._name}.bias_")
        return as_numpy(self.bias)

    def _check_hyperparameters(self, fn: str) -> None:
        super()._check_hyperparameters(fn)
        check_positive(self.off_diagonal_l2, "off_diagonal_l2", fn, allow_zero=True)
        check_positive(self.intercept_l2, "intercept_l2", fn, allow_zero=True)
        check_positive_int(self.max_iter, "max_iter", fn)
        check_min_prob(self.min_prob, fn)

    def _features(self, log_p: torch.Tensor) -> torch.Tensor:
        return log_p.clamp_min(math.log(self.min_prob))

    def _fit_map(self, p: torch.Tensor, log_p: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
        fn = f"{self._name}.fit"
        k = p.shape[1]
        if k > MAX_CLASSES:
            raise ValueError(
                f"{fn}: `probs` must have at most {MAX_CLASSES} classes for a full K x K map "
                f"(got {k}); use VectorScaling or a one-vs-all calibrator for more classes"
            )
        log_p = self._features(log_p)
        lam, mu = float(self.off_diagonal_l2), float(self.intercept_l2)

        def objective(params: list[torch.Tensor]) -> torch.Tensor:
            return odir_objective(log_p, y, params[0], params[1], lam, mu)

        initial = [
            torch.eye(k, dtype=_F64, device=p.device),
            torch.zeros(k, dtype=_F64, device=p.device),
        ]
        result = minimise(objective, initial, self.max_iter)
        if not result.finite:
            raise ValueError(
                f"{fn}: `probs` must allow a finite fit (the L-BFGS iterates became "
                "non-finite); check the probabilities for degenerate columns"
            )
        weight, bias = result.params
        with torch.no_grad():
            nll = float(F.cross_entropy(log_p @ weight.T + bias, y))
        if not result.converged:
            warnings.warn(
                f"{fn}: L-BFGS stopped after {result.n_iter} iterations with gradient "
                f"{result.max_gradient:.2e} > {CONVERGENCE_GTOL:g}; the data may be separable "
                "(raise off_diagonal_l2 / intercept_l2) or max_iter too small.",
                RuntimeWarning,
                stacklevel=3,
            )
        return {
            "weight": weight,
            "bias": bias,
            "converged_": result.converged,
            "n_iter_": result.n_iter,
            "nll_": nll,
        }

    def _apply_map(self, p: torch.Tensor, log_p: torch.Tensor) -> torch.Tensor:
        weight, bias = self._fitted("weight"), self._fitted("bias")
        return torch.softmax(self._features(log_p) @ weight.T + bias, dim=1)

    def _check_state(self, state: dict[str, torch.Tensor], k: int, fn: str) -> None:
        shape_is(state["weight"], (k, k), fn, "weight")
        shape_is(state["bias"], (k,), fn, "bias")

    def _repr_options(self) -> list[str]:
        return [f"off_diagonal_l2={self.off_diagonal_l2:g}", f"intercept_l2={self.intercept_l2:g}"]
