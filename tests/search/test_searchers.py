"""NES-RS, NES-RE and the Bayesian sampler on a toy search space."""

from __future__ import annotations

import random

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from bensemble.core.ensemble import Ensemble
from bensemble.search import (
    EvolutionarySearcher,
    NESBayesianSampler,
    RandomSearcher,
    SearchSpace,
    classification_nll_criterion,
)
from bensemble.search.selection import ValidationSet


class ToySpace(SearchSpace):
    """Hidden width and activation of a one-hidden-layer MLP; draws from the given generator."""

    widths = (2, 4, 8, 16)
    acts = ("relu", "tanh")

    def sample(self, generator=None):
        i = int(torch.randint(len(self.widths), (1,), generator=generator))
        j = int(torch.randint(len(self.acts), (1,), generator=generator))
        return {
            "width": self.widths[i],
            "act": self.acts[j],
            "seed": int(torch.randint(10**6, (1,), generator=generator)),
        }

    def mutate(self, config, generator=None):
        config["width"] = self.widths[
            int(torch.randint(len(self.widths), (1,), generator=generator))
        ]
        return config  # edits in place on purpose: the searchers must hand it a copy

    def build(self, config):
        torch.manual_seed(config["seed"])
        act = nn.ReLU() if config["act"] == "relu" else nn.Tanh()
        return nn.Sequential(nn.Linear(2, config["width"]), act, nn.Linear(config["width"], 3))


def _data(n=60, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, generator=g)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()
    return x, y


X, Y = _data(90)
VAL = DataLoader(TensorDataset(*_data(60, 1)), batch_size=20, shuffle=True)


class Trainer:
    def __init__(self, steps=15):
        self.calls = 0
        self.steps = steps

    def __call__(self, model):
        self.calls += 1
        opt = torch.optim.Adam(model.parameters(), lr=0.05)
        for _ in range(self.steps):
            opt.zero_grad()
            nn.functional.cross_entropy(model(X), Y).backward()
            opt.step()


def _indices(ensemble, pool):
    return [next(i for i, p in enumerate(pool) if p is m) for m in ensemble.member_modules]


def test_random_search_is_reproducible_and_selects_from_cached_predictions() -> None:
    a = RandomSearcher(ToySpace(), pool_size=6, ensemble_size=3, train_fn=Trainer(), seed=0)
    b = RandomSearcher(ToySpace(), pool_size=6, ensemble_size=3, train_fn=Trainer(), seed=0)
    ens_a, ens_b = a.search(VAL), b.search(VAL)
    assert _indices(ens_b, b.pool_) == b.selected_indices_
    assert isinstance(ens_a, Ensemble) and ens_a.num_members == 3
    assert a.configs_ == b.configs_ and a.selected_indices_ == b.selected_indices_
    assert _indices(ens_a, a.pool_) == a.selected_indices_
    data = ValidationSet(VAL)
    for cached, model in zip(a.pool_predictions_, a.pool_):
        torch.testing.assert_close(cached.sum(1), torch.ones(60, dtype=torch.float64))
        assert cached.shape == data.predict(model, "softmax").shape
    assert len(a.pool_predictions_) == 6 and a.pool_predictions_[0].shape == (60, 3)
    assert data.targets.shape == (60,)


def test_evolution_keeps_configs_and_uses_shift_loader() -> None:
    trainer = Trainer()
    searcher = EvolutionarySearcher(
        ToySpace(), pool_size=7, ensemble_size=2, population_size=3, num_parent_candidates=2,
        train_fn=trainer, generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    shift = [(_data(40, 7)[0] + 3.0, _data(40, 7)[1])]
    ens = searcher.search(VAL, val_loader_shift=shift)
    assert trainer.calls == 7 and len(searcher.pool_) == 7
    assert ens.num_members == 2
    # the shift loader decided the final selection
    from bensemble.search.selection import forward_select

    expected = forward_select(searcher.pool_, shift, 2, criterion=classification_nll_criterion)
    assert [m for m in ens.member_modules] == expected
    # mutate edits its argument in place, but the stored parents were copies
    widths = {c["width"] for c in searcher.configs_}
    assert widths <= set(ToySpace.widths)


def test_train_fn_is_required_and_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="`train_fn` must be a callable"):
        RandomSearcher(ToySpace(), pool_size=4, ensemble_size=2)
    with pytest.raises(ValueError, match="`train_fn` must be a callable"):
        EvolutionarySearcher(ToySpace(), pool_size=4, ensemble_size=2, population_size=2)
    with pytest.raises(ValueError, match="`ensemble_size` must be at most `pool_size`"):
        RandomSearcher(ToySpace(), pool_size=2, ensemble_size=3, train_fn=Trainer())
    with pytest.raises(ValueError, match="`num_parent_candidates` must be at most"):
        EvolutionarySearcher(
            ToySpace(), pool_size=5, population_size=2, num_parent_candidates=3, train_fn=Trainer()
        )
    with pytest.raises(ValueError, match="`space` must be a SearchSpace"):
        RandomSearcher(object(), train_fn=Trainer())
    with pytest.raises(ValueError, match="`temperature`"):
        NESBayesianSampler(ToySpace(), Trainer(), temperature=0.0)


def test_bayesian_sampler_trains_once_and_is_reproducible() -> None:
    trainer = Trainer()
    sampler = NESBayesianSampler(ToySpace(), trainer, pool_size=8, ensemble_size=3, seed=1)
    mc = sampler.sample_mc(VAL)
    svgd = sampler.sample_svgd(VAL)
    assert trainer.calls == 8  # the pool is trained once for both
    assert mc.num_members == 3 and svgd.num_members == 3
    assert len(set(sampler.selected_indices_)) == 3
    assert sampler.particles_.shape == (3, 8)
    torch.testing.assert_close(sampler.particles_.sum(1), torch.ones(3, dtype=torch.float64))
    again = NESBayesianSampler(ToySpace(), Trainer(), pool_size=8, ensemble_size=3, seed=1)
    again.sample_mc(VAL)
    first = again.selected_indices_
    assert first == _indices(mc, sampler.pool_)


def test_svgd_moves_particles_toward_low_loss_and_repels() -> None:
    sampler = NESBayesianSampler(
        ToySpace(), Trainer(steps=30), pool_size=10, ensemble_size=3, svgd_steps=200, svgd_lr=1.0,
        temperature=0.05, seed=3,
    )  # fmt: skip
    sampler.sample_svgd(VAL)
    scores = sampler.scores_
    chosen = sampler.selected_indices_
    # the chosen members are among the better half of the pool
    assert float(scores[chosen].mean()) <= float(scores.median())
    sampler.diversity_weight = 0.0
    sampler.sample_svgd(VAL)
    assert len(set(sampler.selected_indices_)) == 3  # still distinct members


def test_nan_member_gets_zero_posterior() -> None:
    class NaNSpace(ToySpace):
        built = 0

        def build(self, config):
            model = super().build(config)
            self.built += 1
            if self.built == 1:
                with torch.no_grad():
                    model[0].weight.fill_(float("nan"))
            return model

    sampler = NESBayesianSampler(NaNSpace(), lambda m: None, pool_size=5, ensemble_size=2, seed=0)
    sampler.build_pool(VAL)
    assert bool(torch.isnan(sampler.scores_[0]))
    with pytest.warns(RuntimeWarning, match="scored NaN"):
        pi = sampler.posterior()
    assert float(pi[0]) == 0.0
    with pytest.warns(RuntimeWarning, match="scored NaN"):
        sampler.sample_mc(VAL)
    assert 0 not in sampler.selected_indices_


def test_python_random_state_is_not_used() -> None:
    random.seed(0)
    a = RandomSearcher(ToySpace(), pool_size=4, ensemble_size=2, train_fn=Trainer(), seed=2)
    a.search(VAL)
    random.seed(1)
    b = RandomSearcher(ToySpace(), pool_size=4, ensemble_size=2, train_fn=Trainer(), seed=2)
    b.search(VAL)
    assert a.selected_indices_ == b.selected_indices_


# ---------------------------------------------------------------- issue 19: inputs and seeds
class _GlobalRngSpace(SearchSpace):
    """Builds with torch's default initialisation (global RNG), as most user spaces do."""

    def sample(self, generator=None):
        return {"width": 4}

    def mutate(self, config, generator=None):
        return dict(config)

    def build(self, config):
        return nn.Sequential(
            nn.Linear(2, config["width"]), nn.ReLU(), nn.Linear(config["width"], 3)
        )


def _noisy_train(model: nn.Module) -> None:
    with torch.no_grad():  # a "training" step that draws from the global RNG
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))


@pytest.mark.parametrize("cls", [RandomSearcher, EvolutionarySearcher])
def test_one_seed_reproduces_a_search_and_leaves_the_global_rng_alone(cls) -> None:
    kw = {"population_size": 2, "num_parent_candidates": 1} if cls is EvolutionarySearcher else {}
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    runs = []
    for _ in range(2):
        searcher = cls(_GlobalRngSpace(), 4, 2, train_fn=_noisy_train, seed=0, **kw)
        ensemble = searcher.search([(X, Y)])
        runs.append((searcher.selected_indices_, ensemble.predict_members(X[:5])))
    assert runs[0][0] == runs[1][0]
    assert torch.equal(runs[0][1], runs[1][1])
    assert torch.equal(torch.random.get_rng_state(), state), "the search moved the global RNG"


@pytest.mark.parametrize(
    "loader, what",
    [
        pytest.param(
            [(X.clone().index_fill_(0, torch.tensor([3]), float("nan")), Y)], "finite", id="nan-x"
        ),
        pytest.param(
            [(X, Y.double().index_fill_(0, torch.tensor([3]), float("inf")))], "finite", id="inf-y"
        ),
        pytest.param([(X[:0], Y[:0])], "at least one sample", id="no-rows"),
        pytest.param([], "at least one batch", id="no-batches"),
    ],
)
def test_bad_validation_data_is_refused_before_any_training(loader, what) -> None:
    trained = []
    for searcher in (
        RandomSearcher(ToySpace(), 3, 2, train_fn=trained.append, seed=0),
        NESBayesianSampler(ToySpace(), trained.append, pool_size=3, ensemble_size=2, seed=0),
    ):
        run = searcher.search if hasattr(searcher, "search") else searcher.build_pool
        with pytest.raises(ValueError, match=f"`val_loader` must yield {what}|`val_loader` must"):
            run(loader)
    assert not trained


def test_cached_pool_predictions_beyond_memory_are_refused(monkeypatch) -> None:
    import bensemble._scalar_checks as checks

    monkeypatch.setattr(checks, "MEMORY_OVERRIDE", 20_000)  # bytes
    searcher = RandomSearcher(ToySpace(), pool_size=30, ensemble_size=2, train_fn=lambda m: None)
    with pytest.raises(ValueError, match=r"`pool_size` must be <= \d+"):
        searcher.search([(X, Y)])


def test_a_failed_search_keeps_the_previous_results() -> None:
    calls = []

    def train(model: nn.Module) -> None:
        calls.append(model)
        if len(calls) > 3:
            raise RuntimeError("training diverged")

    searcher = RandomSearcher(ToySpace(), 3, 2, train_fn=train, seed=0)
    searcher.search([(X, Y)])
    before = (searcher.pool_, searcher.selected_indices_, searcher.pool_predictions_)
    with pytest.raises(RuntimeError, match="diverged"):
        searcher.search([(X, Y)])
    assert (searcher.pool_, searcher.selected_indices_, searcher.pool_predictions_) == before
