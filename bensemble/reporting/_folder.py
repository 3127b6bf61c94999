"""Report folders that always hold exactly one run's files.

A run writes into a fresh staging folder beside its target (``.bensemble-tmp-<name>-XXXX`` in
the same parent, so every move is a rename on one file system) and, once everything is written,
swaps it in with :func:`commit_folder`: a single :func:`os.rename` when the target is absent or
empty, otherwise the old folder is renamed aside, the new one renamed in, and the old one
deleted. Files of two runs therefore never mix, whatever the order in which concurrent runs
finish: each rename moves a whole folder. A run that fails removes its staging folder.

What may be replaced is decided by :func:`check_report_folder`: an absent or empty folder is
always used; a folder holding only report files (``.md``, ``.csv``, ``.json``, ``.png``,
``.html``, ``.txt``) is a previous report and is replaced only with ``overwrite=True``
(``--overwrite``); a folder holding anything else (a sub-folder, a ``.npy``, a ``.tex``) is
never replaced.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import uuid
from pathlib import Path

__all__ = [
    "OLD_PREFIX",
    "REPORT_SUFFIXES",
    "STAGE_PREFIX",
    "check_out_text",
    "check_report_folder",
    "commit_folder",
    "discard_stage",
    "make_stage",
]

#: File suffixes a report folder may hold (anything else marks a folder that is not ours).
REPORT_SUFFIXES = (".md", ".csv", ".json", ".png", ".txt", ".html")
STAGE_PREFIX = ".bensemble-tmp-"
OLD_PREFIX = ".bensemble-old-"
_RETRIES = 10


def check_out_text(out: object, fn: str, option: str = "--out") -> Path:
    """``out`` as a :class:`~pathlib.Path`, refusing ``None`` and empty or blank strings.

    ``Path("")`` is the current folder: an empty ``--out`` would write the report there.
    """
    if out is None or (isinstance(out, str) and not out.strip()):
        raise ValueError(f"{fn}: {option} must name a folder (got {out!r})")
    if not isinstance(out, (str, os.PathLike)):
        raise ValueError(f"{fn}: {option} must be a path (got {type(out).__name__})")
    return Path(out)


def check_report_folder(folder: Path, *, overwrite: bool, fn: str, option: str = "--out") -> None:
    """Refuse a ``folder`` this run may not fill (see the module docstring)."""
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{fn}: {option} {folder} exists and is not a folder")
    if not folder.is_dir():
        return
    with os.scandir(folder) as it:  # DirEntry types come from the listing itself: no races
        entries = sorted(it, key=lambda e: e.name)
    if not entries:
        return
    foreign = [
        e.name
        for e in entries
        if not e.is_file(follow_symlinks=False)
        or os.path.splitext(e.name)[1].lower() not in REPORT_SUFFIXES
    ]
    if foreign:
        raise ValueError(
            f"{fn}: {option} {folder} holds {foreign[0]!r}, which is not a report file; a report "
            "folder is replaced as a whole, so choose an empty or new folder"
        )
    if not overwrite:
        raise ValueError(
            f"{fn}: {option} {folder} already holds a report ({len(entries)} files); pass "
            "--overwrite to replace it, or choose another folder"
        )


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def make_stage(target: Path) -> Path:
    """A fresh, empty staging folder beside ``target`` (parents created)."""
    real = Path(os.path.abspath(target))
    real.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f"{STAGE_PREFIX}{real.name}-", dir=real.parent))
    os.chmod(stage, 0o777 & ~_umask())  # mkdtemp makes it owner-only; a report is for reading
    return stage


def commit_folder(stage: Path, target: Path, *, overwrite: bool, fn: str) -> None:
    """Move the finished ``stage`` to ``target``, replacing an earlier report there if allowed.

    Raises:
        ValueError: ``target`` meanwhile holds something :func:`check_report_folder` refuses.
        OSError: the move failed, or other runs kept taking the target (after retries).
    """
    real = Path(os.path.abspath(target))
    for _ in range(_RETRIES):
        try:
            os.rename(stage, real)  # atomic; succeeds when real is absent or an empty folder
            return
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                raise
        if not real.exists():
            continue  # another run moved it away meanwhile
        try:
            before = os.stat(real).st_ino
            check_report_folder(real, overwrite=overwrite, fn=fn)
        except FileNotFoundError:
            continue  # moved away while we looked at it
        except ValueError:
            try:
                if os.stat(real).st_ino != before:
                    continue  # another run swapped its folder in while we looked
            except FileNotFoundError:
                continue
            raise
        old = real.parent / f"{OLD_PREFIX}{real.name}-{uuid.uuid4().hex[:12]}"
        try:
            os.rename(real, old)
        except FileNotFoundError:
            continue
        try:
            os.rename(stage, real)
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            continue  # a concurrent run moved in first; try again
        finally:
            shutil.rmtree(old, ignore_errors=True)
        return
    raise OSError(f"{fn}: could not move the report into {target}: other runs keep writing there")


def discard_stage(stage: Path | None) -> None:
    """Remove an unfinished staging folder (nothing happens when there is none)."""
    if stage is not None:
        shutil.rmtree(stage, ignore_errors=True)
