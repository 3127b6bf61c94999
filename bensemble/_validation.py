"""Input checks shared by the whole library.

Every checker *returns the converted tensor* (or value) and raises :class:`ValueError`
with one message shape::

    "<function>: `<argument>` must <expectation> (got <what came>)"

Conventions
-----------
* Arrays may be torch tensors, numpy arrays or (nested) Python sequences; they come back as
  torch tensors on their original device (numpy/list inputs land on the CPU).
* Probabilities must be finite, lie in ``[0, 1]`` and, along the class axis, sum to 1 within
  :data:`SUM_TOLERANCE` (``1e-4``; ``1e-2`` for float16/bfloat16 inputs). A matrix whose rows
  do not sum to 1 is never guessed to be logits: the message suggests ``from_logits=True``.
* Labels must have an integer (or bool) dtype; a float array of labels is rejected even when its
  values are integral, because a float label array is nearly always a bug upstream.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch

__all__ = [
    "SUM_TOLERANCE",
    "to_tensor",
    "as_float_tensor",
    "as_probs",
    "as_member_probs",
    "as_binary_member_probs",
    "as_logits",
    "as_labels",
    "as_binary",
    "as_confidences",
    "check_n_bins",
    "check_option",
    "check_positive",
    "check_positive_int",
    "check_probability",
    "check_same_length",
    "check_finite",
    "check_generator",
]

#: Maximum allowed ``|sum_k p_k - 1|`` for a probability row (float32/float64 inputs).
SUM_TOLERANCE = 1e-4
_HALF_SUM_TOLERANCE = 1e-2


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
    if dim in (-1, t.ndim - 1) and t.dtype in (torch.float32, torch.float64):
        # a BLAS matrix-vector product reads the rows ~2x faster than .sum(-1) for small K
        row_sums = t @ torch.ones(t.shape[-1], dtype=t.dtype, device=t.device)
    else:
        row_sums = t.sum(dim)
    s_lo, s_hi = (float(v) for v in torch.aminmax(row_sums))
    deviation = max(s_hi - 1.0, 1.0 - s_lo)
    if deviation > _sum_tolerance(original_dtype):
        raise ValueError(
            f"{fn}: `{name}` must have rows summing to 1 (max deviation {deviation:.3g}); "
            "these look like logits or unnormalised scores - pass from_logits=True"
        )


def as_logits(
    value: Any, name: str, fn: str, *, ndim: int | tuple[int, ...] = 2, dtype=torch.float64
) -> torch.Tensor:
    """Finite logits ``[..., K]`` with ``K >= 1``."""
    t = as_float_tensor(value, name, fn, ndim=ndim, dtype=dtype)
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
) -> torch.Tensor:
    """Class probabilities ``[N, K]`` (or the rank in ``ndim``), as float64 by default.

    With ``from_logits=True`` the softmax over the last axis is applied after the finite check.
    """
    t = to_tensor(value, name, fn)
    original_dtype = t.dtype if t.is_floating_point() else torch.float64
    # Without from_logits the finite check is folded into _check_simplex's single min/max pass.
    t = as_float_tensor(t, name, fn, ndim=ndim, dtype=dtype, finite=from_logits)
    if t.shape[-1] < min_classes:
        raise ValueError(
            f"{fn}: `{name}` must have at least {min_classes} classes on its last axis "
            f"(got shape {tuple(t.shape)})"
        )
    if from_logits:
        return torch.softmax(t, dim=-1)
    _check_simplex(t, name, fn, original_dtype)
    return t


def as_member_probs(
    value: Any,
    name: str = "member_probs",
    fn: str = "bensemble",
    *,
    from_logits: bool = False,
    dtype: torch.dtype | None = torch.float64,
) -> torch.Tensor:
    """Member probabilities ``[M, N, K]``."""
    return as_probs(value, name, fn, from_logits=from_logits, ndim=3, dtype=dtype)


def as_binary_member_probs(
    value: Any, name: str = "member_probs", fn: str = "bensemble"
) -> torch.Tensor:
    """Member probabilities of the positive class ``[H, N]`` in ``[0, 1]`` (float64)."""
    t = as_float_tensor(value, name, fn, ndim=2)
    lo, hi = float(t.min()), float(t.max())
    if lo < 0.0 or hi > 1.0:
        raise ValueError(
            f"{fn}: `{name}` must hold probabilities in [0, 1] (got values in [{lo:.4g}, {hi:.4g}])"
        )
    return t


def as_labels(
    value: Any,
    name: str = "labels",
    fn: str = "bensemble",
    *,
    n: int | None = None,
    num_classes: int | None = None,
    device: torch.device | None = None,
) -> torch.Tensor:
    """Integer class labels ``[N]`` as int64, optionally checked against ``N`` and ``K``."""
    t = to_tensor(value, name, fn)
    if t.is_floating_point() or t.is_complex():
        raise ValueError(
            f"{fn}: `{name}` must have an integer dtype (got {t.dtype}); "
            "cast class indices with .long() / .astype(int)"
        )
    if t.ndim != 1:
        raise ValueError(f"{fn}: `{name}` must be 1-D [N] (got shape {tuple(t.shape)})")
    if t.numel() == 0:
        raise ValueError(f"{fn}: `{name}` must not be empty")
    if n is not None and t.shape[0] != n:
        raise ValueError(
            f"{fn}: `{name}` must have the same length as the predictions ({n}) (got {t.shape[0]})"
        )
    t = t.to(torch.int64)
    if num_classes is not None:
        lo, hi = (int(v) for v in torch.aminmax(t))  # one pass
        if lo < 0 or hi >= num_classes:
            raise ValueError(
                f"{fn}: `{name}` must lie in [0, {num_classes - 1}] (got values in [{lo}, {hi}])"
            )
    if device is not None:
        t = t.to(device)
    return t


def as_binary(
    value: Any, name: str, fn: str, *, n: int | None = None, dtype=torch.float64
) -> torch.Tensor:
    """A 1-D 0/1 vector (bool, int or float holding only 0 and 1), returned as ``dtype``."""
    t = to_tensor(value, name, fn)
    if t.ndim != 1:
        raise ValueError(f"{fn}: `{name}` must be 1-D [N] (got shape {tuple(t.shape)})")
    if t.numel() == 0:
        raise ValueError(f"{fn}: `{name}` must not be empty")
    if n is not None and t.shape[0] != n:
        raise ValueError(f"{fn}: `{name}` must have length {n} (got {t.shape[0]})")
    if t.is_floating_point():
        check_finite(t, name, fn)
    if not bool(((t == 0) | (t == 1)).all()):
        raise ValueError(f"{fn}: `{name}` must contain only 0 and 1 (got other values)")
    return t.to(dtype)


def as_confidences(value: Any, name: str, fn: str) -> torch.Tensor:
    """A 1-D float64 vector in ``[0, 1]``."""
    t = as_float_tensor(value, name, fn, ndim=1)
    lo, hi = float(t.min()), float(t.max())
    if lo < 0.0 or hi > 1.0:
        raise ValueError(f"{fn}: `{name}` must lie in [0, 1] (got values in [{lo:.4g}, {hi:.4g}])")
    return t


def check_same_length(fn: str, **arrays: torch.Tensor) -> int:
    """All arrays share their first dimension; returns it."""
    lengths = {k: int(v.shape[0]) for k, v in arrays.items()}
    if len(set(lengths.values())) > 1:
        parts = ", ".join(f"`{k}` has {v}" for k, v in lengths.items())
        raise ValueError(f"{fn}: inputs must have the same number of samples ({parts})")
    return next(iter(lengths.values()))


def check_positive_int(value: Any, name: str, fn: str, *, minimum: int = 1) -> int:
    """An ``int`` (not bool) ``>= minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{fn}: `{name}` must be an integer >= {minimum} (got {value!r})")
    return int(value)


def check_n_bins(n_bins: Any, fn: str, name: str = "n_bins") -> int:
    """``n_bins`` is a positive integer."""
    return check_positive_int(n_bins, name, fn, minimum=1)


def check_positive(value: Any, name: str, fn: str, *, allow_zero: bool = False) -> float:
    """A finite real number ``> 0`` (or ``>= 0``)."""
    ok = isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool)
    if ok:
        v = float(value)
        ok = np.isfinite(v) and (v >= 0 if allow_zero else v > 0)
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{fn}: `{name}` must be a finite number {bound} (got {value!r})")
    return float(value)


def check_probability(value: Any, name: str, fn: str, *, open_interval: bool = True) -> float:
    """A number in ``(0, 1)`` (or ``[0, 1]``)."""
    ok = isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool)
    v = float(value) if ok else float("nan")
    inside = (0.0 < v < 1.0) if open_interval else (0.0 <= v <= 1.0)
    if not ok or not inside:
        interval = "(0, 1)" if open_interval else "[0, 1]"
        raise ValueError(f"{fn}: `{name}` must lie in {interval} (got {value!r})")
    return v


def check_option(value: Any, name: str, options: Iterable[str], fn: str) -> str:
    """A string option from a fixed set; the error lists the valid values."""
    options = tuple(options)
    if value not in options:
        valid = ", ".join(repr(o) for o in options)
        raise ValueError(f"{fn}: `{name}` must be one of {valid} (got {value!r})")
    return value


def check_generator(
    generator: Any, seed: Any, fn: str, *, name: str = "generator"
) -> torch.Generator | None:
    """A ``torch.Generator`` from ``generator`` or ``seed`` (at most one of them), else ``None``.

    ``seed`` (a non-negative int) gives a fresh CPU generator seeded with it; ``None`` for both
    means "use torch's global random state".
    """
    if generator is not None and not isinstance(generator, torch.Generator):
        raise ValueError(
            f"{fn}: `{name}` must be a torch.Generator or None (got {type(generator).__name__})"
        )
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"{fn}: `seed` must be a non-negative integer or None (got {seed!r})")
        if generator is not None:
            raise ValueError(f"{fn}: pass either `{name}` or `seed`, not both (got both)")
        return torch.Generator().manual_seed(int(seed))
    return generator
