"""The result of an evaluation as plain data: numbers, tables, notes, verdicts and what the
figures draw (never the per-sample predictions).

:class:`Evaluation` is what :func:`~bensemble.app.evaluate.evaluate_predictions` returns and what
the renderers (:mod:`~bensemble.app.evaluate.figures`, :mod:`~bensemble.app.evaluate.page`,
:mod:`~bensemble.app.evaluate.write`) read: the same object whether the rows were one tensor, a
file read a chunk at a time, or shards merged from several workers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ENSEMBLE_NOTES", "TABLE_NOTES", "Evaluation", "RiskCoverage"]

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
    "recalibration": (
        "temperature, spread: the EpistemicRecalibrator's T and s (z'_m = zbar / T + s (z_m - "
        "zbar)), fitted by the pooled NLL on the temperature half (n_fit points); at_boundary: "
        "the bounds the fit reached ('no': an interior optimum).",
        "eece_before / eece_after: the EECE of the members before and after, each with K-means "
        "bins fitted on its own members (test part); mean_member_variance and mean_epistemic "
        "(mutual information, nats) likewise. The after stage has no bootstrap intervals.",
    ),
    "per_class": (
        "support: test samples of the class. accuracy: fraction of them predicted right "
        "(recall). classwise_ece*: that class's term sum_b |B_kb| / N |acc - conf| of the "
        "classwise ECE. coverage: fraction of that class's conformal sets holding the label.",
    ),
}


@dataclass(frozen=True)
class RiskCoverage:
    """At most 2,000 exact vertices of one stage's risk-coverage curve, and its AURC.

    Attributes:
        coverage, risk, thresholds: float64 arrays; thresholds decreasing.
        aurc: the stage's AURC (the area the figure's legend quotes).
    """

    coverage: Any
    risk: Any
    thresholds: Any
    aurc: float


@dataclass
class Evaluation:
    """What an evaluation found (every number of the report).

    Attributes:
        setup: sizes and options (``members``, ``samples``, ``classes``, split sizes, seeds,
            ``bootstrap``, the temperature fit's notes, ``ece_calibrated_q95``).
        metrics: one row per stage (``"unscaled"``, and ``"temperature-scaled"`` with a split):
            ``n``, ``accuracy``, ``nll``, ``brier``, ``ece``, ``classwise_ece``.
        ensemble: for ``M > 1``: ``members``, ``mean_total``, ``mean_aleatoric``,
            ``mean_epistemic`` (nats, entropy decomposition), ``mean_member_variance``,
            ``eece``, ``eece_sd``, ``eece_seeds``, ``eece_bins``, ``eece_bins_fitted``; else
            ``None`` (definitions: :data:`TABLE_NOTES`).
        conformal: with a split: ``score``, ``alpha``, ``target_coverage``, ``coverage``,
            ``mean_set_size``, ``empty_set_rate``, ``n_calibration``, ``n_test``; else ``None``.
        temperature: the fitted temperature, or ``None`` without a split.
        selective: one row per stage: ``error_auroc`` (misclassification AUROC) and ``aurc``.
        intervals: rows ``stage, metric, value, ci_low, ci_high`` (empty with ``bootstrap=0``).
        per_class: one row per class for ``K <= 20`` (else ``None``).
        notes: plain-language cautions (small parts, scaling that hurt, ...).
        verdicts: the three answers of :mod:`bensemble.app.verdict` (dicts with ``question``,
            ``answer``, ``status``, ``detail``, ``rule``, ``value``, ``ci_low``, ``ci_high``).
        reliability: figure stem (``"reliability"``, ``"reliability_scaled"``) -> the stage's
            top-label :class:`~bensemble.metrics.CalibrationBins` (the reliability diagram).
        curves: curve name (``"unscaled"``, ``"T = 1.234"``) -> :class:`RiskCoverage`.
        eece_details: the :class:`~bensemble.metrics.EECEDetails` of the first K-means seed's
            partition (``M > 1``), for the epistemic reliability diagram.
        interval_notes: the intervals' methods and what each covers (the notes under their
            table), when they differ from :data:`TABLE_NOTES`.
        timings: seconds per stage of the run that produced it (not part of the numbers).
        recalibration: with ``recalibrate_epistemic``, the ``recalibration`` table's row
            (:func:`~bensemble.app.evaluate.recalibrated.recalibration_row`), else ``None``.
        recalibration_details: the recalibrated members' :class:`~bensemble.metrics.EECEDetails`.
    """

    setup: dict[str, Any]
    metrics: list[dict[str, Any]]
    ensemble: dict[str, Any] | None
    conformal: dict[str, Any] | None
    temperature: float | None
    selective: list[dict[str, Any]] = field(default_factory=list)
    intervals: list[dict[str, Any]] = field(default_factory=list)
    per_class: list[dict[str, Any]] | None = None
    notes: list[str] = field(default_factory=list)
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    reliability: dict[str, Any] = field(default_factory=dict, repr=False)
    curves: dict[str, RiskCoverage] = field(default_factory=dict, repr=False)
    eece_details: Any = field(default=None, repr=False)
    interval_notes: list[str] = field(default_factory=list, repr=False)
    timings: dict[str, float] = field(default_factory=dict, repr=False)
    recalibration: dict[str, Any] | None = None
    recalibration_details: Any = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The numbers as plain JSON-ready Python objects (no tensors)."""
        return {
            "setup": dict(self.setup),
            "temperature": self.temperature,
            "metrics": [dict(r) for r in self.metrics],
            "selective": [dict(r) for r in self.selective],
            "ensemble": None if self.ensemble is None else dict(self.ensemble),
            "conformal": None if self.conformal is None else dict(self.conformal),
            "intervals": [dict(r) for r in self.intervals],
            "per_class": None if self.per_class is None else [dict(r) for r in self.per_class],
            "verdicts": [dict(v) for v in self.verdicts],
            "notes": list(self.notes),
            "recalibration": None if self.recalibration is None else dict(self.recalibration),
        }

    def tables(self) -> list[tuple[str, str, list[dict[str, Any]]]]:
        """``(name, title, rows)`` for each table of the report, in print order."""
        part = "test part" if self.temperature is not None else "all samples"
        out = [("metrics", f"Ensemble-mean prediction ({part})", self.metrics)]
        out.append(("selective", f"Misclassification detection ({part})", self.selective))
        if self.ensemble is not None:
            out.append(("ensemble", f"Member disagreement ({part})", [self.ensemble]))
        if self.recalibration is not None:
            title = f"Epistemic recalibration ({part})"
            out.append(("recalibration", title, [self.recalibration]))
        if self.conformal is not None:
            out.append(
                ("conformal", "Split conformal prediction sets (test part)", [self.conformal])
            )
        if self.intervals:
            poisson = "method" in self.intervals[0]
            level = "95%, Poisson bootstrap" if poisson else "95% percentile bootstrap"
            title = f"Confidence intervals ({level}, {self.setup['bootstrap']} replicates, {part})"
            out.append(("intervals", title, self.intervals))
        if self.per_class is not None:
            out.append(("per_class", f"Per class ({part})", self.per_class))
        return out

    def table_notes(self, name: str) -> list[str]:
        """Definitions and units of a table's columns (printed under it and in the HTML)."""
        if name == "intervals" and self.interval_notes:
            return list(self.interval_notes)
        return list(TABLE_NOTES.get(name, ()))
