"""Kronecker-factored Laplace approximation of a whole network (bensemble 0.2 API).

Every ``nn.Linear`` and ``nn.Conv2d`` of the model (weights and bias,
``theta_l = vec([W_l | b_l])``, a kernel flattened to ``[C_out, C_in kh kw]``) gets an independent
Gaussian posterior around the trained values (Ritter, Botev & Barber 2018):

    precision_l = n A_l (x) G_l + delta I,
    A_l = mean_i a_i a_i^T,   G_l = mean_i sum_r g_ir g_ir^T,   g_ir = J_{s_l}(x_i)^T L_i e_r,

with ``n`` the number of training points seen, ``a_i`` the layer input (and a constant 1 for the
bias), ``J_{s_l}`` the Jacobian of the network output w.r.t. the layer's pre-activations
(activation derivatives included, any graph: heads, branches, shared layers) and ``L_i L_i^T``
the Hessian of the NLL w.r.t. the outputs: ``diag(p) - p p^T`` for softmax cross-entropy,
``I / sigma^2`` for Gaussian regression with noise variance ``sigma^2``. ``n A (x) G`` is the
K-FAC approximation of the generalised Gauss-Newton of the summed NLL; ``delta`` is the prior
precision (prior ``N(0, delta^{-1} I)``). In the eigenbasis of ``A`` and ``G`` the precision is
diagonal, so samples and linearised predictive variances are exact for this precision. For a
one-layer linear-Gaussian model the K-FAC GGN is the exact Hessian and the posterior is the
closed-form one. A layer used at ``T`` positions (a convolution's ``L`` output pixels, a linear
layer on ``[B, T, F]``) sums its inputs over the positions in ``A`` (divided by ``n T``) and its
gradients in ``G`` (divided by ``n``), the KFC approximation of Grosse & Martens (2016).

``delta`` is given, or tuned (:mod:`bensemble.methods._prior_tuning`): by the held-out NLL of the
linearised predictive when validation data is passed (recommended), else by the Laplace evidence
``log p(D | theta*) - delta/2 ||theta*||^2 + P/2 log delta - 1/2 log det(precision)``, with a
warning when that predictive is worse than the network on the training data.

``regularization="exact"`` (default) is the formula above; ``"paper"`` adds the prior to each
factor as in Ritter et al., ``(sqrt(n) A + sqrt(delta) I) (x) (sqrt(n) G + sqrt(delta) I)``;
``"legacy"`` reproduces bensemble 0.2's ``(n A + delta I) (x) (n G + delta I)``, about ``n`` times
too narrow, and warns.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import torch
from torch import nn

from bensemble._validation import check_option, check_positive, check_positive_int, warn_user
from bensemble.core._adapter import check_module
from bensemble.methods import _kfac_linearised as glm
from bensemble.methods._kfac_curvature import (
    accumulate_curvature,
    check_kfac_fits,
    fitted_curvature,
    posterior_layers,
)
from bensemble.methods._kronecker import layer_theta, load_layers
from bensemble.methods._laplace_checks import (
    LIKELIHOODS,
    call_generator,
    check_allocation,
    check_curvature_fits,
    check_finite_weights,
    check_seed_and_generator,
    keep_state_on_error,
)
from bensemble.methods._prior_tuning import (
    PriorPrecisionSearch,
    check_prior_search,
    check_val_allowed,
    tune_prior_precision,
)

__all__ = ["LaplaceApproximation"]

_REGULARIZATIONS = ("exact", "paper", "legacy")
_STATE = ("is_fitted", "likelihood", "dataset_size", "prior_precision", "regularization")
_FITTED = ("factors_", "_eig", "_raw_factors", "prior_precision_", "prior_search_", "_noise_var")
_FITTED += ("_nll", "_theta_norm2")
_REMEDY = "fit(data, val=(x_val, y_val)) or compute_curvature(train_loader, val=val_loader)"


class LaplaceApproximation:
    """K-FAC Laplace approximation over every ``nn.Linear`` / ``nn.Conv2d`` of ``model`` (above).

    Recommended use: ``LaplaceApproximation(model).fit(train_data, val=val_data)`` (or
    ``compute_curvature(train_loader, val=val_loader)``, the bensemble 0.2 entry point).

    Args:
        model: the trained network (its weights are the posterior mean); outputs ``[B, K]``
            (``[B]`` is read as ``[B, 1]`` for regression).
        likelihood: ``None`` (read off the targets: integer labels ``[N]`` for logits
            ``[N, K >= 2]`` are ``"classification"``, real targets with one value per output
            ``"regression"``), ``"regression"`` (Gaussian noise) or ``"classification"``.
        prior_precision: ``delta > 0``; ``None`` tunes it at the fit (held-out NLL with
            ``val``, else the evidence) over ``n_prior_grid`` log-spaced values in
            ``prior_precision_bounds``.
        damping: added to every precision eigenvalue (``>= 0``), for numerical safety.
        regularization: ``"exact"``, ``"paper"`` or ``"legacy"`` (see the module docstring).
        verbose: print progress.
        sigma_noise: regression noise standard deviation; ``None`` estimates it from the
            training residuals of the trained model (root mean squared error).
        n_prior_grid: grid size of the prior-precision search.
        prior_precision_bounds: ``(low, high)`` of that search.
        generator: random source of :meth:`sample_models` (a stream).
        seed: without ``generator``, each sampling call draws from a generator seeded with it,
            so identical calls agree; ``None`` uses torch's global random state.

    Attributes (after the fit): ``factors_`` (``{layer name: KroneckerFactor}``),
    ``dataset_size`` (``n``, the training points seen), ``prior_precision_`` and
    ``prior_search_`` (how it was chosen), ``sigma_noise_`` (regression), ``is_fitted``.

    Example:
        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> net = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 1))
        >>> x = torch.randn(40, 2)
        >>> y = x.sum(1, keepdim=True)
        >>> la = LaplaceApproximation(net).fit((x[:30], y[:30]), val=(x[30:], y[30:]))
        >>> la.likelihood, la.prior_search_.method
        ('regression', 'held-out NLL')
        >>> len(la.sample_models(n_models=3))
        3
    """

    def __init__(
        self,
        model: nn.Module,
        likelihood: str | None = None,
        prior_precision: float | None = None,
        damping: float = 1e-6,
        regularization: str = "exact",
        verbose: bool = False,
        *,
        sigma_noise: float | None = None,
        n_prior_grid: int = 41,
        prior_precision_bounds: tuple[float, float] = (1e-4, 1e4),
        generator: torch.Generator | None = None,
        seed: int | None = 0,
    ) -> None:
        fn = "LaplaceApproximation"
        self.model = check_module(model, "model", fn)
        self.likelihood = (
            None if likelihood is None else check_option(likelihood, "likelihood", LIKELIHOODS, fn)
        )
        self.prior_precision, self.n_prior_grid, self.prior_precision_bounds = check_prior_search(
            prior_precision, n_prior_grid, prior_precision_bounds, fn
        )
        self.damping = check_positive(damping, "damping", fn, allow_zero=True)
        self.regularization = check_option(regularization, "regularization", _REGULARIZATIONS, fn)
        if self.regularization == "legacy":
            warn_user(
                f"{fn}: regularization='legacy' scales both Kronecker factors by n, which makes "
                "the posterior about n times too narrow; it is kept only to reproduce bensemble "
                "0.2 (use 'exact')"
            )
        self.verbose = bool(verbose)
        self.sigma_noise = (
            None if sigma_noise is None else check_positive(sigma_noise, "sigma_noise", fn)
        )
        self.generator, self.seed = check_seed_and_generator(generator, seed, fn)
        self.layers = posterior_layers(model, fn)
        self.is_fitted = False
        self.dataset_size = 1
        self.hook_handles: list = []  # bensemble 0.2 attribute; hooks live only inside calls

    def __repr__(self) -> str:
        head = f"LaplaceApproximation(layers={len(self.layers)}, likelihood={self.likelihood!r}, "
        if not self.is_fitted:
            return f"{head}prior_precision={self.prior_precision!r}, not fitted)"
        n_params = sum(int(e.numel()) for e in self._eig.values())
        return (
            f"{head}prior_precision_={self.prior_search_.describe()}, "
            f"dataset_size={self.dataset_size}, parameters={n_params})"
        )

    def toggle_verbose(self) -> None:
        """Switch progress printing on or off (bensemble 0.2 API)."""
        self.verbose = not self.verbose
        print("Verbose:", "on" if self.verbose else "off")

    # ------------------------------------------------------------------ fitting
    def compute_curvature(self, train_loader, num_samples: int | None = None, *, val=None) -> None:
        """Estimate the Kronecker factors from the data and set the prior precision.

        Args:
            train_loader: a ``DataLoader`` of ``(x, y)`` batches or a tuple ``(X, y)``; the
                curvature is that of the ``n`` points it holds (``dataset_size``).
            num_samples: deprecated. Uses only the first ``num_samples`` points, and ``n`` is
                then ``num_samples`` (bensemble 0.2 rescaled a DataLoader's subset to
                ``len(dataset)`` but a tuple's to ``num_samples``: two posteriors for the same
                data). Pass a loader over the points to use instead.
            val: validation data in the same forms: the prior precision is the grid value whose
                linearised predictive has the lowest NLL on it (needs ``prior_precision=None``).
        """
        fn = "LaplaceApproximation.compute_curvature"
        if num_samples is not None:
            num_samples = check_positive_int(num_samples, "num_samples", fn)
            warn_user(
                f"{fn}: `num_samples` is deprecated: the curvature is that of the points "
                f"actually seen, so with num_samples={num_samples} it is the posterior of the "
                "first num_samples points (n = num_samples) whether `train_loader` is a "
                "DataLoader or a tuple; pass a loader over the points to use instead",
                FutureWarning,
            )
        self._fit(train_loader, num_samples, val, fn, "train_loader")

    def fit(self, data, val=None) -> LaplaceApproximation:
        """:meth:`compute_curvature` on every point of ``data``; returns ``self``."""
        self._fit(data, None, val, "LaplaceApproximation.fit", "data")
        return self

    def optimize_prior_precision(self, val=None) -> float:
        """Re-tune the prior precision of a fitted approximation; return the value chosen.

        Args:
            val: validation data (a ``DataLoader`` of ``(x, y)`` batches or a tuple ``(X, y)``):
                the grid value whose linearised predictive has the lowest mean NLL on it.
                ``None``: the evidence of the training data (with a warning when the predictive
                is then worse than the network on the training data).
        """
        fn = "LaplaceApproximation.optimize_prior_precision"
        self._check_fitted(fn)
        with keep_state_on_error(self):
            return tune_prior_precision(self, val, fn, "optimize_prior_precision(val=...)")

    def log_marginal_likelihood(self, prior_precision: float | None = None) -> float:
        """Laplace log evidence of the training data at ``prior_precision`` (default: fitted)."""
        fn = "LaplaceApproximation.log_marginal_likelihood"
        self._check_fitted(fn)
        delta = self.prior_precision_ if prior_precision is None else prior_precision
        delta = check_positive(delta, "prior_precision", fn)
        return float(self._log_evidence(np.array([math.log(delta)]))[0])

    def _fit(self, data, num_samples, val, fn: str, name: str) -> None:
        check_val_allowed(self.prior_precision, val, fn)
        check_finite_weights(self.model, fn)
        check_kfac_fits(self.layers, fn)
        with keep_state_on_error(self):  # a failed fit leaves the previous one in place
            sums = accumulate_curvature(
                self.model,
                self.layers,
                data,
                self.likelihood,
                fn,
                max_points=num_samples,
                verbose=self.verbose,
                name=name,
            )
            fitted = fitted_curvature(sums, self.layers, self.sigma_noise, fn)
            self.likelihood, self.dataset_size = fitted.likelihood, fitted.n
            self._noise_var, self._nll = fitted.noise_var, fitted.nll
            if fitted.sigma_noise is not None:
                self.sigma_noise_ = fitted.sigma_noise
            self._raw_factors, self.factors_ = fitted.raw_factors, fitted.factors
            self._theta_norm2, self._probe = fitted.theta_norm2, fitted.probe
            self.is_fitted = True
            if self.prior_precision is None:
                tune_prior_precision(self, val, fn, _REMEDY)
            else:
                self._set_prior(PriorPrecisionSearch("fixed", self.prior_precision), fn)

    def _eigs(self, delta: float) -> dict[str, torch.Tensor]:
        n, reg = float(self.dataset_size), self.regularization
        return {name: f.precision(n, delta, self.damping, reg) for name, f in self.factors_.items()}

    def _log_evidence(self, log_delta: np.ndarray) -> np.ndarray:
        values = []
        for t in np.atleast_1d(log_delta):
            eigs = self._eigs(math.exp(t))
            logdet = sum(float(torch.log(e).sum()) for e in eigs.values())
            n_params = sum(e.numel() for e in eigs.values())
            prior = 0.5 * n_params * t - 0.5 * math.exp(t) * self._theta_norm2
            values.append(-self._nll + prior - 0.5 * logdet)
        return np.array(values)

    def _nll_curve(self, pairs, deltas, fn: str, name: str) -> tuple:
        return glm.nll_curve(self, pairs, deltas, fn, name)

    def _probe_curve(self, delta: float, fn: str) -> tuple:
        return glm.nll_curve(self, [self._probe], [delta], fn, "data")

    def _set_prior(self, search: PriorPrecisionSearch, fn: str) -> None:
        self.prior_precision_ = float(search.prior_precision)
        self.prior_search_ = search
        self._eig = self._eigs(self.prior_precision_)

    @property
    def kronecker_factors(self) -> dict[str, dict[str, torch.Tensor]]:
        """bensemble 0.2 view: ``{layer: {"Q": A, "H": G}}``, the per-point K-FAC factors."""
        if not self.is_fitted:
            return {}
        return {name: {"Q": a, "H": g} for name, (a, g) in self._raw_factors.items()}

    def _get_ensemble_state(self) -> dict:
        """Everything :meth:`sample_models` needs (bensemble 0.2 API)."""
        state = {k: getattr(self, k) for k in _STATE}
        state["model_state"] = self.model.state_dict()
        if self.is_fitted:
            state.update({k: getattr(self, k) for k in _FITTED})
            state["sigma_noise"] = getattr(self, "sigma_noise_", None)
        return state

    def _set_ensemble_state(self, state: dict) -> None:
        self.model.load_state_dict(state["model_state"])
        for key in _STATE:
            setattr(self, key, state[key])
        if state["is_fitted"]:
            for key in _FITTED:
                setattr(self, key, state[key])
            if state.get("sigma_noise") is not None:
                self.sigma_noise_ = state["sigma_noise"]

    # --------------------------------------------------------------- sampling
    def posterior_covariance(self, layer: str) -> torch.Tensor:
        """Dense posterior covariance ``[P, P]`` of ``vec([W | b])`` of one layer (row-major)."""
        fn = "LaplaceApproximation.posterior_covariance"
        self._check_fitted(fn)
        if layer not in self.factors_:
            names = sorted(self.factors_)
            raise ValueError(f"{fn}: `layer` must be one of {names} (got {layer!r})")
        size = self._eig[layer].numel()
        check_curvature_fits(
            fn,
            f"layer `{layer}`'s dense [P, P] covariance (P = {size:,})",
            3 * size * size,
            "use sample_parameters or predictive, which never form it",
        )
        return self.factors_[layer].covariance(self._eig[layer])

    def sample_parameters(
        self, n_models: int = 10, temperature: float = 1.0, *, generator=None
    ) -> dict[str, torch.Tensor]:
        """Posterior draws ``{layer: [n_models, out, in (+1)]}`` of ``[W | b]`` (float64).

        ``temperature`` scales the standard deviation of the deviations from the mean.
        """
        fn = "LaplaceApproximation.sample_parameters"
        self._check_fitted(fn)
        n_models = check_positive_int(n_models, "n_models", fn)
        check_allocation(fn, "n_models", n_models, per_count=self._per_model())
        temperature = check_positive(temperature, "temperature", fn, allow_zero=True)
        gen = call_generator(generator, self.generator, self.seed, fn)
        modules = dict(self.layers)
        draws = {}
        for name, factor in self.factors_.items():
            mean = layer_theta(modules[name])
            dev = factor.sample(self._eig[name], n_models, gen, temperature)
            draws[name] = mean.to(dev.device) + dev
        return draws

    def sample_models(
        self, n_models: int = 10, temperature: float = 1.0, *, generator=None
    ) -> list[nn.Module]:
        """``n_models`` copies of the model (eval mode, same device) with sampled linear layers."""
        draws = self.sample_parameters(n_models, temperature, generator=generator)
        models = []
        for s in range(n_models):
            member = copy.deepcopy(self.model)
            load_layers(member, {name: theta[s] for name, theta in draws.items()})
            models.append(member.eval())
        return models

    def build_ensemble(self, n_members: int = 10, temperature: float = 1.0):
        """``Ensemble.from_posterior(self, n_members, temperature=temperature)``."""
        from bensemble.core.ensemble import Ensemble

        return Ensemble.from_posterior(self, n_members=n_members, temperature=temperature)

    # ------------------------------------------------------------- prediction
    def predictive(self, x, n_samples: int | None = None, *, generator=None):
        """Posterior predictive at ``x`` (what ``Ensemble.predict_*`` takes: a tensor, a numpy
        array, an iterable of batches such as a ``DataLoader`` of ``x`` or ``(x, y, ...)``).

        With ``n_samples=None`` the network is linearised around the mean (GLM predictive):
        ``f ~ N(f*(x), sum_l J_l Sigma_l J_l^T)`` with ``J_l`` the Jacobian w.r.t. ``[W_l | b_l]``.
        Classification returns the probit approximation of ``E[softmax(f)]`` ``[N, K]``;
        regression returns ``(mean [N, K], var [N, K])`` with ``var`` the function variance plus
        ``sigma_noise_^2``. With ``n_samples`` the same quantities come from that many sampled
        networks (mean softmax; sample mean and variance plus noise).
        """
        fn = "LaplaceApproximation.predictive"
        self._check_fitted(fn)
        if n_samples is not None:
            n_samples = check_positive_int(n_samples, "n_samples", fn, minimum=2)
            check_allocation(fn, "n_samples", n_samples, per_count=self._per_model())
        return glm.predict(self, x, n_samples, generator, fn)

    # ---------------------------------------------------------------- helpers
    def _per_model(self) -> int:
        """Values one drawn network holds (its draws and its copy)."""
        return sum(int(p.numel()) for p in self.model.parameters())

    def _check_fitted(self, fn: str) -> None:
        if not self.is_fitted:
            raise ValueError(
                f"{fn}: the curvature is not computed yet; call compute_curvature first"
            )
