"""Streaming (batch-by-batch, mergeable) metrics: every additive metric as a float64 state.

Each meter holds fixed-shape float64 sufficient statistics (see
:class:`~bensemble.metrics._state.MergeableState`): ``update`` adds a batch (the update half of
the one-shot metric), ``merge`` adds another meter's state, ``compute`` is the compute half, and
``state_dict`` / ``load_state_dict`` save and restore it. So

    one-shot == streaming over any batch split == merged shards == all-reduced ranks

up to float64 summation order (the counts are exact).

* :class:`CalibrationErrorMeter` - top-label ECE / RMSCE / MCE and reliability data
* :class:`ClasswiseCalibrationErrorMeter` - classwise calibration error
* :class:`NLLMeter`, :class:`BrierMeter`, :class:`AccuracyMeter` - scoring rules and accuracy
* :class:`~bensemble.metrics.streaming_epistemic.UncertaintyMeter` - mean total / aleatoric /
  epistemic uncertainty of member predictions
* :class:`~bensemble.metrics.streaming_epistemic.EECEMeter` - the EECE given fitted centroids

What does not stream, and why: equal-mass (``"quantile"``) bin edges are order statistics of
*all* confidences, unknown until the last batch, and so are conformal thresholds; compute them
on a gathered sample (or a first pass), then stream with the fixed edges / threshold. The
EECE's K-means bins likewise are fitted first (two-phase protocol: ``fit_bins`` on a sample,
broadcast the centroids, then accumulate :class:`EECEMeter` anywhere).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from bensemble._renamed import renamed_keywords
from bensemble._validation import (
    as_labels,
    as_logits,
    check_bool,
    check_n_bins,
    check_option,
    check_positive,
    check_positive_int,
)
from bensemble._validation_tensors import SUM_TOLERANCE
from bensemble.metrics._binning import grid_edges
from bensemble.metrics._state import _F64, MergeableState, check_bin_slots
from bensemble.metrics._state_checks import (
    SLACK,
    check_at_most,
    check_equal_totals,
    check_whole,
    check_zero_where_empty,
)
from bensemble.metrics.calibration import (
    NORMS,
    CalibrationBins,
    _classwise_stats,
    _norm_from_sums,
    _top_label_stats,
)
from bensemble.metrics.scoring import _brier_sum, _check_probs_targets, _correct_sum, _nll_sum

__all__ = [
    "CalibrationErrorMeter",
    "ClasswiseCalibrationErrorMeter",
    "NLLMeter",
    "BrierMeter",
    "AccuracyMeter",
    "MergeableState",
]


class _ProbsMeter(MergeableState):
    """A meter over ``probs [B, K]`` / ``labels [B]`` batches with an optional class count."""

    def __init__(self, num_classes: int | None, from_logits: bool) -> None:
        if num_classes is not None:
            num_classes = check_positive_int(num_classes, "num_classes", self._fn, minimum=2)
        self.num_classes = num_classes
        self.from_logits = check_bool(from_logits, "from_logits", self._fn)
        self._init_state()

    def _declared_seen(self) -> dict[str, int | None]:
        return {"num_classes": self.num_classes}

    def _batch(self, probs: Any, labels: Any) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """Validated ``probs``, ``labels`` and the class count they fix (checked, not stored)."""
        fn = f"{self._fn}.update"
        p, y = _check_probs_targets(probs, labels, fn, self.from_logits)
        return p, y, self._seen_in(fn, "probs", num_classes=int(p.shape[1]))


class CalibrationErrorMeter(_ProbsMeter):
    """Accumulates top-label calibration statistics over batches; state is ``O(n_bins)``.

    The state is :class:`~bensemble.metrics.calibration.CalibrationBins`' per-bin count, sum of
    confidences and sum of correctness (float64, ``[n_bins]`` each).

    Args:
        n_bins: number of equal-width bins (bensemble 0.2's ``(lower, upper]`` bins).
        norm: ``"l1"`` (ECE), ``"l2"`` or ``"max"``; see
            :func:`~bensemble.metrics.calibration.expected_calibration_error`.
        num_classes: if given, every batch must have this many classes; otherwise the first
            batch fixes it.
        from_logits: batches hold logits (softmax applied per batch).

    Example:
        >>> meter = CalibrationErrorMeter(n_bins=5)
        >>> _ = meter.update([[0.9, 0.1], [0.6, 0.4]], [0, 1])
        >>> _ = meter.update([[0.3, 0.7], [0.8, 0.2]], [1, 0])
        >>> round(meter.compute(), 4)
        0.3
    """

    _fn = "CalibrationErrorMeter"

    def __init__(
        self,
        n_bins: int = 15,
        norm: str = "l1",
        num_classes: int | None = None,
        *,
        from_logits: bool = False,
    ) -> None:
        self.n_bins = check_n_bins(n_bins, self._fn)
        self.norm = check_option(norm, "norm", NORMS, self._fn)
        super().__init__(num_classes, from_logits)

    def _settings(self) -> dict[str, Any]:
        return {"n_bins": self.n_bins, "norm": self.norm}

    def _check_other(self, other: Any, fn: str, name: str = "other") -> None:
        if isinstance(other, CalibrationErrorMeter) and other is not self:
            if (other.n_bins, other.norm) != (self.n_bins, self.norm):
                raise ValueError(
                    f"{fn}: `{name}` must use the same n_bins and norm "
                    f"({self.n_bins}, {self.norm!r}) (got ({other.n_bins}, {other.norm!r}))"
                )
        super()._check_other(other, fn, name)

    def _empty_state(self) -> dict[str, torch.Tensor]:
        zeros = torch.zeros(self.n_bins, dtype=_F64)
        return {"counts": zeros, "sum_confidence": zeros.clone(), "sum_correct": zeros.clone()}

    def _count(self, state: dict[str, torch.Tensor]) -> float:
        return float(state["counts"].sum())

    def _stats(self, probs: Any, labels: Any) -> tuple[dict[str, torch.Tensor], dict]:
        """Per-bin sums of a batch ``probs [B, K]``, ``labels [B]``."""
        p, y, seen = self._batch(probs, labels)
        bins = _top_label_stats(p, y, self.n_bins, "uniform")
        stats = {
            "counts": bins.counts,
            "sum_confidence": bins.sum_confidence,
            "sum_correct": bins.sum_correct,
        }
        return stats, seen

    def _check_sums(self, state: dict[str, torch.Tensor], where: str) -> None:
        counts = state["counts"]
        check_whole(counts, where, "counts")
        check_at_most(state["sum_confidence"], counts, where, "sum_confidence", "`counts`")
        check_whole(state["sum_correct"], where, "sum_correct")
        check_at_most(state["sum_correct"], counts, where, "sum_correct", "`counts`", exact=True)

    def _value(self, state: dict[str, torch.Tensor]) -> float:
        s = state
        return float(_norm_from_sums(s["counts"], s["sum_confidence"], s["sum_correct"], self.norm))

    @renamed_keywords(targets="labels")
    def update(self, probs: Any, labels: Any) -> CalibrationErrorMeter:
        """Add a batch ``probs [B, K]``, ``labels [B]``; returns ``self``."""
        return super().update(probs, labels)

    @property
    def bins(self) -> CalibrationBins:
        """The accumulated :class:`CalibrationBins` (reliability data; raises before data)."""
        if self.n_samples == 0:
            raise ValueError(f"{self._fn}: no data yet (got no batch) - call update() first")
        s = self._state
        edges = grid_edges(self.n_bins, s["counts"].device)
        return CalibrationBins._unchecked(edges, s["counts"], s["sum_confidence"], s["sum_correct"])

    def __repr__(self) -> str:
        return (
            f"CalibrationErrorMeter(n_bins={self.n_bins}, norm={self.norm!r}, "
            f"num_classes={self.num_classes}, samples={self.n_samples})"
        )


class ClasswiseCalibrationErrorMeter(_ProbsMeter):
    """Streaming :func:`~bensemble.metrics.classwise_calibration_error` (uniform bins).

    State: per class and bin the count, the sum of ``p_k`` and the number of ``y = k``,
    ``[num_classes, n_bins]`` float64 each.

    Args:
        num_classes: number of classes ``K`` (fixes the state's shape).
        n_bins: equal-width bins per class.
        norm: ``"l1"``, ``"l2"`` or ``"max"``, applied per class before the mean over classes.
        from_logits: batches hold logits.

    Example:
        >>> m = ClasswiseCalibrationErrorMeter(2, n_bins=5)
        >>> _ = m.update([[0.9, 0.1], [0.6, 0.4]], [0, 1]).update([[0.3, 0.7], [0.8, 0.2]], [1, 0])
        >>> round(m.compute(), 4)
        0.3
    """

    _fn = "ClasswiseCalibrationErrorMeter"

    def __init__(
        self, num_classes: int, n_bins: int = 15, norm: str = "l1", *, from_logits: bool = False
    ) -> None:
        fn = self._fn
        num_classes = check_positive_int(num_classes, "num_classes", fn, minimum=2)
        self.n_bins = check_n_bins(n_bins, fn)
        check_bin_slots(num_classes, self.n_bins, fn)
        self.norm = check_option(norm, "norm", NORMS, fn)
        super().__init__(num_classes, from_logits)

    def _settings(self) -> dict[str, Any]:
        return {"num_classes": self.num_classes, "n_bins": self.n_bins, "norm": self.norm}

    def _empty_state(self) -> dict[str, torch.Tensor]:
        zeros = torch.zeros(self.num_classes, self.n_bins, dtype=_F64)
        return {"counts": zeros, "sum_p": zeros.clone(), "hits": zeros.clone()}

    def _count(self, state: dict[str, torch.Tensor]) -> float:
        return float(state["counts"][0].sum())

    def _stats(self, probs: Any, labels: Any) -> tuple[dict[str, torch.Tensor], dict]:
        p, y, seen = self._batch(probs, labels)
        counts, sum_p, hits = _classwise_stats(p, y, self.n_bins, "uniform")
        return {"counts": counts, "sum_p": sum_p, "hits": hits}, seen

    def _check_sums(self, state: dict[str, torch.Tensor], where: str) -> None:
        counts, hits = state["counts"], state["hits"]
        check_whole(counts, where, "counts")
        check_equal_totals(counts.sum(dim=1), where, "counts", "class")
        check_at_most(state["sum_p"], counts, where, "sum_p", "`counts`")
        check_whole(hits, where, "hits")
        check_at_most(hits, counts, where, "hits", "`counts`", exact=True)
        check_equal_totals(
            torch.stack([hits.sum(), counts[0].sum()]), where, "hits", "sample (its label)"
        )

    def _value(self, state: dict[str, torch.Tensor]) -> float:
        s = state
        return float(_norm_from_sums(s["counts"], s["sum_p"], s["hits"], self.norm).mean())

    @renamed_keywords(targets="labels")
    def update(self, probs: Any, labels: Any) -> ClasswiseCalibrationErrorMeter:
        """Add a batch ``probs [B, K]``, ``labels [B]``; returns ``self``."""
        return super().update(probs, labels)


class _MeanMeter(_ProbsMeter):
    """State ``{"total": sum over samples, "count": samples}``; value ``total / count``."""

    def _settings(self) -> dict[str, Any]:
        return {}

    def _empty_state(self) -> dict[str, torch.Tensor]:
        return {"total": torch.zeros((), dtype=_F64), "count": torch.zeros((), dtype=_F64)}

    def _value(self, state: dict[str, torch.Tensor]) -> float:
        return float(state["total"] / state["count"])

    def _check_sums(self, state: dict[str, torch.Tensor], where: str) -> None:
        check_whole(state["count"], where, "count")
        check_zero_where_empty(state["total"], state["count"], where, "total")
        self._check_total(state["total"], state["count"], where)

    def _check_total(self, total: torch.Tensor, count: torch.Tensor, where: str) -> None:
        raise NotImplementedError  # pragma: no cover - abstract

    def _sums(self, total: torch.Tensor, n: int, seen: dict) -> tuple[dict, dict]:
        count = torch.tensor(float(n), dtype=_F64, device=total.device)
        return {"total": total, "count": count}, seen

    @renamed_keywords(targets="labels")
    def update(self, probs: Any, labels: Any) -> _MeanMeter:
        """Add a batch ``probs [B, K]``, ``labels [B]``; returns ``self``."""
        return super().update(probs, labels)


class NLLMeter(_MeanMeter):
    """Streaming :func:`~bensemble.metrics.negative_log_likelihood` (same ``eps`` and
    ``from_logits`` semantics: logits use the exact log-softmax).

    Example:
        >>> round(NLLMeter().update([[0.5, 0.5]], [0]).update([[0.9, 0.1]], [0]).compute(), 4)
        0.3993
    """

    _fn = "NLLMeter"

    def __init__(
        self, eps: float = 1e-8, num_classes: int | None = None, *, from_logits: bool = False
    ) -> None:
        self.eps = check_positive(eps, "eps", self._fn, allow_zero=True)
        super().__init__(num_classes, from_logits)

    @property
    def _infinite_ok(self) -> tuple[str, ...]:
        return ("total",) if self.eps == 0 else ()  # p_y = 0 without eps: an infinite NLL

    def _settings(self) -> dict[str, Any]:
        return {"eps": self.eps}

    def _stats(self, probs: Any, labels: Any) -> tuple[dict[str, torch.Tensor], dict]:
        fn = f"{self._fn}.update"
        if self.from_logits:
            z = as_logits(probs, "probs", fn, ndim=2, min_classes=2, warn_on_simplex=True)
            y = as_labels(labels, "labels", fn, n=z.shape[0], num_classes=z.shape[1])
            seen = self._seen_in(fn, "probs", num_classes=int(z.shape[1]))
            total = _nll_sum(z, y.to(z.device), self.eps, logits=True)
        else:
            p, y, seen = self._batch(probs, labels)
            total = _nll_sum(p, y, self.eps, logits=False)
        return self._sums(total, y.shape[0], seen)

    def _check_total(self, total: torch.Tensor, count: torch.Tensor, where: str) -> None:
        # -log(p_y + eps) >= -log(1 + eps) per sample
        floor = -(count * math.log1p(self.eps)) * (1 + SLACK) - SLACK
        if float(total) < float(floor):
            raise ValueError(
                f"{where}['total']` must be >= -count * log(1 + eps) = {float(floor):.6g} "
                f"(got {float(total):.6g})"
            )


class BrierMeter(_MeanMeter):
    """Streaming :func:`~bensemble.metrics.brier_score`.

    Example:
        >>> round(BrierMeter().update([[0.5, 0.5]], [0]).update([[0.9, 0.1]], [0]).compute(), 4)
        0.26
    """

    _fn = "BrierMeter"

    def __init__(self, num_classes: int | None = None, *, from_logits: bool = False) -> None:
        super().__init__(num_classes, from_logits)

    def _stats(self, probs: Any, labels: Any) -> tuple[dict[str, torch.Tensor], dict]:
        p, y, seen = self._batch(probs, labels)
        return self._sums(_brier_sum(p, y), y.shape[0], seen)

    def _check_total(self, total: torch.Tensor, count: torch.Tensor, where: str) -> None:
        # sum_k (p_k - 1[y = k])^2 <= 2 per sample (up to the row-sum tolerance of the input)
        check_at_most(total, count * (2 + 2 * SUM_TOLERANCE), where, "total", "2 * `count`")


class AccuracyMeter(_MeanMeter):
    """Streaming :func:`~bensemble.metrics.accuracy`.

    Example:
        >>> AccuracyMeter().update([[0.4, 0.6], [0.9, 0.1]], [1, 0]).compute()
        1.0
    """

    _fn = "AccuracyMeter"

    def __init__(self, num_classes: int | None = None, *, from_logits: bool = False) -> None:
        super().__init__(num_classes, from_logits)

    def _stats(self, probs: Any, labels: Any) -> tuple[dict[str, torch.Tensor], dict]:
        p, y, seen = self._batch(probs, labels)
        return self._sums(_correct_sum(p, y), y.shape[0], seen)

    def _check_total(self, total: torch.Tensor, count: torch.Tensor, where: str) -> None:
        check_whole(total, where, "total")
        check_at_most(total, count, where, "total", "`count`", exact=True)
