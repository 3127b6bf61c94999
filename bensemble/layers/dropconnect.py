"""DropConnect: dropout on the weights of a linear layer (Wan et al., 2013)."""

from __future__ import annotations

import math
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from bensemble.layers.base import StochasticLayer, check_linear_sizes, draw_mask

__all__ = ["DropConnectLinear"]


def _check_drop_probability(p: object, fn: str) -> float:
    ok = isinstance(p, (int, float)) and not isinstance(p, bool) and 0.0 <= float(p) < 1.0
    if not ok:
        raise ValueError(f"{fn}: `p` must be a number in [0, 1) (got {p!r})")
    return float(p)


class DropConnectLinear(StochasticLayer):
    """A linear layer whose weights are dropped at random.

    While sampling (train mode, or when an ensemble samples it) each forward pass draws **one**
    weight mask ``m ~ Bernoulli(1 - p)`` of shape ``[out_features, in_features]``, shared by every
    row of the batch, and computes::

        y = x (W * m)^T / (1 - p) + b

    so ``E[y] = x W^T + b``: in eval mode the layer returns that deterministic mean (a plain
    linear layer). The bias is never dropped. One mask per pass makes each pass a single coherent
    function (a member of an implicit ensemble); it also means that, unlike ``nn.Dropout``, rows of
    one training batch share their noise.

    Randomness comes from :attr:`sample_generator` when set (an ensemble sets it per pass), else
    from torch's global random state.

    Args:
        in_features: size of each input row.
        out_features: size of each output row.
        p: probability of dropping a weight, in ``[0, 1)``.
        bias: whether to learn an additive bias.

    Example:
        >>> layer = DropConnectLinear(4, 3, p=0.5).eval()
        >>> x = torch.randn(2, 4)
        >>> torch.equal(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias))
        True
    """

    stochastic_kind: ClassVar[str] = "dropconnect"
    supports_replicas: ClassVar[bool] = True

    def __init__(self, in_features: int, out_features: int, p: float = 0.5, bias: bool = True):
        super().__init__()
        fn = "DropConnectLinear"
        # what __init__ allocates: the weight and the bias (float32)
        self.in_features, self.out_features = check_linear_sizes(in_features, out_features, fn, 1)
        self.p = _check_drop_probability(p, fn)
        self.weight = nn.Parameter(torch.empty(self.out_features, self.in_features))
        self.bias = nn.Parameter(torch.empty(self.out_features)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The initialisation of :class:`torch.nn.Linear`."""
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1.0 / math.sqrt(self.in_features)
            nn.init.uniform_(self.bias, -bound, bound)

    @classmethod
    def from_linear(cls, linear: nn.Linear, p: float = 0.5) -> DropConnectLinear:
        """A DropConnect layer holding a copy of ``linear``'s weights and bias."""
        if not isinstance(linear, nn.Linear):
            raise ValueError(
                f"DropConnectLinear.from_linear: `linear` must be an nn.Linear "
                f"(got {type(linear).__name__})"
            )
        layer = cls(linear.in_features, linear.out_features, p=p, bias=linear.bias is not None)
        layer = layer.to(device=linear.weight.device, dtype=linear.weight.dtype)
        with torch.no_grad():
            layer.weight.copy_(linear.weight)
            if linear.bias is not None:
                layer.bias.copy_(linear.bias)
        return layer

    def stochastic_active(self) -> bool:
        """``p > 0``: with ``p = 0`` every draw keeps every weight."""
        return self.p > 0.0

    def _mask(self, generator: torch.Generator | None) -> torch.Tensor:
        w = self.weight
        return draw_mask(w.shape, 1.0 - self.p, device=w.device, dtype=w.dtype, generator=generator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.sampling or self.p == 0.0:
            return F.linear(x, self.weight, self.bias)
        scale = 1.0 / (1.0 - self.p)
        replicas = self.sample_replicas
        if replicas is None:
            weight = self.weight * self._mask(self.sample_generator) * scale
            return F.linear(x, weight, self.bias)
        # x holds k stacked copies of the batch: copy i uses the mask of generator i.
        k = len(replicas)
        masks = torch.stack([self._mask(g) for g in replicas])  # [k, out, in]
        weights = (self.weight * masks * scale).transpose(1, 2)  # [k, in, out]
        rows = x.reshape(k, -1, self.in_features)
        if self.bias is None:
            out = torch.bmm(rows, weights)
        else:
            out = torch.baddbmm(self.bias.view(1, 1, -1), rows, weights)
        return out.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"p={self.p}, bias={self.bias is not None}"
        )
