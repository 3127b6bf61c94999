"""Accumulate: everything an evaluation sums over its reported rows, as one mergeable state.

:class:`EvaluationState` is built from a :class:`~bensemble.app.evaluate.plan.Plan` (what the
passes before the main one fixed: the split, the temperature and conformal threshold, the member
order, the EECE's centroids) and fed chunks of reported rows. Everything in it is additive or
concatenates: the metric meters of each stage (float64 per-bin sums,
:mod:`bensemble.metrics.streaming`), the confidences and row numbers behind the selective
metrics (:mod:`bensemble.app.evaluate.ranked`), per-class counts, conformal counts, the uncertainty
decomposition's sums, the EECE's per-bin sums per K-means seed and the interval accumulator
(:mod:`bensemble.app.evaluate.replicates`). :meth:`EvaluationState.merge` adds a state of other
rows (another chunk range, shard, process or Ray task): merged states give the numbers of one
pass over all rows up to float64 summation order (counts exactly).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from bensemble.app.evaluate.ranked import Ranked
from bensemble.app.evaluate.replicates import ChunkValues
from bensemble.metrics.streaming import (
    AccuracyMeter,
    BrierMeter,
    CalibrationErrorMeter,
    ClasswiseCalibrationErrorMeter,
    NLLMeter,
)
from bensemble.metrics.streaming_epistemic import UncertaintyMeter
from bensemble.metrics.streaming_eval import EECESums, eece_columns

if TYPE_CHECKING:
    from bensemble.app.evaluate.plan import Plan

__all__ = ["EvaluationState", "StageState"]

_F64 = torch.float64


class StageState:
    """One stage (``unscaled`` or ``temperature-scaled``): the meters behind its row of the
    metrics table and the confidences behind its row of the selective table."""

    def __init__(self, k: int, n_bins: int, n_part: int) -> None:
        self.meters = {
            "accuracy": AccuracyMeter(k),
            "nll": NLLMeter(num_classes=k),
            "brier": BrierMeter(k),
            "ece": CalibrationErrorMeter(n_bins, num_classes=k),
            "classwise_ece": ClasswiseCalibrationErrorMeter(k, n_bins),
        }
        self.ranked = Ranked(n_part)

    def update(self, probs: torch.Tensor, labels: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Add ``probs [b, K]`` and ``labels [b]`` of the global ``rows``; returns whether each
        argmax (first index on ties) is right."""
        for meter in self.meters.values():
            meter.update(probs, labels)
        pred = probs.argmax(1)
        correct = pred == labels
        conf = probs.gather(1, pred[:, None]).squeeze(1).to(_F64)
        self.ranked.add(conf.numpy(), correct.numpy(), rows.numpy())
        return correct

    def merge(self, other: StageState) -> StageState:
        for name, meter in self.meters.items():
            meter.merge(other.meters[name])
        self.ranked = self.ranked.merge(other.ranked)
        return self


class EvaluationState:
    """Every sum of the main pass over some reported rows (module docstring).

    Args:
        plan: what the earlier passes fixed.
        n_part: reported rows this state will receive (its share of the part).
    """

    def __init__(self, plan: Plan, n_part: int) -> None:
        k, n_bins = plan.k, plan.options.n_bins
        self.plan = plan
        self.n = 0
        self.unscaled = StageState(k, n_bins, n_part)
        self.scaled = None if plan.split is None else StageState(k, n_bins, n_part)
        self.support = torch.zeros(k, dtype=torch.int64)
        self.hits = torch.zeros(k, dtype=_F64)  # right unscaled argmax per class
        self.covered = self.size = self.empty = 0
        self.covered_per_class = torch.zeros(k, dtype=_F64)
        self.uncertainty = UncertaintyMeter() if plan.m > 1 else None
        self.variance = torch.zeros((), dtype=_F64)  # sum of Var_m p_m(y = k) over rows, k
        self.eece = [EECESums(c) for c in plan.centroids]
        self.intervals = interval_accumulator(plan)

    def update(self, members: torch.Tensor, labels: torch.Tensor, rows: torch.Tensor) -> None:
        """Add reported rows: ``members [M, b, K]`` float64 probabilities (file's member
        order), ``labels [b]`` int64 and their global row numbers ``rows [b]``."""
        plan = self.plan
        self.n += int(labels.shape[0])
        mean = members.mean(0)
        correct = self.unscaled.update(mean, labels, rows)
        k = plan.k
        self.support += torch.bincount(labels, minlength=k)
        self.hits += torch.bincount(labels, weights=correct.to(_F64), minlength=k)
        stages = {"unscaled": mean}
        sets = None
        if plan.split is not None:
            scaled = plan.split.scale(mean)
            self.scaled.update(scaled, labels, rows)
            stages["temperature-scaled"] = scaled
            sets = plan.split.sets(scaled, rows)
            covered = sets.gather(1, labels[:, None]).squeeze(1)
            self.covered += int(covered.sum())
            self.size += int(sets.sum())
            self.empty += int((~sets.any(1)).sum())
            self.covered_per_class += torch.bincount(labels, weights=covered.to(_F64), minlength=k)
        ordered, ids, variance = None, None, None
        if plan.m > 1:
            self.uncertainty.update(members)
            ordered = members if plan.order is None else members[plan.order]
            columns = eece_columns(ordered)
            self.variance += columns[1].sum()  # Var_m p_m(y = k) summed over rows and classes
            ids = [sums.update(ordered, labels, columns) for sums in self.eece][0]
            variance = columns[1].view(k, -1).T  # [b, K], for the interval states
        if self.intervals is not None:
            self.intervals.update(
                ChunkValues(
                    rows=rows,
                    labels=labels,
                    stages=stages,
                    sets=sets,
                    members=ordered,
                    eece_ids=ids,
                    eece_slots=self.eece[0].slots if self.eece else 0,
                    member_variance=variance,
                )
            )

    def merge(self, other: EvaluationState) -> EvaluationState:
        """Add the state of other rows (the caller merges in row order)."""
        self.n += other.n
        self.unscaled.merge(other.unscaled)
        if self.scaled is not None:
            self.scaled.merge(other.scaled)
        self.support += other.support
        self.hits += other.hits
        self.covered += other.covered
        self.size += other.size
        self.empty += other.empty
        self.covered_per_class += other.covered_per_class
        if self.uncertainty is not None:
            self.uncertainty.merge(other.uncertainty)
        self.variance += other.variance
        for mine, theirs in zip(self.eece, other.eece, strict=True):
            mine.merge(theirs)
        if self.intervals is not None:
            self.intervals.merge(other.intervals)
        return self

    def __getstate__(self) -> dict[str, Any]:  # a worker sends its state back without the plan
        state = dict(self.__dict__)
        state["plan"] = None
        return state


def interval_accumulator(plan: Plan) -> Any:
    """The interval accumulator of the main pass (``None`` with ``bootstrap=0``): streaming
    replicate states (:mod:`bensemble.app.evaluate.intervals`)."""
    from bensemble.app.evaluate import intervals

    o = plan.options
    if o.bootstrap == 0:
        return None
    slots = max(c.shape[0] for c in plan.centroids[0]) if plan.centroids else 0
    split = plan.split is not None
    return intervals.StreamedIntervals(plan.k, plan.m, o.n_bins, split, slots, o.bootstrap, o.seed)


def rows_of(start: int, stop: int, keep: torch.Tensor | None) -> torch.Tensor:
    """Global row numbers ``start:stop`` (those ``keep`` marks)."""
    rows = torch.arange(start, stop, dtype=torch.int64)
    return rows if keep is None else rows[keep]
