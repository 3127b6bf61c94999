r"""Replicate state of the top-label and classwise ECE (equal-width bins held fixed).

With ``G`` groups (1 for the top-label ECE, ``K`` classes for the classwise ECE) and ``B`` bins,
sample ``i`` has in group ``g`` a bin ``b_ig`` and a gap ``d_ig`` (``correct - confidence``, or
``[y = k] - p_k``). The state holds, for the data (row 0) and every replicate ``r``,

* ``sums [G B, R + 1]``: ``S_gb[r] = sum_i w_ir d_ig [b_ig = b]`` (one sparse product per block
  of samples), and ``totals [R + 1]``: ``W[r] = sum_i w_ir``;
* unweighted per-bin ``counts``, ``sum_confidence``, ``sum_correct`` ``[G, B]`` (the
  :class:`~bensemble.metrics.CalibrationBins` of the data: the point value comes from the
  metric's own compute half, so it equals :func:`~bensemble.metrics.expected_calibration_error`
  / :func:`~bensemble.metrics.classwise_calibration_error` of the same samples).

The per-bin vector ``T_gb = S_gb / (G W)`` estimates ``E[d 1{b}] / G`` without bias, and the
calibration error is its L1 norm, ``sum_gb |T_gb|``: the interval is
:func:`~bensemble.metrics.intervals.l1_norm_interval` of it (the binned population error with
these bins; the bins are fixed equal-width bins, so nothing else varies).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from bensemble._validation import check_bool, check_n_bins, check_positive_int
from bensemble.metrics._binning import bin_sums, grid_edges, uniform_bin_ids
from bensemble.metrics._bins import CalibrationBins
from bensemble.metrics.intervals._interval import Interval, l1_norm_interval, percentile_interval
from bensemble.metrics.intervals._replicate_checks import check_calibration_sums
from bensemble.metrics.intervals._replicates import (
    LEVEL,
    ReplicatesBase,
    check_level,
    check_method,
)
from bensemble.metrics.intervals._sparse_sums import add_sparse_sums, sparse_sums

__all__ = ["CalibrationReplicates", "METHODS", "add_sparse_sums", "sparse_sums"]

_F64 = torch.float64
#: Interval methods of the calibration errors: the valid one first; the other two (a percentile
#: interval of the replicate errors, raw or shifted down by the bootstrap bias estimate as the
#: report did until issue 21) are kept for comparison only.
METHODS = ("l1-two-step", "percentile", "debiased-percentile")


class CalibrationReplicates(ReplicatesBase):
    r"""The top-label (or classwise) ECE, its bootstrap replicates and its interval.

    ``update(weights, probs, labels)``: ``weights [c, R]``, ``probs [c, K]`` probabilities in
    their own floating dtype (the bin edges are compared in it, as the metric does), ``labels
    [c]``. Equal-width bins ``(e_b, e_{b+1}]`` on bensemble's grid, as
    :func:`~bensemble.metrics.expected_calibration_error`.

    The interval (method ``"l1-two-step"``) covers the *binned population* calibration error
    with these fixed bins, ``sum_b |E[(correct - conf) 1{conf in b}]|`` (top-label; per class
    and averaged for classwise), over the sampling variability of the evaluated points; it is
    valid near zero (its lower end is 0 when perfect calibration is not rejected).

    Args:
        n_bins: equal-width bins ``B``.
        classwise: the classwise ECE (mean over classes) instead of the top-label ECE.
        num_classes: ``K`` (required with ``classwise=True``: the state has one row per class;
            with the top-label ECE optional, and then every chunk must have ``K`` columns).
        n_replicates: bootstrap replicates ``R``.

    Example:
        >>> from bensemble.metrics.intervals import poisson_weights
        >>> p = torch.tensor([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7], [0.8, 0.2]])
        >>> state = CalibrationReplicates(5, n_replicates=20)
        >>> _ = state.update(poisson_weights(range(4), 20), p, torch.tensor([0, 1, 1, 0]))
        >>> round(state.compute().point, 4)
        0.3
    """

    _fn = "CalibrationReplicates"
    _SETTINGS = ("n_bins", "classwise", "num_classes")
    method = "l1-two-step"

    def __init__(
        self,
        n_bins: int = 15,
        *,
        classwise: bool = False,
        num_classes: int | None = None,
        n_replicates: int = 200,
    ) -> None:
        fn = self._fn
        self.n_bins = check_n_bins(n_bins, fn)
        self.classwise = check_bool(classwise, "classwise", fn)
        if self.classwise:
            if num_classes is None:
                raise ValueError(
                    f"{fn}: `num_classes` must be given with classwise=True (got None)"
                )
            self.num_classes = check_positive_int(num_classes, "num_classes", fn)
        else:
            if num_classes is not None:
                check_positive_int(num_classes, "num_classes", fn)
            self.num_classes = num_classes
        self.groups = self.num_classes if self.classwise else 1
        super().__init__(n_replicates)

    def _sums_shape(self) -> tuple[int, ...]:
        return (self.groups * self.n_bins, self.n_replicates + 1)

    def _extra_shapes(self) -> dict[str, tuple[int, ...]]:
        shape = (self.groups, self.n_bins)
        return {"counts": shape, "sum_confidence": shape, "sum_correct": shape}

    def _check_sums(self, state: dict[str, torch.Tensor], where: str, prefix: str = "") -> None:
        check_calibration_sums(state, where, self.groups, prefix)

    def _prepare(self, probs: Any, labels: Any) -> tuple[int, dict[str, np.ndarray]]:
        from bensemble.metrics.scoring import _check_probs_targets, _top_label

        fn = self._fn + ".update"
        p, y = _check_probs_targets(probs, labels, fn, False)
        p, y = p.cpu(), y.cpu()
        if self.num_classes is not None and p.shape[1] != self.num_classes:
            raise ValueError(
                f"{fn}: `probs` must have num_classes = {self.num_classes} columns "
                f"(got {p.shape[1]})"
            )
        b = self.n_bins
        if self.classwise:
            k = p.shape[1]
            ids = uniform_bin_ids(p, b).to(torch.int64) + torch.arange(k) * b
            values = p.to(_F64)
            onehot = torch.nn.functional.one_hot(y, k).to(_F64)
            gaps = onehot - values
            hits = onehot
        else:
            conf, pred = _top_label(p)
            ids = uniform_bin_ids(conf, b).to(torch.int64)[:, None]
            values = conf.to(_F64)[:, None]
            hits = (pred == y).to(_F64)[:, None]
            gaps = hits - values
        return p.shape[0], {
            "ids": ids.contiguous().numpy(),
            "gaps": gaps.contiguous().numpy(),
            "values": values.contiguous().numpy(),
            "hits": hits.contiguous().numpy(),
        }

    def _accumulate(self, into: np.ndarray, prepared: Any, rows: slice, w: np.ndarray) -> None:
        add_sparse_sums(into, prepared["ids"][rows], prepared["gaps"][rows], w)

    def _points(self, prepared: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        slots = self.groups * self.n_bins
        ids = torch.from_numpy(prepared["ids"])
        counts, conf, hits = bin_sums(
            ids, slots, torch.from_numpy(prepared["values"]), torch.from_numpy(prepared["hits"])
        )
        shape = (self.groups, self.n_bins)
        return {
            "counts": counts.view(shape).numpy(),
            "sum_confidence": conf.view(shape).numpy(),
            "sum_correct": hits.view(shape).numpy(),
        }

    # ---------------------------------------------------------------- results
    def bins(self) -> CalibrationBins:
        """The data's :class:`~bensemble.metrics.CalibrationBins` (top-label only)."""
        if self.classwise:
            raise ValueError(
                f"{self._fn}.bins: `classwise` must be False for one CalibrationBins (got True; "
                "use .state['counts'] etc., one row per class)"
            )
        self._check_ready()
        e = self._extra
        return CalibrationBins._unchecked(
            grid_edges(self.n_bins),
            torch.from_numpy(e["counts"][0].copy()),
            torch.from_numpy(e["sum_confidence"][0].copy()),
            torch.from_numpy(e["sum_correct"][0].copy()),
        )

    def point_value(self) -> float:
        """The calibration error of the data, by the metric's own compute half."""
        from bensemble.metrics.calibration import _norm_from_sums

        self._check_ready()
        e = {k: torch.from_numpy(v) for k, v in self._extra.items()}
        per_group = _norm_from_sums(e["counts"], e["sum_confidence"], e["sum_correct"], "l1")
        return float(per_group.mean())

    def replicate_terms(self) -> torch.Tensor:
        """``[R + 1, G B]`` per-bin terms ``T`` (row 0: the data), whose L1 norms are the errors."""
        self._check_ready()
        with np.errstate(invalid="ignore", divide="ignore"):
            t = self._sums.T / (self.groups * self._totals[:, None])
        return torch.from_numpy(t)

    def compute(self, level: float = LEVEL, method: str = "l1-two-step") -> Interval:
        """The calibration error and its interval (``method``: one of :data:`METHODS`)."""
        fn = f"{self._fn}.compute"
        level = check_level(level, fn)
        check_method(method, fn, METHODS)
        terms = self.replicate_terms()
        point = self.point_value()
        if method == "l1-two-step":
            low, high = l1_norm_interval(terms[0], terms[1:], level)
        else:
            values = terms[1:].abs().sum(1)
            ci = percentile_interval(values, level)
            low, high = (point, point) if ci is None else ci
            if method == "debiased-percentile":
                bias = float(values.mean()) - point
                low, high = max(low - bias, 0.0), max(high - bias, 0.0)
        return Interval(point, low, high, level, method, self.covers(), point, self.n_replicates)

    def covers(self) -> str:
        """What the interval is for (:attr:`Interval.covers`)."""
        what = (
            f"classwise ECE (mean over the {self.num_classes} classes)"
            if self.classwise
            else "top-label ECE"
        )
        return (
            f"the population {what} with these {self.n_bins} equal-width bins held fixed, over "
            "the sampling variability of the evaluated points (the model is fixed)"
        )
