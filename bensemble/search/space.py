"""The search space of neural ensemble search: how architectures are sampled, mutated and built."""

from __future__ import annotations

import abc
import contextlib
import copy
import inspect

import torch
from torch import nn

from bensemble._seeds import seeded_global_rng

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
    """``space.sample()``, passing ``generator`` when the space accepts one; otherwise (with a
    generator) under torch's global RNG seeded from it, restored afterwards."""
    if generator is not None and _accepts_generator(space.sample):
        return space.sample(generator=generator)
    with _seeded_from(generator):
        return space.sample()


def mutate_config(space: SearchSpace, config: dict, generator: torch.Generator | None) -> dict:
    """``space.mutate(copy of config)``, passing ``generator`` when the space accepts one
    (otherwise as :func:`sample_config`)."""
    config = copy.deepcopy(config)  # a space that edits in place cannot touch our record
    if generator is not None and _accepts_generator(space.mutate):
        return space.mutate(config, generator=generator)
    with _seeded_from(generator):
        return space.mutate(config)


def _seeded_from(generator: torch.Generator | None):
    """torch's global CPU RNG seeded with one draw of ``generator`` (nothing without one). A
    space drawing from Python's ``random`` or NumPy is not covered: give it a ``generator``."""
    if generator is None:
        return contextlib.nullcontext()
    return seeded_global_rng(int(torch.randint(0, 2**62, (1,), generator=generator)), "search")


def check_space(space, fn: str) -> SearchSpace:
    missing = [m for m in ("sample", "mutate", "build") if not callable(getattr(space, m, None))]
    if missing:
        raise ValueError(
            f"{fn}: `space` must be a SearchSpace with sample, mutate and build methods "
            f"(got {type(space).__name__}, missing {', '.join(missing)})"
        )
    return space
