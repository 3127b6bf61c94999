"""Render: the page of ``report.html`` for ``bensemble evaluate``, as data for
:func:`~bensemble.reporting.html.render_html`.

:func:`evaluation_page` lays an :class:`~bensemble.app.evaluate.evaluation.Evaluation` out as an
:class:`~bensemble.reporting.html.HtmlReport`: the three verdicts on top, then the protocol and
how the verdicts are decided, the notes, and one section per table with its column definitions
and its figures (the PNG bytes the report folder also holds).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bensemble.app.evaluate.figures import FIGURE_CAPTIONS
from bensemble.reporting.html import HtmlFigure, HtmlReport, HtmlSection, HtmlTable, Verdict

if TYPE_CHECKING:
    from bensemble.app.evaluate.evaluation import Evaluation

__all__ = ["evaluation_page", "verdicts_of"]


def verdicts_of(rows: list[dict[str, str]]) -> list[Verdict]:
    """The :class:`~bensemble.reporting.html.Verdict` of each verdict dict (``rule`` goes to the
    page's protocol section)."""
    return [Verdict(v["question"], v["answer"], v["status"], v["detail"]) for v in rows]


def _protocol(ev: Evaluation, extra: dict[str, Any]) -> list[str]:
    s = ev.setup
    inputs = {
        key: ", ".join(value) if isinstance(value, list) else value
        for key, value in extra.get("inputs", {}).items()
    }
    lines = [
        f"{s['members']} member(s), {s['samples']} samples, {s['classes']} classes"
        + (f"; predictions {inputs['predictions']}" if inputs.get("predictions") else "")
        + (f", labels {inputs['labels']}" if inputs.get("labels") else "")
        + "."
    ]
    if ev.temperature is not None:
        lines.append(
            f"Calibration split (seed {s['seed']}): {s['n_temperature']} points fit the "
            f"temperature, {s['n_conformal']} other points calibrate the conformal sets, and "
            f"every number is measured on the remaining {s['n_test']} test points."
        )
    else:
        lines.append("No calibration split: every number is measured on all samples.")
    if s["bootstrap"]:
        lines.append(
            f"Intervals: 95% percentile bootstrap, {s['bootstrap']} resamples of the reported "
            f"points (seed {s['seed']})."
        )
    else:
        lines.append("No bootstrap (--bootstrap 0): numbers without intervals.")
    lines += [f"Rule for '{v['question']}': {v['rule']}" for v in ev.verdicts]
    return lines


def evaluation_page(
    ev: Evaluation,
    figures: dict[str, bytes],
    *,
    extra: dict[str, Any] | None = None,
    versions: dict[str, str] | None = None,
) -> HtmlReport:
    """The HTML report of ``ev``; ``figures`` maps a file stem to its PNG bytes."""
    extra = extra or {}

    def figs(*names: str) -> list[HtmlFigure]:
        return [
            HtmlFigure(f"{name}.png", figures[name], FIGURE_CAPTIONS.get(name, ""))
            for name in names
            if name in figures
        ]

    tables = {name: (title, rows) for name, title, rows in ev.tables()}

    def table(name: str) -> list[HtmlTable]:
        if name not in tables:
            return []
        title, rows = tables[name]
        return [HtmlTable(title, rows, notes=ev.table_notes(name))]

    sections = [HtmlSection("Data and protocol", notes=_protocol(ev, extra))]
    if ev.notes:
        sections.append(HtmlSection("Notes", notes=list(ev.notes)))
    sections.append(
        HtmlSection(
            "Calibration and accuracy",
            tables=table("metrics") + table("intervals"),
            figures=figs("reliability", "reliability_scaled"),
        )
    )
    sections.append(
        HtmlSection(
            "Selective prediction", tables=table("selective"), figures=figs("risk_coverage")
        )
    )
    if ev.ensemble is not None:
        sections.append(
            HtmlSection(
                "Member disagreement (uncertainty)",
                tables=table("ensemble") + table("recalibration"),
                figures=figs("epistemic_reliability", "epistemic_reliability_recalibrated"),
            )
        )
    if ev.conformal is not None:
        sections.append(HtmlSection("Conformal prediction sets", tables=table("conformal")))
    if ev.per_class is not None:
        sections.append(HtmlSection("Per class", tables=table("per_class")))
    footer = dict(versions or {})
    return HtmlReport(
        title="bensemble evaluate",
        verdicts=verdicts_of(ev.verdicts),
        sections=sections,
        footer=footer,
    )
