"""Intervals: the accumulator every chunk of the main pass feeds, merged like the other states.

:class:`ChunkValues` is what one chunk of reported rows hands to an interval accumulator: the
global row numbers, the labels, each stage's probabilities, the conformal sets, the members (in
the EECE's canonical order) and the EECE's bin of every class's member vector (bins held fixed).
An accumulator has ``update(values)``, ``merge(other)`` and ``compute(reported) ->
IntervalResult``.

The accumulator is :class:`~bensemble.app.evaluate.intervals.StreamedIntervals` (counter-based
Poisson-bootstrap replicate states, ``O(replicates x bins)`` per statistic).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["ChunkValues", "IntervalResult"]


@dataclass
class ChunkValues:
    """One chunk of reported rows (see the module docstring).

    Attributes:
        rows: ``[b]`` global row numbers (int64).
        labels: ``[b]`` int64 labels.
        stages: stage name -> probabilities ``[b, K]`` (``"unscaled"``, ``"temperature-scaled"``).
        sets: conformal prediction sets ``[b, K]`` (bool), or ``None`` without a split.
        members: ``[M, b, K]`` member probabilities in the EECE's canonical order (``M > 1``).
        eece_ids: ``[K, b]`` the first K-means seed's bin of each class's member vector.
        eece_slots: bins per class of that partition (the width of its per-bin arrays).
        member_variance: ``[b, K]`` float64 ``Var_m p_m(y = k)`` (divisor ``M``) of ``members``,
            when the caller has it already (the EECE's sums computed it); ``None``: computed
            where needed.
    """

    rows: torch.Tensor
    labels: torch.Tensor
    stages: dict[str, torch.Tensor]
    sets: torch.Tensor | None = None
    members: torch.Tensor | None = None
    eece_ids: torch.Tensor | None = None
    eece_slots: int = 0
    member_variance: torch.Tensor | None = None


@dataclass
class IntervalResult:
    """What the intervals add to a report: the rows ``stage, metric, value, ci_low, ci_high``,
    the calibrated-model reference of the ECE verdict (``None`` without replicates or when the
    intervals are valid near zero on their own), the statistics left without an interval (too
    large to resample) and the notes under the intervals table (methods, what they cover)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    null_q95: float | None = None
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
