"""Intervals, per-class rows, notes and verdicts of an :class:`~bensemble.app.evaluate.Evaluation`.

:func:`summarise` runs after the metrics: it bootstraps every headline number over the reported
part (:mod:`bensemble.app.bootstrap`), builds the per-class table for ``K <= 20``, writes the
plain-language notes (small calibration parts, scaling that hurt, ...) and answers the three
questions of :mod:`bensemble.app.verdict`. It never changes a reported number.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import torch

from bensemble.app.bootstrap import MAX_DESIGN_ENTRIES, BootstrapPlan, calibrated_ece_null
from bensemble.app.evaluate_stats import (
    eece_partition,
    per_class_rows,
    per_sample_nll,
    register_stage,
    stage_intervals,
)
from bensemble.app.verdict import (
    RULES,
    calibration_verdict,
    epistemic_verdict,
    scaling_verdict,
    verdict_dict,
)

if TYPE_CHECKING:
    from bensemble.app.evaluate import Evaluation

__all__ = ["ENSEMBLE_NOTES", "TABLE_NOTES", "bootstrap_plan", "interval_of", "summarise"]

#: Definitions and units of the uncertainty columns (``ensemble`` table).
ENSEMBLE_NOTES = (
    "mean_total: entropy of the ensemble-mean prediction, H[mean_m p_m], in nats (averaged over "
    "samples).",
    "mean_aleatoric: mean entropy of the members, mean_m H[p_m], in nats.",
    "mean_epistemic: mutual information between the label and the member, total - aleatoric, in "
    "nats (>= 0; 0 when all members agree).",
    "mean_member_variance: member variance Var_m p_m(y = k) (population variance, divisor M), "
    "averaged over classes and samples, in squared-probability units: the epistemic uncertainty "
    "(EU) the EECE scores. Not comparable with the entropies.",
    "eece: expected epistemic calibration error of the members (classwise, K-means bins; "
    "squared-probability units); eece_sd: its sd over eece_seeds K-means seeds.",
)
TABLE_NOTES: dict[str, tuple[str, ...]] = {
    "metrics": (
        "accuracy: fraction of argmax predictions that are right. nll: mean -log p(y) in nats "
        "(log(p + 1e-8)). brier: mean sum_k (p_k - [y = k])^2. ece: top-label expected "
        "calibration error (equal-width bins). classwise_ece: mean over classes of the binned "
        "calibration error of p_k.",
    ),
    "selective": (
        "error_auroc: misclassification AUROC of the score 1 - max_k p_k (0.5 = chance, 1 = every "
        "error ranked above every correct prediction). aurc: area under the risk-coverage curve "
        "of the confidence max_k p_k (lower is better).",
    ),
    "ensemble": ENSEMBLE_NOTES,
    "conformal": (
        "coverage: fraction of test sets holding the true label (target 1 - alpha). "
        "mean_set_size: mean number of classes per set. empty_set_rate: fraction of empty sets "
        "(randomised APS / RAPS can return them).",
    ),
    "intervals": (
        "95% percentile intervals over bootstrap resamples of the reported part (seeded by "
        "--seed). ECE-type metrics keep the full sample's equal-width bins; the EECE keeps its "
        "fitted K-means partition (centroids are not refitted), so its interval leaves out the "
        "clustering's own variability. Resampling biases binned calibration errors upwards, so "
        "the ece, classwise_ece and eece intervals are shifted down by the bootstrap bias "
        "estimate (mean of the resamples minus the value) and clamped at 0. 'scaled - "
        "unscaled' is the paired difference: one resample scores both stages.",
    ),
    "per_class": (
        "support: test samples of the class. accuracy: fraction of them predicted right "
        "(recall). classwise_ece*: that class's term sum_b |B_kb| / N |acc - conf| of the "
        "classwise ECE. coverage: fraction of that class's conformal sets holding the label.",
    ),
}


def interval_of(rows: list[dict[str, Any]], stage: str, metric: str) -> tuple[float, float] | None:
    """``(ci_low, ci_high)`` of ``stage, metric`` in interval rows, or ``None``."""
    for row in rows:
        if row["stage"] == stage and row["metric"] == metric:
            if row["ci_low"] is None or row["ci_high"] is None:
                return None
            return row["ci_low"], row["ci_high"]
    return None


def bootstrap_plan(ev: Evaluation) -> BootstrapPlan:
    """Every headline number of ``ev`` as a statistic of the reported points, keyed
    ``"stage:metric"`` (all-ones weights reproduce the reported values; a test checks it)."""
    s = ev.setup
    n_bins, labels = s["n_bins"], ev.labels
    plan = BootstrapPlan(labels.shape[0])
    register_stage(plan, "unscaled", ev.probs, labels, n_bins)
    if ev.scaled_probs is not None:
        register_stage(plan, "temperature-scaled", ev.scaled_probs, labels, n_bins)
        difference = per_sample_nll(ev.scaled_probs, labels) - per_sample_nll(ev.probs, labels)
        plan.mean("scaled - unscaled:nll", difference)
    if ev.sets is not None:
        sets = ev.sets
        plan.mean("conformal:coverage", sets.gather(1, labels[:, None]).squeeze(1))
        plan.mean("conformal:mean_set_size", sets.sum(1))
        plan.mean("conformal:empty_set_rate", ~sets.any(1))
    if ev.ensemble is not None:
        from bensemble.metrics._eece_stats import _member_variance
        from bensemble.uncertainty import decompose_classification_uncertainty

        total, aleatoric, epistemic = decompose_classification_uncertainty(ev.member_probs)
        plan.mean("ensemble:mean_total", total)
        plan.mean("ensemble:mean_aleatoric", aleatoric)
        plan.mean("ensemble:mean_epistemic", epistemic)
        m, n, k = ev.member_probs.shape
        # = .var(0, unbiased=False).mean(1), the two-pass kernel of the EECE (about 3x faster)
        flat = ev.member_probs.to(torch.float64).reshape(m, n * k)
        variance = _member_variance(flat).view(n, k).mean(1)
        plan.mean("ensemble:mean_member_variance", variance)
        if plan.room("ensemble:eece", (m + 3) * n * k):
            partition = eece_partition(ev.member_probs, labels, ev.eece_details)
            plan.eece("ensemble:eece", **partition)
    return plan


def _calibrated_q95(ev: Evaluation) -> float:
    """95th percentile of the ECE of a perfectly calibrated model with the same confidences."""
    from bensemble.metrics._binning import uniform_bin_ids

    n_bins = ev.setup["n_bins"]
    conf = ev.probs.gather(1, ev.probs.argmax(1)[:, None]).squeeze(1)
    null = calibrated_ece_null(
        conf,
        uniform_bin_ids(conf, n_bins),
        n_bins + 1,
        ev.setup["bootstrap"],
        seed=ev.setup["seed"],
    )
    return float(torch.quantile(null, 0.95))


def _notes(ev: Evaluation) -> list[str]:
    from bensemble.app.evaluate import SMALL_PART

    s, out = ev.setup, []
    if s.get("temperature_warning"):
        out.append(s["temperature_warning"])
    if ev.temperature is not None:
        if s["n_temperature"] < SMALL_PART:
            out.append(
                f"The temperature was fitted on {s['n_temperature']} points (fewer than "
                f"{SMALL_PART}): T and the scaled metrics are noisy; use a larger "
                "--calibration-split or more data."
            )
        if s["n_conformal"] < SMALL_PART:
            a = ev.conformal["alpha"]
            spread = (a * (1 - a) / (s["n_conformal"] + 2)) ** 0.5
            out.append(
                f"The conformal threshold was calibrated on {s['n_conformal']} points (fewer "
                f"than {SMALL_PART}): the coverage of future sets varies by about +/- "
                f"{spread:.3f} (one sd) around its expectation from one calibration draw to the "
                "next."
            )
        before, after = ev.metrics[0]["nll"], ev.metrics[1]["nll"]
        if after > before:
            out.append(
                f"Temperature scaling made the held-out NLL worse ({before:.4f} -> {after:.4f}): "
                "keep the unscaled prediction, or fit T on more data."
            )
    if any(row.get("error_auroc") is None for row in ev.selective):
        out.append("No misclassification AUROC: the reported part has no error (or only errors).")
    if ev.ensemble is not None and ev.intervals and ev.ensemble["eece_seeds"] > 1:
        out.append("The EECE interval uses the first K-means seed's partition.")
    return out


def summarise(ev: Evaluation, *, stage: Callable[[str], AbstractContextManager]) -> None:
    """Fill ``ev.intervals``, ``ev.per_class``, ``ev.notes`` and ``ev.verdicts`` in place."""
    from bensemble.app.evaluate import MAX_PER_CLASS

    s = ev.setup
    scaled = ev.temperature is not None
    reported: dict[str, dict[str, Any]] = {"unscaled": {**ev.metrics[0], **ev.selective[0]}}
    if scaled:
        reported["temperature-scaled"] = {**ev.metrics[1], **ev.selective[1]}
        reported["scaled - unscaled"] = {"nll": ev.metrics[1]["nll"] - ev.metrics[0]["nll"]}
    reported["conformal"] = ev.conformal or {}
    reported["ensemble"] = ev.ensemble or {}
    null_q95, skipped = None, []
    if s["bootstrap"] > 0:
        from bensemble.metrics._kmeans_batched import single_threaded

        # one torch thread: the heavy parts (sparse products, numpy) are single-threaded
        # anyway, and the rest costs 2-3x the CPU time on a loaded machine with more
        with stage(f"bootstrap ({s['bootstrap']} replicates)"), single_threaded():
            plan = bootstrap_plan(ev)
            ev.intervals = stage_intervals(plan.run(s["bootstrap"], seed=s["seed"]), reported)
            skipped = plan.skipped
            null_q95 = _calibrated_q95(ev)
    s["ece_calibrated_q95"] = null_q95
    if s["classes"] <= MAX_PER_CLASS and ev.per_class is None:  # --chunk-size: streamed sums
        ev.per_class = per_class_rows(
            ev.probs, ev.labels, s["n_bins"], scaled=ev.scaled_probs, sets=ev.sets
        )
    ev.notes = _notes(ev)
    if skipped:
        ev.notes.append(
            f"No interval for {', '.join(skipped)}: its bootstrap would need more than "
            f"{MAX_DESIGN_ENTRIES:,} sparse entries (samples x classes x members); the value is "
            "reported without one."
        )
    first = ev.metrics[0]
    difference = reported.get("scaled - unscaled", {}).get("nll")
    eece = None if ev.ensemble is None else ev.ensemble["eece"]
    cis = [
        interval_of(ev.intervals, "unscaled", "ece"),
        interval_of(ev.intervals, "scaled - unscaled", "nll"),
        interval_of(ev.intervals, "ensemble", "eece"),
    ]
    verdicts = [
        calibration_verdict(first["ece"], cis[0], null_q95=null_q95),
        scaling_verdict(
            difference,
            cis[1],
            before=first["nll"],
            after=ev.metrics[1]["nll"] if scaled else None,
            temperature=ev.temperature,
        ),
        epistemic_verdict(eece, cis[2], members=s["members"]),
    ]
    values = (first["ece"], difference, eece)
    ev.verdicts = [
        verdict_dict(v, rule, x, ci) for v, rule, x, ci in zip(verdicts, RULES, values, cis)
    ]
