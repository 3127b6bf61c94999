"""One pass over the training data: the K-FAC sums of :class:`LaplaceApproximation`.

:func:`accumulate_curvature` runs the model on every batch with :class:`LinearTaps` and sums,
per layer, ``a a^T`` (inputs, with the constant 1 of the bias) and ``g g^T`` (back-propagated
square roots of the output Hessian), the NLL of the trained network and the regression
residuals; it reads the likelihood off the first batch when none is given, checks every batch
(finite inputs, targets and outputs) and keeps the first :data:`PROBE_ROWS` points for the check
of an evidence-tuned predictive against the network. :func:`check_kfac_fits` bounds the memory
of the factors before any of them is allocated.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from bensemble._validation import check_finite, check_same_length, to_tensor, warn_user
from bensemble.methods._kronecker import (
    KroneckerFactor,
    LinearTaps,
    inference_mode,
    iterate_pairs,
    layer_theta,
    output_hessian_sqrt,
    supported_layer,
)
from bensemble.methods._laplace_checks import (
    check_curvature_fits,
    check_finite_outputs,
    check_targets,
    infer_likelihood,
)

__all__ = [
    "PROBE_ROWS",
    "CurvatureSums",
    "FittedCurvature",
    "accumulate_curvature",
    "as_outputs",
    "check_kfac_fits",
    "fitted_curvature",
    "posterior_layers",
    "to_model",
]

#: Training points kept to check an evidence-tuned predictive against the trained network.
PROBE_ROWS = 1024


@dataclass
class CurvatureSums:
    """Sums over the ``n_seen`` training points (float64), per layer name."""

    likelihood: str
    sums_a: dict[str, torch.Tensor] = field(default_factory=dict)
    sums_g: dict[str, torch.Tensor] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    n_seen: int = 0
    nll: float = 0.0  # classification: summed cross-entropy of the trained network
    sq_residual: float = 0.0  # regression: summed squared residuals over n_residual values
    n_residual: int = 0
    probe: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)


def posterior_layers(model: nn.Module, fn: str) -> list[tuple[str, nn.Module]]:
    """The named ``nn.Linear`` / plain ``nn.Conv2d`` layers that get a posterior (a warning
    names the convolutions left at their trained weights); at least one."""
    layers = [(n, m) for n, m in model.named_modules() if supported_layer(m)]
    kept = dict(layers)
    skipped = [n for n, m in model.named_modules() if isinstance(m, nn.Conv2d) and n not in kept]
    if skipped:
        warn_user(
            f"{fn}: Conv2d layers {skipped} (groups > 1, string padding or a padding mode other "
            "than 'zeros') keep their trained weights; only nn.Linear and plain nn.Conv2d "
            "layers get a posterior"
        )
    if not layers:
        raise ValueError(
            f"{fn}: `model` must contain at least one nn.Linear or nn.Conv2d (got none)"
        )
    return layers


def layer_shape(module: nn.Module) -> tuple[int, int]:
    """``(outputs, inputs + bias)`` of ``[W | b]`` for an ``nn.Linear`` or ``nn.Conv2d``."""
    if isinstance(module, nn.Linear):
        n_in, n_out = module.in_features, module.out_features
    else:
        kh, kw = module.kernel_size
        n_in, n_out = module.in_channels * kh * kw, module.out_channels
    return n_out, n_in + (module.bias is not None)


def check_kfac_fits(layers: list[tuple[str, nn.Module]], fn: str) -> None:
    """Every layer's factors (``A``, ``G``, their eigenvectors and sums, the precision
    eigenvalues) fit in this machine's memory, before anything is allocated."""
    total = 0
    for name, module in layers:
        n_out, n_in = layer_shape(module)
        values = 3 * n_in * n_in + 3 * n_out * n_out + 2 * n_out * n_in
        check_curvature_fits(
            fn,
            f"layer `{name}`'s Kronecker factors ([{n_in}, {n_in}] and [{n_out}, {n_out}])",
            values,
            "use a narrower layer, or LastLayerLaplace when only the output layer matters",
        )
        total += values
    check_curvature_fits(fn, "the Kronecker factors of all layers", total, "use fewer layers")


def as_outputs(out, likelihood: str | None, fn: str) -> torch.Tensor:
    """The model output as ``[B, K]`` (``[B]`` is ``[B, 1]``), checked for the likelihood."""
    if not isinstance(out, torch.Tensor):
        raise ValueError(f"{fn}: the model must return one tensor (got {type(out).__name__})")
    if out.ndim == 1 and likelihood != "classification":
        out = out[:, None]
    if out.ndim != 2:
        raise ValueError(f"{fn}: the model output must be [B, K] (got shape {tuple(out.shape)})")
    if likelihood == "classification" and out.shape[1] < 2:
        raise ValueError(f"{fn}: a classifier must output at least 2 logits (got {out.shape[1]})")
    return out


def to_model(x, model: nn.Module):
    """``x`` on the model's device (and in its dtype when floating); a mapping as it is."""
    if isinstance(x, Mapping):
        return x
    param = next(model.parameters())
    if x.is_floating_point():
        return x.to(device=param.device, dtype=param.dtype)
    return x.to(param.device)


def accumulate_curvature(
    model: nn.Module,
    layers: list[tuple[str, nn.Module]],
    data,
    likelihood: str | None,
    fn: str,
    *,
    max_points: int | None = None,
    verbose: bool = False,
    name: str = "data",
) -> CurvatureSums:
    """The K-FAC sums over the batches of ``data`` (at most ``max_points`` points); ``name``
    is the argument named in error messages."""
    sums: CurvatureSums | None = None
    with inference_mode(model):
        for x, y in iterate_pairs(data, fn, name=name):
            seen = 0 if sums is None else sums.n_seen
            if max_points is not None and seen >= max_points:
                break
            x, y = to_tensor(x, name, fn), to_tensor(y, "y", fn)
            if x.ndim == 0 or y.ndim == 0:
                raise ValueError(f"{fn}: each batch of `{name}` must hold arrays (got a scalar)")
            check_same_length(fn, x=x, y=y)
            if max_points is not None:
                x, y = x[: max_points - seen], y[: max_points - seen]
            check_finite(x, name, fn)
            if x.shape[0] == 0:
                continue
            with LinearTaps(layers) as taps, torch.enable_grad():
                out = as_outputs(model(to_model(x, model)), likelihood, fn)
                check_finite_outputs(out, name, fn)
                if sums is None:
                    likelihood = likelihood or infer_likelihood(y, out, fn)
                    out = as_outputs(out, likelihood, fn)
                    sums = CurvatureSums(likelihood)
                target = check_targets(y, out, likelihood, fn)
                _add_batch(sums, taps, layers, out, target)
            room = PROBE_ROWS - sum(p[0].shape[0] for p in sums.probe)
            if room > 0:
                sums.probe.append((x[:room].detach(), target[:room].detach()))
            sums.n_seen += int(x.shape[0])
            if verbose:
                print(f"{fn}: {sums.n_seen} samples processed")
    if sums is None:
        raise ValueError(f"{fn}: `{name}` must hold at least one sample (got none)")
    return sums


def _add_batch(sums: CurvatureSums, taps: LinearTaps, layers, out, target) -> None:
    detached = out.detach().double()
    if sums.likelihood == "regression":
        sums.sq_residual += float(((target - detached) ** 2).sum())
        sums.n_residual += target.numel()
    else:
        sums.nll += float(torch.nn.functional.cross_entropy(detached, target, reduction="sum"))
    names = taps.called()
    grads = taps.backprop(out, output_hessian_sqrt(detached, sums.likelihood), names)
    modules = dict(layers)
    for name in names:
        a = taps.rows(name, modules[name].bias is not None)
        g = grads[name].reshape(-1, grads[name].shape[-1])
        sums.sums_a[name] = sums.sums_a.get(name, 0.0) + a.T @ a
        sums.sums_g[name] = sums.sums_g.get(name, 0.0) + g.T @ g
        sums.rows[name] = sums.rows.get(name, 0) + a.shape[0]


@dataclass
class FittedCurvature:
    """What a fit keeps: the factors and the scalars of the evidence."""

    likelihood: str
    n: int
    noise_var: float  # 1 for classification
    sigma_noise: float | None  # regression noise standard deviation
    nll: float  # summed NLL of the trained network on the training data
    raw_factors: dict[str, tuple[torch.Tensor, torch.Tensor]]  # per-point (A, G)
    factors: dict[str, KroneckerFactor]
    theta_norm2: float  # ||theta*||^2 over the layers with a posterior
    probe: tuple[torch.Tensor, torch.Tensor]  # training rows for the check against the network


def fitted_curvature(
    sums: CurvatureSums, layers: list[tuple[str, nn.Module]], sigma_noise: float | None, fn: str
) -> FittedCurvature:
    """Eigen-decomposed factors ``A = sum a a^T / rows``, ``G = sum g g^T / (n sigma^2)`` and
    the training NLL (Gaussian regression: ``sigma`` given, else the residuals' RMS)."""
    n, noise_var, sigma = sums.n_seen, 1.0, None
    nll = sums.nll
    if sums.likelihood == "regression":
        sigma = sigma_noise
        if sigma is None:
            sigma = max((sums.sq_residual / sums.n_residual) ** 0.5, 1e-6)
        noise_var = float(sigma) ** 2
        nll = 0.5 * (
            sums.n_residual * math.log(2 * math.pi * noise_var) + sums.sq_residual / noise_var
        )
    modules = dict(layers)
    raw = {
        name: (sums.sums_a[name] / sums.rows[name], sums.sums_g[name] / (n * noise_var))
        for name in sums.sums_a
    }
    factors = {}
    for name, (a, g) in raw.items():
        try:
            factors[name] = KroneckerFactor.from_factors(name, a, g, modules[name].bias is not None)
        except torch.linalg.LinAlgError:
            raise ValueError(
                f"{fn}: `model` layer `{name}` must give Kronecker factors that can be "
                "eigen-decomposed (the decomposition did not converge); check the scale of its "
                "inputs"
            ) from None
    norm2 = sum(float((layer_theta(modules[name]) ** 2).sum()) for name in factors)
    probe = tuple(torch.cat(part) for part in zip(*sums.probe))
    return FittedCurvature(
        sums.likelihood, n, noise_var, None if sigma is None else float(sigma), nll, raw,
        factors, norm2, probe,
    )  # fmt: skip
