"""``bensemble evaluate``: metrics, uncertainty, temperature scaling and conformal sets for saved
predictions.

Given member probabilities ``[M, N, K]`` (``M = 1`` for a single model) and labels ``[N]``,
:func:`evaluate_predictions` reports, for the ensemble-mean prediction
``p(x) = (1/M) sum_m p_m(x)``: accuracy, NLL, Brier score, top-label ECE and classwise ECE; and
for ``M > 1`` the mean total / aleatoric / epistemic uncertainty of the members and their
expected epistemic calibration error (EECE).

With ``calibration_split=f`` the samples are shuffled with a seeded generator and the first
``round(f * N)`` form the calibration part, the rest the test part. The calibration part is cut
in two *separate* halves, as the practitioner's guide requires (reusing conformal labels to tune
the temperature breaks the split-conformal guarantee):

1. the first half fits :class:`~bensemble.calibration.TemperatureScaling` on ``log p(x)``
   (the log of the ensemble mean: "pool, then calibrate"; ``softmax(log p) = p``, so ``T = 1``
   is the unscaled prediction, and for one model ``log softmax(z)`` scales exactly like ``z``);
2. the second half calibrates a :class:`~bensemble.conformal.SplitConformalClassifier` on the
   temperature-scaled probabilities, with the temperature already fixed;
3. every number is reported on the untouched test part: metrics before and after scaling,
   conformal coverage and mean set size (target ``1 - alpha``).

The temperature acts on the pooled prediction only; member-level quantities (the uncertainty
decomposition and EECE) are those of the unscaled members.

Every headline number gets a 95% percentile bootstrap interval over the reported part
(``bootstrap`` replicates, seeded by ``seed``; :mod:`bensemble.app.bootstrap`); the three
questions at the top of the report are answered by the rules of :mod:`bensemble.app.verdict`.

The command line (:mod:`bensemble.app.evaluate_cli`, re-exported here: :func:`run_evaluate`,
:func:`add_evaluate_parser`) validates every input before it creates the report folder, never
writes over an input file, and writes each file atomically.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

from bensemble import _progress
from bensemble import _validation as V
from bensemble._options import check_seed
from bensemble.app.bootstrap import DEFAULT_BOOTSTRAP, check_bootstrap
from bensemble.app.evaluate_report import planned_files, write_evaluation
from bensemble.app.evaluate_stats import selective_scores
from bensemble.io import renormalised

__all__ = [
    "Evaluation",
    "add_evaluate_parser",  # noqa: F822 - from evaluate_cli, on first use (__getattr__)
    "evaluate_predictions",
    "planned_files",
    "run_evaluate",  # noqa: F822 - from evaluate_cli, on first use (__getattr__)
    "split_indices",
    "write_evaluation",
]

CONFORMAL_SCORES = ("lac", "aps", "raps")
#: Below this many points a calibration part (temperature or conformal) gets a note.
SMALL_PART = 200
#: Most classes for which the report has a per-class table.
MAX_PER_CLASS = 20


@dataclass
class Evaluation:
    """What :func:`evaluate_predictions` found.

    Attributes:
        setup: Sizes and options (``members``, ``samples``, ``classes``, split sizes, ...).
        metrics: One row per stage (``"unscaled"``, and ``"temperature-scaled"`` with a split):
            ``n``, ``accuracy``, ``nll``, ``brier``, ``ece``, ``classwise_ece``.
        selective: One row per stage: ``error_auroc`` (misclassification AUROC) and ``aurc``
            (:mod:`bensemble.app.evaluate_stats`).
        ensemble: For ``M > 1``: ``members``, ``mean_total``, ``mean_aleatoric``,
            ``mean_epistemic`` (nats, entropy decomposition), ``mean_member_variance`` and
            ``eece``; else ``None`` (definitions:
            :data:`bensemble.app.evaluate_summary.TABLE_NOTES`).
        conformal: With a split: ``score``, ``alpha``, ``target_coverage``, ``coverage``,
            ``mean_set_size``, ``empty_set_rate``, ``n_calibration``, ``n_test``; else ``None``.
        temperature: The fitted temperature, or ``None`` without a split.
        probs: Ensemble-mean probabilities ``[n, K]`` of the reported part (for figures).
        scaled_probs: Their temperature-scaled version ``[n, K]``, or ``None``.
        member_probs: Member probabilities ``[M, n, K]`` of the reported part.
        labels: Labels ``[n]`` of the reported part.
        eece_details: The :class:`~bensemble.metrics.EECEDetails` behind ``ensemble["eece"]``
            (``M > 1``), for the epistemic reliability diagram.
        intervals: Rows ``stage, metric, value, ci_low, ci_high`` (95% percentile bootstrap;
            empty with ``bootstrap=0``).
        per_class: One row per class for ``K <= 20`` (else ``None``).
        notes: Plain-language cautions (small parts, scaling that hurt, ...).
        verdicts: The three answers of :mod:`bensemble.app.verdict` (dicts with ``question``,
            ``answer``, ``status``, ``detail``, ``rule``).
    """

    setup: dict[str, Any]
    metrics: list[dict[str, Any]]
    ensemble: dict[str, Any] | None
    conformal: dict[str, Any] | None
    temperature: float | None
    probs: torch.Tensor = field(repr=False)
    scaled_probs: torch.Tensor | None = field(repr=False)
    member_probs: torch.Tensor = field(repr=False)
    labels: torch.Tensor = field(repr=False)
    eece_details: Any = field(default=None, repr=False)
    selective: list[dict[str, Any]] = field(default_factory=list)
    intervals: list[dict[str, Any]] = field(default_factory=list)
    per_class: list[dict[str, Any]] | None = None
    notes: list[str] = field(default_factory=list)
    verdicts: list[dict[str, str]] = field(default_factory=list)
    sets: torch.Tensor | None = field(default=None, repr=False)

    def figure_makers(self) -> dict[str, Any]:
        """The report's figures (file stem -> function drawing it) for
        :func:`~bensemble.app.evaluate_report.write_evaluation`, from the per-sample tensors."""
        from bensemble.app.evaluate_report import _makers

        return _makers(self, self.setup["n_bins"])

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
        }

    def tables(self) -> list[tuple[str, str, list[dict[str, Any]]]]:
        """``(name, title, rows)`` for each table of the report, in print order."""
        part = "test part" if self.temperature is not None else "all samples"
        out = [("metrics", f"Ensemble-mean prediction ({part})", self.metrics)]
        out.append(("selective", f"Misclassification detection ({part})", self.selective))
        if self.ensemble is not None:
            out.append(("ensemble", f"Member disagreement ({part})", [self.ensemble]))
        if self.conformal is not None:
            out.append(
                ("conformal", "Split conformal prediction sets (test part)", [self.conformal])
            )
        if self.intervals:
            level = "95% percentile bootstrap"
            title = f"Confidence intervals ({level}, {self.setup['bootstrap']} replicates, {part})"
            out.append(("intervals", title, self.intervals))
        if self.per_class is not None:
            out.append(("per_class", f"Per class ({part})", self.per_class))
        return out

    def table_notes(self, name: str) -> list[str]:
        """Definitions and units of a table's columns (printed under it and in the HTML)."""
        from bensemble.app.evaluate_summary import TABLE_NOTES

        return list(TABLE_NOTES.get(name, ()))


def split_indices(
    n: int, fraction: float, *, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Seeded random split into temperature / conformal / test indices.

    A random permutation of ``range(n)`` (``torch.Generator`` seeded with ``seed``); its first
    ``n_cal = round(fraction * n)`` entries are the calibration part, the remaining ``n - n_cal``
    the test part. :func:`bensemble.conformal.split_calibration` (same seed) then cuts the
    calibration part into two disjoint halves: one fits the temperature, the other calibrates
    the conformal threshold.

    Raises:
        ValueError: ``fraction`` outside ``(0, 1)`` or a part that would be empty.
    """
    from bensemble.conformal import split_calibration

    fn = "split_indices"
    fraction = V.check_probability(fraction, "calibration_split", fn)
    seed = check_seed(seed, "seed", fn)
    n_cal = round(fraction * n)
    if n_cal < 2 or n - n_cal < 1:
        raise ValueError(
            f"{fn}: `calibration_split` must leave at least 2 calibration samples and 1 test "
            f"sample (got {fraction!r} of {n} samples: {n_cal} calibration, {n - n_cal} test)"
        )
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    cal, test = perm[:n_cal], perm[n_cal:]
    halves = split_calibration(torch.zeros(n_cal, dtype=torch.int64), seed=seed)
    return cal[halves.temperature], cal[halves.conformal], test


def _scores(probs: torch.Tensor, labels: torch.Tensor, n_bins: int) -> dict[str, Any]:
    from bensemble import metrics as M

    return {
        "n": int(labels.shape[0]),
        "accuracy": M.accuracy(probs, labels),
        "nll": M.negative_log_likelihood(probs, labels),
        "brier": M.brier_score(probs, labels),
        "ece": M.expected_calibration_error(probs, labels, n_bins=n_bins),
        "classwise_ece": M.classwise_calibration_error(probs, labels, n_bins=n_bins),
    }


def evaluate_predictions(
    member_probs: Any,
    labels: Any,
    *,
    calibration_split: float | None = None,
    alpha: float = 0.1,
    n_bins: int = 15,
    eece_bins: int | str = "auto",
    eece_seeds: int = 1,
    conformal_score: str = "lac",
    seed: int = 0,
    bootstrap: int = DEFAULT_BOOTSTRAP,
    progress: bool = False,
) -> Evaluation:
    """Score saved predictions (formulas and protocol: module docstring).

    Args:
        member_probs: Member probabilities ``[M, N, K]`` (or ``[N, K]`` for one model).
        labels: Integer labels ``[N]`` in ``[0, K)``.
        calibration_split: Fraction in ``(0, 1)`` used for temperature scaling and conformal
            calibration (two separate halves); ``None`` reports on all samples, no scaling.
        alpha: Conformal miscoverage level in ``(0, 1)``.
        n_bins: Bins of the ECE and classwise ECE.
        eece_bins: Bins of the EECE (``M > 1`` only): ``"auto"`` (about ``sqrt(N)``, see
            :func:`bensemble.metrics.epistemic.auto_n_bins`) or an integer.
        eece_seeds: K-means seeds the EECE averages (their sd is reported as ``eece_sd``).
        conformal_score: ``"lac"``, ``"aps"`` or ``"raps"``.
        seed: Seeds the split, the EECE, randomised conformal scores and the bootstrap.
        bootstrap: Bootstrap replicates of the 95% intervals (``0``: none; the verdicts then
            read the point estimates).
        progress: Write one line per stage with its time on stderr (only on a terminal).

    Returns:
        An :class:`Evaluation`.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> member_probs = torch.softmax(torch.randn(3, 200, 4, generator=g), dim=-1)
        >>> labels = torch.randint(0, 4, (200,), generator=g)
        >>> ev = evaluate_predictions(member_probs, labels, calibration_split=0.5, seed=0)
        >>> ev.setup["n_temperature"], ev.setup["n_conformal"], ev.setup["n_test"]
        (50, 50, 100)
        >>> [row["stage"].split()[0] for row in ev.metrics]
        ['unscaled', 'temperature-scaled']
    """
    fn = "evaluate_predictions"
    p = V.to_tensor(member_probs, "member_probs", fn)
    p = renormalised(V.as_probs(p, "member_probs", fn, ndim=(2, 3)), p.dtype)
    if p.ndim == 2:
        p = p.unsqueeze(0)
    m, n, k = p.shape
    y = V.as_labels(labels, "labels", fn, n=n, num_classes=k)
    alpha = V.check_probability(alpha, "alpha", fn)
    n_bins = V.check_n_bins(n_bins, fn)
    if eece_bins != "auto":
        eece_bins = V.check_n_bins(eece_bins, fn, name="eece_bins")
    eece_seeds = V.check_positive_int(eece_seeds, "eece_seeds", fn)
    conformal_score = V.check_option(conformal_score, "conformal_score", CONFORMAL_SCORES, fn)
    seed = check_seed(seed, "seed", fn)
    bootstrap = check_bootstrap(bootstrap, "bootstrap", fn)

    def stage(label: str):
        return _progress.stage(label, enabled=progress, prefix="evaluate")

    setup: dict[str, Any] = {
        "members": m,
        "samples": n,
        "classes": k,
        "n_bins": n_bins,
        "seed": seed,
        "calibration_split": calibration_split,
        "bootstrap": bootstrap,
    }
    temperature = None
    conformal = None
    scaled = None
    sets = None
    if calibration_split is None:
        test = torch.arange(n)
        setup.update(n_temperature=0, n_conformal=0, n_test=n)
    else:
        temp_idx, conf_idx, test = split_indices(n, calibration_split, seed=seed)
        setup.update(n_temperature=len(temp_idx), n_conformal=len(conf_idx), n_test=len(test))

    with stage("metrics of the unscaled prediction"):
        mean = p.mean(0)
        p_test, y_test, members_test = mean[test], y[test], p[:, test]
        rows = [{"stage": "unscaled", "part": "all" if calibration_split is None else "test"}]
        rows[0].update(_scores(p_test, y_test, n_bins))
        selective = [{"stage": "unscaled", **selective_scores(p_test, y_test)}]

    if calibration_split is not None:
        from bensemble.calibration import CalibrationFitError, TemperatureScaling
        from bensemble.conformal import (
            SplitConformalClassifier,
            coverage,
            empty_set_rate,
            mean_set_size,
        )

        with stage("temperature scaling"):
            log_mean = mean.clamp_min(torch.finfo(mean.dtype).tiny).log()
            scaler = TemperatureScaling(on_boundary="warn")
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    scaler.fit(log_mean[temp_idx], y[temp_idx])
            except CalibrationFitError as exc:
                raise ValueError(
                    f"{fn}: cannot fit a temperature on the calibration part ({exc})"
                ) from None
            temperature = float(scaler.temperature.item())
            notes = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
            setup["temperature_converged"] = bool(scaler.converged_)
            setup["temperature_warning"] = " ".join(" ".join(notes).split()) or None
            with torch.no_grad():
                scaled_all = torch.softmax(scaler(log_mean).to(torch.float64), dim=-1)
            scaled = scaled_all[test]
            row = {"stage": f"temperature-scaled (T={temperature:.3f})", "part": "test"}
            row.update(_scores(scaled, y_test, n_bins))
            rows.append(row)
            selective.append({"stage": row["stage"], **selective_scores(scaled, y_test)})

        with stage("conformal sets"):
            generator = torch.Generator().manual_seed(seed)
            cp = SplitConformalClassifier(conformal_score, alpha=alpha, generator=generator)
            cp.calibrate(scaled_all[conf_idx], y[conf_idx])
            sets = cp.predict_set(scaled)
            conformal = {
                "score": conformal_score,
                "alpha": alpha,
                "target_coverage": 1.0 - alpha,
                "coverage": coverage(sets, y_test),
                "mean_set_size": mean_set_size(sets),
                "empty_set_rate": empty_set_rate(sets),
                "n_calibration": len(conf_idx),
                "n_test": len(test),
            }

    ensemble = None
    eece_details = None
    if m > 1:
        from bensemble.metrics import expected_epistemic_calibration_error
        from bensemble.uncertainty import decompose_classification_uncertainty

        with stage("uncertainty decomposition"):
            total, aleatoric, epistemic = decompose_classification_uncertainty(members_test)
            variance = members_test.to(torch.float64).var(0, unbiased=False).mean()
        with stage("EECE"):
            eece_details = expected_epistemic_calibration_error(
                members_test,
                y_test,
                n_bins=eece_bins,
                seed=seed,
                n_seeds=eece_seeds,
                return_details=True,
            )
        ensemble = {
            "members": m,
            "mean_total": float(total.mean()),
            "mean_aleatoric": float(aleatoric.mean()),
            "mean_epistemic": float(epistemic.mean()),
            "mean_member_variance": float(variance),
            "eece": float(eece_details.value),
            "eece_sd": eece_details.seed_sd,  # over eece_seeds K-means seeds (None for one)
            "eece_seeds": eece_seeds,
            "eece_bins": eece_details.n_bins,  # "auto" resolved
            "eece_bins_fitted": eece_details.n_bins_fitted,
        }
    ev = Evaluation(
        setup=setup,
        metrics=rows,
        ensemble=ensemble,
        conformal=conformal,
        temperature=temperature,
        probs=p_test,
        scaled_probs=scaled,
        member_probs=members_test,
        labels=y_test,
        eece_details=eece_details,
        sets=sets,
        selective=selective,
    )
    from bensemble.app.evaluate_summary import summarise

    summarise(ev, stage=stage)
    return ev


def __getattr__(name: str) -> Any:
    """The command line lives in :mod:`bensemble.app.evaluate_cli` (imported on first use)."""
    if name in ("add_evaluate_parser", "run_evaluate"):
        from bensemble.app import evaluate_cli

        return getattr(evaluate_cli, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
