"""Synchronising streaming meters across ``torch.distributed`` ranks without torchmetrics."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from bensemble.metrics._state import MergeableState, settings_fingerprint

__all__ = ["sync_"]

_F64 = torch.float64


#: The low end recorded for a size nothing has seen yet (above any real size; the high end is 0).
_UNSEEN = float(2**53)


def _agreed_sizes(
    ranges: dict[str, tuple[float, float]], refusal: Callable[[str, str, float, float], str]
) -> dict[str, int | None]:
    """The size (classes, members) each ``(low, high)`` range agrees on, or ``None`` where nothing
    has seen one (``(_UNSEEN, 0)``); a range over disagreeing or impossible sizes raises
    ``ValueError(refusal(name, what, low, high))`` (``what``: ``"classes"`` or ``"members"``).

    The ranges are the min and max of each size over the ranks of an ``all_reduce`` or over the
    updates merged into a metric; a rank or update that saw nothing records ``(_UNSEEN, 0)``.
    """
    seen: dict[str, int | None] = {}
    for name, (low, high) in ranges.items():
        if low == _UNSEEN and high == 0.0:
            seen[name] = None
        elif low != high or low < 1 or low != round(low):
            what = name.replace("num_classes", "classes").replace("n_members", "members")
            raise ValueError(refusal(name, what, low, high))
        else:
            seen[name] = int(low)
    return seen


def _check_ranks_agree(meter: MergeableState, group: Any, fn: str) -> dict[str, int | None]:
    """One small ``all_reduce(MAX)`` of ``[fingerprint, -fingerprint, size, -size, ...]``: every
    rank learns whether all ranks have the same settings (bins, norm, centroids) and sizes seen
    (classes, members; a rank without data has none yet), and they all raise alike if not.
    Returns the sizes seen over all ranks."""
    import torch.distributed as dist

    fingerprint = settings_fingerprint(meter)
    values = [fingerprint, -fingerprint]
    for size in meter._seen.values():
        values += [0.0, -_UNSEEN] if size is None else [float(size), -float(size)]
    device = meter._device()
    reduced = torch.tensor(values, dtype=_F64, device=device)
    dist.all_reduce(reduced, op=dist.ReduceOp.MAX, group=group)
    top = reduced.cpu().tolist()
    if not top[0] == -top[1] == fingerprint:
        raise ValueError(
            f"{fn}: `meter` must have the same settings on every rank - bins, norm, centroids, "
            f"... (got settings fingerprints {-top[1]:.0f}..{top[0]:.0f}; build the meter from "
            "the same arguments everywhere, broadcasting fitted centroids)"
        )
    ranges = {key: (-top[2 * i + 1], top[2 * i]) for i, key in enumerate(meter._seen, start=1)}
    return _agreed_sizes(
        ranges,
        lambda _, what, low, high: (
            f"{fn}: `meter` must have seen the same number of {what} on "
            f"every rank (got {low:g} and {high:g})"
        ),
    )


def sync_(meter: MergeableState, group: Any = None) -> MergeableState:
    """Sum a meter's state over every rank of ``group``, in place; returns ``meter``.

    First one ``all_reduce`` of a few numbers checks that every rank holds a meter with the same
    settings (bins, norm, centroids, ...) and saw the same number of classes (and members): a
    mismatch raises the same ``ValueError`` on every rank and changes nothing, where summing the
    states would give a silently wrong value (or a hang, for states of different sizes). Then all
    state tensors are packed into one float64 buffer and reduced with a single
    ``torch.distributed.all_reduce(SUM)``: the traffic is the size of the state (``O(n_bins)``,
    ``O(num_classes * n_bins)`` or ``O(bins * members)``), independent of the number of samples.
    Afterwards every rank holds the global state, so ``meter.compute()`` gives the value over all
    ranks' data. Call it once per evaluation: a second call would add the global state up again.
    With the NCCL backend move the meter to the rank's GPU first (``meter.to(device)``).

    Args:
        meter: any streaming meter of :mod:`bensemble.metrics.streaming`.
        group: the process group (``None``: the default group).

    Returns:
        ``meter``, now holding the sum over ranks.
    """
    fn = "sync_"
    if not isinstance(meter, MergeableState):
        raise ValueError(
            f"{fn}: `meter` must be a bensemble streaming meter (got {type(meter).__name__})"
        )
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError(
            f"{fn}: torch.distributed must be initialised (got no process group) - call "
            "torch.distributed.init_process_group first"
        )
    seen = _check_ranks_agree(meter, group, fn)
    tensors = list(meter.state.values())
    flat = torch.cat([t.reshape(-1) for t in tensors])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
    offset = 0
    for t in tensors:
        t.copy_(flat[offset : offset + t.numel()].view_as(t))
        offset += t.numel()
    meter._seen = seen
    return meter
