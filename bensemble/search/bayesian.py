"""Neural ensemble search by Bayesian sampling over a trained pool (after Shu et al., UAI 2022).

The pool of ``P`` networks is trained **once** (on the first call) and each member's validation
predictions are cached as ``preds [P, N, *]``. A posterior over pool members follows from their
single-member criterion values ``s_p`` (lower is better):

    pi_p = softmax(-(s_p - min s) / temperature).

* :meth:`NESBayesianSampler.sample_mc` draws ``M`` distinct members with probabilities ``pi``
  (sampling without replacement, Gumbel top-k).
* :meth:`NESBayesianSampler.sample_svgd` runs Stein variational gradient descent with ``M``
  particles ``alpha_i in R^P``; particle ``i`` is the mixture ``w_i = softmax(alpha_i)`` of pool
  members with prediction ``f_i = sum_p w_ip preds_p`` and log-density
  ``log q(alpha_i) = -criterion(f_i) / temperature``. One step, for all particles at once::

      alpha_i += lr / M * sum_j [k_ij grad log q(alpha_j)
                                 + diversity_weight * 2 (alpha_i - alpha_j) k_ij / h],

  with the RBF kernel ``k_ij = exp(-||alpha_i - alpha_j||^2 / h)`` and the median bandwidth
  ``h = med^2 / log(M + 1)``: the first term pulls particles to low-loss mixtures, the second
  repels them from each other. Each particle then names its heaviest pool member (distinct
  members, most confident particles first). Nothing is retrained and no network is re-run.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import torch
from torch import nn

from bensemble._seeds import DEFAULT_SEED
from bensemble._validation import check_positive, check_positive_int, machine_memory_bytes
from bensemble.core.ensemble import Ensemble
from bensemble.search.searchers import _PoolSearch
from bensemble.search.selection import CachedCriterion, ValidationSet
from bensemble.search.space import SearchSpace, sample_config

__all__ = ["NESBayesianSampler"]

#: Initial logit of the pool member a particle starts on.
_INIT_LOGIT = 5.0


class NESBayesianSampler(_PoolSearch):
    """Select a diverse ensemble from a trained pool by posterior sampling (formulas above).

    Args:
        space: the :class:`SearchSpace`.
        train_fn: ``train_fn(model)`` trains a model in place; required.
        pool_size: networks to train.
        ensemble_size: members to select (``<= pool_size``).
        temperature: posterior temperature (``> 0``).
        diversity_weight: weight of the SVGD repulsive term (``>= 0``).
        svgd_steps: SVGD iterations (``>= 1``).
        svgd_lr: SVGD step size (``> 0``).
        device: if given, freshly built networks are moved there before training.
        criterion: lower-is-better ``criterion(members, val_loader, device)``; default
            :data:`~bensemble.search.selection.classification_nll_criterion`. A non-cached
            criterion scores each member once and SVGD then uses the expected log posterior
            ``sum_p w_ip log pi_p`` as the log-density.
        generator, seed: source of every random choice (pool sampling, each member's
            initialisation and training under a seeded and restored global RNG, Monte Carlo
            draws, SVGD initialisation). Default ``seed=0``: :meth:`build_pool`,
            :meth:`sample_mc` and :meth:`sample_svgd` each restart from a seed derived from it,
            so identical calls agree; a ``generator`` is a stream that advances; ``seed=None``:
            torch's global random state.
    """

    def __init__(
        self,
        space: SearchSpace,
        train_fn: Callable[[nn.Module], None],
        pool_size: int = 50,
        ensemble_size: int = 5,
        temperature: float = 1.0,
        diversity_weight: float = 0.5,
        svgd_steps: int = 20,
        svgd_lr: float = 0.1,
        device=None,
        criterion: Callable | None = None,
        *,
        generator: torch.Generator | None = None,
        seed: int | None = DEFAULT_SEED,
    ) -> None:
        fn = "NESBayesianSampler"
        self._setup(
            fn, space, pool_size, ensemble_size, train_fn, device, criterion, generator, seed
        )
        self.temperature = check_positive(temperature, "temperature", fn)
        self.diversity_weight = check_positive(
            diversity_weight, "diversity_weight", fn, allow_zero=True
        )
        self.svgd_steps = check_positive_int(svgd_steps, "svgd_steps", fn)
        self.svgd_lr = check_positive(svgd_lr, "svgd_lr", fn)
        # SVGD holds [M, M, P] float64 differences (and ~3 temporaries of that size)
        per_pair, memory = 4 * 8 * self.pool_size, machine_memory_bytes()
        if self.ensemble_size**2 * per_pair > memory:
            raise ValueError(
                f"{fn}: `ensemble_size` must be <= {math.isqrt(memory // per_pair)} for a pool of "
                f"{self.pool_size} so that SVGD's [M, M, P] particle differences fit in this "
                f"machine's memory ({memory} bytes) (got {self.ensemble_size})"
            )
        self.pool_: list[nn.Module] | None = None
        self._loader = None  # the loader the cached predictions came from

    # ------------------------------------------------------------------ the pool
    def build_pool(self, val_loader) -> NESBayesianSampler:
        """Train the pool (first call only) and cache predictions and scores on ``val_loader``.

        The validation data are read and checked first, so bad data costs no training; the
        pool is kept only once every member is trained (a failure leaves nothing half-built).
        """
        fn = "NESBayesianSampler.build_pool"
        if self._loader is val_loader and self.pool_ is not None:
            return self
        data = ValidationSet(val_loader, fn)
        if self.pool_ is None:
            self.generator = self._source("pool")
            pool, configs = [], []
            for _ in range(self.pool_size):
                config = sample_config(self.space, self.generator)
                pool.append(self._train(config))
                configs.append(config)
            self.pool_, self.configs_ = pool, configs
        if isinstance(self.criterion, CachedCriterion):
            preds = torch.stack([self._cache(data, m) for m in self.pool_])
            self.pool_predictions_, self.targets_ = preds, data.targets
            scores = self.criterion.score(preds, data.targets)
        else:
            self.pool_predictions_, self.targets_ = None, data.targets
            scores = torch.tensor(
                [float(self.criterion([m], data.batches, self.device)) for m in self.pool_],
                dtype=torch.float64,
            )
        self.scores_ = scores.to(torch.float64).cpu()
        self._loader = val_loader
        return self

    def posterior(self) -> torch.Tensor:
        """``pi [P]`` over pool members; members with NaN scores get probability 0."""
        fn = "NESBayesianSampler.posterior"
        if self.pool_ is None or not hasattr(self, "scores_"):
            raise ValueError(f"{fn}: the pool is not built yet; call build_pool(val_loader)")
        scores = self.scores_.clone()
        nan = torch.isnan(scores)
        if bool(nan.all()):
            raise ValueError(f"{fn}: every pool member scored NaN on the validation data")
        if bool(nan.any()):
            warnings.warn(
                f"{fn}: {int(nan.sum())} pool member(s) scored NaN; they get probability 0",
                RuntimeWarning,
                stacklevel=2,
            )
        scores[nan] = float("inf")
        finite = scores[torch.isfinite(scores)]
        low = finite.min() if finite.numel() else torch.tensor(0.0, dtype=torch.float64)
        return torch.softmax(-(scores - low) / self.temperature, dim=0)

    # ------------------------------------------------------------------ sampling
    def sample_mc(self, val_loader) -> Ensemble:
        """``ensemble_size`` distinct members drawn with probabilities ``pi``."""
        self.build_pool(val_loader)
        log_pi = torch.log(self.posterior())
        u = torch.rand(log_pi.shape, generator=self._source("sample_mc"), dtype=torch.float64)
        gumbel = -torch.log(-torch.log(u.clamp(1e-300, 1.0 - 1e-16)))
        keys = torch.where(torch.isfinite(log_pi), log_pi + gumbel, torch.full_like(log_pi, -1e300))
        chosen = torch.argsort(keys, descending=True, stable=True)[: self.ensemble_size]
        self.selected_indices_ = [int(i) for i in chosen]
        return Ensemble.from_models([self.pool_[i] for i in self.selected_indices_])

    def sample_svgd(self, val_loader) -> Ensemble:
        """``ensemble_size`` distinct members chosen by SVGD over pool mixtures (see above)."""
        self.build_pool(val_loader)
        pi = self.posterior()
        n_pool, n_part = len(self.pool_), self.ensemble_size
        u = torch.rand(n_pool, generator=self._source("sample_svgd"), dtype=torch.float64)
        start = torch.argsort(torch.log(pi) - torch.log(-torch.log(u.clamp(1e-300, 1 - 1e-16))),
                              descending=True)[:n_part]  # fmt: skip
        alpha = torch.zeros(n_part, n_pool, dtype=torch.float64)
        alpha[torch.arange(n_part), start] = _INIT_LOGIT
        for _ in range(self.svgd_steps):
            grad = self._grad_log_density(alpha, pi)
            diff = alpha[:, None, :] - alpha[None, :, :]  # [i, j, P] = alpha_i - alpha_j
            sq = diff.pow(2).sum(-1)
            off = sq[~torch.eye(n_part, dtype=torch.bool)]
            med2 = float(off.median()) if off.numel() else 1.0
            h = max(med2, 1e-12) / math.log(n_part + 1.0)
            kernel = torch.exp(-sq / h)
            drive = kernel @ grad
            repulse = (2.0 / h) * (kernel[:, :, None] * diff).sum(dim=1)
            alpha = alpha + self.svgd_lr / n_part * (drive + self.diversity_weight * repulse)
        weights = torch.softmax(alpha, dim=1)
        self.particles_ = weights
        self.selected_indices_ = _distinct_argmax(weights)
        return Ensemble.from_models([self.pool_[i] for i in self.selected_indices_])

    def _grad_log_density(self, alpha: torch.Tensor, pi: torch.Tensor) -> torch.Tensor:
        alpha = alpha.detach().requires_grad_(True)
        weights = torch.softmax(alpha, dim=1)
        if self.pool_predictions_ is not None:
            preds = self.pool_predictions_
            flat = preds.reshape(preds.shape[0], -1)
            mixed = (weights @ flat).reshape(alpha.shape[0], *preds.shape[1:])
            log_q = -self.criterion.score(mixed, self.targets_) / self.temperature
        else:
            log_pi = torch.log(pi.clamp_min(1e-300))
            log_q = weights @ log_pi
        (grad,) = torch.autograd.grad(log_q.sum(), alpha)
        return torch.nan_to_num(grad, nan=0.0, posinf=0.0, neginf=0.0)


def _distinct_argmax(weights: torch.Tensor) -> list[int]:
    """One distinct column per row: rows in order of confidence take their best free column."""
    order = torch.argsort(weights.max(dim=1).values, descending=True, stable=True)
    taken: set[int] = set()
    chosen = [0] * weights.shape[0]
    for row in order.tolist():
        for col in torch.argsort(weights[row], descending=True, stable=True).tolist():
            if col not in taken:
                taken.add(col)
                chosen[row] = col
                break
    return chosen
