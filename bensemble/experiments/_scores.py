"""How the reproductions score binary member predictions, with the paper's settings.

* :data:`EECE_BINS`, :data:`EECE_BACKEND`, :data:`ECE_BINS` - the binning of EECE and ECE;
* :func:`one_vs_all` - the relabelling of the paper's one-vs-all protocol;
* :func:`binary_scores` - accuracy, ECE, EECE (and TECE when ``P(y = 1 | x)`` is known).

Re-exported by :mod:`bensemble.experiments._common`.
"""

from __future__ import annotations

import numbers
from typing import Any

import torch

from bensemble._options import check_seed
from bensemble._validation import as_binary_member_probs, as_confidences, as_labels
from bensemble.metrics import (
    accuracy,
    binary_calibration_error,
    expected_epistemic_calibration_error,
    true_epistemic_calibration_error,
)

__all__ = ["ECE_BINS", "EECE_BACKEND", "EECE_BINS", "binary_scores", "one_vs_all"]

#: The paper's EECE setting (appendix B.1.2): 100 K-means bins.
EECE_BINS = 100
#: K-means as in the paper ("default scikit-learn parameters"); also the fastest on CPU here.
EECE_BACKEND = "sklearn"
#: Bins of the classical ECE of the mean prediction (the paper does not say; 15 equal-width).
ECE_BINS = 15


def one_vs_all(labels: Any, positive: int) -> torch.Tensor:
    """Binary labels of the one-vs-all task ``positive`` vs the rest: ``1[labels == positive]``.

    Args:
        labels: ``[N]`` integer class labels.
        positive: the class that becomes label 1.

    Returns:
        ``[N]`` int64 labels in {0, 1}.
    """
    y = as_labels(labels, "labels", "one_vs_all")
    if not isinstance(positive, numbers.Integral) or isinstance(positive, bool):
        raise ValueError(f"one_vs_all: `positive` must be an int (got {positive!r})")
    return (y == int(positive)).to(torch.int64)


def binary_scores(
    member_probs: Any,
    labels: Any,
    *,
    eta: Any = None,
    n_bins: int = EECE_BINS,
    seed: int = 0,
    condition_on: str = "psi",
) -> dict[str, float]:
    """Accuracy, ECE, EECE (and TECE) of binary member predictions, as the paper scores them.

    Args:
        member_probs: ``[H, N]`` positive-class probabilities, or ``[H, N, 2]``.
        labels: ``[N]`` labels in {0, 1}.
        eta: ``[N]`` true ``P(y = 1 | x)`` when known (adds ``tece`` and ``gap = |eece - tece|``).
        n_bins: K-means bins of the EECE (capped at the number of distinct member vectors).
        seed: K-means seed.
        condition_on: the TECE's conditioning (``"psi"``: on the member vector, the paper's
            ``P(Y = 1 | Pi(X))``; equal to ``"x"`` when every point has its own vector).

    Returns:
        ``accuracy`` (mean prediction thresholded at 1/2), ``ece`` (:data:`ECE_BINS` equal-width
        bins on the mean prediction), ``eece`` and optionally ``tece`` and ``gap``.
    """
    fn = "binary_scores"
    seed = check_seed(seed, "seed", fn)
    p = torch.as_tensor(member_probs)
    if p.ndim == 3:
        if p.shape[-1] != 2:
            raise ValueError(
                f"{fn}: `member_probs` must be [H, N] or [H, N, 2] (got shape {list(p.shape)})"
            )
        p = p[..., 1]
    p = as_binary_member_probs(p, "member_probs", fn).to(torch.float64)
    y = as_labels(labels, "labels", fn, n=p.shape[1], num_classes=2)
    mean = p.mean(dim=0)
    scores = {
        "accuracy": accuracy(torch.stack([1.0 - mean, mean], dim=1), y),
        "ece": binary_calibration_error(p, y, n_bins=ECE_BINS, binary=True),
        "eece": expected_epistemic_calibration_error(
            p, y, n_bins=n_bins, binning="kmeans", seed=seed, backend=EECE_BACKEND, binary=True
        ),
    }
    if eta is not None:
        e = as_confidences(eta, "eta", fn)
        scores["tece"] = true_epistemic_calibration_error(
            p, e, condition_on=condition_on, binary=True
        )
        scores["gap"] = abs(scores["eece"] - scores["tece"])
    return scores
