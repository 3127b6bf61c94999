"""Checks of tensors and probability / logit arrays (re-exported by :mod:`bensemble._validation`).

The conventions (message shape, simplex tolerance, logits vs probabilities) are in the docstring
of :mod:`bensemble._validation`; import the checkers from there.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch

from bensemble._scalar_checks import (
    check_bool,
    warn_user,
)

#: Maximum allowed ``|sum_k p_k - 1|`` for a probability row (float32/float64 inputs).
SUM_TOLERANCE = 1e-4
_HALF_SUM_TOLERANCE = 1e-2


def output_dtype(value: Any) -> torch.dtype:
    """The floating dtype a per-sample output takes for an input of ``value``'s dtype.

    float32 and float64 inputs keep their dtype; float16 / bfloat16 inputs give float32 (the
    maths runs in float64 and a half-precision result would lose most of its digits); integer
    and bool inputs give torch's default dtype. Nested Python lists arrive as float64.
    """
    dtype = value.dtype if isinstance(value, torch.Tensor) else None
    if dtype in (torch.float32, torch.float64):
        return dtype
    if dtype is not None and dtype.is_floating_point:
        return torch.float32
    return torch.get_default_dtype()


def _describe(value: Any) -> str:
    """Short description of a value for an error message."""
    if isinstance(value, torch.Tensor):
        return f"tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    if isinstance(value, np.ndarray):
        return f"array of shape {value.shape} and dtype {value.dtype}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def to_tensor(value: Any, name: str, fn: str) -> torch.Tensor:
    """Convert a tensor / numpy array / sequence to a torch tensor without copying when possible."""
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise ValueError(f"{fn}: `{name}` must be a numeric array (got an object array)")
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, (Sequence, Iterable)) and not isinstance(value, (str, bytes)):
        try:
            arr = np.asarray(value)
        except ValueError as exc:  # ragged nested sequences
            raise ValueError(f"{fn}: `{name}` must be a rectangular array ({exc})") from None
        if arr.dtype == object or arr.dtype.kind in "USV":
            raise ValueError(f"{fn}: `{name}` must be numeric (got {_describe(value)})")
        return torch.from_numpy(np.ascontiguousarray(arr))
    if isinstance(value, (int, float, bool, np.number)):
        return torch.as_tensor(value)
    raise ValueError(
        f"{fn}: `{name}` must be a torch tensor or numpy array (got {type(value).__name__})"
    )


def check_finite(t: torch.Tensor, name: str, fn: str) -> torch.Tensor:
    """Reject NaN / inf.

    One ``aminmax`` pass (NaN propagates through it and +-inf shows up as a bound), which is
    ~20x cheaper than materialising ``isfinite(t)``; the exact count is taken only on failure.
    """
    if t.is_floating_point() and t.numel() > 0:
        lo, hi = torch.aminmax(t)
        if not bool(torch.isfinite(lo) & torch.isfinite(hi)):
            n_bad = int((~torch.isfinite(t)).sum())
            raise ValueError(f"{fn}: `{name}` must be finite (got {n_bad} NaN/inf values)")
    return t


def as_float_tensor(
    value: Any,
    name: str,
    fn: str,
    *,
    ndim: int | tuple[int, ...] | None = None,
    dtype: torch.dtype | None = torch.float64,
    allow_empty: bool = False,
    finite: bool = True,
) -> torch.Tensor:
    """A finite floating tensor of the given rank, cast to ``dtype`` (``None`` keeps it).

    ``finite=False`` skips the NaN/inf check for a caller that folds it into its own pass
    (``as_probs`` does, in its range check).
    """
    t = to_tensor(value, name, fn)
    if not (t.is_floating_point() or t.dtype in _INT_DTYPES):
        raise ValueError(f"{fn}: `{name}` must be a real-valued array (got dtype {t.dtype})")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else ndim
        if t.ndim not in allowed:
            want = " or ".join(f"{d}-D" for d in allowed)
            raise ValueError(f"{fn}: `{name}` must be {want} (got shape {tuple(t.shape)})")
    if not allow_empty and t.numel() == 0:
        raise ValueError(f"{fn}: `{name}` must not be empty (got shape {tuple(t.shape)})")
    if dtype is not None:
        t = t.to(dtype)
    elif not t.is_floating_point():
        t = t.to(torch.get_default_dtype())
    return check_finite(t, name, fn) if finite else t


_INT_DTYPES = {
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
}


def _sum_tolerance(dtype: torch.dtype) -> float:
    return _HALF_SUM_TOLERANCE if dtype in (torch.float16, torch.bfloat16) else SUM_TOLERANCE


def _row_sum_deviation(t: torch.Tensor, dim: int = -1) -> float:
    """``max |sum_k p_k - 1|`` over the rows of ``t``."""
    if dim in (-1, t.ndim - 1) and t.dtype in (torch.float32, torch.float64):
        # a BLAS matrix-vector product reads the rows ~2x faster than .sum(-1) for small K
        row_sums = t @ torch.ones(t.shape[-1], dtype=t.dtype, device=t.device)
    else:
        row_sums = t.sum(dim, dtype=torch.float64 if t.dtype == torch.float64 else torch.float32)
    s_lo, s_hi = (float(v) for v in torch.aminmax(row_sums))
    return max(s_hi - 1.0, 1.0 - s_lo)


def _check_simplex(
    t: torch.Tensor, name: str, fn: str, original_dtype: torch.dtype, dim: int = -1
) -> None:
    # One aminmax pass checks finiteness and range together: NaN propagates, so a NaN bound
    # fails `lo >= 0 and hi <= 1` and check_finite then gives the NaN/inf message.
    lo, hi = (float(v) for v in torch.aminmax(t))
    if not (lo >= 0.0 and hi <= 1.0):
        check_finite(t, name, fn)
        raise ValueError(
            f"{fn}: `{name}` must hold probabilities in [0, 1] (got values in [{lo:.4g}, {hi:.4g}])"
            "; if these are logits pass from_logits=True"
        )
    if t.shape[dim] < 2:
        return
    deviation = _row_sum_deviation(t, dim)
    if deviation > _sum_tolerance(original_dtype):
        raise ValueError(f"{fn}: `{name}` must have rows summing to 1 {_sum_advice(deviation)}")


#: Rows of values in [0, 1] this close to summing to 1 are probabilities off by rounding.
ROUNDING_DEVIATION = 0.01


def _sum_advice(deviation: float) -> str:
    """What a row-sum error says: renormalise rows that are nearly normalised (a softmax would be
    wrong for them); logits or unnormalised scores otherwise."""
    if deviation <= ROUNDING_DEVIATION:
        return (
            f"(max deviation {deviation:.3g}): these are probabilities off by rounding - "
            "renormalise them, e.g. probs / probs.sum(-1, keepdim=True) (from_logits=True "
            "would apply a softmax to probabilities, which is wrong)"
        )
    return (
        f"(max deviation {deviation:.3g}); these look like logits or unnormalised scores - pass "
        "from_logits=True if they are logits, else renormalise them"
    )


def _warn_if_probabilities(
    t: torch.Tensor, name: str, fn: str, original_dtype: torch.dtype, *, binary: bool = False
) -> None:
    """Warn when logits already lie on the simplex (softmax / sigmoid would be applied twice).

    Multi-class: every value in ``[0, 1]`` and every row summing to 1 within the tolerance of
    ``original_dtype``. Binary positive-class form: every value in ``[0, 1]``. ``t`` is finite.
    """
    if t.numel() == 0:
        return
    lo, hi = (float(v) for v in torch.aminmax(t))
    if not (lo >= 0.0 and hi <= 1.0):
        return  # the usual case: real logits have negative entries
    if binary:
        what = "every value lies in [0, 1]: these look like positive-class probabilities"
    else:
        if t.shape[-1] < 2 or _row_sum_deviation(t) > _sum_tolerance(original_dtype):
            return
        what = (
            "every row already lies on the probability simplex (values in [0, 1], rows "
            "summing to 1): these look like probabilities"
        )
    squash = "sigmoid" if binary else "softmax"
    warn_user(
        f"{fn}: `{name}` was given with from_logits=True but {what}, and the {squash} will "
        "be applied to them again; pass from_logits=False if they are probabilities"
    )


def _check_source_dtype(source_dtype: Any, fn: str) -> torch.dtype | None:
    if source_dtype is None:
        return None
    if not isinstance(source_dtype, torch.dtype) or not source_dtype.is_floating_point:
        raise ValueError(
            f"{fn}: `source_dtype` must be a floating torch.dtype or None (got {source_dtype!r})"
        )
    return source_dtype


def as_logits(
    value: Any,
    name: str,
    fn: str,
    *,
    ndim: int | tuple[int, ...] = 2,
    dtype=torch.float64,
    min_classes: int = 1,
    warn_on_simplex: bool = False,
) -> torch.Tensor:
    """Finite logits ``[..., K]`` with ``K >= min_classes``.

    ``warn_on_simplex=True`` warns (``UserWarning``) when every row already lies on the
    probability simplex, i.e. the caller most likely passed probabilities as logits.
    """
    t = to_tensor(value, name, fn)
    original_dtype = t.dtype if t.is_floating_point() else torch.float64
    t = as_float_tensor(t, name, fn, ndim=ndim, dtype=dtype)
    if t.shape[-1] < min_classes:
        raise ValueError(
            f"{fn}: `{name}` must have at least {min_classes} classes on its last axis "
            f"(got shape {tuple(t.shape)})"
        )
    if warn_on_simplex:
        _warn_if_probabilities(t, name, fn, original_dtype)
    return t


def as_probs(
    value: Any,
    name: str = "probs",
    fn: str = "bensemble",
    *,
    from_logits: bool = False,
    ndim: int | tuple[int, ...] = 2,
    min_classes: int = 2,
    dtype: torch.dtype | None = torch.float64,
    source_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Class probabilities ``[N, K]`` (or the rank in ``ndim``), as float64 by default.

    With ``from_logits=True`` the softmax over the last axis is applied after the finite check
    (and a ``UserWarning`` is issued when the rows already lie on the simplex).

    Args:
        source_dtype: the dtype the values had before an earlier layer converted them (e.g.
            float16 data already cast to float64); the row-sum tolerance is that of
            ``source_dtype`` (``1e-2`` for float16 / bfloat16) instead of the current dtype's.
    """
    from_logits = check_bool(from_logits, "from_logits", fn)
    source_dtype = _check_source_dtype(source_dtype, fn)
    if from_logits:
        t = as_logits(
            value, name, fn, ndim=ndim, dtype=dtype, min_classes=min_classes, warn_on_simplex=True
        )
        return torch.softmax(t, dim=-1)
    t = to_tensor(value, name, fn)
    original_dtype = t.dtype if t.is_floating_point() else torch.float64
    if source_dtype is not None:
        original_dtype = source_dtype
    # Without from_logits the finite check is folded into _check_simplex's single min/max pass.
    t = as_float_tensor(t, name, fn, ndim=ndim, dtype=dtype, finite=False)
    if t.shape[-1] < min_classes:
        raise ValueError(
            f"{fn}: `{name}` must have at least {min_classes} classes on its last axis "
            f"(got shape {tuple(t.shape)})"
        )
    _check_simplex(t, name, fn, original_dtype)
    return t
