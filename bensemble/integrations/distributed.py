"""Synchronising streaming meters across ``torch.distributed`` ranks without torchmetrics."""

from __future__ import annotations

from typing import Any

import torch

from bensemble.metrics._state import MergeableState

__all__ = ["sync_"]


def sync_(meter: MergeableState, group: Any = None) -> MergeableState:
    """Sum a meter's state over every rank of ``group``, in place; returns ``meter``.

    All state tensors are packed into one float64 buffer and reduced with a single
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
    tensors = list(meter.state.values())
    flat = torch.cat([t.reshape(-1) for t in tensors])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
    offset = 0
    for t in tensors:
        t.copy_(flat[offset : offset + t.numel()].view_as(t))
        offset += t.numel()
    return meter
