"""Selective prediction: accept the most confident predictions, abstain on the rest.

A threshold ``t`` on a confidence score accepts the samples with ``confidence >= t``. Its
*coverage* is the accepted fraction and its *selective risk* the error rate among accepted
samples. Sweeping ``t`` over every distinct confidence gives the risk-coverage curve; equal
confidences form one threshold (they are accepted or rejected together), so the curve has one
point per distinct confidence value, in decreasing threshold order (increasing coverage).

AURC (area under the risk-coverage curve, Geifman et al.) is ``(1/N) sum_{i=1}^{N} risk_i``, where
``risk_i`` is the error rate among the ``i`` most confident samples. With tied confidences the
order inside a tie is arbitrary; we use the expectation over a uniformly random order inside each
tie, i.e. errors are spread evenly across the tied positions. Without ties this is the classical
value, and it never depends on the order of the input.

Two hand-shapes (:mod:`bensemble.metrics._selective_inputs`): ``(confidence [N], correct [N])``,
where ``correct`` holds 1 where the prediction is right (0/1 or bool) and the confidence is any
real score, larger = more confident (:func:`selective_confidence` builds one from a member
stack); or ``(probs, labels)`` as every other metric takes them - probabilities ``[N, K]`` (or
members ``[M, N, K]``, averaged) and integer labels ``[N]`` - scored by the top-label
probability. A 2-D / 3-D first argument, or the keywords ``probs=`` / ``labels=``, select it.
"""

from __future__ import annotations

from typing import Any

import torch

from bensemble._validation import check_option, check_probability
from bensemble.metrics._ranking import descending_counts
from bensemble.metrics._selective_inputs import selective_inputs
from bensemble.metrics.ood import member_uncertainty

__all__ = [
    "CONFIDENCES",
    "risk_coverage_curve",
    "aurc",
    "excess_aurc",
    "risk_at_coverage",
    "coverage_at_risk",
    "selective_confidence",
]

#: Valid ``method`` values of :func:`selective_confidence`.
CONFIDENCES = (
    "max_probability",
    "negative_entropy",
    "negative_mutual_information",
    "negative_variance",
)


def _validate(
    confidence: Any, correct: Any, fn: str, probs: Any = None, labels: Any = None
) -> tuple[torch.Tensor, torch.Tensor]:
    return selective_inputs(fn, confidence, correct, probs, labels)


def _curve_counts(c: torch.Tensor, ok: torch.Tensor):
    errors, right, thresholds = descending_counts(c, 1.0 - ok)
    return errors, errors + right, thresholds


def risk_coverage_curve(
    confidence: Any = None, correct: Any = None, *, probs: Any = None, labels: Any = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Coverage and selective risk at every distinct confidence threshold.

    Args:
        confidence: confidence scores ``[N]`` (larger = more confident; any real values), or
            probabilities ``[N, K]`` / ``[M, N, K]`` (then ``correct`` holds the labels).
        correct: 1 where the prediction is correct ``[N]`` (0/1 or bool), or labels ``[N]``.
        probs, labels: the ``(probs, labels)`` form by keyword, instead of the two above.

    Returns:
        ``(coverage, risk, thresholds)``, each float64 ``[G]`` for the ``G`` distinct
        confidences in decreasing order: ``coverage[g] = mean(confidence >= thresholds[g])`` and
        ``risk[g]`` the error rate among those samples. The last point has coverage 1.

    Example:
        >>> confidence = torch.tensor([0.9, 0.8, 0.8, 0.6], dtype=torch.float64)
        >>> cov, risk, thr = risk_coverage_curve(confidence, torch.tensor([1, 1, 0, 0]))
        >>> cov.tolist(), risk.tolist(), thr.tolist()
        ([0.25, 0.75, 1.0], [0.0, 0.3333333333333333, 0.5], [0.9, 0.8, 0.6])
        >>> probs = torch.tensor([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]])
        >>> risk_coverage_curve(probs, torch.tensor([0, 0, 0]))[1].tolist()  # (probs, labels)
        [0.0, 0.5, 0.3333333333333333]
    """
    c, ok = _validate(confidence, correct, "risk_coverage_curve", probs, labels)
    errors, accepted, thresholds = _curve_counts(c, ok)
    return accepted / c.shape[0], errors / accepted, thresholds


def _aurc(c: torch.Tensor, ok: torch.Tensor) -> float:
    """Mean over i of the expected error rate of the i most confident samples (ties spread)."""
    n = c.shape[0]
    errors, accepted, _ = _curve_counts(c, ok)
    size = torch.diff(accepted, prepend=accepted.new_zeros(1))
    group_errors = torch.diff(errors, prepend=errors.new_zeros(1))
    # Position i (1-based) lies in group g: errors(i) = E_before + (i - n_before) * e_g / s_g.
    group = torch.repeat_interleave(torch.arange(size.shape[0], device=c.device), size.long())
    i = torch.arange(1, n + 1, dtype=torch.float64, device=c.device)
    before = accepted - size
    err_i = (errors - group_errors)[group] + (i - before[group]) * (group_errors / size)[group]
    return float((err_i / i).mean())


def _oracle_aurc(n: int, n_errors: int) -> float:
    """AURC of a confidence that ranks every correct sample above every error."""
    i = torch.arange(1, n + 1, dtype=torch.float64)
    return float((torch.clamp(i - (n - n_errors), min=0.0) / i).mean())


def aurc(
    confidence: Any = None, correct: Any = None, *, probs: Any = None, labels: Any = None
) -> float:
    """Area under the risk-coverage curve, ``(1/N) sum_i risk_i`` (lower is better).

    Args:
        confidence, correct, probs, labels: as in :func:`risk_coverage_curve`.

    Returns:
        AURC in ``[0, 1]``; tied confidences are handled as in the module docstring.

    Example:
        >>> aurc(torch.tensor([0.9, 0.8, 0.7, 0.6]), torch.tensor([1, 1, 0, 0]))
        0.20833333333333331
    """
    c, ok = _validate(confidence, correct, "aurc", probs, labels)
    return _aurc(c, ok)


def excess_aurc(
    confidence: Any = None, correct: Any = None, *, probs: Any = None, labels: Any = None
) -> float:
    """AURC minus the AURC of the oracle ranking with the same errors (``>= 0``; 0 is ideal).

    The oracle accepts every correct sample before any error, so its AURC is
    ``(1/N) sum_i max(0, i - (N - E)) / i`` for ``E`` errors; subtracting it removes the part of
    AURC that is due to the error rate rather than to the ranking.

    Args:
        confidence, correct, probs, labels: as in :func:`risk_coverage_curve`.

    Returns:
        The excess AURC in ``[0, 1]``: 0 when every correct sample is accepted before any error.

    Example:
        >>> excess_aurc(torch.tensor([0.9, 0.8, 0.7, 0.6]), torch.tensor([1, 1, 0, 0]))
        0.0
    """
    c, ok = _validate(confidence, correct, "excess_aurc", probs, labels)
    n_errors = int(round(float((1.0 - ok).sum())))
    return max(_aurc(c, ok) - _oracle_aurc(c.shape[0], n_errors), 0.0)


def risk_at_coverage(
    confidence: Any = None,
    correct: Any = None,
    coverage: float | None = None,
    *,
    probs: Any = None,
    labels: Any = None,
) -> float:
    """Selective risk at the first curve point whose coverage reaches ``coverage``.

    Tied confidences are never split, so the achieved coverage can exceed the target.

    Args:
        confidence, correct, probs, labels: as in :func:`risk_coverage_curve`.
        coverage: target coverage in ``(0, 1]`` (required).

    Returns:
        ``errors / accepted`` at the smallest-coverage curve point with coverage ``>= coverage``,
        in ``[0, 1]``.

    Example:
        >>> risk_at_coverage(torch.tensor([0.9, 0.8, 0.7, 0.6]), torch.tensor([1, 0, 1, 0]), 0.5)
        0.5
    """
    fn = "risk_at_coverage"
    target = check_probability(coverage, "coverage", fn, open_interval=False)
    if target == 0.0:
        raise ValueError(f"{fn}: `coverage` must lie in (0, 1] (got {coverage!r})")
    c, ok = _validate(confidence, correct, fn, probs, labels)
    errors, accepted, _ = _curve_counts(c, ok)
    first = int(torch.nonzero(accepted / c.shape[0] >= target)[0, 0])
    return float(errors[first] / accepted[first])


def coverage_at_risk(
    confidence: Any = None,
    correct: Any = None,
    risk: float | None = None,
    *,
    probs: Any = None,
    labels: Any = None,
) -> float:
    """Largest coverage among the curve points whose selective risk is ``<= risk`` (0 if none).

    Args:
        confidence, correct, probs, labels: as in :func:`risk_coverage_curve`.
        risk: tolerated selective risk in ``[0, 1]`` (required).

    Returns:
        The coverage ``accepted / N`` in ``[0, 1]`` of the feasible point accepting the most
        samples; 0.0 when no curve point meets ``risk``.

    Example:
        >>> coverage_at_risk(torch.tensor([0.9, 0.8, 0.7, 0.6]), torch.tensor([1, 0, 1, 0]), 0.4)
        0.75
    """
    fn = "coverage_at_risk"
    target = check_probability(risk, "risk", fn, open_interval=False)
    c, ok = _validate(confidence, correct, fn, probs, labels)
    errors, accepted, _ = _curve_counts(c, ok)
    feasible = errors / accepted <= target
    if not bool(feasible.any()):
        return 0.0
    return float(accepted[feasible].max()) / c.shape[0]


def selective_confidence(
    member_probs: Any, method: str = "max_probability", *, binary: bool = False
) -> torch.Tensor:
    """A confidence score (larger = more confident) from member probabilities.

    Args:
        member_probs: member probabilities ``[M, N, K]`` (``[M, N]`` positive-class
            probabilities with ``binary=True``; one model's ``[N, K]`` needs ``probs[None]``).
        method: ``"max_probability"`` (``max_k`` of the mean prediction), ``"negative_entropy"``
            (minus the entropy of the mean prediction), ``"negative_mutual_information"``
            (minus the epistemic part of the entropy), or ``"negative_variance"`` (minus the
            epistemic variance ``sum_k Var_m[p_mk]``, the EU of the epistemic-calibration
            paper). Entropies in nats.
        binary: read a 2-D ``member_probs`` as binary positive-class members ``[M, N]``.

    Returns:
        Confidence ``[N]``, computed in float64 and returned in the input's floating dtype
        (float32 for float16 / bfloat16).

    Example:
        >>> selective_confidence(torch.tensor([[[0.8, 0.2]], [[0.6, 0.4]]]))
        tensor([0.7000])
    """
    fn = "selective_confidence"
    method = check_option(method, "method", CONFIDENCES, fn)
    views = member_uncertainty(member_probs, fn, binary=binary)
    if method == "max_probability":
        return views["_mean"].max(dim=-1).values.to(views["_dtype"])
    key = {
        "negative_entropy": "total",
        "negative_mutual_information": "epistemic",
        "negative_variance": "variance",
    }[method]
    return (-views[key]).to(views["_dtype"])
