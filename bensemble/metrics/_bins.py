"""The per-bin sufficient statistics of a binned calibration error (:class:`CalibrationBins`).

Kept apart from :mod:`bensemble.metrics.calibration` (which re-exports it) so that the metric
module holds the kernels and shells only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["CalibrationBins"]


@dataclass(frozen=True, eq=False)
class CalibrationBins:
    """Per-bin sufficient statistics of a binned calibration error (float64 tensors).

    Attributes:
        edges: ``[B + 1]`` bin edges; bin ``b`` is ``(edges[b], edges[b + 1]]``.
        counts: ``[B]`` number of samples per bin (exact integers).
        sum_confidence: ``[B]`` sum of the confidences in each bin.
        sum_correct: ``[B]`` number of correct predictions (sum of 0/1 outcomes) in each bin.

    Two bins objects with the same edges add up (``a + b``): that is how streaming and sharded
    evaluation merge. A bins object built by hand is checked: float tensors of matching shapes,
    non-decreasing finite edges, counts ``>= 0``, ``0 <= sum_correct <= counts`` and
    ``0 <= sum_confidence <= counts`` (the library's own kernels skip the check).
    """

    edges: torch.Tensor
    counts: torch.Tensor
    sum_confidence: torch.Tensor
    sum_correct: torch.Tensor

    def __post_init__(self) -> None:
        fn = "CalibrationBins"
        fields = {}
        for name in ("edges", "counts", "sum_confidence", "sum_correct"):
            value = getattr(self, name)
            if not isinstance(value, torch.Tensor) or not value.is_floating_point():
                raise ValueError(
                    f"{fn}: `{name}` must be a floating torch tensor (got {type(value).__name__}"
                    f"{' of dtype ' + str(value.dtype) if isinstance(value, torch.Tensor) else ''})"
                )
            if value.ndim != 1:
                raise ValueError(f"{fn}: `{name}` must be 1-D (got shape {tuple(value.shape)})")
            if not bool(torch.isfinite(value).all()):
                raise ValueError(f"{fn}: `{name}` must be finite (got NaN/inf values)")
            fields[name] = value.to(torch.float64)
        edges, counts = fields["edges"], fields["counts"]
        n_bins = edges.shape[0] - 1
        if n_bins < 1 or bool((edges[1:] < edges[:-1]).any()):
            raise ValueError(
                f"{fn}: `edges` must be a non-decreasing [B + 1] vector with B >= 1 "
                f"(got {edges.tolist() if edges.numel() <= 8 else tuple(edges.shape)})"
            )
        for name in ("counts", "sum_confidence", "sum_correct"):
            if fields[name].shape[0] != n_bins:
                raise ValueError(
                    f"{fn}: `{name}` must have one value per bin ({n_bins}) "
                    f"(got shape {tuple(fields[name].shape)})"
                )
        if bool((counts < 0).any()):
            raise ValueError(f"{fn}: `counts` must be >= 0 (got {float(counts.min()):.4g})")
        slack = 1e-9 * counts.clamp_min(1.0)
        for name in ("sum_confidence", "sum_correct"):
            value = fields[name]
            if bool((value < -slack).any()) or bool((value > counts + slack).any()):
                raise ValueError(
                    f"{fn}: `{name}` must lie in [0, counts] per bin (got a bin outside)"
                )

    @classmethod
    def _unchecked(
        cls,
        edges: torch.Tensor,
        counts: torch.Tensor,
        sum_confidence: torch.Tensor,
        sum_correct: torch.Tensor,
    ) -> CalibrationBins:
        """Build from the library's own kernels, which satisfy the invariants by construction."""
        bins = object.__new__(cls)
        for name, value in zip(
            ("edges", "counts", "sum_confidence", "sum_correct"),
            (edges, counts, sum_confidence, sum_correct),
        ):
            object.__setattr__(bins, name, value)
        return bins

    @property
    def n_bins(self) -> int:
        """Number of bins ``B``."""
        return int(self.counts.shape[-1])

    @property
    def total(self) -> float:
        """Number of samples ``N``."""
        return float(self.counts.sum())

    @property
    def mean_confidence(self) -> torch.Tensor:
        """``[B]`` mean confidence per bin; an empty bin reports its midpoint."""
        midpoint = (self.edges[:-1] + self.edges[1:]) / 2
        mean = self.sum_confidence / self.counts.clamp_min(1.0)
        return torch.where(self.counts > 0, mean, midpoint)

    @property
    def accuracy(self) -> torch.Tensor:
        """``[B]`` accuracy per bin; 0 for an empty bin."""
        return self.sum_correct / self.counts.clamp_min(1.0)

    @property
    def weights(self) -> torch.Tensor:
        """``[B]`` fraction of the samples in each bin (all 0 when there are none)."""
        return self.counts / self.counts.sum().clamp_min(1.0)

    def __add__(self, other: CalibrationBins) -> CalibrationBins:
        if not isinstance(other, CalibrationBins):
            return NotImplemented
        edges = other.edges.to(self.edges.device)
        if edges.shape != self.edges.shape or not torch.equal(edges, self.edges):
            raise ValueError(
                "CalibrationBins.__add__: `other` must have the same edges "
                f"(got {other.n_bins} bins with different edges)"
            )
        dev = self.counts.device
        return CalibrationBins._unchecked(
            self.edges,
            self.counts + other.counts.to(dev),
            self.sum_confidence + other.sum_confidence.to(dev),
            self.sum_correct + other.sum_correct.to(dev),
        )
