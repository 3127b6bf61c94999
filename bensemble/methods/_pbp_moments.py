"""Moment propagation for probabilistic backpropagation, with its analytic per-example gradients.

A :class:`PBPNet` holds, per layer, the means ``m`` and variances ``v`` ``[H, D + 1]`` of a
factorised Gaussian over the weights (bias as the last column, the input augmented with a 1).
The pre-activations are scaled by ``s = 1 / sqrt(D + 1)`` (Hernández-Lobato & Adams 2015)::

    m_a = s z_m m^T,    v_a = s^2 (z_v (m^2)^T + z_m^2 v^T + z_v v^T),

and hidden layers pass ``(m_a, v_a)`` through :func:`relu_moments`. :func:`moments_with_grads`
returns the output moments together with what the backward pass needs, and
:func:`backward_moments` turns ``d log Z / d (m_out, v_out)`` into the **per-example** gradients
``d log Z_i / d m`` and ``d log Z_i / d v`` ``[B, H, D + 1]`` of every layer in closed form (no
autograd), using the ReLU moment derivatives

    d m_b / d m_a = Phi,  d m_b / d v_a = phi / (2 sqrt v_a),
    d v_b / d m_a = 2 m_b (1 - Phi),  d v_b / d v_a = Phi - m_b phi / sqrt v_a,

with ``Phi, phi`` the standard normal cdf and pdf at ``m_a / sqrt v_a``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from bensemble._validation import (
    as_float_tensor,
    check_allocation,
    check_positive,
    check_positive_int,
    machine_memory_bytes,
)
from bensemble.utils import standard_normal_cdf, standard_normal_pdf

__all__ = ["PBPNet", "ProbLinear", "backward_moments", "moments_with_grads", "relu_moments"]

#: Floor of the pre-activation variance.
VAR_FLOOR = 1e-12


def _check_float_dtype(dtype, fn: str) -> torch.dtype:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"{fn}: `dtype` must be a floating torch.dtype (got {dtype!r})")
    return dtype


def relu_moments(
    m: torch.Tensor, v: torch.Tensor, eps: float = VAR_FLOOR
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and variance of ``max(0, a)`` for ``a ~ N(m, v)``, elementwise.

    ``E = m Phi(al) + sqrt(v) phi(al)``, ``E[b^2] = (m^2 + v) Phi(al) + m sqrt(v) phi(al)``,
    ``al = m / sqrt(v)``; the variance is ``E[b^2] - E^2`` floored at 0. ``v`` is floored at
    ``eps``.

    Args:
        m: finite means (any shape; a tensor, numpy array or nested list).
        v: finite variances ``>= 0``, broadcastable with ``m``.
        eps: floor of ``v`` (``> 0``).

    Example:
        >>> mean, var = relu_moments(torch.tensor([0.0]), torch.tensor([1.0]))
        >>> round(float(mean), 4)
        0.3989
    """
    fn = "relu_moments"
    m = as_float_tensor(m, "m", fn, dtype=None, allow_empty=True)
    v = as_float_tensor(v, "v", fn, dtype=None, allow_empty=True)
    if v.numel() and float(v.min()) < 0.0:
        raise ValueError(f"{fn}: `v` must be >= 0 (got minimum {float(v.min()):.4g})")
    try:
        torch.broadcast_shapes(m.shape, v.shape)
    except RuntimeError:
        raise ValueError(
            f"{fn}: `m` and `v` must have broadcastable shapes (got {tuple(m.shape)} and "
            f"{tuple(v.shape)})"
        ) from None
    return _relu_moments(m, v, check_positive(eps, "eps", fn))


def _relu_moments(
    m: torch.Tensor, v: torch.Tensor, eps: float = VAR_FLOOR
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`relu_moments` without input checks (the moment propagation's inner loop)."""
    v = v.clamp_min(eps)
    sd = v.sqrt()
    al = m / sd
    cdf, pdf = standard_normal_cdf(al), standard_normal_pdf(al)
    mean = sd * (al * cdf + pdf)
    second = (m * m + v) * cdf + m * sd * pdf
    return mean, (second - mean * mean).clamp_min(0.0)


class ProbLinear(nn.Module):
    """Means ``m`` and variances ``v`` ``[out, in + 1]`` of one PBP layer (bias last).

    ``m`` starts at ``N(0, 1 / (in + 1))`` draws, ``v`` at ``0.5`` (the engine resets ``v`` to the
    prior variance). :attr:`dtype` and :attr:`device` are those of the parameters, so the layer
    follows ``.to()``, ``.float()``, ``.double()`` and ``.half()``.
    """

    def __init__(self, in_features: int, out_features: int, dtype=torch.float64, device=None):
        super().__init__()
        fn = "ProbLinear"
        self.in_features = check_positive_int(in_features, "in_features", fn)
        self.out_features = check_positive_int(out_features, "out_features", fn)
        dtype = _check_float_dtype(dtype, fn)
        check_allocation(
            fn, "out_features", self.out_features, per_count=2 * (self.in_features + 1),
            itemsize=dtype.itemsize, others="in_features",
        )  # fmt: skip
        device = torch.device(device) if device is not None else torch.device("cpu")
        shape = (self.out_features, self.in_features + 1)
        # drawn in float64 and cast, so every dtype starts from the same weights
        init = torch.randn(shape, dtype=torch.float64) / math.sqrt(shape[1])
        self.m = nn.Parameter(init.to(device, dtype), requires_grad=False)
        self.v = nn.Parameter(torch.full(shape, 0.5, dtype=dtype, device=device),
                              requires_grad=False)  # fmt: skip

    @property
    def dtype(self) -> torch.dtype:
        """dtype of the moments (follows the module's conversions)."""
        return self.m.dtype

    @property
    def device(self) -> torch.device:
        """Device of the moments (follows the module's conversions)."""
        return self.m.device

    @property
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.in_features + 1)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


class PBPNet(nn.Module):
    """A ReLU network of :class:`ProbLinear` layers (``layer_sizes = [D, H_1, ..., K]``).

    :attr:`dtype` and :attr:`device` are those of the parameters: the network follows ``.to()``,
    ``.float()``, ``.double()`` and ``.half()`` (float64, the default, is recommended for
    fitting; inputs are converted to the network's dtype).
    """

    def __init__(self, layer_sizes, dtype=torch.float64, device=None):
        super().__init__()
        fn = "PBPNet"
        try:
            sizes = list(layer_sizes)
        except TypeError:
            sizes = None
        if sizes is None or len(sizes) < 2:
            raise ValueError(
                f"{fn}: `layer_sizes` must list at least an input and an output size "
                f"(got {layer_sizes!r})"
            )
        for i, size in enumerate(sizes):
            check_positive_int(size, f"layer_sizes[{i}]", fn)
        dtype = _check_float_dtype(dtype, fn)
        moments = 2 * sum((int(a) + 1) * int(b) for a, b in zip(sizes[:-1], sizes[1:]))
        needed, memory = moments * dtype.itemsize, machine_memory_bytes()
        if needed > memory:
            raise ValueError(
                f"{fn}: `layer_sizes` must describe a network whose {moments} weight moments fit "
                f"in this machine's memory ({memory} bytes; {needed} needed) (got {sizes})"
            )
        self.layer_sizes = [int(v) for v in sizes]
        self.layers = nn.ModuleList(
            ProbLinear(a, b, dtype=dtype, device=device) for a, b in zip(sizes[:-1], sizes[1:])
        )

    @property
    def dtype(self) -> torch.dtype:
        """dtype of the moments (follows the module's conversions)."""
        return self.layers[0].dtype

    @property
    def device(self) -> torch.device:
        """Device of the moments (follows the module's conversions)."""
        return self.layers[0].device

    def forward_moments(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Predictive mean and variance ``[B, K]`` of the network output (noise excluded)."""
        out, _ = moments_with_grads(self, x)
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The predictive mean ``[B, K]``."""
        return self.forward_moments(x)[0]


def _augment(z: torch.Tensor, value: float) -> torch.Tensor:
    return torch.cat([z, torch.full_like(z[:, :1], value)], dim=1)


def moments_with_grads(net: PBPNet, x: torch.Tensor):
    """``((m_out, v_out), cache)``; ``cache`` holds each layer's inputs and pre-activations."""
    x = torch.as_tensor(x).to(device=net.device, dtype=net.dtype)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2 or x.shape[1] != net.layers[0].in_features:
        raise ValueError(
            f"PBPNet: `x` must be [B, {net.layers[0].in_features}] (got shape {tuple(x.shape)})"
        )
    zm, zv = _augment(x, 1.0), torch.zeros(x.shape[0], x.shape[1] + 1, dtype=x.dtype,
                                            device=x.device)  # fmt: skip
    cache = []
    last = len(net.layers) - 1
    for i, layer in enumerate(net.layers):
        s = layer.scale
        m, v = layer.m.detach(), layer.v.detach()
        ma = s * (zm @ m.T)
        va = (s * s) * (zv @ (m * m + v).T + (zm * zm) @ v.T)
        cache.append((zm, zv, ma, va))
        if i == last:
            return (ma, va.clamp_min(VAR_FLOOR)), cache
        mb, vb = _relu_moments(ma, va)
        zm, zv = _augment(mb, 1.0), _augment(vb, 0.0)
    raise AssertionError("unreachable")  # pragma: no cover


def backward_moments(net: PBPNet, cache, g_m: torch.Tensor, g_v: torch.Tensor):
    """Per-example ``[(dlogZ/dm [B, H, D+1], dlogZ/dv [B, H, D+1])]`` per layer, first to last.

    ``g_m, g_v [B, K]``: the gradients of each example's ``log Z_i`` w.r.t. the output moments.
    """
    grads = []
    for i in range(len(net.layers) - 1, -1, -1):
        layer = net.layers[i]
        s, s2 = layer.scale, layer.scale**2
        m, v = layer.m.detach(), layer.v.detach()
        zm, zv, ma, va = cache[i]
        if i < len(net.layers) - 1:  # back through the ReLU moments of this layer's output
            gm_b, gv_b = g_m, g_v
            var = va.clamp_min(VAR_FLOOR)
            sd = var.sqrt()
            al = ma / sd
            cdf, pdf = standard_normal_cdf(al), standard_normal_pdf(al)
            mb = sd * (al * cdf + pdf)
            g_m = gm_b * cdf + gv_b * 2.0 * mb * (1.0 - cdf)
            g_v = gm_b * pdf / (2.0 * sd) + gv_b * (cdf - mb * pdf / sd)
        d_m = s * g_m[:, :, None] * zm[:, None, :] + 2.0 * s2 * g_v[:, :, None] * (
            m[None] * zv[:, None, :]
        )
        d_v = s2 * g_v[:, :, None] * (zm * zm + zv)[:, None, :]
        grads.append((d_m, d_v))
        if i > 0:  # to the previous layer's output moments (bias column dropped)
            n_in = layer.in_features
            g_zm = s * (g_m @ m) + 2.0 * s2 * zm * (g_v @ v)
            g_zv = s2 * (g_v @ (m * m + v))
            g_m, g_v = g_zm[:, :n_in], g_zv[:, :n_in]
    return grads[::-1]
