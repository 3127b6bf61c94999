"""The regression EECE's kernel pair and its details record (formula: :mod:`.epistemic`).

:func:`_reece_update` turns member means ``[H, N]``, labels, reported EU and bin ids into per-bin
float64 sums (one ``index_add_`` each); :func:`_reece_compute` turns the sums into the per-bin
quantities and the value. Sums merge by addition when the bins are fixed (centroids fitted first),
so a stream of chunks, or shards, gives the one-shot value.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

__all__ = ["RegressionEECEDetails"]

_F64 = torch.float64


@dataclass(frozen=True, eq=False)
class RegressionEECEDetails:
    """Per-bin ingredients of a regression EECE (float64 tensors ``[B]``; an empty bin is NaN).

    Attributes:
        value: the EECE, ``sum_b (n_b / N) |terms_b|`` (units of ``y`` squared).
        signed: ``sum_b (n_b / N) terms_b``: positive when the members' error exceeds their
            reported EU on the whole (over-confident), negative when it falls short.
        counts: ``[B]`` points per bin ``n_b``.
        mean_label: ``[B]`` ``ybar_b``.
        mean_prediction: ``[B]`` ``mean_h mubar_{h,b}`` (the bin's mean of the mean prediction).
        member_variance: ``[B]`` ``Var_h mubar_{h,b}`` (population variance over members).
        trust: ``[B]`` mean reported epistemic uncertainty ``mean EU_b``.
        squared_error: ``[B]`` ``mean_h (ybar_b - mubar_{h,b})^2`` (before the correction).
        correction: ``[B]`` the bias correction ``s_b^2 / n_b`` subtracted (0 when off, or for a
            bin of one point).
        terms: ``[B]`` ``squared_error - correction - trust``.
        n_bins: the number of bins asked for (``"auto"`` resolved); ``None`` with centroids.
        n_bins_fitted: non-empty bins.
        seed: the K-means seed, ``None`` with centroids.
        bias_correction: whether the correction was subtracted.
        centroids: ``[B, H]`` the centroids of the bins, columns in the members' given order.
        point_bins: ``[N]`` the bin of every point (an index into the per-bin arrays).
    """

    value: float
    signed: float
    counts: torch.Tensor
    mean_label: torch.Tensor
    mean_prediction: torch.Tensor
    member_variance: torch.Tensor
    trust: torch.Tensor
    squared_error: torch.Tensor
    correction: torch.Tensor
    terms: torch.Tensor
    n_bins: int | None
    n_bins_fitted: int
    seed: int | None
    bias_correction: bool
    centroids: torch.Tensor = field(repr=False)
    point_bins: torch.Tensor = field(repr=False)

    @property
    def weights(self) -> torch.Tensor:
        """``[B]`` ``n_b / N``: ``value == (weights * terms.abs()).nansum()``."""
        return self.counts / self.counts.sum()


def _reece_update(
    means: torch.Tensor,
    y: torch.Tensor,
    eu: torch.Tensor,
    ids: torch.Tensor,
    n_bins: int,
) -> dict[str, torch.Tensor]:
    """Per-bin float64 sums.

    Args:
        means: ``[H, N]`` float64 member means.
        y: ``[N]`` float64 labels.
        eu: ``[N]`` float64 reported epistemic uncertainty.
        ids: ``[N]`` int64 bin ids in ``[0, n_bins)``.
        n_bins: number of bins ``B``.

    Returns:
        ``{"count", "sum_y", "sum_eu", "sum_r2": [B], "sum_resid": [B, H]}`` with the member
        residuals ``y - mu_h`` summed per bin and ``r = y - mean_h mu_h``.
    """
    device = means.device

    def per_bin(values: torch.Tensor) -> torch.Tensor:
        return torch.zeros(n_bins, dtype=_F64, device=device).index_add_(0, ids, values)

    resid = y[None, :] - means  # [H, N]
    r = resid.mean(dim=0)
    sum_resid = torch.zeros(means.shape[0], n_bins, dtype=_F64, device=device)
    sum_resid.index_add_(1, ids, resid)
    return {
        "count": per_bin(torch.ones_like(y)),
        "sum_y": per_bin(y),
        "sum_eu": per_bin(eu),
        "sum_r2": per_bin(r.square()),
        "sum_resid": sum_resid.T.contiguous(),
    }


def _reece_compute(
    state: dict[str, torch.Tensor], bias_correction: bool
) -> dict[str, torch.Tensor]:
    """Per-bin quantities (empty bins NaN) and ``value`` / ``signed`` as 0-d tensors."""
    counts = state["count"]
    filled = counts > 0
    denom = counts.clamp_min(1.0)
    gap = state["sum_resid"] / denom[:, None]  # [B, H]: ybar_b - mubar_{h,b}
    mean_label = state["sum_y"] / denom
    squared_error = gap.square().mean(dim=1)
    trust = state["sum_eu"] / denom
    sum_r = state["sum_resid"].mean(dim=1)
    # sample variance of the residuals r = y - mean prediction in the bin (divisor n_b - 1)
    spread = (state["sum_r2"] - sum_r.square() / denom).clamp_min(0.0)
    s2 = spread / (counts - 1.0).clamp_min(1.0)
    correction = torch.where(counts >= 2, s2 / denom, torch.zeros_like(s2))
    if not bias_correction:
        correction = torch.zeros_like(correction)
    terms = squared_error - correction - trust
    total = counts.sum().clamp_min(1.0)
    weights = torch.where(filled, counts / total, torch.zeros_like(counts))
    safe_terms = torch.where(filled, terms, torch.zeros_like(terms))
    nan = torch.tensor(float("nan"), dtype=_F64, device=counts.device)
    out = {
        "mean_label": mean_label,
        "mean_prediction": mean_label - gap.mean(dim=1),
        "member_variance": gap.var(dim=1, unbiased=False),
        "trust": trust,
        "squared_error": squared_error,
        "correction": correction,
        "terms": terms,
    }
    out = {key: torch.where(filled, value, nan) for key, value in out.items()}
    out["counts"] = counts
    out["value"] = (weights * safe_terms.abs()).sum()
    out["signed"] = (weights * safe_terms).sum()
    return out
