"""Out-of-distribution and misclassification detection: ranking metrics and uncertainty scores.

Convention: a *detection score* is larger for samples that are more likely *positive* (OOD, or
misclassified); ``is_positive [N]`` flags the positives. All three metrics are functions of the
ranking only, computed in torch (float64 counts):

* :func:`auroc` - the Mann-Whitney statistic from average ranks, so tied scores count one half
  (equal to scikit-learn's ``roc_auc_score``).
* :func:`aupr` - average precision ``sum_g (R_g - R_{g-1}) P_g`` over the distinct thresholds in
  decreasing order, ties forming one threshold (equal to ``average_precision_score``).
* :func:`fpr_at_95_tpr` - the smallest false-positive rate among the ROC points (one per distinct
  threshold) whose true-positive rate is ``>= 0.95``; no interpolation between points.

:func:`ood_scores` turns a member stack ``[M, N, K]`` into detection scores (total, aleatoric and
epistemic uncertainty, ...); :func:`detection_report` and :func:`misclassification_report` score
them all. A 2-D member array is read as binary positive-class members ``[M, N]`` only with
``binary=True`` (see :func:`bensemble._validation.as_member_stack`); one model's ``[N, K]``
probabilities need a member axis (``probs[None]``).
"""

from __future__ import annotations

from typing import Any

import torch

from bensemble._validation import (
    as_binary,
    as_float_tensor,
    as_labels,
    as_member_stack,
    check_probability,
    output_dtype,
    to_tensor,
)
from bensemble.metrics._ranking import descending_counts

__all__ = [
    "auroc",
    "aupr",
    "fpr_at_tpr",
    "fpr_at_95_tpr",
    "OOD_SCORES",
    "ood_scores",
    "detection_report",
    "misclassification_report",
]

#: Keys of :func:`ood_scores` (each larger for more uncertain samples).
OOD_SCORES = ("total", "aleatoric", "epistemic", "variance", "one_minus_max_probability")


def _scores_and_flags(
    scores: Any, is_positive: Any, fn: str
) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    s = as_float_tensor(scores, "scores", fn, ndim=1)
    pos = as_binary(is_positive, "is_positive", fn, n=s.shape[0]).to(s.device)
    n_pos = int(pos.sum())
    n_neg = s.shape[0] - n_pos
    if n_pos == 0 or n_neg == 0:
        raise ValueError(
            f"{fn}: `is_positive` must contain both positives and negatives "
            f"(got {n_pos} positives and {n_neg} negatives)"
        )
    return s, pos, n_pos, n_neg


def auroc(scores: Any, is_positive: Any) -> float:
    """Area under the ROC curve: ``P(score_pos > score_neg) + P(score_pos = score_neg) / 2``.

    Computed from average ranks (Mann-Whitney U): ``(sum of positive ranks - P(P + 1)/2) / (P N)``.

    Args:
        scores: detection scores ``[N]`` (larger = more likely positive).
        is_positive: 0/1 or bool flags ``[N]`` with at least one positive and one negative.

    Returns:
        AUROC in ``[0, 1]``: 1 when every positive scores above every negative, 0.5 for a
        constant score (and in expectation for one unrelated to the flags).

    Example:
        >>> auroc(torch.tensor([0.1, 0.4, 0.4, 0.8]), torch.tensor([0, 0, 1, 1]))
        0.875
    """
    s, pos, n_pos, n_neg = _scores_and_flags(scores, is_positive, "auroc")
    ordered, order = torch.sort(s)
    _, inverse, counts = torch.unique_consecutive(ordered, return_inverse=True, return_counts=True)
    ends = torch.cumsum(counts, 0).to(torch.float64)
    average_rank = ends - (counts.to(torch.float64) - 1.0) / 2.0  # 1-based, ties averaged
    rank_sum = float((average_rank[inverse] * pos[order]).sum())
    return (rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)


def aupr(scores: Any, is_positive: Any) -> float:
    """Average precision ``sum_g (R_g - R_{g-1}) P_g`` (area under the precision-recall steps).

    Thresholds are the distinct scores in decreasing order; tied scores form one threshold.

    Args:
        scores, is_positive: as in :func:`auroc`.

    Returns:
        Average precision in ``(0, 1]``: 1 when every positive scores above every negative, the
        positive fraction ``P / N`` for a constant score.

    Example:
        >>> aupr(torch.tensor([0.1, 0.4, 0.35, 0.8]), torch.tensor([0, 0, 1, 1]))
        0.8333333333333333
    """
    s, pos, n_pos, _ = _scores_and_flags(scores, is_positive, "aupr")
    tp, fp, _ = descending_counts(s, pos)
    precision = tp / (tp + fp)
    recall_gain = torch.diff(tp, prepend=tp.new_zeros(1)) / n_pos
    return float((recall_gain * precision).sum())


def fpr_at_tpr(scores: Any, is_positive: Any, tpr: float = 0.95) -> float:
    """Smallest false-positive rate among ROC points whose true-positive rate is ``>= tpr``.

    The ROC points are taken at every distinct threshold (ties form one point); no
    interpolation between points.

    Args:
        scores, is_positive: as in :func:`auroc`.
        tpr: target true-positive rate in ``(0, 1]``.

    Returns:
        ``FP / N_neg`` at the first threshold (in decreasing score order) where ``TP / P >= tpr``,
        in ``[0, 1]``; lower is better.

    Example:
        >>> fpr_at_tpr(torch.tensor([0.1, 0.4, 0.35, 0.8]), torch.tensor([0, 0, 1, 1]), tpr=1.0)
        0.5
    """
    fn = "fpr_at_tpr"
    target = check_probability(tpr, "tpr", fn, open_interval=False)
    if target == 0.0:
        raise ValueError(f"{fn}: `tpr` must lie in (0, 1] (got {tpr!r})")
    s, pos, n_pos, n_neg = _scores_and_flags(scores, is_positive, fn)
    tp, fp, _ = descending_counts(s, pos)
    reached = tp / n_pos >= target  # nondecreasing; the last point has TPR 1
    first = int(torch.nonzero(reached)[0, 0])
    return float(fp[first]) / n_neg


def fpr_at_95_tpr(scores: Any, is_positive: Any) -> float:
    """False-positive rate at 95% true-positive rate (:func:`fpr_at_tpr` with ``tpr=0.95``).

    ``scores`` and ``is_positive`` as in :func:`auroc`; returns the false-positive rate in
    ``[0, 1]`` of the first ROC point whose true-positive rate reaches 0.95.

    Example:
        >>> fpr_at_95_tpr(torch.tensor([0.1, 0.4, 0.35, 0.8]), torch.tensor([0, 0, 1, 1]))
        0.5
    """
    return fpr_at_tpr(scores, is_positive, 0.95)


def member_uncertainty(
    member_probs: Any, fn: str, name: str = "member_probs", *, binary: bool = False
) -> dict[str, Any]:
    """Per-sample uncertainty views of a member stack ``[M, N, K]`` (``[M, N]`` with ``binary``).

    In float64, with ``0 log 0 = 0`` (:func:`torch.special.entr`): total ``H(mean_m p_m)``,
    aleatoric ``mean_m H(p_m)``, epistemic = their gap (the mutual information, clamped at 0
    against rounding), variance ``sum_k Var_m[p_mk]`` (divisor M; the EU of the
    epistemic-calibration paper), and ``1 - max_k mean_m p_mk``. Entropies are in nats. The
    binary form ``[M, N]`` is read as the two-class stack ``[1 - p, p]``.
    Private keys: ``"_mean"`` (the float64 mean prediction ``[N, K]``), ``"_members"`` (``M``)
    and ``"_dtype"`` (the floating dtype of the outputs, see
    :func:`bensemble._validation.output_dtype`); the public views are float64 here.
    """
    t = to_tensor(member_probs, name, fn)
    p = as_member_stack(t, name, fn, binary=binary)
    if binary:
        p = torch.stack([1.0 - p, p], dim=-1)
    mean = p.mean(dim=0)
    total = torch.special.entr(mean).sum(dim=-1) + 0.0  # + 0.0 turns -0.0 into 0.0
    aleatoric = torch.special.entr(p).sum(dim=-1).mean(dim=0) + 0.0
    return {
        "total": total,
        "aleatoric": aleatoric,
        "epistemic": (total - aleatoric).clamp_min(0.0),
        "variance": p.var(dim=0, unbiased=False).sum(dim=-1),
        "one_minus_max_probability": 1.0 - mean.max(dim=-1).values,
        "_mean": mean,
        "_members": p.shape[0],
        "_dtype": output_dtype(t),
    }


def ood_scores(member_probs: Any, *, binary: bool = False) -> dict[str, torch.Tensor]:
    """Detection scores (larger = more uncertain) from member probabilities.

    Args:
        member_probs: member probabilities ``[M, N, K]`` (``[M, N]`` positive-class
            probabilities with ``binary=True``; one model's ``[N, K]`` needs ``probs[None]``).
        binary: read a 2-D ``member_probs`` as binary positive-class members ``[M, N]``.

    Returns:
        A dict over :data:`OOD_SCORES` of tensors ``[N]`` in the input's floating dtype
        (float32 for float16 / bfloat16; computed in float64): ``"total"`` (entropy of the mean
        prediction), ``"aleatoric"`` (mean member entropy), ``"epistemic"`` (mutual
        information = total - aleatoric), ``"variance"`` (``sum_k Var_m[p_mk]``) and
        ``"one_minus_max_probability"``. Entropies in nats.

    Example:
        >>> s = ood_scores(torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]]))
        >>> round(float(s["epistemic"][0]), 4), float(s["aleatoric"][0])
        (0.6931, 0.0)
    """
    views = member_uncertainty(member_probs, "ood_scores", binary=binary)
    return {key: views[key].to(views["_dtype"]) for key in OOD_SCORES}


def _report(scores: dict[str, torch.Tensor], is_positive: torch.Tensor) -> dict[str, dict]:
    return {
        key: {
            "auroc": auroc(value, is_positive),
            "aupr": aupr(value, is_positive),
            "fpr95": fpr_at_95_tpr(value, is_positive),
        }
        for key, value in scores.items()
    }


def detection_report(
    member_probs_in: Any, member_probs_out: Any, *, binary: bool = False
) -> dict[str, dict[str, float]]:
    """OOD detection quality of every :func:`ood_scores` score, OOD samples as positives.

    Args:
        member_probs_in: member probabilities on in-distribution inputs ``[M, N_in, K]``.
        member_probs_out: member probabilities on OOD inputs ``[M, N_out, K]`` (same ``M``, ``K``).
        binary: both are binary positive-class members ``[M, N_in]`` / ``[M, N_out]``.

    Returns:
        ``{score: {"auroc": float, "aupr": float, "fpr95": float}}`` for each key of
        :data:`OOD_SCORES`.
    """
    fn = "detection_report"
    views_in = member_uncertainty(member_probs_in, fn, "member_probs_in", binary=binary)
    views_out = member_uncertainty(member_probs_out, fn, "member_probs_out", binary=binary)
    a, b = views_in["_mean"], views_out["_mean"]
    if a.shape[-1] != b.shape[-1] or views_in["_members"] != views_out["_members"]:
        raise ValueError(
            f"{fn}: `member_probs_out` must have the members and classes of `member_probs_in` "
            f"({views_in['_members']} members, {a.shape[-1]} classes) "
            f"(got {views_out['_members']} members, {b.shape[-1]} classes)"
        )
    n_in, n_out = views_in["total"].shape[0], views_out["total"].shape[0]
    flags = torch.cat([torch.zeros(n_in), torch.ones(n_out)]).to(torch.float64)
    scores = {key: torch.cat([views_in[key], views_out[key]]) for key in OOD_SCORES}
    return _report(scores, flags)


def misclassification_report(
    member_probs: Any, labels: Any, *, binary: bool = False
) -> dict[str, dict[str, float]]:
    """Misclassification detection quality of every :func:`ood_scores` score.

    A sample is positive when the mean prediction's argmax differs from its label (first index
    on ties, so a binary mean of exactly 0.5 predicts class 0).

    Args:
        member_probs: member probabilities ``[M, N, K]`` (``[M, N]`` with ``binary=True``).
        labels: true labels ``[N]``.
        binary: read a 2-D ``member_probs`` as binary positive-class members ``[M, N]``.

    Returns:
        ``{score: {"auroc": float, "aupr": float, "fpr95": float}}`` for each key of
        :data:`OOD_SCORES`.
    """
    fn = "misclassification_report"
    views = member_uncertainty(member_probs, fn, binary=binary)
    mean = views["_mean"]
    y = as_labels(labels, "labels", fn, n=mean.shape[0], num_classes=mean.shape[1])
    wrong = (mean.argmax(dim=-1) != y.to(mean.device)).to(torch.float64)
    n_wrong = int(wrong.sum())
    if n_wrong == 0 or n_wrong == wrong.shape[0]:
        raise ValueError(
            f"{fn}: `labels` must leave both correct and misclassified samples "
            f"(got {n_wrong} misclassified of {wrong.shape[0]})"
        )
    return _report({key: views[key] for key in OOD_SCORES}, wrong)
