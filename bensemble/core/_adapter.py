"""The :class:`MemberAdapter` interface shared by every member source."""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import nn

from bensemble.core._inputs import member_input_spec
from bensemble.core.types import MemberPredictions

__all__ = ["MemberAdapter", "OUTPUT_KINDS", "check_module"]

#: What a member returns: unnormalised ``"logits"`` or class ``"probs"``.
OUTPUT_KINDS = ("logits", "probs")


class MemberAdapter(nn.Module):
    """Adapts a prediction source to the uniform ``[M, B, *]`` interface.

    Subclasses implement :meth:`predict_all`, :attr:`size` and :attr:`member_modules`, and set
    :attr:`output_kind`. :meth:`predict_all` must leave the members as it found them (modes,
    grads, buffers) and raise a ``ValueError`` naming the member for a malformed output.
    """

    #: ``"logits"`` (softmax gives probabilities) or ``"probs"`` (already probabilities).
    output_kind: str = "logits"

    def predict_all(self, x: Any) -> MemberPredictions:
        """Raw outputs of every member, ``[M, B, *]``."""
        raise NotImplementedError

    def forward(self, x: Any) -> MemberPredictions:
        return self.predict_all(x)

    @property
    def size(self) -> int:
        """Number of members ``M``."""
        raise NotImplementedError

    @property
    def member_modules(self) -> list[nn.Module]:
        """The underlying networks (for KL terms, parameters, devices)."""
        raise NotImplementedError

    def input_spec(self) -> tuple[torch.dtype | None, torch.device | None]:
        """``(dtype, device)`` floating inputs are converted to (``None``: leave as given)."""
        return member_input_spec(self.member_modules)

    def sample_masks(self) -> contextlib.AbstractContextManager:
        """Context in which repeated calls see the same members (a no-op for fixed members)."""
        return contextlib.nullcontext(self)


def check_module(value: Any, name: str, fn: str) -> nn.Module:
    if not isinstance(value, nn.Module):
        raise ValueError(f"{fn}: `{name}` must be a torch.nn.Module (got {type(value).__name__})")
    return value
