"""The console script exits without the interpreter's teardown (issue 21: ~0.5 s CPU of a small
``bensemble evaluate``), yet keeps what an ordinary exit does: ``atexit`` handlers run, buffered
output reaches its reader, the status is main's, and a running non-daemon thread is waited for.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # stdout buffered
ENV.update(PYTHONPATH=ROOT, MPLBACKEND="Agg")

_SCRIPT = """
import atexit, sys, threading, time
from pathlib import Path

import bensemble.cli as cli

marker = Path(sys.argv[1])
atexit.register(lambda: marker.write_text("atexit ran"))
atexit.register(lambda: sys.stdout.write("written at exit"))  # after main's own flush
if sys.argv[2] == "thread":
    returned = threading.Event()
    main = cli.main
    cli.main = lambda *a: (main(*a), returned.set())[0]
    def late():
        returned.wait()
        time.sleep(0.5)  # outlasts the command
        Path(str(marker) + ".thread").write_text("thread finished")
    threading.Thread(target=late).start()
sys.stdout.write("buffered, never flushed by the command")  # no newline: still in the buffer
sys.argv = ["bensemble", *sys.argv[3:]]
cli.console()
raise AssertionError("console() returned")
"""


def _run(tmp_path, mode, *argv):
    marker = tmp_path / "marker"
    code = textwrap.dedent(_SCRIPT)
    done = subprocess.run(
        [sys.executable, "-c", code, str(marker), mode, *argv],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
    )
    return done, marker


def test_atexit_handlers_run_and_output_is_flushed(tmp_path):
    done, marker = _run(tmp_path, "plain", "--version")
    assert done.returncode == 0, done.stderr
    assert marker.read_text() == "atexit ran"
    assert done.stdout.startswith("buffered, never flushed by the command")
    assert done.stdout.endswith("written at exit")
    assert "bensemble" in done.stdout and "console() returned" not in done.stderr


def test_the_status_is_mains(tmp_path):
    done, marker = _run(tmp_path, "plain", "evaluate", str(tmp_path / "missing.npy"), "--labels")
    assert done.returncode == 2
    assert marker.read_text() == "atexit ran"
    assert done.stderr.strip().startswith("bensemble evaluate: error:")


def test_a_running_thread_is_waited_for(tmp_path):
    done, marker = _run(tmp_path, "thread", "--version")
    assert done.returncode == 0, done.stderr
    assert Path(str(marker) + ".thread").read_text() == "thread finished"
    assert marker.read_text() == "atexit ran"
