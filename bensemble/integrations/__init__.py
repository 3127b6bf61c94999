"""Adapters to the engines users already run: torch.distributed, torchmetrics.

* :func:`sync_` - all-reduce a streaming meter's float64 state over a ``torch.distributed``
  process group (one ``all_reduce`` of ``O(bins)`` numbers, whatever the number of samples).
* :mod:`bensemble.integrations.torchmetrics` - ``torchmetrics.Metric`` subclasses (ECE,
  classwise ECE, NLL, Brier, EECE) whose states sum under DDP (``dist_reduce_fx="sum"``).
  Needs the optional ``torchmetrics`` package; importing this package never does.
"""

from bensemble.integrations.distributed import sync_

__all__ = ["sync_"]
