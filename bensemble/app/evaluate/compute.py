"""Compute: the merged state of the main pass -> an :class:`~bensemble.app.evaluate.evaluation.
Evaluation` (every table's rows, what the figures draw, the intervals, notes and verdicts).

Each number comes from the compute half of the metric it reports
(:mod:`bensemble.metrics.streaming` meters, the EECE's :func:`~bensemble.metrics.streaming_eval.
eece_result`, the selective metrics of :mod:`~bensemble.app.evaluate.selective`), so it equals
the one-shot function's on the same rows up to float64 summation order.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from bensemble.app.evaluate.evaluation import Evaluation, RiskCoverage
from bensemble.app.evaluate.options import MAX_PER_CLASS
from bensemble.app.evaluate.plan import Plan
from bensemble.app.evaluate.states import EvaluationState, StageState
from bensemble.app.evaluate.summary import reported_values, summarise

__all__ = ["class_rows", "evaluation_of"]

_F64 = torch.float64


def _stage_rows(
    stage: StageState, name: str, part: str, n: int, replicates: int, plan: Plan
) -> tuple[dict, dict, RiskCoverage, tuple]:
    """The stage's metrics row, selective row, risk-coverage vertices and the selective
    metrics' ``replicates`` (``(auroc [R + 1], aurc [R + 1])``, row 0 the reported values)."""
    row = {"stage": name, "part": part, "n": n}
    row.update({key: meter.compute() for key, meter in stage.meters.items()})
    block = plan.options.block(plan.n, plan.m * plan.k)
    auroc, aurc = stage.ranked.finish(replicates, plan.options.seed, block)
    point = float(auroc[0])
    sel = {"stage": name, "error_auroc": point if math.isfinite(point) else None}
    sel["aurc"] = float(aurc[0])
    curve = RiskCoverage(*stage.ranked.vertices(block=block), aurc=sel["aurc"])
    stage.ranked = None  # its buffer is sorted now, and no longer needed
    return row, sel, curve, (auroc, aurc)


def evaluation_of(plan: Plan, state: EvaluationState) -> Evaluation:
    """The evaluation of the merged ``state`` of every reported row (module docstring)."""
    split, k, n = plan.split, plan.k, plan.n_part
    part = "all" if split is None else "test"
    intervals = state.intervals
    replicates = getattr(intervals, "selective_replicates", 0)
    row, sel, curve, ranked = _stage_rows(state.unscaled, "unscaled", part, n, replicates, plan)
    metrics, selective = [row], [sel]
    curves = {"unscaled": curve}
    ranked_replicates = {"unscaled": ranked}
    reliability = {"reliability": state.unscaled.meters["ece"].bins}
    conformal, temperature = None, None
    if split is not None:
        temperature = split.temperature
        name = f"temperature-scaled (T={temperature:.3f})"
        row, sel, curve, ranked = _stage_rows(state.scaled, name, "test", n, replicates, plan)
        metrics.append(row)
        selective.append(sel)
        curves[f"T = {temperature:.3f}"] = curve
        ranked_replicates["temperature-scaled"] = ranked
        reliability["reliability_scaled"] = state.scaled.meters["ece"].bins
        conformal = split.conformal_row(state.covered, state.size, state.empty)
    ensemble, details = None, None
    if plan.m > 1:
        from bensemble.metrics.streaming_eval import eece_result

        ensemble = {"members": plan.m}
        ensemble.update({f"mean_{key}": v for key, v in state.uncertainty.compute().items()})
        ensemble["mean_member_variance"] = float(state.variance / (n * k))
        ensemble.update(eece_result(state.eece, plan.seeds, plan.eece_bins, n))
        details = ensemble.pop("details")
    ev = Evaluation(
        setup=dict(plan.setup),
        metrics=metrics,
        ensemble=ensemble,
        conformal=conformal,
        temperature=temperature,
        selective=selective,
        per_class=_per_class(plan, state) if k <= MAX_PER_CLASS else None,
        reliability=reliability,
        curves=curves,
        eece_details=details,
    )
    if intervals is None:
        from bensemble.app.evaluate.replicates import IntervalResult

        result = IntervalResult()
    elif replicates:
        result = intervals.compute(reported_values(ev), ranked_replicates)
    else:
        result = intervals.compute(reported_values(ev))
    summarise(ev, result)
    return ev


def _per_class(plan: Plan, state: EvaluationState) -> list[dict[str, Any]]:
    """One row per class: ``support``, ``accuracy`` (recall), each stage's term of the classwise
    ECE (``sum_b |B_kb| / N |acc - conf|``, from the classwise meter's per-bin sums) and the
    ``coverage`` of the conformal sets among the class's samples."""
    from bensemble.metrics.calibration import _norm_from_sums

    support = state.support
    cols: dict[str, list[Any]] = {
        "support": support.tolist(),
        "accuracy": (state.hits / support.clamp_min(1)).tolist(),
    }
    stages = {"classwise_ece": state.unscaled}
    if plan.split is not None:
        stages = {"classwise_ece_unscaled": state.unscaled, "classwise_ece_scaled": state.scaled}
    for name, stage in stages.items():
        s = stage.meters["classwise_ece"].state
        cols[name] = _norm_from_sums(s["counts"], s["sum_p"], s["hits"], "l1").tolist()
    if plan.split is not None:
        cols["coverage"] = (state.covered_per_class / support.to(_F64)).tolist()
    return class_rows(cols)


def class_rows(cols: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Rows ``{"class": c, column: value, ...}`` from per-class columns (``support`` and
    ``accuracy`` first; ``accuracy`` ``None`` for a class without support)."""
    rows = []
    for c in range(len(cols["support"])):
        row: dict[str, Any] = {"class": c}
        row.update({name: values[c] for name, values in cols.items()})
        if row["support"] == 0:
            row["accuracy"] = None
        rows.append(row)
    return rows
