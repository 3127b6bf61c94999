"""Checks of member stacks ``[M, N, K]``, labels, confidences and sample counts.

Re-exported by :mod:`bensemble._validation` (import them from there); the conventions are in
that module's docstring.
"""

from __future__ import annotations

from typing import Any

import torch

from bensemble._scalar_checks import check_bool
from bensemble._validation_tensors import (
    _warn_if_probabilities,
    as_float_tensor,
    as_probs,
    check_finite,
    to_tensor,
)

__all__ = [
    "as_binary",
    "as_binary_member_probs",
    "as_confidences",
    "as_labels",
    "as_member_probs",
    "as_member_stack",
    "check_same_length",
]


def as_member_probs(
    value: Any,
    name: str = "member_probs",
    fn: str = "bensemble",
    *,
    from_logits: bool = False,
    dtype: torch.dtype | None = torch.float64,
    source_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Member probabilities ``[M, N, K]``."""
    return as_probs(
        value,
        name,
        fn,
        from_logits=from_logits,
        ndim=3,
        dtype=dtype,
        source_dtype=source_dtype,
    )


def as_member_stack(
    value: Any,
    name: str = "member_probs",
    fn: str = "bensemble",
    *,
    binary: bool = False,
    from_logits: bool = False,
    dtype: torch.dtype | None = torch.float64,
    source_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Member predictions under the library's one shape rule; never guesses from a 2-D shape.

    * ``binary=False`` (default): ``value`` must be ``[M, N, K]`` member probabilities (logits
      with ``from_logits=True``, softmax over ``K``); returned as ``[M, N, K]``. A 2-D array is
      an error whose message explains the two things it could have been: a single model's
      ``[N, K]`` probabilities (not member predictions; add a member axis, ``probs[None]``) or
      binary positive-class members ``[M, N]`` (pass ``binary=True``).
    * ``binary=True``: ``value`` must be ``[M, N]``, the probability of the positive class per
      member (logits with ``from_logits=True``, sigmoid); returned as ``[M, N]`` in ``[0, 1]``.
      A 3-D array is an error.

    Tensors, numpy arrays and nested lists holding the same data give the same tensor.
    """
    binary = check_bool(binary, "binary", fn)
    from_logits = check_bool(from_logits, "from_logits", fn)
    t = to_tensor(value, name, fn)
    shape = tuple(t.shape)
    if binary:
        if t.ndim != 2:
            raise ValueError(
                f"{fn}: `{name}` must be 2-D [M, N] positive-class probabilities per member "
                f"with binary=True (got shape {shape}); pass [M, N, K] member predictions "
                "without binary=True"
            )
        original_dtype = t.dtype if t.is_floating_point() else torch.float64
        p = as_float_tensor(t, name, fn, ndim=2, dtype=dtype)
        if from_logits:
            _warn_if_probabilities(p, name, fn, original_dtype, binary=True)
            return torch.sigmoid(p)
        lo, hi = (float(v) for v in torch.aminmax(p))
        if lo < 0.0 or hi > 1.0:
            raise ValueError(
                f"{fn}: `{name}` must hold probabilities in [0, 1] (got values in "
                f"[{lo:.4g}, {hi:.4g}]); if these are logits pass from_logits=True"
            )
        return p
    if t.ndim == 2:
        raise ValueError(
            f"{fn}: `{name}` must be member predictions [M, N, K] (got shape {shape}); a single "
            "model's [N, K] probabilities are not member predictions - add a member axis "
            "(probs[None]) - and binary positive-class members [M, N] need binary=True"
        )
    if t.ndim != 3:
        raise ValueError(
            f"{fn}: `{name}` must be member predictions [M, N, K] (or [M, N] with binary=True) "
            f"(got shape {shape})"
        )
    return as_probs(
        t, name, fn, from_logits=from_logits, ndim=3, dtype=dtype, source_dtype=source_dtype
    )


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
