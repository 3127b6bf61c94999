"""The three questions at the top of a report, each answered by a stated rule.

Every rule reads a number and its 95% percentile bootstrap interval ``[lo, hi]``
(:mod:`bensemble.app.bootstrap`); with ``--bootstrap 0`` the interval is the point itself and
the answer says it ignores sampling noise.

1. **Is the model calibrated?** (top-label ECE of the unscaled prediction, 15 equal-width bins)

   * *yes* if ``hi < ECE_THRESHOLD`` (0.03);
   * *no* if ``lo > ECE_THRESHOLD`` **and** the ECE exceeds the 95th percentile of the ECE a
     perfectly calibrated model with the same confidences scores at this sample size (labels
     redrawn from the confidences, :func:`~bensemble.app.bootstrap.calibrated_ece_null`): the
     binned ECE is biased upwards on small samples, and this guard keeps that bias from being
     read as miscalibration;
   * *unclear* otherwise.
2. **Did temperature scaling help on held-out data?** (paired bootstrap of the test-part NLL
   difference ``NLL(scaled) - NLL(unscaled)``: the same resample scores both)

   * *yes* if ``hi < 0``; *no, it hurt* if ``lo > 0``; *unclear* if the interval holds 0;
   * *n/a* without ``--calibration-split``.
3. **Are the members' uncertainties epistemically calibrated?** (EECE, K-means partition held
   fixed in the bootstrap)

   * *yes* if ``hi < EECE_THRESHOLD`` (0.01, in squared-probability units like the EECE's
     terms); *no* if ``lo > EECE_THRESHOLD``; *unclear* otherwise;
   * *n/a* for one model (``M = 1``): there is no member disagreement to calibrate.

Example:
    >>> v = calibration_verdict(0.012, (0.008, 0.018), null_q95=0.02)
    >>> v.answer, v.status
    ('yes', 'good')
    >>> scaling_verdict(None, None, before=0.5, after=None).answer
    'n/a'
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from bensemble.reporting.html import Verdict

__all__ = [
    "CALIBRATION_RULE_TWO_STEP",
    "ECE_THRESHOLD",
    "EECE_THRESHOLD",
    "EMPTY_SETS",
    "QUESTIONS",
    "RULES",
    "STAGES",
    "calibration_verdict",
    "empty_set_note",
    "epistemic_verdict",
    "scaling_verdict",
    "verdict_dict",
]

#: ECE below which (upper interval end) a model counts as calibrated.
ECE_THRESHOLD = 0.03
#: EECE below which (upper interval end) the members count as epistemically calibrated.
EECE_THRESHOLD = 0.01

QUESTIONS = (
    "Is the model calibrated?",
    "Did temperature scaling help on held-out data?",
    "Are the members' uncertainties epistemically calibrated?",
)
RULES = (
    f"yes if the upper end of the ECE's 95% interval is below {ECE_THRESHOLD}; no if its lower "
    f"end is above {ECE_THRESHOLD} and the ECE exceeds what a perfectly calibrated model with "
    "the same confidences scores at this sample size (95th percentile, labels redrawn from the "
    "confidences); unclear otherwise.",
    "yes if the paired-bootstrap 95% interval of NLL(scaled) - NLL(unscaled) on the test part "
    "lies below 0; no (it hurt) if it lies above 0; unclear if it holds 0; n/a without a "
    "calibration split.",
    f"yes if the upper end of the EECE's 95% interval (K-means bins held fixed) is below "
    f"{EECE_THRESHOLD}; no if its lower end is above {EECE_THRESHOLD}; unclear otherwise; n/a "
    "for a single model.",
)
#: Rule 1 when the ECE's interval is valid near zero (the two-step L1 interval of the streaming
#: replicate states): its lower end is 0 unless the data reject a zero binned ECE, so no separate
#: calibrated-model reference is needed to keep the binned ECE's upward bias from reading as "no".
CALIBRATION_RULE_TWO_STEP = (
    f"yes if the upper end of the ECE's 95% interval (two-step, valid near zero) is below "
    f"{ECE_THRESHOLD}; no if its lower end is above {ECE_THRESHOLD}; unclear otherwise."
)
_POINT_ONLY = (
    " No interval (--bootstrap 0, or one too large to compute): the answer ignores sampling noise."
)


def _ends(value: float, ci: tuple[float, float] | None) -> tuple[float, float, str]:
    if ci is None:
        return value, value, ""
    return ci[0], ci[1], f" (95% CI {ci[0]:.4f} to {ci[1]:.4f})"


#: The stages a verdict can judge, as its question names them.
STAGES = {"unscaled": "unscaled", "scaled": "temperature-scaled"}

#: Why a conformal score can return an empty prediction set, per score.
EMPTY_SETS = {
    "lac": (
        "LAC keeps the labels with p_y >= 1 - q (q the calibrated threshold): a set is empty "
        "when no label is that probable, i.e. on hard, low-confidence inputs (with q < 0.5 at "
        "most one label can pass); an empty set counts as a miss, and coverage still meets "
        "1 - alpha."
    ),
    "aps": (
        "randomised APS counts a label's own probability with weight u ~ U(0, 1): a set is "
        "empty when even the top label's randomised score exceeds the threshold; "
        "randomized=False never gives one."
    ),
    "raps": (
        "randomised RAPS, as APS (plus its rank penalty): a set is empty when the top label's "
        "randomised score exceeds the threshold; randomized=False never gives one."
    ),
}


def empty_set_note(score: str, randomized: bool = True) -> str:
    """Why sets of ``score`` (``"lac"``, ``"aps"``, ``"raps"``) can be empty, or that they
    cannot (non-randomised APS / RAPS)."""
    if score != "lac" and not randomized:
        return f"non-randomised {score.upper()} sets always hold the top label: never empty."
    return EMPTY_SETS[score]


def staged(question: str, stage: str | None) -> str:
    """``question`` naming the stage it judges: "Is the temperature-scaled model calibrated?"."""
    if stage is None:
        return question
    return question.replace("the model", f"the {STAGES[stage]} model").replace(
        "the members'", f"the {STAGES[stage]} members'"
    )


def calibration_verdict(
    ece: float,
    ci: tuple[float, float] | None,
    *,
    null_q95: float | None = None,
    stage: str | None = None,
) -> Verdict:
    """Question 1 from an ECE, its interval and the calibrated-model reference; ``stage``
    (``"unscaled"`` / ``"scaled"``, a key of :data:`STAGES`) names the model judged in the
    question (``None``: the question as it is)."""
    question = staged(QUESTIONS[0], stage)
    lo, hi, text = _ends(ece, ci)
    detail = f"ECE {ece:.4f}{text}; threshold {ECE_THRESHOLD}."
    if null_q95 is not None:
        detail += (
            f" A perfectly calibrated model with these confidences would score up to "
            f"{null_q95:.4f} here (95th percentile)."
        )
    if ci is None:
        detail += _POINT_ONLY
    if hi < ECE_THRESHOLD:
        return Verdict(question, "yes", "good", detail)
    if lo > ECE_THRESHOLD and (null_q95 is None or ece > null_q95):
        return Verdict(question, "no", "bad", detail)
    why = (
        " The ECE is within what sampling noise gives a calibrated model: more points are needed."
        if null_q95 is not None and ece <= null_q95
        else " The interval holds the threshold."
    )
    return Verdict(question, "unclear", "warn", detail + why)


def scaling_verdict(
    difference: float | None,
    ci: tuple[float, float] | None,
    *,
    before: float,
    after: float | None,
    temperature: float | None = None,
) -> Verdict:
    """Question 2 from the test-part NLL difference ``after - before`` and its paired interval."""
    if difference is None or after is None:
        return Verdict(
            QUESTIONS[1],
            "n/a",
            "info",
            "No calibration split: nothing was scaled (pass "
            "--calibration-split to fit a temperature on held-out data).",
        )
    lo, hi, text = _ends(difference, ci)
    t = "" if temperature is None else f" with T = {temperature:.3f}"
    detail = (
        f"Test NLL {before:.4f} -> {after:.4f}{t}: difference {difference:+.4f}{text}, "
        "paired bootstrap."
    )
    if ci is None:
        detail += _POINT_ONLY
    if hi < 0:
        return Verdict(QUESTIONS[1], "yes", "good", detail)
    if lo > 0:
        return Verdict(QUESTIONS[1], "no, it made NLL worse", "bad", detail)
    return Verdict(QUESTIONS[1], "unclear", "warn", detail + " The interval holds 0.")


def epistemic_verdict(
    eece: float | None,
    ci: tuple[float, float] | None,
    *,
    members: int,
    stage: str | None = None,
) -> Verdict:
    """Question 3 from the EECE and its interval (bins held fixed); ``stage`` as in
    :func:`calibration_verdict`."""
    question = staged(QUESTIONS[2], stage)
    if members < 2 or eece is None:
        return Verdict(
            question, "n/a", "info", "A single model: no member disagreement to calibrate."
        )
    lo, hi, text = _ends(eece, ci)
    detail = f"EECE {eece:.4f}{text}; threshold {EECE_THRESHOLD}; {members} members."
    if ci is None:
        detail += _POINT_ONLY
    if hi < EECE_THRESHOLD:
        return Verdict(question, "yes", "good", detail)
    if lo > EECE_THRESHOLD:
        return Verdict(question, "no", "bad", detail)
    return Verdict(question, "unclear", "warn", detail + " The interval holds the threshold.")


def verdict_dict(
    verdict: Verdict,
    rule: str,
    value: float | None = None,
    ci: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """A verdict as JSON-ready data, with the rule that produced it and the number it read
    (``value``, ``ci_low``, ``ci_high``; ``None`` where there is none)."""
    low, high = (None, None) if ci is None else ci
    return {**asdict(verdict), "rule": rule, "value": value, "ci_low": low, "ci_high": high}
