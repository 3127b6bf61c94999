"""Input and state checks shared by the post-hoc scalers (no public names)."""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch

from bensemble._validation import (
    as_float_tensor,
    as_labels,
    as_logits,
    as_member_stack,
    check_probability,
    output_dtype,
    to_tensor,
)

__all__: list[str] = []


def check_bounds(bounds: Any, fn: str) -> tuple[float, float]:
    """A pair ``(T_min, T_max)`` of finite floats with ``0 < T_min < T_max``."""
    ok = isinstance(bounds, (tuple, list)) and len(bounds) == 2
    if ok:
        try:
            lo, hi = float(bounds[0]), float(bounds[1])
        except (TypeError, ValueError):
            ok = False
        else:
            ok = math.isfinite(lo) and math.isfinite(hi) and 0.0 < lo < hi
    if not ok:
        raise ValueError(
            f"{fn}: `bounds` must be a pair (T_min, T_max) with 0 < T_min < T_max (got {bounds!r})"
        )
    return lo, hi


def input_eps(t: torch.Tensor) -> float:
    """Machine epsilon of a floating dtype (0 for integers, which are exact)."""
    return float(torch.finfo(t.dtype).eps) if t.is_floating_point() else 0.0


def fit_inputs(
    logits: Any,
    labels: Any,
    fn: str,
    num_classes: int | None = None,
    *,
    members: bool = False,
    stacklevel: int = 4,
) -> tuple[torch.Tensor, torch.Tensor, bool, float]:
    """Validated float64 logits ``[N, K]`` (``[M, N, K]`` with ``members``) and int64 labels.

    Returns ``(logits64, labels, owned, eps)``: ``owned`` says whether the float64 tensor is a
    private copy (safe to overwrite), ``eps`` is the machine epsilon of the input dtype. Warns
    (:class:`UserWarning`) when every row lies in ``[0, 1]`` and sums to 1: probabilities passed
    as logits, which the fit would treat as logits (it never guesses; it says so).
    """
    raw = to_tensor(logits, "logits", fn)
    if members and raw.ndim != 3:
        raise ValueError(
            f"{fn}: `logits` must be member logits [M, N, K] with ensemble=True (got shape "
            f"{tuple(raw.shape)}); for one model's [N, K] logits leave ensemble=False"
        )
    if not members and raw.ndim == 3:
        raise ValueError(
            f"{fn}: `logits` must be 2-D [N, K] (got shape {tuple(raw.shape)}); for member "
            "logits [M, N, K] pass ensemble=True (one T shared by every member, then the "
            "probabilities averaged), or fit on the ensemble's log-probabilities [N, K] "
            "(Ensemble.predict_log_proba)"
        )
    # Check finiteness in the input dtype (half the bytes of float64 for float32), then cast.
    keep = None if raw.is_floating_point() else torch.float64
    z = as_logits(raw, "logits", fn, ndim=3 if members else 2, dtype=keep).to(torch.float64)
    if z.shape[-1] < 2:
        raise ValueError(
            f"{fn}: `logits` must have at least 2 classes on its last axis (got shape "
            f"{tuple(z.shape)})"
        )
    if num_classes is not None and z.shape[-1] != num_classes:
        raise ValueError(
            f"{fn}: `logits` must have num_classes={num_classes} columns (got shape "
            f"{tuple(z.shape)})"
        )
    _warn_if_probabilities(z, input_eps(raw), fn, stacklevel + 1)
    n = z.shape[-2]
    y = as_labels(labels, "labels", fn, n=n, num_classes=z.shape[-1], device=z.device)
    owned = raw.dtype != torch.float64  # the float64 tensor is then a fresh copy
    return z, y, owned, input_eps(raw)


def _warn_if_probabilities(z: torch.Tensor, eps: float, fn: str, stacklevel: int) -> None:
    """Warn when every row of ``z`` lies on the probability simplex (one aminmax pass)."""
    if z.numel() == 0:
        return
    lo, hi = torch.aminmax(z)
    if not (float(lo) >= 0.0 and float(hi) <= 1.0):
        return
    tolerance = 1e-2 if eps > 1e-4 else 1e-4  # half-precision rows sum to 1 less exactly
    if float((z.sum(dim=-1) - 1.0).abs().max()) <= tolerance:
        warnings.warn(
            f"{fn}: every row of `logits` lies in [0, 1] and sums to 1 - these look like "
            "probabilities; the scaler works on logits, so pass log-probabilities "
            "(probs.log(), or Ensemble.predict_log_proba) instead.",
            UserWarning,
            stacklevel=stacklevel,
        )


def forward_input(logits: Any, fn: str, num_classes: int | None) -> tuple[torch.Tensor, Any]:
    """Logits ``[N, K]`` or ``[M, N, K]`` as a floating tensor, and the dtype to return."""
    t = logits if isinstance(logits, torch.Tensor) else to_tensor(logits, "logits", fn)
    if t.ndim not in (2, 3):
        raise ValueError(
            f"{fn}: `logits` must be 2-D [N, K] or 3-D [M, N, K] (got shape {tuple(t.shape)})"
        )
    if num_classes is not None and t.shape[-1] != num_classes:
        raise ValueError(
            f"{fn}: `logits` must have num_classes={num_classes} entries on its last axis "
            f"(got shape {tuple(t.shape)})"
        )
    if not t.is_floating_point():
        if t.is_complex() or t.dtype == torch.bool:
            raise ValueError(f"{fn}: `logits` must be real-valued (got dtype {t.dtype})")
        t = t.to(torch.get_default_dtype())
    out_dtype = t.dtype
    # Half-precision inputs are scaled in float32 and rounded back once.
    if t.dtype in (torch.float16, torch.bfloat16):
        t = t.float()
    return t, out_dtype


def state_tensor(value: Any, key: str, fn: str, shape: tuple[int, ...] | None) -> torch.Tensor:
    """A finite real tensor from a state dict, of ``shape`` (``None``: one element, 0-D or 1-D).

    Raises a ``ValueError`` naming ``key`` otherwise, before anything is copied into the module.
    """
    t = _dense_real(value, key, fn)
    if shape is None:
        ok = t.numel() == 1 and t.ndim <= 1
        want = "one element (shape (1,))"
    else:
        ok = tuple(t.shape) == tuple(shape)
        want = f"shape {tuple(shape)}"
    if not ok:
        raise ValueError(f"{fn}: `{key}` must have {want} (got shape {tuple(t.shape)})")
    return _finite(t, key, fn)


def table_state_tensor(value: Any, key: str, fn: str) -> torch.Tensor:
    """A finite real tensor of any shape from a state dict, as a float64 CPU copy (the fitted
    tables of the probability calibrators, whose shapes depend on the fit)."""
    t = _finite(_dense_real(value, key, fn), key, fn)
    return t.to(device="cpu", dtype=torch.float64)


def _dense_real(value: Any, key: str, fn: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{fn}: `{key}` must be a tensor (got {type(value).__name__})")
    if value.is_complex() or value.dtype == torch.bool or value.is_sparse or value.is_meta:
        raise ValueError(
            f"{fn}: `{key}` must be a dense real tensor (got dtype {value.dtype}, layout "
            f"{value.layout}{', meta' if value.is_meta else ''})"
        )
    return value.detach()


def _finite(t: torch.Tensor, key: str, fn: str) -> torch.Tensor:
    if t.is_floating_point() and not bool(torch.isfinite(t).all()):
        bad = int((~torch.isfinite(t)).sum())
        raise ValueError(f"{fn}: `{key}` must be finite (got {bad} NaN/inf values)")
    return t


def member_logits(
    value: Any, fn: str, *, from_logits: bool, binary: bool, min_prob: float
) -> tuple[torch.Tensor, torch.dtype]:
    """Float64 member logits ``[M, N, K]`` of ``member_probs`` and the output dtype.

    ``value`` is member probabilities ``[M, N, K]`` (``[M, N]`` positive-class probabilities
    with ``binary``), floored at ``min_prob`` before the logarithm, or with ``from_logits``
    member logits ``[M, N, K]`` (``[M, N]`` log-odds with ``binary``); binary input becomes
    ``K = 2`` (logits ``[0, log-odds]``).
    """
    t = to_tensor(value, "member_probs", fn)
    dtype = output_dtype(t)
    if from_logits:
        want = 2 if binary else 3
        if t.ndim != want:
            form = "[M, N] log-odds (binary=True)" if binary else "[M, N, K] logits"
            raise ValueError(
                f"{fn}: `member_probs` must be member {form} with from_logits=True (got "
                f"shape {tuple(t.shape)})"
            )
        z = as_float_tensor(t, "member_probs", fn, ndim=want, dtype=torch.float64)
        if binary:
            z = torch.stack([torch.zeros_like(z), z], dim=-1)
    else:
        p = as_member_stack(t, "member_probs", fn, binary=binary, dtype=torch.float64)
        if binary:
            p = torch.stack([1.0 - p, p], dim=-1)
        z = p.clamp_min(check_probability(min_prob, "min_prob", fn)).log()
    if z.shape[-1] < 2:
        raise ValueError(
            f"{fn}: `member_probs` must have at least 2 classes on its last axis (got shape "
            f"{tuple(z.shape)}); binary positive-class members [M, N] need binary=True"
        )
    return z, dtype
