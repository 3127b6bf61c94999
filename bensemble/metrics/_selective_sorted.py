"""Misclassification AUROC and AURC with one float64 of extra memory per sample.

:func:`bensemble.metrics.auroc` and :func:`bensemble.metrics.aurc` sort the scores with an index
(``torch.sort`` keeps values and int64 positions, then several ``[N]`` float64 temporaries): at
``N = 10^7`` about 1 GB. The chunked ``bensemble evaluate`` (``--chunk-size``) gathers only one
float64 confidence and one boolean per sample, and computes the same two numbers here from the
scores of the right and of the wrong predictions, each sorted in place (no index), and
``searchsorted`` over blocks of ``block`` samples:

* ``error_auroc`` = ``auroc(1 - confidence, 1 - correct)``: with ``s = 1 - confidence``,
  ``(#{(e, r): s_e > s_r} + #{(e, r): s_e = s_r} / 2) / (n_e n_r)`` over errors ``e`` and right
  predictions ``r`` (Mann-Whitney U, counted exactly in integers).
* ``aurc`` = ``aurc(confidence, correct)``: ``(1/N) sum_i err_i / i`` over positions ``i`` in
  decreasing confidence, tied confidences one group whose errors are spread evenly over its
  positions, ``err_i = E_g + (i - A_g) e_g / s_g`` (``A_g`` samples and ``E_g`` errors above group
  ``g``, which holds ``s_g`` samples and ``e_g`` errors). Every sample of a group takes one of its
  positions, so each term is computed exactly as the in-memory function computes it; only the
  order of the final float64 sum differs.
"""

from __future__ import annotations

import numpy as np

BLOCK = 1 << 18


def _sorted_scores(values: np.ndarray, keep: np.ndarray, flip: bool) -> np.ndarray:
    """``values[keep]`` (``1 - values[keep]`` when ``flip``), sorted ascending in place."""
    out = values[keep]  # a new array: the only allocation
    if flip:
        np.subtract(1.0, out, out=out)
    out.sort()
    return out


def error_auroc_sorted(
    confidence: np.ndarray, correct: np.ndarray, block: int = BLOCK
) -> float | None:
    """``auroc(1 - confidence, 1 - correct)``; ``None`` without both errors and right ones.

    Args:
        confidence: float64 ``[N]``.
        correct: bool ``[N]``.
        block: errors compared per ``searchsorted`` call.
    """
    n_right = int(np.count_nonzero(correct))
    n_err = confidence.shape[0] - n_right
    if n_right == 0 or n_err == 0:
        return None
    right = _sorted_scores(confidence, correct, flip=True)
    err = _sorted_scores(confidence, ~correct, flip=True)
    greater = ties = 0
    for start in range(0, n_err, block):
        s = err[start : start + block]
        below = np.searchsorted(right, s, side="left")
        ties += int((np.searchsorted(right, s, side="right") - below).sum())
        greater += int(below.sum())
    return (greater + ties / 2.0) / (n_right * n_err)


def aurc_sorted(confidence: np.ndarray, correct: np.ndarray, block: int = BLOCK) -> float:
    """``aurc(confidence, correct)`` (see the module docstring).

    Args:
        confidence: float64 ``[N]``, ``N >= 1``.
        correct: bool ``[N]``.
        block: samples per ``searchsorted`` call.
    """
    n = confidence.shape[0]
    right = _sorted_scores(confidence, correct, flip=False)
    err = _sorted_scores(confidence, ~correct, flip=False)
    n_right, n_err = right.shape[0], err.shape[0]
    total = 0.0
    for values, is_err in ((right, False), (err, True)):
        for start in range(0, values.shape[0], block):
            v = values[start : start + block]
            index = np.arange(start, start + v.shape[0])
            r_lo = np.searchsorted(right, v, side="left")
            r_hi = np.searchsorted(right, v, side="right")
            e_lo = np.searchsorted(err, v, side="left")
            e_hi = np.searchsorted(err, v, side="right")
            above = (n_right - r_hi) + (n_err - e_hi)  # A_g
            size = ((r_hi - r_lo) + (e_hi - e_lo)).astype(np.float64)  # s_g
            errors_above = (n_err - e_hi).astype(np.float64)  # E_g
            group_errors = (e_hi - e_lo).astype(np.float64)  # e_g
            # the group's right samples take its first positions, its errors the next ones
            rank = (r_hi - r_lo) + (index - e_lo) if is_err else index - r_lo
            i = (above + 1 + rank).astype(np.float64)
            err_i = errors_above + (i - above) * (group_errors / size)
            total += float((err_i / i).sum())
    return total / n


def risk_coverage_vertices(
    confidence: np.ndarray, correct: np.ndarray, max_points: int = 2000
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """At most ``max_points`` vertices of :func:`bensemble.metrics.risk_coverage_curve`, exact.

    The thresholds are confidences at evenly spaced ranks of the right and of the wrong
    predictions (the highest and lowest of each included, so the last vertex has coverage 1 and
    risk = the error rate); a line through them is the full curve for a figure's purposes.

    Returns:
        ``(coverage, risk, thresholds)``, float64, thresholds decreasing.
    """
    n = confidence.shape[0]
    right = _sorted_scores(confidence, correct, flip=False)
    err = _sorted_scores(confidence, ~correct, flip=False)
    picks = [
        values[
            np.unique(
                np.linspace(0, values.shape[0] - 1, max(max_points // 2, 2))
                .round()
                .astype(np.int64)
            )
        ]
        for values in (right, err)
        if values.shape[0]
    ]
    thresholds = np.unique(np.concatenate(picks))[::-1]  # decreasing
    errors = err.shape[0] - np.searchsorted(err, thresholds, side="left")  # >= threshold
    accepted = errors + right.shape[0] - np.searchsorted(right, thresholds, side="left")
    return accepted / n, errors / accepted, thresholds.copy()
