"""bensemble 0.2's documented examples for K-FAC Laplace, PBP and NES run unchanged.

The snippets below are the code blocks of bensemble 0.2's ``docs/user-guide/building-ensembles.md``
(section "Automated Ensemble Search"), executed as written with the names they assume
(``search_space``, ``my_trainer``, ``val_loader``, ``x_test``) defined first; plus the calls its
README and API pages name for the other methods.
"""

from __future__ import annotations

import textwrap

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import bensemble
from bensemble.search import SearchSpace

DOCS_NES_RE = """
from bensemble.search.nes import EvolutionarySearcher

searcher = EvolutionarySearcher(search_space, train_fn=my_trainer, pool_size=50, ensemble_size=5)
# Returns a ready-to-use Ensemble object
ensemble = searcher.search(val_loader)
"""

DOCS_NESBS = """
from bensemble.search.bayesian import NESBayesianSampler

sampler = NESBayesianSampler(search_space, train_fn=my_trainer, pool_size=50, ensemble_size=5)
# Samples a diverse ensemble from the candidate pool using SVGD
ensemble = sampler.sample_svgd(val_loader)
"""

DOCS_OUTPUT = """
# All ensembles return a tensor of shape [M_models, Batch_size, Output_dim]
member_outputs = ensemble.predict_members(x_test)
"""


class _Space(SearchSpace):
    def sample(self):
        return {"width": int(torch.randint(2, 9, (1,)))}

    def mutate(self, config):
        return {"width": max(2, config["width"] + int(torch.randint(-2, 3, (1,))))}

    def build(self, config):
        return nn.Sequential(
            nn.Linear(2, config["width"]), nn.ReLU(), nn.Linear(config["width"], 3)
        )


def _namespace():
    torch.manual_seed(0)
    x = torch.randn(30, 2)
    y = torch.randint(0, 3, (30,))

    def my_trainer(model):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()

    return {
        "search_space": _Space(),
        "my_trainer": my_trainer,
        "val_loader": DataLoader(TensorDataset(x, y), batch_size=10, shuffle=True),
        "x_test": torch.randn(7, 2),
    }


@pytest.mark.parametrize("snippet", [DOCS_NES_RE, DOCS_NESBS], ids=["nes-re", "nesbs"])
def test_docs_search_examples_run_unchanged(snippet) -> None:
    namespace = _namespace()
    exec(textwrap.dedent(snippet), namespace)
    exec(textwrap.dedent(DOCS_OUTPUT), namespace)
    assert namespace["member_outputs"].shape == (5, 7, 3)


def test_bensemble02_laplace_and_pbp_calls_run_unchanged() -> None:
    from bensemble.core.ensemble import Ensemble
    from bensemble.methods.laplace_approximation import LaplaceApproximation
    from bensemble.methods.probabilistic_backpropagation import PBPEngine

    torch.manual_seed(42)
    x = torch.randn(20, 5)
    y = 2 * x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(20, 1)
    loader = DataLoader(TensorDataset(x, y), batch_size=5)
    model = nn.Sequential(nn.Linear(5, 10), nn.ReLU(), nn.Linear(10, 1))
    laplace = LaplaceApproximation(model, likelihood="regression", verbose=False)
    laplace.compute_curvature(loader, num_samples=10)
    assert laplace.is_fitted and len(laplace.kronecker_factors) == 2
    assert Ensemble.from_posterior(laplace, n_members=5).predict_members(x).shape == (5, 20, 1)
    assert len(laplace.sample_models(n_models=2)) == 2
    assert laplace.build_ensemble(n_members=3, temperature=1.0).num_members == 3

    pbp = PBPEngine(layer_sizes=[5, 10, 1], dtype=torch.float64)
    history = pbp.fit(loader, val_loader=loader, num_epochs=1, step_clip=2.0, prior_refresh=1)
    assert {"train_rmse", "train_nlpd", "val_rmse", "val_nlpd"} <= set(history)
    assert float(pbp.noise_variance()) > 0
    assert Ensemble.from_posterior(pbp, n_members=5).predict_members(x).shape == (5, 20, 1)
    assert pbp.build_ensemble(n_members=2).num_members == 2


@pytest.mark.skipif(
    not hasattr(bensemble, "LaplaceApproximation"),
    reason="top-level exports are added to bensemble/__init__.py when the branches merge",
)
def test_top_level_imports() -> None:
    from bensemble import (  # noqa: F401
        EvolutionarySearcher,
        LaplaceApproximation,
        NESBayesianSampler,
        PBPEngine,
        RandomSearcher,
        SearchSpace,
    )
    from bensemble.methods import LaplaceApproximation as Methods

    assert LaplaceApproximation is Methods
