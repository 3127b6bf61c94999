"""Loading saved predictions and labels from disk, trusting nothing that needs unpickling.

Supported formats (chosen by the file extension):

* ``.npy`` -- one array, read with ``numpy.load(allow_pickle=False)``.
* ``.npz`` -- an archive holding a single array, or name the array with ``file.npz:key``
  (also ``allow_pickle=False``).
* ``.pt`` / ``.pth`` -- ``torch.load(weights_only=True)``: a tensor, a dict holding exactly one
  tensor (or name it with ``file.pt:key``), or a list/tuple of equally shaped tensors, which are
  stacked along a new first axis (one tensor per member).
* ``.csv`` -- a header-less table of numbers separated by commas, one row per line. A table
  whose every entry is an integer literal (``3``, ``-1``) loads as int64, anything else as
  float64. Predictions are ``N`` rows x ``K`` columns for one model; for an ensemble of ``M``
  members stack the members' tables (member 0's ``N`` rows, then member 1's, ...: ``M * N``
  rows) and pass ``members=M`` to :func:`load_predictions` (``--members M`` on the command
  line). Labels are one integer per line (or all on one line).

Nothing here ever unpickles: an object array, or a ``.pt`` file that would need pickle to load,
is refused with :class:`InputError`. Every failure -- a missing file, an unknown extension, a
corrupt file, a wrong shape, NaN/inf, labels out of range -- raises :class:`InputError`, a
:class:`ValueError` whose message is one line naming the file and the problem.
"""

from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path

import numpy as np
import torch

from bensemble import _validation as V

__all__ = [
    "SUPPORTED_EXTENSIONS",
    "InputError",
    "load_array",
    "load_predictions",
    "load_labels",
    "split_key",
]

#: File extensions :func:`load_array` understands.
SUPPORTED_EXTENSIONS = (".npy", ".npz", ".pt", ".pth", ".csv")
_KEYED = (".npz", ".pt", ".pth")
_INT_LITERAL = re.compile(r"[+-]?\d+")


class InputError(ValueError):
    """Bad input file or content; ``str(error)`` is a single line fit for a command-line error."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


def split_key(path: str | os.PathLike) -> tuple[Path, str | None]:
    """Split ``"file.npz:key"`` into ``(Path("file.npz"), "key")``; other paths get ``None``.

    Only a suffix after ``.npz``/``.pt``/``.pth`` counts as a key, so ``C:\\data\\p.npy`` and
    other paths containing a colon are left alone.
    """
    text = os.fspath(path)
    head, sep, key = text.rpartition(":")
    if sep and key and head.lower().endswith(_KEYED) and not Path(text).exists():
        return Path(head), key
    return Path(text), None


def _load_npy(path: Path, name: str) -> np.ndarray:
    with open(path, "rb") as handle:
        magic = handle.read(6)
    if magic[:2] == b"PK":  # an .npz archive saved under a .npy name
        raise InputError(f"`{name}` file {path} is an .npz archive; rename it to .npz")
    if magic != b"\x93NUMPY":
        raise InputError(
            f"`{name}` file {path} is not a .npy file (no NumPy header; a pickle is not trusted)"
        )
    try:
        arr = np.load(path, allow_pickle=False)
    except ValueError as exc:
        if "pickle" in str(exc).lower():
            raise InputError(
                f"`{name}` file {path} holds a pickled object array, which is not trusted "
                "(save a numeric array)"
            ) from None
        raise InputError(f"`{name}` file {path} is not a valid .npy file ({exc})") from None
    except (OSError, EOFError) as exc:
        raise InputError(f"`{name}` file {path} could not be read as .npy ({exc})") from None
    return arr


def _load_npz(path: Path, key: str | None, name: str) -> np.ndarray:
    try:
        archive = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise InputError(f"`{name}` file {path} is not a valid .npz archive ({exc})") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise InputError(f"`{name}` file {path} is a plain .npy array; rename it to .npy")
    with archive:
        keys = list(archive.files)
        if key is None:
            if len(keys) != 1:
                listed = ", ".join(keys) if keys else "none"
                raise InputError(
                    f"`{name}` file {path} holds {len(keys)} arrays ({listed}); "
                    f"choose one with {path}:KEY"
                )
            key = keys[0]
        elif key not in keys:
            raise InputError(
                f"`{name}` file {path} has no array {key!r} (it holds: {', '.join(keys)})"
            )
        try:
            return archive[key]
        except ValueError as exc:
            if "pickle" in str(exc).lower():
                raise InputError(
                    f"`{name}` array {key!r} in {path} is a pickled object array, which is not "
                    "trusted (save a numeric array)"
                ) from None
            raise InputError(f"`{name}` array {key!r} in {path} is unreadable ({exc})") from None
        except (OSError, EOFError, zipfile.BadZipFile) as exc:
            raise InputError(f"`{name}` array {key!r} in {path} is unreadable ({exc})") from None


def _load_pt(path: Path, key: str | None, name: str) -> torch.Tensor:
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises UnpicklingError/RuntimeError/...
        text = str(exc)
        match = re.search(r"Unsupported global: GLOBAL (\S+)", text)
        if match:
            raise InputError(
                f"`{name}` file {path} needs pickle to load {match.group(1)}, which is not "
                "trusted (torch.load(weights_only=True) refused it); save plain tensors with "
                "torch.save(tensor, path)"
            ) from None
        raise InputError(
            f"`{name}` file {path} is not a valid .pt file "
            "(torch.load(weights_only=True) could not read it)"
        ) from None
    if isinstance(obj, torch.Tensor):
        if key is not None:
            raise InputError(f"`{name}` file {path} holds a single tensor, not a dict with {key!r}")
        return obj
    if isinstance(obj, dict):
        tensors = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}
        if key is not None:
            if key not in tensors:
                listed = ", ".join(map(str, tensors)) or "none"
                raise InputError(
                    f"`{name}` file {path} has no tensor {key!r} (its tensors: {listed})"
                )
            return tensors[key]
        if len(tensors) != 1:
            listed = ", ".join(map(str, tensors)) or "none"
            raise InputError(
                f"`{name}` file {path} holds a dict with {len(tensors)} tensors ({listed}); "
                f"choose one with {path}:KEY"
            )
        return next(iter(tensors.values()))
    if isinstance(obj, (list, tuple)) and obj and all(isinstance(t, torch.Tensor) for t in obj):
        shapes = {tuple(t.shape) for t in obj}
        if len(shapes) != 1:
            raise InputError(
                f"`{name}` file {path} holds a list of tensors with different shapes "
                f"({', '.join(str(s) for s in sorted(shapes))})"
            )
        return torch.stack(list(obj))
    raise InputError(
        f"`{name}` file {path} must hold a tensor, a dict of tensors or a list of tensors "
        f"(got {type(obj).__name__})"
    )


def _load_csv(path: Path, name: str) -> np.ndarray:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"`{name}` file {path} could not be read as text ({exc})") from None
    rows: list[list[str]] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if rows and len(cells) != len(rows[0]):
            raise InputError(
                f"`{name}` file {path} line {lineno} has {len(cells)} columns, "
                f"expected {len(rows[0])} like the first line"
            )
        rows.append(cells)
    if not rows:
        raise InputError(f"`{name}` file {path} is empty")
    flat = [c for row in rows for c in row]
    if all(_INT_LITERAL.fullmatch(c) for c in flat):
        return np.array([[int(c) for c in row] for row in rows], dtype=np.int64)
    try:
        return np.array([[float(c) for c in row] for row in rows], dtype=np.float64)
    except ValueError:
        bad = next(c for c in flat if not _is_float(c))
        raise InputError(
            f"`{name}` file {path} must be a header-less table of numbers separated by commas "
            f"(found {bad[:30]!r})"
        ) from None


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def load_array(path: str | os.PathLike, *, name: str) -> torch.Tensor:
    """Load one numeric array from ``.npy``, ``.npz``, ``.pt``/``.pth`` or ``.csv``.

    Args:
        path: The file; ``"file.npz:key"`` or ``"file.pt:key"`` picks one array of several.
        name: What the array is (``"predictions"``, ``"labels"``), used in error messages.

    Returns:
        A CPU tensor with the file's dtype (a CSV of integer literals gives int64, any other
        CSV float64).

    Raises:
        InputError: The file is missing, has an unsupported extension, cannot be parsed,
            needs unpickling, or holds a non-numeric array.
    """
    file, key = split_key(path)
    if not file.exists():
        raise InputError(f"`{name}` file {file} does not exist")
    if not file.is_file():
        raise InputError(f"`{name}` path {file} is not a file")
    ext = file.suffix.lower()
    if ext not in SUPPORTED_EXTENSIONS:
        raise InputError(
            f"`{name}` file {file} has an unsupported extension {ext or '(none)'!r} "
            f"(use one of {', '.join(SUPPORTED_EXTENSIONS)})"
        )
    if key is not None and ext not in _KEYED:
        raise InputError(f"`{name}`: a :KEY suffix is only allowed on .npz and .pt files")
    if ext == ".npy":
        data: np.ndarray | torch.Tensor = _load_npy(file, name)
    elif ext == ".npz":
        data = _load_npz(file, key, name)
    elif ext == ".csv":
        data = _load_csv(file, name)
    else:
        data = _load_pt(file, key, name)
    if isinstance(data, np.ndarray):
        if data.dtype == object:
            raise InputError(f"`{name}` file {file} holds an object array (must be numeric)")
        if data.dtype.kind not in "biuf":
            raise InputError(f"`{name}` file {file} must hold numbers (got dtype {data.dtype})")
        if data.dtype.kind == "u" and data.dtype.itemsize > 1:
            data = data.astype(np.int64)
        data = torch.from_numpy(np.ascontiguousarray(data))
    if data.is_complex():
        raise InputError(f"`{name}` file {file} must hold real numbers (got dtype {data.dtype})")
    return data.detach().cpu()


def _check(fn, *args, **kwargs):
    """Run a ``_validation`` checker, turning its ValueError into a one-line InputError."""
    try:
        return fn(*args, **kwargs)
    except InputError:
        raise
    except ValueError as exc:
        raise InputError(str(exc)) from None


def load_predictions(
    path: str | os.PathLike,
    *,
    logits: bool = False,
    members: int | None = None,
    members_axis: int = 0,
    fn: str = "load_predictions",
) -> torch.Tensor:
    """Load member predictions as float64 probabilities ``[M, N, K]`` (``M = 1`` for one model).

    Args:
        path: A file :func:`load_array` reads (``file.npz:key`` allowed).
        logits: The file holds logits; each member's rows go through a softmax. Without it the
            rows must be probabilities summing to 1 (never guessed from the value range).
        members: Read a 2-D ``[M * N, K]`` table (a stacked CSV) as ``M`` members of ``N`` rows
            each, member-major. ``None`` (default): a 2-D array is one model.
        members_axis: Which axis of a 3-D array holds the members: ``0`` for ``[M, N, K]``
            (default) or ``1`` for ``[N, M, K]``.
        fn: Name used at the start of error messages.

    Returns:
        ``member_probs [M, N, K]`` in float64.

    Raises:
        InputError: Anything :func:`load_array` refuses, a wrong rank, fewer than 2 classes,
            NaN/inf, or rows that are not probabilities.
    """
    name = "predictions"
    t = load_array(path, name=name)
    if t.dtype == torch.bool:
        raise InputError(f"{fn}: `{name}` must hold probabilities or logits (got dtype bool)")
    if members_axis not in (0, 1):
        raise InputError(f"{fn}: `members_axis` must be 0 or 1 (got {members_axis!r})")
    if members is not None:
        members = _check(V.check_positive_int, members, "members", fn)
        if t.ndim != 2:
            raise InputError(
                f"{fn}: `{name}` must be a 2-D [M*N, K] table when `members` is given "
                f"(got shape {tuple(t.shape)})"
            )
        if t.shape[0] % members:
            raise InputError(
                f"{fn}: `{name}` has {t.shape[0]} rows, which is not a multiple of "
                f"members={members}"
            )
        t = t.reshape(members, t.shape[0] // members, t.shape[1])
    if t.ndim == 2:
        t = t.unsqueeze(0)
    elif t.ndim == 3:
        if members_axis == 1:
            t = t.transpose(0, 1).contiguous()
    else:
        raise InputError(
            f"{fn}: `{name}` must be 2-D [N, K] or 3-D [M, N, K] (got shape {tuple(t.shape)})"
        )
    return _check(V.as_member_probs, t, name, fn, from_logits=logits)


def load_labels(
    path: str | os.PathLike,
    *,
    n: int | None = None,
    num_classes: int | None = None,
    fn: str = "load_labels",
) -> torch.Tensor:
    """Load integer class labels ``[N]`` (int64), optionally checked against ``N`` and ``K``.

    A column (``[N, 1]``) or a row (``[1, N]``) is flattened. Float labels are refused even when
    integral (``1.0``), as :func:`bensemble._validation.as_labels` does.

    Raises:
        InputError: Anything :func:`load_array` refuses, float labels, a wrong length or
            labels outside ``[0, num_classes - 1]``.
    """
    name = "labels"
    t = load_array(path, name=name)
    if t.ndim == 2 and 1 in t.shape:
        t = t.reshape(-1)
    if t.is_floating_point():
        _check(V.check_finite, t, name, fn)
    return _check(V.as_labels, t, name, fn, n=n, num_classes=num_classes)
