"""Binnings without K-means: bins of the mean prediction (equal width or equal mass), and explicit
bin ids.

:class:`UniformBinning` and :class:`QuantileBinning` cut the points by the members' mean
prediction ``Delta = mean_h p_h`` of the binned column (per class for "classwise", the top-label
confidence for "top_label") with the ECE's rules (:mod:`bensemble.metrics.calibration`: bins
``(lower, upper]``, bensemble 0.2's float32 grid; equal-mass edges from order statistics, ties
never split). They ignore how the members spread around ``Delta``, so as EECE partitions they
are coarser than K-means cells of the whole member vector (the paper's): use them as baselines,
or to compare an EECE with the ECE's bins. :class:`ExplicitBinning` holds bin ids given per
point (shared by every class).
"""

from __future__ import annotations

from typing import Any

import torch

from bensemble._validation import as_labels, check_n_bins
from bensemble.metrics._binning import bucketize_ids, quantile_edges, uniform_bin_ids
from bensemble.metrics.binning.base import Binning, MemberColumns

__all__ = ["ExplicitBinning", "QuantileBinning", "UniformBinning"]

_F64 = torch.float64


def _mean_predictions(columns: MemberColumns) -> torch.Tensor:
    """``[N, G]`` mean prediction of every binned column (members in canonical order)."""
    if columns.mode == "classwise":
        return columns.p.mean(dim=0)
    return columns.single().mean(dim=0)[:, None]


class _MeanPredictionBinning(Binning):
    """``n_bins`` bins of the mean prediction: the option :class:`UniformBinning` and
    :class:`QuantileBinning` share."""

    def __init__(self, n_bins: int = 15) -> None:
        super().__init__()
        self.n_bins = check_n_bins(n_bins, self._name)

    def _options(self, changed_only: bool = False) -> dict[str, Any]:
        return {"n_bins": self.n_bins}


class UniformBinning(_MeanPredictionBinning):
    """``n_bins`` equal-width bins of the mean prediction (the ECE's ``binning="uniform"``).

    Nothing is learnt: ``fit`` records what is binned. Bin ``b`` is ``(b / B, (b + 1) / B]``
    on bensemble 0.2's float32 grid; a mean prediction of exactly 0 is in bin 0.

    Example:
        >>> import torch
        >>> p = torch.tensor([[0.1, 0.3, 0.9], [0.3, 0.3, 0.7]])
        >>> UniformBinning(4).fit(p, binary=True).assign(p).tolist()
        [0, 1, 3]
    """

    _name = "UniformBinning"

    def _fit_columns(self, columns: MemberColumns, fn: str) -> list[torch.Tensor]:
        self._state = self._base_state(columns, self.n_bins)
        return self._assign_columns(columns, fn)

    def _assign_columns(self, columns: MemberColumns, fn: str) -> list[torch.Tensor]:
        ids = uniform_bin_ids(_mean_predictions(columns), self.n_bins).to(torch.int64)
        return list(ids.T)


class QuantileBinning(_MeanPredictionBinning):
    """``n_bins`` equal-mass bins of the mean prediction (the ECE's ``binning="quantile"``),
    edges fitted per binned column.

    Inner edge ``k`` is the ``ceil(k N / B)``-th smallest mean prediction of the fitted points;
    bins are ``(lower, upper]`` (ties never split, so a bin may end empty).

    Example:
        >>> import torch
        >>> p = torch.tensor([[0.1, 0.2, 0.6, 0.9], [0.1, 0.4, 0.6, 0.9]])
        >>> QuantileBinning(2).fit(p, binary=True).assign(p).tolist()
        [0, 0, 1, 1]
    """

    _name = "QuantileBinning"

    @property
    def edges_(self) -> torch.Tensor:
        """``[B + 1]`` fitted edges (``[K, B + 1]`` for "classwise")."""
        edges = self._fitted_state(f"{self._name}.edges_")["edges"]
        return edges[0] if edges.shape[0] == 1 else edges

    def _fit_columns(self, columns: MemberColumns, fn: str) -> list[torch.Tensor]:
        state = self._base_state(columns, self.n_bins)
        state["edges"] = quantile_edges(_mean_predictions(columns), self.n_bins)
        self._state = state
        return self._assign_columns(columns, fn)

    def _assign_columns(self, columns: MemberColumns, fn: str) -> list[torch.Tensor]:
        edges = self._state["edges"].to(columns.p.device)
        delta = _mean_predictions(columns)
        ids = bucketize_ids(delta, edges)  # [N, G], offset by g * (B + 1)
        offset = torch.arange(delta.shape[1], device=ids.device) * (self.n_bins + 1)
        return list((ids - offset).T)

    def _check_state(self, state: dict[str, Any], fn: str) -> dict[str, Any]:
        state = super()._check_state(state, fn)
        edges = state.get("edges")
        shape = (state["groups"], self.n_bins + 1)
        if not isinstance(edges, torch.Tensor) or tuple(edges.shape) != shape:
            raise ValueError(f"{fn}: `state['fitted']['edges']` must be a {list(shape)} tensor")
        return state


class ExplicitBinning(Binning):
    """Bins given as one id per point (shared by every class): ``assign`` returns them re-indexed
    by their sorted distinct values ``0 .. B - 1`` (:attr:`bin_ids_` holds those values), so
    per-bin arrays never grow with the largest id.

    Args:
        bin_ids: ``[N]`` non-negative integer bin ids.

    Example:
        >>> import torch
        >>> b = ExplicitBinning([7, 7, 2]).fit(torch.rand(2, 3), binary=True)
        >>> b.assign(torch.rand(2, 3)).tolist(), b.bin_ids_.tolist()
        ([1, 1, 0], [2, 7])
    """

    _name = "ExplicitBinning"

    def __init__(self, bin_ids: Any) -> None:
        super().__init__()
        fn = self._name
        ids = as_labels(bin_ids, "bin_ids", fn)
        lo = int(ids.min())
        if lo < 0:
            raise ValueError(f"{fn}: `bin_ids` must hold bin ids >= 0 (got a minimum of {lo})")
        self.bin_ids = ids
        self._argument = "bin_ids"  # the name errors give it (the EECE's deprecated `bins`)
        self._distinct, self._dense = torch.unique(ids, sorted=True, return_inverse=True)

    @property
    def bin_ids_(self) -> torch.Tensor:
        """The sorted distinct ids; dense id ``b`` stands for ``bin_ids_[b]``."""
        return self._distinct

    def _options(self, changed_only: bool = False) -> dict[str, Any]:
        return {"bin_ids": self.bin_ids}

    def _fit_columns(self, columns: MemberColumns, fn: str) -> list[torch.Tensor]:
        self._state = self._base_state(columns, self._distinct.numel())
        return self._assign_columns(columns, fn)

    def _assign_columns(self, columns: MemberColumns, fn: str) -> list[torch.Tensor]:
        if columns.n != self._dense.numel():
            raise ValueError(
                f"{fn}: `{self._argument}` must hold one bin id per point, N = {columns.n} "
                f"(got {self._dense.numel()})"
            )
        return [self._dense.to(columns.p.device)] * columns.groups

    def __repr__(self) -> str:
        return f"ExplicitBinning(<{self._dense.numel()} points in {self._distinct.numel()} bins>)"
