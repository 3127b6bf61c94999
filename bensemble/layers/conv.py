"""Variational 2-D convolution (bensemble 0.2's ``BayesianConv2d``)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from bensemble._validation import check_allocation, check_positive, check_positive_int
from bensemble.layers.gaussian import MeanFieldGaussianLayer

__all__ = ["BayesianConv2d"]


def _as_pair(value: object, name: str, fn: str, *, minimum: int) -> tuple[int, int]:
    """An int or a pair of ints, each ``>= minimum``, as a pair."""
    items = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    ok = len(items) == 2 and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= minimum for v in items
    )
    if not ok:
        raise ValueError(
            f"{fn}: `{name}` must be an integer >= {minimum} or a pair of them (got {value!r})"
        )
    return int(items[0]), int(items[1])


class BayesianConv2d(MeanFieldGaussianLayer):
    """A 2-D convolution with a factorised Gaussian posterior over its kernel and bias.

    Parameters ``w_mu``/``w_rho`` ``[out_channels, in_channels / groups, kH, kW]`` and
    ``b_mu``/``b_rho`` ``[out_channels]`` describe ``q = N(mu, softplus(rho)^2)``; the prior is
    ``N(0, prior_sigma^2)``. Input ``[B, C_in, H, W]`` gives ``[B, C_out, H', W']``.

    The forward pass follows :class:`~bensemble.layers.BayesianLinear`: the mean kernel when not
    sampling; one kernel sample per pass when an ensemble forces sampling or a
    ``sample_generator`` is set; in plain train mode the local reparameterisation trick, i.e.
    ``conv(x, w_mu) + b_mu + eps * sqrt(conv(x^2, sigma_w^2) + sigma_b^2)`` with independent
    noise per output element.

    Args:
        in_channels: input channels (divisible by ``groups``).
        out_channels: output channels (divisible by ``groups``).
        kernel_size: an int or ``(kH, kW)``.
        stride: an int or a pair (``>= 1``).
        padding: an int or a pair (``>= 0``).
        dilation: an int or a pair (``>= 1``).
        groups: number of blocked connections from input to output channels.
        prior_sigma: standard deviation of the Gaussian prior (``> 0``).
        init_sigma: initial posterior standard deviation (``> 0``).

    Example:
        >>> conv = BayesianConv2d(3, 8, kernel_size=3, padding=1).eval()
        >>> conv(torch.randn(2, 3, 5, 5)).shape
        torch.Size([2, 8, 5, 5])
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] = 0,
        dilation: int | tuple[int, int] = 1,
        groups: int = 1,
        prior_sigma: float = 1.0,
        init_sigma: float = 0.1,
    ) -> None:
        fn = "BayesianConv2d"
        super().__init__(prior_sigma=prior_sigma)
        self.in_channels = check_positive_int(in_channels, "in_channels", fn)
        self.out_channels = check_positive_int(out_channels, "out_channels", fn)
        self.groups = check_positive_int(groups, "groups", fn)
        if self.in_channels % self.groups or self.out_channels % self.groups:
            raise ValueError(
                f"{fn}: `groups` must divide in_channels and out_channels "
                f"(got groups={groups}, in_channels={in_channels}, out_channels={out_channels})"
            )
        self.kernel_size = _as_pair(kernel_size, "kernel_size", fn, minimum=1)
        self.stride = _as_pair(stride, "stride", fn, minimum=1)
        self.padding = _as_pair(padding, "padding", fn, minimum=0)
        self.dilation = _as_pair(dilation, "dilation", fn, minimum=1)
        self.init_sigma = check_positive(init_sigma, "init_sigma", fn)

        shape = (self.out_channels, self.in_channels // self.groups, *self.kernel_size)
        per_channel = 2 * (math.prod(shape[1:]) + 1)  # mu and rho of the kernel and bias
        check_allocation(
            fn,
            "out_channels",
            self.out_channels,
            per_count=per_channel,
            itemsize=4,
            others="in_channels, kernel_size",
        )
        self._create_parameters(shape, self.out_channels)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """He-normal kernel means, zero bias means, every ``sigma`` equal to ``init_sigma``."""
        with torch.no_grad():
            nn.init.kaiming_normal_(self.w_mu, mode="fan_in", nonlinearity="relu")
        self._reset_sigmas()

    def _weight_op(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, weight, bias, self.stride, self.padding, self.dilation, self.groups)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, padding={self.padding}, dilation={self.dilation}, "
            f"groups={self.groups}, prior_sigma={self.prior_sigma}"
        )
