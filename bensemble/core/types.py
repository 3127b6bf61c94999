"""Protocols shared by producers of member predictions (bensemble 0.2 import path).

The library's one currency is the stack of member predictions ``[M, N, K]`` (members, samples,
classes). Anything that can produce it satisfies one of the protocols below; they are
``runtime_checkable``, so ``isinstance(obj, PosteriorSource)`` checks the method names.
"""

from __future__ import annotations

from typing import Protocol, TypeAlias, runtime_checkable

import torch
from torch import nn

__all__ = [
    "Predictor",
    "KLProvider",
    "PosteriorSource",
    "MemberSource",
    "Predictions",
    "MemberPredictions",
]

#: A combined prediction ``[B, *]`` (logits or probabilities, ``[B, K]`` for classifiers).
Predictions: TypeAlias = torch.Tensor
#: Raw member predictions ``[M, B, *]``.
MemberPredictions: TypeAlias = torch.Tensor


@runtime_checkable
class Predictor(Protocol):
    """Anything that maps an input batch to an output batch."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor: ...


@runtime_checkable
class KLProvider(Protocol):
    """A module that reports the KL divergence of its posterior from its prior."""

    def kl_divergence(self) -> torch.Tensor: ...


@runtime_checkable
class PosteriorSource(Protocol):
    """A fitted posterior approximation that can sample whole networks.

    ``sample_models(n_models)`` returns ``n_models`` independent ``nn.Module`` draws; an
    ensemble built from them (:meth:`bensemble.core.Ensemble.from_posterior`) has fixed members.
    """

    def sample_models(self, n_models: int) -> list[nn.Module]: ...


@runtime_checkable
class MemberSource(Protocol):
    """A method that yields member probabilities for given inputs.

    ``sample_members(x, n, generator=None)`` returns ``[n, N, K]`` probabilities (members, rows of
    ``x``, classes); without a ``generator`` identical calls return the same members (the
    library's seeding rule, :mod:`bensemble._seeds`), with one they are drawn from it.
    """

    def sample_members(
        self, x: torch.Tensor, n: int, generator: torch.Generator | None = None
    ) -> torch.Tensor: ...
