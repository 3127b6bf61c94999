"""Streaming member-level metrics: uncertainty-decomposition means and the EECE.

Both are :class:`~bensemble.metrics._state.MergeableState` meters (float64 sums, merge by
addition; see :mod:`bensemble.metrics.streaming`).

**EECE in a streaming or distributed evaluation: the two-phase protocol.** K-means bins are not
additive (the centroids depend on every point), so the EECE streams only once its bins are fixed:

1. fit the centroids on a sample - a calibration split, or the first batches - with
   :meth:`EECEMeter.from_sample` (:func:`bensemble.metrics.fit_bins` per class on
   ``member_probs[:, :, k].T`` for "classwise");
2. give every rank the same centroids: the same sample and seed on every rank (the fit is
   deterministic), or ``torch.distributed.broadcast`` of ``meter.centroids``;
3. accumulate the :class:`EECEMeter` over any batches, shards or ranks, merge (or
   :func:`bensemble.integrations.sync_`, which refuses ranks whose centroids differ), and
   compute.

The result equals the one-shot
``expected_epistemic_calibration_error(..., binning="kmeans_fit", centroids=...)`` on all the data.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from bensemble._validation import (
    MAX_BIN_SLOTS,
    as_float_tensor,
    as_labels,
    as_member_stack,
    check_bool,
    check_option,
    check_positive_int,
)
from bensemble.metrics._epistemic_checks import resolve_n_bins
from bensemble.metrics._kmeans import _assign, fit_bins
from bensemble.metrics._kmeans_batched import map_classes, single_threaded
from bensemble.metrics._state import _F64, MergeableState
from bensemble.metrics._state_checks import (
    SLACK,
    check_at_most,
    check_equal_totals,
    check_non_negative,
    check_whole,
    check_zero_where_empty,
)
from bensemble.metrics.epistemic import _eece_compute, _eece_update, _member_variance
from bensemble.uncertainty.decomposition import _entropy

__all__ = ["EECEMeter", "UncertaintyMeter"]

MULTICLASS = ("classwise", "top_label")
# Padding for classes with fewer centroids: so far from [0, 1]^H that no point is assigned to it.
_FAR = 1e6
#: Most float64 sums an EECE state holds (``K * M * (H + 3)``): 3 per MAX_BIN_SLOTS (384 MiB).
MAX_STATE_NUMBERS = 3 * MAX_BIN_SLOTS


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


def _check_state_size(groups: int, slots: int, members: int, fn: str, name: str) -> None:
    """An EECE state holds ``groups * slots * (members + 3)`` float64 sums; refuse more than
    ``3 * MAX_BIN_SLOTS`` (the classwise calibration meter's budget) before allocating."""
    size = groups * slots * (members + 3)
    if size <= MAX_STATE_NUMBERS:
        return
    if name == "num_classes":
        raise ValueError(
            f"{fn}: `num_classes` must be <= {MAX_STATE_NUMBERS // (slots * (members + 3))} "
            f"for one shared set of {slots} centroids of {members} members (the state holds "
            f"num_classes * centroids * (members + 3) <= {MAX_STATE_NUMBERS} sums) "
            f"(got {groups})"
        )
    raise ValueError(
        f"{fn}: `centroids` must make a state of at most {MAX_STATE_NUMBERS} sums (sets * "
        f"centroids * (members + 3)) (got {groups} x {slots} x ({members} + 3) = {size})"
    )


def _as_centroids(centroids: Any, fn: str) -> torch.Tensor:
    """``[G, S, H]`` float64: one ``[M, H]`` set (G = 1), ``[K, M, H]``, or a list of ``[M_k, H]``
    sets padded with far-away centroids to the largest ``M_k`` (sizes checked first)."""
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
        width = widths.pop()
        _check_state_size(len(sets), size, width, fn, "centroids")
        out = torch.full((len(sets), size, width), _FAR, dtype=_F64)
        for k, c in enumerate(sets):
            out[k, : c.shape[0]] = c.cpu()
        return out
    if centroids is None:
        raise ValueError(
            f"{fn}: `centroids` must be fitted K-means centroids (got None) - fit them on a "
            "sample with EECEMeter.from_sample(member_probs, n_bins) or "
            "bensemble.metrics.fit_bins(member_probs[:, :, k].T, n_bins) per class"
        )
    t = as_float_tensor(centroids, "centroids", fn, ndim=(2, 3))
    t = t[None] if t.ndim == 2 else t
    if 0 in t.shape:
        raise ValueError(f"{fn}: `centroids` must not be empty (got shape {list(t.shape)})")
    _check_state_size(t.shape[0], t.shape[1], t.shape[2], fn, "centroids")
    return t


class EECEMeter(MergeableState):
    """Streaming EECE with fixed K-means bins (phase 2 of the protocol in the module docstring).

    State per bin (per class for "classwise"): count, ``sum y``, ``sum EU`` and ``sum_h p_h``
    (``[G * S]`` and ``[G * S, H]`` float64); the value comes from the same kernel pair
    (``_eece_update`` / ``_eece_compute``) as
    :func:`~bensemble.metrics.expected_epistemic_calibration_error`.

    Args:
        centroids: fitted centroids: ``[M, H]`` (binary / top-label, or shared by all classes),
            ``[K, M, H]`` or a list of ``K`` ``[M_k, H]`` sets for "classwise" (from
            :meth:`from_sample` or :func:`~bensemble.metrics.fit_bins`). The state holds
            ``K * M * (H + 3)`` sums, at most :data:`MAX_STATE_NUMBERS`.
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
            _check_state_size(k, *self.centroids.shape[1:], fn, "num_classes")
            self.centroids = self.centroids.expand(k, -1, -1).contiguous()
        if (binary or multiclass == "top_label") and self.centroids.shape[0] != 1:
            raise ValueError(
                f"{fn}: `centroids` must be one [M, H] set for binary / top-label "
                f"(got shape {list(self.centroids.shape)})"
            )
        self.n_members = int(self.centroids.shape[2])
        self._init_state()

    @classmethod
    def from_sample(
        cls,
        member_probs: Any,
        n_bins: int | str = "auto",
        *,
        multiclass: str = "classwise",
        binary: bool = False,
        seed: int = 0,
    ) -> EECEMeter:
        """An empty meter whose K-means bins are fitted on a sample (phase 1 of the protocol).

        Fits :func:`~bensemble.metrics.fit_bins` (exact K-means, seeded, single-threaded) on
        the member vectors: per class ``member_probs[:, :, k].T`` ("classwise"), the members'
        top-class probabilities ("top_label"), ``member_probs.T`` (``binary=True``). Under
        ``torch.distributed``, call it on every rank with the same sample and seed, or fit on
        one rank and broadcast ``meter.centroids`` (ranks of other CPU kinds may round the fit
        differently); :func:`~bensemble.integrations.sync_` refuses ranks whose bins differ.

        Args:
            member_probs: ``[H, N, K]`` member probabilities (``[H, N]`` with ``binary=True``) of
                a sample - a calibration split, or the first batches.
            n_bins: bins per class, or ``"auto"`` (``auto_n_bins`` of the sample's ``N``).
            multiclass: ``"classwise"`` or ``"top_label"``.
            binary: positive-class member probabilities ``[H, N]``.
            seed: the K-means seed (fixed default: identical calls fit identical bins).

        Example:
            >>> g = torch.Generator().manual_seed(0)
            >>> sample = torch.softmax(torch.randn(4, 500, 3, generator=g), -1)
            >>> meter = EECEMeter.from_sample(sample, n_bins=8)
            >>> meter.centroids.shape  # [K, bins, members]
            torch.Size([3, 8, 4])
        """
        fn = f"{cls._fn}.from_sample"
        binary = check_bool(binary, "binary", fn)
        multiclass = check_option(multiclass, "multiclass", MULTICLASS, fn)
        p = as_member_stack(member_probs, "member_probs", fn, binary=binary)
        bins = resolve_n_bins(n_bins, int(p.shape[1]), fn)
        if binary or multiclass == "top_label":
            cols = p
            if not binary:
                top = p.mean(dim=0).argmax(dim=1)
                cols = p.gather(2, top[None, :, None].expand(p.shape[0], -1, 1)).squeeze(2)
            with single_threaded():  # the same bins whatever the thread count of each rank
                centroids = fit_bins(cols.T, bins, seed=seed)
            return cls(centroids, multiclass, binary=binary)
        sets = map_classes(lambda k: fit_bins(p[:, :, k].T, bins, seed=seed), int(p.shape[2]))
        return cls(sets, "classwise")

    @property
    def _classwise(self) -> bool:
        return not self.binary and self.multiclass == "classwise"

    def _settings(self) -> dict[str, Any]:
        return {"multiclass": self.multiclass, "binary": self.binary, "centroids": self.centroids}

    def _declared_seen(self) -> dict[str, int | None]:
        classes = 2 if self.binary else (self.centroids.shape[0] if self._classwise else None)
        return {"num_classes": classes, "n_members": self.n_members}

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

    def _check_sums(self, state: dict[str, torch.Tensor], where: str) -> None:
        counts = state["counts"]
        g, s = self._slots()
        check_whole(counts, where, "counts")
        padded = (self.centroids[:, :, 0] == _FAR).reshape(-1).to(counts.device)
        if bool((counts[padded] != 0).any()):  # a padding centroid is nearest to no point
            raise ValueError(f"{where}['counts']` must be 0 in the padding bins of smaller sets")
        check_whole(state["sum_y"], where, "sum_y")
        check_at_most(state["sum_y"], counts, where, "sum_y", "`counts`", exact=True)
        check_non_negative(state["sum_eu"], where, "sum_eu")
        check_zero_where_empty(state["sum_eu"], counts, where, "sum_eu")
        check_at_most(state["sum_p"], counts[:, None], where, "sum_p", "`counts`")
        if self._classwise:  # every sample once per class, and its label in exactly one class
            totals = counts.view(g, s).sum(dim=1)
            check_equal_totals(totals, where, "counts", "class")
            check_equal_totals(
                torch.stack([state["sum_y"].sum(), totals[0]]), where, "sum_y", "sample (its label)"
            )

    def _stats(
        self, member_probs: Any, labels: Any, eu: Any = None
    ) -> tuple[dict[str, torch.Tensor], dict]:
        fn = f"{self._fn}.update"
        p = as_member_stack(member_probs, "member_probs", fn, binary=self.binary)
        h, n = p.shape[0], p.shape[1]
        if h != self.n_members:
            raise ValueError(
                f"{fn}: `member_probs` must have {self.n_members} members, one per centroid "
                f"column (got {h})"
            )
        n_classes = 2 if self.binary else p.shape[2]
        seen = self._seen_in(fn, "member_probs", num_classes=int(n_classes), n_members=int(h))
        y = as_labels(labels, "labels", fn, n=n, num_classes=n_classes, device=p.device)
        groups = n_classes if self._classwise else 1
        if self._classwise:
            cols = p.permute(0, 2, 1).reshape(h, groups * n)
            outcome = (y[None, :] == torch.arange(groups, device=p.device)[:, None]).reshape(-1)
        elif self.binary:
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
        return {"counts": counts, "sum_y": sum_y, "sum_eu": sum_eu, "sum_p": sum_p}, seen

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
