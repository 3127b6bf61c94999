"""Checks of scalar arguments (counts, bin numbers, probabilities, options, seeds, flags).

Each checker returns the converted value or raises :class:`ValueError` with the library's one
message shape ``"<function>: `<argument>` must <expectation> (got <what came>)"``. Array checks
live in :mod:`bensemble._validation`, which re-exports everything here.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from collections.abc import Iterable
from typing import Any

import numpy as np

from bensemble._seeds import check_generator

__all__ = [
    "MAX_BIN_SLOTS",
    "MAX_N_BINS",
    "MIN_MEMBER_BYTES",
    "check_allocation",
    "check_bool",
    "check_count",
    "check_generator",
    "check_n_bins",
    "check_option",
    "check_positive",
    "check_positive_int",
    "check_probability",
    "machine_memory_bytes",
    "warn_user",
]

#: Largest ``n_bins`` any binned metric accepts (2**20 = 1,048,576). Equal-width bins of width
#: ``1e-6`` already resolve every float32 confidence step that matters; beyond it a request is a
#: typo (``2**40`` would need terabytes of per-bin sums), refused before anything is allocated.
MAX_N_BINS = 2**20

#: Largest number of per-bin slots one accumulation may allocate (``K * (n_bins + 1)`` for the
#: classwise calibration error): 2**24 slots, three float64 sums of 128 MiB each.
MAX_BIN_SLOTS = 2**24

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` attributed to the first caller outside the bensemble package."""
    level = 2  # stacklevel 2 is warn_user's caller, the frame we start from
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(
        _PACKAGE_DIR + os.sep
    ):
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)


def check_bool(value: Any, name: str, fn: str) -> bool:
    """A ``bool`` (or numpy bool); any other value (``"no"``, ``1``, ``None``) is refused."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{fn}: `{name}` must be True or False (got {value!r})")
    return bool(value)


def check_positive_int(value: Any, name: str, fn: str, *, minimum: int = 1) -> int:
    """An ``int`` (not bool) ``>= minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{fn}: `{name}` must be an integer >= {minimum} (got {value!r})")
    return int(value)


#: A lower bound of the memory one network, tree or other fitted member holds (an
#: ``nn.Linear(1, 1)`` takes ~2.4 KiB of Python objects and tensors, a depth-1 scikit-learn tree
#: ~0.8 KiB): counts of members (``n_members``, ``pool_size``, ``n_estimators``) are checked with
#: it before any is built.
MIN_MEMBER_BYTES = 512

#: Tests set this (``monkeypatch.setattr(bensemble._scalar_checks, "MEMORY_OVERRIDE", n)``) to
#: make :func:`machine_memory_bytes` report ``n`` bytes; ``None`` reads the machine.
MEMORY_OVERRIDE: int | None = None
# cgroup (container) memory limits, v2 then v1; "max" or a huge number means none.
_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


@functools.cache
def _physical_memory() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):  # pragma: no cover - non-POSIX
        pass
    try:  # pragma: no cover - systems without SC_PHYS_PAGES
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):  # pragma: no cover
        pass
    return 2**40  # pragma: no cover


@functools.cache
def _cgroup_limit() -> int | None:
    for path in _CGROUP_LIMITS:
        try:
            with open(path, encoding="ascii") as handle:
                return int(handle.read().strip())
        except (OSError, ValueError):  # absent, or "max"
            continue
    return None


def machine_memory_bytes() -> int:
    """Memory this process can ever hold, in bytes: the most any single allocation can get.

    Physical memory (``os.sysconf``, else ``MemTotal`` in ``/proc/meminfo``, else a generous
    1 TiB), lowered to the container's cgroup memory limit when one is set. Total rather than
    currently *available* memory, so that a check gives the same answer on a busy and on a quiet
    machine: a request refused here could never succeed (one accepted may still fail if other
    processes hold the memory). Read once per process (checks sit in hot loops).
    """
    if MEMORY_OVERRIDE is not None:
        return int(MEMORY_OVERRIDE)
    memory = _physical_memory()
    limit = _cgroup_limit()
    return min(memory, limit) if limit is not None and limit > 0 else memory


def check_allocation(
    fn: str, name: str, count: int, *, per_count: int = 1, itemsize: int = 8, others: str = ""
) -> int:
    """Refuse a count whose allocation could not fit in this machine's memory.

    The allocation is ``count * per_count`` items of ``itemsize`` bytes each (``per_count`` is
    the product of the other sizes of the array, e.g. ``N * K`` for ``num_samples`` members of
    ``[N, K]`` predictions). It is compared with :func:`machine_memory_bytes` *before* anything
    is allocated.

    Args:
        fn: Public function (or ``Class.method``) named in the message.
        name: Argument whose value is ``count``.
        count: Non-negative integer the caller has already validated.
        per_count: Items allocated per unit of ``count`` (``>= 0``).
        itemsize: Bytes per item (8 for float64/int64, 4 for float32, ...).
        others: The arguments behind ``per_count``, comma-separated (``"in_features"``), named
            when even one unit of ``count`` cannot fit.

    Returns:
        ``count`` as an ``int``.

    Raises:
        ValueError: "``fn``: ``name`` must be <= L ... (got count)", where ``L`` is the largest
            count that fits (``memory // (per_count * itemsize)``); when even one unit does not
            fit, the message says that the other sizes are too large instead of "<= 0".

    Example:
        >>> check_allocation("f", "num_samples", 10, per_count=100, itemsize=4)
        10
    """
    count = int(count)
    unit = max(int(per_count), 0) * max(int(itemsize), 1)
    if count <= 0 or unit == 0:
        return count
    memory = machine_memory_bytes()
    needed = count * unit
    if needed <= memory:
        return count
    limit = memory // unit
    if limit < 1:
        blame = ", ".join(f"`{o.strip()}`" for o in others.split(",")) or "the other sizes"
        raise ValueError(
            f"{fn}: {blame} must be smaller: one unit of `{name}` already needs {unit} bytes "
            f"({per_count} items of {itemsize} bytes) and this machine has {memory} bytes of "
            f"memory (got {name}={count})"
        )
    raise ValueError(
        f"{fn}: `{name}` must be <= {limit} to fit in this machine's memory ({memory} bytes; "
        f"{count} x {per_count} items of {itemsize} bytes need {needed}) (got {count})"
    )


def check_count(
    value: Any,
    name: str,
    fn: str,
    *,
    minimum: int = 1,
    per_count: int = 1,
    itemsize: int = 8,
) -> int:
    """An ``int >= minimum`` whose allocation (see :func:`check_allocation`) fits in memory.

    For the counts a user passes that size an array: ``num_samples``, ``n_members``,
    ``num_classes``, pool sizes, sample counts.

    Example:
        >>> check_count(5, "n_members", "f", per_count=1000)
        5
    """
    n = check_positive_int(value, name, fn, minimum=minimum)
    return check_allocation(fn, name, n, per_count=per_count, itemsize=itemsize)


def check_n_bins(n_bins: Any, fn: str, name: str = "n_bins", *, maximum: int = MAX_N_BINS) -> int:
    """``n_bins`` is an integer in ``[1, maximum]`` (:data:`MAX_N_BINS` by default)."""
    n = check_positive_int(n_bins, name, fn, minimum=1)
    if n > maximum:
        raise ValueError(
            f"{fn}: `{name}` must be an integer >= 1 and <= {maximum} (got {n_bins!r})"
        )
    return n


def check_positive(value: Any, name: str, fn: str, *, allow_zero: bool = False) -> float:
    """A finite real number ``> 0`` (or ``>= 0``)."""
    ok = isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool)
    if ok:
        v = float(value)
        ok = np.isfinite(v) and (v >= 0 if allow_zero else v > 0)
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{fn}: `{name}` must be a finite number {bound} (got {value!r})")
    return float(value)


def check_probability(value: Any, name: str, fn: str, *, open_interval: bool = True) -> float:
    """A number in ``(0, 1)`` (or ``[0, 1]``)."""
    ok = isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool)
    v = float(value) if ok else float("nan")
    inside = (0.0 < v < 1.0) if open_interval else (0.0 <= v <= 1.0)
    if not ok or not inside:
        interval = "(0, 1)" if open_interval else "[0, 1]"
        raise ValueError(f"{fn}: `{name}` must lie in {interval} (got {value!r})")
    return v


def check_option(value: Any, name: str, options: Iterable[str], fn: str) -> str:
    """A string option from a fixed set; the error lists the valid values."""
    options = tuple(options)
    if value not in options:
        valid = ", ".join(repr(o) for o in options)
        raise ValueError(f"{fn}: `{name}` must be one of {valid} (got {value!r})")
    return value
