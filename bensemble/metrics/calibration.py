r"""Classical calibration errors (top-label and classwise) and reliability-diagram data.

Every metric is *validate -> update -> compute*: :func:`binned_calibration_stats` (or its top-label
form) reduces the inputs to per-bin sufficient statistics (:class:`CalibrationBins`: count,
sum of confidences, sum of correctness) in one accumulation pass each, and
:func:`calibration_error_from_bins` turns them into a number. The streaming
:class:`~bensemble.metrics.streaming.CalibrationErrorMeter` runs the same two steps batch by batch.

With per-bin count :math:`n_b`, mean confidence :math:`\mathrm{conf}_b` and accuracy
:math:`\mathrm{acc}_b` (``N`` samples, empty bins ignored)::

    l1  (ECE)   sum_b (n_b / N) |acc_b - conf_b|
    l2  (RMSCE) sqrt(sum_b (n_b / N) (acc_b - conf_b)^2)
    max (MCE)   max_b |acc_b - conf_b|

Binning conventions (identical to bensemble 0.2 for ``binning="uniform"``):

* ``"uniform"``: equal-width bins ``(e_b, e_{b+1}]`` on bensemble's float32 grid
  ``linspace(0, 1, n_bins + 1)``, compared in the input's floating dtype (see
  :mod:`bensemble.metrics._binning`). A confidence of exactly 1.0 is in the last bin; exactly 0
  goes to bin 0 (only possible for classwise probabilities and :func:`calibration_error`).
  torchmetrics uses ``[e_b, e_{b+1})`` and gives 1.0 a bin of its own, so the two agree except
  for values lying exactly on an edge; it also accumulates in float32 (a drift of ~1e-6 at 10^6
  rows), where the sums here are float64 (exact counts).
* ``"quantile"``: equal-mass bins; inner edges are order statistics of the confidences
  (:func:`bensemble.metrics._binning.quantile_edges`): ties are never split, duplicate edges give
  empty bins and the number of bins stays ``n_bins``. Needs every sample at once (not streamable).

All statistics are computed in float64; inputs may be torch tensors or numpy arrays of any float
dtype on any device.
"""

from __future__ import annotations

from typing import Any

import torch

from bensemble._renamed import renamed_keywords
from bensemble._validation import (
    MAX_BIN_SLOTS,
    as_binary,
    as_confidences,
    check_n_bins,
    check_option,
    to_tensor,
)
from bensemble.metrics._binning import (
    bin_sums,
    bucketize_ids,
    grid_edges,
    quantile_edges,
    ungroup,
    uniform_bin_ids,
)
from bensemble.metrics._bins import CalibrationBins
from bensemble.metrics.scoring import _check_probs_targets, _top_label

__all__ = [
    "CalibrationBins",
    "binned_calibration_stats",
    "calibration_error_from_bins",
    "calibration_error",
    "expected_calibration_error",
    "maximum_calibration_error",
    "classwise_calibration_error",
]

NORMS = ("l1", "l2", "max")
BINNINGS = ("uniform", "quantile")
_F64 = torch.float64


def _norm_from_sums(
    counts: torch.Tensor, sum_confidence: torch.Tensor, sum_correct: torch.Tensor, norm: str
) -> torch.Tensor:
    """Calibration error along the last (bin) axis; empty bins contribute nothing."""
    total = counts.sum(-1)
    diff = sum_correct - sum_confidence  # n_b * (acc_b - conf_b); 0 for an empty bin
    if norm == "l1":
        return diff.abs().sum(-1) / total
    per_bin = diff / counts.clamp_min(1.0)  # acc_b - conf_b
    if norm == "l2":
        return ((diff * per_bin).sum(-1) / total).sqrt()
    return per_bin.abs().amax(-1)


def _binned_stats(
    confidences: torch.Tensor,
    correct: torch.Tensor,
    n_bins: int,
    binning: str,
    c64: torch.Tensor | None = None,
) -> CalibrationBins:
    """Kernel: confidences ``[N]`` (their dtype sets the edge comparison) and bool ``correct [N]``
    -> :class:`CalibrationBins`.

    Correct and incorrect samples are two groups of one binning, so a single unweighted and a
    single confidence-weighted (float64) accumulation give all three statistics. ``c64`` may
    pass the float64 copy of ``confidences`` if the caller already has it.
    """
    if c64 is None:
        c64 = confidences.to(_F64)
    if binning == "uniform":
        edges = grid_edges(n_bins, confidences.device)
        ids = uniform_bin_ids(confidences, n_bins, groups=correct, n_groups=2)
    else:
        edges = quantile_edges(c64, n_bins)
        ids = bucketize_ids(c64, edges, groups=correct)
    counts, sum_conf = (ungroup(s, n_bins, 2) for s in bin_sums(ids, 2 * (n_bins + 1), c64))
    return CalibrationBins._unchecked(edges, counts.sum(0), sum_conf.sum(0), counts[1].clone())


def _top_label_stats(
    probs: torch.Tensor, labels: torch.Tensor, n_bins: int, binning: str
) -> CalibrationBins:
    """Top-label statistics of validated ``probs [N, K]`` and int64 ``labels [N]``."""
    confidence, prediction = _top_label(probs)
    correct = prediction == labels
    if prediction.dtype == torch.int64 and prediction.is_contiguous():
        # the int64 indices are dead now: their buffer holds the float64 confidences (saves a
        # fresh 8-byte-per-sample allocation, whose page faults cost as much as the copy)
        c64 = prediction.view(_F64).copy_(confidence)
    else:  # pragma: no cover - argmax always returns contiguous int64 indices
        c64 = confidence.to(_F64)
    return _binned_stats(confidence, correct, n_bins, binning, c64)


def _check_confidences_correct(
    confidences: Any, correct: Any, fn: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Validated 1-D confidences (in their own floating dtype; float64 for integer input) and a
    bool correctness vector of the same length on the same device."""
    raw = to_tensor(confidences, "confidences", fn)
    checked = as_confidences(raw, "confidences", fn)  # float64; 1-D, non-empty, finite, [0, 1]
    c = raw if raw.is_floating_point() else checked
    ok = as_binary(correct, "correct", fn, n=c.shape[0], dtype=torch.bool).to(c.device)
    return c, ok


def _check_options(fn: str, n_bins: Any, norm: str | None, binning: str) -> int:
    n_bins = check_n_bins(n_bins, fn)
    if norm is not None:
        check_option(norm, "norm", NORMS, fn)
    check_option(binning, "binning", BINNINGS, fn)
    return n_bins


def _checked_top_label_bins(
    fn: str,
    probs: Any,
    labels: Any,
    n_bins: Any,
    binning: str,
    from_logits: bool,
    norm: str | None = None,
) -> CalibrationBins:
    """The options checked (``norm`` too unless None), then ``(probs, labels)``, then the
    top-label :class:`CalibrationBins`: the shared body of the top-label metrics and
    :func:`~bensemble.metrics.reliability_diagram`."""
    n_bins = _check_options(fn, n_bins, norm, binning)
    p, y = _check_probs_targets(probs, labels, fn, from_logits)
    return _top_label_stats(p, y, n_bins, binning)


def _bins_error(bins: CalibrationBins, norm: str) -> float:
    """The ``norm`` calibration error of ``bins`` as a Python float."""
    return float(_norm_from_sums(bins.counts, bins.sum_confidence, bins.sum_correct, norm))


def binned_calibration_stats(
    confidences: Any, correct: Any, n_bins: int = 15, binning: str = "uniform"
) -> CalibrationBins:
    """Per-bin count, confidence sum and correctness sum of 1-D confidences.

    The update half of every binned calibration metric (plots and EECE use it too).

    Args:
        confidences: ``[N]`` values in ``[0, 1]`` (float dtype decides the edge comparison).
        correct: ``[N]`` 0/1 outcomes (bool, int, or float holding only 0 and 1).
        n_bins: number of bins ``B >= 1``.
        binning: ``"uniform"`` (equal width) or ``"quantile"`` (equal mass); see the module doc.

    Returns:
        :class:`CalibrationBins` with float64 ``edges [B + 1]`` and ``counts``,
        ``sum_confidence``, ``sum_correct`` ``[B]``.

    Example:
        >>> bins = binned_calibration_stats([0.2, 0.7, 0.9, 1.0], [0, 1, 0, 1], n_bins=2)
        >>> bins.counts.tolist(), bins.sum_correct.tolist()
        ([1.0, 3.0], [0.0, 2.0])
    """
    fn = "binned_calibration_stats"
    n_bins = _check_options(fn, n_bins, None, binning)
    c, ok = _check_confidences_correct(confidences, correct, fn)
    return _binned_stats(c, ok, n_bins, binning)


def calibration_error_from_bins(bins: CalibrationBins, norm: str = "l1") -> float:
    """The compute half: a calibration error from :class:`CalibrationBins`.

    Args:
        bins: per-bin statistics holding at least one sample.
        norm: ``"l1"`` (ECE), ``"l2"`` (RMS calibration error) or ``"max"`` (MCE); see the module
            docstring for the formulas.

    Returns:
        The calibration error in ``[0, 1]``.
    """
    fn = "calibration_error_from_bins"
    if not isinstance(bins, CalibrationBins):
        raise ValueError(f"{fn}: `bins` must be a CalibrationBins (got {type(bins).__name__})")
    check_option(norm, "norm", NORMS, fn)
    if bins.total <= 0:
        raise ValueError(f"{fn}: `bins` must hold at least one sample (got 0)")
    return _bins_error(bins, norm)


def calibration_error(
    confidences: Any,
    correct: Any,
    n_bins: int = 15,
    *,
    norm: str = "l1",
    binning: str = "uniform",
) -> float:
    """Binned calibration error of 1-D confidences against 0/1 outcomes (the guide's ``ece``).

    Uses the library's ``(lower, upper]`` bins (the guide's snippet uses ``[lower, upper)``; the
    two differ only for confidences lying exactly on an edge, and on the guide's example they
    agree to all printed digits).

    Args:
        confidences: ``[N]`` confidences in ``[0, 1]``.
        correct: ``[N]`` 0/1 outcomes (bool, int, or float holding only 0 and 1).
        n_bins: number of bins.
        norm: ``"l1"``, ``"l2"`` or ``"max"``.
        binning: ``"uniform"`` or ``"quantile"``.

    Returns:
        The calibration error.

    Example:
        >>> round(calibration_error([0.2, 0.7, 0.9, 1.0], [0, 1, 0, 1], n_bins=2), 4)
        0.2
    """
    fn = "calibration_error"
    n_bins = _check_options(fn, n_bins, norm, binning)
    c, ok = _check_confidences_correct(confidences, correct, fn)
    return _bins_error(_binned_stats(c, ok, n_bins, binning), norm)


@renamed_keywords(targets="labels")
def expected_calibration_error(
    probs: Any,
    labels: Any,
    n_bins: int = 15,
    *,
    norm: str = "l1",
    binning: str = "uniform",
    from_logits: bool = False,
) -> float:
    r"""Top-label expected calibration error (bensemble 0.2's numbers for the defaults).

    .. math:: \mathrm{ECE} = \sum_b \frac{|B_b|}{N}\,|\mathrm{acc}(B_b) - \mathrm{conf}(B_b)|

    with confidence :math:`\max_k p_{ik}` and correctness ``argmax == target`` (first index on
    ties), equal-width bins ``(lower, upper]``. Cost: one ``max`` over classes, a cheap
    validation pass, then O(N) elementwise work and two accumulation passes, whatever ``n_bins``.

    Args:
        probs: ``[N, K]`` class probabilities (or logits with ``from_logits=True``).
        labels: ``[N]`` integer labels in ``[0, K)``.
        n_bins: number of bins, at most :data:`bensemble._validation.MAX_N_BINS` (2**20).
        norm: ``"l1"`` (ECE), ``"l2"`` (RMSCE) or ``"max"`` (MCE).
        binning: ``"uniform"`` or ``"quantile"`` (equal mass).
        from_logits: apply the softmax (float64) first.

    Returns:
        The calibration error in ``[0, 1]``; lower is better.

    Example:
        >>> probs = [[0.9, 0.1], [0.6, 0.4], [0.3, 0.7], [0.8, 0.2]]
        >>> round(expected_calibration_error(probs, [0, 1, 1, 0], n_bins=5), 4)
        0.3
    """
    fn = "expected_calibration_error"
    bins = _checked_top_label_bins(fn, probs, labels, n_bins, binning, from_logits, norm)
    return _bins_error(bins, norm)


@renamed_keywords(targets="labels")
def maximum_calibration_error(
    probs: Any,
    labels: Any,
    n_bins: int = 15,
    *,
    binning: str = "uniform",
    from_logits: bool = False,
) -> float:
    """Top-label maximum calibration error: the largest ``|acc - conf|`` over non-empty bins.

    Same arguments and bins as :func:`expected_calibration_error` (it is ``norm="max"``).

    Example:
        >>> probs = [[0.9, 0.1], [0.6, 0.4], [0.3, 0.7], [0.8, 0.2]]
        >>> round(maximum_calibration_error(probs, [0, 1, 1, 0], n_bins=5), 4)
        0.6
    """
    fn = "maximum_calibration_error"
    bins = _checked_top_label_bins(fn, probs, labels, n_bins, binning, from_logits)
    return _bins_error(bins, "max")


@renamed_keywords(targets="labels")
def classwise_calibration_error(
    probs: Any,
    labels: Any,
    n_bins: int = 15,
    *,
    norm: str = "l1",
    binning: str = "uniform",
    from_logits: bool = False,
) -> float:
    r"""Classwise calibration error: the mean over classes of the binned gap of ``P(y = k)``.

    .. math:: \mathrm{cwCE} = \frac{1}{K}\sum_k \sum_b \frac{|B_{kb}|}{N}
              \bigl|\,\overline{\mathbb{1}[y = k]}_{B_{kb}} - \overline{p_k}_{B_{kb}}\bigr|

    for ``norm="l1"`` (``"l2"`` / ``"max"`` apply the same norm per class before the mean). Each
    class is binned like :func:`calibration_error` (``P(y = k) = 0`` falls in bin 0; quantile
    edges are per class). Vectorised: the bin id of every entry is offset by its class, one
    accumulation serves all classes. Works on a float64 copy of ``probs`` (``K`` values a sample).

    Args:
        probs: ``[N, K]`` class probabilities (or logits with ``from_logits=True``).
        labels: ``[N]`` integer labels in ``[0, K)``.
        n_bins: number of bins per class; ``num_classes * (n_bins + 1)`` may not exceed
            :data:`bensemble._validation.MAX_BIN_SLOTS` (2**24).
        norm: ``"l1"``, ``"l2"`` or ``"max"``.
        binning: ``"uniform"`` or ``"quantile"``.
        from_logits: apply the softmax (float64) first.

    Returns:
        The classwise calibration error.

    Example:
        >>> probs = [[0.9, 0.1], [0.6, 0.4], [0.3, 0.7], [0.8, 0.2]]
        >>> round(classwise_calibration_error(probs, [0, 1, 1, 0], n_bins=5), 4)
        0.3
    """
    fn = "classwise_calibration_error"
    n_bins = _check_options(fn, n_bins, norm, binning)
    p, y = _check_probs_targets(probs, labels, fn, from_logits)
    n_classes = p.shape[1]
    if n_classes * (n_bins + 1) > MAX_BIN_SLOTS:
        limit = MAX_BIN_SLOTS // n_classes - 1
        if limit < 1:  # even one bin per class is too many: the classes are the problem
            raise ValueError(
                f"{fn}: `probs` must have at most {MAX_BIN_SLOTS // 2} classes for classwise "
                f"bins (num_classes * (n_bins + 1) <= {MAX_BIN_SLOTS} slots) (got {n_classes})"
            )
        raise ValueError(
            f"{fn}: `n_bins` must be <= {limit} for {n_classes} classes "
            f"(classwise bins need num_classes * (n_bins + 1) <= {MAX_BIN_SLOTS} slots) "
            f"(got {n_bins})"
        )
    per_class = _norm_from_sums(*_classwise_stats(p, y, n_bins, binning), norm)
    return float(per_class.mean())


def _classwise_stats(
    p: torch.Tensor, y: torch.Tensor, n_bins: int, binning: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Kernel: validated ``probs [N, K]``, int64 ``labels [N]`` -> float64 per-class, per-bin
    ``(counts, sum_p, hits)``, each ``[K, n_bins]`` (the update half of the classwise error)."""
    n_classes = p.shape[1]
    values = p.to(_F64)
    if binning == "uniform":
        groups = torch.arange(n_classes, device=p.device)
        ids = uniform_bin_ids(p, n_bins, groups=groups, n_groups=n_classes)
    else:
        ids = bucketize_ids(values, quantile_edges(values, n_bins))
    slots = n_classes * (n_bins + 1)
    counts, sum_p = bin_sums(ids, slots, values)
    (hits,) = bin_sums(ids.gather(1, y[:, None]), slots)
    return tuple(ungroup(s, n_bins, n_classes) for s in (counts, sum_p, hits))
