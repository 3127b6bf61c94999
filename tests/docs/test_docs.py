"""The documentation site: it builds with ``--strict``, and every guide code block runs.

Code-block convention (documented in ``docs/architecture.md``): every ```` ```python ```` block
of a page under ``docs/`` is executed, in order, in one namespace per page, in a temporary
working directory. A block that cannot run offline is preceded by the HTML comment
``<!-- skip: <reason> -->`` (keep these rare). Blocks in other languages (``bash``, ``text``)
are not run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

_BLOCK = re.compile(
    r"(?P<skip><!--\s*skip:(?P<reason>[^>]*)-->\s*\n)?^```python[^\n]*\n(?P<code>.*?)^```\s*$",
    re.MULTILINE | re.DOTALL,
)


def python_blocks(text: str) -> list[tuple[int, str, str | None]]:
    """``(line, code, skip_reason)`` for every ```` ```python ```` block of a Markdown page."""
    blocks = []
    for m in _BLOCK.finditer(text):
        line = text.count("\n", 0, m.start("code")) + 1
        reason = m.group("reason").strip() if m.group("skip") else None
        blocks.append((line, m.group("code"), reason))
    return blocks


PAGES = sorted(p for p in DOCS.rglob("*.md") if python_blocks(p.read_text(encoding="utf-8")))


def test_block_extraction_follows_the_convention():
    page = (
        "text\n```python\na = 1\n```\n<!-- skip: needs a GPU -->\n```python\nb = 2\n```\n"
        "```bash\nmake demo\n```\n"
    )
    blocks = python_blocks(page)
    assert [(code, reason) for _, code, reason in blocks] == [
        ("a = 1\n", None),
        ("b = 2\n", "needs a GPU"),
    ]
    assert blocks[0][0] == 3


def test_there_are_guide_pages_with_code():
    names = {p.relative_to(DOCS).as_posix() for p in PAGES}
    assert "guide/ensembles.md" in names and "guide/epistemic-calibration.md" in names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_guide_code_blocks_run(page, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    monkeypatch.chdir(tmp_path)
    # The examples train tiny networks: intra-op threads only add contention on small CPUs.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    namespace: dict = {"__name__": "__docs__"}
    blocks = python_blocks(page.read_text(encoding="utf-8"))
    assert blocks, f"{page}: no python blocks found"
    try:
        for line, code, reason in blocks:
            if reason is not None:
                assert reason, f"{page}:{line}: a skipped block must give its reason"
                continue
            try:
                exec(compile(code, f"{page.name}:{line}", "exec"), namespace)
            except Exception as exc:  # re-raised with the page and line of the block
                raise AssertionError(
                    f"{page.relative_to(ROOT)}, block at line {line}: {exc!r}"
                ) from exc
    finally:
        torch.set_num_threads(threads)
        plt.close("all")


def _mkdocs() -> list[str] | None:
    try:
        import material  # noqa: F401
        import mkdocs  # noqa: F401
        import mkdocstrings  # noqa: F401
    except ImportError:
        return None
    return [sys.executable, "-m", "mkdocs"]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site built once with ``--strict`` (what ``make docs`` runs)."""
    cmd = _mkdocs()
    if cmd is None:
        pytest.skip("mkdocs-material / mkdocstrings not installed (pip install -e '.[dev]')")
    out = tmp_path_factory.mktemp("docs") / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    proc = subprocess.run(
        [*cmd, "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    assert time.perf_counter() - start < 600
    return out


def test_site_builds_strict(site):
    html = (site / "api" / "metrics.html").read_text(encoding="utf-8")
    assert "expected_epistemic_calibration_error" in html
    # Offline: no page may pull fonts or scripts from the network.
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert "fonts.googleapis.com" not in text, page
        assert not re.search(r"<script[^>]+src=\"https?://", text), page
    _assert_readable_from_disk(site)


def test_search_works_from_disk(site, tmp_path):
    """Opened as file://, with no server: a query shows results (needs the local worker shim
    that ``make docs-assets`` fetches, and chromium, which ``make test`` installs as root)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium not installed (as root `make test` installs it)")
    if not (site / "assets" / "vendor" / "iframe-worker-shim.js").is_file():
        pytest.skip("the search shim was not fetched (`make docs-assets`; npm registry)")
    profile = tmp_path / "profile"
    done = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",  # as root (containers, CI); the pages are our own files
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--virtual-time-budget=10000",
            "--dump-dom",
            (site / "index.html").as_uri() + "?q=temperature",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HOME": str(profile)},
    )
    found = re.search(r'md-search-result__meta">(\d+) matching document', done.stdout)
    assert found and int(found.group(1)) >= 1, "search from file:// showed no results"


def _assert_readable_from_disk(site: Path) -> None:
    """Opened as file:// pages: every local link names a file that exists (no directory links,
    which a browser shows as a listing), and search needs no server (the offline plugin's
    script-loaded index)."""
    href = re.compile(r'href="([^"#?]+)')
    for page in site.rglob("*.html"):
        if page.name == "404.html":  # served by a web server only; its links are root-relative
            continue
        for target in href.findall(page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):  # http:, mailto:, data:
                continue
            resolved = (page.parent / target).resolve()
            assert resolved.is_file(), f"{page.relative_to(site)} links to {target}"
    assert (site / "search" / "search_index.js").is_file()  # the index as a script, no fetch()
    index = (site / "index.html").read_text(encoding="utf-8")
    assert 'src="assets/vendor/iframe-worker-shim.js"' in index  # the worker shim, local
    if (DOCS / "assets" / "vendor" / "iframe-worker-shim.js").is_file():  # make docs-assets ran
        assert (site / "assets" / "vendor" / "iframe-worker-shim.js").is_file()


def test_every_nav_page_exists():
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))

    def walk(items):
        for item in items:
            for value in item.values():
                if isinstance(value, list):
                    yield from walk(value)
                else:
                    yield value

    missing = [p for p in walk(config["nav"]) if not (DOCS / p).is_file()]
    assert not missing, missing


def test_architecture_page_names_only_files_that_exist():
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    paths = set(re.findall(r"`((?:bensemble|tests|docs|benchmarks)/[\w./]*)`", text))
    paths |= set(re.findall(r"`([\w./-]+\.(?:py|md|yml|toml))`", text))
    assert len(paths) >= 5, paths
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, (
        f"docs/architecture.md names files that are not in the repository: {missing}"
    )


def test_docstring_rewrites_render_rest_habits_as_markdown():
    pytest.importorskip("griffe")
    import importlib.util

    spec = importlib.util.spec_from_file_location("_griffe_examples", DOCS / "_griffe_examples.py")
    ext = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ext)
    text = (
        "Summary with :func:`~bensemble.metrics.aurc` and :class:`Ensemble`.\n\n"
        "    .. math:: a = b\n"
        "              + c\n\n"
        "    Example:\n"
        "        >>> 1 + 1\n"
        "        2\n"
    )
    out = ext._math_blocks(ext._EXAMPLE.sub(r"\1Examples:", ext._ROLE.sub(ext._role, text)))
    assert "`aurc`" in out and "`Ensemble`" in out and ":func:" not in out
    assert "    ```text\n    a = b\n    + c\n    ```" in out
    assert "    Examples:\n" in out and "Example:\n" not in out.replace("Examples:", "")
