r"""Mergeable replicate states: every statistic's weighted sums for the point and R replicates.

A replicate state holds, for ``R + 1`` weightings of the data (row 0: unit weights, the data
themselves; rows ``1..R``: Poisson(1) bootstrap weights, :mod:`._poisson`), the float64 sums a
statistic is computed from. A chunk adds ``sum_i w[i, r] x_i`` for every row ``r`` (one sparse
product per block of samples: no Python loop over samples, bins or replicates), two states merge
by addition, and :meth:`compute` turns the sums into an :class:`~._interval.Interval`:

    one chunk == any chunking == merged shards   (float64 summation order; weights identical)

:class:`MeanReplicates` holds ``sum_i w_i v_i`` and ``sum_i w_i`` (``[R + 1]`` each): accuracy,
NLL, Brier score, coverage, paired differences. :class:`CalibrationReplicates` holds the per-bin
gap sums of the top-label or classwise ECE; :class:`~._eece_replicates.EECEReplicates` the
per-bin sums of the EECE.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch

from bensemble._validation import as_float_tensor, check_finite, check_option, to_tensor
from bensemble.metrics._state import _same_settings, check_merge_partner
from bensemble.metrics._state_checks import check_state_tensors
from bensemble.metrics.intervals._interval import Interval, percentile_interval
from bensemble.metrics.intervals._replicate_checks import check_mean_sums

__all__ = ["MeanReplicates", "ReplicatesBase", "check_replicates", "check_state_dict_keys"]

_F64 = torch.float64
#: Most float64 numbers one replicate state may hold (1 GiB); a larger one is refused.
MAX_STATE_ENTRIES = 1 << 27
_BLOCK_ENTRIES = 1 << 19  # weights of one block: [rows, R + 1] float64, 4 MiB
LEVEL = 0.95


def check_replicates(value: Any, fn: str) -> int:
    """``n_replicates``: an integer in ``[1, 100000]``."""
    from bensemble.metrics.intervals._poisson import MAX_REPLICATES

    if (
        isinstance(value, bool)
        or not isinstance(value, (int, np.integer))
        or not 1 <= value <= MAX_REPLICATES
    ):
        raise ValueError(
            f"{fn}: `n_replicates` must be an integer in [1, {MAX_REPLICATES}] (got {value!r})"
        )
    return int(value)


def check_level(value: Any, fn: str) -> float:
    """``level``: a number in ``(0, 1)``."""
    ok = isinstance(value, (int, float, np.floating)) and not isinstance(value, bool)
    if not ok or not 0.0 < float(value) < 1.0:
        raise ValueError(f"{fn}: `level` must lie in (0, 1) (got {value!r})")
    return float(value)


def block_rows(n_replicates: int) -> int:
    """Samples per block of weights (``[rows, R + 1]`` float64 of about 4 MiB)."""
    return max(1, _BLOCK_ENTRIES // (n_replicates + 1))


def with_point_column(weights: Any, n: int, n_replicates: int, fn: str) -> np.ndarray:
    """User weights ``[c, R]`` -> C-contiguous float64 ``[c, R + 1]`` whose column 0 is ones."""
    w = as_float_tensor(weights, "weights", fn, ndim=2)
    if tuple(w.shape) != (n, n_replicates):
        raise ValueError(
            f"{fn}: `weights` must have shape [{n}, {n_replicates}] (samples of the chunk, "
            f"n_replicates) (got {tuple(w.shape)})"
        )
    check_finite(w, "weights", fn)
    if w.numel() and float(w.min()) < 0:
        raise ValueError(f"{fn}: `weights` must be >= 0 (got {float(w.min())})")
    out = np.empty((n, n_replicates + 1), dtype=np.float64)
    out[:, 0] = 1.0
    out[:, 1:] = w.to(_F64).cpu().numpy()
    return out


class ReplicatesBase:
    """The state plumbing shared by every replicate statistic (not instantiated directly).

    Subclasses implement ``_sums_shape()``, ``_prepare(*data) -> (rows, prepared)`` (validated
    per-sample arrays of one chunk), ``_accumulate(into, prepared, rows, weights)`` (add a block
    of samples ``rows`` with weights ``[m, R + 1]`` into ``into``), ``_points(prepared)`` (extra
    unweighted per-chunk sums, a dict of the shapes ``_extra_shapes()`` declares; may be
    empty), ``_check_sums(state, where, prefix)`` (what the sums of a loaded or merged state
    must satisfy) and ``compute``.

    Like the streaming meters, a state is refused whole or taken whole: a bad chunk, an
    incompatible or corrupt merge partner and a tampered :meth:`load_state_dict` raise a
    ``ValueError`` and leave the state bit-identical.
    """

    _fn = "ReplicatesBase"
    method = "percentile"

    def __init__(self, n_replicates: int = 200) -> None:
        self.n_replicates = check_replicates(n_replicates, self._fn)
        entries = int(np.prod(self._sums_shape()))
        if entries > MAX_STATE_ENTRIES:
            raise ValueError(
                f"{self._fn}: the replicate state must hold at most {MAX_STATE_ENTRIES:,} "
                f"float64 numbers (got {entries:,} = {self._sums_shape()}); lower n_replicates "
                "or the number of bins / classes / members"
            )
        self._totals = np.zeros(self.n_replicates + 1)
        self._sums = np.zeros(self._sums_shape())
        self._extra = {k: np.zeros(shape) for k, shape in self._extra_shapes().items()}

    # ---------------------------------------------------------------- subclass hooks
    def _sums_shape(self) -> tuple[int, ...]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _prepare(self, *data: Any) -> tuple[int, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _accumulate(self, into: np.ndarray, prepared: Any, rows: slice, w: np.ndarray) -> None:
        raise NotImplementedError  # pragma: no cover - abstract

    def _points(self, prepared: Any) -> dict[str, np.ndarray]:
        return {}

    def _extra_shapes(self) -> dict[str, tuple[int, ...]]:
        return {}

    def _check_sums(self, state: dict[str, torch.Tensor], where: str, prefix: str = "") -> None:
        raise NotImplementedError  # pragma: no cover - abstract

    #: attributes besides ``n_replicates`` that two states must share to merge (and that a
    #: loaded state dict must carry), in the order a state dict lists them
    _SETTINGS: tuple[str, ...] = ()

    def _settings(self) -> dict[str, Any]:
        return {"n_replicates": self.n_replicates, **{k: getattr(self, k) for k in self._SETTINGS}}

    def _state_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every state array's shape, by key (what a state dict must hold)."""
        return {
            "totals": (self.n_replicates + 1,),
            "sums": self._sums_shape(),
            **self._extra_shapes(),
        }

    # ---------------------------------------------------------------- state
    @property
    def n_samples(self) -> int:
        """Samples accumulated so far."""
        return int(round(self._totals[0]))

    @property
    def state(self) -> dict[str, torch.Tensor]:
        """The live float64 state (tensors sharing memory with it; an all-reduce sums them)."""
        out = {"totals": torch.from_numpy(self._totals), "sums": torch.from_numpy(self._sums)}
        out.update({k: torch.from_numpy(v) for k, v in self._extra.items()})
        return out

    def _add(
        self, sums: np.ndarray | None, totals: np.ndarray, extra: dict[str, np.ndarray]
    ) -> None:
        """Add ``sums`` (``None``: already added in place), ``totals`` and the extra arrays."""
        if sums is not None:
            self._sums += sums
        self._totals += totals
        for key, value in extra.items():
            self._extra[key] += value

    def _checked(self, state: Any, fn: str, name: str, prefix: str = "") -> dict[str, np.ndarray]:
        """Float64 numpy copies of a complete state that could come from data (``state``:
        ``{prefix + key: tensor}``); raises a ``ValueError`` naming ``name`` otherwise."""
        meta = {  # shapes only: nothing is allocated for the reference
            prefix + k: torch.empty(shape, dtype=torch.float64, device="meta")
            for k, shape in self._state_shapes().items()
        }
        tensors = check_state_tensors(state, meta, fn, name)
        self._check_sums(tensors, f"{fn}: `{name}", prefix)
        return {k[len(prefix) :]: np.ascontiguousarray(v.cpu().numpy()) for k, v in tensors.items()}

    def _set(self, arrays: dict[str, np.ndarray]) -> None:
        self._totals, self._sums = arrays["totals"], arrays["sums"]
        self._extra = {k: arrays[k] for k in self._extra_shapes()}

    def state_dict(self) -> dict[str, Any]:
        """A copy of the state: ``{"settings": {...}, "state": {name: float64 tensor}}``."""
        return {
            "settings": copy.deepcopy(self._settings()),
            "state": {k: v.clone() for k, v in self.state.items()},
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> ReplicatesBase:
        """Replace the state by one from :meth:`state_dict` of a state with the same settings.

        Everything is checked before the state is replaced (keys, shapes, float64 dtype, finite
        values, counts and sums that can come from data); a refused state dict changes nothing.
        """
        fn = f"{self._fn}.load_state_dict"
        check_loaded_settings(self._settings(), state_dict, fn)
        self._set(self._checked(state_dict["state"], fn, "state_dict['state']"))
        return self

    def update(self, weights: Any, *data: Any) -> ReplicatesBase:
        """Add one chunk; returns ``self``.

        Args:
            weights: ``[c, R]`` bootstrap weights of the chunk's samples, e.g.
                :func:`~bensemble.metrics.intervals.poisson_weights` of their global indices.
            *data: the statistic's per-sample inputs (see the class).
        """
        n, prepared = self._prepare(*data)
        w = with_point_column(weights, n, self.n_replicates, self._fn + ".update")
        sums = np.zeros(self._sums_shape())
        step = block_rows(self.n_replicates)
        for start in range(0, n, step):
            rows = slice(start, min(n, start + step))
            self._accumulate(sums, prepared, rows, w[rows])
        self._add(sums, w.sum(0), self._points(prepared))
        return self

    def _merge_checked(self, other: Any, fn: str, name: str = "other") -> dict[str, np.ndarray]:
        """``other``'s arrays after every check of a merge (nothing is added yet)."""
        check_merge_partner(self, other, fn, name=name, kind="state")
        return self._checked(other.state, fn, f"{name}.state")

    def _add_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        extra = {k: arrays[k] for k in self._extra_shapes()}
        self._add(arrays["sums"], arrays["totals"], extra)

    def merge(self, other: ReplicatesBase) -> ReplicatesBase:
        """Add another state of the same class and settings (another shard or worker).

        Both must have seen weights of one seed and disjoint global rows for the result to be
        the state of one pass over all rows. ``other`` is checked whole first (class, settings,
        a state that could come from data; not the state itself); a refused merge changes
        nothing."""
        self._add_arrays(self._merge_checked(other, f"{self._fn}.merge"))
        return self

    def _check_ready(self) -> None:
        if self._totals[0] <= 0:
            raise ValueError(f"{self._fn}: no data yet (got no sample) - call update() first")

    def compute(self, level: float = LEVEL) -> Interval:  # pragma: no cover - abstract
        raise NotImplementedError


class MeanReplicates(ReplicatesBase):
    """The mean of per-sample values and its percentile interval.

    State: ``sums [R + 1]`` (``sum_i w_i v_i``) and ``totals [R + 1]`` (``sum_i w_i``); replicate
    ``r`` is the weighted mean ``sums[r] / totals[r]``. The interval covers the population mean
    of the values (the sampling variability of the samples; the model is fixed).

    Args:
        n_replicates: bootstrap replicates ``R``.
        covers: the sentence stored in :attr:`Interval.covers`.

    Example:
        >>> from bensemble.metrics.intervals import poisson_weights
        >>> state = MeanReplicates(50)
        >>> v = torch.tensor([1.0, 0.0, 1.0, 1.0])
        >>> _ = state.update(poisson_weights(range(0, 4), 50), v)
        >>> state.compute().point
        0.75
    """

    _fn = "MeanReplicates"
    _SETTINGS = ("covers",)

    def __init__(
        self, n_replicates: int = 200, *, covers: str = "the population mean of the values"
    ) -> None:
        if not isinstance(covers, str):
            raise ValueError(f"{self._fn}: `covers` must be a str (got {type(covers).__name__})")
        self.covers = covers
        super().__init__(n_replicates)

    def _sums_shape(self) -> tuple[int, ...]:
        return (self.n_replicates + 1,)

    def _check_sums(self, state: dict[str, torch.Tensor], where: str, prefix: str = "") -> None:
        check_mean_sums(state, where, prefix)

    def _prepare(self, values: Any) -> tuple[int, np.ndarray]:
        v = as_float_tensor(values, "values", self._fn, ndim=1)
        check_finite(v, "values", self._fn)
        return v.shape[0], np.ascontiguousarray(v.to(_F64).cpu().numpy())

    def _accumulate(self, into: np.ndarray, prepared: Any, rows: slice, w: np.ndarray) -> None:
        # torch's matrix-vector product: numpy's BLAS may spin threads on a shared machine
        into += (torch.from_numpy(prepared[rows]) @ torch.from_numpy(w)).numpy()

    def replicate_values(self) -> torch.Tensor:
        """``[R + 1]`` weighted means (row 0: the data's own mean)."""
        self._check_ready()
        with np.errstate(invalid="ignore", divide="ignore"):
            return torch.from_numpy(self._sums / self._totals)

    def compute(self, level: float = LEVEL) -> Interval:
        """The mean and its percentile interval at ``level``."""
        level = check_level(level, f"{self._fn}.compute")
        values = self.replicate_values()
        point = float(values[0])
        ci = percentile_interval(values[1:], level)
        low, high = (point, point) if ci is None else ci
        return Interval(
            point, low, high, level, "percentile", self.covers, point, self.n_replicates
        )


def as_index_tensor(value: Any, name: str, fn: str) -> torch.Tensor:
    """An integer tensor (bin ids); floats and bools are refused."""
    t = to_tensor(value, name, fn)
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise ValueError(f"{fn}: `{name}` must have an integer dtype (got {t.dtype})")
    return t.to(torch.int64)


def check_method(method: str, fn: str, options: tuple[str, ...]) -> str:
    return check_option(method, "method", options, fn)


def check_loaded_settings(settings: dict[str, Any], state_dict: Any, fn: str) -> None:
    """A state dict ``{"settings": ..., "state": ...}`` saved by a state whose settings are
    ``settings`` (what ``load_state_dict`` checks before reading the state)."""
    check_state_dict_keys(state_dict, fn)
    if not _same_settings(settings, state_dict["settings"]):
        raise ValueError(
            f"{fn}: `state_dict` must come from a state with the same settings "
            f"{settings} (got {state_dict['settings']})"
        )


def check_state_dict_keys(state_dict: Any, fn: str) -> None:
    """A state dict is ``{"settings": ..., "state": ...}``, nothing more or less."""
    keys = {"settings", "state"}
    if not isinstance(state_dict, dict) or set(state_dict) != keys:
        got = sorted(state_dict) if isinstance(state_dict, dict) else type(state_dict).__name__
        raise ValueError(
            f"{fn}: `state_dict` must be a dict with the keys {sorted(keys)} (got {got})"
        )
