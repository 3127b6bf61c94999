"""Checks of a replicate state's sums: a loaded or merged state is refused unless it could have
come from data.

The container (exactly the state's keys, float64 tensors of its shapes, finite values) is
checked by :func:`bensemble.metrics._state_checks.check_state_tensors`, as for the streaming
meters; the functions here check what the sums mean, with the meters' helpers (whole
non-negative counts, sums bounded by the weight they were taken over, zero where no sample was
counted). ``where`` is the start of the message (``"fn: `state_dict['state']"``) and
``prefix`` the start of every key (``"accuracy."`` inside a
:class:`~bensemble.metrics.intervals.ReplicateState`).

Row 0 of every replicate axis is the data themselves (unit weights), so its counts are whole;
the replicate rows may hold any non-negative weights (:meth:`ReplicatesBase.update` takes
user weights), so only their signs and bounds are checked.
"""

from __future__ import annotations

import torch

from bensemble.metrics._state_checks import (
    SLACK,
    check_at_most,
    check_equal_totals,
    check_non_negative,
    check_whole,
    check_zero_where_empty,
)

__all__ = ["check_calibration_sums", "check_eece_sums", "check_mean_sums", "check_totals"]


def check_totals(state: dict[str, torch.Tensor], where: str, prefix: str) -> torch.Tensor:
    """``totals [R + 1]``: non-negative weights, a whole count of samples in row 0."""
    totals = state[f"{prefix}totals"]
    check_non_negative(totals, where, f"{prefix}totals")
    check_whole(totals[:1], where, f"{prefix}totals")
    return totals


def check_mean_sums(state: dict[str, torch.Tensor], where: str, prefix: str = "") -> None:
    """``sums [R + 1]`` of any sign, 0 in a replicate of no weight."""
    totals = check_totals(state, where, prefix)
    check_zero_where_empty(state[f"{prefix}sums"], totals, where, f"{prefix}sums")


def check_calibration_sums(
    state: dict[str, torch.Tensor], where: str, groups: int, prefix: str = ""
) -> None:
    """The per-bin sums of a :class:`CalibrationReplicates` (``G`` groups of ``B`` bins).

    ``counts``, ``sum_correct`` whole; every group counts every sample once; confidences and
    hits at most the bin's count (classwise: one hit per sample over all classes); the gap
    sums ``sums [G B, R + 1]`` 0 in an empty bin, at most the replicate's weight in absolute
    value per group, and their row 0 equal to ``sum_correct - sum_confidence``.
    """
    totals = check_totals(state, where, prefix)
    counts = state[f"{prefix}counts"]
    check_whole(counts, where, f"{prefix}counts")
    per_group = torch.cat([totals[:1], counts.sum(1)])
    check_equal_totals(per_group, where, f"{prefix}counts", "group (and as `totals[0]`)")
    correct, confidence = state[f"{prefix}sum_correct"], state[f"{prefix}sum_confidence"]
    check_whole(correct, where, f"{prefix}sum_correct")
    check_at_most(correct, counts, where, f"{prefix}sum_correct", "the bin's count", exact=True)
    check_at_most(confidence, counts, where, f"{prefix}sum_confidence", "the bin's count")
    if groups > 1:  # classwise: every sample has one label, a hit in one class
        hits = correct.sum().reshape(1)
        check_equal_totals(torch.cat([totals[:1], hits]), where, f"{prefix}sum_correct", "label")
    key = f"{prefix}sums"
    sums = state[key]
    flat = counts.reshape(-1, 1)
    check_zero_where_empty(sums, flat, where, key)
    width = sums.abs().reshape(groups, -1, sums.shape[-1]).sum(1)  # [G, R + 1]
    check_at_most(width, totals.expand_as(width), where, key, "the replicate's total weight")
    gaps = (correct - confidence).reshape(-1)
    off = (sums[:, 0] - gaps).abs() > SLACK * (flat[:, 0] + 1.0)
    if bool(off.any()):
        i = int(torch.nonzero(off)[0])
        raise ValueError(
            f"{where}[{key!r}]` must hold in row 0 the bins' sum_correct - sum_confidence "
            f"(got {float(sums[i, 0])} vs {float(gaps[i])} at index [{i}, 0])"
        )


def check_eece_sums(
    state: dict[str, torch.Tensor],
    where: str,
    shape: tuple[int, int, int],
    prefix: str = "",
) -> None:
    """The per-bin sums of an :class:`EECEReplicates` (``shape``: groups, slots, members).

    Per bin ``W`` (weight; whole in row 0), ``Y`` (outcomes) and every member's ``P_h`` in
    ``[0, W]``, ``Q = sum_h (y - p_h)^2`` in ``[0, H W]``, ``E`` (uncertainty) non-negative and 0
    where ``W`` is; the bins of a group hold the replicate's whole weight.
    """
    groups, slots, members = shape
    totals = check_totals(state, where, prefix)
    key = f"{prefix}sums"
    s = state[key].reshape(groups, slots, members + 4, -1)
    w, y, e, q, p = s[:, :, 0], s[:, :, 1], s[:, :, 2], s[:, :, 3], s[:, :, 4:]
    check_non_negative(w, where, key)
    check_whole(w[..., :1], where, key)
    held = w.sum(1)  # [G, R + 1]
    off = (held - totals).abs() > SLACK * (totals + 1.0)
    if bool(off.any()):
        g, r = (int(i) for i in torch.nonzero(off)[0])
        raise ValueError(
            f"{where}[{key!r}]` must give every group the replicate's total weight (got "
            f"{float(held[g, r])} vs totals {float(totals[r])} in group {g}, replicate row {r})"
        )
    check_at_most(y, w, where, key, "the bin's weight (outcomes)")
    check_whole(y[..., :1], where, key)
    check_at_most(p, w.unsqueeze(2).expand_as(p), where, key, "the bin's weight (members)")
    check_at_most(q, members * w, where, key, "members x the bin's weight (squared gaps)")
    check_non_negative(e, where, key)
    check_zero_where_empty(e, w, where, key)
