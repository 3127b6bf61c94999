"""The search space of neural ensemble search: how architectures are sampled, mutated and built."""

from __future__ import annotations

import abc
import copy
import inspect

import torch
from torch import nn

__all__ = ["SearchSpace"]


class SearchSpace(abc.ABC):
    """A space of architectures, described by plain ``dict`` configurations (bensemble 0.2 API).

    Subclasses implement :meth:`sample`, :meth:`mutate` and :meth:`build`. ``sample`` and
    ``mutate`` may take a keyword argument ``generator`` (a :class:`torch.Generator`); the
    searchers then pass theirs, which makes the whole search reproducible from one seed.
    """

    @abc.abstractmethod
    def sample(self) -> dict:
        """A random architecture configuration."""

    @abc.abstractmethod
    def mutate(self, config: dict) -> dict:
        """A mutated *copy* of ``config``; the input must not be modified."""

    @abc.abstractmethod
    def build(self, config: dict) -> nn.Module:
        """An untrained network for ``config``."""


def _accepts_generator(method) -> bool:
    try:
        params = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False
    return "generator" in params or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()
    )


def sample_config(space: SearchSpace, generator: torch.Generator | None) -> dict:
    """``space.sample()``, passing ``generator`` when the space accepts one."""
    if generator is not None and _accepts_generator(space.sample):
        return space.sample(generator=generator)
    return space.sample()


def mutate_config(space: SearchSpace, config: dict, generator: torch.Generator | None) -> dict:
    """``space.mutate(copy of config)``, passing ``generator`` when the space accepts one."""
    config = copy.deepcopy(config)  # a space that edits in place cannot touch our record
    if generator is not None and _accepts_generator(space.mutate):
        return space.mutate(config, generator=generator)
    return space.mutate(config)


def check_space(space, fn: str) -> SearchSpace:
    missing = [m for m in ("sample", "mutate", "build") if not callable(getattr(space, m, None))]
    if missing:
        raise ValueError(
            f"{fn}: `space` must be a SearchSpace with sample, mutate and build methods "
            f"(got {type(space).__name__}, missing {', '.join(missing)})"
        )
    return space
