"""How the reproductions score binary member predictions, with the paper's settings.

* :data:`EECE_BINS`, :data:`EECE_BACKEND`, :data:`ECE_BINS` - the binning of EECE and ECE;
* :func:`one_vs_all` - the relabelling of the paper's one-vs-all protocol;
* :func:`binary_scores` - accuracy, ECE, EECE (and TECE when ``P(y = 1 | x)`` is known);
* :func:`score_method` - one of the paper's nine methods trained and scored: its members through
  :func:`binary_scores`, or, for an illustrative method, its ``(h, EU)`` under each requested
  :class:`~bensemble.experiments.illustrative.Convention` (the toy and the one-vs-all runs share
  it, so every table scores the same way).

Re-exported by :mod:`bensemble.experiments._common`.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from bensemble._options import check_seed
from bensemble._validation import as_binary_member_probs, as_confidences, as_labels
from bensemble.experiments.illustrative import Convention, illustrative_scores
from bensemble.methods import gaussian_members
from bensemble.methods.zoo import (
    ILLUSTRATIVE_METHODS,
    ZooSettings,
    illustrative_outputs,
    member_probs,
)
from bensemble.metrics import (
    KMeansBinning,
    accuracy,
    binary_calibration_error,
    expected_epistemic_calibration_error,
    true_epistemic_calibration_error,
)

__all__ = [
    "ECE_BINS",
    "EECE_BACKEND",
    "EECE_BINS",
    "MEMBERS",
    "MethodScores",
    "binary_scores",
    "one_vs_all",
    "score_method",
]

#: The paper's EECE setting (appendix B.1.2): 100 K-means bins.
EECE_BINS = 100
#: K-means as in the paper ("default scikit-learn parameters"); also the fastest on CPU here.
EECE_BACKEND = "sklearn"
#: Bins of the classical ECE of the mean prediction (the paper does not say; 15 equal-width).
ECE_BINS = 15
#: The convention column of a method scored on its own members.
MEMBERS = "members"


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
            p, y, KMeansBinning(n_bins, seed=seed, backend=EECE_BACKEND), binary=True
        ),
    }
    if eta is not None:
        e = as_confidences(eta, "eta", fn)
        scores["tece"] = true_epistemic_calibration_error(
            p, e, condition_on=condition_on, binary=True
        )
        scores["gap"] = abs(scores["eece"] - scores["tece"])
    return scores


@dataclass
class MethodScores:
    """What :func:`score_method` returns.

    Attributes:
        records: one score dict per convention (``convention``, ``group``, ``mean EU``,
            ``accuracy``, ``ece``, ``eece``, with ``eta`` also ``tece`` and ``gap``).
        eu: ``[N]`` the EU the method reports (member variance, or the illustrative ``EU(x)``).
        members: ``[H, N]`` positive-class members (for an illustrative method the draws of the
            first convention).
        note: a remark on the method's settings (EK-NN on fewer than 12 points), or ``None``.
    """

    records: list[dict[str, Any]]
    eu: torch.Tensor
    members: torch.Tensor
    note: str | None


def score_method(
    method: str,
    train: tuple[Any, Any],
    evaluation: tuple[Any, Any],
    *,
    settings: ZooSettings,
    conventions: Sequence[Convention],
    n_bins: int,
    seed: int,
    eta: Any = None,
    training_log: list[list[float]] | None = None,
) -> MethodScores:
    """Train ``method`` on ``train = (x, y)`` and score it on ``evaluation = (x, y)``.

    An active method is scored on its members (:func:`binary_scores`, convention
    :data:`MEMBERS`); an illustrative one on its ``(h(x), EU(x))`` under every convention of
    ``conventions`` (:func:`~bensemble.experiments.illustrative.illustrative_scores`, the
    draws seeded by ``seed``). ``eta`` (the true ``P(y = 1 | x)``) adds the TECE.
    """
    seed = check_seed(seed, "seed", "score_method")
    (x_tr, y_tr), (x_ev, y_ev) = train, evaluation
    if method in ILLUSTRATIVE_METHODS:
        h, eu, note = illustrative_outputs(method, x_tr, y_tr, x_ev, settings=settings)
        records = []
        for convention in conventions:
            scores = illustrative_scores(
                h, eu, y_ev, eta=eta, trust=convention.trust, clip=convention.clip,
                n_members=settings.n_samples, n_bins=n_bins, seed=seed,
            )  # fmt: skip
            records.append({"convention": convention.label, "group": "illustrative",
                            "mean EU": float(eu.mean()), **scores})  # fmt: skip
        g = torch.Generator().manual_seed(seed)  # the draws illustrative_scores made
        draws = gaussian_members(h, eu, settings.n_samples, clip=conventions[0].clip, generator=g)
        return MethodScores(records, eu, draws[..., 1], note)
    probs = member_probs(
        method, x_tr, y_tr, x_ev, settings=settings, seed=seed, training_log=training_log
    )
    p = probs[..., 1]
    eu = p.var(dim=0, unbiased=False)
    scores = binary_scores(p, y_ev, eta=eta, n_bins=n_bins, seed=seed)
    record = {"convention": MEMBERS, "group": "active", "mean EU": float(eu.mean()), **scores}
    return MethodScores([record], eu, p, None)
