"""The last linear layer of a classifier: finding it and capturing its inputs.

Shared plumbing of :class:`~bensemble.methods.laplace.LastLayerLaplace`: :func:`find_last_linear`
picks and checks the output layer, :func:`last_layer_inputs` runs the model and captures what
that layer receives (with the constant 1 of the bias appended) and returns.
"""

from __future__ import annotations

import torch
from torch import nn

from bensemble._validation import check_finite, to_tensor
from bensemble.methods._kronecker import BATCH

__all__ = ["find_last_linear", "last_layer_inputs"]


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


def last_layer_inputs(
    model: nn.Module,
    layer: nn.Linear,
    layer_name: str,
    x,
    fn: str,
    *,
    check_output: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Last-layer inputs ``[N, F + 1]`` (with the constant 1) and the layer's outputs, in float64.

    ``model`` runs in eval mode under ``torch.no_grad`` in batches of ``BATCH`` rows (the
    training flags of its modules are restored afterwards); a forward hook on ``layer`` captures
    its input and output. ``check_output``: the model's output must be exactly the layer's.
    """
    x = to_tensor(x, "x", fn)
    if x.is_floating_point():
        check_finite(x, "x", fn)
    if x.ndim == 0 or x.shape[0] == 0:
        raise ValueError(f"{fn}: `x` must be a non-empty batch (got shape {tuple(x.shape)})")
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
            for chunk in x.split(BATCH):
                if chunk.is_floating_point():
                    chunk = chunk.to(device=param.device, dtype=param.dtype)
                else:
                    chunk = chunk.to(param.device)
                captured.clear()
                out = model(chunk)
                if not captured:
                    raise ValueError(
                        f"{fn}: the last layer `{layer_name}` was not called by "
                        "the model's forward; pass last_layer= to name the output layer"
                    )
                if len(captured) != 2:
                    raise ValueError(
                        f"{fn}: the last layer `{layer_name}` must be called once "
                        f"per forward pass (got {len(captured) // 2} calls)"
                    )
                features, layer_out = captured
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
    phi = torch.cat([features, torch.ones_like(features[:, :1])], dim=1)
    return phi, torch.cat(outs)
