"""Checks of the options shared by ``demo``, ``evaluate`` and ``reproduce`` (seeds and counts).

A seed is a non-negative integer (a Python or numpy integer, never a bool or a float: ``1.7``
would be silently truncated) no larger than :data:`MAX_SEED`, the largest seed every backend the
experiments use accepts (scikit-learn's ``random_state`` and NumPy's legacy seeding stop at
``2**32 - 1``; torch would accept more). A repeat ``r`` uses ``seed + r``, so the last repeat's
seed must fit too.
"""

from __future__ import annotations

import numbers
from typing import Any

__all__ = ["MAX_SEED", "check_count", "check_seed"]

#: Largest seed accepted (scikit-learn / NumPy ``RandomState`` limit).
MAX_SEED = 2**32 - 1


def check_seed(value: Any, name: str, fn: str, *, span: int = 1) -> int:
    """A seed in ``[0, MAX_SEED - span + 1]``: seeds ``value, ..., value + span - 1`` are used."""
    top = MAX_SEED - (span - 1)
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Integral)
        or not 0 <= int(value) <= top
    ):
        raise ValueError(f"{fn}: `{name}` must be an integer in [0, {top}] (got {value!r})")
    return int(value)


def check_count(value: Any, name: str, fn: str, *, minimum: int = 1) -> int:
    """An integer count ``>= minimum`` (a Python or numpy integer; not a bool or a float)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{fn}: `{name}` must be an integer >= {minimum} (got {value!r})")
    return int(value)
