"""Input checks and canonical forms of :mod:`bensemble.metrics.epistemic` and the binnings.

* The shape mechanism: member predictions are ``[M, N, K]``; the binary positive-class form
  ``[M, N]`` is read only with ``binary=True`` (never guessed from the rank).
* ``n_bins="auto"``: the bin-count rule (:func:`auto_n_bins`) and the bounds of an explicit count.
* Explicit bin ids are re-indexed by their distinct values (per-bin arrays never grow with the
  largest id).
* The canonical member order (:func:`canonical_member_order`): members are exchangeable, so the
  EECE sorts them into one data-derived order before anything order-sensitive runs.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import torch

from bensemble._validation import (
    as_binary_member_probs,
    as_float_tensor,
    as_labels,
    as_member_probs,
    check_allocation,
    to_tensor,
)

#: ``n_bins="auto"``: about ``sqrt(N)`` bins, at least this many points per bin on average ...
AUTO_MIN_OCCUPANCY = 10
#: ... and at most this many bins.
AUTO_MAX_BINS = 200
#: Below this mean number of points per bin the EECE warns (its per-bin terms are too noisy).
WARN_OCCUPANCY = 10


def warn_sparse_bins(fn: str, n_points: int, n_filled: int, stacklevel: int) -> None:
    """Warn when ``n_points / n_filled`` (points per filled bin) is below :data:`WARN_OCCUPANCY`.

    One text for every call, so that Python's default filter shows it once per call site (a
    sweep over many tasks does not flood the log); the numbers are in the details.
    ``stacklevel`` is counted from the caller, as :func:`warnings.warn` counts it.
    """
    if n_points / max(n_filled, 1) < WARN_OCCUPANCY:
        warnings.warn(
            f"{fn}: bins hold fewer than {WARN_OCCUPANCY} points on average (N / "
            "details.n_bins_fitted); the per-bin errors are noise-dominated - use fewer bins "
            "(n_bins='auto') or more points",
            UserWarning,
            stacklevel=stacklevel + 1,
        )


def auto_n_bins(n: int) -> int:
    """The ``n_bins="auto"`` rule: ``min(round(sqrt(N)), N // 10, 200)``, at least 1.

    ``sqrt(N)`` bins hold ``sqrt(N)`` points each on average, so both the number of bins and their
    occupancy grow with ``N`` (what the EECE needs to converge to the TECE). It gives the paper's
    100 bins at its 10,000 test points (appendix B.1.2, B.2), never fewer than 10 points per bin
    on average (small ``N``), and at most 200 bins - the paper's Figure 5 minimum at 10,000
    points, past which the gap grows again; ``bensemble reproduce binning --n-test N`` measures
    the curve and marks where "auto" lands.

    Example:
        >>> [auto_n_bins(n) for n in (50, 2_500, 10_000, 40_000, 10**6)]
        [5, 50, 100, 200, 200]
    """
    root = int(math.floor(math.sqrt(n) + 0.5))
    return max(1, min(root, n // AUTO_MIN_OCCUPANCY, AUTO_MAX_BINS))


def check_flag(value: Any, name: str, fn: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{fn}: `{name}` must be True or False (got {value!r})")
    return bool(value)


def resolve_n_bins(n_bins: Any, n: int, fn: str) -> int:
    """``"auto"`` -> :func:`auto_n_bins`; else an integer in ``[1, N]`` (checked before any
    allocation: a K-means with more bins than points has empty bins by construction)."""
    if isinstance(n_bins, str) and n_bins == "auto":
        return auto_n_bins(n)
    ok = isinstance(n_bins, (int, np.integer)) and not isinstance(n_bins, (bool, np.bool_))
    if not ok or not 1 <= int(n_bins) <= n:
        raise ValueError(
            f"{fn}: `n_bins` must be 'auto' or an integer in [1, {n}] (at most one bin per "
            f"point) (got {n_bins!r})"
        )
    return int(n_bins)


def check_n_seeds(n_seeds: Any, fn: str) -> int:
    ok = isinstance(n_seeds, (int, np.integer)) and not isinstance(n_seeds, (bool, np.bool_))
    if not ok or int(n_seeds) < 1:
        raise ValueError(f"{fn}: `n_seeds` must be an integer >= 1 (got {n_seeds!r})")
    # a seed, a partition record and its per-bin details per seed: >= 64 bytes each
    return check_allocation(fn, "n_seeds", int(n_seeds), itemsize=64)


def _two_d_message(fn: str, shape: tuple[int, ...]) -> str:
    return (
        f"{fn}: `member_probs` must be member predictions [M, N, K] (got a 2-D array of shape "
        f"{list(shape)}); a single model's [N, K] probabilities are not member predictions (add "
        "a member axis: probs[None]); binary positive-class members [M, N] need binary=True"
    )


def check_member_probs(member_probs: Any, fn: str, binary: Any) -> torch.Tensor:
    """``[M, N, K]`` float64 class probabilities, or (``binary=True``) ``[M, N]`` P(y = 1)."""
    binary = check_flag(binary, "binary", fn)
    t = to_tensor(member_probs, "member_probs", fn)
    if t.layout != torch.strided or t.device.type == "meta":
        raise ValueError(
            f"{fn}: `member_probs` must be a dense tensor with data (got layout {t.layout} on "
            f"device {t.device.type}); convert with .to_dense() / load real values"
        )
    if binary:
        if t.ndim != 2:
            raise ValueError(
                f"{fn}: `member_probs` must be [M, N] positive-class probabilities with "
                f"binary=True (got shape {list(t.shape)}); pass [M, N, K] without binary=True"
            )
        return as_binary_member_probs(t, "member_probs", fn)
    if t.ndim == 2:
        raise ValueError(_two_d_message(fn, tuple(t.shape)))
    return as_member_probs(t, "member_probs", fn)


def positive_class(member_probs: Any, fn: str, binary: Any) -> torch.Tensor:
    """``[M, N]`` P(y = 1) of a binary task: ``[M, N]`` with ``binary=True`` or ``[M, N, 2]``."""
    p = check_member_probs(member_probs, fn, binary)
    if p.ndim == 3:
        if p.shape[2] != 2:
            raise ValueError(
                f"{fn}: `member_probs` must have 2 classes, [M, N, 2] (a positive-class quantity; "
                f"for K classes use one-vs-all columns with binary=True) (got shape "
                f"{list(p.shape)})"
            )
        p = p[:, :, 1]
    return p


def check_eu(eu: Any, shape: tuple[int, ...], fn: str) -> torch.Tensor:
    t = as_float_tensor(eu, "eu", fn, ndim=len(shape))
    if tuple(t.shape) != shape:
        raise ValueError(f"{fn}: `eu` must have shape {list(shape)} (got {list(t.shape)})")
    lo = float(t.min())
    if lo < 0:
        raise ValueError(f"{fn}: `eu` must be non-negative (got a minimum of {lo:.4g})")
    return t


def check_bins(bins: Any, n: int, fn: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Explicit bin ids -> ``(distinct ids [B], dense ids [N] in [0, B))``: per-bin arrays are
    sized by the ``B`` distinct ids, never by the largest id."""
    ids = as_labels(bins, "bins", fn, n=n)
    lo = int(ids.min())
    if lo < 0:
        raise ValueError(f"{fn}: `bins` must hold bin ids >= 0 (got a minimum of {lo})")
    distinct, dense = torch.unique(ids, sorted=True, return_inverse=True)
    return distinct, dense


def canonical_member_order(p: torch.Tensor) -> torch.Tensor | None:
    """A permutation of the member axis that depends only on the multiset of members.

    Members are sorted by the bytes of their whole flattened prediction array (a total order on
    bit patterns; ties only between bit-identical members, whose order cannot matter). Any
    permutation of the input therefore yields the *identical* array, so every order-sensitive
    floating-point step after it (K-means distances, sums over members) sees the same operands
    in the same order. ``None`` when the members are already in that order.
    """
    h = p.shape[0]
    if h < 2:
        return None
    flat = np.ascontiguousarray(p.detach().reshape(h, -1).cpu().numpy())
    keys = flat.view(np.dtype((np.void, flat.shape[1] * flat.itemsize))).ravel()
    order = np.argsort(keys, kind="stable")
    if np.array_equal(order, np.arange(h)):
        return None
    return torch.from_numpy(order).to(p.device)


def merge_infos(infos: list[dict[str, Any]]) -> tuple[str | None, dict[str, Any]]:
    """One settings dict: shared values once, per-class values as tuples."""
    if not infos or not infos[0]:
        return None, {}
    backend = infos[0]["backend"]
    merged: dict[str, Any] = {}
    for key in infos[0]:
        if key == "backend":
            continue
        values = tuple(info[key] for info in infos)
        merged[key] = values[0] if len(infos) == 1 or len(set(values)) == 1 else values
    return backend, merged
