"""``report.html`` in a real headless browser (Debian's ``chromium``) at 1280 px and 390 px.

The page comes from ``bensemble evaluate`` on small synthetic predictions; the browser loads it,
and the test asserts what a reader would see: every figure decoded (no broken image), the verdict
block shown with a status word on each card, no horizontal scrolling of the page at phone width
(wide tables scroll inside their own box), and a screenshot of the requested size. The harness
(``scripts/report_screenshots.py``) drives ``chromium --headless`` with plain command lines.

Skipped, with its reason, when ``chromium`` is not installed (``make test`` installs it as root).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "_report_screenshots", ROOT / "scripts" / "report_screenshots.py"
)
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)

CHROMIUM = harness.find_chromium()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium not installed (as root `make test` installs it; or apt-get install chromium)",
)


WIDTHS = [1280, 390]
HEIGHT = 900


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("browser")
    return harness.report_html(folder)  # raises when evaluate wrote no report.html


@pytest.mark.parametrize("width", WIDTHS)
def test_report_reads_well_in_a_browser(page, width, tmp_path):
    shot = tmp_path / f"report_{width}.png"
    facts = harness.page_facts(CHROMIUM, page, width, tmp_path, HEIGHT, screenshot=shot)
    assert facts["viewport"] == width, "the page was not laid out at the requested width"
    # every figure loaded
    assert facts["images"] >= 1
    assert facts["broken"] == [], f"images not decoded: {facts['broken']}"
    assert facts["wideImages"] == [], f"images wider than the page: {facts['wideImages']}"
    # the verdict block, each card with its status in words
    assert facts["verdictBlock"], "no visible #verdict block"
    assert facts["verdicts"] >= 1
    assert len(facts["statusLabels"]) == facts["verdicts"] and all(facts["statusLabels"])
    # no horizontal overflow of the page: wide content scrolls inside its own box
    assert facts["scrollWidth"] <= facts["clientWidth"], (
        f"the page scrolls sideways at {width} px ({facts['scrollWidth']} > "
        f"{facts['clientWidth']}); sticking out: {facts['overflowing']}"
    )
    assert facts["overflowing"] == []
    # the screenshot of the same run
    assert shot.is_file() and harness.png_size(shot) == (width, HEIGHT)


def test_the_harness_sees_a_broken_image_and_overflow(tmp_path):
    """The checks above can fail: a broken image, a too-wide block and a long word are seen."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"></head><body>'
        '<section id="verdict"><div class="verdict"><p class="status">Good</p></div></section>'
        '<img alt="broken" src="data:image/png;base64,AAAA">'
        '<div class="wide" style="width:600px">too wide for a phone</div>'
        f'<p class="long">{"x" * 120}</p></body></html>',
        encoding="utf-8",
    )
    facts = harness.page_facts(CHROMIUM, bad, 390, tmp_path, height=400)
    assert facts["viewport"] == 390
    assert facts["broken"] == ["broken"]
    assert facts["scrollWidth"] > facts["clientWidth"]
    culprits = sorted(e.split(" ")[0] for e in facts["overflowing"])
    assert culprits == ["div.wide", "p.long"]  # the innermost elements, not their ancestors
    assert facts["verdictBlock"] and facts["statusLabels"] == ["Good"]
