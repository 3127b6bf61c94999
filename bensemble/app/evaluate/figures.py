"""Render: the figures of an evaluation's report, from its plain data (never from samples).

:func:`figure_makers` maps each figure's file stem to a function that draws it: the reliability
diagrams from the top-label ECE's per-bin sums (with Wilson intervals of each bin's accuracy),
the epistemic reliability diagram from the EECE's details, and the risk-coverage curves from
their (at most 2,000 exact) vertices, all stages on one axis.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bensemble.app.evaluate.evaluation import Evaluation

__all__ = ["FIGURE_CAPTIONS", "figure_makers", "planned_figures"]

#: Caption of each figure of the evaluate report, by file stem.
FIGURE_CAPTIONS = {
    "reliability": "Reliability diagram of the unscaled prediction: accuracy against confidence "
    "per equal-width bin; the diagonal is perfect calibration.",
    "reliability_scaled": "Reliability diagram after temperature scaling (test part).",
    "epistemic_reliability": "Epistemic reliability diagram: per K-means bin, the members' "
    "squared error against the reported epistemic uncertainty (member variance); points on the "
    "diagonal are epistemically calibrated.",
    "epistemic_reliability_recalibrated": "Epistemic reliability diagram of the members after "
    "epistemic recalibration (--recalibrate-epistemic), bins fitted on the recalibrated members.",
    "risk_coverage": "Risk-coverage curve: error rate among the accepted predictions when only "
    "the most confident are accepted (confidence max_k p_k); the area under it is the AURC.",
}


def planned_figures(*, ensemble: bool, split: bool, recalibrated: bool = False) -> list[str]:
    """File stems of the figures, known before anything is computed."""
    return (
        ["reliability"]
        + (["reliability_scaled"] if split else [])
        + (["epistemic_reliability"] if ensemble else [])
        + (["epistemic_reliability_recalibrated"] if recalibrated else [])
        + ["risk_coverage"]
    )


def figure_makers(ev: Evaluation) -> dict[str, Callable[[], Any]]:
    """File stem -> function drawing that figure of ``ev`` (a matplotlib Figure)."""
    makers: dict[str, Callable[[], Any]] = {}
    if ev.temperature is None:
        makers["reliability"] = lambda: _reliability(ev.reliability["reliability"], None)
    else:
        scaled = f"T = {ev.temperature:.3f}"
        makers["reliability"] = lambda: _reliability(ev.reliability["reliability"], "unscaled")
        makers["reliability_scaled"] = lambda: _reliability(
            ev.reliability["reliability_scaled"], scaled
        )
    if ev.eece_details is not None:
        makers["epistemic_reliability"] = lambda: _epistemic(ev.eece_details)
    if ev.recalibration_details is not None:
        details = ev.recalibration_details
        makers["epistemic_reliability_recalibrated"] = lambda: _epistemic(details, "recalibrated")
    makers["risk_coverage"] = lambda: _risk_coverage(ev)
    return makers


def _reliability(bins: Any, name: str | None) -> Any:
    from bensemble import plots
    from bensemble.plots._layout import legend_inside

    lower, upper = plots.wilson_interval(bins.sum_correct, bins.counts, 0.95)
    display = plots.ReliabilityDisplay(bins, lower, upper, name=name).plot()
    if legend_inside(display.ax_):
        # the "free" placement laid the finished figure out, and a legend inside the Axes
        # moves no margin: savefig keeps that layout instead of solving it again
        display.figure_.set_layout_engine("none")
    return display.figure_


def _epistemic(details: Any, name: str = "ensemble") -> Any:
    from bensemble import plots

    # the legend right of the diagram from the start: the "free" placement lays the figure out
    # once per place it tries (~0.3-0.5 s CPU of a 900-sample report)
    display = plots.EpistemicReliabilityDisplay.from_details(details, name=name)
    fig = display.plot(legend_loc="outside").figure_
    # plot() left the figure laid out at its final size, checked for the Axes' size and that
    # nothing is cut off: savefig keeps that layout instead of solving it again (~0.15 s CPU)
    fig.set_layout_engine("none")
    return fig


def _risk_coverage(ev: Evaluation) -> Any:
    import matplotlib.pyplot as plt
    import torch

    from bensemble import plots

    fig, ax = plt.subplots(figsize=(6, 4.5))
    for name, curve in ev.curves.items():
        coverage, risk, thresholds = (
            torch.as_tensor(v) for v in (curve.coverage, curve.risk, curve.thresholds)
        )
        display = plots.RiskCoverageDisplay(coverage, risk, thresholds, aurc=curve.aurc)
        display.plot(ax=ax, name=name)
    ax.set_title("Risk-coverage (confidence: max_k p_k)")
    return fig
