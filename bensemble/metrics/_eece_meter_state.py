"""Checks of the :class:`~bensemble.metrics.streaming_epistemic.EECEMeter`'s bins: centroid sets
and the size of the state they make (split from :mod:`bensemble.metrics.streaming_epistemic`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from bensemble._validation import MAX_BIN_SLOTS, as_float_tensor

__all__ = ["FAR", "MAX_STATE_NUMBERS", "as_centroids", "check_state_size"]

_F64 = torch.float64
#: Padding for classes with fewer centroids: so far from [0, 1]^H that no point is assigned to it.
FAR = 1e6
#: Most float64 sums an EECE state holds (``K * M * (H + 3)``): 3 per MAX_BIN_SLOTS (384 MiB).
MAX_STATE_NUMBERS = 3 * MAX_BIN_SLOTS


def check_state_size(groups: int, slots: int, members: int, fn: str, name: str) -> None:
    """An EECE state holds ``groups * slots * (members + 3)`` float64 sums; refuse more than
    ``3 * MAX_BIN_SLOTS`` (the classwise calibration meter's budget) before allocating."""
    size = groups * slots * (members + 3)
    if size <= MAX_STATE_NUMBERS:
        return
    if name == "num_classes":
        raise ValueError(
            f"{fn}: `num_classes` must be <= {MAX_STATE_NUMBERS // (slots * (members + 3))} "
            f"for one shared set of {slots} centroids of {members} members (the state holds "
            f"num_classes * centroids * (members + 3) <= {MAX_STATE_NUMBERS} sums) "
            f"(got {groups})"
        )
    raise ValueError(
        f"{fn}: `centroids` must make a state of at most {MAX_STATE_NUMBERS} sums (sets * "
        f"centroids * (members + 3)) (got {groups} x {slots} x ({members} + 3) = {size})"
    )


def as_centroids(centroids: Any, fn: str) -> torch.Tensor:
    """``[G, S, H]`` float64: one ``[M, H]`` set (G = 1), ``[K, M, H]``, or a list of ``[M_k, H]``
    sets padded with far-away centroids to the largest ``M_k`` (sizes checked first)."""
    if isinstance(centroids, Sequence) and not isinstance(centroids, (str, bytes)):
        sets = [as_float_tensor(c, f"centroids[{k}]", fn, ndim=2) for k, c in enumerate(centroids)]
        if not sets:
            raise ValueError(f"{fn}: `centroids` must hold at least one centroid set (got none)")
        widths = {c.shape[1] for c in sets}
        if len(widths) != 1:
            raise ValueError(
                f"{fn}: `centroids` sets must share one width H (got {sorted(widths)})"
            )
        size = max(c.shape[0] for c in sets)
        width = widths.pop()
        check_state_size(len(sets), size, width, fn, "centroids")
        out = torch.full((len(sets), size, width), FAR, dtype=_F64)
        for k, c in enumerate(sets):
            out[k, : c.shape[0]] = c.cpu()
        return out
    if centroids is None:
        raise ValueError(
            f"{fn}: `centroids` must be fitted K-means centroids (got None) - fit them on a "
            "sample with EECEMeter.from_sample(member_probs, n_bins) or "
            "bensemble.metrics.fit_bins(member_probs[:, :, k].T, n_bins) per class"
        )
    t = as_float_tensor(centroids, "centroids", fn, ndim=(2, 3))
    t = t[None] if t.ndim == 2 else t
    if 0 in t.shape:
        raise ValueError(f"{fn}: `centroids` must not be empty (got shape {list(t.shape)})")
    check_state_size(t.shape[0], t.shape[1], t.shape[2], fn, "centroids")
    return t
