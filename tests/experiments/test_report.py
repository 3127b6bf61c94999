"""The report writer: table formatting, atomic writes, figures, lazy matplotlib."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
import textwrap

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from bensemble.reporting.report import (
    Report,
    atomic_write,
    atomic_write_text,
    format_table,
    format_value,
    markdown_table,
    table_columns,
    to_json,
)

ROWS = [
    {"method": "deep ensemble", "accuracy": 0.912345, "nll": 0.31, "n": 400},
    {"method": "mc dropout", "accuracy": 0.9, "nll": float("nan"), "n": 40},
    {"method": "laplace", "accuracy": np.float32(0.5), "ece": torch.tensor(0.125), "n": 4},
]


def _temp_files(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".bensemble-tmp-"))


# ----------------------------------------------------------------------------- formatting
def test_format_value_rules():
    assert format_value(0.123456) == "0.1235"
    assert format_value(1.0) == "1.0000"
    assert format_value(None) == "-"
    assert format_value(float("nan")) == "-"
    assert format_value(float("inf")) == "inf"
    assert format_value(3) == "3"
    assert format_value(True) == "yes"
    assert format_value(np.float64(0.5)) == "0.5000"
    assert format_value(torch.tensor(0.25)) == "0.2500"
    assert format_value(0.5, digits=2) == "0.50"
    assert format_value("text") == "text"


def test_table_columns_first_seen_order():
    assert table_columns(ROWS) == ["method", "accuracy", "nll", "n", "ece"]


def test_format_table_exact_layout():
    text = format_table(ROWS)
    expected = "\n".join(
        [
            "method         accuracy     nll    n     ece",
            "-------------  --------  ------  ---  ------",
            "deep ensemble    0.9123  0.3100  400       -",
            "mc dropout       0.9000       -   40       -",
            "laplace          0.5000       -    4  0.1250",
        ]
    )
    assert text == expected
    lines = text.splitlines()
    # every line of the header and rule has the same width; numbers right-aligned
    assert len(lines[0]) == len(lines[1])
    assert lines[2].index("0.9123") + len("0.9123") == lines[0].index("accuracy") + len("accuracy")


def test_format_table_column_subset_and_empty():
    assert format_table([]) == "(no rows)"
    text = format_table(ROWS, columns=["n", "method"])
    assert text.splitlines()[0].split() == ["n", "method"]
    assert "accuracy" not in text


def test_markdown_table():
    md = markdown_table(ROWS)
    lines = md.strip().splitlines()
    assert lines[0] == "| method | accuracy | nll | n | ece |"
    assert lines[1] == "|:---|---:|---:|---:|---:|"
    assert lines[2] == "| deep ensemble | 0.9123 | 0.3100 | 400 | - |"
    assert len(lines) == 2 + len(ROWS)
    assert "a \\| b" in markdown_table([{"x": "a | b"}])


def test_to_json_is_strict():
    text = to_json({"a": float("nan"), "b": [np.int64(3), float("inf")], "c": torch.tensor(0.5)})
    assert json.loads(text) == {"a": None, "b": [3, None], "c": 0.5}
    assert "NaN" not in text and "Infinity" not in text


# ----------------------------------------------------------------------------- tables
def test_add_table_writes_three_formats(tmp_path):
    out = tmp_path / "nested" / "report"
    report = Report(out)
    assert not out.exists()  # nothing is created before the first write
    paths = report.add_table("scores", ROWS, title="Scores")
    assert sorted(p.name for p in paths) == ["scores.csv", "scores.json", "scores.md"]
    assert report.files == paths

    md = (out / "scores.md").read_text()
    assert md.startswith("## Scores\n\n| method |")

    with open(out / "scores.csv", newline="") as handle:
        table = list(csv.DictReader(handle))
    assert [r["method"] for r in table] == ["deep ensemble", "mc dropout", "laplace"]
    assert float(table[0]["accuracy"]) == 0.912345  # full precision, not 4 decimals
    assert table[0]["ece"] == ""  # missing cell
    assert math.isnan(float(table[1]["nll"]))
    assert float(table[2]["ece"]) == 0.125

    payload = json.loads((out / "scores.json").read_text())
    assert payload["title"] == "Scores"
    assert payload["columns"] == ["method", "accuracy", "nll", "n", "ece"]
    assert payload["rows"][0] == ROWS[0]
    assert payload["rows"][1]["nll"] is None
    assert payload["rows"][2]["ece"] == 0.125
    assert _temp_files(out) == []


def test_add_table_overwrites_in_place(tmp_path):
    report = Report(tmp_path)
    report.add_table("t", [{"a": 1}])
    report.add_table("t", [{"a": 2}])
    assert json.loads((tmp_path / "t.json").read_text())["rows"] == [{"a": 2}]
    assert report.files.count(tmp_path / "t.json") == 1
    assert _temp_files(tmp_path) == []


@pytest.mark.parametrize("name", ["", "../escape", "a/b", ".hidden", "sp ace", 3])
def test_bad_names_are_refused_before_writing(tmp_path, name):
    out = tmp_path / "r"
    with pytest.raises(ValueError, match="`name`"):
        Report(out).add_table(name, [{"a": 1}])
    assert not out.exists()


def test_out_dir_that_is_a_file_is_refused(tmp_path):
    target = tmp_path / "file"
    target.write_text("keep")
    with pytest.raises(ValueError, match="not a folder"):
        Report(target).add_json("x", {})
    assert target.read_text() == "keep"


def test_add_json_and_text(tmp_path):
    report = Report(tmp_path)
    report.add_json("summary", {"x": 1.5, "nan": float("nan")})
    assert json.loads((tmp_path / "summary.json").read_text()) == {"x": 1.5, "nan": None}
    report.add_text("notes.txt", "hello\n")
    assert (tmp_path / "notes.txt").read_text() == "hello\n"


# ----------------------------------------------------------------------------- atomicity
def test_atomic_write_failure_keeps_old_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "data.txt"
    atomic_write_text(target, "old")

    def boom(handle):
        handle.write(b"partial new content")
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError, match="disk on fire"):
        atomic_write(target, boom)
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.txt"]


def test_atomic_write_uses_a_temp_file_in_the_same_folder(tmp_path):
    target = tmp_path / "x.bin"
    seen = {}

    def spy(handle):
        seen["name"] = handle.name if isinstance(handle.name, str) else None
        seen["listing"] = sorted(p.name for p in tmp_path.iterdir())
        handle.write(b"abc")

    atomic_write(target, spy)
    # during the write only a temp file existed, in the target's own folder
    assert len(seen["listing"]) == 1 and seen["listing"][0].startswith(".bensemble-tmp-")
    assert not target.with_name(seen["listing"][0]).exists()
    assert target.read_bytes() == b"abc"


# ----------------------------------------------------------------------------- figures
def test_add_figure_writes_png_and_closes(tmp_path):
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    number = fig.number
    path = Report(tmp_path / "r").add_figure("diagram", fig)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not plt.fignum_exists(number)
    assert _temp_files(tmp_path / "r") == []


def test_failed_savefig_leaves_nothing_behind(tmp_path):
    fig, _ = plt.subplots()
    number = fig.number

    def broken(*args, **kwargs):
        raise RuntimeError("cannot render")

    fig.savefig = broken
    with pytest.raises(RuntimeError, match="cannot render"):
        Report(tmp_path).add_figure("diagram", fig)
    assert list(tmp_path.iterdir()) == []
    assert not plt.fignum_exists(number)


def test_matplotlib_is_imported_only_for_figures(tmp_path):
    code = textwrap.dedent(
        f"""
        import sys
        from bensemble.reporting.report import Report, format_table
        r = Report({str(tmp_path)!r})
        r.add_table("t", [{{"a": 0.5}}])
        format_table([{{"a": 1}}])
        print("matplotlib" in sys.modules)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == "False"


def test_atomic_write_gives_readable_permissions(tmp_path):
    import stat

    from bensemble.reporting.report import atomic_write_text

    old = os.umask(0o022)
    try:
        path = atomic_write_text(tmp_path / "table.md", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


# ----------------------------------------------------------------------------- staged folders
def test_staged_report_appears_only_on_commit_with_final_paths(tmp_path):
    out = tmp_path / "r"
    report = Report(out, staged=True)
    written = report.add_table("metrics", [{"a": 1}])
    assert written == [out / "metrics.md", out / "metrics.csv", out / "metrics.json"]
    assert not out.exists()
    report.commit()
    assert sorted(p.name for p in out.iterdir()) == ["metrics.csv", "metrics.json", "metrics.md"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]
    assert oct(out.stat().st_mode & 0o777) == oct(0o777 & ~_umask())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_staged_report_uses_an_existing_empty_folder(tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    with Report(out, staged=True) as report:
        report.add_text("a.txt", "x\n")
    assert [p.name for p in out.iterdir()] == ["a.txt"]


def test_staged_report_that_wrote_nothing_creates_nothing(tmp_path):
    Report(tmp_path / "r", staged=True).commit()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("overwrite", [False, True], ids=["plain", "overwrite"])
def test_staged_report_refuses_a_folder_with_foreign_files(tmp_path, overwrite):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "data.npy").write_bytes(b"keep")
    with pytest.raises(ValueError, match="'data.npy', which is not a report file"):
        Report(tmp_path / "r", staged=True, overwrite=overwrite)


def test_staged_report_replaces_an_earlier_report_only_with_overwrite(tmp_path):
    out = tmp_path / "r"
    with Report(out, staged=True) as first:
        first.add_text("old.md", "old\n")
    with pytest.raises(ValueError, match="--overwrite"):
        Report(out, staged=True)
    with Report(out, staged=True, overwrite=True) as second:
        second.add_text("new.md", "new\n")
    assert [p.name for p in out.iterdir()] == ["new.md"]
