"""The library's one rule for randomness: reproducible by default, fresh on request.

Every random step of bensemble takes ``seed=`` and ``generator=`` and resolves them here:

* **default** (``seed`` left at :data:`DEFAULT_SEED`, no ``generator``): a fresh
  ``torch.Generator`` seeded with ``0``, so two identical calls give identical results;
* ``seed=<int>``: the same with that seed (``seed=0`` given explicitly is the default's seed);
* ``generator=<torch.Generator>``: draws from that generator, whose state advances (two calls
  differ; the program as a whole is reproducible from the generator's seed). A generator *wins*
  over the default seed; an explicit integer seed together with a generator is an error;
* ``seed=None``: torch's global random state (``torch.manual_seed`` governs it): fresh
  randomness on every call, bensemble 0.2's behaviour.

Objects (``SplitConformalClassifier``, ``LaplaceApproximation``, the searchers, ...) take the same
pair in their constructor and apply it to each of their random calls: a method that does not
change the object (a prediction) re-seeds for each call, so repeated calls agree; a method whose
purpose is a new draw (``resample``) draws from a stream started from the seed, so a program that
makes the same calls gets the same draws.

:data:`DEFAULT_SEED` is an ``int`` equal to ``0`` (usable wherever an integer seed is), told
apart from an explicit ``seed=0`` only by identity, so that a ``generator=`` can win over it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

__all__ = [
    "DEFAULT_SEED",
    "SeedLike",
    "check_generator",
    "derived_seed",
    "integer_seed",
    "is_default_seed",
    "resolve_generator",
    "seeded_global_rng",
]


class _DefaultSeed(int):
    """The integer ``0`` marking "no seed was passed" (see the module docstring)."""

    __slots__ = ()

    def __repr__(self) -> str:  # shown in signatures and help(): ``seed=0``
        return "0"

    def __reduce__(self) -> tuple[Any, ...]:  # pickles back to the singleton
        return (_default_seed, ())


def _default_seed() -> _DefaultSeed:
    return DEFAULT_SEED


#: The default of every ``seed=`` argument: the integer 0, recognisable by identity.
DEFAULT_SEED = _DefaultSeed(0)

#: Type of a ``seed=`` argument.
SeedLike = int | None

_SEED_LIMIT = 2**64


def is_default_seed(seed: Any) -> bool:
    """Whether ``seed`` is the untouched default (not an explicit ``seed=0``)."""
    return seed is DEFAULT_SEED


def _check_seed_value(seed: Any, fn: str, name: str = "seed") -> int | None:
    if seed is None:
        return None
    if (
        isinstance(seed, bool)
        or not isinstance(seed, (int, np.integer))
        or not 0 <= seed < _SEED_LIMIT
    ):
        raise ValueError(f"{fn}: `{name}` must be an integer in [0, 2**64) or None (got {seed!r})")
    return int(seed)


def _check_generator_type(generator: Any, fn: str, name: str) -> torch.Generator | None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise ValueError(
            f"{fn}: `{name}` must be a torch.Generator or None (got {type(generator).__name__})"
        )
    return generator


def resolve_generator(
    generator: Any, seed: Any, fn: str, *, name: str = "generator"
) -> torch.Generator | None:
    """The random source of one call under the library's rule (module docstring).

    Returns:
        ``generator`` when given; else a new CPU generator seeded with ``seed`` (the default
        seed is 0); else ``None`` (``seed=None``: torch's global random state).

    Raises:
        ValueError: a ``generator`` that is not a ``torch.Generator``, a seed that is not an
            integer in ``[0, 2**64)`` or ``None``, or an explicit seed together with a generator.
    """
    generator = _check_generator_type(generator, fn, name)
    value = _check_seed_value(seed, fn)
    if generator is not None:
        if value is not None and not is_default_seed(seed):
            raise ValueError(f"{fn}: pass either `{name}` or `seed`, not both (got both)")
        return generator
    if value is None:
        return None
    return torch.Generator().manual_seed(value)


def check_generator(
    generator: Any, seed: Any, fn: str, *, name: str = "generator"
) -> torch.Generator | None:
    """:func:`resolve_generator` (the name the library's modules import)."""
    return resolve_generator(generator, seed, fn, name=name)


def integer_seed(generator: Any, seed: Any, fn: str, *, name: str = "generator") -> int:
    """An integer seed under the library's rule, for a backend that takes integers
    (scikit-learn's ``random_state``, a per-call re-seeding): ``seed`` itself, else one draw
    from ``generator`` (its state advances), else one draw from torch's global random state."""
    source = resolve_generator(generator, seed, fn, name=name)
    value = _check_seed_value(seed, fn)
    if generator is None and value is not None:
        return value
    return int(torch.randint(0, 2**62, (1,), generator=source))


def derived_seed(seed: int, *stream: int | str) -> int:
    """A seed for the sub-stream ``stream`` of ``seed`` (e.g. ``derived_seed(s, "predict")``),
    statistically independent of ``seed``'s own stream and of every other sub-stream.

    Uses NumPy's ``SeedSequence`` (strings enter as their UTF-8 bytes). The result is in
    ``[0, 2**63)``.

    Example:
        >>> derived_seed(0, "predict") == derived_seed(0, "predict") != derived_seed(1, "predict")
        True
    """
    words: list[int] = [int(seed) % _SEED_LIMIT]
    for key in stream:
        if isinstance(key, str):
            data = key.encode("utf-8")
            words.extend([len(data), *data])
        else:
            words.append(int(key) % _SEED_LIMIT)
    state = np.random.SeedSequence(words).generate_state(2, dtype=np.uint32)
    return (int(state[0]) << 31) ^ int(state[1])


@contextlib.contextmanager
def seeded_global_rng(seed: Any, fn: str) -> Iterator[None]:
    """Inside the block torch's global CPU random state is seeded with ``seed`` (for code that
    only draws from it, e.g. a module's parameter initialisation); the state from before comes
    back afterwards, also when an exception escapes. ``seed=None``: nothing is changed (the
    block draws from the global state as usual)."""
    value = _check_seed_value(seed, fn)
    if value is None:
        yield
        return
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(value)
        yield
