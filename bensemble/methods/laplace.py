"""Last-layer Laplace approximation for classifiers: a Gaussian posterior over the output layer.

The network is kept at its trained weights except its last ``nn.Linear`` (weights *and* bias),
whose ``P = K (F + 1)`` parameters ``theta = vec([W | b])`` (row-major: class by class, bias last)
get the Gaussian posterior ``N(theta*, (H + delta I)^{-1})`` around the trained values ``theta*``,
with ``H`` the generalised Gauss-Newton (GGN, equal to the Fisher here) of the softmax
cross-entropy summed over the ``n`` training points seen::

    H = sum_i J_i^T (diag(p_i) - p_i p_i^T) J_i = sum_i (diag(p_i) - p_i p_i^T) ⊗ (phi_i phi_i^T),

where ``phi_i = [features_i, 1]`` is the input of the last layer and ``J_i = I_K ⊗ phi_i^T`` the
Jacobian of the logits. Because the logits are linear in ``theta``, the GGN *is* the exact Hessian
of the negative log-likelihood with respect to the last layer. It is accumulated in float64.

The prior precision ``delta`` (isotropic Gaussian prior ``N(0, delta^{-1} I)``) is given, or
tuned (see :mod:`bensemble.methods._prior_tuning`): by the held-out NLL of the probit predictive
when validation data is passed (recommended), else by maximising the Laplace approximation of
the log marginal likelihood (MacKay 1992)::

    log p(D | delta) ~= -NLL(theta*) - delta/2 ||theta*||^2 + P/2 log delta
                        - 1/2 log det(H + delta I)

(the ``(2 pi)^{P/2}`` factors of prior and Laplace integral cancel). Evidence tuning warns when
the predictive is worse than the plain network on the training data, which happens when the
network was not trained with the prior the evidence scores (no weight decay).

References: E. Daxberger, A. Kristiadi, A. Immer, R. Eschenhagen, M. Bauer, P. Hennig (2021),
"Laplace redux - effortless Bayesian deep learning", NeurIPS; D. J. C. MacKay (1992), "The
evidence framework applied to classification networks", Neural Computation 4(5).
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import torch
from torch import nn

from bensemble._validation import check_option, check_positive, check_positive_int, to_tensor
from bensemble.core._adapter import check_module
from bensemble.core._inputs import iter_batches
from bensemble.methods._kronecker import iterate_pairs, probit_predictive
from bensemble.methods._laplace_checks import (
    call_generator,
    check_allocation,
    check_curvature_fits,
    check_finite_weights,
    check_seed_and_generator,
    check_targets,
    cholesky_or_raise,
    class_labels,
    keep_state_on_error,
)
from bensemble.methods._last_layer import find_last_linear, last_layer_inputs, probit_nll_curve
from bensemble.methods._prior_tuning import (
    PriorPrecisionSearch,
    check_prior_search,
    check_val_allowed,
    tune_prior_precision,
)

__all__ = ["LastLayerLaplace"]

_LIKELIHOODS = ("classification",)
#: Training points kept from the fit to check an evidence-tuned predictive against the network.
PROBE_ROWS = 2048


class LastLayerLaplace:
    """Laplace approximation of the last linear layer of a trained classifier (formulas above).

    Recommended use: ``LastLayerLaplace(model).fit(train_data, val=val_data)``, which tunes the
    prior precision by the held-out NLL on ``val_data``.

    Args:
        model: trained ``nn.Module`` whose output is the logits of its last ``nn.Linear``. For an
            ``nn.Sequential`` the last module must be that layer; otherwise the last
            ``nn.Linear`` registered is used, and :meth:`fit` checks that the model's output is
            exactly that layer's output (pass ``last_layer`` to name it explicitly).
        likelihood: ``None`` (read off the targets: integer class labels) or
            ``"classification"`` (softmax cross-entropy; the only one supported here).
        prior_precision: ``delta``; ``None`` tunes it at :meth:`fit` (held-out NLL with
            ``val``, else the evidence) over ``n_prior_grid`` log-spaced values in
            ``prior_precision_bounds``.
        last_layer: qualified name of the last linear layer (``model.get_submodule`` syntax).
        n_prior_grid: grid size of the search.
        prior_precision_bounds: ``(low, high)`` of that search.
        generator: random source of :meth:`sample_members` / :meth:`sample_models` (a stream).
        seed: without ``generator``, each sampling call draws from a generator seeded with it,
            so identical calls agree; ``None`` uses torch's global random state.

    Attributes (after :meth:`fit`):
        mean_: ``theta*`` ``[P]``; ``mean_.view(K, F + 1)`` is ``[W | b]``.
        hessian_: GGN of the summed NLL ``[P, P]`` (float64).
        prior_precision_: the prior precision used; ``prior_search_`` says how it was chosen
            (:class:`~bensemble.methods._prior_tuning.PriorPrecisionSearch`).
        posterior_precision_: ``H + delta I`` ``[P, P]``.
        posterior_covariance_: its inverse ``[P, P]``.
        n_train_: number of training points seen (the ``n`` of the curvature).

    Example:
        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> net = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 2))
        >>> x, y = torch.randn(40, 2), torch.randint(0, 2, (40,))
        >>> la = LastLayerLaplace(net).fit((x[:30], y[:30]), val=(x[30:], y[30:]))
        >>> la.prior_search_.method
        'held-out NLL'
        >>> la.sample_members(x[:5], 3).shape
        torch.Size([3, 5, 2])
    """

    def __init__(
        self,
        model: nn.Module,
        likelihood: str | None = None,
        prior_precision: float | None = None,
        *,
        last_layer: str | None = None,
        n_prior_grid: int = 41,
        prior_precision_bounds: tuple[float, float] = (1e-4, 1e4),
        generator: torch.Generator | None = None,
        seed: int | None = 0,
    ) -> None:
        fn = "LastLayerLaplace"
        self.model = check_module(model, "model", fn)
        if likelihood == "regression":
            raise ValueError(
                f"{fn}: `likelihood` must be one of 'classification' or None (got 'regression'); "
                "for regression use LaplaceApproximation(model, likelihood='regression')"
            )
        self.likelihood = (
            None if likelihood is None else check_option(likelihood, "likelihood", _LIKELIHOODS, fn)
        )
        self.prior_precision, self.n_prior_grid, self.prior_precision_bounds = check_prior_search(
            prior_precision, n_prior_grid, prior_precision_bounds, fn
        )
        self.generator, self.seed = check_seed_and_generator(generator, seed, fn)
        self.last_layer_name, self.last_layer = find_last_linear(model, last_layer, fn)

    def __repr__(self) -> str:
        head = f"LastLayerLaplace(last_layer={self.last_layer_name!r}, "
        if not hasattr(self, "mean_"):
            return (
                f"{head}likelihood={self.likelihood!r}, prior_precision={self.prior_precision!r}"
                ", not fitted)"
            )
        return (
            f"{head}likelihood={self.likelihood!r}, prior_precision_="
            f"{self.prior_search_.describe()}, n_train_={self.n_train_}, "
            f"parameters={self.mean_.numel()})"
        )

    # ------------------------------------------------------------------ fitting
    def fit(self, data, val=None) -> LastLayerLaplace:
        """Accumulate the GGN over the training data and set the prior precision; return ``self``.

        Args:
            data: a ``DataLoader`` (any iterable of ``(x, y)`` batches other than a tuple) or a
                tuple ``(X, y)`` of tensors / arrays with integer labels ``y [N]``.
            val: validation data in the same forms: the prior precision is the one whose probit
                predictive has the lowest NLL on it (needs ``prior_precision=None``). Without
                it the evidence chooses, and a warning says when that is likely worse than the
                network itself.
        """
        fn = "LastLayerLaplace.fit"
        check_val_allowed(self.prior_precision, val, fn)
        check_finite_weights(self.model, fn)
        n_classes, dim = self.last_layer.out_features, self.last_layer.in_features + 1
        n_params = n_classes * dim
        check_curvature_fits(
            fn,
            f"the last layer `{self.last_layer_name}`'s [P, P] Hessian and posterior "
            f"(P = {n_params:,} parameters)",
            5 * n_params * n_params,
            "use LaplaceApproximation (K-FAC), whose factors are [F + 1, F + 1] and [K, K]",
        )
        with keep_state_on_error(self):
            self._accumulate(data, fn)
            if self.prior_precision is None:
                tune_prior_precision(self, val, fn, "fit(data, val=(x_val, y_val))")
            else:
                self._set_prior(PriorPrecisionSearch("fixed", self.prior_precision), fn)
        return self

    def _accumulate(self, data, fn: str) -> None:
        """The GGN, NLL and probe rows of the training data (float64)."""
        n_classes, dim = self.last_layer.out_features, self.last_layer.in_features + 1
        n_params = n_classes * dim
        theta = self._layer_theta()
        hessian = torch.zeros(n_params, n_params, dtype=torch.float64, device=theta.device)
        classes = torch.arange(n_classes, device=theta.device)
        nll, n_seen, probe_phi, probe_labels = 0.0, 0, [], []
        for x, y in iterate_pairs(data, fn):
            phi, logits = self._forward(x, fn, check_output=True, name="data")
            labels = self._labels(y, logits, fn)
            probs = torch.softmax(logits, dim=-1)
            # (diag p) ⊗ phi phi^T: one F1 x F1 block per class on the diagonal ...
            blocks = torch.einsum("bk,bj,bm->kjm", probs, phi, phi)
            hessian.view(n_classes, dim, n_classes, dim)[classes, :, classes, :] += blocks
            # ... minus (p ⊗ phi)(p ⊗ phi)^T.
            outer = (probs[:, :, None] * phi[:, None, :]).reshape(phi.shape[0], n_params)
            hessian -= outer.T @ outer
            nll += float(torch.nn.functional.cross_entropy(logits, labels, reduction="sum"))
            room = PROBE_ROWS - sum(p.shape[0] for p in probe_phi)
            if room > 0:
                probe_phi.append(phi[:room])
                probe_labels.append(labels[:room])
            n_seen += int(phi.shape[0])
        if n_seen == 0:
            raise ValueError(f"{fn}: `data` must hold at least one sample (got none)")
        hessian = 0.5 * (hessian + hessian.T)
        self.mean_ = theta
        self.hessian_ = hessian
        self.n_train_ = n_seen
        self._nll = nll
        eigenvalues, self._eigenvectors = torch.linalg.eigh(hessian)
        self._eigenvalues = eigenvalues.clamp_min(0.0)
        self._shape = (n_classes, dim)
        self._probe = (torch.cat(probe_phi), torch.cat(probe_labels))

    def optimize_prior_precision(self, val=None) -> float:
        """Re-tune the prior precision of a fitted approximation; return the value chosen.

        Args:
            val: validation data (a ``DataLoader`` of ``(x, y)`` batches or a tuple ``(X, y)``):
                the grid value whose probit predictive has the lowest mean NLL on it. ``None``:
                the evidence of the training data (with a warning when the predictive is then
                worse than the network on the training data).
        """
        fn = "LastLayerLaplace.optimize_prior_precision"
        self._check_fitted(fn)
        with keep_state_on_error(self):
            return tune_prior_precision(self, val, fn, "optimize_prior_precision(val=...)")

    def log_marginal_likelihood(self, prior_precision: float | None = None) -> float:
        """Laplace log marginal likelihood at ``prior_precision`` (default: the fitted one).

        ``-NLL(theta*) - delta/2 ||theta*||^2 + P/2 log delta - 1/2 sum_j log(lambda_j + delta)``,
        with ``lambda_j`` the eigenvalues of the GGN.
        """
        fn = "LastLayerLaplace.log_marginal_likelihood"
        self._check_fitted(fn)
        if prior_precision is None:
            prior_precision = self.prior_precision_
        delta = check_positive(prior_precision, "prior_precision", fn)
        return float(self._log_evidence(np.array([math.log(delta)]))[0])

    # --------------------------------------------------------------- prediction
    def predictive(self, x) -> torch.Tensor:
        """Probit approximation of the posterior predictive ``[N, K]`` (deterministic).

        ``x``: what ``Ensemble.predict_*`` takes (a tensor, a numpy array, or an iterable of
        batches such as a ``DataLoader`` yielding ``x`` or ``(x, y, ...)``). The logits
        ``f = [W | b] phi`` are Gaussian under the posterior; for ``K = 2`` MacKay's probit on
        ``d = f_1 - f_0``, ``P(y = 1 | x) ~= sigmoid(E[d] / sqrt(1 + pi/8 Var[d]))``; for
        ``K > 2`` the generalised probit (Lu, Ie & Sha 2020) on the *centred* logits
        ``g_k = f_k - mean_j f_j`` (the softmax ignores a shift common to all logits, whose
        prior variance would otherwise flatten the predictive although no sample changes).
        """
        fn = "LastLayerLaplace.predictive"
        self._check_fitted(fn)
        phi = self._features(x, fn)
        n_classes, dim = self._shape
        cov = self.posterior_covariance_.view(n_classes, dim, n_classes, dim)
        rows, parts = max(1, 2**22 // (n_classes * n_classes * dim)), []
        for chunk in phi.split(rows):  # temporaries O(rows K^2 (F + 1))
            mean = chunk @ self.mean_.view(n_classes, dim).T  # [B, K]
            logit_cov = torch.einsum("ij,kjlm,im->ikl", chunk, cov, chunk)  # [B, K, K]
            parts.append(probit_predictive(mean, logit_cov))
        return torch.cat(parts)

    def sample_members(self, x, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """Member probabilities ``[n, N, K]``: ``softmax([W_s | b_s] phi)``, ``s`` = posterior draw.

        ``x`` as in :meth:`predictive`. The features are computed once; the draws do not depend
        on ``x``, so a member gives the same output for a row whatever other rows are passed
        (same random source; by default identical calls agree).
        """
        fn = "LastLayerLaplace.sample_members"
        self._check_fitted(fn)
        phi = self._features(x, fn)
        n = check_positive_int(n, "n", fn)
        check_allocation(
            fn, "n", n, per_count=self.mean_.numel() + 2 * phi.shape[0] * self._shape[0]
        )
        thetas = self._sample_theta(n, generator, fn)  # [n, K, F1]
        logits = torch.einsum("if,skf->sik", phi, thetas)
        return torch.softmax(logits, dim=-1)

    def sample_models(self, n: int, generator: torch.Generator | None = None) -> list[nn.Module]:
        """``n`` deep copies of the model (in eval mode) with sampled last layers.

        Member ``s`` of ``sample_models(n, g)`` equals member ``s`` of ``sample_members(x, n, g')``
        when ``g`` and ``g'`` start in the same state.
        """
        fn = "LastLayerLaplace.sample_models"
        self._check_fitted(fn)
        n = check_positive_int(n, "n", fn)
        check_allocation(fn, "n", n, per_count=sum(int(p.numel()) for p in self.model.parameters()))
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

    def _labels(self, y, logits: torch.Tensor, fn: str) -> torch.Tensor:
        labels = class_labels(to_tensor(y, "y", fn), logits, self.likelihood, fn)
        self.likelihood = "classification"
        return labels

    def _nll_curve(self, pairs, deltas, fn: str, name: str) -> tuple:
        totals, map_total, n = torch.zeros(len(deltas), dtype=torch.float64), 0.0, 0
        for x, y in pairs:
            phi, logits = self._forward(x, fn, check_output=True, name=name)
            labels = check_targets(to_tensor(y, "y", fn), logits, "classification", fn)
            curve, map_part = probit_nll_curve(phi, labels, *self._curve_args(deltas))
            totals, map_total, n = totals + curve, map_total + map_part, n + labels.shape[0]
        return totals.numpy(), map_total, n

    def _probe_curve(self, delta: float, fn: str) -> tuple:
        totals, map_total = probit_nll_curve(*self._probe, *self._curve_args(delta))
        return totals.numpy(), map_total, int(self._probe[1].shape[0])

    def _curve_args(self, deltas) -> tuple:
        deltas = torch.as_tensor(np.atleast_1d(deltas), dtype=torch.float64)
        mean = self.mean_.view(*self._shape)
        return mean, self._eigenvectors, self._eigenvalues, deltas

    def _set_prior(self, search: PriorPrecisionSearch, fn: str) -> None:
        delta = search.prior_precision
        eye = torch.eye(self.mean_.numel(), dtype=torch.float64, device=self.mean_.device)
        precision = self.hessian_ + delta * eye
        chol = cholesky_or_raise(precision, delta, fn)
        self.posterior_precision_ = precision
        self.posterior_covariance_ = torch.cholesky_inverse(chol)
        self._precision_chol = chol
        self.prior_precision_ = float(delta)
        self.prior_search_ = search

    def _layer_theta(self) -> torch.Tensor:
        layer = self.last_layer
        w = layer.weight.detach().to(torch.float64)
        b = layer.bias.detach().to(torch.float64)
        return torch.cat([w, b[:, None]], dim=1).reshape(-1)

    def _sample_theta(self, n, generator, fn: str) -> torch.Tensor:
        n = check_positive_int(n, "n", fn)
        g = call_generator(generator, self.generator, self.seed, fn)
        mean = self.mean_
        z = torch.randn(mean.numel(), n, generator=g, dtype=torch.float64)
        # theta = theta* + L^{-T} z with L L^T the posterior precision: covariance = precision^-1.
        step = torch.linalg.solve_triangular(self._precision_chol.T, z.to(mean.device), upper=True)
        return (mean[:, None] + step).T.reshape(n, *self._shape)

    def _forward(self, x, fn: str, *, check_output: bool, name: str = "x") -> tuple:
        """Last-layer inputs ``[N, F + 1]`` (with the constant 1) and model logits, in float64."""
        return last_layer_inputs(
            self.model,
            self.last_layer,
            self.last_layer_name,
            x,
            fn,
            check_output=check_output,
            name=name,
        )

    def _features(self, x: Any, fn: str) -> torch.Tensor:
        """Last-layer inputs ``[N, F + 1]`` of every batch of ``x`` (Ensemble input forms)."""
        parts = [self._forward(xb, fn, check_output=False)[0] for xb, _ in iter_batches(x, fn)]
        return torch.cat(parts)

    def _log_evidence(self, log_delta: np.ndarray) -> np.ndarray:
        lam = self._eigenvalues.cpu().numpy()
        norm2 = float((self.mean_**2).sum())
        delta = np.exp(np.asarray(log_delta, dtype=np.float64))
        logdet = np.log(lam[None, :] + delta[:, None]).sum(axis=1)
        return -self._nll - 0.5 * delta * norm2 + 0.5 * lam.size * np.log(delta) - 0.5 * logdet
