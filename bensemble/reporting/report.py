"""A small report writer shared by ``bensemble demo``, ``evaluate`` and ``reproduce``.

A report is a folder of tables (each as Markdown, CSV and JSON), PNG figures and a self-contained
HTML page (:meth:`Report.add_html`, :mod:`bensemble.reporting.html`). Every file is
written atomically: the content goes to a temporary file in the same folder, which is then
renamed over the target with :func:`os.replace`, so a reader never sees a half-written file and
an interrupted run leaves no temporary file behind. The folder itself is created only when the
first file is written, so a run that fails before writing leaves nothing on disk.

The command-line reports use ``Report(out, staged=True)``: files go to a staging folder beside
``out`` and :meth:`Report.commit` swaps the finished folder in, so a report folder always holds
exactly one run's files (:mod:`bensemble.reporting._folder`). Their ``summary.json`` records
:func:`environment` (package, torch and numpy versions, Python and the platform).

The text forms of a table (:func:`format_table`, :func:`markdown_table`, :func:`to_json`, ...)
are defined in :mod:`bensemble.reporting._table_format` and re-exported here.

Example:
    >>> import tempfile
    >>> from bensemble.reporting.report import Report, format_table
    >>> rows = [{"method": "ensemble", "accuracy": 0.91234, "n": 400}]
    >>> print(format_table(rows))
    method    accuracy    n
    --------  --------  ---
    ensemble    0.9123  400
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     written = Report(tmp + "/report").add_table("metrics", rows, title="Test metrics")
    ...     sorted(p.name for p in written)
    ['metrics.csv', 'metrics.json', 'metrics.md']

matplotlib is imported only when a figure is added.
"""

from __future__ import annotations

import csv
import io
import os
import platform
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from bensemble._terminal import printable_name
from bensemble.reporting._checks import check_columns, check_digits, check_path, check_rows
from bensemble.reporting._folder import (
    check_report_folder,
    commit_folder,
    discard_stage,
    make_stage,
)
from bensemble.reporting._table_format import (
    _plain,
    format_table,
    format_value,
    json_text,
    markdown_table,
    table_columns,
    to_json,
)

__all__ = [
    "Report",
    "atomic_write",
    "atomic_write_text",
    "environment",
    "format_table",
    "format_value",
    "markdown_table",
    "table_columns",
    "to_json",
]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")
_MAX_DPI = 1200
_TMP_PREFIX = ".bensemble-tmp-"


# --------------------------------------------------------------------------- atomic writes
def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], Any]) -> Path:
    """Write a file atomically: ``write(handle)`` fills a temp file that then replaces ``path``.

    The temporary file lives in the target's folder (so :func:`os.replace` is a rename on one
    file system) and is removed if ``write`` raises. The parent folder must exist.

    Args:
        path: The final file.
        write: Called with a binary file handle open for writing.

    Returns:
        ``Path(path)``.

    Raises:
        ValueError: ``path`` is not a path or its folder does not exist, ``write`` is not
            callable (nothing is written).
    """
    target = _checked_target(path, "atomic_write")
    if not callable(write):
        raise ValueError(
            f"atomic_write: `write` must be a callable taking a binary file handle "
            f"(got {type(write).__name__})"
        )
    fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        # mkstemp creates owner-only files; a report is for reading, so honour the umask.
        os.chmod(tmp, 0o666 & ~_current_umask())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return target


def _checked_target(path: Any, fn: str) -> Path:
    target = Path(check_path(path, "path", fn))
    if not target.parent.is_dir():
        raise ValueError(
            f"{fn}: `path` must be a file in an existing folder (got {printable_name(target)}; "
            f"its folder {printable_name(target.parent)} is not one)"
        )
    return target


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write UTF-8 ``text`` to ``path`` atomically (see :func:`atomic_write`)."""
    if not isinstance(text, str):
        raise ValueError(f"atomic_write_text: `text` must be a str (got {type(text).__name__})")
    _checked_target(path, "atomic_write_text")
    data = text.encode("utf-8")
    return atomic_write(path, lambda handle: handle.write(data))


# --------------------------------------------------------------------------- the report
def environment() -> dict[str, str]:
    """Versions a report records: bensemble, torch, numpy, Python and the platform."""
    import numpy
    import torch

    import bensemble

    return {
        "bensemble": bensemble.__version__,
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


class Report:
    """A report folder of tables and figures, every file written atomically.

    Args:
        out_dir: The folder; created (with parents) when the first file is written.
        staged: Write into a staging folder beside ``out_dir`` and move it to ``out_dir`` on
            :meth:`commit` (or at the end of a ``with`` block; an exception discards it), so the
            folder holds exactly this run's files. ``out_dir`` is checked at once: an absent or
            empty folder is used, an earlier report is replaced only with ``overwrite``, and a
            folder holding anything else is refused (``ValueError``).
        overwrite: With ``staged``, replace an earlier report in ``out_dir``.

    Attributes:
        out_dir: The folder as a :class:`~pathlib.Path`.
        files: Every file written so far (their final paths), in order.
    """

    def __init__(
        self, out_dir: str | os.PathLike, *, staged: bool = False, overwrite: bool = False
    ) -> None:
        self.out_dir = Path(check_path(out_dir, "out_dir", "Report"))
        self.files: list[Path] = []
        self.staged = bool(staged)
        self.overwrite = bool(overwrite)
        self._stage: Path | None = None
        if self.staged:
            check_report_folder(
                self.out_dir, overwrite=self.overwrite, fn="Report", option="`out_dir`"
            )

    def __enter__(self) -> Report:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.discard()

    def commit(self) -> None:
        """Move the staged files to ``out_dir`` (replacing an earlier report there if allowed).

        Nothing happens for an unstaged report or one that wrote nothing.
        """
        if self._stage is not None:
            stage, self._stage = self._stage, None
            try:
                commit_folder(stage, self.out_dir, overwrite=self.overwrite, fn="Report")
            except BaseException:
                discard_stage(stage)
                raise

    def discard(self) -> None:
        """Remove the staged files (a failed run leaves nothing behind)."""
        stage, self._stage = self._stage, None
        discard_stage(stage)
        if self.staged:
            self.files = []

    # paths ---------------------------------------------------------------
    def path(self, name: str, ext: str) -> Path:
        """The file for ``name`` + ``ext`` (``".png"``); ``name`` must be a plain file stem."""
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValueError(
                f"Report: `name` must be a file stem of letters, digits, '_', '-', '.' "
                f"(got {name!r})"
            )
        return self.out_dir / f"{name}{ext}"

    def _where(self, path: Path) -> Path:
        """Where ``path`` (a final path from :meth:`path`) is written now."""
        return path if self._stage is None else self._stage / path.name

    def _ensure_dir(self) -> None:
        if self.staged:
            if self._stage is None:
                self._stage = make_stage(self.out_dir)
            return
        if self.out_dir.exists() and not self.out_dir.is_dir():
            raise ValueError(f"Report: `out_dir` {self.out_dir} exists and is not a folder")
        self.out_dir.mkdir(parents=True, exist_ok=True)

    def _record(self, path: Path) -> Path:
        if path not in self.files:
            self.files.append(path)
        return path

    # writers -------------------------------------------------------------
    def add_text(self, filename: str, text: str) -> Path:
        """Write ``text`` to ``out_dir/filename`` atomically (``filename`` includes the suffix)."""
        if not isinstance(filename, str) or not _NAME.fullmatch(filename):
            raise ValueError(
                f"Report.add_text: `filename` must be a file name of letters, digits, '_', '-', "
                f"'.' (got {filename!r})"
            )
        if not isinstance(text, str):
            raise ValueError(f"Report.add_text: `text` must be a str (got {type(text).__name__})")
        stem, dot, ext = filename.rpartition(".")
        path = self.path(stem, dot + ext) if dot and stem else self.path(filename, "")
        self._ensure_dir()
        atomic_write_text(self._where(path), text)
        return self._record(path)

    def add_json(self, name: str, obj: Any) -> Path:
        """Write ``obj`` as strict JSON to ``name.json`` (non-finite floats become ``null``)."""
        return self.add_text(f"{name}.json", json_text(obj, 2, "Report.add_json", "obj") + "\n")

    def add_table(
        self,
        name: str,
        rows: Sequence[Mapping[str, Any]],
        title: str | None = None,
        columns: Sequence[str] | None = None,
        digits: int = 4,
    ) -> list[Path]:
        """Write one table as ``name.md``, ``name.csv`` and ``name.json``.

        The Markdown rounds floats to ``digits`` decimals; CSV and JSON keep full precision.
        The JSON file is ``{"title": ..., "columns": [...], "rows": [...]}``.

        Returns:
            The three paths written.
        """
        fn = "Report.add_table"
        rows = [dict(r) for r in check_rows(rows, fn)]
        columns, digits = check_columns(columns, fn), check_digits(digits, fn)
        cols = columns if columns is not None else table_columns(rows)
        paths = [self.path(name, ext) for ext in (".md", ".csv", ".json")]  # validates name
        heading = f"## {printable_name(title)}\n\n" if title else ""
        md = heading + markdown_table(rows, cols, digits)

        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(cols)
        for row in rows:
            cells = []
            for c in cols:
                v = _plain(row.get(c))
                cells.append("" if v is None else repr(v) if isinstance(v, float) else v)
            writer.writerow(cells)

        payload = {"title": title, "columns": cols, "rows": rows}
        self._ensure_dir()
        for path, text in zip(paths, (md, buffer.getvalue(), to_json(payload) + "\n")):
            atomic_write_text(self._where(path), text)
        return [self._record(p) for p in paths]

    def add_html(self, name: str, report: Any) -> Path:
        """Write an :class:`~bensemble.reporting.html.HtmlReport` as ``name.html`` atomically."""
        from bensemble.reporting.html import render_html

        self.path(name, ".html")  # validates name before the page is rendered
        return self.add_text(f"{name}.html", render_html(report))

    def add_figure(self, name: str, fig: Any, *, dpi: int = 120, close: bool = True) -> Path:
        """Save a matplotlib figure as ``name.png`` atomically, then close it (``close=True``).

        ``dpi``: dots per inch, in ``(0, 1200]`` (the PNG's pixels grow with its square).
        """
        if not callable(getattr(fig, "savefig", None)):
            raise ValueError(
                f"Report.add_figure: `fig` must be a matplotlib Figure (got {type(fig).__name__})"
            )
        path = self.path(name, ".png")
        try:
            ok = isinstance(dpi, (int, float)) and not isinstance(dpi, bool)
            if not ok or not 0 < dpi <= _MAX_DPI:
                raise ValueError(
                    f"Report.add_figure: `dpi` must be a number in (0, {_MAX_DPI}] (got {dpi!r})"
                )
            self._ensure_dir()
            atomic_write(
                self._where(path), lambda handle: fig.savefig(handle, format="png", dpi=dpi)
            )
        finally:
            if close:
                import matplotlib.pyplot as plt

                plt.close(fig)
        return self._record(path)
