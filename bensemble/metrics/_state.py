"""The mergeable-state base shared by every streaming meter.

A meter holds a fixed set of float64 tensors of sufficient statistics (sums and counts), allocated
at construction with shapes that depend only on its settings (``n_bins``, ``num_classes``,
centroids), never on the number of samples. ``update`` adds a batch's statistics, ``merge`` adds
another meter's, ``compute`` turns the sums into the value: the kernel pair of the one-shot
metric, run batch by batch. Because every combination is elementwise addition of float64 sums,

    one-shot == streaming over any batch split == merged shards == all-reduced ranks

up to float64 summation order (counts are exact). The same fixed-shape state is what
:mod:`bensemble.integrations` registers with torchmetrics (``dist_reduce_fx="sum"``) and what
:func:`bensemble.integrations.sync_` all-reduces: synchronising costs ``O(state size)`` numbers,
whatever the number of samples.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

_F64 = torch.float64


class MergeableState:
    """Base of the streaming meters (not instantiated directly).

    Subclasses set ``_fn`` (the name in messages), implement ``_settings()`` (what two meters
    must share to merge), ``_empty_state()`` (zero float64 tensors), ``_stats(*batch)`` (a batch's
    validated sums, same keys and shapes) and ``_value(state)`` (the compute half), and expose
    ``update``/``compute`` with documented arguments.
    """

    _fn = "MergeableState"

    def _settings(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _empty_state(self) -> dict[str, torch.Tensor]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _stats(self, *batch: Any, **options: Any) -> dict[str, torch.Tensor]:  # pragma: no cover
        raise NotImplementedError

    def _value(self, state: dict[str, torch.Tensor]) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _count(self, state: dict[str, torch.Tensor]) -> float:
        """Samples seen (subclasses with another count state override this)."""
        return float(state["count"].sum())

    # ----------------------------------------------------------------- state plumbing

    def _init_state(self) -> None:
        self._state = {k: v.to(_F64) for k, v in self._empty_state().items()}

    def _add(self, stats: dict[str, torch.Tensor]) -> None:
        for key, value in stats.items():
            mine = self._state[key]
            if mine.device != value.device:
                if int(self._count(self._state)) == 0:
                    self._state = {k: v.to(value.device) for k, v in self._state.items()}
                    mine = self._state[key]
                else:
                    value = value.to(mine.device)
            mine.add_(value.to(_F64))

    @property
    def state(self) -> dict[str, torch.Tensor]:
        """The live float64 state tensors (what :func:`bensemble.integrations.sync_` reduces)."""
        return self._state

    @property
    def n_samples(self) -> int:
        """Samples accumulated so far."""
        return int(self._count(self._state))

    def update(self, *batch: Any, **options: Any) -> MergeableState:
        """Add one batch; returns ``self`` (see the subclass for the arguments)."""
        self._add(self._stats(*batch, **options))
        return self

    def compute(self) -> Any:
        """The metric of everything accumulated so far."""
        if self.n_samples == 0:
            raise ValueError(f"{self._fn}: no data yet (got no batch) - call update() first")
        return self._value(self._state)

    def _check_other(self, other: Any, fn: str, name: str = "other") -> None:
        if not isinstance(other, type(self)):
            raise ValueError(
                f"{fn}: `{name}` must be a {type(self).__name__} (got {type(other).__name__})"
            )
        if other is self:
            raise ValueError(
                f"{fn}: `{name}` must be another meter (got the meter itself, whose samples "
                "would be counted twice; merge a copy.deepcopy if that is really meant)"
            )
        mine, theirs = self._settings(), other._settings()
        if not _same_settings(mine, theirs):
            diff = {k: (mine[k], theirs.get(k)) for k in mine if not _same(mine[k], theirs.get(k))}
            raise ValueError(
                f"{fn}: `{name}` must have the same settings (got differences, mine vs theirs: "
                f"{diff})"
            )

    def merge(self, other: MergeableState) -> MergeableState:
        """Add another meter's state (another shard, process or rank); returns ``self``.

        ``other`` must be a different meter of the same class with the same settings; merging a
        meter with itself would count every sample twice and is refused.
        """
        self._check_other(other, f"{self._fn}.merge")
        self._add(other._state)
        return self

    def reset(self) -> MergeableState:
        """Forget all batches (keeps the settings); returns ``self``."""
        self._init_state()
        return self

    def state_dict(self) -> dict[str, Any]:
        """A copy of the state: ``{"settings": {...}, "state": {name: float64 tensor}}``."""
        return {
            "settings": copy.deepcopy(self._settings()),
            "state": {k: v.detach().clone() for k, v in self._state.items()},
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> MergeableState:
        """Replace the state by one from :meth:`state_dict` of a meter with the same settings."""
        fn = f"{self._fn}.load_state_dict"
        if not isinstance(state_dict, dict) or set(state_dict) != {"settings", "state"}:
            raise ValueError(
                f"{fn}: `state_dict` must be a dict with keys 'settings' and 'state' "
                f"(got {type(state_dict).__name__})"
            )
        if not _same_settings(self._settings(), state_dict["settings"]):
            raise ValueError(
                f"{fn}: `state_dict` must come from a meter with the same settings "
                f"{self._settings()} (got {state_dict['settings']})"
            )
        empty = self._empty_state()
        state = state_dict["state"]
        if set(state) != set(empty):
            raise ValueError(
                f"{fn}: `state_dict['state']` must have the keys {sorted(empty)} "
                f"(got {sorted(state)})"
            )
        for key, ref in empty.items():
            value = state[key]
            if not isinstance(value, torch.Tensor) or value.shape != ref.shape:
                shape = tuple(getattr(value, "shape", ()))
                raise ValueError(
                    f"{fn}: `state_dict['state'][{key!r}]` must be a tensor of shape "
                    f"{tuple(ref.shape)} (got {type(value).__name__} of shape {shape})"
                )
        self._state = {k: state[k].detach().to(_F64).clone() for k in empty}
        return self

    def to(self, device: torch.device | str) -> MergeableState:
        """Move the state to ``device``; returns ``self``."""
        try:
            device = torch.device(device)
        except (RuntimeError, TypeError) as exc:
            raise ValueError(
                f"{self._fn}.to: `device` must be a torch device (got {device!r}: {exc})"
            ) from None
        self._state = {k: v.to(device) for k, v in self._state.items()}
        return self

    def __repr__(self) -> str:
        settings = ", ".join(
            f"{k}={v!r}" for k, v in self._settings().items() if not isinstance(v, torch.Tensor)
        )
        return f"{type(self).__name__}({settings}, samples={self.n_samples})"


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and torch.equal(a.cpu().to(_F64), b.cpu().to(_F64))
        )
    return a == b


def _same_settings(a: dict[str, Any], b: Any) -> bool:
    return isinstance(b, dict) and set(a) == set(b) and all(_same(a[k], b[k]) for k in a)
