"""Streaming means of the entropy decomposition of member predictions (:class:`UncertaintyMeter`;
split from :mod:`bensemble.metrics.streaming_epistemic`, which re-exports it)."""

from __future__ import annotations

from typing import Any

import torch

from bensemble._validation import as_member_stack, check_bool
from bensemble.metrics._state import _F64, MergeableState
from bensemble.metrics._state_checks import (
    SLACK,
    check_non_negative,
    check_whole,
    check_zero_where_empty,
)
from bensemble.uncertainty.decomposition import _entropy

__all__ = ["UncertaintyMeter"]


class UncertaintyMeter(MergeableState):
    """Means over samples of the entropy decomposition (nats) of member predictions.

    ``update(member_probs)`` adds ``[M, B, K]`` members (``[M, B]`` with ``binary=True``);
    ``compute()`` returns ``{"total", "aleatoric", "epistemic"}``, the means of
    :func:`~bensemble.uncertainty.decompose_classification_uncertainty`'s per-sample values.

    Example:
        >>> p = torch.tensor([[[.99, .01]], [[.02, .98]], [[.97, .03]]])
        >>> {k: round(v, 4) for k, v in UncertaintyMeter().update(p).compute().items()}
        {'total': 0.641, 'aleatoric': 0.0963, 'epistemic': 0.5448}
    """

    _fn = "UncertaintyMeter"

    def __init__(self, *, binary: bool = False, from_logits: bool = False) -> None:
        self.binary = check_bool(binary, "binary", self._fn)
        self.from_logits = check_bool(from_logits, "from_logits", self._fn)
        self._init_state()

    def _settings(self) -> dict[str, Any]:
        return {"binary": self.binary}

    def _declared_seen(self) -> dict[str, int | None]:
        return {"num_classes": 2 if self.binary else None, "n_members": None}

    def _empty_state(self) -> dict[str, torch.Tensor]:
        return {
            k: torch.zeros((), dtype=_F64) for k in ("total", "aleatoric", "epistemic", "count")
        }

    def _stats(self, member_probs: Any) -> tuple[dict[str, torch.Tensor], dict]:
        fn = f"{self._fn}.update"
        p = as_member_stack(
            member_probs, "member_probs", fn, binary=self.binary, from_logits=self.from_logits
        )
        k = 2 if self.binary else int(p.shape[2])
        seen = self._seen_in(fn, "member_probs", num_classes=k, n_members=int(p.shape[0]))
        if self.binary:
            p = torch.stack([1.0 - p, p], dim=-1)
        total = _entropy(p.mean(dim=0))
        aleatoric = _entropy(p).mean(dim=0)
        epistemic = (total - aleatoric).clamp_min(0.0)
        n = torch.tensor(float(p.shape[1]), dtype=_F64, device=p.device)
        stats = {
            "total": total.sum(),
            "aleatoric": aleatoric.sum(),
            "epistemic": epistemic.sum(),
            "count": n,
        }
        return stats, seen

    def _check_sums(self, state: dict[str, torch.Tensor], where: str) -> None:
        count = state["count"]
        check_whole(count, where, "count")
        for key in ("total", "aleatoric", "epistemic"):
            check_non_negative(state[key], where, key)
            check_zero_where_empty(state[key], count, where, key)
        total, aleatoric, epistemic = (float(state[k]) for k in ("total", "aleatoric", "epistemic"))
        # per sample EU = max(TU - AU, 0), and TU >= AU up to rounding
        if abs(epistemic - (total - aleatoric)) > SLACK * (total + aleatoric + float(count)):
            raise ValueError(
                f"{where}['epistemic']` must equal total - aleatoric = {total - aleatoric:.6g} "
                f"(got {epistemic:.6g})"
            )

    def _value(self, state: dict[str, torch.Tensor]) -> dict[str, float]:
        n = state["count"]
        return {k: float(state[k] / n) for k in ("total", "aleatoric", "epistemic")}

    def update(self, member_probs: Any) -> UncertaintyMeter:
        """Add a batch of member predictions ``[M, B, K]`` (``[M, B]`` with ``binary=True``)."""
        return super().update(member_probs)
