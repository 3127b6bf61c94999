"""Packed evaluation of an ensemble of small multi-layer perceptrons.

For tiny members (a forward pass well under a millisecond) the Python loop over members costs
more than the arithmetic. :class:`PackedMembers` evaluates ``M`` ``nn.Sequential`` MLPs of one
architecture at once: the first linear layer, whose input all members share, is one wide
matrix product ``x [B, D] @ W^T [D, M * H]``; every later linear layer is one batched
``baddbmm`` over the stacked weights ``[M, H_out, H_in]``; element-wise activations act on
``[M, B, H]``. Results equal the member-by-member loop up to float rounding (the same dot
products, possibly summed in another order).

The stacked weights are cached and rebuilt when any member layer or parameter changes (its
identity or its in-place version counter), so training members between predictions is safe; a
member that stops being packable (a layer replaced by another kind) falls back to the loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bensemble.core._checks import check_member_stack
from bensemble.core.member import ExplicitMembers
from bensemble.core.types import MemberPredictions

__all__ = ["PackedMembers", "packable", "PACKED_OPTIONS", "PACK_MAX_WORK", "PACK_MAX_ROWS"]

#: Values of ``packed`` in :meth:`bensemble.core.Ensemble.from_models`.
PACKED_OPTIONS = ("auto", True, False)
#: "auto" packs on a CPU when the batch has at most :data:`PACK_MAX_ROWS` rows and
#: ``B * sum(in * out)`` (multiply-adds of one member's forward pass) is at most this.
#: Fitted on a shared 2-core CPU, one thread (benchmarks/bench_packed.py): packing won 1.2-3.5x
#: for batches up to 64 rows with up to ~1.2e6 multiply-adds, and lost (0.5-0.9x) from 256 rows
#: or ~5e6 multiply-adds, where the matrix products dominate and the batched kernel is slower
#: than ``M`` separate ones.
PACK_MAX_WORK = 1_500_000
#: See :data:`PACK_MAX_WORK`.
PACK_MAX_ROWS = 128

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
    when the members and the batch are small (see :data:`PACK_MAX_WORK`) or live on a GPU, and
    the plain loop
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
        self._cache_key: list[Any] | None = None
        self._cache: list[tuple] | None = None
        self._cache_refs: list[Any] = []
        self._work_per_row = 0

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()  # the stacked-weight cache is rebuilt, not pickled
        state["_cache_key"], state["_cache"], state["_cache_refs"] = None, None, []
        return state

    def _key(self) -> list[Any]:
        """Identity of every layer and parameter, in-place versions, storage, dtype and device.

        ``.to()`` / ``.double()`` / ``.half()`` replace a parameter's data without touching its
        identity or version: the storage pointer, dtype and device catch that.
        """
        key: list[Any] = []
        for model in self.models:
            for layer in model._modules.values():
                key.append(id(layer))
                for p in layer._parameters.values():
                    if p is not None:
                        key.append((id(p), p._version, p.data_ptr(), p.dtype, p.device))
        return key

    def _refs(self) -> list[Any]:
        """Every layer and parameter named in the key, held so that no id in it is reused."""
        return [
            obj
            for model in self.models
            for layer in model._modules.values()
            for obj in (layer, *layer._parameters.values())
        ]

    def _plan(self) -> list[tuple] | None:
        """The packed steps, rebuilt when a member layer or parameter changed; ``None`` if
        the members are no longer packable."""
        key = self._key()
        if key == self._cache_key:
            return self._cache
        plan: list[tuple] | None = None
        work = 0
        if packable(self.models):
            plan = []
            shared = True  # input still [B, D], common to all members
            for i, layer in enumerate(self.models[0]):
                if not isinstance(layer, nn.Linear):
                    plan.append(("map", layer))
                    continue
                work += layer.in_features * layer.out_features
                weight = torch.stack([m[i].weight.detach() for m in self.models])
                bias = None
                if layer.bias is not None:
                    bias = torch.stack([m[i].bias.detach() for m in self.models])
                if shared:  # one wide product: [B, D] @ [D, M * out]
                    wide_bias = None if bias is None else bias.reshape(-1)
                    plan.append(("wide", weight.reshape(-1, weight.shape[2]), wide_bias))
                    shared = False
                else:  # [M, B, in] @ [M, in, out] (+ [M, 1, out])
                    plan.append(
                        ("bmm", weight.transpose(1, 2), None if bias is None else bias.unsqueeze(1))
                    )
        self._cache, self._cache_key, self._cache_refs = plan, key, self._refs()
        self._work_per_row = work
        return plan

    def use_packed(self, x: Any) -> bool:
        """Whether :meth:`predict_all` takes the packed path for this input."""
        if not isinstance(x, torch.Tensor) or x.ndim != 2 or self._plan() is None:
            return False
        if self.packed is True or x.device.type != "cpu":
            return True
        rows = x.shape[0]
        return rows <= PACK_MAX_ROWS and rows * self._work_per_row <= PACK_MAX_WORK

    @torch.no_grad()
    def predict_all(self, x: Any) -> MemberPredictions:
        if not self.use_packed(x):
            return super().predict_all(x)
        n_members = len(self.models)
        h = x
        for step in self._cache:
            kind = step[0]
            if kind == "map":
                h = step[1](h)
            elif kind == "wide":
                wide = F.linear(h, step[1], step[2])  # [B, M * out]
                h = wide.view(h.shape[0], n_members, -1).transpose(0, 1)
            elif step[2] is None:
                h = torch.bmm(h, step[1])
            else:
                h = torch.baddbmm(step[2], h, step[1])
        return check_member_stack(h.contiguous(), self.output_kind, "PackedMembers.predict_all")
