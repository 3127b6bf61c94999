"""Streaming member-level metrics: uncertainty-decomposition means and the EECE.

Both are :class:`~bensemble.metrics._state.MergeableState` meters (float64 sums, merge by
addition; see :mod:`bensemble.metrics.streaming`).

**EECE in a streaming or distributed evaluation: the two-phase protocol.** K-means bins are not
additive (the centroids depend on every point), so the EECE streams only once its bins are fixed:

1. fit the centroids on a sample - one rank, or a calibration split - with
   :func:`bensemble.metrics.fit_bins` (one ``[M, H]`` set per class for "classwise", fitted on
   ``member_probs[:, :, k].T``);
2. broadcast them (``torch.distributed.broadcast``) so every rank holds the same centroids;
3. accumulate an :class:`EECEMeter` built on those centroids over any batches, shards or ranks,
   merge (or :func:`bensemble.integrations.sync_`), and compute.

The result equals the one-shot
``expected_epistemic_calibration_error(..., binning="kmeans_fit", centroids=...)`` on all the data.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from bensemble._validation import (
    as_float_tensor,
    as_labels,
    as_member_stack,
    check_bool,
    check_option,
    check_positive_int,
)
from bensemble.metrics._kmeans import _assign
from bensemble.metrics._state import _F64, MergeableState
from bensemble.metrics.epistemic import _eece_compute, _eece_update, _member_variance
from bensemble.uncertainty.decomposition import _entropy

__all__ = ["EECEMeter", "UncertaintyMeter"]

MULTICLASS = ("classwise", "top_label")
# Padding for classes with fewer centroids: so far from [0, 1]^H that no point is assigned to it.
_FAR = 1e6


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

    def _empty_state(self) -> dict[str, torch.Tensor]:
        return {
            k: torch.zeros((), dtype=_F64) for k in ("total", "aleatoric", "epistemic", "count")
        }

    def _stats(self, member_probs: Any) -> dict[str, torch.Tensor]:
        fn = f"{self._fn}.update"
        p = as_member_stack(
            member_probs, "member_probs", fn, binary=self.binary, from_logits=self.from_logits
        )
        if self.binary:
            p = torch.stack([1.0 - p, p], dim=-1)
        total = _entropy(p.mean(dim=0))
        aleatoric = _entropy(p).mean(dim=0)
        epistemic = (total - aleatoric).clamp_min(0.0)
        n = torch.tensor(float(p.shape[1]), dtype=_F64, device=p.device)
        return {
            "total": total.sum(),
            "aleatoric": aleatoric.sum(),
            "epistemic": epistemic.sum(),
            "count": n,
        }

    def _value(self, state: dict[str, torch.Tensor]) -> dict[str, float]:
        n = state["count"]
        return {k: float(state[k] / n) for k in ("total", "aleatoric", "epistemic")}

    def update(self, member_probs: Any) -> UncertaintyMeter:
        """Add a batch of member predictions ``[M, B, K]`` (``[M, B]`` with ``binary=True``)."""
        return super().update(member_probs)


def _as_centroids(centroids: Any, fn: str) -> torch.Tensor:
    """``[G, S, H]`` float64: one ``[M, H]`` set (G = 1), ``[K, M, H]``, or a list of ``[M_k, H]``
    sets padded with far-away centroids to the largest ``M_k``."""
    if isinstance(centroids, Sequence) and not isinstance(centroids, (str, bytes)):
        sets = [as_float_tensor(c, f"centroids[{k}]", fn, ndim=2) for k, c in enumerate(centroids)]
        if not sets:
            raise ValueError(f"{fn}: `centroids` must hold at least one centroid set (got none)")
        widths = {c.shape[1] for c in sets}
        if len(widths) != 1:
            raise ValueError(
                f"{fn}: `centroids` sets must share one width H (got {sorted(widths)})"
            )
        size = max(c.shape[0] for c in sets)
        out = torch.full((len(sets), size, widths.pop()), _FAR, dtype=_F64)
        for k, c in enumerate(sets):
            out[k, : c.shape[0]] = c.cpu()
        return out
    t = as_float_tensor(centroids, "centroids", fn, ndim=(2, 3))
    return t[None] if t.ndim == 2 else t


class EECEMeter(MergeableState):
    """Streaming EECE with fixed K-means bins (phase 2 of the protocol in the module docstring).

    State per bin (per class for "classwise"): count, ``sum y``, ``sum EU`` and ``sum_h p_h``
    (``[G * S]`` and ``[G * S, H]`` float64); the value comes from the same kernel pair
    (``_eece_update`` / ``_eece_compute``) as
    :func:`~bensemble.metrics.expected_epistemic_calibration_error`.

    Args:
        centroids: fitted centroids: ``[M, H]`` (binary / top-label, or shared by all classes),
            ``[K, M, H]`` or a list of ``K`` ``[M_k, H]`` sets for "classwise".
        multiclass: ``"classwise"`` or ``"top_label"`` (ignored with ``binary=True``).
        num_classes: ``K``, needed only for one ``[M, H]`` set shared by every class.
        binary: batches are ``[H, B]`` positive-class member probabilities.

    Example:
        >>> p = torch.tensor([[0.2, 0.2, 0.9, 0.9], [0.4, 0.4, 0.7, 0.7]])
        >>> m = EECEMeter(torch.tensor([[0.2, 0.4], [0.9, 0.7]]), binary=True)
        >>> _ = m.update(p[:, :2], [0, 1]).update(p[:, 2:], [1, 1])
        >>> round(m.compute(), 4)
        0.04
    """

    _fn = "EECEMeter"

    def __init__(
        self,
        centroids: Any,
        multiclass: str = "classwise",
        num_classes: int | None = None,
        *,
        binary: bool = False,
    ) -> None:
        fn = self._fn
        self.binary = check_bool(binary, "binary", fn)
        self.multiclass = check_option(multiclass, "multiclass", MULTICLASS, fn)
        self.centroids = _as_centroids(centroids, fn)
        if self._classwise and self.centroids.shape[0] == 1:
            if num_classes is None:
                raise ValueError(
                    f"{fn}: `num_classes` must be given when one [M, H] centroid set is shared "
                    "by every class with multiclass='classwise' (got None)"
                )
            k = check_positive_int(num_classes, "num_classes", fn, minimum=2)
            self.centroids = self.centroids.expand(k, -1, -1).contiguous()
        if (binary or multiclass == "top_label") and self.centroids.shape[0] != 1:
            raise ValueError(
                f"{fn}: `centroids` must be one [M, H] set for binary / top-label "
                f"(got shape {list(self.centroids.shape)})"
            )
        self.n_members = int(self.centroids.shape[2])
        self._init_state()

    @property
    def _classwise(self) -> bool:
        return not self.binary and self.multiclass == "classwise"

    def _settings(self) -> dict[str, Any]:
        return {"multiclass": self.multiclass, "binary": self.binary, "centroids": self.centroids}

    def _slots(self) -> tuple[int, int]:
        return self.centroids.shape[0], self.centroids.shape[1]

    def _empty_state(self) -> dict[str, torch.Tensor]:
        g, s = self._slots()
        zeros = torch.zeros(g * s, dtype=_F64)
        return {
            "counts": zeros,
            "sum_y": zeros.clone(),
            "sum_eu": zeros.clone(),
            "sum_p": torch.zeros(g * s, self.n_members, dtype=_F64),
        }

    def _count(self, state: dict[str, torch.Tensor]) -> float:
        return float(state["counts"][: self._slots()[1]].sum())

    def _stats(self, member_probs: Any, labels: Any, eu: Any = None) -> dict[str, torch.Tensor]:
        fn = f"{self._fn}.update"
        p = as_member_stack(member_probs, "member_probs", fn, binary=self.binary)
        h, n = p.shape[0], p.shape[1]
        if h != self.n_members:
            raise ValueError(
                f"{fn}: `member_probs` must have {self.n_members} members, one per centroid "
                f"column (got {h})"
            )
        n_classes = 2 if self.binary else p.shape[2]
        y = as_labels(labels, "labels", fn, n=n, num_classes=n_classes, device=p.device)
        if self._classwise:
            groups = n_classes
            if self.centroids.shape[0] != groups:
                raise ValueError(
                    f"{fn}: `member_probs` must have {self.centroids.shape[0]} classes, one per "
                    f"centroid set (got {groups})"
                )
            cols = p.permute(0, 2, 1).reshape(h, groups * n)
            outcome = (y[None, :] == torch.arange(groups, device=p.device)[:, None]).reshape(-1)
        else:
            groups = 1
            if self.binary:
                cols, outcome = p, y == 1
            else:
                top = p.mean(dim=0).argmax(dim=1)
                cols = p.gather(2, top[None, :, None].expand(h, n, 1)).squeeze(2)
                outcome = y == top
        if eu is None:
            eu_rows = _member_variance(cols)
        else:
            shape = [n, groups] if self._classwise else [n]
            eu_t = as_float_tensor(eu, "eu", fn, ndim=len(shape)).to(p.device)
            if list(eu_t.shape) != shape or float(eu_t.min()) < 0:
                raise ValueError(
                    f"{fn}: `eu` must be non-negative with shape {shape} (got shape "
                    f"{list(eu_t.shape)}, minimum {float(eu_t.min()):.4g})"
                )
            eu_rows = eu_t.T.reshape(-1) if self._classwise else eu_t
        slots = self.centroids.shape[1]
        centroids = self.centroids.to(p.device)
        ids = torch.cat(
            [
                _assign(cols[:, k * n : (k + 1) * n].T, centroids[k])[0] + k * slots
                for k in range(groups)
            ]
        )
        counts, sum_y, sum_eu, sum_p = _eece_update(
            cols, outcome.to(_F64), eu_rows, ids, groups * slots
        )
        return {"counts": counts, "sum_y": sum_y, "sum_eu": sum_eu, "sum_p": sum_p}

    def _value(self, state: dict[str, torch.Tensor]) -> float:
        g, s = self._slots()
        stats = _eece_compute(state["counts"], state["sum_y"], state["sum_eu"], state["sum_p"])
        weighted = stats["weighted"].view(g, s).sum(dim=1)
        per_class = weighted / state["counts"].view(g, s).sum(dim=1)
        return float(per_class.mean())

    def update(self, member_probs: Any, labels: Any, eu: Any = None) -> EECEMeter:
        """Add a batch ``member_probs [H, B, K]`` (``[H, B]`` with ``binary=True``), ``labels
        [B]`` and optionally the reported epistemic uncertainty ``eu`` (``[B, K]`` classwise,
        else ``[B]``; default the member variance); returns ``self``."""
        return super().update(member_probs, labels, eu)
