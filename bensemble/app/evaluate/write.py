"""Write: the report folder of ``bensemble evaluate``, once, atomically.

:func:`planned_files` names the files before anything is computed (so the command can refuse a
folder that would overwrite an input); :func:`write_evaluation` draws every figure once to PNG
bytes in memory (:mod:`bensemble.reporting.png`), then stages the tables (Markdown, CSV, JSON),
``summary.json``, the PNG files and the self-contained ``report.html`` (embedding the same bytes)
beside the target folder and swaps the finished folder in
(:class:`~bensemble.reporting.report.Report` with ``staged=True``): the folder holds exactly this
run's files or is left as it was.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from bensemble.app.evaluate.evaluation import Evaluation
from bensemble.app.evaluate.figures import figure_makers, planned_figures
from bensemble.app.evaluate.report_files import write_report_files
from bensemble.app.evaluate.timing import Timings

__all__ = ["planned_files", "write_evaluation"]


def planned_files(
    *,
    ensemble: bool,
    split: bool,
    per_class: bool = True,
    intervals: bool = True,
    recalibrated: bool = False,
) -> list[str]:
    """File names :func:`write_evaluation` writes, known before anything is computed.

    Args:
        ensemble: more than one member (the ``ensemble`` table, the epistemic diagram).
        split: a calibration split (``conformal`` table, the scaled reliability diagram).
        per_class: at most 20 classes (the ``per_class`` table).
        intervals: ``--bootstrap`` above 0 (the ``intervals`` table).
        recalibrated: ``--recalibrate-epistemic`` (the ``recalibration`` table and diagram).
    """
    names = ["metrics", "selective"] + (["ensemble"] if ensemble else [])
    names += (["recalibration"] if recalibrated else []) + (["conformal"] if split else [])
    names += (["intervals"] if intervals else []) + (["per_class"] if per_class else [])
    files = [f"{t}{ext}" for t in names for ext in (".md", ".csv", ".json")]
    files += ["summary.json", "report.html"]
    stems = planned_figures(ensemble=ensemble, split=split, recalibrated=recalibrated)
    return files + [f"{stem}.png" for stem in stems]


def write_evaluation(
    ev: Evaluation,
    out_dir: str | os.PathLike,
    *,
    extra: dict | None = None,
    overwrite: bool = False,
    figures: dict[str, Callable[[], Any]] | None = None,
    timings: Timings | None = None,
) -> Any:
    """Write the tables, ``summary.json``, the figures and ``report.html`` of ``ev`` to ``out_dir``.

    Every figure is drawn once, to PNG bytes, before anything is written; one that fails to draw
    is left out and named in ``report.problems`` (and in ``summary.json``) rather than stopping
    the report. ``report.html`` embeds the same bytes, with the verdicts at the top. The files
    are staged beside ``out_dir`` and swapped in at the end, so ``out_dir`` holds exactly this
    run's files; an earlier report there is replaced only with ``overwrite``, and a folder
    holding anything else is refused (``ValueError``). ``summary.json`` records the versions
    (:func:`~bensemble.reporting.report.environment`) and under ``"files"`` exactly the files
    written. The figures are :func:`~bensemble.app.evaluate.figures.figure_makers` of ``ev``
    unless ``figures`` (file stem -> function drawing a figure) replaces them.

    Returns:
        The :class:`~bensemble.reporting.report.Report`; ``report.files`` lists what was
        written and ``report.problems`` the figures left out.
    """
    from bensemble.app.evaluate.page import evaluation_page

    planned = planned_files(
        ensemble=ev.ensemble is not None,
        split=ev.temperature is not None,
        per_class=ev.per_class is not None,
        intervals=bool(ev.intervals),
        recalibrated=ev.recalibration is not None,
    )

    def page(figs: dict[str, bytes], versions: dict[str, str]) -> Any:
        return evaluation_page(ev, figs, extra=extra or {}, versions=versions)

    makers = figure_makers(ev) if figures is None else figures
    return write_report_files(
        ev, out_dir, planned, makers, page, extra=extra, overwrite=overwrite, timings=timings
    )
