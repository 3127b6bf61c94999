"""The report folder both ``bensemble evaluate`` tasks write, staged and swapped in once.

:func:`write_report_files` is the shared body of :func:`~bensemble.app.evaluate.write.
write_evaluation` (classification) and :func:`~bensemble.app.evaluate.regression_report.
write_regression`: every figure drawn once to PNG bytes, then the tables (Markdown with their
column definitions, CSV, JSON), ``summary.json`` (the evaluation's dictionary, the caller's
``extra``, the files written, the figures left out and the versions), the PNG files and
``report.html``, staged beside the target folder and committed, or discarded when anything fails
(:class:`~bensemble.reporting.report.Report` with ``staged=True``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from bensemble.app.evaluate.timing import Timings

__all__ = ["write_report_files"]


def write_report_files(
    ev: Any,
    out_dir: str | os.PathLike,
    planned: list[str],
    figure_makers: dict[str, Callable[[], Any]],
    page: Callable[[dict[str, bytes], dict[str, str]], Any],
    *,
    extra: dict | None = None,
    overwrite: bool = False,
    timings: Timings | None = None,
) -> Any:
    """Draw the figures and write the whole report of ``ev`` to ``out_dir``, atomically.

    Args:
        ev: the evaluation: ``tables()`` (``(name, title, rows)``), ``table_notes(name)``
            (the column definitions written under each Markdown table) and ``to_dict()``.
        out_dir: the report folder; an earlier report there is replaced only with
            ``overwrite``, a folder holding anything else is refused (``ValueError``).
        planned: the files the report may hold; ``summary.json`` lists those written (a
            figure only when it was drawn).
        figure_makers: file stem -> function drawing a matplotlib figure; one that fails is
            left out and named in ``report.problems`` and ``summary.json``.
        page: ``page(figs, versions)``: the :class:`~bensemble.reporting.html.HtmlReport` of
            ``report.html`` from the PNG bytes by stem and the versions of ``summary.json``.
        extra: more entries of ``summary.json`` (the inputs), or ``None``.
        overwrite: replace an earlier report in ``out_dir``.
        timings: records the stages ``"figures"`` and ``"writing the report"``.

    Returns:
        The :class:`~bensemble.reporting.report.Report`; ``report.files`` lists what was
        written and ``report.problems`` the figures left out.
    """
    from bensemble.reporting.html import render_html
    from bensemble.reporting.png import PngBytes, draw_figures
    from bensemble.reporting.report import Report, environment, markdown_table

    timings = timings or Timings()
    with timings.stage("figures"):
        figs, problems = draw_figures(figure_makers)
    with timings.stage("writing the report"):
        report = Report(out_dir, staged=True, overwrite=overwrite)
        report.problems = problems
        try:
            for name, title, rows in ev.tables():
                report.add_table(name, rows, title=title)
                notes = ev.table_notes(name)
                if notes:  # the Markdown table carries its column definitions
                    notes_text = "".join(f"- {n}\n" for n in notes)
                    md = f"## {title}\n\n{markdown_table(rows)}\n{notes_text}"
                    report.add_text(f"{name}.md", md)
            summary = ev.to_dict()
            summary.update(extra or {})
            summary["files"] = [f for f in planned if not f.endswith(".png") or f[:-4] in figs]
            summary["problems"] = problems
            summary["versions"] = environment()
            report.add_json("summary", summary)
            for name, data in figs.items():
                report.add_figure(name, PngBytes(data), close=False)
            report.add_text("report.html", render_html(page(figs, summary["versions"])))
            report.commit()
        except BaseException:
            report.discard()
            raise
    return report
