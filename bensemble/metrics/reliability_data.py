"""Per-bin data of a top-label reliability diagram, as bensemble 0.2's ``reliability_diagram``
returned it (plus counts and edges); the binning is :mod:`bensemble.metrics.calibration`'s."""

from __future__ import annotations

from typing import Any

from bensemble._renamed import renamed_keywords
from bensemble.metrics.calibration import _checked_top_label_bins

__all__ = ["reliability_diagram"]


@renamed_keywords(targets="labels")
def reliability_diagram(
    probs: Any,
    labels: Any,
    n_bins: int = 15,
    *,
    binning: str = "uniform",
    from_logits: bool = False,
) -> dict[str, list]:
    """Per-bin data of a top-label reliability diagram (bensemble 0.2's dict, plus counts/edges).

    Args:
        probs: ``[N, K]`` class probabilities (or logits with ``from_logits=True``).
        labels: ``[N]`` integer labels in ``[0, K)``.
        n_bins: number of bins.
        binning: ``"uniform"`` or ``"quantile"``.
        from_logits: apply the softmax (float64) first.

    Returns:
        ``{"confidences", "accuracies", "proportions"}``: lists of ``n_bins`` floats (an empty bin
        reports its midpoint, accuracy 0.0 and proportion 0.0, as bensemble 0.2 does), plus
        ``"counts"`` (``n_bins`` ints) and ``"edges"`` (``n_bins + 1`` floats).

    Example:
        >>> d = reliability_diagram([[0.9, 0.1], [0.6, 0.4]], [0, 1], n_bins=2)
        >>> d["counts"], d["accuracies"], d["proportions"]
        ([0, 2], [0.0, 0.5], [0.0, 1.0])
    """
    fn = "reliability_diagram"
    bins = _checked_top_label_bins(fn, probs, labels, n_bins, binning, from_logits)
    return {
        "confidences": bins.mean_confidence.tolist(),
        "accuracies": bins.accuracy.tolist(),
        "proportions": bins.weights.tolist(),
        "counts": [int(c) for c in bins.counts.tolist()],
        "edges": bins.edges.tolist(),
    }
