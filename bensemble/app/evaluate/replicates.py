"""Intervals: the accumulator every chunk of the main pass feeds, merged like the other states.

:class:`ChunkValues` is what one chunk of reported rows hands to an interval accumulator: the
global row numbers, the labels, each stage's probabilities, the conformal sets, the members (in
the EECE's canonical order) and the EECE's bin of every class's member vector (bins held fixed).
An accumulator has ``update(values)``, ``merge(other)`` and ``compute(reported) ->
IntervalResult``.

:class:`GatheredBootstrap` is the bootstrap of the report up to now, behind that interface: it
gathers the per-sample quantities of the reported part (``O(N * M * K)``), puts them back in the
part's order, and registers and resamples them exactly as before (multinomial resamples of the
reported part, :class:`~bensemble.app.bootstrap.BootstrapPlan`; percentile intervals, the binned
calibration errors' shifted down by the bootstrap bias; the calibrated-model ECE reference of
the first verdict), so its intervals are identical to those of earlier versions for the same
seed. Streaming replicate states (counter-based Poisson weights, one state per statistic,
``O(replicates x bins)``) take its place statistic by statistic as they become available.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from bensemble.app.bootstrap import MAX_DESIGN_ENTRIES, BootstrapPlan, calibrated_ece_null
from bensemble.app.bootstrap_stats import per_sample_nll, register_stage, stage_intervals

__all__ = ["ChunkValues", "GatheredBootstrap", "IntervalResult"]

_F64 = torch.float64


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


class GatheredBootstrap:
    """The report's bootstrap as before, fed chunk by chunk (module docstring).

    Args:
        n_part: reported rows.
        part_index: ``[N]`` int64 position of each global row in the reported part's order (the
            test indices' order with a split), or ``None`` when the part is every row in order.
        n_bins: bins of the ECE and the classwise ECE.
        bootstrap: replicates.
        seed: their seed.
    """

    def __init__(self, n_part, part_index, n_bins: int, bootstrap: int, seed: int) -> None:
        self.n_part, self.part_index = n_part, part_index
        self.n_bins, self.bootstrap, self.seed = n_bins, bootstrap, seed
        self.chunks: list[ChunkValues] = []

    def update(self, values: ChunkValues) -> None:
        self.chunks.append(values)

    def merge(self, other: GatheredBootstrap) -> GatheredBootstrap:
        self.chunks += other.chunks
        return self

    def _gathered(self) -> ChunkValues:
        """Every chunk, concatenated and put in the part's order."""
        c = self.chunks
        rows = torch.cat([v.rows for v in c])
        where = rows if self.part_index is None else self.part_index[rows]
        back = torch.empty_like(where)
        back[where] = torch.arange(where.shape[0])

        def cat(parts: list[torch.Tensor], dim: int = 0) -> torch.Tensor:
            out = torch.cat(parts, dim=dim)
            return out.index_select(dim, back)

        return ChunkValues(
            rows=rows[back],
            labels=cat([v.labels for v in c]),
            stages={s: cat([v.stages[s] for v in c]) for s in c[0].stages},
            sets=None if c[0].sets is None else cat([v.sets for v in c]),
            members=None if c[0].members is None else cat([v.members for v in c], 1),
            eece_ids=None if c[0].eece_ids is None else cat([v.eece_ids for v in c], 1),
            eece_slots=c[0].eece_slots,
            member_variance=None
            if c[0].member_variance is None
            else cat([v.member_variance for v in c]),
        )

    def compute(self, reported: dict[str, dict[str, Any]]) -> IntervalResult:
        """The interval rows around the ``reported`` values (stage -> metric -> value)."""
        if self.bootstrap == 0 or not self.chunks:
            return IntervalResult()
        from bensemble.metrics.binning._threads import single_threaded

        # one torch thread: the heavy parts (sparse products, numpy) are single-threaded anyway,
        # and the rest costs 2-3x the CPU time on a loaded machine with more
        with single_threaded():
            v = self._gathered()
            self.chunks = []
            plan = _plan(v, self.n_bins)
            rows = stage_intervals(plan.run(self.bootstrap, seed=self.seed), reported)
            null = _calibrated_q95(v.stages["unscaled"], self.n_bins, self.bootstrap, self.seed)
        return IntervalResult(rows=rows, null_q95=null, skipped=plan.skipped)


def _plan(v: ChunkValues, n_bins: int) -> BootstrapPlan:
    """Every headline number as a statistic of the reported points, keyed ``"stage:metric"``
    (all-ones weights reproduce the reported values)."""
    labels = v.labels
    plan = BootstrapPlan(labels.shape[0])
    probs = v.stages["unscaled"]
    register_stage(plan, "unscaled", probs, labels, n_bins)
    scaled = v.stages.get("temperature-scaled")
    if scaled is not None:
        register_stage(plan, "temperature-scaled", scaled, labels, n_bins)
        plan.mean(
            "scaled - unscaled:nll", per_sample_nll(scaled, labels) - per_sample_nll(probs, labels)
        )
    if v.sets is not None:
        plan.mean("conformal:coverage", v.sets.gather(1, labels[:, None]).squeeze(1))
        plan.mean("conformal:mean_set_size", v.sets.sum(1))
        plan.mean("conformal:empty_set_rate", ~v.sets.any(1))
    if v.members is not None:
        from bensemble.metrics._eece_stats import _member_variance
        from bensemble.uncertainty import decompose_classification_uncertainty

        total, aleatoric, epistemic = decompose_classification_uncertainty(v.members)
        plan.mean("ensemble:mean_total", total)
        plan.mean("ensemble:mean_aleatoric", aleatoric)
        plan.mean("ensemble:mean_epistemic", epistemic)
        m, n, k = v.members.shape
        flat = v.members.reshape(m, n * k)
        plan.mean("ensemble:mean_member_variance", _member_variance(flat).view(n, k).mean(1))
        if plan.room("ensemble:eece", (m + 3) * n * k):
            cols = v.members.permute(0, 2, 1).reshape(m, k * n)
            outcome = (labels[None, :] == torch.arange(k)[:, None]).reshape(-1).to(_F64)
            flat_ids = (v.eece_ids + torch.arange(k)[:, None] * v.eece_slots).reshape(-1)
            plan.eece(
                "ensemble:eece",
                cols=cols,
                outcome=outcome,
                eu=_member_variance(cols),
                flat_ids=flat_ids,
                groups=k,
                slots=v.eece_slots,
            )
    return plan


def _calibrated_q95(probs: torch.Tensor, n_bins: int, n_draws: int, seed: int) -> float:
    """95th percentile of the ECE of a perfectly calibrated model with the same confidences."""
    from bensemble.metrics._binning import uniform_bin_ids

    conf = probs.gather(1, probs.argmax(1)[:, None]).squeeze(1)
    null = calibrated_ece_null(conf, uniform_bin_ids(conf, n_bins), n_bins + 1, n_draws, seed=seed)
    return float(torch.quantile(null, 0.95))


#: Re-exported for the note that names it.
DESIGN_LIMIT = MAX_DESIGN_ENTRIES
