r"""A heteroscedastic one-dimensional regression problem with a known truth.

.. math:: x \sim U(-3, 3), \qquad Y = f(x) + \sigma(x)\,\varepsilon, \quad
          \varepsilon \sim \mathcal N(0, 1),

with ``f(x) = sin(2x) + x / 2`` (the regression function ``E[Y | x]``) and
``sigma(x) = 0.1 + 0.2 |x|`` (the noise grows from 0.1 at the centre to 0.7 at the edges), so
``Var[Y | x] = sigma(x)^2`` is the aleatoric part a perfect model would report. An optional
``gap`` leaves an interval of ``x`` without training points, where a good ensemble's epistemic
uncertainty should grow. Everything is generated; nothing is downloaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from bensemble._validation import as_float_tensor, check_generator, check_positive_int

__all__ = [
    "REGRESSION_TOY_RANGE",
    "RegressionToyData",
    "make_regression_toy",
    "regression_toy_mean",
    "regression_toy_variance",
]

#: The support ``(low, high)`` of ``x``.
REGRESSION_TOY_RANGE = (-3.0, 3.0)
_F64 = torch.float64


@dataclass(frozen=True)
class RegressionToyData:
    """A sample of the regression toy problem (float64 tensors).

    Attributes:
        x: inputs ``[N, 1]``.
        y: labels ``[N]``.
        mean: the true ``E[Y | x]`` ``[N]``.
        variance: the true ``Var[Y | x]`` ``[N]``.
    """

    x: torch.Tensor
    y: torch.Tensor
    mean: torch.Tensor
    variance: torch.Tensor

    def __len__(self) -> int:
        return int(self.x.shape[0])


def _inputs(x: Any, fn: str) -> torch.Tensor:
    t = as_float_tensor(x, "x", fn, ndim=(1, 2))
    if t.ndim == 2 and t.shape[1] != 1:
        raise ValueError(f"{fn}: `x` must be [N] or [N, 1] (got shape {tuple(t.shape)})")
    return t.reshape(-1)


def regression_toy_mean(x: Any) -> torch.Tensor:
    """The regression function ``E[Y | x] = sin(2x) + x / 2`` ``[N]`` (float64).

    Args:
        x: inputs ``[N]`` or ``[N, 1]``.

    Example:
        >>> regression_toy_mean([0.0, 1.0]).tolist()[0]
        0.0
    """
    t = _inputs(x, "regression_toy_mean")
    return torch.sin(2.0 * t) + 0.5 * t


def regression_toy_variance(x: Any) -> torch.Tensor:
    """The noise variance ``Var[Y | x] = (0.1 + 0.2 |x|)^2`` ``[N]`` (float64).

    Args:
        x: inputs ``[N]`` or ``[N, 1]``.

    Example:
        >>> [round(v, 2) for v in regression_toy_variance([0.0, 3.0]).tolist()]
        [0.01, 0.49]
    """
    t = _inputs(x, "regression_toy_variance")
    return (0.1 + 0.2 * t.abs()).square()


def make_regression_toy(
    n: int,
    *,
    gap: tuple[float, float] | None = None,
    seed: int | None = 0,
    generator: torch.Generator | None = None,
) -> RegressionToyData:
    """Draw ``n`` points of the heteroscedastic toy problem (module docstring).

    Args:
        n: number of points.
        gap: an interval ``(a, b)`` inside ``(-3, 3)`` with no points (``x`` is uniform on the
            rest of the support), or ``None``.
        seed: the seed of the draw (fixed default: two identical calls agree); ``None`` uses
            ``generator``, or torch's global RNG when that is ``None`` too.
        generator: random source, used when given (``seed`` is then ignored).

    Returns:
        A :class:`RegressionToyData`.

    Example:
        >>> data = make_regression_toy(500, seed=0)
        >>> data.x.shape, data.y.shape
        (torch.Size([500, 1]), torch.Size([500]))
        >>> bool(((data.x > -3) & (data.x < 3)).all())
        True
    """
    fn = "make_regression_toy"
    n = check_positive_int(n, "n", fn)
    g = check_generator(generator, None if generator is not None else seed, fn)
    low, high = REGRESSION_TOY_RANGE
    u = torch.rand(n, generator=g, dtype=_F64)
    if gap is None:
        x = low + (high - low) * u
    else:
        ok = isinstance(gap, (tuple, list)) and len(gap) == 2
        a, b = (float(v) for v in gap) if ok else (0.0, 0.0)
        if not (ok and low < a < b < high):
            raise ValueError(
                f"{fn}: `gap` must be (a, b) with {low} < a < b < {high} (got {gap!r})"
            )
        kept = (high - low) - (b - a)
        x = low + kept * u
        x = torch.where(x >= a, x + (b - a), x)
    noise = torch.randn(n, generator=g, dtype=_F64)
    mean, variance = regression_toy_mean(x), regression_toy_variance(x)
    y = mean + variance.sqrt() * noise
    return RegressionToyData(x=x[:, None], y=y, mean=mean, variance=variance)
