"""Bayesian logistic regression fitted by Pólya–Gamma Gibbs sampling; members are posterior draws.

Model: ``y_i ~ Bernoulli(sigmoid(x_i^T beta))`` with the prior ``beta ~ N(0, prior_var I)`` on the
weights and the intercept. Polson, Scott & Windle (2013) augment each observation with
``omega_i ~ PG(1, x_i^T beta)``; given ``omega`` the likelihood is Gaussian in ``beta``, so the
Gibbs sampler alternates two exact conditional draws::

    omega_i | beta ~ PG(1, x_i^T beta)
    beta | omega, y ~ N(m, V),   V = (X^T Omega X + B^{-1})^{-1},   m = V X^T kappa,

with ``Omega = diag(omega)``, ``B = prior_var I`` and ``kappa = y - 1/2``. ``PG(1, c)`` is drawn
exactly by :func:`bensemble.methods._polya_gamma.sample_polya_gamma` (Devroye-style accept/reject,
no truncation). Several chains run side by side in one vectorised sweep; the split-R-hat of the
coefficients reports whether they agree.

Reference: N. G. Polson, J. G. Scott and J. Windle (2013), "Bayesian inference for logistic models
using Pólya–Gamma latent variables", JASA 108(504), 1339–1349. The epistemic-calibration paper
(Hoarau et al., appendix B.1.1) uses the prior ``N(0, 0.5)`` on weights and biases.
"""

from __future__ import annotations

import torch

from bensemble._seeds import DEFAULT_SEED
from bensemble._validation import (
    as_float_tensor,
    as_labels,
    check_allocation,
    check_generator,
    check_positive,
    check_positive_int,
    check_same_length,
)
from bensemble.methods._polya_gamma import _sample_pg1

__all__ = ["BayesianLogisticRegression"]

#: Rows per block when a prediction averages over all posterior draws (bounds memory to
#: ``n_draws * _ROW_BLOCK`` float64 values).
_ROW_BLOCK = 4096


class BayesianLogisticRegression:
    """Binary Bayesian logistic regression, sampled by Pólya–Gamma Gibbs (Polson et al. 2013).

    The posterior predictive is ``P(y = 1 | x, D) ~= (1/S) sum_s sigmoid(x^T beta_s)`` over the kept
    draws ``beta_s``; each draw is one member (one coherent hypothesis) for
    :meth:`sample_members`. See the module docstring for the sampler's two conditional draws.

    Args:
        prior_var: variance of the isotropic Gaussian prior on the weights and the intercept.
        n_samples: number of draws kept after burn-in (and thinning).
        burn_in: Gibbs sweeps discarded at the start of each chain. Chains start from independent
            draws of the Laplace approximation ``N(beta_MAP, H^{-1})`` (mode by Newton's method),
            so burn-in only has to forget that approximation's error.
        thin: keep one sweep in ``thin``.
        n_chains: chains run in parallel (vectorised); each keeps ``ceil(n_samples / n_chains)``
            draws and the first ``n_samples`` of them, ordered sweep by sweep, are kept.
        fit_intercept: append a constant feature (the intercept is the *last* coefficient).
        generator: random source of :meth:`fit` (its state advances with each fit).
        seed: without ``generator``, every :meth:`fit` restarts from this seed (default 0:
            identical fits give identical draws); ``None``: torch's global random state.

    Attributes (after :meth:`fit`):
        coef_samples_: kept draws ``[S, D]`` (``D = n_features + 1`` with the intercept last, or
            ``n_features`` without intercept), on the CPU like all computations here.
        coef_mean_: posterior mean ``[D]`` (mean of the draws).
        rhat_: split-R-hat per coefficient ``[D]`` (Gelman et al. 2013; near 1 when the chains
            agree; values above ~1.01 suggest more burn-in or draws).
        n_features_in_: number of input features.

    Example:
        >>> from bensemble.datasets.toy import make_toy_gaussians
        >>> data = make_toy_gaussians(50, seed=0)
        >>> blr = BayesianLogisticRegression(n_samples=40, burn_in=20, seed=0).fit(data.x, data.y)
        >>> blr.sample_members(data.x[:5], n=10).shape
        torch.Size([10, 5, 2])
    """

    def __init__(
        self,
        prior_var: float = 0.5,
        n_samples: int = 1000,
        burn_in: int = 500,
        thin: int = 1,
        n_chains: int = 4,
        fit_intercept: bool = True,
        generator: torch.Generator | None = None,
        seed: int | None = DEFAULT_SEED,
    ) -> None:
        fn = "BayesianLogisticRegression"
        self.prior_var = check_positive(prior_var, "prior_var", fn)
        self.n_samples = check_positive_int(n_samples, "n_samples", fn)
        self.burn_in = check_positive_int(burn_in, "burn_in", fn, minimum=0)
        self.thin = check_positive_int(thin, "thin", fn)
        self.n_chains = check_positive_int(n_chains, "n_chains", fn)
        if not isinstance(fit_intercept, bool):
            raise ValueError(f"{fn}: `fit_intercept` must be a bool (got {fit_intercept!r})")
        self.fit_intercept = fit_intercept
        check_generator(generator, seed, fn)  # validates types and the either/or rule
        self.generator = generator
        self.seed = seed

    # ------------------------------------------------------------------ fitting
    def fit(self, X, y) -> BayesianLogisticRegression:
        """Run the Gibbs sampler on ``X [N, F]`` and labels ``y [N]`` in {0, 1}; return ``self``."""
        fn = "BayesianLogisticRegression.fit"
        # The sweep is latency-bound (small tensors, one after another): it runs on the CPU.
        x = as_float_tensor(X, "X", fn, ndim=2).cpu()
        labels = as_labels(y, "y", fn, num_classes=2).cpu()
        check_same_length(fn, X=x, y=labels)
        g = check_generator(self.generator, self.seed, fn)
        design = self._design(x)
        n_dim = design.shape[1]
        per_chain = -(-self.n_samples // self.n_chains)
        check_allocation(fn, "n_samples", per_chain * self.n_chains, per_count=n_dim, itemsize=8)
        # every sweep draws one Polya-Gamma variable per chain and sample: [C, N] float64 x ~8
        check_allocation(fn, "n_chains", self.n_chains, per_count=8 * (len(labels) + n_dim**2))

        kappa = labels.to(torch.float64) - 0.5
        x_kappa = (design.T @ kappa)[:, None].expand(self.n_chains, n_dim, 1)
        prior_precision = torch.eye(n_dim, dtype=torch.float64) / self.prior_var
        draws = torch.empty(per_chain, self.n_chains, n_dim, dtype=torch.float64)
        beta = _laplace_starts(design, labels, self.prior_var, self.n_chains, g)
        kept = 0
        for sweep in range(self.burn_in + per_chain * self.thin):
            psi = beta @ design.T  # [C, N]
            omega = _sample_pg1(psi.reshape(-1), g).reshape(psi.shape)
            precision = torch.einsum("cn,nd,ne->cde", omega, design, design) + prior_precision
            chol = torch.linalg.cholesky(precision)
            mean = torch.cholesky_solve(x_kappa, chol)
            noise = torch.randn(mean.shape, generator=g, dtype=torch.float64)
            # beta = m + L^{-T} z has covariance (L L^T)^{-1} = V.
            beta = (mean + torch.linalg.solve_triangular(chol.mT, noise, upper=True))[..., 0]
            after = sweep - self.burn_in
            if after >= 0 and after % self.thin == 0:
                draws[kept] = beta
                kept += 1
        self.rhat_ = _split_rhat(draws)
        self.coef_samples_ = draws.reshape(-1, n_dim)[: self.n_samples]
        self.coef_mean_ = self.coef_samples_.mean(dim=0)
        self.n_features_in_ = int(x.shape[1])
        return self

    # --------------------------------------------------------------- prediction
    def predict_proba(self, X) -> torch.Tensor:
        """Posterior predictive ``[N, 2]``: mean of ``sigmoid(x^T beta_s)`` over the kept draws."""
        x = self._check_x(X, "BayesianLogisticRegression.predict_proba")
        design = self._design(x)
        p1 = torch.cat(
            [
                torch.sigmoid(block @ self.coef_samples_.T).mean(dim=1)
                for block in design.split(_ROW_BLOCK)
            ]
        )
        return torch.stack([1.0 - p1, p1], dim=1)

    def sample_members(
        self, X, n: int | None = None, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Member probabilities ``[n, N, 2]``: member ``m`` is ``sigmoid(x^T beta_{s_m})``.

        Args:
            X: inputs ``[N, F]``.
            n: number of members, at most the number of kept draws ``S`` (``None``: all ``S``).
            generator: with a generator the ``n`` draws are a random subset (without replacement);
                without one they are ``n`` evenly spaced draws of the chain (deterministic).

        A member is a fixed ``beta``, so it gives the same output for the same row whichever
        other rows are in ``X``.
        """
        fn = "BayesianLogisticRegression.sample_members"
        x = self._check_x(X, fn)
        index = self._member_index(n, generator, fn)
        p1 = torch.sigmoid(self._design(x) @ self.coef_samples_[index].T).T  # [n, N]
        return torch.stack([1.0 - p1, p1], dim=-1)

    # ---------------------------------------------------------------- helpers
    def _design(self, x: torch.Tensor) -> torch.Tensor:
        if not self.fit_intercept:
            return x
        return torch.cat([x, torch.ones(x.shape[0], 1, dtype=x.dtype)], dim=1)

    def _check_x(self, X, fn: str) -> torch.Tensor:
        if not hasattr(self, "coef_samples_"):
            raise ValueError(f"{fn}: the model is not fitted yet; call fit(X, y) first")
        x = as_float_tensor(X, "X", fn, ndim=2)
        if x.shape[1] != self.n_features_in_:
            raise ValueError(
                f"{fn}: `X` must have {self.n_features_in_} features as in fit "
                f"(got shape {tuple(x.shape)})"
            )
        return x.cpu()

    def _member_index(self, n, generator, fn: str) -> torch.Tensor:
        n_draws = self.coef_samples_.shape[0]
        if n is None:
            return torch.arange(n_draws)
        n = check_positive_int(n, "n", fn)
        if n > n_draws:
            raise ValueError(
                f"{fn}: `n` must be at most the number of kept draws ({n_draws}) (got {n})"
            )
        g = check_generator(generator, None, fn)
        if g is None:
            return torch.linspace(0, n_draws - 1, n, dtype=torch.float64).round().long()
        return torch.randperm(n_draws, generator=g)[:n]


def _laplace_starts(
    design: torch.Tensor, labels: torch.Tensor, prior_var: float, n_chains: int, g
) -> torch.Tensor:
    """``n_chains`` draws ``[C, D]`` from ``N(beta_MAP, H^{-1})`` of the log posterior.

    Newton's method with step halving on ``log p(beta | y) = sum_i [y_i eta_i - log(1 + e^eta_i)]
    - ||beta||^2 / (2 prior_var)``, a strictly concave function, from ``beta = 0``.
    """
    y = labels.to(torch.float64)
    eye = torch.eye(design.shape[1], dtype=torch.float64, device=design.device)

    def log_post(beta: torch.Tensor) -> float:
        eta = design @ beta
        return float(
            (y * eta - torch.nn.functional.softplus(eta)).sum() - beta @ beta / (2 * prior_var)
        )

    beta = torch.zeros(design.shape[1], dtype=torch.float64, device=design.device)
    current = log_post(beta)
    for _ in range(100):
        p = torch.sigmoid(design @ beta)
        grad = design.T @ (y - p) - beta / prior_var
        hess = design.T @ ((p * (1 - p))[:, None] * design) + eye / prior_var
        step = torch.linalg.solve(hess, grad)
        scale, candidate = 1.0, log_post(beta + step)
        while candidate < current and scale > 1e-6:
            scale /= 2.0
            candidate = log_post(beta + scale * step)
        if candidate < current:  # no ascent left at floating-point precision
            break
        beta, current = beta + scale * step, candidate
        if float(step.abs().max()) * scale < 1e-10:
            break
    p = torch.sigmoid(design @ beta)
    hess = design.T @ ((p * (1 - p))[:, None] * design) + eye / prior_var
    chol = torch.linalg.cholesky(hess)
    noise = torch.randn(design.shape[1], n_chains, generator=g, dtype=torch.float64)
    offsets = torch.linalg.solve_triangular(chol.T, noise.to(design.device), upper=True)
    return beta[None, :] + offsets.T


def _split_rhat(draws: torch.Tensor) -> torch.Tensor:
    """Split-R-hat ``[D]`` of chains ``[S, C, D]`` (each chain cut in halves; Gelman et al. 2013).

    ``R = sqrt(((n - 1)/n W + B/n) / W)`` with ``W`` the mean within-chain variance and ``B/n`` the
    variance of the chain means over the ``2C`` half-chains of length ``n``. ``NaN`` below 4 draws.
    """
    n = draws.shape[0] // 2
    if n < 2:
        return torch.full(draws.shape[-1:], float("nan"), dtype=draws.dtype)
    halves = torch.cat([draws[:n], draws[-n:]], dim=1)  # [n, 2C, D]
    within = halves.var(dim=0).mean(dim=0)
    between_over_n = halves.mean(dim=0).var(dim=0)
    pooled = (n - 1) / n * within + between_over_n
    return torch.sqrt(pooled / within)
