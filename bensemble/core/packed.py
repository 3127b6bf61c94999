"""Packed evaluation of an ensemble of small multi-layer perceptrons.

For tiny members (a forward pass well under a millisecond) the Python loop over members costs
more than the arithmetic. :class:`PackedMembers` evaluates ``M`` ``nn.Sequential`` MLPs of one
architecture at once: the first linear layer, whose input all members share, is one wide
matrix product ``x [B, D] @ W^T [D, M * H]``; every later linear layer is one batched
``baddbmm`` over the stacked weights ``[M, H_out, H_in]``; element-wise activations act on
``[M, B, H]``. Results equal the member-by-member loop up to float rounding (the same dot
products, possibly summed in another order).

The stacked weights are cached and rebuilt when any member parameter changes (its storage or
its in-place version counter), so training members between predictions is safe.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bensemble.core.member import ExplicitMembers
from bensemble.core.types import MemberPredictions

__all__ = ["PackedMembers", "packable", "PACKED_OPTIONS", "PACK_MAX_WORK"]

#: Values of ``packed`` in :meth:`bensemble.core.Ensemble.from_models`.
PACKED_OPTIONS = ("auto", True, False)
#: "auto" packs on CPU when ``B * sum(in * out)`` multiply-adds per member stay below this
#: (measured on a 2-core CPU: packing wins clearly below ~1e5, breaks even near ~1e6).
PACK_MAX_WORK = 400_000

# Element-wise modules that act identically on [B, H] and [M, B, H].
_ELEMENTWISE = (
    nn.Identity,
    nn.ReLU,
    nn.ReLU6,
    nn.LeakyReLU,
    nn.ELU,
    nn.SELU,
    nn.CELU,
    nn.GELU,
    nn.SiLU,
    nn.Mish,
    nn.Tanh,
    nn.Sigmoid,
    nn.Softplus,
    nn.Hardtanh,
    nn.Hardswish,
    nn.Hardsigmoid,
    nn.Tanhshrink,
    nn.Softsign,
)


def _is_plain_sequential(model: nn.Module) -> bool:
    return isinstance(model, nn.Sequential) and type(model).forward is nn.Sequential.forward


def packable(models: Sequence[nn.Module]) -> bool:
    """True when every model is an ``nn.Sequential`` of the same Linear / activation layers.

    Layers must match position by position: linear layers in shape, bias, dtype and device;
    activations in type and settings. At least one linear layer is required.
    """
    models = list(models)
    if not models or not all(_is_plain_sequential(m) for m in models):
        return False
    first = models[0]
    if not any(isinstance(layer, nn.Linear) for layer in first):
        return False
    for model in models:
        if len(model) != len(first):
            return False
        for ref, layer in zip(first, model):
            if type(layer) is not type(ref):
                return False
            if isinstance(ref, nn.Linear):
                same = (
                    layer.weight.shape == ref.weight.shape
                    and (layer.bias is None) == (ref.bias is None)
                    and layer.weight.dtype == ref.weight.dtype
                    and layer.weight.device == ref.weight.device
                )
                if not same:
                    return False
            elif isinstance(ref, _ELEMENTWISE):
                if layer.extra_repr() != ref.extra_repr():
                    return False
            else:
                return False
    return True


class PackedMembers(ExplicitMembers):
    """:class:`~bensemble.core.member.ExplicitMembers` with a packed forward pass for MLPs.

    The models stay stored as in ``ExplicitMembers`` (same ``state_dict`` keys); only
    :meth:`predict_all` differs. With ``packed="auto"`` the packed pass is used for 2-D inputs
    when the members are tiny (see :data:`PACK_MAX_WORK`) or live on a GPU, and the plain loop
    otherwise; ``packed=True`` always packs.

    Args:
        models: ``nn.Sequential`` members of one Linear / activation architecture.
        output_kind: ``"logits"`` or ``"probs"``.
        packed: ``"auto"`` or ``True``.
    """

    def __init__(
        self, models: Sequence[nn.Module], output_kind: str = "logits", packed: Any = "auto"
    ) -> None:
        super().__init__(models, output_kind=output_kind)
        if packed not in ("auto", True):
            raise ValueError(f"PackedMembers: `packed` must be 'auto' or True (got {packed!r})")
        if not packable(self.models):
            raise ValueError(
                "PackedMembers: `models` must be nn.Sequential stacks of the same Linear and "
                "element-wise activation layers (got members that cannot be packed)"
            )
        self.packed = packed
        self._cache_key: list[tuple[int, int]] | None = None
        self._cache: list[tuple[torch.Tensor, torch.Tensor | None] | None] = []
        self._cache_refs: list[torch.Tensor] = []

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()  # the stacked-weight cache is rebuilt, not pickled
        state["_cache_key"], state["_cache"], state["_cache_refs"] = None, [], []
        return state

    def _work(self, x: torch.Tensor) -> int:
        per_row = sum(
            layer.in_features * layer.out_features
            for layer in self.models[0]
            if isinstance(layer, nn.Linear)
        )
        return int(x.shape[0]) * per_row

    def use_packed(self, x: Any) -> bool:
        """Whether :meth:`predict_all` takes the packed path for this input."""
        if not isinstance(x, torch.Tensor) or x.ndim != 2:
            return False
        if self.packed is True:
            return True
        return x.device.type != "cpu" or self._work(x) <= PACK_MAX_WORK

    def _parameter_key(self) -> tuple[list[tuple[int, int]], list[torch.Tensor]]:
        """Identity and in-place version of every member parameter (cheap to compare)."""
        params = [
            p
            for model in self.models
            for layer in model._modules.values()
            for p in layer._parameters.values()
            if p is not None
        ]
        return [(id(p), p._version) for p in params], params

    def _stacked(self) -> list[tuple[torch.Tensor, torch.Tensor | None] | None]:
        key, params = self._parameter_key()
        if key != self._cache_key:
            self._cache_refs = params  # keeps the ids in the key from being reused
            cache: list[tuple[torch.Tensor, torch.Tensor | None] | None] = []
            for i, layer in enumerate(self.models[0]):
                if isinstance(layer, nn.Linear):
                    weight = torch.stack([m[i].weight.detach() for m in self.models])
                    bias = (
                        torch.stack([m[i].bias.detach() for m in self.models])
                        if layer.bias is not None
                        else None
                    )
                    cache.append((weight, bias))
                else:
                    cache.append(None)
            self._cache, self._cache_key = cache, key
        return self._cache

    @torch.no_grad()
    def predict_all(self, x: Any) -> MemberPredictions:
        if not self.use_packed(x):
            return super().predict_all(x)
        n_members = len(self.models)
        h = x  # [B, D] shared by all members until the first linear layer
        shared = True
        for layer, packed in zip(self.models[0], self._stacked()):
            if packed is None:
                h = layer(h)
                continue
            weight, bias = packed  # [M, out, in], [M, out]
            if shared:
                out = weight.shape[1]
                wide = F.linear(
                    h, weight.reshape(-1, weight.shape[2]), None if bias is None else bias.view(-1)
                )  # [B, M * out]
                h = wide.view(h.shape[0], n_members, out).transpose(0, 1)
                shared = False
            elif bias is None:
                h = torch.bmm(h, weight.transpose(1, 2))
            else:
                h = torch.baddbmm(bias.unsqueeze(1), h, weight.transpose(1, 2))
        return h.contiguous()
