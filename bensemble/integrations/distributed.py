"""Synchronising streaming meters across ``torch.distributed`` ranks without torchmetrics."""

from __future__ import annotations

from typing import Any

import torch

from bensemble.metrics._state import MergeableState, settings_fingerprint

__all__ = ["sync_"]

_F64 = torch.float64


def _check_ranks_agree(meter: MergeableState, group: Any, fn: str) -> dict[str, int | None]:
    """One small ``all_reduce(MAX)`` of ``[fingerprint, -fingerprint, size, -size, ...]``: every
    rank learns whether all ranks have the same settings (bins, norm, centroids) and sizes seen
    (classes, members; a rank without data has none yet), and they all raise alike if not.
    Returns the sizes seen over all ranks."""
    import torch.distributed as dist

    fingerprint = settings_fingerprint(meter)
    values = [fingerprint, -fingerprint]
    for size in meter._seen.values():
        values += [0.0, -float(2**53)] if size is None else [float(size), -float(size)]
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
    seen: dict[str, int | None] = {}
    for i, key in enumerate(meter._seen, start=1):
        high, low = top[2 * i], -top[2 * i + 1]
        if high == 0.0:
            seen[key] = None
        elif low not in (high, float(2**53)):
            what = key.replace("num_classes", "classes").replace("n_members", "members")
            raise ValueError(
                f"{fn}: `meter` must have seen the same number of {what} on every rank (got "
                f"{low:g} and {high:g})"
            )
        else:
            seen[key] = int(high)
    return seen


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
