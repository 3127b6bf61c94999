"""The last linear layer of a classifier: finding it, capturing its inputs, scoring its posterior.

Shared plumbing of :class:`~bensemble.methods.laplace.LastLayerLaplace`: :func:`find_last_linear`
picks and checks the output layer, :func:`last_layer_inputs` runs the model and captures what
that layer receives (with the constant 1 of the bias appended) and returns, and
:func:`probit_nll_curve` scores the probit predictive of a batch for many prior precisions at
once (the held-out criterion of the prior-precision search).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from bensemble._validation import check_finite, to_tensor
from bensemble.methods._kronecker import BATCH, probit_predictive

__all__ = ["find_last_linear", "last_layer_inputs", "probit_nll_curve"]

#: Elements of the largest temporary of :func:`probit_nll_curve` (rows x classes x parameters).
_CURVE_ELEMENTS = 2**23


def find_last_linear(model: nn.Module, name: str | None, fn: str) -> tuple[str, nn.Linear]:
    """The output layer: the ``nn.Linear`` named ``name``, else the last one registered.

    It must have a bias and at least two outputs; in an ``nn.Sequential`` the last module.
    """
    if name is not None:
        try:
            layer = model.get_submodule(name)
        except AttributeError:
            raise ValueError(f"{fn}: `last_layer` must name a submodule (got {name!r})") from None
        if not isinstance(layer, nn.Linear):
            raise ValueError(
                f"{fn}: `last_layer` must name an nn.Linear (got {type(layer).__name__})"
            )
    else:
        linears = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear)]
        if not linears:
            raise ValueError(f"{fn}: `model` must contain an nn.Linear output layer (got none)")
        name, layer = linears[-1]
        if isinstance(model, nn.Sequential) and len(model) > 0 and model[-1] is not layer:
            raise ValueError(
                f"{fn}: the last module of an nn.Sequential `model` must be its nn.Linear output "
                f"layer (got {type(model[-1]).__name__}); pass last_layer= to name it"
            )
    if layer.bias is None:
        raise ValueError(f"{fn}: the last layer must have a bias (got bias=False)")
    if layer.out_features < 2:
        raise ValueError(
            f"{fn}: the last layer must output at least 2 logits, one per class "
            f"(got out_features={layer.out_features})"
        )
    return name, layer


def _chunks(x: Any, name: str, fn: str) -> list[Any]:
    """One batch as row chunks of at most ``BATCH`` rows (a mapping stays whole)."""
    if isinstance(x, Mapping):
        return [x]
    x = to_tensor(x, name, fn)
    if x.is_floating_point():
        check_finite(x, name, fn)
    if x.ndim == 0 or x.shape[0] == 0:
        raise ValueError(f"{fn}: `{name}` must be a non-empty batch (got shape {tuple(x.shape)})")
    return list(x.split(BATCH))


def _to_layer(chunk: Any, param: torch.Tensor) -> Any:
    if isinstance(chunk, Mapping):
        return chunk
    if chunk.is_floating_point():
        return chunk.to(device=param.device, dtype=param.dtype)
    return chunk.to(param.device)


def last_layer_inputs(
    model: nn.Module,
    layer: nn.Linear,
    layer_name: str,
    x: Any,
    fn: str,
    *,
    check_output: bool,
    name: str = "x",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Last-layer inputs ``[N, F + 1]`` (with the constant 1) and the layer's outputs, in float64.

    ``x`` is one batch: an array ``[N, ...]`` or a mapping given to the model as it is. The model
    runs in eval mode under ``torch.no_grad`` in chunks of ``BATCH`` rows (the training flags of
    its modules are restored afterwards, also when an error escapes); a forward hook on
    ``layer`` captures its input and output. ``check_output``: the model's output must be
    exactly the layer's. ``name`` is the argument named in error messages.
    """
    chunks = _chunks(x, name, fn)
    param = layer.weight
    captured: list[torch.Tensor] = []

    def hook(_module, inputs, output):
        captured.append(inputs[0].detach())
        captured.append(output)

    phis, outs = [], []
    flags = [(m, m.training) for m in model.modules()]
    handle = layer.register_forward_hook(hook)
    try:
        model.eval()
        with torch.no_grad():
            for chunk in chunks:
                captured.clear()
                out = model(_to_layer(chunk, param))
                features, layer_out = _captured_pair(captured, layer_name, fn)
                same = isinstance(out, torch.Tensor) and (
                    out is layer_out
                    or (out.shape == layer_out.shape and torch.equal(out, layer_out))
                )
                if check_output and not same:
                    raise ValueError(
                        f"{fn}: `model` must return the logits of its last nn.Linear "
                        f"(`{layer_name}`) unchanged (got another output); pass "
                        "last_layer= to name the output layer, or drop any softmax after it"
                    )
                if features.ndim != 2:
                    raise ValueError(
                        f"{fn}: the last layer must receive features [N, F] "
                        f"(got shape {tuple(features.shape)})"
                    )
                phis.append(features.to(torch.float64))
                outs.append(layer_out.detach().to(torch.float64))
    finally:
        handle.remove()
        for module, flag in flags:
            module.training = flag
    features = torch.cat(phis)
    logits = torch.cat(outs)
    if not (bool(torch.isfinite(features).all()) and bool(torch.isfinite(logits).all())):
        raise ValueError(
            f"{fn}: the model's features and logits on `{name}` must be finite (got NaN/inf); "
            "check the inputs' scale and the weights"
        )
    phi = torch.cat([features, torch.ones_like(features[:, :1])], dim=1)
    return phi, logits


def _captured_pair(captured: list, layer_name: str, fn: str) -> tuple[torch.Tensor, torch.Tensor]:
    if not captured:
        raise ValueError(
            f"{fn}: the last layer `{layer_name}` was not called by the model's forward; pass "
            "last_layer= to name the output layer"
        )
    if len(captured) != 2:
        raise ValueError(
            f"{fn}: the last layer `{layer_name}` must be called once per forward pass "
            f"(got {len(captured) // 2} calls)"
        )
    return captured[0], captured[1]


def probit_nll_curve(
    phi: torch.Tensor,
    labels: torch.Tensor,
    mean: torch.Tensor,
    eigenvectors: torch.Tensor,
    eigenvalues: torch.Tensor,
    prior_precisions: torch.Tensor,
) -> tuple[torch.Tensor, float]:
    """Summed NLL of the probit predictive ``[G]`` for each prior precision, and of the MAP.

    Args:
        phi: last-layer inputs ``[B, F + 1]``.
        labels: ``[B]``.
        mean: ``[W | b]`` ``[K, F + 1]``.
        eigenvectors: ``U [P, P]`` and eigenvalues ``lam [P]`` of the GGN ``H = U diag(lam) U^T``.
        prior_precisions: ``delta [G]``.

    The logit covariance at ``delta`` is ``J U diag(1 / (lam + delta)) U^T J^T`` with
    ``J = I_K (x) phi^T``; ``J U`` is formed once per chunk of rows and reused for every
    ``delta``.
    """
    n_classes, dim = mean.shape
    n_params = eigenvectors.shape[1]
    basis = eigenvectors.view(n_classes, dim, n_params)
    totals = torch.zeros(prior_precisions.numel(), dtype=torch.float64)
    map_total = 0.0
    rows = max(1, _CURVE_ELEMENTS // (n_classes * n_params))
    for phi_c, labels_c in zip(phi.split(rows), labels.split(rows)):
        logits = phi_c @ mean.T
        ju = torch.einsum("bf,kfp->bkp", phi_c, basis)  # [B, K, P]
        index = torch.arange(labels_c.shape[0])
        map_total += float(torch.nn.functional.cross_entropy(logits, labels_c, reduction="sum"))
        for g, delta in enumerate(prior_precisions.tolist()):
            scaled = ju / (eigenvalues + delta)
            cov = scaled @ ju.transpose(1, 2)  # [B, K, K]
            probs = probit_predictive(logits, cov)[index, labels_c]
            totals[g] += -float(torch.log(probs.clamp_min(torch.finfo(torch.float64).tiny)).sum())
    return totals, map_total
