"""Issue 19, the command line: a closed stdout, ``--out`` links, names checked before the work,
names shown escaped, and a file truncated while ``--chunk-size`` reads it.

Defect classes (each test failed before, except where said): (a) ``bensemble evaluate ... |
head`` whose reader had gone ended in a ``BrokenPipeError`` traceback; (b) ``--out`` that is a
symbolic link was renamed away and replaced by a folder; (c) a non-UTF-8 or over-long name failed
only after the computation; (d) a file name holding ESC / U+202E went raw to the terminal and into
report.html; (e) a file truncated while being read killed the process with SIGBUS.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from bensemble.cli import EXIT_BROKEN_PIPE, main
from bensemble.reporting.html import HtmlReport, HtmlSection, HtmlTable, render_html
from bensemble.reporting.report import Report, format_table, markdown_table

M, N, K = 2, 60, 3
FAST = ["--bootstrap", "0", "--no-progress"]
ENV = {**os.environ, "PYTHONPATH": os.getcwd(), "PYTHONIOENCODING": "utf-8"}


def _inputs(folder: Path, name: str = "p.npy", n: int = N, m: int = M) -> tuple[str, str]:
    rng = np.random.default_rng(0)
    np.save(folder / name, rng.dirichlet(np.ones(K), size=(m, n)).astype(np.float32))
    np.save(folder / "y.npy", rng.integers(0, K, size=n))
    return str(folder / name), str(folder / "y.npy")


def _run(argv, capsys) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _one_error(err: str, prog: str = "bensemble evaluate") -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), err
    return lines[0]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "bensemble.cli", *args]


# ============================================================================ (a) closed stdout
@pytest.mark.parametrize("extra", [[], ["--json"]], ids=["tables", "json"])
def test_evaluate_into_a_closed_pipe_ends_quietly(tmp_path, extra):
    p, y = _inputs(tmp_path)
    cmd = _cli("evaluate", p, "--labels", y, "--out", str(tmp_path / "r"), *FAST, *extra)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    proc.stdout.close()  # the reader is gone before anything is written (`| head -c 0`)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == EXIT_BROKEN_PIPE, err
    assert err == ""
    assert (tmp_path / "r" / "report.html").is_file()  # written before the tables are printed


def test_help_into_a_closed_pipe_ends_quietly():
    # a guard: argparse swallows the write error itself (passed before too)
    proc = subprocess.Popen(
        _cli("evaluate", "--help"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV
    )
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) in (0, EXIT_BROKEN_PIPE) and err == ""


def test_evaluate_with_stdout_closed_from_the_start_runs_quietly(tmp_path):
    # a guard: Python sets sys.stdout to None when fd 1 is closed, and print() does nothing
    p, y = _inputs(tmp_path)
    line = " ".join([*_cli("evaluate", p, "--labels", y, "--out", str(tmp_path / "r")), *FAST])
    done = subprocess.run(["sh", "-c", line + " >&-"], capture_output=True, text=True, env=ENV)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert (tmp_path / "r" / "report.html").is_file()


def test_evaluate_piped_into_head_prints_nothing_on_stderr(tmp_path):
    # the user's command line; with a small output this passed before too (one write)
    p, y = _inputs(tmp_path)
    line = " ".join([*_cli("evaluate", p, "--labels", y, "--json"), *FAST]) + " | head -n 1"
    done = subprocess.run(["sh", "-c", line], capture_output=True, text=True, env=ENV, timeout=300)
    assert done.stdout == "{\n" and done.stderr == ""


# ============================================================================ (b) --out links
def test_out_link_to_a_folder_writes_into_its_target_and_stays_a_link(tmp_path, capsys):
    p, y = _inputs(tmp_path)
    target = tmp_path / "reports" / "run"
    target.mkdir(parents=True)
    link = tmp_path / "latest"
    link.symlink_to(target, target_is_directory=True)
    assert _run(["evaluate", p, "--labels", y, "--out", link, *FAST], capsys)[0] == 0
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert (target / "report.html").is_file() and (target / "metrics.csv").is_file()
    # a rerun over the earlier report replaces the target's files, never the link
    code, _, err = _run(["evaluate", p, "--labels", y, "--out", link, *FAST, "--overwrite"], capsys)
    assert code == 0, err
    assert (
        link.is_symlink() and os.readlink(link) == str(target) and (target / "metrics.md").is_file()
    )
    assert sorted(q.name for q in tmp_path.iterdir()) == ["latest", "p.npy", "reports", "y.npy"]
    assert sorted(q.name for q in target.parent.iterdir()) == ["run"]  # no staging left over


def test_out_link_whose_target_is_absent_creates_the_target(tmp_path, capsys):
    p, y = _inputs(tmp_path)
    link = tmp_path / "latest"
    link.symlink_to(tmp_path / "new" / "run")
    assert _run(["evaluate", p, "--labels", y, "--out", link, *FAST], capsys)[0] == 0
    assert link.is_symlink() and (tmp_path / "new" / "run" / "report.html").is_file()


def test_out_link_loop_is_refused_before_the_work(tmp_path, capsys):
    p, y = _inputs(tmp_path)
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    code, _, err = _run(["evaluate", p, "--labels", y, "--out", tmp_path / "a", *FAST], capsys)
    assert code == 2 and "cannot be resolved" in _one_error(err)


def test_report_api_writes_through_a_link(tmp_path):
    (tmp_path / "target").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "target")
    for _ in range(2):
        with Report(tmp_path / "link", staged=True, overwrite=True) as report:
            report.add_text("notes.txt", "x")
    assert (tmp_path / "link").is_symlink() and (tmp_path / "target" / "notes.txt").is_file()


# ============================================================================ (c) names first
def test_non_utf8_out_is_refused_before_the_work(tmp_path, capsys, monkeypatch):
    p, y = _inputs(tmp_path)
    monkeypatch.setattr("bensemble.app.evaluate.api.evaluate_source", _no_work)
    out = os.fsdecode(os.fsencode(str(tmp_path)) + b"/r\xe9sultats")
    code, _, err = _run(["evaluate", p, "--labels", y, "--out", out, *FAST], capsys)
    assert code == 2 and "r\\xe9sultats is not valid UTF-8" in _one_error(err)


def test_non_utf8_input_name_is_refused_before_the_work(tmp_path, capsys, monkeypatch):
    name = os.fsdecode(b"pr\xe9dictions.npy")
    p, y = _inputs(tmp_path, name=name)
    monkeypatch.setattr("bensemble.app.evaluate.api.evaluate_source", _no_work)
    code, _, err = _run(["evaluate", p, "--labels", y, "--out", tmp_path / "r", *FAST], capsys)
    assert code == 2 and "pr\\xe9dictions.npy is not valid UTF-8" in _one_error(err)


def _no_work(*args, **kwargs):
    raise AssertionError("the evaluation started before the names were checked")


@pytest.mark.parametrize("command", ["evaluate", "demo"])
def test_out_name_longer_than_the_file_system_allows_is_refused_first(
    tmp_path, capsys, monkeypatch, command
):
    monkeypatch.setattr("bensemble.app.evaluate.api.evaluate_source", _no_work)
    monkeypatch.setattr("bensemble.app.demo._toy_runs", _no_work)
    name_max = os.pathconf(tmp_path, "PC_NAME_MAX")
    p, y = _inputs(tmp_path)
    # fits the file system, but not the staging folder's prefix beside it
    out = tmp_path / ("r" * (name_max - 10))
    argv = ["evaluate", p, "--labels", y, *FAST] if command == "evaluate" else ["demo", "--quick"]
    code, _, err = _run([*argv, "--out", out], capsys)
    line = _one_error(err, f"bensemble {command}")
    assert code == 2 and f"folder name of at most {name_max - 28} bytes" in line
    deep = tmp_path.joinpath(*["d" * 200] * 25)  # > PC_PATH_MAX in total
    code, _, err = _run([*argv, "--out", deep], capsys)
    assert code == 2 and "must be a path of at most" in _one_error(err, f"bensemble {command}")
    assert sorted(q.name for q in tmp_path.iterdir()) == ["p.npy", "y.npy"]


def test_reproduce_checks_the_out_name_before_training(tmp_path, capsys, monkeypatch):
    import bensemble.experiments.reproduce as reproduce

    monkeypatch.setattr(reproduce, "runner", _no_work)
    out = os.fsdecode(os.fsencode(str(tmp_path)) + b"/\xff")
    code, _, err = _run(["reproduce", "toy", "--quick", "--out", out], capsys)
    assert code == 2 and "is not valid UTF-8" in _one_error(err, "bensemble reproduce")


# ============================================================================ (d) printable names
HOSTILE = "p\x1b[31m\u202eyp.npy"


def test_error_line_shows_a_hostile_name_escaped(tmp_path, capsys):
    _, y = _inputs(tmp_path)
    code, _, err = _run(["evaluate", tmp_path / HOSTILE, "--labels", y, *FAST], capsys)
    line = _one_error(err)
    assert code == 2 and "\x1b" not in line and "\u202e" not in line
    assert "p\\x1b[31m\\u202eyp.npy does not exist" in line


def test_report_html_shows_a_hostile_input_name_escaped(tmp_path, capsys):
    p, y = _inputs(tmp_path, name=HOSTILE)
    code, _, err = _run(["evaluate", p, "--labels", y, "--out", tmp_path / "r", *FAST], capsys)
    assert code == 0, err
    page = (tmp_path / "r" / "report.html").read_text(encoding="utf-8")
    assert "\x1b" not in page and "\u202e" not in page
    assert "p\\x1b[31m\\u202eyp.npy" in page


def test_tables_and_pages_escape_control_and_bidi_characters():
    rows = [{"file": "a\u202eb\x1b[2Jc\nd", "n": 3}]
    for text in (format_table(rows), markdown_table(rows)):
        assert "a\\u202eb\\x1b[2Jc\\nd" in text and "\u202e" not in text and "\x1b" not in text
    page = render_html(
        HtmlReport(
            title="t\u202e",
            subtitle="s\x07",
            sections=[HtmlSection("x\u2066", notes=["n\x1b"], tables=[HtmlTable("r", rows)])],
            footer={"k\u202d": "v\u200f"},
        )
    )
    for raw, shown in [
        ("\u202e", "\\u202e"),
        ("\x07", "\\x07"),
        ("\u2066", "\\u2066"),
        ("\x1b", "\\x1b"),
        ("\u202d", "\\u202d"),
        ("\u200f", "\\u200f"),
    ]:
        assert raw not in page and shown in page
    assert "é" in render_html(HtmlReport(title="résumé"))  # letters are left alone


def test_an_os_error_is_one_line_with_status_1(capsys, monkeypatch):
    import bensemble.cli as cli

    def refuse(args):
        raise PermissionError(13, "Permission denied", "/no\x1b/where")

    monkeypatch.setattr(cli, "_dispatch", refuse)
    code, _, err = _run(["demo", "--quick"], capsys)
    assert code == 1 and _one_error(err, "bensemble demo").endswith(
        "Permission denied: /no\\x1b/where"
    )


# ======================================================================= (e) truncated while read
_TRUNCATE_WHEN_OPENED = """
import os, sys, threading, time
target, argv = os.path.realpath(sys.argv[1]), sys.argv[2:]

def opened():
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == target:
                return True
        except OSError:
            pass
    with open("/proc/self/maps") as maps:
        return any(target in line for line in maps)

def truncate_once_opened():
    while not opened():
        time.sleep(0.0005)
    os.truncate(target, 4096)

threading.Thread(target=truncate_once_opened, daemon=True).start()
from bensemble.cli import main
sys.exit(main(argv))
"""


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc")
def test_truncated_while_chunked_reading_exits_2_with_one_line(tmp_path):
    p, y = _inputs(tmp_path, n=200_000, m=1)
    cmd = [sys.executable, "-c", textwrap.dedent(_TRUNCATE_WHEN_OPENED), p]
    cmd += ["evaluate", p, "--labels", y, "--chunk-size", "500", *FAST, "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=600)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    line = _one_error(done.stderr)
    assert "Traceback" not in done.stderr and "p.npy" in line
    assert "truncated" in line or "changed while being read" in line
