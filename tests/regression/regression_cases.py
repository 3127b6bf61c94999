"""Shared inputs of the regression tests: random member predictions and synthetic ensembles.

:func:`smooth_members` builds ensembles of fixed smooth functions around a known truth ``f``:
``mu_h(x) = f(x) + bias * sin(x) + spread * d_h(x)`` with antithetic deviations
(``d_{h + H/2} = -d_h``, so the members' mean is exactly ``f + bias * sin(x)``).
"""

from __future__ import annotations

import numpy as np
import torch

F64 = torch.float64


def gaussian_members(
    m: int, n: int, seed: int = 0, scale: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[M, N, 2]`` (mean, variance) members and ``[N]`` labels (float64)."""
    rng = np.random.default_rng(seed)
    mu = rng.normal(size=(m, n)) * scale
    var = rng.uniform(0.2, 2.0, size=(m, n)) * scale**2
    y = rng.normal(size=n) * 1.5 * scale
    return torch.from_numpy(np.stack([mu, var], -1)), torch.from_numpy(y)


def point_members(m: int, n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``[M, N]`` point members and ``[N]`` labels (float64)."""
    rng = np.random.default_rng(seed)
    return torch.from_numpy(rng.normal(size=(m, n))), torch.from_numpy(rng.normal(size=n))


def smooth_members(
    x: torch.Tensor,
    f: torch.Tensor,
    n_members: int = 6,
    spread: float = 0.0,
    bias: float = 0.0,
    seed: int = 1,
) -> torch.Tensor:
    """``[H, N]`` member means: smooth random functions around ``f`` (module docstring)."""
    g = torch.Generator().manual_seed(seed)
    half = n_members // 2
    freq = torch.randn(half, 3, generator=g, dtype=F64)
    phase = 2 * torch.pi * torch.rand(half, 3, generator=g, dtype=F64)
    d = torch.cos(freq[:, :, None] * x[None, None, :] + phase[:, :, None]).sum(1) / 3**0.5
    d = torch.cat([d, -d])
    return f[None] + bias * torch.sin(x)[None] + spread * d
