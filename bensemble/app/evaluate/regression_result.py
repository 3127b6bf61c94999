"""Compute for ``bensemble evaluate --task regression``: the chunked sums, the gathered means
and the conformal regressor -> a :class:`RegressionEvaluation` (plain data: every number of the
report, the calibration curve's points and the EECE's per-bin details).

Each number comes from the compute half of the :mod:`bensemble.regression` metric it reports
(``_nll_compute``, ``_crps_compute``, ``_interval_compute``, ``_calibration_compute``), so it
equals the one-shot function's on the same points up to float64 summation order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["REGRESSION_NOTES", "RegressionEvaluation", "evaluation_of"]

_F64 = torch.float64

#: Definitions and units of each table's columns (printed under it and in the HTML).
REGRESSION_NOTES: dict[str, tuple[str, ...]] = {
    "scores": (
        "nll: mean -log f(y) in nats of the members' Gaussian mixture (point members: of the "
        "moment-matched Gaussian N(mean, Var_m mu_m)), the full density with 0.5 log(2 pi). "
        "crps: mean continuous ranked probability score (units of y; closed form for the "
        "mixture, energy form for points). sharpness: sqrt(mean total variance), units of y. "
        "miscalibration_area: area between the calibration curve (observed vs expected share "
        "of targets in central intervals) and the diagonal, 0 to 0.5; calibration_mace: mean "
        "|observed - expected| over the grid. Lower is better for all.",
    ),
    "intervals": (
        "predictive: the central 1 - alpha interval of the members' mixture (points: their "
        "order statistics). split conformal: mean +- q (absolute) or mean +- q sigma "
        "(normalized), q calibrated on the calibration part. coverage: share of targets inside "
        "(PICP; nominal 1 - alpha); mean_width: MPIW (units of y); interval_score: width + "
        "(2 / alpha) x distance outside (Gneiting and Raftery), lower is better.",
    ),
    "uncertainty": (
        "mean_total = mean_aleatoric + mean_epistemic, variances in units of y squared: "
        "aleatoric = mean_m sigma_m^2 (0 for point members), epistemic = Var_m mu_m "
        "(population variance, divisor M). eece: regression expected epistemic calibration "
        "error, sum_b (n_b / N) |mean_h (ybar_b - mubar_hb)^2 - s_b^2 / n_b - mean EU_b| over "
        "K-means bins of the members' means (units of y squared); eece_signed > 0: members "
        "over-confident.",
    ),
    "calibration_curve": (
        "expected: nominal share p of a central interval; observed: share of targets inside "
        "the predictive's central p interval.",
    ),
}


@dataclass
class RegressionEvaluation:
    """What a regression evaluation found (every number of its report).

    Attributes:
        setup: sizes and options (``members``, ``samples``, ``kind``, split sizes, ``seed``).
        scores: ``part``, ``n``, ``nll``, ``crps``, ``sharpness``, ``miscalibration_area``,
            ``calibration_mace`` (mean absolute calibration error over the grid).
        intervals: one row per interval kind (``predictive``, and ``split conformal`` with a
            split): ``nominal_coverage``, ``coverage`` (PICP), ``mean_width`` (MPIW),
            ``interval_score``.
        uncertainty: for ``M > 1``: the mean total / aleatoric / epistemic variances and the
            regression EECE (``eece``, ``eece_signed``, ``eece_bins``, ``eece_bins_fitted``).
        calibration_curve: rows ``expected``, ``observed`` of the calibration curve.
        notes: plain-language cautions.
        eece_details: the EECE's :class:`~bensemble.regression.RegressionEECEDetails`.
    """

    setup: dict[str, Any]
    scores: dict[str, Any]
    intervals: list[dict[str, Any]]
    uncertainty: dict[str, Any] | None
    calibration_curve: list[dict[str, float]]
    notes: list[str] = field(default_factory=list)
    eece_details: Any = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The numbers as plain JSON-ready Python objects."""
        return {
            "task": "regression",
            "setup": dict(self.setup),
            "scores": dict(self.scores),
            "intervals": [dict(r) for r in self.intervals],
            "uncertainty": None if self.uncertainty is None else dict(self.uncertainty),
            "calibration_curve": [dict(r) for r in self.calibration_curve],
            "notes": list(self.notes),
        }

    def tables(self) -> list[tuple[str, str, list[dict[str, Any]]]]:
        """``(name, title, rows)`` of each table, in print order."""
        part = "test part" if self.setup.get("n_calibration") else "all points"
        out = [("scores", f"Predictive distribution ({part})", [self.scores])]
        out.append(("intervals", f"Intervals ({part})", self.intervals))
        if self.uncertainty is not None:
            out.append(("uncertainty", f"Member disagreement ({part})", [self.uncertainty]))
        out.append(("calibration_curve", f"Calibration curve ({part})", self.calibration_curve))
        return out

    def table_notes(self, name: str) -> list[str]:
        """Definitions and units of a table's columns."""
        return list(REGRESSION_NOTES.get(name, ()))


def _interval_row(name: str, state: dict[str, torch.Tensor], alpha: float) -> dict[str, Any]:
    from bensemble.regression.intervals import _interval_compute

    values = _interval_compute(state)
    return {
        "interval": name,
        "nominal_coverage": 1.0 - alpha,
        "coverage": values["coverage"],
        "mean_width": values["width"],
        "interval_score": values["score"],
    }


def evaluation_of(
    setup: dict[str, Any],
    sums: Any,
    means: torch.Tensor | None,
    y: torch.Tensor,
    options: Any,
    conformal: Any = None,
) -> RegressionEvaluation:
    """The evaluation of the reported points from their sums (:class:`~bensemble.app.evaluate.
    regression.RegressionSums`), their members' means ``[M, n]`` (``None`` for ``M = 1``) and
    targets ``y [n]``, and the calibrated ``conformal`` regressor (or ``None``)."""
    from bensemble.regression import calibration_curve as C
    from bensemble.regression import scoring as S

    s, n, notes = sums.sums, int(y.shape[0]), []
    points = setup["kind"] == "points"
    scores: dict[str, Any] = {"part": "test" if conformal is not None else "all", "n": n}
    scores["nll"] = S._nll_compute(s["nll"]) if "nll" in s else None
    if sums.nll_error:
        notes.append(f"The NLL is left out: {sums.nll_error}.")
    elif points:
        notes.append(
            "Point members have no density: the NLL is that of the moment-matched Gaussian "
            "N(mean, Var_m mu_m); the CRPS, intervals and calibration curve use the members' "
            "empirical distribution."
        )
    scores["crps"] = max(0.0, S._crps_compute(s["crps"]))
    scores["sharpness"] = S._sharpness_compute(s["sharpness"])
    curve = C._calibration_compute(s["curve"], sums.levels, "interval")
    scores["miscalibration_area"] = curve.miscalibration_area
    scores["calibration_mace"] = curve.mean_absolute_error
    alpha = options.alpha
    what = "members' mixture" if not points else "members' order statistics"
    intervals = [_interval_row(f"predictive ({what})", s["predictive"], alpha)]
    if conformal is not None:
        row = _interval_row(f"split conformal ({conformal.score})", s["conformal"], alpha)
        row["threshold"] = float(conformal.threshold_)
        row["n_calibration"] = int(conformal.n_calibration_)
        intervals.append(row)
    uncertainty, details = None, None
    if means is not None:
        from bensemble.regression import regression_epistemic_calibration_error

        d = s["decomposition"]
        count = float(d["count"])
        uncertainty = {"members": int(means.shape[0])}
        for key in ("total", "aleatoric", "epistemic"):
            uncertainty[f"mean_{key}"] = float(d[key]) / count
        details = regression_epistemic_calibration_error(
            means, y, n_bins=options.eece_bins, seed=options.seed, return_details=True
        )
        uncertainty.update(
            eece=details.value,
            eece_signed=details.signed,
            eece_bins=details.n_bins,
            eece_bins_fitted=details.n_bins_fitted,
        )
    curve_rows = [
        {"expected": float(e), "observed": float(o)}
        for e, o in zip(curve.expected.tolist(), curve.observed.tolist(), strict=True)
    ]
    if conformal is not None and setup["n_calibration"] < 200:
        notes.append(
            f"The conformal threshold was calibrated on {setup['n_calibration']} points (fewer "
            "than 200): the coverage of future intervals varies noticeably from one calibration "
            "draw to the next."
        )
    return RegressionEvaluation(
        setup=setup,
        scores=scores,
        intervals=intervals,
        uncertainty=uncertainty,
        calibration_curve=curve_rows,
        notes=notes,
        eece_details=details,
    )
