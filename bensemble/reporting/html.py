"""A self-contained HTML page for the reports of ``bensemble evaluate`` and ``bensemble demo``.

The page is described by plain data (:class:`HtmlReport`: a verdict block, then sections of
notes, tables and figures) and :func:`render_html` turns it into one HTML string: figures are
embedded as base64 PNG ``data:`` URIs, the style sheet is inline, there is no JavaScript, no web
font and no network access, so the file can be mailed or opened from a laptop offline.

The layout reads at desktop and phone widths: the verdicts are cards that stack on a narrow
screen, each with its status written out (not told by colour alone); a wide table scrolls inside
its own box, never the page; figures scale down to the column. A print style sheet drops the
contents list and keeps cards and figures whole. Every text is HTML-escaped, its control and
bidirectional characters shown as escapes (:func:`bensemble._terminal.printable_name`).

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
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bensemble._terminal import printable_name
from bensemble.reporting._checks import check_digits, check_items, check_mapping, check_rows
from bensemble.reporting._table_format import _cells

__all__ = [
    "STATUSES",
    "STATUS_LABELS",
    "HtmlFigure",
    "HtmlReport",
    "HtmlSection",
    "HtmlTable",
    "Verdict",
    "render_html",
]

#: Verdict statuses, each drawn in its own colour.
STATUSES = ("good", "warn", "bad", "info")
#: The words shown with each status (the colour is never the only cue), and a glyph.
STATUS_LABELS = {"good": "Good", "warn": "Caution", "bad": "Problem", "info": "Note"}
_STATUS_GLYPHS = {"good": "\u2713", "warn": "!", "bad": "\u2717", "info": "i"}
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_WIDE_FIGURE_PX = 720  # figures wider than this take a whole row of the figure grid
_FN = "render_html"


def _check_status(status: Any, fn: str) -> str:
    if not isinstance(status, str) or status not in STATUSES:
        valid = ", ".join(repr(s) for s in STATUSES)
        raise ValueError(f"{fn}: `status` must be one of {valid} (got {status!r})")
    return status


def _png_size(png: Any, fn: str) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk; anything but PNG bytes is refused."""
    if not isinstance(png, (bytes, bytearray, memoryview)):
        raise ValueError(f"{fn}: `png` must be the bytes of a PNG file (got {type(png).__name__})")
    head = bytes(png[:24])
    if len(head) < 24 or not head.startswith(_PNG_SIGNATURE) or head[12:16] != b"IHDR":
        raise ValueError(
            f"{fn}: `png` must be the bytes of a PNG file (got {len(png)} bytes starting "
            f"{head[:8]!r})"
        )
    return struct.unpack(">II", head[16:24])


@dataclass
class Verdict:
    """One question of the summary block and its answer.

    Attributes:
        question: e.g. ``"Is the model calibrated?"``.
        answer: a short answer (``"yes"``, ``"no"``, ``"unclear"``, ``"n/a"``).
        status: one of :data:`STATUSES` (``"good"``, ``"warn"``, ``"bad"``, ``"info"``); the
            card shows its colour and its word from :data:`STATUS_LABELS`.
        detail: one or two sentences with the numbers behind the answer.
    """

    question: str
    answer: str
    status: str
    detail: str = ""

    def __post_init__(self) -> None:
        _check_status(self.status, "Verdict")


@dataclass
class HtmlTable:
    """A table: rows of ``column -> value`` (floats are rounded to ``digits`` decimals).

    Attributes:
        title: The table's heading.
        rows: One mapping per row; a missing key is shown as ``-``.
        notes: Paragraphs under the table (definitions, units, warnings).
        digits: Decimals for floats.
        columns: Column order (default: the rows' keys in first-seen order).
    """

    title: str
    rows: Sequence[Mapping[str, Any]]
    notes: Sequence[str] = ()
    digits: int = 4
    columns: Sequence[str] | None = None


@dataclass
class HtmlFigure:
    """A PNG figure (its bytes) with a caption.

    Attributes:
        title: Shown above the caption; also the image's alt text unless ``alt`` is given.
        png: The bytes of a PNG file (e.g. ``fig.savefig(buffer, format="png")``).
        caption: What the figure shows and how to read it.
        alt: A text alternative for readers who cannot see the image.
    """

    title: str
    png: bytes
    caption: str = ""
    alt: str = ""


@dataclass
class HtmlSection:
    """A titled section: notes (paragraphs), then tables, then figures."""

    title: str
    notes: Sequence[str] = ()
    tables: Sequence[HtmlTable] = ()
    figures: Sequence[HtmlFigure] = ()


@dataclass
class HtmlReport:
    """The whole page: title, verdict block, sections and a footer (e.g. the versions).

    Attributes:
        title: The page title and its top heading.
        verdicts: The summary block's cards, in order.
        sections: The page's sections, listed in the contents.
        footer: ``label -> value`` pairs shown at the bottom (versions, command line).
        subtitle: A line under the title (e.g. what was evaluated).
    """

    title: str
    verdicts: Sequence[Verdict] = ()
    sections: Sequence[HtmlSection] = ()
    footer: Mapping[str, Any] = field(default_factory=dict)
    subtitle: str = ""


_CSS = """
:root{color-scheme:light;--fg:#1d2330;--muted:#5b6270;--line:#dfe2e8;--soft:#f5f6f8;
--accent:#1f4e8c}
*,*::before,*::after{box-sizing:border-box}
html{-webkit-text-size-adjust:100%;text-size-adjust:100%}
body{margin:0;color:var(--fg);background:#fff;line-height:1.5;font-size:16px;
font-family:system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:72rem;margin:0 auto;padding:1.5rem 1.5rem 2rem}
h1,h2,h3{line-height:1.25;margin:0}
h1{font-size:1.75rem}
h2{font-size:1.3rem;margin:2.2rem 0 .8rem;padding-bottom:.3rem;border-bottom:2px solid var(--line)}
h3{font-size:1.05rem;margin:1.4rem 0 .5rem}
p{margin:.4rem 0 .7rem;max-width:48rem}
h1,h2,h3,p,li,dd,figcaption,td,th{overflow-wrap:anywhere}
a{color:var(--accent)}
.subtitle{color:var(--muted);margin:.3rem 0 0}
header{margin-bottom:1rem}
.toc{margin:1rem 0 0;font-size:.92rem}
.toc h2{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0);margin:0;
padding:0;border:0}
.toc ol{list-style:none;margin:0;padding:0;display:flex;flex-wrap:wrap;gap:.4rem}
.toc a{display:inline-block;padding:.2rem .65rem;border:1px solid var(--line);
border-radius:1rem;text-decoration:none;background:var(--soft)}
.toc a:hover,.toc a:focus{border-color:var(--accent)}
.verdicts{list-style:none;margin:0;padding:0;display:grid;gap:.8rem;
grid-template-columns:repeat(auto-fill,minmax(min(100%,17rem),1fr))}
.verdict{border:1px solid var(--line);border-left:.45rem solid var(--c);border-radius:.4rem;
padding:.7rem .9rem .8rem;background:var(--bg);min-width:0}
.verdict h3{font-size:.98rem;margin:.45rem 0 .15rem;font-weight:600}
.verdict .answer{font-size:1.2rem;font-weight:700;margin:0 0 .2rem}
.verdict .detail{font-size:.9rem;color:#343a46;margin:0}
.status{display:inline-flex;align-items:center;gap:.35rem;margin:0;padding:.1rem .55rem .1rem .2rem;
border-radius:1rem;background:var(--c);color:#fff;font-size:.78rem;font-weight:700;
letter-spacing:.04em;text-transform:uppercase}
.status .glyph{display:inline-grid;place-items:center;width:1.2rem;height:1.2rem;
border-radius:50%;background:#fff;color:var(--c);font-size:.8rem;line-height:1}
.st-good{--c:#1b6e2a;--bg:#eef7ef}.st-warn{--c:#8f4700;--bg:#fff5e8}
.st-bad{--c:#b3261e;--bg:#fdeeed}.st-info{--c:#1f4e8c;--bg:#edf3fb}
.empty{color:var(--muted);font-style:italic}
.table-wrap{overflow-x:auto;width:fit-content;max-width:100%;margin:.3rem 0 .6rem;
border:1px solid var(--line);border-radius:.35rem}
.table-wrap:focus{outline:2px solid var(--accent);outline-offset:2px}
table{border-collapse:collapse;font-size:.88rem;font-variant-numeric:tabular-nums}
th,td{padding:.35rem .7rem;border-bottom:1px solid var(--line);white-space:nowrap;
text-align:left;vertical-align:top}
th.num,td.num{text-align:right}
thead th{background:var(--soft);font-weight:600;border-bottom:2px solid var(--line)}
tbody tr:last-child>*{border-bottom:0}
tbody tr:nth-child(even)>*{background:#fafbfc}
tbody th{font-weight:600;position:sticky;left:0;background:#fff;z-index:1}
tbody tr:nth-child(even)>th{background:#fafbfc}
.note{font-size:.87rem;color:var(--muted)}
.figures{display:grid;gap:1rem 1.5rem;margin:1.2rem 0 1.6rem;
grid-template-columns:repeat(auto-fit,minmax(min(100%,28rem),1fr))}
figure{margin:0;min-width:0}figure.wide{grid-column:1/-1}
figure img{display:block;max-width:100%;height:auto;border:1px solid var(--line);
border-radius:.3rem}
figcaption{font-size:.88rem;color:var(--muted);margin-top:.4rem;max-width:48rem}
figcaption strong{color:var(--fg)}
footer{margin-top:3rem;padding-top:.8rem;border-top:1px solid var(--line);font-size:.8rem;
color:var(--muted)}
footer dl{display:flex;flex-wrap:wrap;gap:.2rem 1.2rem;margin:0}
footer dl div{display:flex;gap:.35rem;min-width:0}
footer dt{font-weight:600}footer dd{margin:0}
@media (max-width:600px){
main{padding:1rem .85rem 1.5rem}
h1{font-size:1.4rem}h2{font-size:1.15rem;margin-top:1.8rem}
.verdict .answer{font-size:1.1rem}
table{font-size:.82rem}th,td{padding:.3rem .5rem}
}
@media print{
body{font-size:10.5pt}main{max-width:none;padding:0}
.toc{display:none}
.verdict,figure,.table-wrap,tr{break-inside:avoid}
h2,h3{break-after:avoid}
.table-wrap{overflow:visible;border:0}table{font-size:8.5pt}
tbody th{position:static}
.verdict,.status,.status .glyph{-webkit-print-color-adjust:exact;print-color-adjust:exact}
a{color:inherit;text-decoration:none}
}
"""


def _e(text: Any) -> str:  # a name cannot reorder or hide what the page shows
    return _html.escape(printable_name(str(text)), quote=True)


class _Ids:
    """Unique, readable ``id`` attributes made from titles."""

    def __init__(self) -> None:
        self.used: set[str] = {"summary", "contents"}

    def __call__(self, title: str, prefix: str) -> str:
        slug = re.sub(r"[^a-z0-9]+", "-", str(title).lower()).strip("-")[:40].strip("-")
        base = f"{prefix}-{slug}" if slug else prefix
        name, n = base, 2
        while name in self.used:
            name, n = f"{base}-{n}", n + 1
        self.used.add(name)
        return name


def _table(table: HtmlTable, ids: _Ids) -> str:
    rows, digits = check_rows(table.rows, _FN), check_digits(table.digits, _FN)
    hid = ids(table.title, "table")
    notes = "".join(
        f'<p class="note">{_e(n)}</p>' for n in check_items(table.notes, "notes", _FN, what="str")
    )
    heading = f'<h3 id="{hid}">{_e(table.title)}</h3>'
    if not rows:
        return f'{heading}<p class="empty">No rows.</p>{notes}'
    cols, body, numeric = _cells(rows, table.columns, digits, _FN)
    cls = [' class="num"' if num else "" for num in numeric]
    head = "".join(f'<th scope="col"{c}>{_e(col)}</th>' for col, c in zip(cols, cls))
    row_header = not numeric[0]  # a text first column (a method, a class) labels its row

    def cell(j: int, text: str) -> str:
        if j == 0 and row_header:
            return f'<th scope="row">{_e(text)}</th>'
        return f"<td{cls[j]}>{_e(text)}</td>"

    trs = "".join("<tr>" + "".join(cell(j, t) for j, t in enumerate(r)) + "</tr>" for r in body)
    return (
        f'{heading}<div class="table-wrap" role="region" aria-labelledby="{hid}" tabindex="0">'
        f"<table><thead><tr>{head}</tr></thead><tbody>{trs}</tbody></table></div>{notes}"
    )


def _figure(figure: HtmlFigure, number: int) -> str:
    width, height = _png_size(figure.png, "render_html")
    data = base64.b64encode(bytes(figure.png)).decode("ascii")
    alt = figure.alt or figure.title or figure.caption or f"Figure {number}"
    title = f" {_e(figure.title)}." if figure.title else ""
    caption = f" {_e(figure.caption)}" if figure.caption else ""
    wide = ' class="wide"' if width > _WIDE_FIGURE_PX else ""  # a full row of the grid
    return (
        f'<figure{wide}><img src="data:image/png;base64,{data}" width="{width}" height="{height}" '
        f'alt="{_e(alt)}"><figcaption><strong>Figure {number}.{title}</strong>{caption}'
        "</figcaption></figure>"
    )


def _verdict(v: Verdict) -> str:
    status = _check_status(v.status, "render_html")
    detail = f'<p class="detail">{_e(v.detail)}</p>' if v.detail else ""
    return (
        f'<li class="verdict st-{status}"><p class="status"><span class="glyph" '
        f'aria-hidden="true">{_STATUS_GLYPHS[status]}</span>{STATUS_LABELS[status]}</p>'
        f'<h3>{_e(v.question)}</h3><p class="answer">{_e(v.answer)}</p>{detail}</li>'
    )


def render_html(report: HtmlReport) -> str:
    """The report as one self-contained HTML document (UTF-8 text).

    Args:
        report: The page's content.

    Returns:
        The document: inline CSS, figures as ``data:`` URIs, no script, no external resource.

    Raises:
        ValueError: ``report`` is not an :class:`HtmlReport`, a verdict's ``status`` is not one of
            :data:`STATUSES`, a figure's ``png`` is not PNG bytes, a table row is not a mapping,
            or a part is not what its field says (``sections``, ``tables``, ``notes`` ... not a
            sequence of their kind, ``footer`` not a mapping).
    """
    if not isinstance(report, HtmlReport):
        raise ValueError(
            f"render_html: `report` must be an HtmlReport (got {type(report).__name__})"
        )
    ids = _Ids()
    verdicts = "".join(_verdict(v) for v in check_items(report.verdicts, "verdicts", _FN, Verdict))
    summary = (
        f'<ul class="verdicts">{verdicts}</ul>'
        if verdicts
        else '<p class="empty">No verdicts for this run.</p>'
    )
    toc = ['<li><a href="#summary">Summary</a></li>']
    sections, figure_number = [], 0
    for s in check_items(report.sections, "sections", _FN, HtmlSection):
        sid = ids(s.title, "sec")
        toc.append(f'<li><a href="#{sid}">{_e(s.title)}</a></li>')
        parts = [f"<p>{_e(n)}</p>" for n in check_items(s.notes, "notes", _FN, what="str")]
        parts += [_table(t, ids) for t in check_items(s.tables, "tables", _FN, HtmlTable)]
        figures = []
        for f in check_items(s.figures, "figures", _FN, HtmlFigure):
            figure_number += 1
            figures.append(_figure(f, figure_number))
        if figures:
            parts.append(f'<div class="figures">{"".join(figures)}</div>')
        if not parts:
            parts = ['<p class="empty">Nothing to show in this section.</p>']
        sections.append(
            f'<section aria-labelledby="{sid}"><h2 id="{sid}">{_e(s.title)}</h2>'
            + "".join(parts)
            + "</section>"
        )
    footer = ""
    if check_mapping(report.footer, "footer", _FN):
        items = "".join(
            f"<div><dt>{_e(k)}</dt><dd>{_e(v)}</dd></div>" for k, v in report.footer.items()
        )
        footer = f"<footer><dl>{items}</dl></footer>"
    subtitle = f'<p class="subtitle">{_e(report.subtitle)}</p>' if report.subtitle else ""
    nav = (
        '<nav class="toc" aria-labelledby="contents"><h2 id="contents">Contents</h2>'
        f"<ol>{''.join(toc)}</ol></nav>"
        if sections
        else ""
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="generator" content="bensemble">'
        f"<title>{_e(report.title)}</title><style>{_CSS}</style></head><body><main>"
        f"<header><h1>{_e(report.title)}</h1>{subtitle}{nav}</header>"
        '<section class="summary" id="verdict" aria-labelledby="summary">'
        f'<h2 id="summary">Summary</h2>{summary}</section>'
        f"{''.join(sections)}{footer}</main></body></html>\n"
    )
