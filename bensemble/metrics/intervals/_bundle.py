"""One replicate state for many statistics: weights drawn once per block, shared by all.

:class:`ReplicateState` is what a streaming evaluation holds: named replicate statistics
(:class:`~._replicates.MeanReplicates`, :class:`~._calibration_replicates.CalibrationReplicates`,
:class:`~._eece_replicates.EECEReplicates`) that see the same Poisson weights. A chunk is added
with the global row numbers of its samples; the weights of a block of rows are computed once
(:func:`~._poisson.weight_block`) and every statistic given in that call adds its sums. States of
shards, workers or ranks :meth:`~ReplicateState.merge` by addition, and because each weight is a
function of (seed, global row, replicate), the merged state equals the single-pass state.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from bensemble.metrics._state import check_merge_partner
from bensemble.metrics.intervals._calibration_replicates import CalibrationReplicates
from bensemble.metrics.intervals._eece_replicates import EECEReplicates
from bensemble.metrics.intervals._interval import Interval
from bensemble.metrics.intervals._poisson import resolve_seed, sample_indices, weight_block
from bensemble.metrics.intervals._replicates import (
    LEVEL,
    MeanReplicates,
    ReplicatesBase,
    block_rows,
    check_level,
    check_loaded_settings,
    check_replicates,
)

__all__ = ["ReplicateState"]


class ReplicateState:
    """Named replicate statistics over one dataset, with shared counter-based Poisson weights.

    Args:
        n_replicates: bootstrap replicates ``R`` (default 200).
        seed: integer in ``[0, 2**64)``; ``None`` draws one now (kept in :attr:`seed`, so every
            chunk and every merged shard built with ``seed=state.seed`` agrees).
        level: nominal coverage of :meth:`compute`'s intervals.

    Example:
        >>> state = ReplicateState(100, seed=0)
        >>> _ = state.add_mean("accuracy")
        >>> correct = torch.tensor([1.0, 0.0, 1.0, 1.0, 1.0, 0.0])
        >>> _ = state.update(range(0, 4), {"accuracy": (correct[:4],)})
        >>> _ = state.update(range(4, 6), {"accuracy": (correct[4:],)})
        >>> round(state.compute()["accuracy"].point, 4)
        0.6667
    """

    _fn = "ReplicateState"

    def __init__(self, n_replicates: int = 200, *, seed: int | None = 0, level: float = LEVEL):
        self.n_replicates = check_replicates(n_replicates, self._fn)
        self.seed = resolve_seed(seed, self._fn)
        self.level = check_level(level, self._fn)
        self._stats: dict[str, ReplicatesBase] = {}

    # ---------------------------------------------------------------- registration
    def add(self, name: str, statistic: ReplicatesBase) -> ReplicatesBase:
        """Register ``statistic`` (built with this state's ``n_replicates``) as ``name``."""
        fn = f"{self._fn}.add"
        if not isinstance(name, str) or not name:
            raise ValueError(f"{fn}: `name` must be a non-empty str (got {name!r})")
        if name in self._stats:
            raise ValueError(f"{fn}: `name` must be new (got {name!r}, already registered)")
        if not isinstance(statistic, ReplicatesBase):
            raise ValueError(
                f"{fn}: `statistic` must be a replicate statistic such as MeanReplicates "
                f"(got {type(statistic).__name__})"
            )
        if statistic.n_replicates != self.n_replicates:
            raise ValueError(
                f"{fn}: `statistic` must have n_replicates = {self.n_replicates} "
                f"(got {statistic.n_replicates})"
            )
        self._stats[name] = statistic
        return statistic

    def add_mean(self, name: str, **options: Any) -> MeanReplicates:
        """Register a :class:`MeanReplicates` (``options``: its keyword arguments)."""
        return self.add(name, MeanReplicates(self.n_replicates, **options))

    def add_calibration(self, name: str, n_bins: int = 15, **options: Any) -> CalibrationReplicates:
        """Register a :class:`CalibrationReplicates` (top-label; ``classwise=True,
        num_classes=K`` for the classwise ECE)."""
        return self.add(
            name, CalibrationReplicates(n_bins, n_replicates=self.n_replicates, **options)
        )

    def add_eece(self, name: str, n_members: int, n_slots: int, **options: Any) -> EECEReplicates:
        """Register an :class:`EECEReplicates` (``n_groups=K`` classwise, or ``binary=True``)."""
        return self.add(
            name, EECEReplicates(n_members, n_slots, n_replicates=self.n_replicates, **options)
        )

    @property
    def names(self) -> tuple[str, ...]:
        """Registered statistics, in registration order."""
        return tuple(self._stats)

    def __getitem__(self, name: str) -> ReplicatesBase:
        if name not in self._stats:
            raise ValueError(
                f"{self._fn}: `name` must be a registered statistic, one of "
                f"{', '.join(repr(k) for k in self._stats)} (got {name!r})"
            )
        return self._stats[name]

    # ---------------------------------------------------------------- accumulation
    def update(self, sample_index: Any, inputs: Mapping[str, tuple]) -> ReplicateState:
        """Add one chunk to the statistics named in ``inputs``; returns ``self``.

        Args:
            sample_index: the chunk's global row numbers (``range(start, stop)`` or ``[c]``
                integers): the same rows must get the same numbers however the data are split.
            inputs: ``name -> tuple`` of that statistic's per-sample arguments (``c`` rows each;
                see the statistic's class). Statistics left out see nothing of this chunk.

        Every input is validated before any sum changes: a failed update leaves the state as it
        was.
        """
        fn = f"{self._fn}.update"
        index = sample_indices(sample_index, fn)
        c = index.shape[0]
        if not isinstance(inputs, Mapping):
            raise ValueError(f"{fn}: `inputs` must be a mapping name -> tuple (got {inputs!r})")
        prepared = {}
        for name, args in inputs.items():
            stat = self[name]
            if not isinstance(args, tuple):
                raise ValueError(
                    f"{fn}: `inputs[{name!r}]` must be a tuple of arguments (got "
                    f"{type(args).__name__})"
                )
            n, prep = stat._prepare(*args)
            if n != c:
                raise ValueError(
                    f"{fn}: `inputs[{name!r}]` must have one row per sample index ({c}) (got {n})"
                )
            prepared[name] = prep
        # every input is checked: the sums now add in place (a temporary as large as the
        # EECE's state, zeroed and added once per chunk, cost a fifth of the product itself)
        sums = {name: self._stats[name]._sums for name in prepared}
        totals = np.zeros(self.n_replicates + 1)
        step = block_rows(self.n_replicates)
        counts = np.empty((min(step, c), self.n_replicates), dtype=np.uint8)
        w = np.empty((min(step, c), self.n_replicates + 1))
        w[:, 0] = 1.0
        for start in range(0, c, step):
            stop = min(c, start + step)
            m, rows = stop - start, slice(start, stop)
            weight_block(index[rows], self.n_replicates, self.seed, out=counts[:m])
            block = w[:m]
            block[:, 1:] = counts[:m]
            totals += block.sum(0)
            for name, prep in prepared.items():
                self._stats[name]._accumulate(sums[name], prep, rows, block)
        for name, prep in prepared.items():
            self._stats[name]._add(None, totals, self._stats[name]._points(prep))
        return self

    def weights(self, sample_index: Any) -> torch.Tensor:
        """``[c, R]`` float64 weights of the given rows under this state's seed."""
        index = sample_indices(sample_index, f"{self._fn}.weights")
        return torch.from_numpy(
            weight_block(index, self.n_replicates, self.seed).astype(np.float64)
        )

    def _settings(self) -> dict[str, Any]:
        """What two states must share to merge, and a state dict to load."""
        return {
            "n_replicates": self.n_replicates,
            "seed": self.seed,
            "level": self.level,
            "statistics": {
                name: {"class": type(stat).__name__, **stat._settings()}
                for name, stat in self._stats.items()
            },
        }

    def merge(self, other: ReplicateState) -> ReplicateState:
        """Add another state over other rows (a shard, a worker); returns ``self``.

        ``other`` must be another state with the same statistics (names, classes, settings),
        replicates, seed and level (otherwise its weights would not be those of one pass over
        all rows); its sums are checked like a loaded state's. A refused merge changes nothing.
        """
        fn = f"{self._fn}.merge"
        settings = "n_replicates, seed, level and statistics"
        check_merge_partner(self, other, fn, kind="state", settings=settings)
        arrays = {
            name: stat._merge_checked(other._stats[name], fn, f"other[{name!r}]")
            for name, stat in self._stats.items()
        }
        for name, stat in self._stats.items():
            stat._add_arrays(arrays[name])
        return self

    @property
    def state(self) -> dict[str, torch.Tensor]:
        """Every statistic's live float64 arrays as tensors sharing their memory, keyed
        ``"<statistic>.<array>"`` (what an all-reduce sums; :meth:`state_dict` copies them)."""
        return {
            f"{name}.{key}": tensor
            for name, stat in self._stats.items()
            for key, tensor in stat.state.items()
        }

    def state_dict(self) -> dict[str, Any]:
        """A copy of the state: ``{"settings": {...}, "state": {"<name>.<key>": tensor}}``
        (every statistic's float64 arrays, keyed by its name and the array's)."""
        state = {key: tensor.clone() for key, tensor in self.state.items()}
        return {"settings": copy.deepcopy(self._settings()), "state": state}

    def load_state_dict(self, state_dict: dict[str, Any]) -> ReplicateState:
        """Replace every statistic's state by one from :meth:`state_dict` of a state built the
        same way (same statistics, replicates, seed and level).

        Everything is checked before anything is replaced; a refused state dict changes nothing.
        """
        fn = f"{self._fn}.load_state_dict"
        check_loaded_settings(self._settings(), state_dict, fn)
        state = state_dict["state"]
        name = "state_dict['state']"
        if not isinstance(state, dict):
            raise ValueError(
                f"{fn}: `{name}` must be a dict of tensors (got {type(state).__name__})"
            )
        expected = {f"{n}.{k}" for n, stat in self._stats.items() for k in stat._state_shapes()}
        if set(state) != expected:
            missing, extra = sorted(expected - set(state)), sorted(set(state) - expected)
            raise ValueError(
                f"{fn}: `{name}` must have exactly the keys {sorted(expected)} (got missing "
                f"{missing}, extra {extra})"
            )
        arrays = {}
        for stat_name, stat in self._stats.items():
            prefix = f"{stat_name}."
            own = {
                k: v
                for k, v in state.items()
                if k.startswith(prefix) and k[len(prefix) :] in stat._state_shapes()
            }
            arrays[stat_name] = stat._checked(own, fn, name, prefix)
        for stat_name, stat in self._stats.items():
            stat._set(arrays[stat_name])
        return self

    def compute(self, level: float | None = None) -> dict[str, Interval]:
        """``name -> Interval`` for every statistic that has seen data."""
        level = self.level if level is None else check_level(level, f"{self._fn}.compute")
        return {
            name: stat.compute(level) for name, stat in self._stats.items() if stat.n_samples > 0
        }
