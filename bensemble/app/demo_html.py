"""Verdicts and ``report.html`` of ``bensemble demo`` (see :mod:`bensemble.app.demo`).

:func:`method_verdicts` answers the three questions of :mod:`bensemble.app.verdict` for one
method on the test set, with 95% bootstrap intervals (:data:`~bensemble.app.bootstrap.
DEFAULT_BOOTSTRAP` replicates, seeded by the demo's seed): the ECE of the pooled prediction
before scaling, the paired NLL difference after - before scaling, and the EECE of the members
before scaling (K-means bins held fixed). :func:`demo_page` lays the datasets out: a summary
card per dataset and question on top (how many methods answered yes), then per dataset a
verdict table (one row per method), the metrics table and the figures.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch

from bensemble.app.bootstrap import (
    DEFAULT_BOOTSTRAP,
    BootstrapPlan,
    calibrated_ece_null,
    percentile_interval,
)
from bensemble.app.bootstrap_stats import eece_partition, per_sample_nll
from bensemble.app.verdict import (
    QUESTIONS,
    RULES,
    calibration_verdict,
    epistemic_verdict,
    scaling_verdict,
    verdict_dict,
)
from bensemble.reporting.html import HtmlFigure, HtmlReport, HtmlSection, HtmlTable, Verdict
from bensemble.reporting.png import PngBytes, png_bytes

__all__ = ["DatasetPage", "add_figures", "demo_page", "method_verdicts"]

_SHORT = ("calibrated?", "scaling helped?", "epistemic?")
_EVIDENCE = ("ECE [95% CI]", "NLL change [95% CI]", "EECE [95% CI]")


def method_verdicts(
    members: torch.Tensor,
    pooled: torch.Tensor,
    scaled: torch.Tensor | None,
    labels: torch.Tensor,
    details: Any,
    *,
    n_bins: int,
    seed: int,
    n_boot: int = DEFAULT_BOOTSTRAP,
) -> list[dict[str, Any]]:
    """The three verdicts of one method: ``members [H, n, K]`` and ``pooled [n, K]`` before
    scaling, ``scaled [n, K]`` after (``None`` when no temperature was fitted), ``details`` the
    EECE details before scaling (binary members for ``K = 2``, as the demo's EECE)."""
    from bensemble.metrics import expected_calibration_error, negative_log_likelihood
    from bensemble.metrics._binning import uniform_bin_ids

    n = labels.shape[0]
    pred = pooled.argmax(1)
    conf = pooled.gather(1, pred[:, None]).squeeze(1)
    ids = uniform_bin_ids(conf, n_bins)
    plan = BootstrapPlan(n)
    plan.binned_gap("ece", ids, (pred == labels).to(torch.float64) - conf.double(), n_bins + 1)
    if scaled is not None:
        plan.mean("nll", per_sample_nll(scaled, labels) - per_sample_nll(pooled, labels))
    binary = members.shape[-1] == 2
    vectors = members[..., 1] if binary else members
    plan.eece("eece", **eece_partition(vectors, labels, details, binary=binary))
    reps = plan.run(n_boot, seed=seed)
    ece = expected_calibration_error(pooled, labels, n_bins=n_bins)
    null = calibrated_ece_null(conf, ids, n_bins + 1, n_boot, seed=seed)
    q95 = float(torch.quantile(null, 0.95)) if null.numel() else None
    before = negative_log_likelihood(pooled, labels)
    after = None if scaled is None else negative_log_likelihood(scaled, labels)
    diff = None if after is None else after - before
    cis = {
        "ece": percentile_interval(reps["ece"], debias_from=ece) if n_boot else None,
        "nll": percentile_interval(reps["nll"]) if n_boot and after is not None else None,
        "eece": percentile_interval(reps["eece"], debias_from=details.value) if n_boot else None,
    }
    verdicts = [
        (calibration_verdict(ece, cis["ece"], null_q95=q95), ece, cis["ece"]),
        (
            scaling_verdict(diff, cis["nll"], before=before, after=after),
            diff,
            cis["nll"],
        ),
        (
            epistemic_verdict(details.value, cis["eece"], members=members.shape[0]),
            details.value,
            cis["eece"],
        ),
    ]
    return [verdict_dict(v, rule, x, ci) for (v, x, ci), rule in zip(verdicts, RULES)]


def add_figures(report: Any, figures: dict[str, Any]) -> dict[str, bytes]:
    """Draw each figure once to PNG bytes, write them as ``name.png`` and return the bytes."""
    import matplotlib.pyplot as plt

    out = {}
    for name, fig in figures.items():
        try:
            out[name] = png_bytes(fig)
        finally:
            plt.close(fig)
        report.add_figure(name, PngBytes(out[name]), close=False)
    return out


@dataclass
class DatasetPage:
    """What the page shows for one dataset."""

    name: str
    title: str
    setup: dict[str, Any]
    runs: list
    figures: dict[str, bytes] = field(default_factory=dict)


def _summary_cards(page: DatasetPage) -> list[Verdict]:
    cards = []
    for i, question in enumerate(QUESTIONS):
        answers = {run.label: run.verdicts[i]["answer"] for run in page.runs}
        counts = Counter(a.split(",")[0] for a in answers.values())
        n = len(answers)
        status = "good" if counts["yes"] == n else "bad" if counts["no"] == n else "warn"
        if counts["n/a"] == n:
            status = "info"
        detail = "; ".join(f"{label}: {a}" for label, a in answers.items())
        cards.append(
            Verdict(f"{page.name}: {question}", f"yes for {counts['yes']} of {n}", status, detail)
        )
    return cards


def _with_ci(v: dict[str, Any]) -> str | None:
    if v["value"] is None:
        return None
    if v["ci_low"] is None:
        return f"{v['value']:.3f}"
    return f"{v['value']:.3f} [{v['ci_low']:.3f}, {v['ci_high']:.3f}]"


def _verdict_rows(page: DatasetPage) -> list[dict[str, Any]]:
    rows = []
    for run in page.runs:
        row: dict[str, Any] = {"method": run.label}
        for short, v in zip(_SHORT, run.verdicts):
            row[short] = v["answer"]
        for name, v in zip(_EVIDENCE, run.verdicts):
            row[name] = _with_ci(v)
        rows.append(row)
    return rows


_CAPTIONS = {
    "reliability": "Reliability diagrams before and after temperature scaling (test set).",
    "epistemic_reliability": "Epistemic reliability diagrams before (top) and after (bottom) "
    "scaling: per K-means bin, the members' squared error against their variance (EU).",
    "eu_maps": "EU(x) = Var_h h(x) beside the true per-x error E_h[(eta(x) - h(x))^2].",
}


def demo_page(
    pages: list[DatasetPage], *, versions: dict[str, str], settings: dict[str, Any]
) -> HtmlReport:
    """The demo's HTML report: summary cards, then one section per dataset."""
    sections = [
        HtmlSection(
            "How the verdicts are decided",
            notes=[
                f"Per method, on the test set, with 95% bootstrap intervals "
                f"({DEFAULT_BOOTSTRAP} resamples, seed {settings.get('seed')})."
            ]
            + [f"{q} {rule}" for q, rule in zip(QUESTIONS, RULES)],
        )
    ]
    for page in pages:
        notes = [", ".join(f"{k.replace('_', ' ')} {v}" for k, v in page.setup.items())]
        notes += [f"{run.label}: {run.fit['note']}" for run in page.runs if run.fit["note"]]
        rows = [row for run in page.runs for row in run.rows]
        figures = [
            HtmlFigure(name, data, _CAPTIONS.get(name.split("_", 1)[1], ""))
            for name, data in page.figures.items()
        ]
        sections.append(
            HtmlSection(
                page.title,
                notes=notes,
                tables=[
                    HtmlTable(
                        f"{page.name}: verdicts per method",
                        _verdict_rows(page),
                        notes=[
                            "epistemic? asks whether the members' uncertainties are "
                            "epistemically calibrated; NLL change is after - before scaling "
                            "(paired bootstrap)."
                        ],
                    ),
                    HtmlTable(f"{page.name}: test-set metrics", rows),
                ],
                figures=figures,
            )
        )
    return HtmlReport(
        title="bensemble demo",
        verdicts=[card for page in pages for card in _summary_cards(page)],
        sections=sections,
        footer=dict(versions),
    )
