"""Verdicts and ``report.html`` of ``bensemble demo`` (see :mod:`bensemble.app.demo`).

:func:`method_verdicts` answers the questions of :mod:`bensemble.app.verdict` for one method on
the test set, with the 95% intervals of ``bensemble evaluate`` (Poisson-bootstrap replicate states
of :mod:`bensemble.metrics.intervals`, :data:`~bensemble.app.bootstrap.DEFAULT_BOOTSTRAP`
replicates seeded by the demo's seed; the ECE's and the EECE's two-step L1 intervals are valid
near zero): the ECE of the pooled prediction before and after
scaling (each verdict names its stage), the paired NLL difference after - before scaling, and
the EECE of the members at the deployed stage (scaled when a temperature was fitted; K-means
bins held fixed). :func:`demo_page` lays the datasets out: per dataset and question a summary
card that counts and names the methods answering yes at the deployed stage (the unscaled count
beside it), then per dataset a verdict table (one row per method), the metrics table with its
column notes, and the figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from bensemble.app.bootstrap import DEFAULT_BOOTSTRAP
from bensemble.app.bootstrap_stats import per_sample_nll
from bensemble.app.verdict import (
    CALIBRATION_RULE_TWO_STEP,
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

#: The verdicts of one method, in table order: key -> (short column name, evidence column).
VERDICT_COLUMNS = {
    "calibrated_unscaled": ("calibrated (unscaled)?", "ECE unscaled [95% CI]"),
    "calibrated_scaled": ("calibrated (scaled)?", "ECE scaled [95% CI]"),
    "scaling": ("scaling helped?", "NLL change [95% CI]"),
    "epistemic": ("epistemic?", "EECE [95% CI]"),
}


def _deployed_eece_inputs(members: torch.Tensor, labels: torch.Tensor, details: Any) -> tuple:
    """``(name options, update arguments)`` of the EECE's replicate statistic: the members in the
    EECE's canonical order, binned by ``details.point_bins`` (the first K-means seed's partition,
    held fixed in every replicate)."""
    from bensemble.metrics._epistemic_checks import canonical_member_order

    binary = members.shape[-1] == 2
    p = members[..., 1] if binary else members
    order = canonical_member_order(p)
    p = p if order is None else p[order]
    n, slots = labels.shape[0], details.counts.shape[-1]
    groups = 1 if binary else members.shape[-1]
    bins = details.point_bins.reshape(groups, n).to(torch.int64)
    options = {"n_members": p.shape[0], "n_slots": slots}
    options.update({"binary": True} if binary else {"n_groups": groups})
    return options, (p, labels, bins)


def _intervals(stages: dict, labels: torch.Tensor, n_bins: int, n_boot: int, seed: int) -> dict:
    """Name -> :class:`~bensemble.metrics.intervals.Interval`, from one Poisson-bootstrap
    :class:`~bensemble.metrics.intervals.ReplicateState` over the test set (as ``bensemble
    evaluate``): ``ece_before`` / ``ece_after`` and ``eece`` by the two-step L1 interval (valid
    near zero), the paired ``nll`` difference by percentiles. Empty when ``n_boot == 0``."""
    from bensemble.metrics.intervals import ReplicateState

    if n_boot == 0:
        return {}
    state = ReplicateState(n_boot, seed=seed)
    inputs: dict[str, tuple] = {}
    for stage, (_, pooled, _) in stages.items():
        state.add_calibration(f"ece_{stage}", n_bins)
        inputs[f"ece_{stage}"] = (pooled, labels)
    if "after" in stages:
        state.add_mean("nll")
        after_nll = per_sample_nll(stages["after"][1], labels)
        inputs["nll"] = (after_nll - per_sample_nll(stages["before"][1], labels),)
    members, _, details = stages["after" if "after" in stages else "before"]
    options, inputs["eece"] = _deployed_eece_inputs(members, labels, details)
    state.add_eece("eece", **options)
    state.update(range(labels.shape[0]), inputs)
    return state.compute()


def _ends_of(intervals: dict, name: str) -> tuple[float, float] | None:
    interval = intervals.get(name)
    return None if interval is None else (interval.low, interval.high)


def method_verdicts(
    stages: dict[str, tuple[torch.Tensor, torch.Tensor, Any]],
    labels: torch.Tensor,
    *,
    n_bins: int,
    seed: int,
    n_boot: int = DEFAULT_BOOTSTRAP,
) -> dict[str, dict[str, Any]]:
    """The verdicts of one method on the test set, keyed as :data:`VERDICT_COLUMNS`.

    ``stages`` maps ``"before"`` (and ``"after"``, when a temperature was fitted) to
    ``(members [H, n, K], pooled [n, K], EECE details)``. Calibration is judged at both stages
    (each verdict names its stage), the NLL change across them, and the members' epistemic
    calibration at the stage a user would deploy: scaled when there is one, else unscaled. The
    intervals are those of ``bensemble evaluate`` (:func:`_intervals`): the ECE's and the EECE's
    are valid near zero, so the ECE rule needs no calibrated-model reference.
    """
    from bensemble.metrics import expected_calibration_error, negative_log_likelihood

    deployed = "after" if "after" in stages else "before"
    intervals = _intervals(stages, labels, n_bins, n_boot, seed)
    out: dict[str, dict[str, Any]] = {}
    for stage, name in (("before", "unscaled"), ("after", "scaled")):
        if stage not in stages:
            continue
        ece = expected_calibration_error(stages[stage][1], labels, n_bins=n_bins)
        ci = _ends_of(intervals, f"ece_{stage}")
        v = calibration_verdict(ece, ci, stage=name)
        out[f"calibrated_{name}"] = verdict_dict(v, CALIBRATION_RULE_TWO_STEP, ece, ci)
    before = negative_log_likelihood(stages["before"][1], labels)
    after = negative_log_likelihood(stages["after"][1], labels) if "after" in stages else None
    diff = None if after is None else after - before
    ci = _ends_of(intervals, "nll")
    out["scaling"] = verdict_dict(
        scaling_verdict(diff, ci, before=before, after=after), RULES[1], diff, ci
    )
    members, _, details = stages[deployed]
    ci = _ends_of(intervals, "eece")
    name = "scaled" if deployed == "after" else "unscaled"
    v = epistemic_verdict(details.value, ci, members=members.shape[0], stage=name)
    out["epistemic"] = verdict_dict(v, RULES[2], details.value, ci)
    return out


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


def _names(items: list[str]) -> str:
    return ", ".join(items) if items else "none"


def _card(page: DatasetPage, question: str, picks: dict[str, dict[str, Any]], note: str) -> Verdict:
    """One summary card: how many methods answer yes, naming them, and the other answers."""
    by_answer: dict[str, list[str]] = {}
    for label, v in picks.items():
        by_answer.setdefault(v["answer"].split(",")[0], []).append(label)
    n, yes = len(picks), by_answer.get("yes", [])
    if by_answer.get("n/a") and len(by_answer["n/a"]) == n:
        status = "info"
    else:
        status = "good" if len(yes) == n else "bad" if len(by_answer.get("no", [])) == n else "warn"
    answer = f"yes for {len(yes)} of {n}" + (f": {_names(yes)}" if 0 < len(yes) <= 3 else "")
    detail = "; ".join(f"{a}: {_names(labels)}" for a, labels in by_answer.items())
    return Verdict(f"{page.name}: {question}", answer, status, f"{detail}.{note}")


def _summary_cards(page: DatasetPage) -> list[Verdict]:
    """Three cards per dataset. Calibration and epistemic calibration are judged at the stage a
    user would deploy (temperature-scaled where a temperature was fitted); the unscaled count
    is given beside."""
    from bensemble.app.verdict import staged

    runs = {run.label: run.verdicts for run in page.runs}
    scaled = all("calibrated_scaled" in v for v in runs.values())
    deployed = {k: v.get("calibrated_scaled", v["calibrated_unscaled"]) for k, v in runs.items()}
    unscaled_yes = [k for k, v in runs.items() if v["calibrated_unscaled"]["answer"] == "yes"]
    note = f" Unscaled: yes for {len(unscaled_yes)} of {len(runs)} ({_names(unscaled_yes)})."
    if not scaled:
        unscaled = [k for k, v in runs.items() if "calibrated_scaled" not in v]
        note += f" No temperature was fitted for {_names(unscaled)}: judged unscaled."
    question = staged(QUESTIONS[0], "scaled" if scaled else None)
    cards = [_card(page, question, deployed, note)]
    cards.append(_card(page, QUESTIONS[1], {k: v["scaling"] for k, v in runs.items()}, ""))
    epistemic = {k: v["epistemic"] for k, v in runs.items()}
    stages = {v["question"] for v in epistemic.values()}
    question = stages.pop() if len(stages) == 1 else QUESTIONS[2]
    cards.append(_card(page, question, epistemic, ""))
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
        for key, (short, _) in VERDICT_COLUMNS.items():
            v = run.verdicts.get(key)
            row[short] = None if v is None else v["answer"]
        for key, (_, evidence) in VERDICT_COLUMNS.items():
            v = run.verdicts.get(key)
            row[evidence] = None if v is None else _with_ci(v)
        rows.append(row)
    return rows


#: Notes under the verdicts table.
VERDICT_NOTES = (
    "calibrated (unscaled)? / (scaled)?: the top-label ECE (15 equal-width bins, probability "
    "units) of the pooled prediction before / after temperature scaling, against 0.03; '-' "
    "where no temperature was fitted.",
    "scaling helped?: the test NLL change after - before scaling, in nats (paired bootstrap: "
    "one resample scores both stages); below 0 means scaling helped.",
    "epistemic?: the members' EECE (K-means bins held fixed in the bootstrap; squared-"
    "probability units) against 0.01, at the deployed stage (scaled when a temperature was "
    "fitted).",
)


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
    from bensemble.app.demo_notes import metric_notes

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
                        notes=list(VERDICT_NOTES),
                    ),
                    HtmlTable(
                        f"{page.name}: test-set metrics",
                        rows,
                        notes=metric_notes(
                            has_tece=any("TECE" in r for r in rows),
                            alpha=settings["alpha"],
                            ece_bins=settings["ece_bins"],
                        ),
                    ),
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
