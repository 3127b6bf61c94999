"""Input checks shared by the Laplace approximations (K-FAC and last layer).

* :func:`infer_likelihood` reads ``"classification"`` or ``"regression"`` off the targets, or
  says which ``likelihood=`` to pass.
* :func:`check_finite_weights` refuses a model holding NaN/inf parameters.
* :func:`check_curvature_fits` refuses a curvature whose arrays could not fit in this machine's
  memory, before anything is allocated.
* :func:`cholesky_or_raise` turns a failed Cholesky factorisation into a message with the remedy.
* :func:`keep_state_on_error` restores an object's attributes when a fit fails half-way.
* :func:`check_seed_and_generator` / :func:`call_generator`: the random source of a call.

Every failure is a ``ValueError`` whose message names the argument at fault.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch
from torch import nn

from bensemble._validation import check_generator

__all__ = [
    "LIKELIHOODS",
    "infer_likelihood",
    "check_targets",
    "class_labels",
    "check_finite_weights",
    "check_finite_outputs",
    "machine_memory_bytes",
    "check_curvature_fits",
    "check_allocation",
    "cholesky_or_raise",
    "check_seed_and_generator",
    "call_generator",
    "keep_state_on_error",
]

#: The likelihoods a Laplace approximation may be told (``None``: read them off the targets).
LIKELIHOODS = ("classification", "regression")

_CLASSIFICATION_HINT = "integer class labels [N] for logits [N, K >= 2]"
_REGRESSION_HINT = "one real-valued target per model output"


def _is_integer(t: torch.Tensor) -> bool:
    return not (t.is_floating_point() or t.is_complex() or t.dtype == torch.bool)


def infer_likelihood(y: torch.Tensor, out: torch.Tensor, fn: str) -> str:
    """``"classification"`` for integer labels ``[B]`` with logits ``[B, K >= 2]``,
    ``"regression"`` for floating targets with one value per output; else a ``ValueError``
    naming both values of ``likelihood``."""
    width = out.shape[1] if out.ndim == 2 else 1
    if _is_integer(y) and y.ndim == 1 and out.ndim == 2 and width >= 2:
        return "classification"
    if y.is_floating_point() and y.numel() == out.numel() and y.shape[:1] == out.shape[:1]:
        return "regression"
    raise ValueError(
        f"{fn}: `likelihood` could not be inferred from the targets (got {y.dtype} targets of "
        f"shape {tuple(y.shape)} for model outputs of shape {tuple(out.shape)}); pass "
        f"likelihood='classification' ({_CLASSIFICATION_HINT}) or likelihood='regression' "
        f"({_REGRESSION_HINT})"
    )


def check_targets(y: torch.Tensor, out: torch.Tensor, likelihood: str, fn: str) -> torch.Tensor:
    """The targets of one batch, checked against the model outputs ``out [B, K]``.

    Classification: int64 labels ``[B]`` in ``[0, K)``. Regression: finite float64 ``[B, K]``.
    A mismatch says which ``likelihood`` the targets look like.
    """
    n, width = out.shape
    if likelihood == "classification":
        if not _is_integer(y):
            hint = (
                "; real-valued targets need likelihood='regression'"
                if y.is_floating_point()
                else ""
            )
            raise ValueError(
                f"{fn}: `y` must be integer class labels for likelihood='classification' "
                f"(got dtype {y.dtype}){hint}"
            )
        if y.ndim != 1 or y.shape[0] != n:
            raise ValueError(
                f"{fn}: `y` must be one class label per row [{n}] (got shape {tuple(y.shape)})"
            )
        labels = y.to(device=out.device, dtype=torch.int64)
        lo, hi = (int(v) for v in torch.aminmax(labels))
        if lo < 0 or hi >= width:
            raise ValueError(
                f"{fn}: `y` must lie in [0, {width - 1}], one label per logit "
                f"(got values in [{lo}, {hi}])"
            )
        return labels
    if y.numel() != out.numel() or y.shape[:1] != out.shape[:1]:
        hint = ""
        if _is_integer(y) and y.ndim == 1 and width >= 2:
            hint = "; these look like class labels: pass likelihood='classification'"
        raise ValueError(
            f"{fn}: `y` must have one target per model output {tuple(out.shape)} for "
            f"likelihood='regression' (got shape {tuple(y.shape)}){hint}"
        )
    target = y.to(device=out.device, dtype=torch.float64).reshape(n, width)
    if not bool(torch.isfinite(target).all()):
        bad = int((~torch.isfinite(target)).sum())
        raise ValueError(f"{fn}: `y` must be finite (got {bad} NaN/inf values)")
    return target


def class_labels(y: torch.Tensor, logits: torch.Tensor, likelihood: str | None, fn: str):
    """Labels ``[B]`` for a classification-only approximation (``likelihood`` ``None`` or
    ``"classification"``); real-valued targets point to the K-FAC approximation."""
    if likelihood is None and infer_likelihood(y, logits, fn) == "regression":
        raise ValueError(
            f"{fn}: `y` must be integer class labels (got {y.dtype} targets): LastLayerLaplace "
            "supports likelihood='classification' only; for likelihood='regression' use "
            "LaplaceApproximation"
        )
    return check_targets(y, logits, "classification", fn)


def check_finite_weights(model: nn.Module, fn: str) -> None:
    """Every floating parameter and buffer of ``model`` is finite."""
    named = list(model.named_parameters()) + list(model.named_buffers())
    for name, tensor in named:
        if tensor.is_floating_point() and tensor.device.type != "meta":
            if not bool(torch.isfinite(tensor).all()):
                bad = int((~torch.isfinite(tensor)).sum())
                raise ValueError(
                    f"{fn}: `model` must have finite weights (got {bad} NaN/inf values in `{name}`)"
                )


def check_finite_outputs(out: torch.Tensor, name: str, fn: str) -> None:
    """The model's outputs on the batches of ``name`` are finite (overflow, NaN inputs...)."""
    if not bool(torch.isfinite(out).all()):
        bad = int((~torch.isfinite(out)).sum())
        raise ValueError(
            f"{fn}: the model's outputs on `{name}` must be finite (got {bad} NaN/inf values); "
            "check the inputs' scale and the weights"
        )


def machine_memory_bytes() -> int:
    """Physical memory of this machine in bytes (``os.sysconf``; 1 TiB when unknown).

    Local to the Laplace modules until the foundation's ``machine_memory_bytes`` (branch
    wt-modules, ``bensemble._scalar_checks``) is merged; tests monkeypatch this function.
    """
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):  # pragma: no cover - non-POSIX
        return 2**40


def _size(n_bytes: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB", "TB", "PB"):
        if n_bytes < 1024 or unit == "PB":
            return f"{n_bytes:.0f} {unit}" if unit == "bytes" else f"{n_bytes:.1f} {unit}"
        n_bytes /= 1024
    raise AssertionError  # pragma: no cover


def check_curvature_fits(fn: str, what: str, n_values: int, remedy: str) -> None:
    """Refuse ``n_values`` float64 numbers of curvature that exceed this machine's memory.

    ``what`` names the part of ``model`` at fault (e.g. "layer `fc`'s Kronecker factors");
    ``remedy`` says what to do instead.
    """
    needed = 8 * int(n_values)
    memory = machine_memory_bytes()
    if needed > memory:
        raise ValueError(
            f"{fn}: `model` must have curvature that fits in memory: {what} need {_size(needed)} "
            f"({n_values:,} float64 values), more than this machine's {_size(memory)}; {remedy}"
        )


def check_allocation(fn: str, name: str, count: int, *, per_count: int = 1, itemsize: int = 8):
    """Refuse a count whose ``count * per_count`` values of ``itemsize`` bytes exceed memory.

    Same contract as the foundation's ``check_allocation`` (branch wt-modules), local until it
    is merged: the message states the largest count that fits. Returns ``int(count)``.
    """
    count = int(count)
    unit = max(int(per_count), 0) * max(int(itemsize), 1)
    memory = machine_memory_bytes()
    if unit == 0 or count * unit <= memory:
        return count
    limit = memory // unit
    if limit < 1:
        raise ValueError(
            f"{fn}: `{name}` cannot be allocated: even one unit needs {_size(unit)}, more than "
            f"this machine's {_size(memory)} (got {count})"
        )
    raise ValueError(
        f"{fn}: `{name}` must be <= {limit:,} so that its {count * per_count:,} values of "
        f"{itemsize} bytes fit in this machine's memory ({_size(memory)}; "
        f"{_size(count * unit)} needed) (got {count})"
    )


def cholesky_or_raise(precision: torch.Tensor, prior_precision: float, fn: str) -> torch.Tensor:
    """Lower Cholesky factor of a posterior precision, or a ``ValueError`` with the remedy."""
    chol, info = torch.linalg.cholesky_ex(precision)
    if int(info) != 0 or not bool(torch.isfinite(chol).all()):
        raise ValueError(
            f"{fn}: `prior_precision` must be large enough for the posterior precision "
            f"(curvature + prior_precision * I) to be numerically positive definite (got "
            f"prior_precision={prior_precision:.4g}; the Cholesky factorisation failed at "
            f"pivot {int(info)}); raise prior_precision or the lower end of "
            "prior_precision_bounds"
        )
    return chol


def check_seed_and_generator(generator, seed, fn: str) -> tuple[torch.Generator | None, int | None]:
    """``(generator, seed)`` of a constructor: a stream, or a seed (default 0) for every call.

    ``seed`` is validated as an integer in ``[0, 2**64)`` or ``None``; a non-default ``seed``
    together with a ``generator`` is an error.
    """
    generator = check_generator(generator, None, fn)
    check_generator(None, seed, fn)  # validates the seed
    if generator is not None and seed not in (0, None):
        raise ValueError(f"{fn}: pass either `generator` or `seed`, not both (got both)")
    return generator, (None if seed is None else int(seed))


def call_generator(
    generator, instance_generator: torch.Generator | None, seed: int | None, fn: str
) -> torch.Generator | None:
    """The random source of one call.

    ``generator`` when given; else the instance's ``generator`` (a stream that advances); else
    a generator seeded with ``seed``, fresh for each call, so that identical calls agree; else
    (``seed=None``) torch's global random state.
    """
    generator = check_generator(generator, None, fn)
    if generator is not None:
        return generator
    if instance_generator is not None:
        return instance_generator
    if seed is not None:
        return torch.Generator().manual_seed(seed)
    return None


@contextlib.contextmanager
def keep_state_on_error(obj) -> Iterator[None]:
    """Inside the block ``obj`` may be refitted; if an error escapes, every attribute it had
    before comes back (attributes are reassigned by a fit, never mutated in place)."""
    previous = dict(vars(obj))
    try:
        yield
    except BaseException:
        vars(obj).clear()
        vars(obj).update(previous)
        raise
