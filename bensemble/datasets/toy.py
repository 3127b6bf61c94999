"""The two-Gaussian toy problem of Hoarau's epistemic-calibration paper, with its exact posterior.

Class 1 ~ N((-2.5, -2.5), 3 I), class 0 ~ N((2.5, 2.5), 3 I), equal priors. With equal covariances
the Bayes posterior is logistic in ``x1 + x2``::

    eta(x) = P(y = 1 | x) = 1 / (1 + exp((5/3) (x1 + x2)))

and the Bayes error is ``Phi(-||mu1 - mu0|| / (2 sqrt(3))) = Phi(-5 / sqrt(6)) ~ 0.0206``.
Everything here is generated, so nothing is downloaded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from bensemble._seeds import DEFAULT_SEED, resolve_generator
from bensemble._validation import (
    as_float_tensor,
    check_count,
    check_positive_int,
    check_probability,
    machine_memory_bytes,
)

__all__ = [
    "BAYES_ERROR",
    "MEAN_POSITIVE",
    "MEAN_NEGATIVE",
    "VARIANCE",
    "ToyData",
    "toy_posterior",
    "make_toy_gaussians",
    "make_toy_grid",
    "corrupt_inputs",
]

MEAN_POSITIVE = (-2.5, -2.5)
MEAN_NEGATIVE = (2.5, 2.5)
VARIANCE = 3.0
#: Bayes error of the toy problem: Phi(-5 / sqrt(6)).
BAYES_ERROR = 0.5 * math.erfc(5.0 / math.sqrt(6.0) / math.sqrt(2.0))
#: Slope of the analytic log-odds: logit eta(x) = -(5/3) (x1 + x2).
_SLOPE = 5.0 / 3.0


@dataclass(frozen=True)
class ToyData:
    """A sample of the toy problem.

    Attributes:
        x: inputs ``[N, 2]`` (float64).
        y: labels ``[N]`` (int64, 1 for the Gaussian centred at (-2.5, -2.5)).
        eta: the true ``P(y = 1 | x)`` ``[N]`` (float64).
    """

    x: torch.Tensor
    y: torch.Tensor
    eta: torch.Tensor

    def __len__(self) -> int:
        return int(self.x.shape[0])


def _generator(
    generator: torch.Generator | None, seed: int | None, fn: str
) -> torch.Generator | None:
    """The random source under the library's rule (:mod:`bensemble._seeds`)."""
    return resolve_generator(generator, seed, fn)


def toy_posterior(x) -> torch.Tensor:
    """Exact ``P(y = 1 | x)`` for inputs ``x [N, 2]``: ``sigmoid(-(5/3)(x1 + x2))``."""
    x = as_float_tensor(x, "x", "toy_posterior", ndim=2)
    if x.shape[1] != 2:
        raise ValueError(f"toy_posterior: `x` must have shape [N, 2] (got {tuple(x.shape)})")
    return torch.sigmoid(-_SLOPE * x.sum(dim=1))


def make_toy_gaussians(
    n: int, *, generator: torch.Generator | None = None, seed: int | None = DEFAULT_SEED
) -> ToyData:
    """Draw ``n`` labelled points: ``y ~ Bernoulli(1/2)``, then ``x | y`` from its Gaussian.

    ``seed`` (default 0: identical calls give the same points) or a ``generator`` (its state
    advances) is the source; ``seed=None`` uses torch's global random state.
    """
    n = check_count(n, "n", "make_toy_gaussians", per_count=4, itemsize=8)  # x [n, 2], y, eta
    g = _generator(generator, seed, "make_toy_gaussians")
    y = torch.randint(0, 2, (n,), generator=g)
    means = torch.where(
        y[:, None] == 1,
        torch.tensor(MEAN_POSITIVE, dtype=torch.float64),
        torch.tensor(MEAN_NEGATIVE, dtype=torch.float64),
    )
    noise = torch.randn(n, 2, generator=g, dtype=torch.float64)
    x = means + math.sqrt(VARIANCE) * noise
    return ToyData(x=x, y=y, eta=toy_posterior(x))


def make_toy_grid(
    n_per_axis: int = 200,
    *,
    low: float = -8.0,
    high: float = 8.0,
    generator: torch.Generator | None = None,
    seed: int | None = DEFAULT_SEED,
) -> ToyData:
    """A regular ``n_per_axis x n_per_axis`` grid on ``[low, high]^2`` with ``y ~ Bernoulli(eta)``.

    Points are ordered row-major with ``x1`` varying fastest, so ``values.reshape(n, n)`` is an
    image whose rows follow ``x2``. ``seed`` / ``generator`` as in :func:`make_toy_gaussians`.
    """
    n = check_positive_int(n_per_axis, "n_per_axis", "make_toy_grid", minimum=2)
    per_point = 6 * 8  # x [n^2, 2], y, eta, the meshgrid and its flattening in float64
    if n * n * per_point > machine_memory_bytes():
        limit = math.isqrt(machine_memory_bytes() // per_point)
        raise ValueError(
            f"make_toy_grid: `n_per_axis` must be <= {limit} so that its {n * n} grid points fit "
            f"in this machine's memory ({machine_memory_bytes()} bytes) (got {n_per_axis})"
        )
    if not low < high:
        raise ValueError(f"make_toy_grid: `low` must be < `high` (got {low} and {high})")
    g = _generator(generator, seed, "make_toy_grid")
    axis = torch.linspace(low, high, n, dtype=torch.float64)
    x2, x1 = torch.meshgrid(axis, axis, indexing="ij")
    x = torch.stack([x1.reshape(-1), x2.reshape(-1)], dim=1)
    eta = toy_posterior(x)
    y = torch.bernoulli(eta, generator=g).to(torch.int64)
    return ToyData(x=x, y=y, eta=eta)


def corrupt_inputs(
    x,
    rho: float,
    *,
    low: float = -8.0,
    high: float = 8.0,
    generator: torch.Generator | None = None,
    seed: int | None = DEFAULT_SEED,
) -> torch.Tensor:
    """Replace each input row, with probability ``rho``, by a uniform draw on ``[low, high]^2``.

    Labels are kept, so corrupted rows become label noise in input space (the paper's noise sweep).
    ``seed`` / ``generator`` as in :func:`make_toy_gaussians`.
    """
    x = as_float_tensor(x, "x", "corrupt_inputs", ndim=2)
    rho = check_probability(rho, "rho", "corrupt_inputs", open_interval=False)
    g = _generator(generator, seed, "corrupt_inputs")
    replace = torch.rand(x.shape[0], generator=g, dtype=torch.float64) < rho
    uniform = low + (high - low) * torch.rand(x.shape, generator=g, dtype=torch.float64)
    return torch.where(replace[:, None], uniform, x)
