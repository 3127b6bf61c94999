"""The members of a :class:`~bensemble.core.StochasticMembers`: per-member seeds, saved and cached.

Member ``m`` of a stochastic ensemble is the function its seed ``m`` draws. The seeds are the
ensemble's state: they travel in the ``state_dict`` (as extra state, plain ints that
``torch.load(weights_only=True)`` reads), in pickles, and define the per-member generators,
cached between calls.
"""

from __future__ import annotations

from typing import Any

import torch

from bensemble.core._adapter import MemberAdapter
from bensemble.core._stochastic import draw_seeds, pass_generators

__all__ = ["SeededMembers"]


class SeededMembers(MemberAdapter):
    """Base of member adapters whose members are per-member seeds (``_seeds``, ``num_samples``,
    ``mask``, ``generator``, ``kinds`` are set by the subclass)."""

    _seeds: list[int] | None
    num_samples: int

    def __setstate__(self, state: dict) -> None:
        """Objects pickled before members were fixed get seeds (and flags) on loading."""
        super().__setstate__(state)
        if "_seeds" not in self.__dict__:
            frozen = self.__dict__.pop("_frozen_seeds", None)
            self._fresh = self.mask == "per_sample" and self.generator is None
            self._seeds = (
                None if self._fresh else frozen or draw_seeds(self.num_samples, self.generator)
            )
            self._functional_dropout = None if "dropout" in self.kinds else False

    # ------------------------------------------------------------------ saved state
    def get_extra_state(self) -> dict:
        """The members themselves (per-member seeds), saved in the ``state_dict``.

        Loading a state into a :class:`StochasticMembers` of the same model gives the same
        ``M`` hypotheses, whatever seed it was built with (plain ints: ``torch.load`` with
        ``weights_only=True`` reads them).
        """
        seeds = None if self._seeds is None else [int(s) for s in self._seeds]
        return {"seeds": seeds, "num_samples": int(self.num_samples)}

    def set_extra_state(self, state: Any) -> None:
        fn = "StochasticMembers.load_state_dict"
        ok = isinstance(state, dict) and isinstance(state.get("num_samples"), int)
        seeds = state.get("seeds") if ok else None
        if ok and seeds is not None:
            ok = (
                isinstance(seeds, (list, tuple))
                and len(seeds) == state["num_samples"]
                and all(isinstance(v, int) and 0 <= v < 2**63 for v in seeds)
            )
        if not ok:
            raise ValueError(
                f"{fn}: the saved members must be {{'seeds': [int] * num_samples, "
                f"'num_samples': int}} (got {state!r:.200})"
            )
        if state["num_samples"] != self.num_samples:
            raise ValueError(
                f"{fn}: the saved state must hold num_samples={self.num_samples} members "
                f"(got {state['num_samples']})"
            )
        self._seeds = None if seeds is None else [int(v) for v in seeds]
        self._fresh = seeds is None

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, errors
    ) -> None:
        """States saved before the members were part of the ``state_dict`` still load."""
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, errors
        )
        key = prefix + "_extra_state"
        if key not in state_dict and key in missing_keys:
            missing_keys.remove(key)

    def _generators(self, seeds: list[int], device: torch.device) -> list[torch.Generator]:
        """One generator per member, in its seeded state (cached: resetting a generator's state
        is ~40x cheaper than seeding a new one)."""
        key = (str(device), tuple(seeds))
        cache = self.__dict__.get("_gen_cache")
        if cache is None or cache[0] != key:
            gens = pass_generators(seeds, device)
            cache = (key, gens, [g.get_state() for g in gens])
            self.__dict__["_gen_cache"] = cache
        else:
            for g, state in zip(cache[1], cache[2]):
                g.set_state(state)
        return cache[1]

    def __getstate__(self) -> dict:
        state = super().__getstate__() if hasattr(super(), "__getstate__") else self.__dict__
        state = dict(state)
        state.pop("_gen_cache", None)  # rebuilt on the first call
        return state
