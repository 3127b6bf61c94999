"""Misclassification detection of ``bensemble evaluate`` from one float64 per sample.

The misclassification AUROC and the AURC rank every confidence, so they do not stream as sums.
:class:`GatheredConfidences` keeps, per reported sample, only its confidence ``max_k p_k``
(float64): the right predictions' from the front of one preallocated buffer, the wrong ones'
from its back, so whether a sample was right is where it sits (no boolean, no sort index). Two
states merge by concatenation. :meth:`GatheredConfidences.finish` sorts each side in place and
counts the two numbers exactly as :func:`bensemble.metrics.auroc` and
:func:`bensemble.metrics.aurc` do (:mod:`bensemble.metrics._selective_sorted`); the order the
samples arrived in does not matter (ties are counted one half, and spread evenly).

Definitions (the report's table notes repeat them):

* ``error_auroc``: misclassification AUROC of the score ``1 - max_k p_k`` (a sample is wrong when
  the argmax, first index on ties, differs from its label); 0.5 is chance, 1 a perfect ranking.
  ``None`` when the part has no error or only errors.
* ``aurc``: area under the risk-coverage curve of the confidence ``max_k p_k`` (lower is better;
  ties spread evenly).
"""

from __future__ import annotations

import numpy as np
import torch

from bensemble.metrics._selective_sorted import BLOCK

__all__ = ["GatheredConfidences", "top_confidence"]


def top_confidence(probs: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``max_k p_k`` (float64) and whether the argmax (first index on ties) is right (bool)."""
    pred = probs.argmax(1)
    return probs.gather(1, pred[:, None]).squeeze(1).to(torch.float64), pred == labels


class GatheredConfidences:
    """The confidences of ``n`` reported samples, right ones and wrong ones apart."""

    def __init__(self, n: int) -> None:
        self.buffer = np.empty(n, dtype=np.float64)
        self.n_right = 0
        self.n_wrong = 0

    def add(self, probs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Add a chunk of probabilities ``[b, K]`` with their labels ``[b]``; returns whether
        each argmax is right ``[b]`` (bool)."""
        conf, correct = top_confidence(probs, labels)
        c, ok = conf.numpy(), correct.numpy()
        right = c[ok]
        wrong = c[~ok]
        n = self.buffer.shape[0]
        self.buffer[self.n_right : self.n_right + right.shape[0]] = right
        self.n_right += right.shape[0]
        self.buffer[n - self.n_wrong - wrong.shape[0] : n - self.n_wrong] = wrong
        self.n_wrong += wrong.shape[0]
        return correct

    @property
    def right(self) -> np.ndarray:
        return self.buffer[: self.n_right]

    @property
    def wrong(self) -> np.ndarray:
        return self.buffer[self.buffer.shape[0] - self.n_wrong :]

    def merge(self, other: GatheredConfidences) -> GatheredConfidences:
        """A state holding both states' samples (in a new buffer)."""
        out = GatheredConfidences(self.n_right + self.n_wrong + other.n_right + other.n_wrong)
        out.buffer[: self.n_right] = self.right
        out.buffer[self.n_right : self.n_right + other.n_right] = other.right
        out.n_right = self.n_right + other.n_right
        out.buffer[out.buffer.shape[0] - self.n_wrong - other.n_wrong :] = np.concatenate(
            [other.wrong, self.wrong]
        )
        out.n_wrong = self.n_wrong + other.n_wrong
        return out

    def finish(
        self, max_points: int = 2000, block: int = BLOCK
    ) -> tuple[dict[str, float | None], tuple]:
        """``({"error_auroc", "aurc"}, (coverage, risk, thresholds))``: the two numbers (module
        docstring) and at most ``max_points`` exact vertices of the risk-coverage curve
        (thresholds decreasing: confidences at evenly spaced ranks of the right and of the wrong
        predictions, the extremes of each included). Sorts and then shifts the buffer in place:
        call it once. Temporaries hold ``block`` samples at a time."""
        right, wrong = self.right, self.wrong
        right.sort()
        wrong.sort()
        n = right.shape[0] + wrong.shape[0]
        aurc = _aurc(right, wrong, n, block)
        picks = [
            values[
                np.unique(
                    np.linspace(0, len(values) - 1, max(max_points // 2, 2))
                    .round()
                    .astype(np.int64)
                )
            ]
            for values in (right, wrong)
            if len(values)
        ]
        thresholds = np.unique(np.concatenate(picks))[::-1]
        errors = wrong.shape[0] - np.searchsorted(wrong, thresholds, side="left")
        accepted = errors + right.shape[0] - np.searchsorted(right, thresholds, side="left")
        vertices = (accepted / n, errors / accepted, thresholds.copy())
        # the score 1 - c, compared as c - 1 (the same float64 ties: rounding is symmetric),
        # ascending like the confidences: an error outranks a right prediction when its c - 1
        # is smaller
        right -= 1.0
        wrong -= 1.0
        return {"error_auroc": _error_auroc(right, wrong, block), "aurc": aurc}, vertices


def _error_auroc(right: np.ndarray, wrong: np.ndarray, block: int) -> float | None:
    """``auroc(1 - confidence, 1 - correct)`` from the sorted shifted confidences ``c - 1``."""
    n_right, n_wrong = right.shape[0], wrong.shape[0]
    if n_right == 0 or n_wrong == 0:
        return None
    below = ties = 0
    for start in range(0, n_wrong, block):
        e = wrong[start : start + block]
        lo = np.searchsorted(right, e, side="left")
        hi = np.searchsorted(right, e, side="right")
        ties += int((hi - lo).sum())
        below += int((n_right - hi).sum())  # right ones with a larger c - 1: a lower score
    return (below + ties / 2.0) / (n_right * n_wrong)


def _aurc(right: np.ndarray, wrong: np.ndarray, n: int, block: int) -> float:
    """``aurc(confidence, correct)`` from the sorted confidences (see
    :func:`bensemble.metrics._selective_sorted.aurc_sorted`)."""
    n_right, n_err = right.shape[0], wrong.shape[0]
    total = 0.0
    for values, is_err in ((right, False), (wrong, True)):
        for start in range(0, values.shape[0], block):
            v = values[start : start + block]
            index = np.arange(start, start + v.shape[0])
            r_lo = np.searchsorted(right, v, side="left")
            r_hi = np.searchsorted(right, v, side="right")
            e_lo = np.searchsorted(wrong, v, side="left")
            e_hi = np.searchsorted(wrong, v, side="right")
            above = (n_right - r_hi) + (n_err - e_hi)
            size = ((r_hi - r_lo) + (e_hi - e_lo)).astype(np.float64)
            errors_above = (n_err - e_hi).astype(np.float64)
            group_errors = (e_hi - e_lo).astype(np.float64)
            rank = (r_hi - r_lo) + (index - e_lo) if is_err else index - r_lo
            i = (above + 1 + rank).astype(np.float64)
            err_i = errors_above + (i - above) * (group_errors / size)
            total += float((err_i / i).sum())
    return total / n
