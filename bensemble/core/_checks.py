"""Inference hygiene shared by the member adapters.

* :class:`inference_guard` - every module in eval mode under :func:`torch.no_grad`; every
  module's ``training`` flag and the grad mode restored exactly on exit, also when a member raises.
* :func:`member_output` / :func:`check_member_stack` - a member's output must be one tensor with
  a row per input row; the stacked outputs must be finite and, for ``output_kind="probs"``, rows
  on the probability simplex. Errors name the member index.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

__all__ = [
    "inference_guard",
    "member_output",
    "check_member_stack",
    "input_rows",
    "all_modules",
    "set_training",
]

# Row sums of probabilities may differ from 1 by this much (float rounding of a softmax or of a
# normalisation over K classes); float16 / bfloat16 members get the looser bound.
_SUM_TOL = {torch.float64: 1e-6, torch.float32: 1e-4}
_SUM_TOL_LOW = 1e-2


def all_modules(roots: Iterable[nn.Module]) -> list[nn.Module]:
    """Every module under ``roots``, each once (faster than ``named_modules``: no names)."""
    seen: set[int] = set()
    out: list[nn.Module] = []
    stack = list(roots)
    while stack:
        m = stack.pop()
        key = id(m)
        if m is None or key in seen:
            continue
        seen.add(key)
        out.append(m)
        children = m._modules
        if children:
            stack.extend(children.values())
    return out


def set_training(module: nn.Module, flag: bool) -> None:
    """``module.training = flag`` without ``nn.Module.__setattr__``'s checks (same effect)."""
    object.__setattr__(module, "training", flag)


class inference_guard:  # noqa: N801 - used like torch.no_grad
    """Eval mode and no grad for ``modules`` (and their children); exact restore on exit."""

    def __init__(self, modules: Iterable[nn.Module]) -> None:
        self.modules = all_modules(modules)
        self._flags: list[bool] = []
        self._grad = True

    def __enter__(self) -> inference_guard:
        self._grad = torch.is_grad_enabled()
        self._flags = [m.training for m in self.modules]
        torch.set_grad_enabled(False)
        for m, flag in zip(self.modules, self._flags):
            if flag:
                set_training(m, False)
        return self

    def __exit__(self, *exc: object) -> None:
        for m, flag in zip(self.modules, self._flags):
            if m.training is not flag:
                set_training(m, flag)
        torch.set_grad_enabled(self._grad)


def input_rows(x: Any) -> int | None:
    """Rows of a batched tensor input (``x.ndim >= 2``), else ``None`` (no row check)."""
    if isinstance(x, torch.Tensor) and x.ndim >= 2:
        return int(x.shape[0])
    return None


def member_output(out: Any, index: int, rows: int | None, fn: str) -> torch.Tensor:
    """``out`` if it is one tensor with ``rows`` rows; a ValueError naming member ``index``."""
    if not isinstance(out, torch.Tensor):
        kinds = ((tuple, "a tuple"), (dict, "a dict"), (list, "a list"))
        what = next((name for t, name in kinds if isinstance(out, t)), type(out).__name__)
        raise ValueError(
            f"{fn}: member {index} must return one tensor of outputs [B, K] (got {what}; "
            "wrap the model so that it returns the logits or probabilities alone)"
        )
    if rows is not None and (out.ndim == 0 or out.shape[0] != rows):
        raise ValueError(
            f"{fn}: member {index} must return one row per input row (got shape "
            f"{tuple(out.shape)} for {rows} input rows)"
        )
    return out


def check_member_stack(preds: torch.Tensor, output_kind: str, fn: str) -> torch.Tensor:
    """Stacked member outputs ``[M, B, *]`` must be finite (and on the simplex for probs).

    Tensors on the ``"meta"`` device carry shapes but no values: they pass unchecked.
    """
    if not preds.is_floating_point() or preds.device.type == "meta":
        return preds
    # one reduction: a NaN or infinity makes the sum non-finite (an overflowing sum of finite
    # values only sends us to the exact check below)
    if not math.isfinite(float(preds.sum())) and not bool(torch.isfinite(preds).all()):
        finite = torch.isfinite(preds)
        bad = int((~finite).reshape(len(preds), -1).any(1).nonzero()[0, 0])
        raise ValueError(
            f"{fn}: member {bad} must return finite values (got NaN or infinity in "
            f"{int((~finite[bad]).sum())} entries)"
        )
    if output_kind == "probs" and preds.ndim >= 3:
        tol = _SUM_TOL.get(preds.dtype, _SUM_TOL_LOW)
        negative = (preds < 0).reshape(len(preds), -1).any(1)
        off = ((preds.sum(-1) - 1.0).abs() > tol).reshape(len(preds), -1).any(1)
        bad_members = (negative | off).nonzero()
        if len(bad_members):
            bad = int(bad_members[0, 0])
            deviation = float((preds[bad].sum(-1) - 1.0).abs().max())
            raise ValueError(
                f"{fn}: member {bad} must return probabilities (rows >= 0 that sum to 1, as "
                f"output_kind='probs' says; got min {float(preds[bad].min()):.3g}, max row-sum "
                f"deviation {deviation:.3g}); members returning logits need output_kind='logits'"
            )
    return preds
