"""The one verdict rule of the reproductions: does our measurement agree with the paper?

Every "holds / differs / not comparable" of ``bensemble reproduce`` (the experiments' verdict
tables, the ``reproduce all`` index, the README) comes from this module.

**Values.** Ours is the mean ``m`` and sample sd ``s`` of ``n`` repeats. The paper's value ``p``
carries its own uncertainty, a band ``[p_lo, p_hi]`` (:class:`PaperValue`):

* a printed number stands for everything that rounds to it: half a unit of its last digit
  ("0.07" is [0.065, 0.075], "0.007" is [0.0065, 0.0075], "0.00" is [0, 0.005]); the mean of
  such numbers (a table's mean over tasks) keeps that half unit;
* an approximate number ("~10", "~200", "almost a factor of 10") is read as ``p`` within
  :data:`APPROX_REL_TOL` = 25%.

Our 95% interval is the prediction interval of a measurement like the paper's, one run (or the
mean of ``k`` runs, e.g. ten one-vs-all tasks) from the distribution our repeats sample::

    m +- t_{0.975, n-1} * s * sqrt(1/n + 1/k)

(:data:`LEVEL` = 0.95, Student's ``t``). **holds** when the interval meets the paper's band,
**differs** when it does not. Accuracies are compared on their own scale as well: an accuracy
holds only if also ``|m - p|`` is at most :data:`ACCURACY_MAX_GAP` = 0.05 beyond the band (a
spread-out accuracy 0.2 below the paper's never holds). A verdict whose interval half-width
exceeds :data:`WIDE_FRACTION` = 50% of ``max(|m|, |p|)`` carries the note "wide interval": the
repeats cannot tell such values apart, so "holds" says little. **not comparable**: a ``--quick``
run (tiny settings), a single repeat (no spread), a paper that gives no number, or a number
measured on another data set (digits and Fashion-MNIST stand in for MNIST).

**Findings** (orderings and trends the paper states in words) are judged repeat by repeat: each
repeat says whether the ordering holds in it, and the finding **holds** when it does in at least
:data:`FINDING_FRACTION` = 80% of the repeats ("4 of 5 repeats"), **differs** otherwise; the
fraction is always reported. Quick runs and single repeats are not comparable.

Example:
    >>> compare(0.019, 0.0019, 5, "0.007").verdict
    'differs'
    >>> v = compare(0.0609, 0.045, 5, "0.07")
    >>> v.verdict, v.note
    ('holds', 'wide interval (+-0.14): the repeats cannot tell such values apart')
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bensemble.experiments._repeats import mean_sd

__all__ = [
    "ACCURACY_MAX_GAP",
    "APPROX_REL_TOL",
    "DIFFERS",
    "FINDING_FRACTION",
    "HOLDS",
    "LEVEL",
    "NOT_COMPARABLE",
    "WIDE_FRACTION",
    "PaperValue",
    "Verdict",
    "compare",
    "compare_values",
    "finding_verdict",
    "rule_text",
]

HOLDS, DIFFERS, NOT_COMPARABLE = "holds", "differs", "not comparable"
#: Coverage of our interval.
LEVEL = 0.95
#: Relative band of the paper's approximate numbers ("~10", "almost", "about").
APPROX_REL_TOL = 0.25
#: An accuracy further than this beyond the paper's band never holds.
ACCURACY_MAX_GAP = 0.05
#: Interval half-widths above this fraction of max(|ours|, |paper|) are noted as wide.
WIDE_FRACTION = 0.5
#: A finding holds when it holds in at least this fraction of the repeats.
FINDING_FRACTION = 0.8

_APPROX = re.compile(r"^\s*(~|about|almost|around)\s*", re.IGNORECASE)


@dataclass(frozen=True)
class PaperValue:
    """A number the paper states, with the band its printing leaves open.

    Attributes:
        value: the number.
        low, high: the band (see the module docstring).
        text: how the paper states it.
    """

    value: float
    low: float
    high: float
    text: str

    @classmethod
    def parse(cls, text: Any) -> PaperValue | None:
        """``"0.07"`` -> [0.065, 0.075]; ``"~10"`` -> [7.5, 12.5]; ``"n/a"`` / ``None`` -> None.

        A float (not text) is taken as exact to its shortest printed form (``0.007`` -> 3
        decimals).
        """
        if isinstance(text, PaperValue) or text is None or isinstance(text, bool):
            return text if isinstance(text, PaperValue) else None
        if isinstance(text, int):
            raw = str(text)
        else:
            raw = repr(float(text)) if isinstance(text, float) else str(text)
        approx = _APPROX.match(raw)
        number = raw[approx.end() :] if approx else raw
        number = number.strip().split()[0] if number.strip() else ""
        try:
            value = float(number)
        except ValueError:
            return None
        if not math.isfinite(value):
            return None
        if approx:
            half = APPROX_REL_TOL * abs(value)
        else:
            decimals = len(number.split(".")[1]) if "." in number and "e" not in number else 0
            half = 0.5 * 10.0**-decimals
        return cls(value, value - half, value + half, str(text).strip())

    @classmethod
    def mean_of(cls, printed: Sequence[Any], *, label: str = "mean") -> PaperValue:
        """The mean of printed numbers (e.g. a table column), with their widest rounding band."""
        values = [cls.parse(p) for p in printed]
        if not values or any(v is None for v in values):
            raise ValueError(f"PaperValue.mean_of: `printed` must hold numbers (got {printed!r})")
        mean = math.fsum(v.value for v in values) / len(values)
        half = max((v.high - v.low) / 2 for v in values)
        return cls(mean, mean - half, mean + half, f"{mean:.3f} ({label} of {len(values)})")


@dataclass(frozen=True)
class Verdict:
    """One verdict: ``verdict``, what we measured (``ours``), our interval and a note."""

    verdict: str
    ours: str
    interval: str
    note: str

    def fields(self) -> dict[str, str]:
        """``{"ours", "95% interval", "verdict", "note"}`` for a verdict table row."""
        return {
            "ours": self.ours,
            "95% interval": self.interval,
            "verdict": self.verdict,
            "note": self.note,
        }


def _t_quantile(dof: int) -> float:
    from scipy.stats import t

    return float(t.ppf(0.5 + LEVEL / 2, dof))


def _ours(mean: float, sd: float | None, n: int) -> str:
    spread = "" if sd is None else f" ± {sd:.2g}"
    return f"{mean:.4g}{spread} (n = {n})"


def compare(
    mean: float,
    sd: float | None,
    n: int,
    paper: Any,
    *,
    accuracy: bool = False,
    paper_repeats: int = 1,
    quick: bool = False,
    stand_in: str | None = None,
) -> Verdict:
    """The verdict on our ``mean`` (sd ``sd`` over ``n`` repeats) against the paper's value.

    Args:
        mean, sd, n: our mean, sample sd and number of repeats.
        paper: the paper's value: text as printed (``"0.07"``, ``"~10"``), a number, a
            :class:`PaperValue`, or ``None`` / ``"n/a"`` (no number).
        accuracy: compare as an accuracy (also within :data:`ACCURACY_MAX_GAP`).
        paper_repeats: how many runs the paper's value averages (``k`` in the module doc).
        quick: a ``--quick`` run (never comparable).
        stand_in: why the paper's number belongs to another setting (then not comparable).

    Returns:
        A :class:`Verdict`.
    """
    ours = _ours(mean, sd, n)
    value = PaperValue.parse(paper)
    reason = None
    if quick:
        reason = "--quick run (tiny settings)"
    elif value is None:
        reason = "the paper gives no number"
    elif stand_in:
        reason = stand_in
    elif n < 2 or sd is None or not math.isfinite(mean):
        reason = "single repeat: no spread to compare with"
    if reason is not None:
        return Verdict(NOT_COMPARABLE, ours, "", reason)
    half = _t_quantile(n - 1) * sd * math.sqrt(1.0 / n + 1.0 / paper_repeats)
    low, high = mean - half, mean + half
    holds = low <= value.high and high >= value.low
    notes = []
    if accuracy:
        gap = max(value.low - mean, mean - value.high, 0.0)
        if gap > ACCURACY_MAX_GAP:
            holds = False
            notes.append(f"accuracy {gap:.3f} beyond the paper's (> {ACCURACY_MAX_GAP})")
    if half > WIDE_FRACTION * max(abs(mean), abs(value.value)):
        notes.append(f"wide interval (+-{half:.2g}): the repeats cannot tell such values apart")
    return Verdict(HOLDS if holds else DIFFERS, ours, f"[{low:.4g}, {high:.4g}]", "; ".join(notes))


def compare_values(values: Sequence[float | None], paper: Any, **kwargs: Any) -> Verdict:
    """:func:`compare` on the repeats' values themselves (``None`` / NaN skipped)."""
    mean, sd = mean_sd(values)
    n = sum(1 for v in values if v is not None and not math.isnan(float(v)))
    return compare(mean, sd, n, paper, **kwargs)


def finding_verdict(
    outcomes: Sequence[bool], *, quick: bool = False, detail: str = "", unit: str = "repeats"
) -> Verdict:
    """The verdict on an ordering or trend from whether it held in each repeat.

    ``detail`` (e.g. the means the ordering compares) is appended to ``ours``; ``unit`` names
    what was repeated (``"tasks x repeats"`` for the one-vs-all runs).
    """
    n, k = len(outcomes), sum(bool(o) for o in outcomes)
    ours = f"holds in {k} of {n} {unit}" + (f"; {detail}" if detail else "")
    if quick:
        return Verdict(NOT_COMPARABLE, ours, "", "--quick run (tiny settings)")
    if n < 2:
        return Verdict(NOT_COMPARABLE, ours, "", "single repeat: no spread to compare with")
    holds = k >= FINDING_FRACTION * n
    return Verdict(HOLDS if holds else DIFFERS, ours, "", f"needs >= {FINDING_FRACTION:.0%}")


def rule_text() -> str:
    """The rule in one paragraph (printed under every verdict table and in the index)."""
    return (
        f"Verdicts: holds when the paper's value (with its rounding band: half a unit of its "
        f"last digit; +-{APPROX_REL_TOL:.0%} for approximate values such as '~10') meets our "
        f"{LEVEL:.0%} interval over repeats (mean +- t * sd * sqrt(1/n + 1/k), k = the runs the "
        f"paper's value averages); accuracies also within {ACCURACY_MAX_GAP} of the paper's; "
        f"findings hold in >= {FINDING_FRACTION:.0%} of the repeats; not comparable for --quick "
        "runs, single repeats, values the paper does not give and stand-in data sets "
        "(bensemble.experiments.verdicts)."
    )
