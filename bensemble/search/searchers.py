"""Neural ensemble search by random search and regularised evolution (Zaidi et al. 2021).

Both searchers train a pool of architectures from a :class:`~bensemble.search.space.SearchSpace`
with the caller's ``train_fn`` and return the ensemble chosen by greedy forward selection
(:mod:`bensemble.search.selection`). Each pool member's validation predictions are computed once,
right after it is trained, and every selection works on those cached predictions.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Iterator

import torch
from torch import nn

from bensemble._seeds import DEFAULT_SEED, derived_seed
from bensemble._validation import (
    MIN_MEMBER_BYTES,
    check_allocation,
    check_count,
    check_generator,
    check_positive_int,
)
from bensemble.core.ensemble import Ensemble
from bensemble.methods._member_training import forked_rng
from bensemble.search.selection import (
    CachedCriterion,
    ValidationSet,
    classification_nll_criterion,
    forward_select,
    select_on_predictions,
)
from bensemble.search.space import SearchSpace, check_space, mutate_config, sample_config

__all__ = ["EvolutionarySearcher", "RandomSearcher"]

# What a search sets; a failed search restores the previous values.
_RESULTS = ("pool_", "configs_", "pool_predictions_", "selected_indices_")
_MISSING = object()


class _PoolSearch:
    """Shared validation, training and cached selection of the searchers."""

    def _setup(self, fn, space, pool_size, ensemble_size, train_fn, device, criterion, gen, seed):
        self.space = check_space(space, fn)
        # at least one network object per pool member before any is built
        self.pool_size = check_count(pool_size, "pool_size", fn, itemsize=MIN_MEMBER_BYTES)
        self.ensemble_size = check_positive_int(ensemble_size, "ensemble_size", fn)
        if self.ensemble_size > self.pool_size:
            raise ValueError(
                f"{fn}: `ensemble_size` must be at most `pool_size` ({self.pool_size}) "
                f"(got {self.ensemble_size})"
            )
        if train_fn is None or not callable(train_fn):
            raise ValueError(
                f"{fn}: `train_fn` must be a callable that trains a model in place "
                f"(got {type(train_fn).__name__})"
            )
        self.train_fn = train_fn
        self.device = None if device is None else torch.device(device)
        if criterion is not None and not callable(criterion):
            raise ValueError(f"{fn}: `criterion` must be callable (got {type(criterion).__name__})")
        self.criterion = classification_nll_criterion if criterion is None else criterion
        check_generator(gen, seed, fn)  # validates both and the either/or rule
        self.seed = seed
        self._generator_arg = gen
        self.generator = self._source("pool")

    def _source(self, stage: str) -> torch.Generator | None:
        """The random source of one public call (``stage``): the caller's ``generator`` (a
        stream that advances), else a generator seeded from ``seed`` afresh for each call (the
        pool with ``seed`` itself, later stages with seeds derived from it), so identical calls
        agree; ``seed=None``: torch's global random state."""
        if self._generator_arg is not None:
            return self._generator_arg
        if self.seed is None:
            return None
        seed = int(self.seed) if stage == "pool" else derived_seed(self.seed, stage)
        return torch.Generator().manual_seed(seed)

    def _train(self, config: dict) -> nn.Module:
        """Build and train one pool member.

        With a ``generator`` / ``seed``, the member is built and trained under torch's global
        RNG seeded from it (and restored afterwards), so initial weights and any randomness of
        ``train_fn`` (shuffling, dropout) are reproducible: the whole search follows one seed.
        """
        if self.generator is None:
            return self._build_and_train(config)
        seed = int(torch.randint(0, 2**62, (1,), generator=self.generator))
        with forked_rng(seed):
            return self._build_and_train(config)

    def _build_and_train(self, config: dict) -> nn.Module:
        model = self.space.build(config)
        if not isinstance(model, nn.Module):
            raise ValueError(
                f"{type(self).__name__}: `space.build` must return an nn.Module "
                f"(got {type(model).__name__})"
            )
        if self.device is not None:  # our own freshly built model, never the caller's
            model = model.to(self.device)
        self.train_fn(model)
        return model

    @contextlib.contextmanager
    def _keeping_the_previous_search(self) -> Iterator[None]:
        """A search that raises (bad data, a failing ``train_fn``) leaves the results of the
        previous search in place, not a half-built pool."""
        saved = {key: self.__dict__.get(key, _MISSING) for key in _RESULTS}
        try:
            yield
        except BaseException:
            for key, value in saved.items():
                if value is _MISSING:
                    self.__dict__.pop(key, None)
                else:
                    self.__dict__[key] = value
            raise

    def _cache(self, data: ValidationSet | None, model: nn.Module) -> torch.Tensor | None:
        if data is None or not isinstance(self.criterion, CachedCriterion):
            return None
        preds = data.predict(model, self.criterion.transform, self.device)
        # the cached [P, N, *] float64 predictions of the whole pool must fit in memory
        check_allocation(
            type(self).__name__, "pool_size", self.pool_size, per_count=2 * preds.numel()
        )
        return preds

    def _select(self, models, preds, data: ValidationSet, size: int) -> list[int]:
        """Indices of ``models`` chosen by forward selection (cached when possible)."""
        if isinstance(self.criterion, CachedCriterion):
            return select_on_predictions(torch.stack(preds), data.targets, size, self.criterion)
        chosen = forward_select(models, data, size, self.device, self.criterion)
        ids = {id(m): i for i, m in enumerate(models)}
        return [ids[id(m)] for m in chosen]

    def _finish(self, val_loader_shift, data: ValidationSet) -> Ensemble:
        preds = self.pool_predictions_
        if val_loader_shift is not None:
            data = ValidationSet(val_loader_shift, type(self).__name__ + ".search")
            preds = [self._cache(data, m) for m in self.pool_]
        self.selected_indices_ = self._select(self.pool_, preds, data, self.ensemble_size)
        return Ensemble.from_models([self.pool_[i] for i in self.selected_indices_])


class RandomSearcher(_PoolSearch):
    """NES-RS: a pool of randomly sampled, independently trained networks, then ForwardSelect.

    Args:
        space: the :class:`SearchSpace`.
        pool_size: networks to train (``P``).
        ensemble_size: members to select (``M <= P``).
        train_fn: ``train_fn(model)`` trains a model in place; required.
        device: if given, freshly built networks are moved there before training. Models are
            otherwise never moved; validation batches go to each model's device.
        criterion: lower-is-better ``criterion(members, val_loader, device)``; default
            :data:`~bensemble.search.selection.classification_nll_criterion`.
        generator, seed: random source passed to ``space.sample`` when it accepts one (else
            ``space.sample`` runs under torch's global RNG seeded from it); it also seeds
            torch's global RNG while each member is built and trained (restored afterwards), so
            one seed reproduces the whole search. Default ``seed=0``: each :meth:`search`
            restarts from it, so identical searches agree; a ``generator`` is a stream that
            advances; ``seed=None`` leaves everything to torch's global random state.

    Attributes (after :meth:`search`): ``pool_``, ``configs_``, ``pool_predictions_`` (each
    member's cached validation predictions) and ``selected_indices_``.
    """

    def __init__(
        self,
        space: SearchSpace,
        pool_size: int = 50,
        ensemble_size: int = 5,
        train_fn: Callable[[nn.Module], None] | None = None,
        device=None,
        criterion: Callable | None = None,
        *,
        generator: torch.Generator | None = None,
        seed: int | None = DEFAULT_SEED,
    ) -> None:
        self._setup(
            "RandomSearcher", space, pool_size, ensemble_size, train_fn, device, criterion,
            generator, seed,
        )  # fmt: skip

    def search(self, val_loader, val_loader_shift=None) -> Ensemble:
        """Train the pool and return the selected :class:`~bensemble.core.Ensemble`.

        ``val_loader_shift``, when given, replaces ``val_loader`` for the final selection
        (selection under dataset shift).
        """
        with self._keeping_the_previous_search():
            data = ValidationSet(val_loader, "RandomSearcher.search")  # checked before training
            self.generator = self._source("pool")
            self.pool_, self.configs_, self.pool_predictions_ = [], [], []
            for _ in range(self.pool_size):
                config = sample_config(self.space, self.generator)
                model = self._train(config)
                self.pool_.append(model)
                self.configs_.append(config)
                self.pool_predictions_.append(self._cache(data, model))
            return self._finish(val_loader_shift, data)


class EvolutionarySearcher(_PoolSearch):
    """NES-RE: regularised evolution with ensemble-aware parent selection, then ForwardSelect.

    A population of ``population_size`` networks evolves: ForwardSelect picks
    ``num_parent_candidates`` of them, one is drawn uniformly (from ``generator``) as the parent,
    its mutated configuration is trained and joins the population, and the oldest member leaves.
    Every trained network joins the pool, until ``pool_size``. Arguments as
    :class:`RandomSearcher`, plus ``population_size`` and ``num_parent_candidates``.
    """

    def __init__(
        self,
        space: SearchSpace,
        pool_size: int = 50,
        ensemble_size: int = 5,
        population_size: int = 10,
        num_parent_candidates: int = 3,
        train_fn: Callable[[nn.Module], None] | None = None,
        device=None,
        criterion: Callable | None = None,
        *,
        generator: torch.Generator | None = None,
        seed: int | None = DEFAULT_SEED,
    ) -> None:
        fn = "EvolutionarySearcher"
        self._setup(
            fn, space, pool_size, ensemble_size, train_fn, device, criterion, generator, seed
        )
        self.population_size = check_positive_int(population_size, "population_size", fn)
        if self.population_size > self.pool_size:
            raise ValueError(
                f"{fn}: `population_size` must be at most `pool_size` ({self.pool_size}) "
                f"(got {self.population_size})"
            )
        self.num_parent_candidates = check_positive_int(
            num_parent_candidates, "num_parent_candidates", fn
        )
        if self.num_parent_candidates > self.population_size:
            raise ValueError(
                f"{fn}: `num_parent_candidates` must be at most `population_size` "
                f"({self.population_size}) (got {self.num_parent_candidates})"
            )

    def search(self, val_loader, val_loader_shift=None) -> Ensemble:
        """Evolve the pool and return the selected :class:`~bensemble.core.Ensemble`."""
        with self._keeping_the_previous_search():
            data = ValidationSet(
                val_loader, "EvolutionarySearcher.search"
            )  # checked before training
            self.generator = self._source("pool")
            self.pool_, self.configs_, self.pool_predictions_ = [], [], []

            def add(config: dict) -> int:
                model = self._train(config)
                self.pool_.append(model)
                self.configs_.append(config)
                self.pool_predictions_.append(self._cache(data, model))
                return len(self.pool_) - 1

            population: deque[int] = deque(
                add(sample_config(self.space, self.generator)) for _ in range(self.population_size)
            )
            while len(self.pool_) < self.pool_size:
                members = list(population)
                picks = self._select(
                    [self.pool_[i] for i in members],
                    [self.pool_predictions_[i] for i in members],
                    data,
                    self.num_parent_candidates,
                )
                draw = int(torch.randint(len(picks), (1,), generator=self.generator))
                parent = members[picks[draw]]
                population.append(
                    add(mutate_config(self.space, self.configs_[parent], self.generator))
                )
                population.popleft()
            return self._finish(val_loader_shift, data)
