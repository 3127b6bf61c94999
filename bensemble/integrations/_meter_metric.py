"""The ``torchmetrics.Metric`` base over a streaming meter (see :mod:`.torchmetrics`).

States: the meter's float64 sums (``dist_reduce_fx="sum"``) and two small guards,
``compat_min`` / ``compat_max`` (``"min"`` / ``"max"``): ``[settings fingerprint, one entry per
size the data fixes]`` (the number of classes; for the EECE also the number of members). A
size not yet seen is ``2**53`` in ``compat_min`` and ``0`` in ``compat_max``, so min/max merge
them like any other rank. After a DDP sync or a merge, ``min == max`` holds exactly when every
contributor had the same settings (bins, norm, centroids, ...) and saw the same sizes; otherwise
``compute`` refuses with a ``ValueError`` instead of returning a sum of incompatible states.

What torchmetrics' defaults would lose, and what this base does instead:

* ``forward()`` (Lightning's ``self.metric(preds, target)``) resets the states before it runs
  ``update`` on the batch, so a batch that raises would drop every accumulated sample. Here the
  batch is validated and summed first, then added; the batch value is computed from its own sums.
* ``update()`` raising leaves the update count as it was.
* ``merge_state`` checks the incoming object or dict completely (class, settings, sizes seen,
  keys, shapes, float64, finite values, meaningful sums) before adding anything; it refuses the
  metric itself and its own live ``metric_state``. A cached ``compute`` value is dropped.
* ``load_state_dict`` (with ``persistent(True)``) checks the same before replacing anything and
  refuses missing and extra keys with a ``ValueError``.
* ``.to(dtype)`` / ``.half()`` / ``set_dtype`` move the states between devices but keep them
  float64 (a float16 count stops at 2048).
* a ``compute`` that raises after a DDP sync restores the local states (un-syncs).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from bensemble.integrations.distributed import _UNSEEN, _agreed_sizes
from bensemble.metrics._state import MergeableState, settings_fingerprint
from bensemble.metrics._state_checks import check_state_tensors

try:
    from torchmetrics import Metric as _Base

    _MISSING = None
except ImportError as exc:  # pragma: no cover - exercised by the missing-package test
    _Base = object
    _MISSING = exc

_F64 = torch.float64
_COMPAT = ("compat_min", "compat_max")
# flags torchmetrics' forward() changes; restored if it raises
_FORWARD_FLAGS = (
    "_update_count",
    "_forward_cache",
    "_computed",
    "_to_sync",
    "_should_unsync",
    "compute_on_cpu",
    "_enable_grad",
    "_is_synced",
    "_cache",
)

__all__ = ["MeterMetric"]


class MeterMetric(_Base):
    """A ``torchmetrics.Metric`` whose states are a streaming meter's float64 sums."""

    full_state_update = False
    is_differentiable = False
    higher_is_better = False

    def __init__(self, meter: MergeableState, **kwargs: Any) -> None:
        if _MISSING is not None:
            raise ImportError(
                f"{type(self).__name__}: needs the optional torchmetrics package "
                "(pip install torchmetrics); it is not installed. Without it, use the meters of "
                "bensemble.metrics.streaming with bensemble.integrations.sync_"
            ) from _MISSING
        super().__init__(**kwargs)
        meter._fn = type(self).__name__  # messages name the metric the user holds
        self._meter = meter
        self._names = tuple(meter.state)
        self._sizes = tuple(meter._declared_seen())
        self._fingerprint = settings_fingerprint(meter)
        for name, value in meter.state.items():
            self.add_state(name, default=value.clone(), dist_reduce_fx="sum")
        declared = list(meter._declared_seen().values())
        low = [self._fingerprint] + [_UNSEEN if v is None else float(v) for v in declared]
        high = [self._fingerprint] + [0.0 if v is None else float(v) for v in declared]
        self.add_state("compat_min", torch.tensor(low, dtype=_F64), dist_reduce_fx="min")
        self.add_state("compat_max", torch.tensor(high, dtype=_F64), dist_reduce_fx="max")

    # ----------------------------------------------------------------- sizes and settings

    def _seen(
        self, fn: str, name: str, low: torch.Tensor, high: torch.Tensor
    ) -> dict[str, int | None]:
        """The sizes ``low``/``high`` (``name``'s compat states) record; refuses other settings
        or disagreeing sizes."""
        if not float(low[0]) == float(high[0]) == self._fingerprint:
            raise ValueError(
                f"{fn}: `{name}` must come from {type(self).__name__} objects with these "
                f"settings - bins, norm, centroids, ... (got settings fingerprints "
                f"{float(low[0]):.0f}..{float(high[0]):.0f}, expected {self._fingerprint:.0f}; "
                "under DDP every rank must build the metric with the same settings and centroids)"
            )
        ranges = {s: (float(low[i]), float(high[i])) for i, s in enumerate(self._sizes, start=1)}
        return _agreed_sizes(
            ranges,
            lambda size, what, low, high: (
                f"{fn}: `{size}` must have seen one number of {what} "
                f"(got {low:g} and {high:g}; under DDP: ranks fed predictions of different shapes)"
            ),
        )

    def _current_seen(self, fn: str) -> dict[str, int | None]:
        return self._seen(fn, "states", self.compat_min, self.compat_max)

    def _stats(self, fn: str, *batch: Any, **options: Any) -> tuple[dict, dict]:
        """The batch's validated sums and sizes, checked against the sizes seen so far."""
        meter, declared = self._meter, self._meter._seen
        meter._seen = self._current_seen(fn)
        try:
            return meter._stats(*batch, **options)
        finally:  # the meter is only the kernel: it keeps no sizes of its own
            meter._seen = declared

    def _checked(self, state: Any, fn: str, name: str, *, merging: bool) -> dict:
        """A complete, meaningful state dict compatible with this metric (float64 copies)."""
        checked = check_state_tensors(state, self._defaults, fn, name, self._meter._infinite_ok)
        seen = self._seen(fn, name, checked["compat_min"], checked["compat_max"])
        defaults = self._defaults
        fixed = (
            self._current_seen(fn)
            if merging
            else self._seen(fn, "defaults", defaults["compat_min"], defaults["compat_max"])
        )
        self._meter._compatible_seen(seen, fn, name, fixed)
        self._meter._check_sums({k: checked[k] for k in self._names}, f"{fn}: `{name}")
        return checked

    # ----------------------------------------------------------------- adding states

    def _combined(self, sums: dict, low: torch.Tensor, high: torch.Tensor) -> dict:
        out = {}
        for name in self._names:
            mine = getattr(self, name)
            out[name] = mine + sums[name].to(device=mine.device, dtype=_F64)
        out["compat_min"] = torch.minimum(self.compat_min, low.to(self.compat_min.device))
        out["compat_max"] = torch.maximum(self.compat_max, high.to(self.compat_max.device))
        return out

    def _add_batch(self, stats: dict, seen: dict) -> None:
        sizes = [seen.get(name) for name in self._sizes]
        low = [self._fingerprint] + [_UNSEEN if v is None else float(v) for v in sizes]
        high = [self._fingerprint] + [0.0 if v is None else float(v) for v in sizes]
        low_t, high_t = torch.tensor(low, dtype=_F64), torch.tensor(high, dtype=_F64)
        self._assign(self._combined(stats, low_t, high_t))

    def _assign(self, values: dict) -> None:
        for name, value in values.items():  # everything is computed: nothing can fail here
            setattr(self, name, value)
        self._computed = None

    def _note_data(self) -> None:
        """After a merge or a load that brought samples, count it as an update (so torchmetrics
        does not warn that ``compute`` runs before ``update``)."""
        state = {name: getattr(self, name) for name in self._names}
        if self._meter._count(state) > 0:
            self._update_count = max(self._update_count, 1)

    # ----------------------------------------------------------------- the Metric API

    def update(self, *batch: Any, **options: Any) -> None:
        """Add one batch (arguments as the meter's ``update``); a refused batch changes nothing."""
        stats, seen = self._stats(f"{type(self).__name__}.update", *batch, **options)
        self._add_batch(stats, seen)

    def forward(self, *batch: Any, **options: Any) -> torch.Tensor:
        """Add one batch and return the metric of that batch alone (what Lightning logs per
        step). A refused batch raises and leaves every accumulated sample in place."""
        if self.dist_sync_on_step or self._is_synced:
            return self._guarded_forward(*batch, **options)
        stats, seen = self._stats(f"{type(self).__name__}.forward", *batch, **options)
        batch_value = torch.tensor(self._meter._value(stats), dtype=_F64)
        self._add_batch(stats, seen)
        self._update_count += 1
        self._forward_cache = batch_value
        return batch_value

    def _guarded_forward(self, *batch: Any, **options: Any) -> Any:
        """torchmetrics' own forward (``dist_sync_on_step=True``), undone if it raises."""
        states = self._copy_state_dict()
        flags = {name: getattr(self, name) for name in _FORWARD_FLAGS}
        try:
            return super().forward(*batch, **options)
        except BaseException:
            for name, value in {**states, **flags}.items():
                setattr(self, name, value)
            raise

    def compute(self) -> torch.Tensor:
        """The metric over everything seen (on every rank after a sync), as a 0-d tensor."""
        fn = f"{type(self).__name__}.compute"
        self._current_seen(fn)  # every rank had the same settings and sizes
        state = {name: getattr(self, name) for name in self._names}
        if int(self._meter._count(state)) == 0:
            raise ValueError(f"{fn}: no data yet (got no batch) - call update()")
        return torch.tensor(self._meter._value(state), dtype=_F64)

    def merge_state(self, incoming_state: Any) -> None:
        """Add another metric's states, or a ``metric_state`` dict, after checking them all."""
        fn = f"{type(self).__name__}.merge_state"
        if isinstance(incoming_state, MeterMetric):
            if type(incoming_state) is not type(self):
                raise ValueError(
                    f"{fn}: `incoming_state` must be a {type(self).__name__} (got "
                    f"{type(incoming_state).__name__})"
                )
            if incoming_state is self:
                raise ValueError(
                    f"{fn}: `incoming_state` must be another metric (got the metric itself, "
                    "whose samples would be counted twice; merge a copy.deepcopy if meant)"
                )
            self._meter._check_other(incoming_state._meter, fn, "incoming_state")
            incoming_state = {k: getattr(incoming_state, k) for k in self._defaults}
        elif not isinstance(incoming_state, dict):
            raise ValueError(
                f"{fn}: `incoming_state` must be a {type(self).__name__} or its metric_state "
                f"dict (got {type(incoming_state).__name__})"
            )
        elif any(incoming_state.get(k) is getattr(self, k) for k in self._defaults):
            raise ValueError(
                f"{fn}: `incoming_state` must be another metric's state (got this metric's own "
                "live metric_state, whose samples would be counted twice)"
            )
        checked = self._checked(incoming_state, fn, "incoming_state", merging=True)
        self._assign(self._combined(checked, checked["compat_min"], checked["compat_max"]))
        self._note_data()

    def _load_from_state_dict(
        self,
        state_dict: dict,
        prefix: str,
        local_metadata: dict,
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        """Load the states (saved with ``persistent(True)``) after checking all of them."""
        fn = f"{type(self).__name__}.load_state_dict"
        mine = {k[len(prefix) :]: k for k in state_dict if k.startswith(prefix)}
        extra = sorted(k for k in mine if "." not in k and k not in self._defaults)
        if extra:
            raise ValueError(
                f"{fn}: `state_dict` must hold only this metric's states {sorted(self._defaults)} "
                f"(got extra keys {extra})"
            )
        ours = {k: state_dict[mine[k]] for k in self._defaults if k in mine}
        if ours:  # a state dict saved without persistent(True) holds none: nothing to load
            checked = self._checked(ours, fn, "state_dict", merging=False)
            for key in ours:
                state_dict.pop(mine[key])
            self._assign({k: v.to(getattr(self, k).device) for k, v in checked.items()})
            self._note_data()
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )

    def _apply(self, fn: Callable, exclude_state: Any = "") -> Any:
        """Device moves reach the states; dtype casts do not (the sums stay float64)."""
        this = super()._apply(fn, exclude_state=tuple(self._defaults))
        device = this.device
        for name in self._defaults:
            setattr(this, name, getattr(this, name).to(device))
            this._defaults[name] = this._defaults[name].to(device)
        return this

    def _wrap_update(self, update: Callable) -> Callable:
        wrapped = super()._wrap_update(update)

        @functools.wraps(update)
        def guarded(*args: Any, **kwargs: Any) -> None:
            count, computed = self._update_count, self._computed
            try:
                return wrapped(*args, **kwargs)
            except BaseException:
                self._update_count, self._computed = count, computed
                raise

        return guarded

    def _wrap_compute(self, compute: Callable) -> Callable:
        wrapped = super()._wrap_compute(compute)

        @functools.wraps(compute)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                return wrapped(*args, **kwargs)
            except BaseException:
                if self._is_synced and self._cache is not None:
                    self.unsync()  # torchmetrics leaves the synced states in place on error
                raise

        return guarded
