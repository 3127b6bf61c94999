"""A self-contained HTML page for the reports of ``bensemble evaluate`` and ``bensemble demo``.

The page is described by plain data (:class:`HtmlReport`: a verdict block, then sections of
notes, tables and figures) and :func:`render_html` turns it into one HTML string: figures are
embedded as base64 PNG ``data:`` URIs, the style sheet is inline, there is no JavaScript and no
network access, so the file can be mailed or opened from a laptop offline.

Example:
    >>> page = HtmlReport(
    ...     title="demo",
    ...     verdicts=[Verdict("Is the model calibrated?", "yes", "good", "ECE 0.012")],
    ...     sections=[HtmlSection("Metrics", tables=[HtmlTable("scores", [{"ece": 0.012}])])],
    ... )
    >>> html = render_html(page)
    >>> html.startswith("<!DOCTYPE html>") and "Is the model calibrated?" in html
    True
"""

from __future__ import annotations

import base64
import html as _html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bensemble.app.report import format_value, table_columns

__all__ = [
    "STATUSES",
    "HtmlFigure",
    "HtmlReport",
    "HtmlSection",
    "HtmlTable",
    "Verdict",
    "render_html",
]

#: Verdict statuses, each drawn in its own colour.
STATUSES = ("good", "warn", "bad", "info")


@dataclass
class Verdict:
    """One question of the summary block and its answer.

    Attributes:
        question: e.g. ``"Is the model calibrated?"``.
        answer: a short answer (``"yes"``, ``"no"``, ``"unclear"``, ``"n/a"``).
        status: one of :data:`STATUSES`.
        detail: one or two sentences with the numbers behind the answer.
    """

    question: str
    answer: str
    status: str
    detail: str = ""


@dataclass
class HtmlTable:
    """A table: rows of ``column -> value`` (floats are rounded to ``digits`` decimals)."""

    title: str
    rows: Sequence[Mapping[str, Any]]
    notes: Sequence[str] = ()
    digits: int = 4


@dataclass
class HtmlFigure:
    """A PNG figure (its bytes) with a caption."""

    title: str
    png: bytes
    caption: str = ""


@dataclass
class HtmlSection:
    """A titled section: notes (paragraphs), then tables, then figures."""

    title: str
    notes: Sequence[str] = ()
    tables: Sequence[HtmlTable] = ()
    figures: Sequence[HtmlFigure] = ()


@dataclass
class HtmlReport:
    """The whole page: title, verdict block, sections and a footer (e.g. the versions)."""

    title: str
    verdicts: Sequence[Verdict] = ()
    sections: Sequence[HtmlSection] = ()
    footer: Mapping[str, Any] = field(default_factory=dict)


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2330;
line-height:1.45;background:#fff}
main{max-width:1100px;margin:0 auto;padding:1rem}
h1{font-size:1.6rem}h2{font-size:1.25rem;border-bottom:1px solid #dde;padding-bottom:.2rem}
.verdicts{display:grid;grid-template-columns:repeat(auto-fit,minmax(16rem,1fr));gap:.6rem}
.verdict{border-left:.4rem solid #888;background:#f5f6f8;padding:.5rem .8rem;border-radius:.3rem}
.verdict.good{border-color:#2e7d32}.verdict.warn{border-color:#ed6c02}
.verdict.bad{border-color:#c62828}.verdict.info{border-color:#1565c0}
.verdict .q{font-weight:600}.verdict .a{font-size:1.1rem}
.table-wrap{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;font-size:.9rem;margin:.4rem 0}
th,td{padding:.25rem .55rem;border-bottom:1px solid #e3e5ea;text-align:right;white-space:nowrap}
th:first-child,td:first-child{text-align:left}
figure{margin:1rem 0}figure img{max-width:100%;height:auto;display:block}
figcaption{font-size:.85rem;color:#555}
footer{font-size:.8rem;color:#666;margin-top:2rem}
"""


def _e(text: Any) -> str:
    return _html.escape(str(text), quote=True)


def _table(table: HtmlTable) -> str:
    cols = table_columns(table.rows)
    head = "".join(f"<th>{_e(c)}</th>" for c in cols)
    body = "".join(
        "<tr>"
        + "".join(f"<td>{_e(format_value(row.get(c), table.digits))}</td>" for c in cols)
        + "</tr>"
        for row in table.rows
    )
    notes = "".join(f'<p class="note">{_e(n)}</p>' for n in table.notes)
    return (
        f'<h3>{_e(table.title)}</h3><div class="table-wrap"><table><thead><tr>{head}</tr>'
        f"</thead><tbody>{body}</tbody></table></div>{notes}"
    )


def _figure(figure: HtmlFigure) -> str:
    data = base64.b64encode(figure.png).decode("ascii")
    caption = f"<figcaption>{_e(figure.caption)}</figcaption>" if figure.caption else ""
    return (
        f'<figure><img src="data:image/png;base64,{data}" alt="{_e(figure.title)}">'
        f"{caption}</figure>"
    )


def render_html(report: HtmlReport) -> str:
    """The report as one self-contained HTML document (UTF-8 text)."""
    verdicts = "".join(
        f'<div class="verdict {_e(v.status)}"><div class="q">{_e(v.question)}</div>'
        f'<div class="a">{_e(v.answer)}</div><div class="d">{_e(v.detail)}</div></div>'
        for v in report.verdicts
    )
    sections = "".join(
        f"<section><h2>{_e(s.title)}</h2>"
        + "".join(f"<p>{_e(n)}</p>" for n in s.notes)
        + "".join(_table(t) for t in s.tables)
        + "".join(_figure(f) for f in s.figures)
        + "</section>"
        for s in report.sections
    )
    footer = "".join(f"<div>{_e(k)}: {_e(v)}</div>" for k, v in report.footer.items())
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(report.title)}</title><style>{_CSS}</style></head><body><main>"
        f'<h1>{_e(report.title)}</h1><section class="summary" id="verdict"><h2>Summary</h2>'
        f'<div class="verdicts">{verdicts}</div></section>{sections}'
        f"<footer>{footer}</footer></main></body></html>\n"
    )
