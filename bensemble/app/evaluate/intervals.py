"""Intervals that stream: the report's 95% intervals from counter-based Poisson-bootstrap
replicate states (:mod:`bensemble.metrics.intervals`), fed chunk by chunk and merged like every
other state.

:class:`StreamedIntervals` registers every headline number of the report with one
:class:`~bensemble.metrics.intervals.ReplicateState` and hands it each chunk of reported rows
under their global row numbers. A replicate's weight is a function of (seed, global row,
replicate), so the intervals do not depend on the chunk size, the shards or the workers: merged
states equal one pass. The memory is ``O(replicates x bins)`` per statistic, whatever ``N``;
the misclassification AUROC and AURC, ranking statistics, get their exact replicates from the
confidences and row numbers the stages keep for their point values anyway
(:class:`~bensemble.app.evaluate.ranked.Ranked`, one bounded-memory sweep, the same weights).

What each interval covers (the report's notes say it too):

* means (accuracy, NLL, Brier, the conformal rates, the uncertainty means, the paired NLL
  difference ``scaled - unscaled``), the misclassification AUROC and the AURC: percentile
  intervals of the replicates; they cover the population value for the fixed model (the
  sampling variability of the evaluated points);
* ECE and classwise ECE: the two-step L1 interval, valid near zero (its lower end is 0 whenever
  perfect calibration is not rejected); it covers the binned population error with these
  equal-width bins;
* EECE: the same method on bias-corrected per-bin terms; it covers the population EECE of the
  fitted K-means partition, conditional on the bins (the clustering's own variability is not
  included; with several K-means seeds, the first seed's partition).
"""

from __future__ import annotations

from typing import Any

import torch

from bensemble.app.bootstrap_stats import per_sample_nll
from bensemble.app.evaluate.replicates import ChunkValues, IntervalResult

__all__ = ["INTERVAL_NOTES", "StreamedIntervals"]

_F64 = torch.float64
_STAGE_MEANS = ("accuracy", "nll", "brier")

#: The intervals table's notes: the method behind each interval and what it covers.
INTERVAL_NOTES = (
    "95% intervals from Poisson-bootstrap replicates of the reported part (each point drawn "
    "Poisson(1) times per replicate, a function of --seed and the point's row: the same for any "
    "chunk size, shards or workers). method: percentile - the replicates' 2.5% and 97.5% "
    "quantiles (means, error_auroc, aurc, 'scaled - unscaled' - the paired difference, one "
    "replicate scoring both stages); l1-two-step - a test-inversion interval valid near zero "
    "(ece, classwise_ece, eece; its lower end is 0 when the data do not reject zero).",
    "What they cover: the population value for this fixed model (the sampling variability of "
    "the evaluated points); for ece / classwise_ece the binned population error with these "
    "equal-width bins; for eece the population EECE of the fitted K-means partition, bins held "
    "fixed (the clustering's own variability is not included), built around the bias-corrected "
    "EECE (estimate), which can lie below the plug-in value.",
)


class StreamedIntervals:
    """The report's interval accumulator over streaming replicate states (module docstring).

    Args:
        k, members: classes and members of the predictions.
        n_bins: bins of the ECE and the classwise ECE.
        split: whether there is a calibration split (a scaled stage and conformal sets).
        eece_slots: bins per class of the first K-means seed's partition (``M > 1``).
        bootstrap, seed: replicates and their seed.
    """

    def __init__(self, k, members, n_bins, split, eece_slots, bootstrap, seed) -> None:
        from bensemble.metrics.intervals import ReplicateState

        self.state = ReplicateState(bootstrap, seed=seed)
        self.skipped: list[str] = []
        self.stages = ["unscaled"] + (["temperature-scaled"] if split else [])
        for stage in self.stages:
            for name in _STAGE_MEANS:
                self.state.add_mean(f"{stage}:{name}")
            self.state.add_calibration(f"{stage}:ece", n_bins)
            self._add(
                f"{stage}:classwise_ece", "add_calibration", n_bins, classwise=True, num_classes=k
            )
        if split:
            self.state.add_mean("scaled - unscaled:nll")
            for name in ("coverage", "mean_set_size", "empty_set_rate"):
                self.state.add_mean(f"conformal:{name}")
        if members > 1:
            for name in ("mean_total", "mean_aleatoric", "mean_epistemic", "mean_member_variance"):
                self.state.add_mean(f"ensemble:{name}")
            self._add(
                "ensemble:eece", "add_eece", n_members=members, n_slots=eece_slots, n_groups=k
            )
        #: the selective metrics' replicates come from the stages' ranked samples
        #: (:class:`~bensemble.app.evaluate.ranked.Ranked`, same weights): ``R`` of them
        self.selective_replicates = bootstrap

    def _add(self, name: str, how: str, *args: Any, **kwargs: Any) -> None:
        """Register a statistic, or skip it (with a note) when its state would not fit."""
        try:
            getattr(self.state, how)(name, *args, **kwargs)
        except ValueError:
            self.skipped.append(name)

    def update(self, v: ChunkValues) -> None:
        """Add a chunk of reported rows (its global row numbers give the weights)."""
        names = set(self.state.names)
        inputs: dict[str, tuple] = {}
        y = v.labels
        for stage, probs in v.stages.items():
            pred = probs.argmax(1)
            correct = pred == y
            p64 = probs.to(_F64)
            onehot = torch.nn.functional.one_hot(y, p64.shape[1]).to(_F64)
            inputs[f"{stage}:accuracy"] = (correct.to(_F64),)
            inputs[f"{stage}:nll"] = (per_sample_nll(probs, y),)
            inputs[f"{stage}:brier"] = (((p64 - onehot) ** 2).sum(1),)
            inputs[f"{stage}:ece"] = (probs, y)
            inputs[f"{stage}:classwise_ece"] = (probs, y)
        if "temperature-scaled" in v.stages:
            unscaled, scaled = v.stages["unscaled"], v.stages["temperature-scaled"]
            difference = per_sample_nll(scaled, y) - per_sample_nll(unscaled, y)
            inputs["scaled - unscaled:nll"] = (difference,)
            sets = v.sets
            inputs["conformal:coverage"] = (sets.gather(1, y[:, None]).squeeze(1).to(_F64),)
            inputs["conformal:mean_set_size"] = (sets.sum(1).to(_F64),)
            inputs["conformal:empty_set_rate"] = ((~sets.any(1)).to(_F64),)
        if v.members is not None:
            from bensemble.metrics._eece_stats import _member_variance
            from bensemble.uncertainty import decompose_classification_uncertainty

            total, aleatoric, epistemic = decompose_classification_uncertainty(v.members)
            inputs["ensemble:mean_total"] = (total,)
            inputs["ensemble:mean_aleatoric"] = (aleatoric,)
            inputs["ensemble:mean_epistemic"] = (epistemic,)
            m, n, k = v.members.shape
            eu = v.member_variance  # [n, K]
            if eu is None:
                eu = _member_variance(v.members.reshape(m, n * k)).view(n, k)
            inputs["ensemble:mean_member_variance"] = (eu.mean(1),)
            inputs["ensemble:eece"] = (v.members, y, v.eece_ids, eu)
        self.state.update(v.rows, {name: args for name, args in inputs.items() if name in names})

    def merge(self, other: StreamedIntervals) -> StreamedIntervals:
        self.state.merge(other.state)
        return self

    def compute(
        self, reported: dict[str, dict[str, Any]], selective: dict[str, tuple] | None = None
    ) -> IntervalResult:
        """The interval rows around the ``reported`` values (stage -> metric -> value);
        ``selective`` maps a stage to its ``(auroc, aurc)`` rows ``[R + 1]`` each (row 0 the
        reported values: :func:`~bensemble.metrics.intervals.selective_intervals`)."""
        from bensemble.metrics.intervals import selective_intervals

        intervals: dict[str, Any] = self.state.compute()
        for stage, (auroc, aurc) in (selective or {}).items():
            found = selective_intervals(auroc, aurc, level=self.state.level)
            intervals.update(
                {f"{stage}:{name}": iv for name, iv in found.items() if iv is not None}
            )
        out = []
        for key in _order(self.state.names, self.stages):
            stage, metric = key.split(":", 1)
            interval = intervals.get(key)
            out.append(
                {
                    "stage": stage,
                    "metric": metric,
                    "value": reported.get(stage, {}).get(metric),
                    "ci_low": None if interval is None else interval.low,
                    "ci_high": None if interval is None else interval.high,
                    "method": None if interval is None else interval.method,
                }
            )
            if metric == "eece" and interval is not None:
                out[-1]["estimate"] = interval.estimate
        return IntervalResult(rows=out, skipped=list(self.skipped), notes=list(INTERVAL_NOTES))


def _order(names: tuple[str, ...], stages: list[str]) -> list[str]:
    """Interval rows in the report's order: each stage's metrics (the selective ones after
    its calibration errors), then the paired difference, the conformal rates, the ensemble."""
    out = []
    for stage in stages:
        out += [f"{stage}:{m}" for m in (*_STAGE_MEANS, "ece", "classwise_ece")]
        out += [f"{stage}:error_auroc", f"{stage}:aurc"]
    out += [n for n in names if not n.startswith(tuple(f"{s}:" for s in stages))]
    return [n for n in out if n in names or n.endswith((":error_auroc", ":aurc"))]
