"""Shared kernel of the ranking metrics: cumulative counts at every distinct score threshold."""

from __future__ import annotations

import torch


def descending_counts(
    scores: torch.Tensor, is_positive: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Cumulative positives / negatives at each distinct threshold, scores in decreasing order.

    Samples with equal scores form one threshold (they are accepted or rejected together).

    Args:
        scores: scores ``[N]`` (float64).
        is_positive: 0/1 flags ``[N]``.

    Returns:
        ``(tp, fp, thresholds)``, each ``[G]`` for the ``G`` distinct scores in decreasing order:
        ``tp[g]`` / ``fp[g]`` count the positives / negatives with score ``>= thresholds[g]``
        (float64 counts, exact below 2**53).
    """
    ordered, order = torch.sort(scores, descending=True, stable=True)
    thresholds, counts = torch.unique_consecutive(ordered, return_counts=True)
    ends = torch.cumsum(counts, 0) - 1
    tp = torch.cumsum(is_positive[order].to(torch.float64), 0)[ends]
    fp = (ends + 1).to(torch.float64) - tp
    return tp, fp, thresholds
