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

A ``--out`` that is a symbolic link (or lies under one) is written **into its target**: the staging
folder is made beside the resolved target and renamed onto it, so the link itself is never
renamed away or replaced (a link whose target does not exist yet gets that target created; a
link loop is refused). Names are checked before any work (:func:`check_folder_name`): a name
that is not valid UTF-8 (it could not be shown or recorded in ``summary.json`` and the HTML
page), a component longer than the file system allows (``os.pathconf`` ``PC_NAME_MAX``; the
folder's own name must leave room for the staging prefix) or a path longer than ``PC_PATH_MAX``
is refused with one line, instead of failing once the report is computed.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import uuid
from pathlib import Path

from bensemble._terminal import is_valid_utf8, printable_name

__all__ = [
    "NAME_RESERVE",
    "OLD_PREFIX",
    "PATH_RESERVE",
    "REPORT_SUFFIXES",
    "STAGE_PREFIX",
    "check_folder_name",
    "check_out_text",
    "check_report_folder",
    "commit_folder",
    "discard_stage",
    "make_stage",
    "resolved_folder",
]

#: File suffixes a report folder may hold (anything else marks a folder that is not ours).
REPORT_SUFFIXES = (".md", ".csv", ".json", ".png", ".txt", ".html")
STAGE_PREFIX = ".bensemble-tmp-"
OLD_PREFIX = ".bensemble-old-"
_RETRIES = 10
#: Bytes a staged folder's name adds to the target's (``.bensemble-old-`` + ``-`` + 12 hex).
NAME_RESERVE = len(OLD_PREFIX) + 1 + 12
#: Bytes of path kept free below the folder (an experiment's sub-folder, file names, temps).
PATH_RESERVE = NAME_RESERVE + 1 + 128
_DEFAULT_NAME_MAX, _DEFAULT_PATH_MAX = 255, 4096


def check_out_text(out: object, fn: str, option: str = "--out") -> Path:
    """``out`` as a :class:`~pathlib.Path`, refusing ``None``, empty or blank strings, names
    :func:`check_folder_name` refuses and link loops.

    ``Path("")`` is the current folder: an empty ``--out`` would write the report there.
    """
    if out is None or (isinstance(out, str) and not out.strip()):
        raise ValueError(f"{fn}: {option} must name a folder (got {out!r})")
    if not isinstance(out, (str, os.PathLike)):
        raise ValueError(f"{fn}: {option} must be a path (got {type(out).__name__})")
    folder = check_folder_name(Path(out), fn, option)
    resolved_folder(folder, fn, option)  # a link loop is refused here, before any work
    return folder


def _limit(folder: Path, name: str, default: int) -> int:
    """``os.pathconf(folder, name)``, or ``default`` where the system does not say."""
    try:
        value = os.pathconf(folder, name)
    except (AttributeError, OSError, ValueError):  # pragma: no cover - non-POSIX
        return default
    return value if value and value > 0 else default


def check_folder_name(folder: Path, fn: str, option: str = "--out") -> Path:
    """Refuse a report folder name that could not be created, shown or recorded.

    Checked before any work: the name must be valid UTF-8 and hold no NUL; every component not
    yet on disk at most ``PC_NAME_MAX`` bytes, the folder's own name at most that minus
    :data:`NAME_RESERVE` (the staging folder beside it carries a prefix); the absolute path
    plus :data:`PATH_RESERVE` at most ``PC_PATH_MAX`` bytes. Limits are asked of the nearest
    folder that exists.

    Returns:
        ``folder``.

    Raises:
        ValueError: One line naming ``option``, the limit and the name (shown escaped).
    """
    shown = printable_name(folder)
    text = os.fspath(folder)
    if not is_valid_utf8(text):
        raise ValueError(
            f"{fn}: {option} must be a valid UTF-8 name (got {shown}, whose bytes shown as \\xNN "
            "are not UTF-8); choose a name that is"
        )
    if "\0" in text:
        raise ValueError(f"{fn}: {option} must not hold a NUL character (got {shown})")
    absolute = Path(os.path.abspath(folder))
    existing = absolute
    while not os.path.exists(existing) and existing != existing.parent:
        existing = existing.parent
    name_max = _limit(existing, "PC_NAME_MAX", _DEFAULT_NAME_MAX)
    path_max = _limit(existing, "PC_PATH_MAX", _DEFAULT_PATH_MAX)
    new_parts = absolute.relative_to(existing).parts if existing != absolute else ()
    for part in new_parts:
        if len(os.fsencode(part)) > name_max:
            raise ValueError(
                f"{fn}: {option} must have names of at most {name_max} bytes, this file "
                f"system's limit (got {printable_name(part)[:60]}..., "
                f"{len(os.fsencode(part))} bytes)"
            )
    own = len(os.fsencode(absolute.name))
    if own > name_max - NAME_RESERVE:
        raise ValueError(
            f"{fn}: {option} must have a folder name of at most {name_max - NAME_RESERVE} bytes "
            f"(this file system allows {name_max} and the staging folder beside it adds "
            f"{NAME_RESERVE}; got {own} bytes: {printable_name(absolute.name)[:60]}...)"
        )
    length = len(os.fsencode(str(absolute)))
    if length + PATH_RESERVE > path_max:
        raise ValueError(
            f"{fn}: {option} must be a path of at most {path_max - PATH_RESERVE} bytes (this "
            f"system allows {path_max}, and the report's files add up to {PATH_RESERVE}; got "
            f"{length} bytes)"
        )
    return folder


def resolved_folder(folder: Path, fn: str, option: str = "--out") -> Path:
    """The folder a report for ``folder`` is written into: symbolic links followed.

    Raises:
        ValueError: A link loop (or a link that cannot be followed) on the way.
    """
    try:
        return Path(os.path.realpath(folder, strict=True))
    except FileNotFoundError:
        # absent (or a link to something absent): resolve what exists, keep the rest
        real = Path(os.path.realpath(folder))
        if os.path.islink(real):
            raise ValueError(
                f"{fn}: {option} {printable_name(folder)} is a link that cannot be followed"
            ) from None
        return real
    except OSError as exc:  # ELOOP and friends
        raise ValueError(
            f"{fn}: {option} {printable_name(folder)} cannot be resolved ({exc.strerror})"
        ) from None


def check_report_folder(folder: Path, *, overwrite: bool, fn: str, option: str = "--out") -> None:
    """Refuse a ``folder`` this run may not fill (see the module docstring); a link is judged
    by its target, the folder the report would be written into."""
    check_folder_name(folder, fn, option)
    shown = printable_name(folder)
    folder = resolved_folder(folder, fn, option)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{fn}: {option} {shown} exists and is not a folder")
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
            f"{fn}: {option} {shown} holds {printable_name(repr(foreign[0]))}, which is not a "
            "report file; a report "
            "folder is replaced as a whole, so choose an empty or new folder"
        )
    if not overwrite:
        raise ValueError(
            f"{fn}: {option} {shown} already holds a report ({len(entries)} files); pass "
            "--overwrite to replace it, or choose another folder"
        )


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def make_stage(target: Path) -> Path:
    """A fresh, empty staging folder beside ``target``'s resolved path (parents created)."""
    real = resolved_folder(Path(target), "make_stage")
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
    real = resolved_folder(Path(target), fn)
    if real.parent != Path(stage).parent:
        raise OSError(
            f"{fn}: {printable_name(target)} now resolves to {printable_name(real)}, not beside "
            f"the staging folder {printable_name(stage)} (a link changed during the run)"
        )
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
    raise OSError(
        f"{fn}: could not move the report into {printable_name(target)}: other runs keep "
        "writing there"
    )


def discard_stage(stage: Path | None) -> None:
    """Remove an unfinished staging folder (nothing happens when there is none)."""
    if stage is not None:
        shutil.rmtree(stage, ignore_errors=True)
