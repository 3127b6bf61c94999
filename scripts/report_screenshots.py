"""Screenshots of the HTML report of `bensemble evaluate`, and the browser harness of its test.

Regenerate the README's screenshots (Debian's ``chromium`` must be installed)::

    PYTHONPATH=. python scripts/report_screenshots.py

writes ``docs/figures/report_1280.png`` and ``docs/figures/report_390.png``: the report of a
``bensemble evaluate`` run on synthetic predictions (seeded, so the page is the same every
time), laid out at 1280 px and at a phone's 390 px: the top of the page, at most ``--max-height``
(1800) px. ``make screenshots`` runs it (and installs chromium as root when it is missing).

The harness drives ``chromium --headless`` with plain command lines (no Python package):
:func:`page_facts` loads the page and reads back facts computed in the browser (images decoded,
widths, the verdict block), :func:`screenshot` takes a PNG. Chromium's headless window is never
narrower than 500 px, so the page is shown in an ``<iframe>`` exactly ``width`` px wide inside
a small frame page: the report is laid out (media queries included) at that width, and the
screenshot, cut to ``width``, shows just the frame. :func:`page_facts` reports the width the
page saw, so a caller can check the emulation worked.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 120  # per browser run; a loaded 2-core CI machine needs far less than this
_FACTS = re.compile(r'data-facts="([^"]*)"')

# Runs in the frame page once the report (and its images) loaded; writes the facts into the DOM.
_FACTS_SCRIPT = """
window.addEventListener('load', function () {
  var facts = {};
  try {
    var frame = document.getElementById('page'), w = frame.contentWindow, d = frame.contentDocument;
    var root = d.documentElement, all = d.body.querySelectorAll('*');
    var imgs = Array.prototype.slice.call(d.images);
    facts.viewport = w.innerWidth;
    facts.scrollWidth = root.scrollWidth;
    facts.clientWidth = root.clientWidth;
    facts.height = root.scrollHeight;
    facts.images = imgs.length;
    facts.broken = imgs.filter(function (i) { return !(i.complete && i.naturalWidth > 0); })
      .map(function (i) { return i.alt || i.src.slice(0, 40); });
    facts.wideImages = imgs.filter(function (i) {
      return i.getBoundingClientRect().right > root.clientWidth + 0.5; })
      .map(function (i) { return i.alt; });
    var block = d.getElementById('verdict');
    facts.verdictBlock = !!block && block.getBoundingClientRect().height > 0;
    facts.verdicts = block ? block.querySelectorAll('.verdict').length : 0;
    facts.statusLabels = Array.prototype.map.call(d.querySelectorAll('#verdict .verdict .status'),
      function (s) { return s.textContent.trim(); });
    facts.scrollBoxes = d.querySelectorAll('.table-wrap').length;
    var clips = function (e) {
      var o = w.getComputedStyle(e).overflowX;
      return o === 'auto' || o === 'scroll' || o === 'hidden' || o === 'clip';
    };
    var inScrollBox = function (e) {
      for (var a = e.parentElement; a && a !== d.body; a = a.parentElement) {
        if (clips(a)) return true;
      }
      return false;
    };
    // an element's box, or its content (a long word, a wide child), reaching past the page
    var sticksOut = Array.prototype.filter.call(all, function (e) {
      var r = e.getBoundingClientRect();
      var right = clips(e) ? r.right : Math.max(r.right, r.left + e.scrollWidth);
      return right > root.clientWidth + 0.5 && !inScrollBox(e);
    });
    // name the innermost culprits, not every ancestor
    facts.overflowing = sticksOut.filter(function (e) {
      return !sticksOut.some(function (o) { return o !== e && e.contains(o); });
    }).slice(0, 10).map(function (e) {
      return e.tagName.toLowerCase() + (e.className ? '.' + e.className : '') + ' '
        + e.textContent.slice(0, 30);
    });
  } catch (err) {
    facts.error = String(err);
  }
  document.body.setAttribute('data-facts', JSON.stringify(facts));
});
"""


def find_chromium() -> str | None:
    """The ``chromium`` executable (``$BENSEMBLE_CHROMIUM`` first), or ``None``."""
    for name in (os.environ.get("BENSEMBLE_CHROMIUM"), "chromium", "chromium-browser"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _frame_page(report: Path, width: int, height: int) -> str:
    """A page holding ``report`` in an iframe ``width`` x ``height`` px (srcdoc: same origin)."""
    doc = html.escape(report.read_text(encoding="utf-8"), quote=True)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>frame</title>'
        "<style>html,body{margin:0;padding:0;overflow:hidden;background:#fff}"
        "iframe{border:0;display:block}</style></head><body>"
        f'<iframe id="page" title="report" width="{width}" height="{height}" srcdoc="{doc}">'
        f"</iframe><script>{_FACTS_SCRIPT}</script></body></html>"
    )


def _chromium(chromium: str, args: list[str], work: Path) -> str:
    """Run headless chromium once with a private profile under ``work``; its stdout."""
    profile = Path(tempfile.mkdtemp(prefix="profile-", dir=work))
    env = dict(
        os.environ, HOME=str(profile), XDG_CONFIG_HOME=str(profile), XDG_CACHE_HOME=str(profile)
    )
    cmd = [
        chromium,
        "--headless",
        "--no-sandbox",  # needed as root (containers, CI); the page is our own file
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
        "--mute-audio",
        f"--user-data-dir={profile}",
        *args,
    ]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    if done.returncode != 0:
        raise RuntimeError(f"chromium exited with {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


def page_facts(
    chromium: str,
    report: Path,
    width: int,
    work: Path,
    height: int = 900,
    screenshot: Path | None = None,
) -> dict:
    """Load ``report`` at ``width`` px and return what the browser saw.

    Keys: ``viewport`` (the width the page was laid out at), ``scrollWidth`` / ``clientWidth``
    of the document (more scroll than client width is horizontal overflow), ``overflowing`` (up
    to 10 elements sticking out of the page and not inside a scroll box), ``images`` and
    ``broken`` (alt texts of images not decoded), ``wideImages``, ``verdictBlock`` (the
    ``#verdict`` block is shown), ``verdicts``, ``statusLabels``, ``scrollBoxes``, ``height``.
    With ``screenshot``, the same run also saves a ``width`` x ``height`` PNG of the page's top.
    """
    frame = work / f"facts-{width}.html"
    frame.write_text(_frame_page(report, width, height), encoding="utf-8")
    shot = [f"--screenshot={screenshot.resolve()}"] if screenshot is not None else []
    if screenshot is not None:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
    # --virtual-time-budget: the dump waits for the load event and the page's tasks in virtual
    # time (no real sleep), so the facts are written before the DOM is read.
    out = _chromium(
        chromium,
        [
            f"--window-size={width},{height}",
            "--virtual-time-budget=30000",
            *shot,
            "--dump-dom",
            frame.as_uri(),
        ],
        work,
    )
    found = _FACTS.search(out)
    if found is None:
        raise RuntimeError(f"the page wrote no facts; chromium printed {out[:300]!r}")
    facts = json.loads(html.unescape(found.group(1)))
    if "error" in facts:
        raise RuntimeError(f"the facts script failed in the browser: {facts['error']}")
    if screenshot is not None and not screenshot.is_file():
        raise RuntimeError(f"chromium wrote no screenshot {screenshot}")
    return facts


def screenshot(chromium: str, report: Path, png: Path, width: int, height: int, work: Path) -> Path:
    """A ``width`` x ``height`` PNG of the top of ``report`` laid out at ``width`` px."""
    page_facts(chromium, report, width, work, height, screenshot=png)
    return png


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) of a PNG file, from its header."""
    head = Path(path).read_bytes()[:24]
    if not head.startswith(b"\x89PNG\r\n\x1a\n") or head[12:16] != b"IHDR":
        raise ValueError(f"png_size: `path` must be a PNG file (got {path})")
    return struct.unpack(">II", head[16:24])


# ----------------------------------------------------------------------------- the report
def synthetic_predictions(folder: Path, m: int = 5, n: int = 3000, k: int = 4) -> tuple[Path, Path]:
    """Seeded member logits [m, n, k] around true logits (overconfident by a factor 1.4) and
    labels drawn from the true probabilities."""
    import numpy as np

    rng = np.random.default_rng(0)
    true_logits = 2.0 * rng.standard_normal((n, k))
    true_probs = np.exp(true_logits) / np.exp(true_logits).sum(1, keepdims=True)
    labels = (rng.random((n, 1)) > true_probs.cumsum(1)).sum(1).astype(np.int64)
    logits = 1.4 * (true_logits[None] + 0.5 * rng.standard_normal((m, n, k)))
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "logits.npy", logits)
    np.save(folder / "labels.npy", labels)
    return folder / "logits.npy", folder / "labels.npy"


def report_html(folder: Path) -> Path:
    """``bensemble evaluate`` on :func:`synthetic_predictions` in ``folder`` (paths relative
    to it, so the page names no temporary directory); its ``report.html``."""
    import contextlib
    import io

    from bensemble.cli import main

    folder.mkdir(parents=True, exist_ok=True)
    with contextlib.chdir(folder):
        logits, labels = synthetic_predictions(Path("inputs"))
        argv = ["evaluate", str(logits), "--labels", str(labels), "--logits"]
        argv += ["--calibration-split", "0.5", "--out", "report"]
        with contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
    if code not in (0, None):
        raise RuntimeError(f"bensemble evaluate exited with {code}")
    page = folder / "report" / "report.html"
    if not page.is_file():
        raise RuntimeError(f"bensemble evaluate wrote no {page}")
    return page


def shrink_png(path: Path) -> None:
    """Re-save a screenshot with a 128-colour palette (about a third of the bytes, text stays
    sharp); left as it is when Pillow (matplotlib's dependency) is missing."""
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - matplotlib installs Pillow
        return
    with Image.open(path) as image:
        palette = image.convert("RGB").quantize(
            colors=128, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE
        )
    palette.save(path, optimize=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "figures")
    parser.add_argument("--html", type=Path, help="screenshot this page instead of an evaluate run")
    parser.add_argument("--max-height", type=int, default=1800)
    args = parser.parse_args(argv)
    chromium = find_chromium()
    if chromium is None:
        print(
            "report_screenshots: chromium is not installed (apt-get install chromium)",
            file=sys.stderr,
        )
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        page = args.html if args.html else report_html(work / "run")
        for width in (1280, 390):
            height = min(page_facts(chromium, page, width, work)["height"], args.max_height)
            shot = screenshot(chromium, page, args.out / f"report_{width}.png", width, height, work)
            shrink_png(shot)
            print(f"{shot} {png_size(shot)[0]}x{png_size(shot)[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
