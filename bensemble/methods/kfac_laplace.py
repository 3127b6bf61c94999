"""Kronecker-factored Laplace approximation of a whole network (bensemble 0.2 API).

Every ``nn.Linear`` and ``nn.Conv2d`` of the model (weights and bias,
``theta_l = vec([W_l | b_l])``, a kernel flattened to ``[C_out, C_in kh kw]``) gets an independent
Gaussian posterior around the trained values (Ritter, Botev & Barber 2018):

    precision_l = n A_l (x) G_l + delta I,
    A_l = mean_i a_i a_i^T,   G_l = mean_i sum_r g_ir g_ir^T,   g_ir = J_{s_l}(x_i)^T L_i e_r,

with ``a_i`` the layer input (and a constant 1 for the bias), ``J_{s_l}`` the Jacobian of the
network output w.r.t. the layer's pre-activations (activation derivatives included, any graph:
heads, branches, shared layers) and ``L_i L_i^T`` the Hessian of the NLL w.r.t. the outputs:
``diag(p) - p p^T`` for softmax cross-entropy, ``I / sigma^2`` for Gaussian regression with
noise variance ``sigma^2``. ``n A (x) G`` is the K-FAC approximation of the generalised Gauss-Newton
of the summed NLL over the ``n`` training points; ``delta`` is the prior precision (prior
``N(0, delta^{-1} I)``). In the eigenbasis of ``A`` and ``G`` the precision is diagonal, so samples
and linearised predictive variances are exact for this precision. For a one-layer linear-Gaussian
model the K-FAC GGN is the exact Hessian and the posterior is the closed-form one. A layer used at
``T`` positions (a convolution's ``L`` output pixels, a linear layer on ``[B, T, F]``) sums its
inputs over the positions in ``A`` (divided by ``n T``) and its gradients in ``G`` (divided by
``n``), the KFC approximation of Grosse & Martens (2016), exact when ``T = 1``.

``regularization="exact"`` (default) is the formula above; ``"paper"`` adds the prior to each
factor as in Ritter et al., ``(sqrt(n) A + sqrt(delta) I) (x) (sqrt(n) G + sqrt(delta) I)``;
``"legacy"`` reproduces bensemble 0.2's ``(n A + delta I) (x) (n G + delta I)``, about ``n`` times
too narrow, and warns.
"""

from __future__ import annotations

import copy
import warnings

import torch
from torch import nn

from bensemble._validation import (
    check_generator,
    check_option,
    check_positive,
    check_positive_int,
    to_tensor,
)
from bensemble.methods._kronecker import (
    KroneckerFactor,
    LinearTaps,
    inference_mode,
    iterate_pairs,
    layer_theta,
    load_layers,
    output_hessian_sqrt,
    probit_predictive,
    supported_layer,
)

__all__ = ["LaplaceApproximation"]

_LIKELIHOODS = ("regression", "classification")
_REGULARIZATIONS = ("exact", "paper", "legacy")


class LaplaceApproximation:
    """K-FAC Laplace approximation over every ``nn.Linear`` / ``nn.Conv2d`` of ``model`` (above).

    Args:
        model: the trained network (its weights are the posterior mean); outputs ``[B, K]``
            (``[B]`` is read as ``[B, 1]`` for regression).
        likelihood: ``"regression"`` (Gaussian noise) or ``"classification"`` (softmax
            cross-entropy on logits).
        prior_precision: ``delta > 0``.
        damping: added to every precision eigenvalue (``>= 0``), for numerical safety.
        regularization: ``"exact"``, ``"paper"`` or ``"legacy"`` (see the module docstring).
        verbose: print progress.
        sigma_noise: regression noise standard deviation; ``None`` estimates it from the
            training residuals of the trained model (root mean squared error).
        generator: default random source of :meth:`sample_models`.
        seed: alternative to ``generator``.

    Attributes (after :meth:`compute_curvature`): ``factors_`` (``{layer name:
    KroneckerFactor}``), ``dataset_size``, ``sigma_noise_`` (regression), ``is_fitted``.

    Example:
        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> net = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 1))
        >>> x = torch.randn(32, 2)
        >>> la = LaplaceApproximation(net, likelihood="regression")
        >>> la.compute_curvature((x, x.sum(1, keepdim=True)))
        >>> len(la.sample_models(n_models=3))
        3
    """

    def __init__(
        self,
        model: nn.Module,
        likelihood: str = "regression",
        prior_precision: float = 1.0,
        damping: float = 1e-6,
        regularization: str = "exact",
        verbose: bool = False,
        *,
        sigma_noise: float | None = None,
        generator: torch.Generator | None = None,
        seed: int | None = None,
    ) -> None:
        fn = "LaplaceApproximation"
        if not isinstance(model, nn.Module):
            raise ValueError(
                f"{fn}: `model` must be a torch.nn.Module (got {type(model).__name__})"
            )
        self.model = model
        self.likelihood = check_option(likelihood, "likelihood", _LIKELIHOODS, fn)
        self.prior_precision = check_positive(prior_precision, "prior_precision", fn)
        self.damping = check_positive(damping, "damping", fn, allow_zero=True)
        self.regularization = check_option(regularization, "regularization", _REGULARIZATIONS, fn)
        if self.regularization == "legacy":
            warnings.warn(
                f"{fn}: regularization='legacy' scales both Kronecker factors by n, which makes "
                "the posterior about n times too narrow; it is kept only to reproduce bensemble "
                "0.2 (use 'exact')",
                UserWarning,
                stacklevel=2,
            )
        self.verbose = bool(verbose)
        self.sigma_noise = (
            None if sigma_noise is None else check_positive(sigma_noise, "sigma_noise", fn)
        )
        self.generator = check_generator(generator, seed, fn)
        self.layers = [(n, m) for n, m in model.named_modules() if supported_layer(m)]
        skipped = [n for n, m in model.named_modules() if isinstance(m, nn.Conv2d)]
        skipped = [n for n in skipped if n not in dict(self.layers)]
        if skipped:
            warnings.warn(
                f"{fn}: Conv2d layers {skipped} (groups > 1, string padding or a padding mode "
                "other than 'zeros') keep their trained weights; only nn.Linear and plain "
                "nn.Conv2d layers get a posterior",
                UserWarning,
                stacklevel=2,
            )
        if not self.layers:
            raise ValueError(
                f"{fn}: `model` must contain at least one nn.Linear or nn.Conv2d (got none)"
            )
        self.is_fitted = False
        self.dataset_size = 1
        self.hook_handles: list = []  # bensemble 0.2 attribute; hooks live only inside calls

    def toggle_verbose(self) -> None:
        """Switch progress printing on or off (bensemble 0.2 API)."""
        self.verbose = not self.verbose
        print("Verbose:", "on" if self.verbose else "off")

    # ------------------------------------------------------------------ fitting
    def compute_curvature(self, train_loader, num_samples: int = 1000) -> None:
        """Estimate the Kronecker factors from (at most ``num_samples`` points of) the data.

        Args:
            train_loader: a ``DataLoader`` of ``(x, y)`` batches or a tuple ``(X, y)``.
                Classification targets are not used (the GGN of the softmax is label-free).
            num_samples: points used for the factors; the curvature is scaled to the data set
                size ``n = len(train_loader.dataset)`` (the points seen for a tuple or a plain
                iterable).
        """
        fn = "LaplaceApproximation.compute_curvature"
        num_samples = check_positive_int(num_samples, "num_samples", fn)
        sums_a: dict[str, torch.Tensor] = {}
        sums_g: dict[str, torch.Tensor] = {}
        rows: dict[str, int] = {}
        n_seen, sq_residual, n_residual = 0, 0.0, 0
        with inference_mode(self.model):
            for x, y in iterate_pairs(train_loader, fn):
                if n_seen >= num_samples:
                    break
                x = to_tensor(x, "x", fn)[: num_samples - n_seen]
                y = to_tensor(y, "y", fn)[: x.shape[0]]
                with LinearTaps(self.layers) as taps, torch.enable_grad():
                    out = self._outputs(self.model(self._to_model(x)), fn)
                    names = taps.called()
                    if self.likelihood == "regression":
                        target = y.to(out.device, torch.float64).reshape(out.shape[0], -1)
                        if target.shape != out.shape:
                            raise ValueError(
                                f"{fn}: `y` must have one target per model output "
                                f"{tuple(out.shape)} (got shape {tuple(y.shape)})"
                            )
                        sq_residual += float(((target - out.detach().double()) ** 2).sum())
                        n_residual += target.numel()
                    lam_sqrt = output_hessian_sqrt(out.detach().double(), self.likelihood)
                    grads = taps.backprop(out, lam_sqrt, names)
                    for name in names:
                        has_bias = dict(self.layers)[name].bias is not None
                        a = taps.rows(name, has_bias)
                        g = grads[name].reshape(-1, grads[name].shape[-1])
                        sums_a[name] = sums_a.get(name, 0.0) + a.T @ a
                        sums_g[name] = sums_g.get(name, 0.0) + g.T @ g
                        rows[name] = rows.get(name, 0) + a.shape[0]
                n_seen += int(x.shape[0])
                if self.verbose:
                    print(f"{fn}: {n_seen} samples processed")
        if n_seen == 0:
            raise ValueError(f"{fn}: `train_loader` must yield at least one batch (got none)")
        dataset = getattr(train_loader, "dataset", None)
        try:
            self.dataset_size = len(dataset) if dataset is not None else n_seen
        except TypeError:
            self.dataset_size = n_seen
        noise_var = 1.0
        if self.likelihood == "regression":
            sigma = self.sigma_noise
            if sigma is None:
                sigma = max((sq_residual / n_residual) ** 0.5, 1e-6)
            self.sigma_noise_ = float(sigma)
            noise_var = self.sigma_noise_**2
        self._raw_factors = {
            name: (sums_a[name] / rows[name], sums_g[name] / (n_seen * noise_var))
            for name in sums_a
        }
        self.factors_ = {
            name: KroneckerFactor.from_factors(
                name,
                sums_a[name] / rows[name],
                sums_g[name] / (n_seen * noise_var),
                dict(self.layers)[name].bias is not None,
            )
            for name in sums_a
        }
        self._eig = {
            name: f.precision(
                float(self.dataset_size), self.prior_precision, self.damping, self.regularization
            )
            for name, f in self.factors_.items()
        }
        self.is_fitted = True

    @property
    def kronecker_factors(self) -> dict[str, dict[str, torch.Tensor]]:
        """bensemble 0.2 view: ``{layer: {"Q": A, "H": G}}``, the per-point K-FAC factors."""
        if not self.is_fitted:
            return {}
        return {name: {"Q": a, "H": g} for name, (a, g) in self._raw_factors.items()}

    def _get_ensemble_state(self) -> dict:
        """Everything :meth:`sample_models` needs (bensemble 0.2 API)."""
        keys = ("is_fitted", "likelihood", "dataset_size", "prior_precision", "regularization")
        state = {k: getattr(self, k) for k in keys}
        state["model_state"] = self.model.state_dict()
        if self.is_fitted:
            state.update(factors=self.factors_, eig=self._eig, raw=self._raw_factors)
            state["sigma_noise"] = getattr(self, "sigma_noise_", None)
        return state

    def _set_ensemble_state(self, state: dict) -> None:
        self.model.load_state_dict(state["model_state"])
        for key in ("is_fitted", "likelihood", "dataset_size", "prior_precision", "regularization"):
            setattr(self, key, state[key])
        if state["is_fitted"]:
            self.factors_, self._eig, self._raw_factors = (
                state["factors"],
                state["eig"],
                state["raw"],
            )
            if state.get("sigma_noise") is not None:
                self.sigma_noise_ = state["sigma_noise"]

    # --------------------------------------------------------------- sampling
    def posterior_covariance(self, layer: str) -> torch.Tensor:
        """Dense posterior covariance ``[P, P]`` of ``vec([W | b])`` of one layer (row-major)."""
        self._check_fitted("LaplaceApproximation.posterior_covariance")
        if layer not in self.factors_:
            raise ValueError(
                "LaplaceApproximation.posterior_covariance: `layer` must be one of "
                f"{sorted(self.factors_)} (got {layer!r})"
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
        temperature = check_positive(temperature, "temperature", fn, allow_zero=True)
        gen = check_generator(generator, None, fn)
        gen = self.generator if gen is None else gen
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
        """Posterior predictive at ``x``.

        With ``n_samples=None`` the network is linearised around the mean (GLM predictive):
        ``f ~ N(f*(x), sum_l J_l Sigma_l J_l^T)`` with ``J_l`` the Jacobian w.r.t. ``[W_l | b_l]``.
        Classification returns the probit approximation of ``E[softmax(f)]`` ``[N, K]``;
        regression returns ``(mean [N, K], var [N, K])`` with ``var`` the function variance plus
        ``sigma_noise_^2``. With ``n_samples`` the same quantities come from that many sampled
        networks (mean softmax; sample mean and variance plus noise).
        """
        fn = "LaplaceApproximation.predictive"
        self._check_fitted(fn)
        x = to_tensor(x, "x", fn)
        if n_samples is not None:
            n_samples = check_positive_int(n_samples, "n_samples", fn, minimum=2)
            draws = self.sample_parameters(n_samples, generator=generator)
            member = copy.deepcopy(self.model).eval()  # one copy, reloaded per draw
            outs = []
            with torch.no_grad():
                for s in range(n_samples):
                    load_layers(member, {name: theta[s] for name, theta in draws.items()})
                    outs.append(self._outputs(member(self._to_model(x)), fn).double())
            stack = torch.stack(outs)
            if self.likelihood == "classification":
                return torch.softmax(stack, dim=-1).mean(dim=0)
            return stack.mean(dim=0), stack.var(dim=0) + self.sigma_noise_**2
        means, covs = [], []
        for chunk in x.split(1024):
            mean, cov = self._linearised(chunk, fn)
            means.append(mean)
            covs.append(cov)
        mean, cov = torch.cat(means), torch.cat(covs)
        if self.likelihood == "classification":
            return probit_predictive(mean, cov)
        return mean, torch.diagonal(cov, dim1=1, dim2=2) + self.sigma_noise_**2

    # ---------------------------------------------------------------- helpers
    def _linearised(self, x: torch.Tensor, fn: str) -> tuple[torch.Tensor, torch.Tensor]:
        with inference_mode(self.model), LinearTaps(self.layers) as taps, torch.enable_grad():
            out = self._outputs(self.model(self._to_model(x)), fn)
            n, k = out.shape
            names = [name for name in taps.called() if name in self.factors_]
            eye = torch.eye(k, dtype=torch.float64, device=out.device).expand(n, k, k)
            grads = taps.backprop(out, eye, names)
            cov = torch.zeros(n, k, k, dtype=torch.float64, device=out.device)
            for name in names:
                factor = self.factors_[name]
                a = taps.per_example(name, n, factor.has_bias)
                cov = cov + factor.output_covariance(grads[name], a, self._eig[name])
        return out.detach().double(), cov

    def _outputs(self, out, fn: str) -> torch.Tensor:
        if not isinstance(out, torch.Tensor):
            raise ValueError(f"{fn}: the model must return one tensor (got {type(out).__name__})")
        if out.ndim == 1 and self.likelihood == "regression":
            out = out[:, None]
        if out.ndim != 2:
            raise ValueError(
                f"{fn}: the model output must be [B, K] (got shape {tuple(out.shape)})"
            )
        if self.likelihood == "classification" and out.shape[1] < 2:
            raise ValueError(
                f"{fn}: a classifier must output at least 2 logits (got {out.shape[1]})"
            )
        return out

    def _to_model(self, x: torch.Tensor) -> torch.Tensor:
        param = next(self.model.parameters())
        if x.is_floating_point():
            return x.to(device=param.device, dtype=param.dtype)
        return x.to(param.device)

    def _check_fitted(self, fn: str) -> None:
        if not self.is_fitted:
            raise ValueError(
                f"{fn}: the curvature is not computed yet; call compute_curvature first"
            )
