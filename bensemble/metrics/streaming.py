"""Streaming (batch-by-batch, mergeable) top-label calibration error.

:class:`CalibrationErrorMeter` runs the update half of
:func:`~bensemble.metrics.calibration.expected_calibration_error` on each batch and adds the
per-bin sums (:class:`~bensemble.metrics.calibration.CalibrationBins`), so

    one-shot == streaming over any batch split == merged shards

up to float64 summation order (the counts are exact). Only equal-width (``"uniform"``) bins can
stream: equal-mass (``"quantile"``) edges are order statistics of *all* confidences, unknown until
the last batch has been seen, so a quantile ECE has to keep every sample.
"""

from __future__ import annotations

from typing import Any

import torch

from bensemble._validation import check_bool, check_n_bins, check_option, check_positive_int
from bensemble.metrics.calibration import (
    NORMS,
    CalibrationBins,
    _top_label_stats,
    calibration_error_from_bins,
)
from bensemble.metrics.scoring import _check_probs_targets

__all__ = ["CalibrationErrorMeter"]


class CalibrationErrorMeter:
    """Accumulates top-label calibration statistics over batches; state is ``O(n_bins)``.

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

    def __init__(
        self,
        n_bins: int = 15,
        norm: str = "l1",
        num_classes: int | None = None,
        *,
        from_logits: bool = False,
    ) -> None:
        fn = "CalibrationErrorMeter"
        self.n_bins = check_n_bins(n_bins, fn)
        self.norm = check_option(norm, "norm", NORMS, fn)
        if num_classes is not None:
            num_classes = check_positive_int(num_classes, "num_classes", fn, minimum=2)
        self.num_classes = num_classes
        self.from_logits = check_bool(from_logits, "from_logits", fn)
        self._bins: CalibrationBins | None = None
        self._seen_classes: int | None = num_classes

    def update(self, probs: Any, targets: Any) -> CalibrationErrorMeter:
        """Add a batch ``probs [B, K]``, ``targets [B]``; returns ``self``."""
        fn = "CalibrationErrorMeter.update"
        p, y = _check_probs_targets(probs, targets, fn, self.from_logits)
        if self._seen_classes is not None and p.shape[1] != self._seen_classes:
            raise ValueError(
                f"{fn}: `probs` must have {self._seen_classes} classes (got shape {tuple(p.shape)})"
            )
        self._seen_classes = int(p.shape[1])
        stats = _top_label_stats(p, y, self.n_bins, "uniform")
        self._bins = stats if self._bins is None else self._bins + stats
        return self

    @property
    def bins(self) -> CalibrationBins:
        """The accumulated :class:`CalibrationBins` (raises before the first update)."""
        if self._bins is None:
            raise ValueError(
                "CalibrationErrorMeter: no data yet (got no batch) - call update() first"
            )
        return self._bins

    def compute(self) -> float:
        """The calibration error of everything seen so far."""
        return calibration_error_from_bins(self.bins, self.norm)

    def merge(self, other: CalibrationErrorMeter) -> CalibrationErrorMeter:
        """Add another meter's state (e.g. from another process / shard); returns ``self``.

        ``other`` must be a different meter (merging a meter with itself would count every
        sample twice; merge a ``copy.deepcopy`` if that is really meant) with the same
        ``n_bins`` and ``norm`` that has seen (or declares) the same number of classes.
        ``from_logits`` may differ: the state holds probabilities either way.
        """
        fn = "CalibrationErrorMeter.merge"
        if not isinstance(other, CalibrationErrorMeter):
            raise ValueError(
                f"{fn}: `other` must be a CalibrationErrorMeter (got {type(other).__name__})"
            )
        if other is self:
            raise ValueError(
                f"{fn}: `other` must be another meter (got the meter itself, whose samples "
                "would be counted twice)"
            )
        if (other.n_bins, other.norm) != (self.n_bins, self.norm):
            raise ValueError(
                f"{fn}: `other` must use the same n_bins and norm "
                f"({self.n_bins}, {self.norm!r}) (got ({other.n_bins}, {other.norm!r}))"
            )
        if None not in (self._seen_classes, other._seen_classes) and (
            self._seen_classes != other._seen_classes
        ):
            raise ValueError(
                f"{fn}: `other` must have seen {self._seen_classes} classes "
                f"(got {other._seen_classes})"
            )
        if other._bins is not None:
            self._bins = other._bins if self._bins is None else self._bins + other._bins
            self._seen_classes = self._seen_classes or other._seen_classes
        return self

    def reset(self) -> CalibrationErrorMeter:
        """Forget all batches (keeps the settings); returns ``self``."""
        self._bins = None
        self._seen_classes = self.num_classes
        return self

    def __repr__(self) -> str:
        n = 0 if self._bins is None else int(self._bins.total)
        return (
            f"CalibrationErrorMeter(n_bins={self.n_bins}, norm={self.norm!r}, "
            f"num_classes={self.num_classes}, samples={n})"
        )

    # a meter is a small value object: keep its state on the device of its first batch
    def to(self, device: torch.device | str) -> CalibrationErrorMeter:
        """Move the accumulated state to ``device``; returns ``self``."""
        try:
            device = torch.device(device)
        except (RuntimeError, TypeError) as exc:
            raise ValueError(
                f"CalibrationErrorMeter.to: `device` must be a torch device (got {device!r}: {exc})"
            ) from None
        if self._bins is not None:
            b = self._bins
            self._bins = CalibrationBins._unchecked(
                b.edges.to(device),
                b.counts.to(device),
                b.sum_confidence.to(device),
                b.sum_correct.to(device),
            )
        return self
