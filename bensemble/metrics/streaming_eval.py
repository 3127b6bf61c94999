"""Evaluating member predictions larger than memory: chunked passes over a memory-mapped array.

:func:`evaluate_chunked` reads ``[M, N, K]`` member probabilities (or logits; ``[N, K]`` for one
model) from a ``.npy`` file opened with ``np.load(mmap_mode="r")`` - or any array supporting
slicing - ``chunk_size`` samples at a time, feeds the streaming meters of
:mod:`bensemble.metrics.streaming`, and returns the numbers of
:func:`bensemble.app.evaluate.evaluate_predictions` without a calibration split
(accuracy, NLL, Brier, ECE and classwise ECE of the ensemble mean; for ``M > 1`` the mean
uncertainty decomposition and the EECE), up to float64 summation order. Memory is
``O(chunk_size * M * K)`` plus the labels.

The EECE follows the two-phase protocol with the *same* K-means fit as the in-memory path: the
fit draws the same seeded subsample rows (gathered from the file), and its refinement steps and
the final assignment stream over the file chunk by chunk; then an
:class:`~bensemble.metrics.streaming_epistemic.EECEMeter` accumulates the per-bin sums. Each
class's fit reads the file ``1 + refine`` more times.

Not streamed: temperature scaling and conformal sets (they need a calibration split held in
memory); run them on a split that fits.
"""

from __future__ import annotations

import mmap
import os
from typing import Any

import numpy as np
import torch

from bensemble import _progress
from bensemble._validation import (
    as_labels,
    as_member_stack,
    check_bool,
    check_n_bins,
    check_positive_int,
)
from bensemble.metrics._epistemic_checks import auto_n_bins
from bensemble.metrics._kmeans import DEFAULT_REFINE, DEFAULT_SUBSAMPLE, _fit
from bensemble.metrics._kmeans_batched import map_classes
from bensemble.metrics.streaming import (
    AccuracyMeter,
    BrierMeter,
    CalibrationErrorMeter,
    ClasswiseCalibrationErrorMeter,
    NLLMeter,
)
from bensemble.metrics.streaming_epistemic import EECEMeter, UncertaintyMeter

__all__ = ["evaluate_chunked", "open_memmap"]

_F64 = torch.float64


def open_memmap(path: str | os.PathLike) -> np.ndarray:
    """``np.load(path, mmap_mode="r")`` of a ``.npy`` file (no data is read yet)."""
    fn = "open_memmap"
    try:
        return np.load(os.fspath(path), mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ValueError(
            f"{fn}: `path` must be a readable .npy file (got {path!s}: {exc})"
        ) from None


def _release(array: Any) -> None:
    """Drop the pages of a memory-mapped array that this process has read from its resident set
    (``madvise(MADV_DONTNEED)``; the data stays on disk), so the resident memory of a pass over a
    file stays bounded by a chunk. A no-op for arrays that are not memory-mapped."""
    while array is not None and not isinstance(array, np.memmap):
        array = getattr(array, "base", None)
    handle = getattr(array, "_mmap", None)
    if handle is not None and hasattr(mmap, "MADV_DONTNEED"):
        handle.madvise(mmap.MADV_DONTNEED)


class _ClassColumns:
    """Duck-typed ``[N, M]`` float64 member vectors of class ``k``, read from the array on
    indexing (what the K-means fit needs: ``shape``, ``device``, ``dtype``, ``x[rows]``,
    ``x[a:b]``)."""

    def __init__(self, source: Any, k: int, n: int, n_members: int, logits: bool) -> None:
        self.source, self.k, self.logits = source, k, logits
        self.shape = torch.Size([n, n_members])
        self.device = torch.device("cpu")
        self.dtype = _F64

    def __getitem__(self, index: Any) -> torch.Tensor:
        if isinstance(index, torch.Tensor):
            index = index.numpy()
        block = torch.from_numpy(np.array(self.source[:, index, :], dtype=np.float64))
        if self.logits:
            block = torch.softmax(block, dim=-1)
        return block[:, :, self.k].T.contiguous()


def evaluate_chunked(
    member_probs: Any,
    labels: Any,
    *,
    n_bins: int = 15,
    eece_bins: int | str = "auto",
    seed: int = 0,
    chunk_size: int = 65_536,
    from_logits: bool = False,
    progress: bool | None = None,
) -> dict[str, Any]:
    """Scores of member predictions read ``chunk_size`` samples at a time.

    Args:
        member_probs: ``[M, N, K]`` (or ``[N, K]``) array - typically :func:`open_memmap` of a
            ``.npy`` file - of probabilities, or logits with ``from_logits=True``.
        labels: ``[N]`` integer labels (held in memory).
        n_bins: bins of the ECE and classwise ECE.
        eece_bins: K-means bins of the EECE (``M > 1``): ``"auto"`` (the default of
            ``bensemble evaluate``, :func:`~bensemble.metrics.epistemic.auto_n_bins` of ``N``) or
            an integer.
        seed: the EECE's K-means seed (as ``evaluate_predictions``' ``seed``).
        chunk_size: samples per chunk.
        from_logits: the array holds logits (softmax per chunk, in float64).
        progress: tqdm bar (``None``: only on a terminal).

    Returns:
        ``{"n", "accuracy", "nll", "brier", "ece", "classwise_ece"}``, and for ``M > 1`` also
        ``"mean_total"``, ``"mean_aleatoric"``, ``"mean_epistemic"``, ``"eece"``.
    """
    fn = "evaluate_chunked"
    chunk_size = check_positive_int(chunk_size, "chunk_size", fn)
    logits = check_bool(from_logits, "from_logits", fn)
    shape = tuple(getattr(member_probs, "shape", ()))
    if len(shape) not in (2, 3) or 0 in shape:
        raise ValueError(
            f"{fn}: `member_probs` must be an array [M, N, K] or [N, K] (got shape {shape})"
        )
    source = member_probs if len(shape) == 3 else member_probs[None]
    m, n, k = (int(s) for s in source.shape)
    y = as_labels(labels, "labels", fn, n=n, num_classes=k)
    meters = {
        "accuracy": AccuracyMeter(k),
        "nll": NLLMeter(num_classes=k),
        "brier": BrierMeter(k),
        "ece": CalibrationErrorMeter(n_bins, num_classes=k),
        "classwise_ece": ClasswiseCalibrationErrorMeter(k, n_bins),
    }
    uncertainty = UncertaintyMeter() if m > 1 else None
    eece = None
    if m > 1:
        bins = auto_n_bins(n) if eece_bins == "auto" else check_n_bins(eece_bins, fn, "eece_bins")
        eece = EECEMeter(_fit_centroids(source, n, m, k, bins, seed, logits))
    enabled = True if progress is None else check_bool(progress, "progress", fn)
    with _progress.progress(total=n, enabled=enabled, desc=fn, unit="rows") as bar:
        for start in range(0, n, chunk_size):
            raw = torch.from_numpy(
                np.array(source[:, start : start + chunk_size], dtype=np.float64)
            )
            p = as_member_stack(raw, "member_probs", fn, from_logits=logits)
            yb = y[start : start + chunk_size]
            mean = p.mean(0)
            for meter in meters.values():
                meter.update(mean, yb)
            if m > 1:
                uncertainty.update(p)
                eece.update(p, yb)
            bar.update(int(yb.shape[0]))
            _release(source)
    out: dict[str, Any] = {"n": n}
    out.update({name: meter.compute() for name, meter in meters.items()})
    if m > 1:
        out.update({f"mean_{key}": v for key, v in uncertainty.compute().items()})
        out["eece"] = eece.compute()
    return out


def _fit_centroids(source, n, m, k, n_bins, seed, logits) -> list[torch.Tensor]:
    """Per-class K-means exactly as the in-memory classwise EECE fits them (same seed, same
    subsample rows, refinement and final assignment streamed over the array)."""

    def one(c: int) -> torch.Tensor:
        x = _ClassColumns(source, c, n, m, logits)
        if n <= DEFAULT_SUBSAMPLE:
            x = x[torch.arange(n)]
        fit = _fit(x, n_bins, seed=seed, subsample=DEFAULT_SUBSAMPLE, refine=DEFAULT_REFINE)
        return fit.centroids

    return map_classes(one, k)
