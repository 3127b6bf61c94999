"""Quality of prediction sets: coverage, size, per-class and size-stratified coverage.

Sets are boolean masks ``sets [N, K]`` (``sets[i, y]`` is True when label ``y`` is in the set of
sample ``i``), as returned by :meth:`SplitConformalClassifier.predict_set`; 0/1 integer masks
are accepted too. Scalars are Python floats; per-class or per-size results are tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from bensemble._validation import as_labels, to_tensor

__all__ = [
    "coverage",
    "mean_set_size",
    "empty_set_rate",
    "per_class_coverage",
    "size_stratified_coverage",
    "SizeStratifiedCoverage",
]


def _as_sets(sets: Any, fn: str) -> torch.Tensor:
    """A non-empty boolean mask ``[N, K]`` (bool, or integers holding only 0 and 1)."""
    t = to_tensor(sets, "sets", fn)
    if t.ndim != 2:
        raise ValueError(f"{fn}: `sets` must be a 2-D mask [N, K] (got shape {tuple(t.shape)})")
    if t.numel() == 0:
        raise ValueError(f"{fn}: `sets` must not be empty (got shape {tuple(t.shape)})")
    if t.dtype == torch.bool:
        return t
    if t.is_floating_point() or t.is_complex():
        raise ValueError(
            f"{fn}: `sets` must be a boolean mask [N, K] (got dtype {t.dtype}); "
            "pass the output of predict_set"
        )
    if not bool(((t == 0) | (t == 1)).all()):
        raise ValueError(f"{fn}: `sets` must contain only 0 and 1 (got other values)")
    return t.to(torch.bool)


def _sets_and_labels(sets: Any, labels: Any, fn: str) -> tuple[torch.Tensor, torch.Tensor]:
    s = _as_sets(sets, fn)
    y = as_labels(labels, "labels", fn, n=s.shape[0], num_classes=s.shape[1], device=s.device)
    return s, y


def _covered(s: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return s.gather(1, y.unsqueeze(1)).squeeze(1)


def coverage(sets: Any, labels: Any) -> float:
    """Fraction of samples whose true label is in their set: ``mean_i 1[y_i in C_i]``.

    Args:
        sets: prediction sets, boolean mask ``[N, K]``.
        labels: true labels ``[N]``.

    Example:
        >>> coverage(torch.tensor([[True, False], [True, True]]), torch.tensor([1, 1]))
        0.5
    """
    s, y = _sets_and_labels(sets, labels, "coverage")
    return float(_covered(s, y).to(torch.float64).mean())


def mean_set_size(sets: Any) -> float:
    """Average number of labels per set.

    Args:
        sets: prediction sets, boolean mask ``[N, K]``.

    Returns:
        ``mean_i |C_i|`` in ``[0, K]`` (smaller sets at the same coverage are more informative).

    Example:
        >>> mean_set_size(torch.tensor([[True, False], [True, True]]))
        1.5
    """
    s = _as_sets(sets, "mean_set_size")
    return float(s.sum(dim=1, dtype=torch.float64).mean())


def empty_set_rate(sets: Any) -> float:
    """Fraction of empty sets (possible with randomised APS / RAPS scores).

    Args:
        sets: as in :func:`mean_set_size`.

    Returns:
        ``mean_i 1[C_i is empty]`` in ``[0, 1]``; every empty set is a miss whatever the label.

    Example:
        >>> empty_set_rate(torch.tensor([[False, False], [True, True]]))
        0.5
    """
    s = _as_sets(sets, "empty_set_rate")
    return float((~s.any(dim=1)).to(torch.float64).mean())


def per_class_coverage(sets: Any, labels: Any) -> torch.Tensor:
    """Coverage among the samples of each true class.

    Args:
        sets: prediction sets, boolean mask ``[N, K]``.
        labels: true labels ``[N]``.

    Returns:
        Coverage per class ``[K]`` (float64); ``NaN`` for a class with no sample in ``labels``
        (its coverage is undefined, and 0 or 1 would bias a mean over classes).

    Example:
        >>> per_class_coverage(torch.tensor([[True, False, False], [False, True, True]]),
        ...                    torch.tensor([0, 0]))
        tensor([0.5000,    nan,    nan], dtype=torch.float64)
    """
    s, y = _sets_and_labels(sets, labels, "per_class_coverage")
    k = s.shape[1]
    hits = torch.bincount(y, weights=_covered(s, y).to(torch.float64), minlength=k)
    counts = torch.bincount(y, minlength=k).to(torch.float64)
    return hits / counts  # 0 / 0 = NaN for absent classes


@dataclass(frozen=True)
class SizeStratifiedCoverage:
    """Coverage by set size, for sizes ``0, 1, ..., K``.

    Attributes:
        sizes: set sizes ``[K + 1]`` (int64, ``0..K``).
        counts: number of samples whose set has that size ``[K + 1]`` (int64).
        coverage: coverage among those samples ``[K + 1]`` (float64; ``NaN`` where the count
            is 0).
    """

    sizes: torch.Tensor
    counts: torch.Tensor
    coverage: torch.Tensor


def size_stratified_coverage(sets: Any, labels: Any) -> SizeStratifiedCoverage:
    """Coverage grouped by the size of the prediction set.

    A set predictor can reach ``1 - alpha`` on average while under-covering its small (confident)
    sets; this view shows it. Every size from 0 to ``K`` is listed, empty strata explicit.

    Args:
        sets: prediction sets, boolean mask ``[N, K]``.
        labels: true labels ``[N]``.

    Returns:
        :class:`SizeStratifiedCoverage` with fixed-length ``[K + 1]`` tensors.

    Example:
        >>> r = size_stratified_coverage(torch.tensor([[True, False], [True, True]]),
        ...                              torch.tensor([1, 1]))
        >>> r.counts.tolist(), r.coverage.tolist()[1:]
        ([0, 1, 1], [0.0, 1.0])
    """
    s, y = _sets_and_labels(sets, labels, "size_stratified_coverage")
    k = s.shape[1]
    size = s.sum(dim=1)
    counts = torch.bincount(size, minlength=k + 1)
    hits = torch.bincount(size, weights=_covered(s, y).to(torch.float64), minlength=k + 1)
    sizes = torch.arange(k + 1, device=s.device)
    return SizeStratifiedCoverage(sizes=sizes, counts=counts, coverage=hits / counts)
