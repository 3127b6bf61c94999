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
corrupt or truncated file, a ``.npy`` header claiming more or less data than the file holds
(checked before anything is allocated), a size beyond the machine's memory, a sparse file (holes
that would read as zeros), a sparse / meta / quantized tensor, a wrong shape, NaN/inf, float or
out-of-range labels -- raises :class:`InputError`, a :class:`ValueError` whose message is one
line naming the file (control and bidirectional characters shown escaped) and the problem.
Memory is bounded: a ``.csv`` is parsed a block at a time into numbers, and
:func:`open_npy_chunks` reads a ``.npy`` a block at a time with positioned reads (a file
truncated underneath gives an :class:`InputError`, never a SIGBUS). Valid non-native numpy data
is converted: big-endian arrays to native byte order, ``longdouble`` to float64, wide unsigned
integers to int64 (when every value fits).

Probabilities keep the tolerance of the dtype they were saved in: float16 / bfloat16 rows are
checked against the half-precision tolerance, then renormalised in float64, so every later check
(at float64 tolerance) accepts them.
"""

from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path

import torch

from bensemble import _validation as V
from bensemble._io_chunks import NpyChunks, open_chunks
from bensemble._io_csv import read_csv
from bensemble._io_files import InputError, describe
from bensemble._io_formats import read_npy, read_npz, read_pt, to_native_tensor
from bensemble._terminal import printable_name

__all__ = [
    "SUPPORTED_EXTENSIONS",
    "InputError",
    "NpyChunks",
    "open_npy_chunks",
    "load_array",
    "load_predictions",
    "load_labels",
    "split_key",
]

#: File extensions :func:`load_array` understands.
SUPPORTED_EXTENSIONS = (".npy", ".npz", ".pt", ".pth", ".csv")
_KEYED = (".npz", ".pt", ".pth")
#: Row-sum tolerance of the "these logits already look like probabilities" warning.
_SIMPLEX_TOLERANCE = {torch.float16: 1e-2, torch.bfloat16: 1e-2}
_LOW_PRECISION = (torch.float16, torch.bfloat16)


def split_key(path: str | os.PathLike) -> tuple[Path, str | None]:
    """Split ``"file.npz:key"`` into ``(Path("file.npz"), "key")``; other paths get ``None``.

    Only a suffix after ``.npz``/``.pt``/``.pth`` counts as a key, so ``C:\\data\\p.npy`` and
    other paths containing a colon are left alone.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(
            f"split_key: `path` must be a str or os.PathLike (got {type(path).__name__})"
        )
    text = os.fspath(path)
    if not isinstance(text, str):
        raise ValueError(f"split_key: `path` must name a file as text (got {type(text).__name__})")
    head, sep, key = text.rpartition(":")
    if sep and key and head.lower().endswith(_KEYED) and not os.path.exists(text):
        return Path(head), key
    return Path(text), None


def _check_name(name: object, fn: str) -> str:
    """``name``: what the array is, as a non-empty str (it starts every message)."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(
            f"{fn}: `name` must be a non-empty str saying what the array is, such as "
            f"'predictions' (got {name!r})"
        )
    return name


def _check_file(file: Path, name: str) -> None:
    """Refuse a path that is missing, not a regular file, or cannot be looked at."""
    try:
        info = os.stat(file)
    except FileNotFoundError:
        raise InputError(f"{describe(f'`{name}` file', file)} does not exist") from None
    except OSError as exc:  # too long a name, a link loop, no permission, ...
        raise InputError(
            f"{describe(f'`{name}` file', file)} cannot be accessed ({exc.strerror})"
        ) from None
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{describe(f'`{name}` path', file)} is not a file")


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
    _check_name(name, "load_array")
    file, key = split_key(path)
    where = describe(f"`{name}` file", file)
    _check_file(file, name)
    ext = file.suffix.lower()
    if ext not in SUPPORTED_EXTENSIONS:
        raise InputError(
            f"{where} has an unsupported extension {printable_name(repr(ext or '(none)'))} "
            f"(use one of {', '.join(SUPPORTED_EXTENSIONS)})"
        )
    if key is not None and ext not in _KEYED:
        raise InputError(f"`{name}`: a :KEY suffix is only allowed on .npz and .pt files")
    if ext == ".npy":
        data = read_npy(file, name)
    elif ext == ".npz":
        data = read_npz(file, key, name)
    elif ext == ".csv":
        data = read_csv(file, name)
    else:
        data = read_pt(file, key, name)
    return to_native_tensor(data, where)


def open_npy_chunks(path: str | os.PathLike, *, name: str = "predictions") -> NpyChunks:
    """Open a ``.npy`` file (or an uncompressed ``.npz`` member) for reading a block at a time.

    Only the header is read now; :meth:`NpyChunks.read` and :meth:`NpyChunks.take` read rows
    with positioned reads (``os.preadv``), never a memory map, so a file truncated while it is
    read ends in an :class:`InputError` naming it instead of a SIGBUS that kills the process.

    Args:
        path: A ``.npy`` file, or ``file.npz`` / ``file.npz:key`` for an archive member saved
            uncompressed (``numpy.savez``; a ``numpy.savez_compressed`` member is refused).
        name: What the array is, used in error messages (``"`predictions` file p.npy ..."``).

    Returns:
        An :class:`NpyChunks` with ``shape``, ``dtype`` (native byte order), ``read(start,
        stop, axis=0)`` and ``take(indices, axis=0)``; a context manager (``close()``), safe to
        share between threads and forked processes, and picklable (it reopens the file by name
        and checks it is the same file).

    Raises:
        InputError: A missing or unreadable file, a sparse file, no valid ``.npy`` header, data
            shorter or longer than the header claims, a pickled object or non-numeric dtype.

    Example:
        >>> import tempfile, numpy as np
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     np.save(tmp + "/p.npy", np.arange(12.0).reshape(2, 3, 2))
        ...     with open_npy_chunks(tmp + "/p.npy") as chunks:
        ...         print(chunks.shape, chunks.read(1, 3, axis=1)[0].tolist())
        (2, 3, 2) [[2.0, 3.0], [4.0, 5.0]]
    """
    _check_name(name, "open_npy_chunks")
    file, key = split_key(path)
    ext = file.suffix.lower()
    if ext not in (".npy", ".npz") or (key is not None and ext != ".npz"):
        raise InputError(
            f"{describe(f'`{name}` file', os.fspath(path))} cannot be read in chunks: only .npy "
            "files and uncompressed .npz members can (save the array with numpy.save)"
        )
    _check_file(file, name)
    return open_chunks(file, key, name)


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
    if isinstance(members_axis, bool) or members_axis not in (0, 1):
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
    warned = logits and _on_simplex(t)
    if warned:
        warnings.warn(
            f"{fn}: `{name}` rows already lie on the probability simplex (in [0, 1], summing "
            "to 1), so logits=True applies a softmax to probabilities - a second softmax that "
            "flattens them; leave logits out if these are probabilities",
            UserWarning,
            stacklevel=2,
        )
    original = t.dtype
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        probs = _check(V.as_member_probs, t, name, fn, from_logits=logits)
    for w in caught:  # the checker's own "these look like probabilities" is said above
        if not (warned and issubclass(w.category, UserWarning)):
            warnings.warn(w.message, w.category, stacklevel=2)
    return renormalised(probs, original)


def _on_simplex(t: torch.Tensor) -> bool:
    """Every row in [0, 1] and summing to 1 within the tolerance of ``t``'s dtype."""
    if t.numel() == 0 or t.shape[-1] < 2:
        return False
    x = t.to(torch.float64)
    if not bool(torch.isfinite(x).all()) or float(x.min()) < 0.0 or float(x.max()) > 1.0:
        return False
    deviation = float((x.sum(-1) - 1.0).abs().max())
    return deviation <= _SIMPLEX_TOLERANCE.get(t.dtype, V.SUM_TOLERANCE)


def renormalised(probs: torch.Tensor, original: torch.dtype) -> torch.Tensor:
    """float64 probabilities validated at ``original``'s tolerance, rows renormalised to sum 1.

    float16 / bfloat16 rows pass their own (looser) tolerance; once in float64 they would fail
    the float64 one of every later check, so they are divided by their sums (a change of at most
    the half-precision rounding already accepted). Other dtypes are returned unchanged.
    """
    if original in _LOW_PRECISION:
        return probs / probs.sum(-1, keepdim=True)
    return probs


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
