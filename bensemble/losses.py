"""Training losses for variational networks (bensemble 0.2 compatibility).

:class:`GaussianLikelihood` is a regression likelihood with one learned noise scale;
:class:`VariationalLoss` turns per-sample likelihoods and a KL term into the negative ELBO or,
for ``alpha != 1``, the negative Renyi variational bound (Li and Turner, 2016).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from bensemble._validation import check_positive, check_positive_int

__all__ = ["GaussianLikelihood", "VariationalLoss"]

# Added to sigma, and the floor of the variance (the floor torch.nn.GaussianNLLLoss uses).
_SIGMA_SHIFT = 1e-6
_VAR_FLOOR = 1e-6


def _check_finite_number(value: object, name: str, fn: str) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok:
        raise ValueError(f"{fn}: `{name}` must be a finite number (got {value!r})")
    return float(value)


def _check_tensor(value: object, name: str, fn: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{fn}: `{name}` must be a torch tensor (got {type(value).__name__})")
    return value


class GaussianLikelihood(nn.Module):
    """Gaussian negative log-likelihood with a learned, shared (homoscedastic) noise scale.

    ``sigma = softplus(log_sigma) + 1e-6`` and, elementwise, with ``var = max(sigma^2, 1e-6)``::

        nll = 0.5 * (log(var) + (preds - target)^2 / var)

    the value of ``torch.nn.GaussianNLLLoss(reduction="none")`` (the constant
    ``0.5 log(2 pi)`` left out). ``preds`` and ``target`` broadcast, so ``preds [S, N, ...]``
    holding ``S`` sampled predictions scores against ``target [N, ...]``.

    Args:
        init_log_sigma: initial value of the raw parameter ``log_sigma`` (despite the name, as in
            bensemble 0.2, ``sigma`` is its softplus).

    Example:
        >>> lik = GaussianLikelihood()
        >>> lik(torch.zeros(3), torch.ones(3)).shape
        torch.Size([3])
    """

    def __init__(self, init_log_sigma: float = -2.0) -> None:
        super().__init__()
        value = _check_finite_number(init_log_sigma, "init_log_sigma", "GaussianLikelihood")
        self.log_sigma = nn.Parameter(torch.tensor([value]))

    def _sigma(self) -> torch.Tensor:
        return F.softplus(self.log_sigma) + _SIGMA_SHIFT

    @property
    def sigma(self) -> float:
        """The current noise standard deviation."""
        return float(self._sigma().detach())

    def forward(self, preds: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Elementwise NLL, shape ``broadcast(preds, target)``.

        Computed in the inputs' floating dtype, at least float32: half-precision inputs return
        float32 (their squared errors over ``var`` overflow float16 at modest scales).
        """
        fn = "GaussianLikelihood"
        preds = _check_tensor(preds, "preds", fn)
        target = _check_tensor(target, "target", fn)
        dtype = torch.promote_types(torch.result_type(preds, target), torch.float32)
        var = self._sigma().pow(2).clamp_min(_VAR_FLOOR).to(dtype)
        return 0.5 * (torch.log(var) + (preds.to(dtype) - target.to(dtype)).pow(2) / var)


class VariationalLoss(nn.Module):
    """Negative ELBO (``alpha = 1``) or negative Renyi bound over ``S`` posterior samples.

    Per sample ``s`` the log weight is the log-likelihood of the batch minus the scaled KL::

        log w_s = sum_i log p(y_i | x_i, w_s) - kl_weight * KL / num_batches

    and the loss is ``-mean_s log w_s`` for ``alpha = 1``, else
    ``-1 / (1 - alpha) * (logsumexp_s((1 - alpha) log w_s) - log S)``.

    Args:
        likelihood_model: module mapping ``(preds, target)`` to elementwise negative
            log-likelihoods (e.g. :class:`GaussianLikelihood`).
        alpha: Renyi divergence order; ``1.0`` gives the ELBO.
        num_batches: mini-batches per epoch; the KL is spread evenly over them.
        kl_weight: extra weight on the KL term (``>= 0``; annealing schedules change it).
    """

    def __init__(
        self,
        likelihood_model: nn.Module,
        alpha: float = 1.0,
        num_batches: int = 1,
        kl_weight: float = 1.0,
    ) -> None:
        super().__init__()
        fn = "VariationalLoss"
        if not callable(likelihood_model):
            raise ValueError(
                f"{fn}: `likelihood_model` must be a callable module "
                f"(got {type(likelihood_model).__name__})"
            )
        self.likelihood_model = likelihood_model
        self.alpha = _check_finite_number(alpha, "alpha", fn)
        self.num_batches = check_positive_int(num_batches, "num_batches", fn)
        self.kl_weight = check_positive(kl_weight, "kl_weight", fn, allow_zero=True)

    def forward(
        self, preds: torch.Tensor, target: torch.Tensor, kl_divergence: torch.Tensor | float
    ) -> torch.Tensor:
        """Scalar loss.

        Args:
            preds: ``[S, N, ...]`` predictions of ``S`` posterior samples, or ``[N, ...]`` (one
                sample, recognised by having ``target``'s rank).
            target: ``[N, ...]`` targets.
            kl_divergence: ``KL(q || p)`` of the whole model (e.g. :func:`bensemble.utils.
                get_total_kl`), a scalar.
        """
        fn = "VariationalLoss"
        preds = _check_tensor(preds, "preds", fn)
        target = _check_tensor(target, "target", fn)
        if preds.ndim == target.ndim:
            preds = preds.unsqueeze(0)
        n_samples = preds.shape[0]
        log_lik = -self.likelihood_model(preds, target)
        # one log-likelihood per posterior sample: sum every axis but the first
        log_lik = log_lik.reshape(n_samples, -1).sum(dim=1) if log_lik.ndim > 1 else log_lik
        log_weights = log_lik - kl_divergence * (self.kl_weight / self.num_batches)
        if abs(self.alpha - 1.0) < 1e-6:
            return -log_weights.mean()
        scale = 1.0 - self.alpha
        bound = torch.logsumexp(scale * log_weights, dim=0) - math.log(n_samples)
        return -bound / scale
