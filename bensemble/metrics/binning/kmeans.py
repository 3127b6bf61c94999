"""K-means binning of member vectors: the EECE's default partition (:class:`KMeansBinning`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from bensemble._seeds import DEFAULT_SEED
from bensemble._validation import as_float_tensor, check_option
from bensemble.metrics._epistemic_checks import check_n_seeds, resolve_n_bins
from bensemble.metrics.binning._classes import fit_classes
from bensemble.metrics.binning._fit import (
    DEFAULT_LLOYD_RTOL,
    DEFAULT_REFINE,
    DEFAULT_SUBSAMPLE,
    MIN_MINIBATCH,
    _check_centroids,
    _check_fit_options,
    fit_assign,
    resolve_seed,
)
from bensemble.metrics.binning._nearest import _assign
from bensemble.metrics.binning._threads import map_classes
from bensemble.metrics.binning.base import MULTICLASS, Binning, MemberColumns

__all__ = ["KMEANS_DEFAULTS", "KMeansBinning"]

#: The constructor defaults of :class:`KMeansBinning`.
KMEANS_DEFAULTS: dict[str, Any] = {
    "n_bins": "auto",
    "seed": DEFAULT_SEED,
    "backend": "auto",
    "n_seeds": 1,
    "subsample": DEFAULT_SUBSAMPLE,
    "refine": DEFAULT_REFINE,
    "max_iter": 300,
    "tol": 1e-4,
    "batch_size": MIN_MINIBATCH,
    "coreset": None,
    "lloyd_rtol": None,
}


class KMeansBinning(Binning):
    """Bins = Voronoi cells of K-means centroids fitted on the member vectors (the paper's).

    Every option of the clustering lives here; the EECE, its streaming meter, the displays and
    ``bensemble evaluate`` take the object. Passed *unfitted* to
    :func:`~bensemble.metrics.expected_epistemic_calibration_error` it is fitted on the
    evaluated points (with ``n_seeds`` seeds); passed *fitted* (``.fit`` on a calibration split,
    or :meth:`from_centroids`) its cells are reused as they are. The design, backends and
    measurements: :mod:`bensemble.metrics.binning`.

    Args:
        n_bins: bins ``B`` per partition, or ``"auto"``: ``min(round(sqrt(N)), N // 10, 200)``
            (:func:`~bensemble.metrics.epistemic.auto_n_bins`). Capped at the number of distinct
            member vectors; clusters that end empty are dropped.
        seed: integer seed of the subsample and the k-means++ seeding (fixed default: two
            identical calls agree); ``None`` draws one from torch's global generator at fit time.
        backend: ``"auto"`` (= ``"torch"``), ``"torch"``, ``"sklearn"``, ``"minibatch"``,
            ``"faiss"``.
        n_seeds: partitions the EECE averages over, seeds ``seed .. seed + n_seeds - 1`` (only
            when the EECE fits the binning itself; :meth:`fit` uses ``seed``).
        subsample: fit on this many seeded rows when ``N`` is larger (``None``: all rows).
        refine: after a subsample fit, this many Lloyd steps over all rows.
        max_iter: most Lloyd iterations.
        tol: Lloyd stops when the summed squared centroid shift is below ``tol`` times the mean
            feature variance.
        batch_size: mini-batch size of the ``"minibatch"`` backend (``>= 8192``).
        coreset: ``"torch"`` only, opt-in: fit on a weighted coreset of this many rows when there
            are more than twice as many, then Lloyd over all rows.
        lloyd_rtol: ``"torch"`` only, the classwise fast fit: seed on a stratified sample of
            the rows and stop Lloyd once a step lowers the within-cluster sum of squares by at
            most this fraction of it. ``None``: ``3e-4`` for "classwise" (its fast
            path, see :mod:`bensemble.metrics.binning`), ``0`` (the exact fit) otherwise.

    Example:
        >>> import torch
        >>> p = torch.tensor([[0.1, 0.2, 0.8, 0.9], [0.2, 0.2, 0.7, 0.9]])  # [M = 2, N = 4]
        >>> b = KMeansBinning(n_bins=2).fit(p, binary=True)
        >>> b.assign(p).tolist(), b.n_bins_
        ([0, 0, 1, 1], 2)
        >>> b
        KMeansBinning(n_bins=2)
    """

    _name = "KMeansBinning"

    def __init__(
        self,
        n_bins: int | str = "auto",
        *,
        seed: int | None = DEFAULT_SEED,
        backend: str = "auto",
        n_seeds: int = 1,
        subsample: int | None = DEFAULT_SUBSAMPLE,
        refine: int = DEFAULT_REFINE,
        max_iter: int = 300,
        tol: float = 1e-4,
        batch_size: int = MIN_MINIBATCH,
        coreset: int | None = None,
        lloyd_rtol: float | None = None,
    ) -> None:
        super().__init__()
        fn = self._name
        ok = isinstance(n_bins, (int, np.integer)) and not isinstance(n_bins, (bool, np.bool_))
        if not (n_bins == "auto" if isinstance(n_bins, str) else ok and n_bins >= 1):
            raise ValueError(f"{fn}: `n_bins` must be 'auto' or an integer >= 1 (got {n_bins!r})")
        if seed is not None:
            seed = resolve_seed(None, seed, fn)
        self.n_bins = n_bins if isinstance(n_bins, str) else int(n_bins)
        self.seed = seed
        rtol = 0.0 if lloyd_rtol is None else lloyd_rtol  # None: chosen per mode at fit time
        checked = _check_fit_options(
            fn, backend, subsample, refine, max_iter, tol, batch_size, coreset, rtol
        )
        self.batch_size = checked.batch_size
        self.backend = backend
        self.n_seeds = check_n_seeds(n_seeds, fn)
        self.subsample = None if subsample is None else int(subsample)
        self.refine, self.max_iter, self.tol = int(refine), int(max_iter), float(tol)
        self.coreset = checked.coreset
        self.lloyd_rtol = None if lloyd_rtol is None else checked.lloyd_rtol

    @classmethod
    def from_centroids(
        cls, centroids: Any, *, multiclass: str = "classwise", binary: bool = False, **options
    ) -> KMeansBinning:
        """A fitted binning whose cells are the given centroids (e.g. from
        :func:`~bensemble.metrics.fit_bins` on a calibration split, or broadcast from rank 0).

        Args:
            centroids: ``[B, M]`` (binary or top-label; or shared by every class), ``[K, B, M]`` or
                a list of ``K`` ``[B_k, M]`` (classwise); columns in the order of the members.
            multiclass: ``"classwise"`` or ``"top_label"`` (ignored with ``binary=True``).
            binary: the centroids bin a binary task's ``[M, N]`` predictions.
            **options: constructor options (recorded; they do not change fixed cells).

        For "classwise" with one shared ``[B, M]`` set the number of classes is taken from the
        first predictions it assigns.
        """
        fn = f"{cls._name}.from_centroids"
        binning = cls(**options)
        mode = "binary" if binary else check_option(multiclass, "multiclass", MULTICLASS, fn)
        sets = _centroid_sets(centroids, fn)
        width = sets[0].shape[1]
        if any(c.shape[1] != width for c in sets):
            raise ValueError(f"{fn}: `centroids` sets must share one width M (got several)")
        if mode != "classwise" and len(sets) != 1:
            raise ValueError(
                f"{fn}: `centroids` must be one [B, M] set for {mode} (got {len(sets)} sets)"
            )
        binning._state = {
            "mode": mode,
            "multiclass": "classwise" if mode == "binary" else mode,
            "groups": len(sets),
            "n_members": width,
            "n_classes": None if mode == "binary" else (len(sets) if len(sets) > 1 else None),
            "n_bins": max(c.shape[0] for c in sets),
            "centroids": sets if mode == "classwise" else sets[0],
            "seed": None,
            "infos": [{} for _ in sets],
        }
        return binning

    # ------------------------------------------------------------------ options

    def _options(self, changed_only: bool = False) -> dict[str, Any]:
        values = {key: getattr(self, key) for key in KMEANS_DEFAULTS}
        if changed_only:
            values = {k: v for k, v in values.items() if v != KMEANS_DEFAULTS[k]}
        return values

    def with_seed(self, seed: int) -> KMeansBinning:
        """An unfitted copy with another seed (the EECE's ``n_seeds`` runs)."""
        return type(self)(**{**self._options(), "seed": seed})

    def rtol_for(self, mode: str) -> float:
        """The Lloyd stopping tolerance a fit in ``mode`` uses."""
        if self.lloyd_rtol is not None:
            return self.lloyd_rtol
        return DEFAULT_LLOYD_RTOL if mode == "classwise" else 0.0

    # ------------------------------------------------------------------ fitting

    def _fit_columns(self, columns: MemberColumns, fn: str) -> list[torch.Tensor]:
        n_bins = resolve_n_bins(self.n_bins, columns.n, fn)
        seed = resolve_seed(None, self.seed, fn)
        rtol = self.rtol_for(columns.mode)
        options = {
            "subsample": self.subsample,
            "refine": self.refine,
            "max_iter": self.max_iter,
            "tol": self.tol,
            "coreset": self.coreset,
            "lloyd_rtol": rtol,
        }

        def fit_one(k: int):
            x = columns.vectors(k)
            return fit_assign(
                x,
                n_bins,
                backend=self.backend,
                seed=seed,
                fit_options={**options, "batch_size": self.batch_size},
            )

        if columns.groups > 1 and self.backend in ("auto", "torch"):
            results = fit_classes(
                _ClassVectors(columns),
                columns.groups,
                n_bins,
                seed=seed,
                fallback=fit_one,
                **options,
            )
        elif columns.groups > 1:
            results = map_classes(fit_one, columns.groups)
        else:
            results = [fit_one(0)]
        ids, centres, infos = (list(r) for r in zip(*results, strict=True))
        state = self._base_state(columns, max(c.shape[0] for c in centres))
        given = [columns.to_given(c) for c in centres]
        state.update(
            centroids=given if columns.mode == "classwise" else given[0],
            seed=seed,
            n_bins_requested=n_bins,
            infos=infos,
        )
        self._state = state
        return ids

    def _assign_columns(self, columns: MemberColumns, fn: str) -> list[torch.Tensor]:
        sets = self._centroid_list(columns.groups)
        return [
            _assign(columns.vectors(k), columns.to_canonical(c.to(columns.p.device)))[0]
            for k, c in enumerate(sets)
        ]

    def _centroid_list(self, groups: int) -> list[torch.Tensor]:
        centres = self._state["centroids"]
        sets = centres if isinstance(centres, list) else [centres]
        return sets * groups if len(sets) == 1 and groups > 1 else sets

    def _check_state(self, state: dict[str, Any], fn: str) -> dict[str, Any]:
        state = super()._check_state(state, fn)
        sets = _centroid_sets(state.get("centroids"), fn, name="state['fitted']['centroids']")
        if any(c.shape[1] != state.get("n_members") for c in sets):
            raise ValueError(
                f"{fn}: `state['fitted']['centroids']` must have n_members = "
                f"{state.get('n_members')!r} columns"
            )
        state["centroids"] = sets if state["mode"] == "classwise" else sets[0]
        return state

    @property
    def fit_info_(self) -> list[dict[str, Any]]:
        """Per partition: the backend that ran, fitted bins, Lloyd iterations, convergence, rows
        fitted and the settings."""
        return self._fitted_state(f"{self._name}.fit_info_")["infos"]

    @property
    def seed_(self) -> int | None:
        """The integer seed the fit used (``None`` for :meth:`from_centroids`)."""
        return self._fitted_state(f"{self._name}.seed_")["seed"]


class _ClassVectors:
    """``k -> [N, M]`` member vectors of class ``k``; ``block(a, b)`` copies the classes
    ``a .. b - 1`` at once as a contiguous ``[b - a, N, M]`` (one pass over the strided input
    instead of one per class, then one over the compact copy)."""

    def __init__(self, columns: MemberColumns) -> None:
        self.columns = columns

    def __call__(self, k: int) -> torch.Tensor:
        return self.columns.vectors(k)

    def block(self, a: int, b: int) -> torch.Tensor:
        # [H, N, C] -> [N, C, H] -> [C, N, H]: two copies, each reading runs of contiguous
        # values, beat the one strided permute copy (1.5-2x, 20 classes of [10, 20,000, 200])
        rows = self.columns.p[:, :, a:b].permute(1, 2, 0).contiguous()
        return rows.transpose(0, 1).contiguous()


def _centroid_sets(centroids: Any, fn: str, name: str = "centroids") -> list[torch.Tensor]:
    """``[B, M]`` -> one set; ``[K, B, M]`` or a sequence of ``[B_k, M]`` -> ``K`` sets."""
    if isinstance(centroids, Sequence) and not isinstance(centroids, (str, bytes)):
        items = list(centroids)
        if items and all(getattr(c, "ndim", 0) == 2 for c in items):
            width = int(items[0].shape[1])
            return [
                _check_centroids(c, width, fn, name=f"{name}[{k}]").to(torch.float64)
                for k, c in enumerate(items)
            ]
    t = as_float_tensor(centroids, name, fn, ndim=(2, 3))
    return [t] if t.ndim == 2 else list(t.unbind(0))
