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

**Nothing is lost on a bad input.** ``update`` validates the whole batch and computes its sums
before it touches the state; ``merge`` and ``load_state_dict`` check the other state completely
(class, settings, the class / member counts it has seen, keys, shapes, float64 dtype, finite
values, and sums that mean something: whole non-negative counts, no more hits than samples)
before anything is added or replaced. A refusal is a ``ValueError`` and leaves the meter
bit-identical. Besides its settings, a meter remembers the sizes its data fixed (``seen``: the
number of classes, for member meters also the number of members): a later batch, a merged meter
or a loaded state of another size is refused, and ``state_dict`` carries them.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import numpy as np
import torch

from bensemble._validation import MAX_BIN_SLOTS
from bensemble.metrics._state_checks import check_state_tensors

_F64 = torch.float64

__all__ = ["MergeableState", "check_bin_slots", "settings_fingerprint"]


class MergeableState:
    """Base of the streaming meters (not instantiated directly).

    Subclasses set ``_fn`` (the name in messages) and implement ``_settings()`` (what two meters
    must share to merge), ``_empty_state()`` (zero float64 tensors), ``_stats(*batch)`` (a
    batch's validated sums, same keys and shapes, and the sizes it fixes - see
    :meth:`_seen_in`), ``_value(state)`` (the compute half) and ``_check_sums(state, where)``
    (what the sums must satisfy), and expose ``update``/``compute`` with documented arguments.
    ``_declared_seen()`` gives the sizes fixed by the settings (``None``: fixed by the first
    batch).
    """

    _fn = "MergeableState"
    _infinite_ok: tuple[str, ...] = ()  # state keys that may legitimately hold +inf

    def _settings(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _empty_state(self) -> dict[str, torch.Tensor]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _stats(self, *batch: Any) -> tuple[dict[str, torch.Tensor], dict[str, int]]:
        raise NotImplementedError  # pragma: no cover - abstract

    def _value(self, state: dict[str, torch.Tensor]) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _check_sums(self, state: dict[str, torch.Tensor], where: str) -> None:
        """Raise a ``ValueError`` when ``state``'s sums cannot come from any data."""

    def _declared_seen(self) -> dict[str, int | None]:
        return {"num_classes": None}

    def _count(self, state: dict[str, torch.Tensor]) -> float:
        """Samples seen (subclasses with another count state override this)."""
        return float(state["count"].sum())

    # ----------------------------------------------------------------- sizes fixed by data

    def _seen_in(self, fn: str, name: str, **sizes: int) -> dict[str, int]:
        """Check a batch's sizes against those already fixed; returns them (not yet stored)."""
        for key, size in sizes.items():
            mine = self._seen.get(key)
            if mine is not None and size != mine:
                what = key.replace("num_classes", "classes").replace("n_members", "members")
                raise ValueError(
                    f"{fn}: `{name}` must have {mine} {what}, as every batch before it (got {size})"
                )
        return sizes

    def _compatible_seen(
        self, seen: Any, fn: str, name: str, fixed: dict[str, int | None] | None = None
    ) -> dict[str, int | None]:
        """``seen`` of another state: the same keys, ``None`` or an int >= 1, and no size that
        contradicts one this meter has fixed (or those in ``fixed``)."""
        fixed = self._seen if fixed is None else fixed
        if not isinstance(seen, dict) or set(seen) != set(fixed):
            raise ValueError(
                f"{fn}: `{name}` must be a dict with the keys {sorted(fixed)} (got {seen!r})"
            )
        for key, size in seen.items():
            ok = size is None or (
                isinstance(size, (int, np.integer)) and not isinstance(size, bool) and size >= 1
            )
            if not ok:
                raise ValueError(
                    f"{fn}: `{name}[{key!r}]` must be None or an int >= 1 (got {size!r})"
                )
            mine = fixed[key]
            if None not in (mine, size) and mine != size:
                what = key.replace("num_classes", "classes").replace("n_members", "members")
                raise ValueError(
                    f"{fn}: `{name}` must be for {mine} {what}, the number this meter has seen "
                    f"or was built for (got {size})"
                )
        return {k: (None if v is None else int(v)) for k, v in seen.items()}

    def _merged_seen(self, seen: dict[str, int | None]) -> dict[str, int | None]:
        return {k: self._seen[k] if self._seen[k] is not None else seen[k] for k in self._seen}

    # ----------------------------------------------------------------- state plumbing

    def _init_state(self) -> None:
        self._state = {k: v.to(_F64) for k, v in self._empty_state().items()}
        self._seen = dict(self._declared_seen())

    def _device(self) -> torch.device:
        return next(iter(self._state.values())).device

    def _add(self, stats: dict[str, torch.Tensor]) -> None:
        """Add same-keyed, same-shaped sums; all converted before the first one is added."""
        device = self._device()
        if int(self._count(self._state)) == 0:  # an empty meter follows the data's device
            device = next(iter(stats.values())).device
        state = {k: v.to(device) for k, v in self._state.items()}
        values = {k: stats[k].to(device=device, dtype=_F64) for k in state}
        for key, value in values.items():
            if value.shape != state[key].shape:  # pragma: no cover - a kernel bug, not input
                raise ValueError(f"{self._fn}: internal state `{key}` changed shape")
        for key, value in values.items():
            state[key].add_(value)
        self._state = state

    @property
    def state(self) -> dict[str, torch.Tensor]:
        """The live float64 state tensors (what :func:`bensemble.integrations.sync_` reduces)."""
        return self._state

    @property
    def seen(self) -> dict[str, int | None]:
        """The sizes the data fixed so far (``num_classes``; member meters also ``n_members``)."""
        return dict(self._seen)

    @property
    def n_samples(self) -> int:
        """Samples accumulated so far."""
        return int(self._count(self._state))

    def update(self, *batch: Any) -> MergeableState:
        """Add one batch; returns ``self`` (see the subclass for the arguments).

        The batch is validated and summed first; a refused batch changes nothing.
        """
        stats, seen = self._stats(*batch)
        self._add(stats)
        self._seen.update(seen)
        return self

    def compute(self) -> Any:
        """The metric of everything accumulated so far (the state is not changed: updating
        afterwards continues the accumulation)."""
        if self.n_samples == 0:
            raise ValueError(f"{self._fn}: no data yet (got no batch) - call update() first")
        return self._value(self._state)

    def _check_other(self, other: Any, fn: str, name: str = "other") -> None:
        check_merge_partner(self, other, fn, name=name, kind="meter")

    def _checked_state(self, state: Any, fn: str, name: str) -> dict[str, torch.Tensor]:
        """Float64 copies (on this meter's device) of a complete, meaningful state."""
        checked = check_state_tensors(state, self._empty_state(), fn, name, self._infinite_ok)
        self._check_sums(checked, f"{fn}: `{name}")
        return {k: v.to(self._device()) for k, v in checked.items()}

    def merge(self, other: MergeableState) -> MergeableState:
        """Add another meter's state (another shard, process or rank); returns ``self``.

        ``other`` must be a different meter of the same class with the same settings and the
        same sizes seen (classes, members); merging a meter with itself would count every sample
        twice and is refused. A refused merge changes nothing.
        """
        fn = f"{self._fn}.merge"
        self._check_other(other, fn)
        seen = self._compatible_seen(other._seen, fn, "other")
        self._add(self._checked_state(other._state, fn, "other.state"))
        self._seen = self._merged_seen(seen)
        return self

    def reset(self) -> MergeableState:
        """Forget all batches (keeps the settings); returns ``self``."""
        device = self._device()
        self._init_state()
        self._state = {k: v.to(device) for k, v in self._state.items()}
        return self

    def state_dict(self) -> dict[str, Any]:
        """A copy of the state: ``{"settings": {...}, "state": {name: float64 tensor},
        "seen": {"num_classes": K or None, ...}}``."""
        return {
            "settings": copy.deepcopy(self._settings()),
            "state": {k: v.detach().clone() for k, v in self._state.items()},
            "seen": dict(self._seen),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> MergeableState:
        """Replace the state by one from :meth:`state_dict` of a meter with the same settings.

        Everything is checked before the state is replaced (keys, shapes, float64 dtype, finite
        values, counts and sums that can come from data, the sizes seen); a refused state dict
        changes nothing.
        """
        fn = f"{self._fn}.load_state_dict"
        keys = {"settings", "state", "seen"}
        if not isinstance(state_dict, dict) or set(state_dict) != keys:
            got = sorted(state_dict) if isinstance(state_dict, dict) else type(state_dict).__name__
            raise ValueError(
                f"{fn}: `state_dict` must be a dict with the keys {sorted(keys)} (got {got})"
            )
        if not _same_settings(self._settings(), state_dict["settings"]):
            raise ValueError(
                f"{fn}: `state_dict` must come from a meter with the same settings "
                f"{self._settings()} (got {state_dict['settings']})"
            )
        seen = self._compatible_seen(
            state_dict["seen"], fn, "state_dict['seen']", self._declared_seen()
        )
        state = self._checked_state(state_dict["state"], fn, "state_dict['state']")
        self._state, self._seen = state, seen
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
    return type(a) is type(b) and a == b


def _same_settings(a: dict[str, Any], b: Any) -> bool:
    return isinstance(b, dict) and set(a) == set(b) and all(_same(a[k], b[k]) for k in a)


def check_merge_partner(
    mine: Any, other: Any, fn: str, *, name: str = "other", kind: str, settings: str = "settings"
) -> None:
    """Refuse to merge ``other`` into ``mine`` unless it is another object of the same class
    (merging an object with itself would count every sample twice) whose ``_settings()`` are
    the same; ``kind`` names the objects in the messages ("meter", "state"), ``settings`` what
    must agree."""
    if type(other) is not type(mine):
        raise ValueError(
            f"{fn}: `{name}` must be a {type(mine).__name__} (got {type(other).__name__})"
        )
    if other is mine:
        raise ValueError(
            f"{fn}: `{name}` must be another {kind} (got the {kind} itself, whose samples "
            "would be counted twice; merge a copy.deepcopy if that is really meant)"
        )
    ours, theirs = mine._settings(), other._settings()
    if not _same_settings(ours, theirs):
        diff = {k: (ours[k], theirs.get(k)) for k in ours if not _same(ours[k], theirs.get(k))}
        raise ValueError(
            f"{fn}: `{name}` must have the same {settings} (got differences, mine vs theirs: "
            f"{diff})"
        )


def settings_fingerprint(meter: MergeableState) -> float:
    """A 48-bit hash of a meter's class and settings (centroid values included), as a float64
    that is exact: what the torchmetrics states and :func:`~bensemble.integrations.sync_` compare
    across objects and ranks to refuse adding sums of differently binned data."""
    digest = hashlib.sha256(type(meter).__name__.encode())
    for key, value in sorted(meter._settings().items()):
        digest.update(key.encode())
        if isinstance(value, torch.Tensor):
            array = value.detach().cpu().to(_F64).contiguous().numpy()
            digest.update(repr(array.shape).encode())
            digest.update(array.tobytes())
        else:
            digest.update(repr(value).encode())
    return float(int.from_bytes(digest.digest()[:6], "big"))


def check_bin_slots(num_classes: int, n_bins: int, fn: str) -> None:
    """``num_classes * (n_bins + 1)`` per-bin slots fit in :data:`~bensemble._validation.
    MAX_BIN_SLOTS` (checked before the state is allocated); the message names the argument that
    cannot fit and its true limit."""
    if num_classes * (n_bins + 1) <= MAX_BIN_SLOTS:
        return
    if num_classes > MAX_BIN_SLOTS // 2:  # even one bin per class does not fit
        raise ValueError(
            f"{fn}: `num_classes` must be <= {MAX_BIN_SLOTS // 2} (one bin per class already "
            f"takes 2 of the {MAX_BIN_SLOTS} per-bin slots a state may hold) (got {num_classes})"
        )
    raise ValueError(
        f"{fn}: `n_bins` must be <= {MAX_BIN_SLOTS // num_classes - 1} for {num_classes} "
        f"classes (num_classes * (n_bins + 1) per-bin slots, at most {MAX_BIN_SLOTS}) "
        f"(got {n_bins})"
    )
