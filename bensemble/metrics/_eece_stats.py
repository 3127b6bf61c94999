"""The EECE's per-bin kernels and its details record (split from :mod:`.epistemic`).

:func:`_eece_update` turns ``[H, R]`` member columns, outcomes, reported EU and bin ids into
per-bin float64 sums (one ``bincount`` / ``index_add_`` each); :func:`_eece_compute` turns the
sums into the per-bin quantities of :class:`EECEDetails`. The streaming meter
(:mod:`bensemble.metrics.streaming_epistemic`) accumulates the same sums.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from bensemble.metrics._binning import bin_sums

__all__ = ["EECEDetails"]

_F64 = torch.float64


@dataclass(frozen=True, eq=False)
class EECEDetails:
    """Per-bin ingredients of an EECE (float64 tensors; an empty bin holds NaN, count 0).

    For ``multiclass="classwise"`` every per-bin field has a leading class axis ``[K, M]`` (``M``
    the largest number of bins of any class; shorter classes are padded with empty bins) and
    :attr:`value` is the mean of :attr:`per_class`.

    Attributes:
        value: the EECE.
        counts: ``[M]`` points per bin ``|B_m|``.
        acc: ``[M]`` fraction of positives ``acc_m``.
        mean_delta: ``[M]`` mean over members of ``conf[h, m]`` (= mean of ``Delta`` in the bin).
        member_variance: ``[M]`` ``Var_h conf[h, m]`` (population variance).
        trust: ``[M]`` mean reported epistemic uncertainty ``trust_m``.
        squared_error: ``[M]`` the members' squared error ``mean_h (acc_m - conf[h, m])^2``.
        terms: ``[M]`` signed terms ``squared_error - trust``.
        per_class: ``[K]`` per-class EECE for "classwise", else ``None``.
        binning: "kmeans" (K-means fitted on these points), "kmeans_fit" (fixed K-means cells),
            "bins" (explicit ids), "uniform" or "quantile" (bins of the mean prediction).
        backend: the K-means backend that ran ("auto" resolved), or ``None``.
        backend_settings: the backend's settings (per-class values are tuples).
        seed: the integer seed of the (first) K-means fit, or ``None`` when nothing was random.
        n_bins: the number of bins asked for (``"auto"`` resolved), ``None`` for explicit bins or
            centroids.
        n_bins_fitted: non-empty bins of the partition (the largest over classes for
            "classwise"): at most ``n_bins``, fewer when member vectors coincide or clusters end
            empty.
        bin_ids: for explicit ``bins``, the sorted distinct ids the per-bin arrays follow.
        seeds: the K-means seeds, one per partition (``n_seeds`` of them; empty when nothing was
            random).
        seed_values: the EECE of each seed's partition; :attr:`value` is their mean.
        seed_sd: standard deviation of :attr:`seed_values` (divisor ``S - 1``), ``None`` for one.
        point_bins: the bin of every point, ``[N]`` int64 (``[K, N]`` for "classwise", one row
            per class): the index into the per-bin arrays (the last axis of :attr:`counts`), so
            ``counts == bincount(point_bins)``. For a K-means partition it is the nearest fitted
            centroid of each member vector (what :func:`~bensemble.metrics.assign_bins` gives);
            it comes from the fit itself, no extra pass. Lets a bootstrap keep the bins fixed
            without refitting.
        fitted_binning: the binning that made :attr:`point_bins` (for a binning the EECE fitted,
            the first seed's fitted copy): reuse it on other predictions with ``binning=``.

    With ``n_seeds > 1`` the per-bin fields describe the first seed's partition
    (``seed_values[0]``).
    """

    value: float
    counts: torch.Tensor
    acc: torch.Tensor
    mean_delta: torch.Tensor
    member_variance: torch.Tensor
    trust: torch.Tensor
    squared_error: torch.Tensor
    terms: torch.Tensor
    per_class: torch.Tensor | None = None
    binning: str = "kmeans"
    backend: str | None = None
    backend_settings: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None
    n_bins: int | None = None
    n_bins_fitted: int = 0
    bin_ids: torch.Tensor | None = None
    seeds: tuple[int, ...] = ()
    seed_values: tuple[float, ...] = ()
    seed_sd: float | None = None
    point_bins: torch.Tensor | None = field(default=None, repr=False)
    fitted_binning: Any = field(default=None, repr=False)

    @property
    def weights(self) -> torch.Tensor:
        """``|B_m| / N`` (per class for "classwise"): ``seed_values[0] == (weights *
        |terms|).nansum()`` (divided by ``K`` for "classwise")."""
        return self.counts / self.counts.sum(-1, keepdim=True)


# ----------------------------------------------------------------------------- kernels


def _member_variance(cols: torch.Tensor, chunk: int = 1 << 16) -> torch.Tensor:
    """Population variance over members of ``cols [H, R]`` -> ``[R]``: the two-pass formula
    (mean, then mean squared deviation), a block of columns at a time. About 3x faster than
    ``torch.var`` over the member axis, without a full-size temporary."""
    out = torch.empty(cols.shape[1], dtype=_F64, device=cols.device)
    for start in range(0, cols.shape[1], chunk):
        block = cols[:, start : start + chunk]
        dev = block - block.mean(dim=0)
        out[start : start + chunk] = dev.mul_(dev).mean(dim=0)
    return out


def _eece_update(
    cols: torch.Tensor, y: torch.Tensor, eu: torch.Tensor, ids: torch.Tensor, n_slots: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-bin sufficient statistics in one pass each.

    Args:
        cols: ``[H, R]`` float64 member probabilities, one column per row (point).
        y: ``[R]`` float64 0/1 outcomes.
        eu: ``[R]`` float64 reported epistemic uncertainty.
        ids: ``[R]`` int64 bin ids in ``[0, n_slots)``.
        n_slots: number of bins.

    Returns:
        ``(counts [B], sum_y [B], sum_eu [B], sum_p [B, H])``.
    """
    counts, sum_y, sum_eu = bin_sums(ids, n_slots, y, eu)
    # index_add_ along the point axis of the [H, R] layout: 2-4x faster than on its transpose.
    sum_p = torch.zeros(cols.shape[0], n_slots, dtype=_F64, device=cols.device)
    sum_p.index_add_(1, ids, cols)
    return counts, sum_y, sum_eu, sum_p.T


def _eece_compute(
    counts: torch.Tensor, sum_y: torch.Tensor, sum_eu: torch.Tensor, sum_p: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Per-bin quantities from the sums (empty bins -> NaN) and the weighted ``|terms|``."""
    filled = counts > 0
    denom = counts.clamp_min(1.0)
    nan = torch.tensor(float("nan"), dtype=_F64, device=counts.device)
    acc = sum_y / denom
    conf = sum_p / denom[:, None]  # [B, H]
    trust = sum_eu / denom
    squared_error = ((acc[:, None] - conf) ** 2).mean(dim=1)
    terms = squared_error - trust
    out = {
        "counts": counts,
        "acc": acc,
        "mean_delta": conf.mean(dim=1),
        "member_variance": conf.var(dim=1, unbiased=False),
        "trust": trust,
        "squared_error": squared_error,
        "terms": terms,
    }
    out = {k: v if k == "counts" else torch.where(filled, v, nan) for k, v in out.items()}
    out["weighted"] = torch.where(filled, counts * terms.abs(), torch.zeros_like(counts))
    return out
