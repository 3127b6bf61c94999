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

from bensemble.integrations._meter_metric import MeterMetric
from bensemble.metrics.streaming import (
    BrierMeter,
    CalibrationErrorMeter,
    ClasswiseCalibrationErrorMeter,
    NLLMeter,
)
from bensemble.metrics.streaming_epistemic import EECEMeter

__all__ = [
    "ExpectedCalibrationError",
    "ClasswiseCalibrationError",
    "NegativeLogLikelihood",
    "BrierScore",
    "ExpectedEpistemicCalibrationError",
]


class ExpectedCalibrationError(MeterMetric):
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


class ClasswiseCalibrationError(MeterMetric):
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


class NegativeLogLikelihood(MeterMetric):
    """Mean NLL (:class:`~bensemble.metrics.streaming.NLLMeter`)."""

    def __init__(self, eps: float = 1e-8, *, from_logits: bool = False, **kwargs: Any) -> None:
        super().__init__(NLLMeter(eps, from_logits=from_logits), **kwargs)


class BrierScore(MeterMetric):
    """Multi-class Brier score (:class:`~bensemble.metrics.streaming.BrierMeter`)."""

    def __init__(self, *, from_logits: bool = False, **kwargs: Any) -> None:
        super().__init__(BrierMeter(from_logits=from_logits), **kwargs)


class ExpectedEpistemicCalibrationError(MeterMetric):
    """EECE over fixed K-means bins
    (:class:`~bensemble.metrics.streaming_epistemic.EECEMeter`);
    ``update(member_probs [H, B, K], labels [B])``.

    The bins must exist before the first ``update``: build the metric with :meth:`from_sample`
    (a binning fitted on a sample - a calibration split, or the first validation batches), or
    pass a fitted binning (``KMeansBinning(...).fit(sample)``, :mod:`bensemble.metrics.binning`)
    or centroids fitted by :func:`bensemble.metrics.fit_bins` (one ``[M, H]`` set per class, on
    ``member_probs[:, :, k].T``). A metric cannot fit them in a first pass of its own: its
    states are per-bin sums, which only add up across batches and DDP ranks once every batch
    and rank uses the same bins, and fitting them from the data it sees would mean keeping
    every sample (``O(N)`` state, gathered - not summed - across ranks) and a second pass over
    the data, which neither Lightning's validation loop nor a DDP sync provides. Ranks that
    were built with different centroids are refused at ``compute`` (``ValueError``).

    Args:
        binning: a fitted binning (it says what it bins: leave ``multiclass`` / ``binary``
            unset), or centroids: ``[K, M, H]`` or a list of ``K`` ``[M_k, H]`` sets
            ("classwise"), one ``[M, H]`` set for "top_label" / ``binary=True`` (or shared by
            every class, with ``num_classes``).
        multiclass, num_classes, binary: as :class:`~bensemble.metrics.EECEMeter`.
        kwargs: ``torchmetrics.Metric`` options (``sync_on_compute``, ``process_group``, ...).

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> sample = torch.softmax(torch.randn(4, 500, 3, generator=g), -1)  # [H, N, K]
        >>> metric = ExpectedEpistemicCalibrationError.from_sample(sample, n_bins=8)
        >>> metric.update(sample[:, :200], torch.randint(0, 3, (200,), generator=g))
        >>> float(metric.compute()) >= 0
        True
    """

    def __init__(
        self,
        binning: Any = None,
        multiclass: str = "classwise",
        num_classes: int | None = None,
        *,
        binary: bool = False,
        **kwargs: Any,
    ) -> None:
        binning = kwargs.pop("centroids", binning)  # the argument's name before binnings
        if binning is None:
            raise ValueError(
                "ExpectedEpistemicCalibrationError: `binning` or `centroids` must be the fitted "
                "bins (got None) - build the metric with ExpectedEpistemicCalibrationError"
                ".from_sample(member_probs, n_bins) on a sample of member predictions [H, N, K] "
                "(a calibration split or the first validation batches), or pass "
                "KMeansBinning(n_bins=...).fit(sample) (bensemble.metrics.binning) or centroids "
                "from bensemble.metrics.fit_bins(member_probs[:, :, k].T, n_bins) per class; "
                "see docs/api/integrations.md"
            )
        meter = EECEMeter(binning, multiclass, num_classes, binary=binary)
        super().__init__(meter, **kwargs)

    @classmethod
    def from_sample(
        cls,
        member_probs: Any,
        n_bins: int | str = "auto",
        *,
        multiclass: str = "classwise",
        binary: bool = False,
        seed: int = 0,
        binning: Any = None,
        **kwargs: Any,
    ) -> ExpectedEpistemicCalibrationError:
        """A metric whose bins are fitted on ``member_probs`` (see
        :meth:`bensemble.metrics.EECEMeter.from_sample` for the fit and its arguments, including
        ``binning=``; ``kwargs`` go to ``torchmetrics.Metric``).

        Under DDP / Lightning call it on every rank with the same sample and ``seed`` (e.g. in
        ``setup()``, from the same calibration split): the fit is deterministic, so every
        rank holds the same bins; a rank that does not is refused at ``compute``.
        """
        meter = EECEMeter.from_sample(
            member_probs, n_bins, multiclass=multiclass, binary=binary, seed=seed, binning=binning
        )
        if meter._binning is not None:  # bins of the mean prediction: the fitted binning itself
            return cls(meter._binning, **kwargs)
        return cls(meter.centroids, meter.multiclass, binary=meter.binary, **kwargs)
