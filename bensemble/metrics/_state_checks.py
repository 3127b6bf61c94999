"""Checks of a streaming meter's state: a loaded or merged state is refused unless it could have
come from data.

:func:`check_state_tensors` checks the container (a dict with exactly the meter's keys, float64
tensors of the meter's shapes, finite values); the helpers below check what the sums mean and
are combined by each meter's ``_check_sums``. Every refusal is a ``ValueError`` of the library's
shape, "``fn``: ``state_dict['state']['counts']`` must <expectation> (got <what came>)".

Bounds of sums of values in ``[0, 1]`` (confidences, member probabilities) allow a relative
slack of ``1e-9`` of the count: float64 rounding of a sum of ``n`` such values is far below it for
any ``n`` a state can hold, and any edit by one whole sample is above it for counts below
``10**9``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

_F64 = torch.float64
SLACK = 1e-9

__all__ = [
    "check_at_most",
    "check_equal_totals",
    "check_non_negative",
    "check_state_tensors",
    "check_whole",
    "check_zero_where_empty",
]


def _first_bad(mask: torch.Tensor) -> str:
    index = tuple(int(i) for i in torch.nonzero(mask)[0]) if mask.ndim else ()
    return f"index {list(index)}" if index else "the value"


def check_state_tensors(
    state: Any,
    empty: dict[str, torch.Tensor],
    fn: str,
    name: str,
    infinite_ok: Iterable[str] = (),
) -> dict[str, torch.Tensor]:
    """``state`` has ``empty``'s keys, each a float64 tensor of the same shape with no NaN (and
    no infinity except in ``infinite_ok``, where only ``+inf`` is allowed); returns detached
    clones."""
    if not isinstance(state, dict):
        raise ValueError(f"{fn}: `{name}` must be a dict of tensors (got {type(state).__name__})")
    missing, extra = sorted(set(empty) - set(state)), sorted(set(state) - set(empty))
    if missing or extra:
        raise ValueError(
            f"{fn}: `{name}` must have exactly the keys {sorted(empty)} (got missing {missing}, "
            f"extra {extra})"
        )
    out = {}
    for key, ref in empty.items():
        value = state[key]
        where = f"{fn}: `{name}[{key!r}]`"
        if not isinstance(value, torch.Tensor):
            raise ValueError(
                f"{where} must be a float64 tensor of shape {tuple(ref.shape)} "
                f"(got {type(value).__name__})"
            )
        if value.dtype != _F64 or value.shape != ref.shape:
            raise ValueError(
                f"{where} must be a float64 tensor of shape {tuple(ref.shape)} "
                f"(got {value.dtype} of shape {tuple(value.shape)})"
            )
        bad = value.isnan() | (value.isinf() if key not in infinite_ok else value == -torch.inf)
        if bool(bad.any()):
            raise ValueError(
                f"{where} must be finite (got {float(value[bad][0])} at {_first_bad(bad)})"
            )
        out[key] = value.detach().clone()
    return out


def check_non_negative(t: torch.Tensor, where: str, key: str) -> None:
    bad = t < 0
    if bool(bad.any()):
        raise ValueError(
            f"{where}[{key!r}]` must be >= 0 (got {float(t[bad][0])} at {_first_bad(bad)})"
        )


def check_whole(t: torch.Tensor, where: str, key: str) -> None:
    """Non-negative whole numbers (counts of samples)."""
    check_non_negative(t, where, key)
    bad = t != t.round()
    if bool(bad.any()):
        raise ValueError(
            f"{where}[{key!r}]` must hold whole counts of samples (got {float(t[bad][0])} at "
            f"{_first_bad(bad)})"
        )


def check_at_most(
    t: torch.Tensor, bound: torch.Tensor, where: str, key: str, meaning: str, *, exact: bool = False
) -> None:
    """``0 <= t <= bound`` elementwise (``exact``: no slack, for counts)."""
    check_non_negative(t, where, key)
    limit = bound if exact else bound * (1 + SLACK) + SLACK
    bad = t > limit
    if bool(bad.any()):
        got, most = float(t[bad][0]), float(bound.expand_as(t)[bad][0])
        raise ValueError(
            f"{where}[{key!r}]` must be <= {meaning} (got {got} > {most} at {_first_bad(bad)})"
        )


def check_zero_where_empty(t: torch.Tensor, counts: torch.Tensor, where: str, key: str) -> None:
    """A sum over no sample is 0."""
    empty = (counts == 0).expand_as(t) if counts.ndim else (counts == 0)
    bad = empty & (t != 0)
    if bool(bad.any()):
        raise ValueError(
            f"{where}[{key!r}]` must be 0 where no sample was counted (got {float(t[bad][0])} at "
            f"{_first_bad(bad)})"
        )


def check_equal_totals(totals: torch.Tensor, where: str, key: str, groups: str) -> None:
    """Every group (class) counted the same samples."""
    if totals.numel() and bool((totals != totals[0]).any()):
        raise ValueError(
            f"{where}[{key!r}]` must count every sample once per {groups} (got totals "
            f"{totals.tolist()[:8]})"
        )
