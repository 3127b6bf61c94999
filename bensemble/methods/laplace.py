"""Last-layer Laplace approximation for classifiers: a Gaussian posterior over the output layer.

The network is kept at its trained weights except its last ``nn.Linear`` (weights *and* bias),
whose ``P = K (F + 1)`` parameters ``theta = vec([W | b])`` (row-major: class by class, bias last)
get the Gaussian posterior ``N(theta*, (H + delta I)^{-1})`` around the trained values ``theta*``,
with ``H`` the generalised Gauss-Newton (GGN, equal to the Fisher here) of the softmax
cross-entropy::

    H = sum_i J_i^T (diag(p_i) - p_i p_i^T) J_i = sum_i (diag(p_i) - p_i p_i^T) ⊗ (phi_i phi_i^T),

where ``phi_i = [features_i, 1]`` is the input of the last layer and ``J_i = I_K ⊗ phi_i^T`` the
Jacobian of the logits. Because the logits are linear in ``theta``, the GGN *is* the exact Hessian
of the negative log-likelihood with respect to the last layer. It is accumulated in float64.

The prior precision ``delta`` (isotropic Gaussian prior ``N(0, delta^{-1} I)``) is either given or
chosen by maximising the Laplace approximation of the log marginal likelihood (MacKay 1992)::

    log p(D | delta) ~= -NLL(theta*) - delta/2 ||theta*||^2 + P/2 log delta
                        - 1/2 log det(H + delta I)

(the ``(2 pi)^{P/2}`` factors of prior and Laplace integral cancel), over a log-spaced grid
followed by a bounded scalar refinement around the best grid point.

References: E. Daxberger, A. Kristiadi, A. Immer, R. Eschenhagen, M. Bauer, P. Hennig (2021),
"Laplace redux - effortless Bayesian deep learning", NeurIPS; D. J. C. MacKay (1992), "The
evidence framework applied to classification networks", Neural Computation 4(5).
"""

from __future__ import annotations

import copy
import math
import warnings

import numpy as np
import torch
from torch import nn

from bensemble._validation import (
    as_labels,
    check_generator,
    check_option,
    check_positive,
    check_positive_int,
)
from bensemble.methods._kronecker import iterate_pairs, probit_predictive
from bensemble.methods._last_layer import find_last_linear, last_layer_inputs

__all__ = ["LastLayerLaplace"]

_LIKELIHOODS = ("classification",)


class LastLayerLaplace:
    """Laplace approximation of the last linear layer of a trained classifier (formulas above).

    Args:
        model: trained ``nn.Module`` whose output is the logits of its last ``nn.Linear``. For an
            ``nn.Sequential`` the last module must be that layer; otherwise the last
            ``nn.Linear`` registered is used, and :meth:`fit` checks that the model's output is
            exactly that layer's output (pass ``last_layer`` to name it explicitly).
        likelihood: only ``"classification"`` (softmax cross-entropy).
        prior_precision: ``delta``; ``None`` chooses it by maximising the Laplace log marginal
            likelihood over ``n_prior_grid`` log-spaced values in ``prior_precision_bounds``.
        last_layer: qualified name of the last linear layer (``model.get_submodule`` syntax).
        n_prior_grid: grid size of the marginal-likelihood search.
        prior_precision_bounds: ``(low, high)`` of that search.
        generator: default random source of :meth:`sample_members` / :meth:`sample_models`.
        seed: alternative to ``generator`` (a generator seeded once, here).

    Attributes (after :meth:`fit`):
        mean_: ``theta*`` ``[P]``; ``mean_.view(K, F + 1)`` is ``[W | b]``.
        hessian_: GGN of the summed NLL ``[P, P]`` (float64).
        prior_precision_: the prior precision used.
        posterior_precision_: ``H + delta I`` ``[P, P]``.
        posterior_covariance_: its inverse ``[P, P]``.
        n_train_: number of training points seen.

    Example:
        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> net = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 2))
        >>> x, y = torch.randn(40, 2), torch.randint(0, 2, (40,))
        >>> la = LastLayerLaplace(net).fit((x, y))
        >>> la.sample_members(x[:5], 3, generator=torch.Generator().manual_seed(0)).shape
        torch.Size([3, 5, 2])
    """

    def __init__(
        self,
        model: nn.Module,
        likelihood: str = "classification",
        prior_precision: float | None = None,
        *,
        last_layer: str | None = None,
        n_prior_grid: int = 41,
        prior_precision_bounds: tuple[float, float] = (1e-4, 1e4),
        generator: torch.Generator | None = None,
        seed: int | None = None,
    ) -> None:
        fn = "LastLayerLaplace"
        if not isinstance(model, nn.Module):
            raise ValueError(
                f"{fn}: `model` must be a torch.nn.Module (got {type(model).__name__})"
            )
        self.model = model
        self.likelihood = check_option(likelihood, "likelihood", _LIKELIHOODS, fn)
        self.prior_precision = (
            None
            if prior_precision is None
            else check_positive(prior_precision, "prior_precision", fn)
        )
        self.n_prior_grid = check_positive_int(n_prior_grid, "n_prior_grid", fn, minimum=3)
        low, high = _check_bounds(prior_precision_bounds, fn)
        self.prior_precision_bounds = (low, high)
        self.generator = check_generator(generator, seed, fn)
        self.last_layer_name, self.last_layer = find_last_linear(model, last_layer, fn)

    # ------------------------------------------------------------------ fitting
    def fit(self, data) -> LastLayerLaplace:
        """Accumulate the GGN over the training data and set the prior precision; return ``self``.

        Args:
            data: a ``DataLoader`` (any iterable of ``(x, y)`` batches other than a tuple) or a
                tuple ``(X, y)`` of tensors / arrays with integer labels ``y [N]``.
        """
        fn = "LastLayerLaplace.fit"
        layer = self.last_layer
        n_classes, n_features = layer.out_features, layer.in_features
        theta = self._layer_theta()
        n_params = theta.numel()
        dim = n_features + 1
        hessian = torch.zeros(n_params, n_params, dtype=torch.float64, device=theta.device)
        nll = 0.0
        n_seen = 0
        for x, y in iterate_pairs(data, fn, as_labels):
            phi, logits = self._forward(x, fn, check_output=True)
            labels = as_labels(y, "y", fn, n=phi.shape[0], num_classes=n_classes)
            labels = labels.to(phi.device)
            probs = torch.softmax(logits, dim=-1)
            # (diag p) ⊗ phi phi^T: one F1 x F1 block per class on the diagonal ...
            blocks = torch.einsum("bk,bj,bm->kjm", probs, phi, phi)
            classes = torch.arange(n_classes, device=phi.device)
            hessian.view(n_classes, dim, n_classes, dim)[classes, :, classes, :] += blocks
            # ... minus (p ⊗ phi)(p ⊗ phi)^T.
            outer = (probs[:, :, None] * phi[:, None, :]).reshape(phi.shape[0], n_params)
            hessian -= outer.T @ outer
            nll += float(torch.nn.functional.cross_entropy(logits, labels, reduction="sum"))
            n_seen += int(phi.shape[0])
        if n_seen == 0:
            raise ValueError(f"{fn}: `data` must yield at least one batch (got none)")
        hessian = 0.5 * (hessian + hessian.T)
        self.mean_ = theta
        self.hessian_ = hessian
        self.n_train_ = n_seen
        self._nll = nll
        self._eigenvalues = torch.linalg.eigvalsh(hessian).clamp_min(0.0)
        self._shape = (n_classes, dim)

        if self.prior_precision is None:
            delta = self._optimise_prior_precision()
        else:
            delta = self.prior_precision
        self.prior_precision_ = float(delta)
        eye = torch.eye(n_params, dtype=torch.float64, device=theta.device)
        self.posterior_precision_ = hessian + delta * eye
        chol = torch.linalg.cholesky(self.posterior_precision_)
        self.posterior_covariance_ = torch.cholesky_inverse(chol)
        self._precision_chol = chol
        return self

    def log_marginal_likelihood(self, prior_precision: float | None = None) -> float:
        """Laplace log marginal likelihood at ``prior_precision`` (default: the fitted one).

        ``-NLL(theta*) - delta/2 ||theta*||^2 + P/2 log delta - 1/2 sum_j log(lambda_j + delta)``,
        with ``lambda_j`` the eigenvalues of the GGN.
        """
        fn = "LastLayerLaplace.log_marginal_likelihood"
        self._check_fitted(fn)
        if prior_precision is None:
            if not hasattr(self, "prior_precision_"):
                raise ValueError(f"{fn}: `prior_precision` must be given before fit has chosen one")
            prior_precision = self.prior_precision_
        delta = check_positive(prior_precision, "prior_precision", fn)
        return float(self._log_marglik(np.array([math.log(delta)]))[0])

    # --------------------------------------------------------------- prediction
    def predictive(self, x) -> torch.Tensor:
        """Probit approximation of the posterior predictive ``[N, K]`` (deterministic).

        The logits ``f = [W | b] phi`` are Gaussian under the posterior. For ``K = 2`` this is
        MacKay's probit approximation of the binary predictive, on the logit difference
        ``d = f_1 - f_0``::

            P(y = 1 | x) ~= sigmoid(E[d] / sqrt(1 + pi/8 Var[d]))

        For ``K > 2`` it is the generalised probit (Lu, Ie & Sha 2020) on the *centred* logits
        ``g_k = f_k - mean_j f_j``: ``softmax_k(E[g_k] / sqrt(1 + pi/8 Var[g_k]))``. Centring
        matters: the softmax ignores a shift common to all logits, the likelihood therefore does
        not constrain that direction and its (prior) variance would otherwise flatten the
        predictive although no posterior sample changes.
        """
        fn = "LastLayerLaplace.predictive"
        self._check_fitted(fn)
        phi, _ = self._forward(x, fn, check_output=False)
        n_classes, dim = self._shape
        mean = phi @ self.mean_.view(n_classes, dim).T  # [N, K]
        cov = self.posterior_covariance_.view(n_classes, dim, n_classes, dim)
        logit_cov = torch.einsum("ij,kjlm,im->ikl", phi, cov, phi)  # [N, K, K]
        return probit_predictive(mean, logit_cov)

    def sample_members(self, x, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """Member probabilities ``[n, N, K]``: ``softmax([W_s | b_s] phi)``, ``s`` = posterior draw.

        The features are computed once; the draws do not depend on ``x``, so a member gives the
        same output for a row whatever other rows are passed (same generator state).
        """
        fn = "LastLayerLaplace.sample_members"
        self._check_fitted(fn)
        thetas = self._sample_theta(n, generator, fn)  # [n, K, F1]
        phi, _ = self._forward(x, fn, check_output=False)
        logits = torch.einsum("if,skf->sik", phi, thetas)
        return torch.softmax(logits, dim=-1)

    def sample_models(self, n: int, generator: torch.Generator | None = None) -> list[nn.Module]:
        """``n`` deep copies of the model (in eval mode) with sampled last layers.

        Member ``s`` of ``sample_models(n, g)`` equals member ``s`` of ``sample_members(x, n, g')``
        when ``g`` and ``g'`` start in the same state.
        """
        fn = "LastLayerLaplace.sample_models"
        self._check_fitted(fn)
        thetas = self._sample_theta(n, generator, fn)
        models = []
        for theta in thetas:
            member = copy.deepcopy(self.model)
            layer = member.get_submodule(self.last_layer_name) if self.last_layer_name else member
            with torch.no_grad():
                layer.weight.copy_(theta[:, :-1].to(layer.weight.dtype))
                layer.bias.copy_(theta[:, -1].to(layer.bias.dtype))
            models.append(member.eval())
        return models

    # ---------------------------------------------------------------- helpers
    def _check_fitted(self, fn: str) -> None:
        if not hasattr(self, "mean_"):
            raise ValueError(
                f"{fn}: the approximation is not fitted yet; call fit(train_data) first"
            )

    def _layer_theta(self) -> torch.Tensor:
        layer = self.last_layer
        w = layer.weight.detach().to(torch.float64)
        b = layer.bias.detach().to(torch.float64)
        return torch.cat([w, b[:, None]], dim=1).reshape(-1)

    def _sample_theta(self, n, generator, fn: str) -> torch.Tensor:
        n = check_positive_int(n, "n", fn)
        g = check_generator(generator, None, fn)
        g = self.generator if g is None else g
        mean = self.mean_
        z = torch.randn(mean.numel(), n, generator=g, dtype=torch.float64)
        # theta = theta* + L^{-T} z with L L^T the posterior precision: covariance = precision^-1.
        step = torch.linalg.solve_triangular(self._precision_chol.T, z.to(mean.device), upper=True)
        return (mean[:, None] + step).T.reshape(n, *self._shape)

    def _forward(self, x, fn: str, *, check_output: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Last-layer inputs ``[N, F + 1]`` (with the constant 1) and model logits, in float64."""
        return last_layer_inputs(
            self.model, self.last_layer, self.last_layer_name, x, fn, check_output=check_output
        )

    def _log_marglik(self, log_delta: np.ndarray) -> np.ndarray:
        lam = self._eigenvalues.cpu().numpy()
        norm2 = float((self.mean_**2).sum())
        delta = np.exp(np.asarray(log_delta, dtype=np.float64))
        n_params = lam.size
        logdet = np.log(lam[None, :] + delta[:, None]).sum(axis=1)
        return -self._nll - 0.5 * delta * norm2 + 0.5 * n_params * np.log(delta) - 0.5 * logdet

    def _optimise_prior_precision(self) -> float:
        from scipy.optimize import minimize_scalar

        low, high = self.prior_precision_bounds
        grid = np.linspace(math.log(low), math.log(high), self.n_prior_grid)
        values = self._log_marglik(grid)
        best = int(np.argmax(values))
        if best in (0, grid.size - 1):
            warnings.warn(
                f"LastLayerLaplace.fit: the marginal likelihood is largest at the edge of "
                f"`prior_precision_bounds` ({math.exp(grid[best]):.3g}); widen the bounds",
                RuntimeWarning,
                stacklevel=3,
            )
            return float(math.exp(grid[best]))
        result = minimize_scalar(
            lambda t: -float(self._log_marglik(np.array([t]))[0]),
            bounds=(grid[best - 1], grid[best + 1]),
            method="bounded",
            options={"xatol": 1e-8},
        )
        log_delta = result.x if -result.fun >= values[best] else grid[best]
        return float(math.exp(log_delta))


def _check_bounds(bounds, fn: str) -> tuple[float, float]:
    ok = isinstance(bounds, (tuple, list)) and len(bounds) == 2
    if ok:
        low = check_positive(bounds[0], "prior_precision_bounds[0]", fn)
        high = check_positive(bounds[1], "prior_precision_bounds[1]", fn)
        ok = low < high
    if not ok:
        raise ValueError(
            f"{fn}: `prior_precision_bounds` must be a pair (low, high) with 0 < low < high "
            f"(got {bounds!r})"
        )
    return low, high
