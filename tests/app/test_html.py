"""``bensemble.reporting.html``: a self-contained, escaped, accessible page from plain data."""

from __future__ import annotations

import base64
import io
import re
import struct
from html.parser import HTMLParser

import pytest

from bensemble.reporting._folder import check_report_folder
from bensemble.reporting.html import (
    STATUS_LABELS,
    STATUSES,
    HtmlFigure,
    HtmlReport,
    HtmlSection,
    HtmlTable,
    Verdict,
    render_html,
)
from bensemble.reporting.report import Report

EVIL = '<script>alert("x")</script>&<b onmouseover="y">'


# ----------------------------------------------------------------------------- helpers
class _Page(HTMLParser):
    """Every start tag with its attributes, and the text, of a document."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    def all(self, tag: str) -> list[dict[str, str | None]]:
        return [attrs for t, attrs in self.tags if t == tag]

    def ids(self) -> list[str]:
        return [a["id"] for _, a in self.tags if a.get("id")]


def _png(width: int = 64, height: int = 48) -> bytes:
    """A real matplotlib PNG (Agg) of the given pixel size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width / 16, height / 16), dpi=16)
    ax.plot([0, 1], [0, 1])
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=16)
    plt.close(fig)
    return buffer.getvalue()


def _full_report(title: str = "Report") -> HtmlReport:
    return HtmlReport(
        title=title,
        verdicts=[Verdict(f"Question {s}?", "answer", s, "detail") for s in STATUSES],
        sections=[
            HtmlSection(
                "Metrics",
                notes=["A note."],
                tables=[
                    HtmlTable("scores", [{"method": "ens", "ece": 0.0123456, "n": 3}], ["nats"]),
                    HtmlTable("scores", [{"a": 1}, {"b": None}], digits=2),
                ],
                figures=[HtmlFigure("Reliability", _png(), "Accuracy against confidence.")],
            ),
            HtmlSection("Metrics", figures=[HtmlFigure("", _png(32, 32), "", alt="a curve")]),
        ],
        footer={"bensemble": "0.3", "torch": "2.13"},
        subtitle="on saved predictions",
    )


# ----------------------------------------------------------------------------- escaping
def test_every_text_is_escaped():
    fig = HtmlFigure(EVIL, _png(), caption=EVIL, alt=EVIL)
    table = HtmlTable(EVIL, [{EVIL: EVIL, "x": 1.0}], notes=[EVIL])
    page = HtmlReport(
        EVIL,
        [Verdict(EVIL, EVIL, "bad", EVIL)],
        [HtmlSection(EVIL, [EVIL], [table], [fig])],
        {EVIL: EVIL},
        subtitle=EVIL,
    )
    html = render_html(page)
    assert "<script" not in html.lower() and "<b " not in html
    parsed = _Page(html)
    assert not parsed.all("script") and not parsed.all("b")
    assert all(not k.startswith("on") for _, attrs in parsed.tags for k in attrs)
    # every place shows the text itself, unaltered
    assert "".join(parsed.text).count(EVIL) >= 11
    assert parsed.all("img")[0]["alt"] == EVIL
    assert html.count("&lt;script&gt;") >= 11


# ----------------------------------------------------------------------------- self-contained
def test_no_external_resource_and_every_link_is_internal():
    html = render_html(_full_report())
    parsed = _Page(html)
    ids = parsed.ids()
    assert len(ids) == len(set(ids)), "duplicate ids"
    for tag, attrs in parsed.tags:
        assert tag not in {"script", "link", "iframe", "object", "embed", "base"}
        if "src" in attrs:
            assert attrs["src"].startswith("data:image/png;base64,"), attrs["src"][:40]
        if "href" in attrs:
            assert attrs["href"].startswith("#") and attrs["href"][1:] in ids, attrs["href"]
    style = html.split("<style>", 1)[1].split("</style>", 1)[0]
    assert "url(" not in style and "@import" not in style and "@font-face" not in style
    outside_images = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", html)
    assert not re.search(r"(?:https?:)?//[a-z0-9]", outside_images.lower())


def test_every_figure_is_a_data_uri_image_with_alt_text_and_caption():
    report = _full_report()
    figures = [f for s in report.sections for f in s.figures]
    html = render_html(report)
    imgs = _Page(html).all("img")
    assert len(imgs) == len(figures) == 2
    for img, fig in zip(imgs, figures):
        payload = img["src"].removeprefix("data:image/png;base64,")
        assert base64.b64decode(payload) == fig.png
        width, height = struct.unpack(">II", fig.png[16:24])
        assert (img["width"], img["height"]) == (str(width), str(height))
        assert img["alt"] == (fig.alt or fig.title) and img["alt"].strip()
    assert html.count("<figcaption>") == 2
    assert "<strong>Figure 1. Reliability.</strong> Accuracy against confidence." in html
    assert "<strong>Figure 2.</strong>" in html


def test_a_wide_figure_takes_a_whole_row_of_the_figure_grid():
    figures = [HtmlFigure("narrow", _png(400, 300)), HtmlFigure("wide", _png(960, 320))]
    html = render_html(HtmlReport("t", sections=[HtmlSection("s", figures=figures)]))
    assert re.findall(r"<figure( class=\"wide\")?><img", html) == ["", ' class="wide"']


@pytest.mark.parametrize(
    "png",
    [pytest.param(b"GIF89a" + bytes(40), id="gif"), pytest.param(b"", id="empty"),
     pytest.param("not bytes", id="text")],
)  # fmt: skip
def test_a_figure_that_is_not_a_png_is_refused(png):
    page = HtmlReport("t", sections=[HtmlSection("s", figures=[HtmlFigure("f", png)])])
    with pytest.raises(ValueError, match=r"render_html: `png` must be the bytes of a PNG file"):
        render_html(page)


# ----------------------------------------------------------------------------- verdicts
@pytest.mark.parametrize("status", ["ok", "GOOD", "", None, 1])
def test_an_unknown_verdict_status_is_refused(status):
    with pytest.raises(ValueError, match=r"Verdict: `status` must be one of 'good', 'warn'"):
        Verdict("q", "a", status)
    verdict = Verdict("q", "a", "good")
    verdict.status = status  # changed after construction: the renderer checks again
    with pytest.raises(
        ValueError, match=rf"render_html: `status` .* \(got {re.escape(repr(status))}\)"
    ):
        render_html(HtmlReport("t", [verdict]))


def test_each_verdict_states_its_status_in_words_not_colour_alone():
    html = render_html(_full_report())
    cards = re.findall(r'<li class="verdict st-(\w+)">(.*?)</li>', html)
    assert [status for status, _ in cards] == list(STATUSES)
    for status, card in cards:
        assert f"{STATUS_LABELS[status]}</p>" in card
        assert f"<h3>Question {status}?</h3>" in card
    assert len(set(STATUS_LABELS.values())) == len(STATUSES)
    assert 'id="verdict"' in html


# ----------------------------------------------------------------------------- structure
def test_page_structure_is_accessible():
    html = render_html(_full_report())
    parsed = _Page(html)
    assert parsed.all("html") == [{"lang": "en"}]
    assert len(parsed.all("h1")) == 1
    assert any(a.get("name") == "viewport" for a in parsed.all("meta"))
    ids = set(parsed.ids())
    # contents: one link per section (titles repeat, ids do not), plus the summary
    links = [a["href"] for a in parsed.all("a")]
    assert links == ["#summary", "#sec-metrics", "#sec-metrics-2"]
    # tables: column headers, a row header for the text column, a labelled focusable scroll box
    assert {a.get("scope") for a in parsed.all("th")} == {"col", "row"}
    boxes = [a for a in parsed.all("div") if a.get("class") == "table-wrap"]
    assert len(boxes) == 2
    for box in boxes:
        assert box["role"] == "region" and box["tabindex"] == "0"
        assert box["aria-labelledby"] in ids
    assert "<title>Report</title>" in html and "@media print" in html


def test_table_cells_are_formatted_and_numbers_right_aligned():
    html = render_html(_full_report())
    assert '<th scope="row">ens</th><td class="num">0.0123</td><td class="num">3</td>' in html
    assert '<th scope="col" class="num">ece</th>' in html
    assert '<p class="note">nats</p>' in html
    # the second table: numeric first column, a missing value shown as "-"
    assert '<td class="num">1</td><td>-</td>' in html


def test_columns_option_orders_the_columns():
    table = HtmlTable("t", [{"a": 1, "b": "x"}], columns=["b", "a"])
    html = render_html(HtmlReport("t", sections=[HtmlSection("s", tables=[table])]))
    assert re.search(r"<th[^>]*>b</th><th[^>]*>a</th>", html)


# ----------------------------------------------------------------------------- empty parts
def test_empty_report_and_empty_sections_render():
    bare = render_html(HtmlReport("bare"))
    assert "No verdicts for this run." in bare and "<nav" not in bare and "<footer" not in bare
    _Page(bare)  # parses
    page = HtmlReport(
        "t",
        sections=[HtmlSection("Nothing"), HtmlSection("No rows", tables=[HtmlTable("t", [])])],
    )
    html = render_html(page)
    assert "Nothing to show in this section." in html
    assert '<p class="empty">No rows.</p>' in html and "<table" not in html


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("page", "argument"),
    [
        pytest.param("<html>", "report", id="not-a-report"),
        pytest.param(HtmlReport("t", ["yes"]), "verdicts", id="verdict-not-verdict"),
        pytest.param(HtmlReport("t", sections=["s"]), "sections", id="section-not-section"),
        pytest.param(
            HtmlReport("t", sections=[HtmlSection("s", tables=[HtmlTable("t", [[1, 2]])])]),
            "rows",
            id="row-not-mapping",
        ),
        pytest.param(
            HtmlReport("t", sections=[HtmlSection("s", tables=[HtmlTable("t", [], digits=-1)])]),
            "digits",
            id="negative-digits",
        ),
        pytest.param(
            HtmlReport("t", sections=[HtmlSection("s", figures=[b"\x89PNG"])]),
            "figures",
            id="figure-not-figure",
        ),
    ],
)
def test_bad_content_raises_a_value_error_naming_the_argument(page, argument):
    with pytest.raises(ValueError, match=rf"render_html: `{argument}`"):
        render_html(page)


# ----------------------------------------------------------------------------- Report.add_html
def test_report_add_html_writes_the_page_and_the_folder_stays_a_report(tmp_path):
    out = tmp_path / "report"
    with Report(out, staged=True) as report:
        path = report.add_html("report", _full_report("Staged"))
    assert path == out / "report.html" and report.files == [path]
    assert path.read_text(encoding="utf-8") == render_html(_full_report("Staged"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]  # no temporary file left
    check_report_folder(out, overwrite=True, fn="test")  # an .html page is a report file
    with pytest.raises(ValueError, match="already holds a report"):
        check_report_folder(out, overwrite=False, fn="test")


def test_report_add_html_refuses_a_bad_name_before_rendering(tmp_path):
    with pytest.raises(ValueError, match="Report: `name`"):
        Report(tmp_path / "r").add_html("../evil", "not even a report")
    with pytest.raises(ValueError, match="render_html: `report`"):
        Report(tmp_path / "r").add_html("report", "not a report")
    assert not (tmp_path / "r").exists()
