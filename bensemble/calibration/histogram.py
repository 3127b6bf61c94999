"""Histogram binning (Zadrozny and Elkan, 2001): each equal-width bin of a probability is mapped
to the frequency of the class among the calibration points that fell in it."""

from __future__ import annotations

from typing import Any

import torch

from bensemble._validation import check_n_bins
from bensemble.calibration._api import (
    ProbabilityCalibrator,
    as_numpy,
    in_unit_interval,
    normalise_rows,
    shape_is,
)

__all__ = ["HistogramBinningCalibration"]

_F64 = torch.float64


def one_vs_all_columns(p: torch.Tensor, y: torch.Tensor | None = None) -> tuple:
    """The scores each one-vs-all map sees, ``[N, G]``, and their 0/1 targets.

    ``G = 1`` for two classes (the positive class, column 1: one binary map) and ``G = K``
    otherwise (one map per class).
    """
    cols = p[:, 1:2] if p.shape[1] == 2 else p
    if y is None:
        return cols, None
    classes = torch.arange(cols.shape[1], device=p.device) + (1 if p.shape[1] == 2 else 0)
    return cols, (y[:, None] == classes[None, :]).to(_F64)


def combine_one_vs_all(q: torch.Tensor, k: int) -> torch.Tensor:
    """``[N, G]`` calibrated one-vs-all probabilities to ``[N, K]`` rows on the simplex.

    Binary: ``(1 - q, q)``; ``K > 2``: each row divided by its sum (a row of zeros becomes
    uniform).
    """
    if k == 2:
        return torch.cat([1.0 - q, q], dim=1)
    return normalise_rows(q)


def equal_width_ids(values: torch.Tensor, n_bins: int) -> torch.Tensor:
    """Bin ids of values in ``[0, 1]`` under the library's ``(lower, upper]`` rule, 0 in bin 0.

    Edges ``linspace(0, 1, n_bins + 1)`` in float64 (as the ECE's reliability bins).
    """
    edges = torch.linspace(0.0, 1.0, n_bins + 1, dtype=_F64, device=values.device)
    ids = torch.bucketize(values.contiguous(), edges, right=False)
    return (ids - 1).clamp_(0, n_bins - 1)


class HistogramBinningCalibration(ProbabilityCalibrator):
    r"""Histogram binning: a probability is replaced by the class frequency of its bin.

    For a binary task (two classes, or ``[N]`` positive-class probabilities) the positive-class
    probability ``p`` is cut into ``n_bins`` equal-width bins ``(b / B, (b + 1) / B]`` (0 falls in
    the first bin, as in the library's ECE), and

    .. math:: \hat q(p) = \frac{\#\{i : p_i \in \text{bin}(p),\ y_i = 1\}}
                              {\#\{i : p_i \in \text{bin}(p)\}},

    the other class getting ``1 - q``. An empty bin maps to its centre. With ``K > 2`` classes
    every class gets its own one-vs-all map on its column (Zadrozny and Elkan, 2002) and each row
    is divided by its sum (a row of zeros becomes uniform).

    The map is piecewise constant: it can change the predicted class, ties many predictions,
    and its resolution is the bin width. Agrees with netcal's ``HistogramBinning`` (equal
    intervals) to rounding for values off the bin edges (tests/calibration/
    test_probability_calibrators.py): netcal counts a value on an edge into the upper bin while
    fitting and the lower one while transforming, this class uses the lower one throughout.

    Args:
        n_bins: Number of equal-width bins ``B`` (>= 1).
        from_logits: Whether ``fit`` / ``transform`` receive logits (softmax over the classes;
            sigmoid of ``[N]`` positive-class logits) instead of probabilities.

    Attributes:
        bin_values: ``[G, B]`` float64 buffer of the fitted bin frequencies (``G = 1`` for two
            classes, ``K`` otherwise).
        bin_values_: The same as a float64 numpy array.
        bin_counts_: ``[G, B]`` calibration points per bin (set by :meth:`fit`, not saved).

    Example:
        >>> import torch
        >>> p = torch.tensor([0.05, 0.15, 0.2, 0.9, 0.95])
        >>> y = torch.tensor([0, 0, 1, 1, 1])
        >>> cal = HistogramBinningCalibration(n_bins=2).fit(p, y)
        >>> cal.transform(torch.tensor([0.1, 0.5, 0.99]))  # bins (0, .5] and (.5, 1]
        tensor([0.3333, 0.3333, 1.0000])
    """

    _name = "HistogramBinningCalibration"
    _state_names = ("bin_values",)

    def __init__(self, n_bins: int = 10, *, from_logits: bool = False) -> None:
        super().__init__(from_logits=from_logits)
        self.n_bins = check_n_bins(n_bins, self._name)

    @property
    def bin_values_(self) -> Any:
        self._require_fit(f"{self._name}.bin_values_")
        return as_numpy(self.bin_values)

    def _check_hyperparameters(self, fn: str) -> None:
        super()._check_hyperparameters(fn)
        check_n_bins(self.n_bins, fn)

    def _fit_map(self, p: torch.Tensor, log_p: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
        cols, targets = one_vs_all_columns(p, y)
        n_groups, n_bins = cols.shape[1], self.n_bins
        ids = equal_width_ids(cols, n_bins) + n_bins * torch.arange(n_groups, device=p.device)
        counts = torch.bincount(ids.reshape(-1), minlength=n_groups * n_bins).to(_F64)
        hits = torch.bincount(ids.reshape(-1), weights=targets.reshape(-1), minlength=len(counts))
        centres = (torch.arange(n_bins, dtype=_F64, device=p.device) + 0.5) / n_bins
        values = torch.where(counts > 0, hits / counts.clamp_min(1.0), centres.repeat(n_groups))
        return {
            "bin_values": values.view(n_groups, n_bins),
            "bin_counts_": counts.view(n_groups, n_bins).to(torch.int64),
        }

    def _apply_map(self, p: torch.Tensor, log_p: torch.Tensor) -> torch.Tensor:
        cols, _ = one_vs_all_columns(p)
        ids = equal_width_ids(cols, self.n_bins)  # [N, G]
        q = self._fitted("bin_values").T.gather(
            0, ids
        )  # bin_values.T [B, G]; q[n, g] = values[g, ids]
        return combine_one_vs_all(q, p.shape[1])

    def _check_state(self, state: dict[str, torch.Tensor], k: int, fn: str) -> None:
        key = "bin_values"
        shape_is(state[key], (1 if k == 2 else k, self.n_bins), fn, key)
        in_unit_interval(state[key], fn, key)

    def _repr_options(self) -> list[str]:
        return [f"n_bins={self.n_bins}"]
