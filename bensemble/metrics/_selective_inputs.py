"""The two hand-shapes of the selective-prediction functions, read into one.

Every selective function (and the risk-coverage display) takes either

* ``(confidence [N], correct [N])``: any real confidence score and 0/1 / bool correctness, or
* ``(probs, labels)``: probabilities ``[N, K]`` (or member probabilities ``[M, N, K]``, averaged
  over members in float64) and integer labels ``[N]``, as every other metric does. The
  confidence is then the top-label probability and ``correct`` whether the top label (first
  index on ties) is the label.

The second form is chosen by keyword (``probs=``, ``labels=``) or by a 2-D / 3-D first
positional argument; a 1-D first argument is always a confidence score.
"""

from __future__ import annotations

from typing import Any

import torch

from bensemble._validation import as_binary, as_float_tensor, as_labels, as_probs, to_tensor
from bensemble.metrics.scoring import _top_label

__all__ = ["selective_inputs"]

_F64 = torch.float64


def selective_inputs(
    fn: str, confidence: Any, correct: Any, probs: Any = None, labels: Any = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(confidence [N], correct [N])`` from either hand-shape (module docstring); the
    confidence keeps its floating dtype (float64 from probabilities), ``correct`` is 0/1 float
    on its device."""
    if probs is not None or labels is not None:
        if confidence is not None or correct is not None:
            raise ValueError(
                f"{fn}: `probs` and `labels` must replace `confidence` and `correct`, not join "
                "them (got both forms)"
            )
        if probs is None or labels is None:
            given, missing = ("probs", "labels") if labels is None else ("labels", "probs")
            raise ValueError(f"{fn}: `{missing}` must be given with `{given}` (got only {given})")
        return _from_probs(probs, labels, fn)
    if confidence is None or correct is None:
        missing = "confidence" if confidence is None else "correct"
        raise ValueError(
            f"{fn}: `{missing}` must be given: pass (confidence, correct) or (probs, labels) "
            f"(got {missing}=None)"
        )
    raw = to_tensor(confidence, "confidence", fn)
    if raw.numel() == 0 and raw.ndim == 1:  # an empty list: either form, so name both
        raise ValueError(
            f"{fn}: `confidence` (or `probs`) must not be empty (got shape {tuple(raw.shape)})"
        )
    if raw.ndim in (2, 3):
        return _from_probs(raw, correct, fn)
    c = as_float_tensor(raw, "confidence", fn, ndim=1)
    ok = as_binary(correct, "correct", fn, n=c.shape[0]).to(c.device)
    return c, ok


def _from_probs(probs: Any, labels: Any, fn: str) -> tuple[torch.Tensor, torch.Tensor]:
    p = as_probs(probs, "probs", fn, ndim=(2, 3), dtype=None)
    if p.ndim == 3:
        p = p.to(_F64).mean(dim=0)
    y = as_labels(labels, "labels", fn, n=p.shape[0], num_classes=p.shape[1], device=p.device)
    confidence, prediction = _top_label(p)  # first index on ties, as accuracy()
    return confidence.to(_F64), (prediction == y).to(_F64)
