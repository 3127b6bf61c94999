"""torchmetrics ``Metric`` subclasses over bensemble's streaming meters.

Each metric registers its meter's float64 sufficient statistics as states with
``dist_reduce_fx="sum"``, so a DDP sync moves ``O(bins)`` numbers whatever the number of samples
(torchmetrics' own ``CalibrationError`` keeps and gathers every sample's confidence). ``update``
runs the meter's update half (validation included), ``compute`` its compute half, and returns a
0-d float64 tensor (torchmetrics' convention).

Usage in a Lightning-style loop::

    self.ece = ExpectedCalibrationError(n_bins=15)        # in __init__

    def validation_step(self, batch, idx):
        x, y = batch
        self.ece.update(self(x).softmax(-1), y)           # or from_logits=True

    def on_validation_epoch_end(self):
        self.log("val/ece", self.ece.compute())           # synced over ranks
        self.ece.reset()

torchmetrics is an optional dependency (``pip install torchmetrics``): this module imports
without it, and the classes raise an ``ImportError`` saying so when constructed.
"""

from __future__ import annotations

from typing import Any

import torch

from bensemble.metrics.streaming import (
    BrierMeter,
    CalibrationErrorMeter,
    ClasswiseCalibrationErrorMeter,
    NLLMeter,
)
from bensemble.metrics.streaming_epistemic import EECEMeter

try:
    from torchmetrics import Metric as _Base

    _MISSING = None
except ImportError as exc:  # pragma: no cover - exercised by the missing-package test
    _Base = object
    _MISSING = exc

__all__ = [
    "ExpectedCalibrationError",
    "ClasswiseCalibrationError",
    "NegativeLogLikelihood",
    "BrierScore",
    "ExpectedEpistemicCalibrationError",
]


class _MeterMetric(_Base):
    """A ``torchmetrics.Metric`` whose states are a streaming meter's float64 sums."""

    full_state_update = False
    is_differentiable = False
    higher_is_better = False

    def __init__(self, meter: Any, **kwargs: Any) -> None:
        if _MISSING is not None:
            raise ImportError(
                f"{type(self).__name__}: needs the optional torchmetrics package "
                "(pip install torchmetrics); it is not installed. Without it, use the meters of "
                "bensemble.metrics.streaming with bensemble.integrations.sync_"
            ) from _MISSING
        super().__init__(**kwargs)
        self._meter = meter
        self._names = tuple(meter.state)
        for name, value in meter.state.items():
            self.add_state(name, default=value.clone(), dist_reduce_fx="sum")

    def update(self, *batch: Any, **options: Any) -> None:
        """Add one batch (arguments as the meter's ``update``)."""
        for name, value in self._meter._stats(*batch, **options).items():
            current = getattr(self, name)
            setattr(self, name, current + value.to(device=current.device, dtype=current.dtype))

    def compute(self) -> torch.Tensor:
        """The metric over everything seen (on every rank after a sync), as a 0-d tensor."""
        state = {name: getattr(self, name) for name in self._names}
        if int(self._meter._count(state)) == 0:
            raise ValueError(f"{type(self).__name__}: no data yet (got no batch) - call update()")
        return torch.tensor(self._meter._value(state), dtype=torch.float64)


class ExpectedCalibrationError(_MeterMetric):
    """Top-label calibration error (:class:`~bensemble.metrics.streaming.CalibrationErrorMeter`);
    ``update(probs [B, K], targets [B])``."""

    def __init__(
        self,
        n_bins: int = 15,
        norm: str = "l1",
        num_classes: int | None = None,
        *,
        from_logits: bool = False,
        **kwargs: Any,
    ) -> None:
        meter = CalibrationErrorMeter(n_bins, norm, num_classes, from_logits=from_logits)
        super().__init__(meter, **kwargs)


class ClasswiseCalibrationError(_MeterMetric):
    """Classwise calibration error
    (:class:`~bensemble.metrics.streaming.ClasswiseCalibrationErrorMeter`)."""

    def __init__(
        self,
        num_classes: int,
        n_bins: int = 15,
        norm: str = "l1",
        *,
        from_logits: bool = False,
        **kwargs: Any,
    ) -> None:
        meter = ClasswiseCalibrationErrorMeter(num_classes, n_bins, norm, from_logits=from_logits)
        super().__init__(meter, **kwargs)


class NegativeLogLikelihood(_MeterMetric):
    """Mean NLL (:class:`~bensemble.metrics.streaming.NLLMeter`)."""

    def __init__(self, eps: float = 1e-8, *, from_logits: bool = False, **kwargs: Any) -> None:
        super().__init__(NLLMeter(eps, from_logits=from_logits), **kwargs)


class BrierScore(_MeterMetric):
    """Multi-class Brier score (:class:`~bensemble.metrics.streaming.BrierMeter`)."""

    def __init__(self, *, from_logits: bool = False, **kwargs: Any) -> None:
        super().__init__(BrierMeter(from_logits=from_logits), **kwargs)


class ExpectedEpistemicCalibrationError(_MeterMetric):
    """EECE with fixed centroids (:class:`~bensemble.metrics.streaming_epistemic.EECEMeter`);
    ``update(member_probs [H, B, K], labels [B])``."""

    def __init__(
        self,
        centroids: Any,
        multiclass: str = "classwise",
        num_classes: int | None = None,
        *,
        binary: bool = False,
        **kwargs: Any,
    ) -> None:
        meter = EECEMeter(centroids, multiclass, num_classes, binary=binary)
        super().__init__(meter, **kwargs)
