"""Render and write the report of ``bensemble evaluate --task regression``, once, atomically.

The same kit as the classification report (:mod:`~bensemble.app.evaluate.write`): every figure
is drawn once to PNG bytes in memory, then the tables (Markdown with their column definitions,
CSV, JSON), ``summary.json``, the PNG files and a self-contained ``report.html`` are staged beside
the target folder and swapped in (:class:`~bensemble.reporting.report.Report` with
``staged=True``): the folder holds exactly this run's files or is left as it was, and an earlier
report is replaced only with ``overwrite``.

Figures: ``regression_calibration`` (observed against expected share of targets in central
intervals, the diagonal and the miscalibration area) and, for ``M > 1``,
``regression_epistemic_reliability`` (per K-means bin of the members' means: their squared
error against the truth's bin mean, bias-corrected, against the epistemic uncertainty they
report; on the diagonal the members are epistemically calibrated).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from bensemble.app.evaluate.regression_result import RegressionEvaluation

__all__ = ["REGRESSION_FIGURE_CAPTIONS", "planned_regression_files", "write_regression"]

#: Caption of each figure of the regression report, by file stem.
REGRESSION_FIGURE_CAPTIONS = {
    "regression_calibration": "Regression calibration curve: the share of targets inside the "
    "predictive's central p interval against p; the diagonal is calibration, the shaded area "
    "the miscalibration area (below the diagonal: intervals too narrow).",
    "regression_epistemic_reliability": "Regression epistemic reliability: per K-means bin of "
    "the members' means, mean_h (ybar_b - mubar_hb)^2 - s_b^2 / n_b (the members' squared error "
    "against the bin's mean target, label noise removed) against the epistemic uncertainty "
    "they report (Var_h mu_h); marker area ~ points in the bin; on the diagonal the members' "
    "spread matches their error.",
}


def planned_regression_files(*, ensemble: bool) -> list[str]:
    """File names :func:`write_regression` writes (``ensemble``: more than one member)."""
    names = ["scores", "intervals"] + (["uncertainty"] if ensemble else []) + ["calibration_curve"]
    files = [f"{t}{ext}" for t in names for ext in (".md", ".csv", ".json")]
    stems = ["regression_calibration"] + (["regression_epistemic_reliability"] if ensemble else [])
    return files + ["summary.json", "report.html"] + [f"{s}.png" for s in stems]


def figure_makers(ev: RegressionEvaluation) -> dict[str, Callable[[], Any]]:
    """File stem -> function drawing that figure of ``ev`` (a matplotlib Figure)."""
    makers = {"regression_calibration": lambda: _calibration(ev)}
    if ev.eece_details is not None:
        makers["regression_epistemic_reliability"] = lambda: _epistemic(ev.eece_details)
    return makers


def _calibration(ev: RegressionEvaluation) -> Any:
    import matplotlib.pyplot as plt

    expected = [r["expected"] for r in ev.calibration_curve]
    observed = [r["observed"] for r in ev.calibration_curve]
    fig, ax = plt.subplots(figsize=(4.8, 4.5))
    ax.plot([0, 1], [0, 1], color="0.6", linestyle="--", linewidth=1, label="calibrated")
    ax.fill_between(expected, expected, observed, color="C0", alpha=0.2)
    area = ev.scores["miscalibration_area"]
    ax.plot(expected, observed, color="C0", label=f"members (area {area:.3f})")
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="expected share in central interval")
    ax.set_ylabel("observed share of targets")
    ax.set_title("Regression calibration")
    ax.legend(loc="upper left", frameon=False)
    fig.tight_layout()
    return fig


def _epistemic(details: Any) -> Any:
    import matplotlib.pyplot as plt
    import torch

    keep = details.counts > 0
    error = (details.squared_error - details.correction)[keep].clamp_min(0.0)
    trust = details.trust[keep]
    weights = details.counts[keep] / details.counts[keep].sum()
    fig, ax = plt.subplots(figsize=(4.8, 4.5))
    top = float(torch.cat([error, trust]).max()) * 1.05 or 1.0
    ax.plot([0, top], [0, top], color="0.6", linestyle="--", linewidth=1, label="calibrated")
    ax.scatter(trust, error, s=(4000 * weights).clamp(4, 200), alpha=0.6, color="C1")
    ax.set(xlim=(0, top), ylim=(0, top), xlabel="reported epistemic uncertainty (Var_h mu_h)")
    ax.set_ylabel("members' squared error, noise removed")
    ax.set_title(f"Regression EECE = {details.value:.4g}")
    ax.legend(loc="upper left", frameon=False)
    fig.tight_layout()
    return fig


def _page(ev: RegressionEvaluation, figs: dict[str, bytes], versions: dict[str, str]) -> Any:
    from bensemble.reporting.html import HtmlFigure, HtmlReport, HtmlSection, HtmlTable

    s = ev.setup
    protocol = [
        f"{s['members']} member(s) ({s['kind']}), {s['samples']} points; the predictive is the "
        "members' equal-weight mixture."
    ]
    if s["n_calibration"]:
        protocol.append(
            f"Calibration split (seed {s['seed']}): {s['n_calibration']} points calibrate the "
            f"conformal intervals; every number is measured on the other {s['n_test']} points."
        )
    else:
        protocol.append("No calibration split: every number is measured on all points.")
    tables = {
        name: HtmlTable(title, rows, ev.table_notes(name)) for name, title, rows in ev.tables()
    }

    def fig(name: str) -> list[Any]:
        caption = REGRESSION_FIGURE_CAPTIONS[name]
        return [HtmlFigure(f"{name}.png", figs[name], caption)] if name in figs else []

    sections = [HtmlSection("Data and protocol", notes=protocol)]
    if ev.notes:
        sections.append(HtmlSection("Notes", notes=list(ev.notes)))
    sections.append(
        HtmlSection(
            "Predictive distribution and calibration",
            tables=[tables["scores"], tables["intervals"]],
            figures=fig("regression_calibration"),
        )
    )
    if "uncertainty" in tables:
        sections.append(
            HtmlSection(
                "Member disagreement (uncertainty)",
                tables=[tables["uncertainty"]],
                figures=fig("regression_epistemic_reliability"),
            )
        )
    sections.append(HtmlSection("Calibration curve", tables=[tables["calibration_curve"]]))
    return HtmlReport(title="bensemble evaluate --task regression", sections=sections,
                      footer=dict(versions))  # fmt: skip


def write_regression(
    ev: RegressionEvaluation,
    out_dir: str | os.PathLike,
    *,
    extra: dict | None = None,
    overwrite: bool = False,
) -> Any:
    """Write the tables, ``summary.json``, the figures and ``report.html`` of ``ev`` to
    ``out_dir`` (module docstring); a figure that fails to draw is left out and named in
    ``report.problems``. Returns the :class:`~bensemble.reporting.report.Report`."""
    from bensemble.app.evaluate.report_files import write_report_files

    planned = planned_regression_files(ensemble=ev.uncertainty is not None)

    def page(figs: dict[str, bytes], versions: dict[str, str]) -> Any:
        return _page(ev, figs, versions)

    return write_report_files(
        ev, out_dir, planned, figure_makers(ev), page, extra=extra, overwrite=overwrite
    )
