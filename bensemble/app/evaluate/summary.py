"""Notes and verdicts of an :class:`~bensemble.app.evaluate.evaluation.Evaluation`.

:func:`summarise` runs once the numbers are in: it adds the intervals, writes the plain-language
notes (small calibration parts, scaling that hurt, ...) and answers the three questions of
:mod:`bensemble.app.verdict`. It never changes a reported number.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bensemble.app.evaluate.options import SMALL_PART
from bensemble.app.verdict import (
    CALIBRATION_RULE_TWO_STEP,
    RULES,
    calibration_verdict,
    epistemic_verdict,
    scaling_verdict,
    verdict_dict,
)

if TYPE_CHECKING:
    from bensemble.app.evaluate.evaluation import Evaluation
    from bensemble.app.evaluate.replicates import IntervalResult

__all__ = ["interval_of", "reported_values", "summarise"]


def interval_of(rows: list[dict[str, Any]], stage: str, metric: str) -> tuple[float, float] | None:
    """``(ci_low, ci_high)`` of ``stage, metric`` in interval rows, or ``None``."""
    for row in rows:
        if row["stage"] == stage and row["metric"] == metric:
            if row["ci_low"] is None or row["ci_high"] is None:
                return None
            return row["ci_low"], row["ci_high"]
    return None


def _notes(ev: Evaluation) -> list[str]:
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


def reported_values(ev: Evaluation) -> dict[str, dict[str, Any]]:
    """Stage -> metric -> reported value: what each interval is around."""
    scaled = ev.temperature is not None
    reported: dict[str, dict[str, Any]] = {"unscaled": {**ev.metrics[0], **ev.selective[0]}}
    if scaled:
        reported["temperature-scaled"] = {**ev.metrics[1], **ev.selective[1]}
        reported["scaled - unscaled"] = {"nll": ev.metrics[1]["nll"] - ev.metrics[0]["nll"]}
    reported["conformal"] = ev.conformal or {}
    reported["ensemble"] = ev.ensemble or {}
    return reported


def summarise(ev: Evaluation, intervals: IntervalResult) -> None:
    """Fill ``ev.intervals``, ``ev.notes`` and ``ev.verdicts`` in place (and
    ``setup["ece_calibrated_q95"]``, the reference of the first verdict)."""
    s = ev.setup
    ev.intervals = intervals.rows
    ev.interval_notes = list(intervals.notes)
    null_q95 = intervals.null_q95
    s["ece_calibrated_q95"] = null_q95
    ev.notes = _notes(ev)
    if intervals.skipped:
        ev.notes.append(
            f"No interval for {', '.join(intervals.skipped)}: its bootstrap would not fit the "
            "memory bound (samples, classes, bins and members too many); the value is reported "
            "without one."
        )
    first = ev.metrics[0]
    scaled = ev.temperature is not None
    difference = ev.metrics[1]["nll"] - first["nll"] if scaled else None
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
    rules = list(RULES)
    if intervals.notes:  # streaming replicates: the ECE's interval is valid near zero
        rules[0] = CALIBRATION_RULE_TWO_STEP
    ev.verdicts = [
        verdict_dict(v, rule, x, ci) for v, rule, x, ci in zip(verdicts, rules, values, cis)
    ]
