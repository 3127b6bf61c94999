"""The report folder of ``bensemble evaluate``: tables, ``summary.json``, figures, ``report.html``.

:func:`planned_files` names the files before anything is computed (so the command can refuse a
folder that would overwrite an input); :func:`write_evaluation` draws every figure once, to PNG
bytes in memory, writes those bytes as the ``.png`` files and embeds the same bytes in the
self-contained ``report.html`` (:mod:`bensemble.app.evaluate_html`), stages every file beside
the target folder and swaps the finished folder in.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import torch

from bensemble.reporting.report import Report, environment, markdown_table

if TYPE_CHECKING:
    from bensemble.app.evaluate import Evaluation

__all__ = [
    "PngBytes",
    "draw_figures",
    "planned_files",
    "png_bytes",
    "risk_coverage_figure",
    "top_confidence",
    "write_evaluation",
]


def planned_files(
    *, ensemble: bool, split: bool, per_class: bool = True, intervals: bool = True
) -> list[str]:
    """File names :func:`write_evaluation` writes, known before anything is computed.

    Args:
        ensemble: more than one member (the ``ensemble`` table, the epistemic diagram).
        split: a calibration split (``conformal`` table, the scaled reliability diagram).
        per_class: at most 20 classes (the ``per_class`` table).
        intervals: ``--bootstrap`` above 0 (the ``intervals`` table).
    """
    names = ["metrics", "selective"] + (["ensemble"] if ensemble else [])
    names += ["conformal"] if split else []
    names += (["intervals"] if intervals else []) + (["per_class"] if per_class else [])
    files = [f"{t}{ext}" for t in names for ext in (".md", ".csv", ".json")]
    files += ["summary.json", "report.html", "reliability.png"]
    if split:
        files.append("reliability_scaled.png")
    if ensemble:
        files.append("epistemic_reliability.png")
    files.append("risk_coverage.png")
    return files


def top_confidence(probs: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``max_k p_k`` (float64) and whether the argmax is right (bool), per sample: what the
    risk-coverage figure draws (``--chunk-size`` gathers exactly these two per test sample)."""
    pred = probs.argmax(1)
    return probs.gather(1, pred[:, None]).squeeze(1).to(torch.float64), pred == labels


def risk_coverage_figure(curves: dict[str, Any]) -> Any:
    """The risk-coverage figure of the named curves, on one axis: each a ``(confidence,
    correct)`` pair or a ready :class:`~bensemble.plots.RiskCoverageDisplay`."""
    import matplotlib.pyplot as plt

    from bensemble import plots

    fig, ax = plt.subplots(figsize=(6, 4.5))
    for name, curve in curves.items():
        if isinstance(curve, plots.RiskCoverageDisplay):
            display = curve
        else:
            conf, correct = curve
            display = plots.RiskCoverageDisplay.from_predictions(
                conf, correct.to(torch.float64), name=name
            )
        display.plot(ax=ax, name=name)
    ax.set_title("Risk-coverage (confidence: max_k p_k)")
    return fig


def _makers(ev: Evaluation, n_bins: int) -> dict[str, Any]:
    """The report's figures of an in-memory evaluation, keyed by file stem (functions that draw)."""
    from bensemble import plots

    def reliability(probs: torch.Tensor, name: str | None) -> Any:
        disp = plots.ReliabilityDisplay.from_predictions(probs, ev.labels, n_bins=n_bins, name=name)
        return disp.plot().figure_

    def epistemic() -> Any:
        disp = plots.EpistemicReliabilityDisplay.from_details(ev.eece_details, name="ensemble")
        return disp.plot().figure_

    def risk_coverage() -> Any:
        curves = {"unscaled": top_confidence(ev.probs, ev.labels)}
        if ev.scaled_probs is not None:
            curves[f"T = {ev.temperature:.3f}"] = top_confidence(ev.scaled_probs, ev.labels)
        return risk_coverage_figure(curves)

    makers: dict[str, Any] = {}
    if ev.scaled_probs is None:
        makers["reliability"] = lambda: reliability(ev.probs, None)
    else:
        scaled = ev.scaled_probs
        makers["reliability"] = lambda: reliability(ev.probs, "unscaled")
        makers["reliability_scaled"] = lambda: reliability(scaled, f"T = {ev.temperature:.3f}")
    if ev.eece_details is not None:
        makers["epistemic_reliability"] = epistemic
    makers["risk_coverage"] = risk_coverage
    return makers


def draw_figures(makers: dict[str, Any]) -> tuple[dict[str, bytes], list[str]]:
    """Figures keyed by file stem, as PNG bytes drawn in memory (nothing is written).

    A figure that fails to draw is left out; the second item lists why, one line each.
    """
    import matplotlib.pyplot as plt

    figs: dict[str, bytes] = {}
    problems: list[str] = []
    for name, make in makers.items():
        before = set(plt.get_fignums())
        try:
            fig = make()
            figs[name] = png_bytes(fig)
        except Exception as exc:  # noqa: BLE001 - a figure must not cost the user the numbers
            problems.append(
                f"{name}.png left out ({type(exc).__name__}: {' '.join(str(exc).split())})"
            )
        finally:
            for number in set(plt.get_fignums()) - before:
                plt.close(number)
    return figs, problems


def png_bytes(fig: Any, dpi: int = 120) -> bytes:
    """The figure as PNG bytes (drawn once; the file and the HTML share them)."""
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


class PngBytes:
    """Hands ready PNG bytes to :meth:`Report.add_figure` (which calls ``savefig``)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def savefig(self, handle: Any, **_: Any) -> None:
        handle.write(self.data)


def write_evaluation(
    ev: Evaluation,
    out_dir: str | os.PathLike,
    *,
    extra: dict | None = None,
    overwrite: bool = False,
    figures: dict[str, Any] | None = None,
) -> Report:
    """Write the tables, ``summary.json``, the figures and ``report.html`` of ``ev`` to ``out_dir``.

    Every figure is drawn once, to PNG bytes, before anything is written; one that fails to draw
    is left out and named in ``report.problems`` (and in ``summary.json``) rather than stopping
    the report. ``report.html`` embeds the same bytes, with the verdicts at the top.
    The files are staged beside ``out_dir`` and swapped in at the end, so ``out_dir`` holds
    exactly this run's files; an earlier report there is replaced only with ``overwrite``, and a
    folder holding anything else is refused (``ValueError``). ``summary.json`` records the
    versions (:func:`~bensemble.reporting.report.environment`) and under ``"files"`` exactly the
    files written. The figures are ``ev.figure_makers()`` (the in-memory evaluation draws them
    from its per-sample tensors, the chunked one from streamed sums) unless ``figures`` (file
    stem -> function drawing a figure) replaces them.

    Returns:
        The :class:`~bensemble.reporting.report.Report`; ``report.files`` lists what was
        written and ``report.problems`` the figures left out.
    """
    from bensemble.app.evaluate_html import evaluation_page
    from bensemble.reporting.html import render_html

    report = Report(out_dir, staged=True, overwrite=overwrite)
    makers = ev.figure_makers() if figures is None else figures
    figs, problems = draw_figures(makers)
    report.problems = problems
    try:
        for name, title, rows in ev.tables():
            report.add_table(name, rows, title=title)
            notes = ev.table_notes(name)
            if notes:  # the Markdown table carries its column definitions
                md = f"## {title}\n\n{markdown_table(rows)}\n" + "".join(f"- {n}\n" for n in notes)
                report.add_text(f"{name}.md", md)
        summary = ev.to_dict()
        summary.update(extra or {})
        planned = planned_files(
            ensemble=ev.ensemble is not None,
            split=ev.temperature is not None,
            per_class=ev.per_class is not None,
            intervals=bool(ev.intervals),
        )
        summary["files"] = [f for f in planned if not f.endswith(".png") or f[:-4] in figs]
        summary["problems"] = problems
        summary["versions"] = environment()
        report.add_json("summary", summary)
        for name, data in figs.items():
            report.add_figure(name, PngBytes(data), close=False)
        page = evaluation_page(ev, figs, extra=extra or {}, versions=summary["versions"])
        report.add_text("report.html", render_html(page))
        report.commit()
    except BaseException:
        report.discard()
        raise
    return report
