"""Call-battery cases of the report kit (``bensemble.reporting``) and the chunked ``.npy`` reader
(``bensemble.io.open_npy_chunks`` / ``NpyChunks``); battery_calls.CALL_CASES includes them.

Each valid call checks what it promises (files written whole into a fresh temporary folder, NaN
shown as ``-``, strict JSON, the chunks equal to the array); each bad call must raise a
``ValueError`` naming the argument. Adding a function: one ``CallCase`` below.
"""

from __future__ import annotations

import io as _bytes_io
import pickle
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bensemble import io, reporting

sys.path.insert(0, str(Path(__file__).resolve().parent))  # siblings, however this is imported

from battery_calls_base import CallCase, files  # noqa: E402

NAN, INF = float("nan"), float("inf")
ROWS = [{"method": "ensemble", "ece": 0.0123, "nll": NAN, "n": 400}, {"method": "single"}]


def _fresh() -> Path:
    """A new empty folder inside the battery's temporary folder."""
    return Path(tempfile.mkdtemp(dir=files()))


def _check(value: Any, expected: Any) -> Any:
    assert value == expected, f"{value!r} != {expected!r}"
    return value


# ----------------------------------------------------------------------------- chunked reads
def _on_chunks(use: Callable[[io.NpyChunks], Any], path: str = "stack.npy") -> Any:
    with io.open_npy_chunks(files() / path) as chunks:
        return use(chunks)


def _chunks_agree() -> None:
    whole = np.load(files() / "stack.npy")
    with io.open_npy_chunks(files() / "stack.npy") as chunks:
        assert chunks.shape == whole.shape and len(chunks) == whole.shape[0]
        assert np.array_equal(chunks.read(1, 3, axis=1), whole[:, 1:3])
        assert np.array_equal(chunks.read(2, 99), whole[2:])  # stop past the end is clipped
        out = np.empty((3, 2, 2), dtype=whole.dtype)
        assert chunks.read(0, 2, axis=1, out=out) is out and np.array_equal(out, whole[:, :2])
        assert np.array_equal(chunks.take([4, 0, 4], axis=1), whole[:, [4, 0, 4]])
        again = pickle.loads(pickle.dumps(chunks))  # process pools reopen it by name
        try:
            assert np.array_equal(again.read(0, 5, axis=1), whole)
        finally:
            again.close()


def _closed_read() -> Any:
    chunks = io.open_npy_chunks(files() / "stack.npy")
    chunks.close()
    return chunks.read(0, 1)


# ----------------------------------------------------------------------------- report kit
def _png() -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1, 1))
    ax.plot([0, 1], [0, 1])
    buffer = _bytes_io.BytesIO()
    fig.savefig(buffer, format="png", dpi=20)
    plt.close(fig)
    return buffer.getvalue()


def _page(**changes: Any) -> reporting.HtmlReport:
    """A page with a verdict, a section holding notes, a table and a figure; ``changes``
    replace fields of the section (``section_*``), the table (``table_*``) or the page."""
    table = {"title": "scores", "rows": ROWS, "notes": ["ECE with 15 bins."], "digits": 3}
    table.update({k[6:]: v for k, v in changes.items() if k.startswith("table_")})
    section = {
        "title": "Metrics",
        "notes": ["Held-out test set."],
        "tables": [reporting.HtmlTable(**table)],
        "figures": [reporting.HtmlFigure("Reliability", _png(), "Binned accuracy.")],
    }
    section.update({k[8:]: v for k, v in changes.items() if k.startswith("section_")})
    page = {
        "title": "demo",
        "verdicts": [reporting.Verdict("Is the model calibrated?", "yes", "good", "ECE 0.012")],
        "sections": [reporting.HtmlSection(**section)],
        "footer": {"bensemble": "0.3"},
    }
    page.update({k: v for k, v in changes.items() if not k.startswith(("table_", "section_"))})
    return reporting.HtmlReport(**page)


def _rendered() -> str:
    html = reporting.render_html(_page())
    assert html.startswith("<!DOCTYPE html>") and "data:image/png;base64," in html
    assert ">-<" in html  # the NaN cell is shown as "-"
    return html


def _report_folder() -> list[Path]:
    import matplotlib.pyplot as plt

    out = _fresh() / "report"
    with reporting.Report(out, staged=True) as report:
        report.add_table("metrics", ROWS, title="Test metrics")
        report.add_json("summary", {"ece": NAN, "n": np.int64(3), "path": out})
        report.add_text("notes.md", "# Notes\n")
        report.add_html("report", _page())
        report.add_figure("curve", plt.figure(figsize=(1, 1)), dpi=20)
    names = sorted(p.name for p in out.iterdir())
    _check(names, sorted(["metrics.md", "metrics.csv", "metrics.json", "summary.json",
                          "notes.md", "report.html", "curve.png"]))  # fmt: skip
    assert '"ece": null' in (out / "summary.json").read_text()
    return report.files


def _foreign_folder() -> Path:
    folder = _fresh()
    (folder / "data.npy").write_bytes(b"keep")
    return folder


def _report(**kw: Any) -> reporting.Report:
    return reporting.Report(_fresh() / "r", **kw)


def _figure() -> Any:
    import matplotlib.pyplot as plt

    return plt.figure(figsize=(1, 1))


def _atomic_write() -> str:
    path = _fresh() / "a.bin"
    reporting.atomic_write(path, lambda handle: handle.write(b"\x00\x01"))
    return _check(path.read_bytes(), b"\x00\x01").hex()


def _atomic_text() -> str:
    path = _fresh() / "a.txt"
    reporting.atomic_write_text(path, "é\n")
    return _check(path.read_text(encoding="utf-8"), "é\n")


def _circular() -> dict:
    loop: dict = {}
    loop["self"] = loop
    return loop


REPORTING_CASES: list[CallCase] = [
    CallCase(
        "open_npy_chunks",
        lambda: _on_chunks(lambda c: _check(c.shape, (3, 5, 2))),
        [
            (lambda: io.open_npy_chunks(files() / "missing.npy"), "predictions"),
            (lambda: io.open_npy_chunks(files() / "probs.csv", name="labels"), "labels"),
            (lambda: io.open_npy_chunks(files() / "stack.npy", name=""), "name"),
            (lambda: io.open_npy_chunks(5), "path"),
        ],
    ),
    CallCase(
        "NpyChunks",
        _chunks_agree,
        [
            (lambda: _on_chunks(lambda c: c.read(-1, 2)), "start"),
            (lambda: _on_chunks(lambda c: c.read(0, True)), "stop"),
            (lambda: _on_chunks(lambda c: c.read(0, 2, axis=3)), "axis"),
            (lambda: _on_chunks(lambda c: c.read(0, 2, out=np.zeros(3))), "out"),
            (lambda: _on_chunks(lambda c: c.take([5], axis=1)), "indices"),
            (lambda: _on_chunks(lambda c: c.take([0.5])), "indices"),
            (_closed_read, "predictions"),
        ],  # built by open_npy_chunks (its constructor takes an open file and a parsed header)
    ),
    CallCase(
        "format_value",
        lambda: _check(
            [reporting.format_value(v) for v in (NAN, INF, -INF, None, 0.5, True, np.float32(2))],
            ["-", "inf", "-inf", "-", "0.5000", "yes", "2.0000"],
        ),
        [
            (lambda: reporting.format_value(0.5, -1), "digits"),
            (lambda: reporting.format_value(0.5, 10**6), "digits"),
        ],
    ),  # fmt: skip
    CallCase(
        "format_table",
        lambda: reporting.format_table(ROWS, digits=2),
        [
            (lambda: reporting.format_table(5), "rows"),
            (lambda: reporting.format_table([5]), "rows"),
            (lambda: reporting.format_table(ROWS, columns=5), "columns"),
            (lambda: reporting.format_table(ROWS, digits=1.5), "digits"),
        ],
    ),
    CallCase(
        "table_columns",
        lambda: reporting.table_columns(ROWS),
        [
            (lambda: reporting.table_columns(5), "rows"),
            (lambda: reporting.table_columns([5]), "rows"),
        ],
    ),
    CallCase(
        "markdown_table",
        lambda: reporting.markdown_table(ROWS, ["method", "ece"]),
        [
            (lambda: reporting.markdown_table("method"), "rows"),
            (lambda: reporting.markdown_table([None]), "rows"),
            (lambda: reporting.markdown_table(ROWS, digits=-1), "digits"),
        ],
    ),
    CallCase(
        "to_json",
        lambda: _check(
            reporting.to_json({"a": NAN, "b": np.arange(2)}, None), '{"a": null, "b": [0, 1]}'
        ),
        [
            (lambda: reporting.to_json(object()), "value"),
            (lambda: reporting.to_json({"s": {1, 2}}), "value"),
            (lambda: reporting.to_json(_circular()), "value"),
            (lambda: reporting.to_json({}, indent="  "), "indent"),
        ],
    ),  # fmt: skip
    CallCase(
        "atomic_write",
        _atomic_write,
        [
            (lambda: reporting.atomic_write(_fresh() / "a", 5), "write"),
            (lambda: reporting.atomic_write(_fresh() / "no" / "a", lambda h: None), "path"),
            (lambda: reporting.atomic_write(5, lambda h: None), "path"),
        ],
    ),
    CallCase(
        "atomic_write_text",
        _atomic_text,
        [
            (lambda: reporting.atomic_write_text(_fresh() / "a.txt", b"bytes"), "text"),
            (lambda: reporting.atomic_write_text(_fresh() / "no" / "a.txt", "x"), "path"),
        ],
    ),
    CallCase(
        "environment",
        lambda: _check(
            sorted(reporting.environment()), ["bensemble", "numpy", "platform", "python", "torch"]
        ),
    ),  # fmt: skip
    CallCase(
        "Report",
        _report_folder,
        [
            (lambda: reporting.Report(5), "out_dir"),
            (lambda: reporting.Report(""), "out_dir"),
            (lambda: reporting.Report(_foreign_folder(), staged=True), "out_dir"),
            (lambda: _report().add_table("../evil", ROWS), "name"),
            (lambda: _report().add_table("m", 5), "rows"),
            (lambda: _report().add_table("m", ROWS, digits=-1), "digits"),
            (lambda: _report().add_json("j", {"x": object()}), "obj"),
            (lambda: _report().add_text(5, "x"), "filename"),
            (lambda: _report().add_text("a.txt", 5), "text"),
            (lambda: _report().add_figure("f", 5), "fig"),
            (lambda: _report().add_figure("f", _figure(), dpi=0), "dpi"),
            (lambda: _report().add_html("h", "<html>"), "report"),
        ],
    ),
    CallCase(
        "render_html",
        _rendered,
        [
            (lambda: reporting.render_html(5), "report"),
            (lambda: reporting.render_html(_page(sections=5)), "sections"),
            (lambda: reporting.render_html(_page(verdicts=["yes"])), "verdicts"),
            (lambda: reporting.render_html(_page(footer=5)), "footer"),
            (lambda: reporting.render_html(_page(section_notes="one note")), "notes"),
            (lambda: reporting.render_html(_page(section_tables=5)), "tables"),
            (lambda: reporting.render_html(_page(section_figures=[b"png"])), "figures"),
            (lambda: reporting.render_html(_page(table_rows=[5])), "rows"),
            (lambda: reporting.render_html(_page(table_columns=5)), "columns"),
            (lambda: reporting.render_html(_page(table_notes=5)), "notes"),
            (lambda: reporting.render_html(_page(table_digits=-1)), "digits"),
            (
                lambda: reporting.render_html(
                    _page(section_figures=[reporting.HtmlFigure("f", b"junk")])
                ),
                "png",
            ),
        ],
    ),
    CallCase(
        "Verdict",
        lambda: reporting.Verdict("Is it calibrated?", "unclear", "warn"),
        [(lambda: reporting.Verdict("q", "a", "great"), "status")],
    ),
]
