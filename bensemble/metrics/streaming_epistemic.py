"""Streaming member-level metrics: the EECE (and, re-exported from
:mod:`bensemble.metrics.streaming_uncertainty`, the uncertainty-decomposition means).

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

The meter takes the fixed bins as a fitted binning (:mod:`bensemble.metrics.binning`: the
K-means cells of ``KMeansBinning(...).fit(sample)``, or equal-width / equal-mass bins of the mean
prediction) or as K-means centroids. The result equals the one-shot
``expected_epistemic_calibration_error(member_probs, labels, binning=fitted)`` on all the data.
"""

from __future__ import annotations

import copy
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
from bensemble.metrics._eece_meter_state import (  # noqa: F401 - MAX_STATE_NUMBERS: public
    FAR,
    MAX_STATE_NUMBERS,
    as_centroids,
    check_state_size,
)
from bensemble.metrics._epistemic_checks import resolve_n_bins
from bensemble.metrics._state import _F64, MergeableState
from bensemble.metrics._state_checks import (
    check_at_most,
    check_equal_totals,
    check_non_negative,
    check_whole,
    check_zero_where_empty,
)
from bensemble.metrics.binning import Binning, ExplicitBinning, KMeansBinning
from bensemble.metrics.binning._fit import fit_bins
from bensemble.metrics.binning._nearest import _assign
from bensemble.metrics.binning._threads import map_classes, single_threaded
from bensemble.metrics.epistemic import _eece_compute, _eece_update, _member_variance
from bensemble.metrics.streaming_uncertainty import UncertaintyMeter

__all__ = ["EECEMeter", "UncertaintyMeter"]

MULTICLASS = ("classwise", "top_label")
_check_state_size = check_state_size  # the name tests and callers used before the split


class EECEMeter(MergeableState):
    """Streaming EECE with fixed K-means bins (phase 2 of the protocol in the module docstring).

    State per bin (per class for "classwise"): count, ``sum y``, ``sum EU`` and ``sum_h p_h``
    (``[G * S]`` and ``[G * S, H]`` float64); the value comes from the same kernel pair
    (``_eece_update`` / ``_eece_compute``) as
    :func:`~bensemble.metrics.expected_epistemic_calibration_error`.

    Args:
        binning: the fixed bins: a fitted binning (:mod:`bensemble.metrics.binning`:
            ``KMeansBinning`` - from :meth:`from_sample`, ``.fit`` on a calibration split or
            ``KMeansBinning.from_centroids`` - ``UniformBinning``, ``QuantileBinning``; it says
            what it bins, so ``multiclass`` / ``binary`` are left at their defaults), or
            K-means centroids: ``[M, H]`` (binary / top-label, or shared by all classes),
            ``[K, M, H]`` or a list of ``K`` ``[M_k, H]`` sets for "classwise" (from
            :func:`~bensemble.metrics.fit_bins`). The state holds ``K * M * (H + 3)`` sums,
            at most :data:`MAX_STATE_NUMBERS`.
        multiclass: ``"classwise"`` or ``"top_label"`` (ignored with ``binary=True``).
        num_classes: ``K``, needed only for one ``[M, H]`` set shared by every class.
        binary: batches are ``[H, B]`` positive-class member probabilities.
        centroids: the name ``binning`` had before binning objects (keyword use).

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
        binning: Any = None,
        multiclass: str = "classwise",
        num_classes: int | None = None,
        *,
        binary: bool = False,
        centroids: Any = None,
    ) -> None:
        fn = self._fn
        self.binary = check_bool(binary, "binary", fn)
        self.multiclass = check_option(multiclass, "multiclass", MULTICLASS, fn)
        if binning is not None and centroids is not None:
            raise ValueError(f"{fn}: pass either `binning` or `centroids`, not both (got both)")
        self._binning, self._groups, centroids = self._bins_of(
            centroids if binning is None else binning, fn
        )
        if self._binning is not None:
            self.centroids, self.n_members = None, int(self._binning._state["n_members"])
            self._init_state()
            return
        self.centroids = as_centroids(centroids, fn)
        if self._classwise and self.centroids.shape[0] == 1:
            if num_classes is None:
                raise ValueError(
                    f"{fn}: `num_classes` must be given when one [M, H] centroid set is shared "
                    "by every class with multiclass='classwise' (got None)"
                )
            k = check_positive_int(num_classes, "num_classes", fn, minimum=2)
            check_state_size(k, *self.centroids.shape[1:], fn, "num_classes")
            self.centroids = self.centroids.expand(k, -1, -1).contiguous()
        if (binary or multiclass == "top_label") and self.centroids.shape[0] != 1:
            raise ValueError(
                f"{fn}: `centroids` must be one [M, H] set for binary / top-label "
                f"(got shape {list(self.centroids.shape)})"
            )
        self.n_members = int(self.centroids.shape[2])
        self._init_state()

    def _bins_of(self, value: Any, fn: str):
        """``(binning used through assign, its groups, centroids)`` of what came as the bins;
        a fitted binning sets ``multiclass`` / ``binary``."""
        if not isinstance(value, Binning):
            return None, None, value
        if isinstance(value, ExplicitBinning) or not value.fitted:
            raise ValueError(
                f"{fn}: `binning` must be fitted bins that apply to any batch - K-means cells or "
                "bins of the mean prediction, fitted (EECEMeter.from_sample(sample, binning=...) "
                f"fits one) - not explicit ids or an unfitted binning (got {value!r})"
            )
        mode = value.multiclass_
        if (self.binary, self.multiclass) != (False, "classwise"):
            raise ValueError(
                f"{fn}: `multiclass` and `binary` must be left at their defaults with a fitted "
                f"binning, which bins {mode} predictions (got multiclass={self.multiclass!r}, "
                f"binary={self.binary})"
            )
        self.binary = mode == "binary"
        self.multiclass = "top_label" if mode == "top_label" else "classwise"
        if isinstance(value, KMeansBinning):  # fixed centroids: the K-means cells themselves
            return None, None, value.centroids_
        state = value._state
        groups = state["n_classes"] if mode == "classwise" else 1
        check_state_size(groups, value.n_bins_, state["n_members"], fn, "binning")
        return value, groups, None

    @classmethod
    def from_sample(
        cls,
        member_probs: Any,
        n_bins: int | str = "auto",
        *,
        multiclass: str = "classwise",
        binary: bool = False,
        seed: int = 0,
        binning: Binning | None = None,
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
            binning: instead of ``n_bins`` / ``seed``, a binning to fit on the sample (a copy is
                fitted; e.g. ``KMeansBinning(n_bins=100)``, ``QuantileBinning(15)``).

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
        if binning is not None:
            if not isinstance(binning, Binning):
                raise ValueError(
                    f"{fn}: `binning` must be a binning from bensemble.metrics.binning (got "
                    f"{type(binning).__name__})"
                )
            fitted = copy.deepcopy(binning).fit(member_probs, multiclass=multiclass, binary=binary)
            return cls(fitted)
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
        settings = {"multiclass": self.multiclass, "binary": self.binary}
        if self._binning is None:
            return {**settings, "centroids": self.centroids}
        state = self._binning._state
        bins = state["edges"] if "edges" in state else torch.tensor([float(state["n_bins"])])
        return {**settings, "binning": type(self._binning).__name__, "bins": bins}

    def _declared_seen(self) -> dict[str, int | None]:
        classes = 2 if self.binary else (self._slots()[0] if self._classwise else None)
        return {"num_classes": classes, "n_members": self.n_members}

    def _slots(self) -> tuple[int, int]:
        if self._binning is not None:
            return self._groups, self._binning.n_bins_
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
        padded = torch.zeros_like(counts, dtype=torch.bool)
        if self.centroids is not None:
            padded = (self.centroids[:, :, 0] == FAR).reshape(-1).to(counts.device)
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
        slots = self._slots()[1]
        if self._binning is not None:
            ids = self._binning.assign(p).reshape(groups, n) + (
                torch.arange(groups, device=p.device)[:, None] * slots
            )
            ids = ids.reshape(-1)
        else:
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
