"""Sizes are bounded before anything is allocated (issue 19, item 2, first bullet).

Every count a user passes is compared with the machine's memory first: a count that cannot fit
is a ``ValueError`` naming the argument and stating the true limit (never "must be <= -1"), not a
``RuntimeError`` from the allocator after minutes of work, nor a hang. The machine's memory is
pinned to 1 GiB here (``MEMORY_OVERRIDE``), so the limits are the same on every machine; each
case asks for 10**12 of something, which before the checks either raised the allocator's
RuntimeError or ran until the time limit below.

Files readers and meter constructors have their own tests (test_io.py, battery_meters.py).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sweep_cases import _time_limit  # noqa: E402

import bensemble._scalar_checks as scalar_checks
from bensemble import Ensemble
from bensemble._validation import check_allocation, check_count, machine_memory_bytes

BIG = 10**12
MEMORY = 2**30


@pytest.fixture(autouse=True)
def _one_gib(monkeypatch) -> None:
    monkeypatch.setattr(scalar_checks, "MEMORY_OVERRIDE", MEMORY)


def _dropout_net() -> nn.Module:
    return nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5))


class _Source:
    def sample_models(self, n: int) -> list[nn.Module]:
        return [nn.Linear(2, 2) for _ in range(n)]


def _fitted_pbp():
    from bensemble.methods import PBPEngine

    engine = PBPEngine(layer_sizes=[2, 4, 1])
    x = torch.randn(8, 2, generator=torch.Generator().manual_seed(0))
    engine.fit([(x, x.sum(1))], num_epochs=1)
    return engine


def _space():
    from bensemble.search import SearchSpace

    class Space(SearchSpace):
        def sample(self) -> dict:
            return {}

        def mutate(self, config: dict) -> dict:
            return config

        def build(self, config: dict) -> nn.Module:
            return nn.Linear(2, 2)

    return Space()


def _cases() -> list:
    from bensemble import calibration, conformal, datasets, layers, methods, metrics, search, utils

    x2 = torch.randn(10, 2, generator=torch.Generator().manual_seed(1))
    y2 = torch.arange(10) % 2
    cases: dict[str, tuple[Callable[[], object], str]] = {
        "bernoulli_mask": (lambda: layers.bernoulli_mask((BIG,), 0.5), "shape"),
        "BayesianLinear.out": (lambda: layers.BayesianLinear(10, BIG), "out_features"),
        "BayesianLinear.in": (lambda: layers.BayesianLinear(BIG, 10), "in_features"),
        "BayesianConv2d": (lambda: layers.BayesianConv2d(100, 10**6, 3), "out_channels"),
        "DropConnectLinear": (lambda: layers.DropConnectLinear(10, BIG), "out_features"),
        "StochasticMembers": (
            lambda: Ensemble.from_stochastic(_dropout_net(), num_samples=BIG),
            "num_samples",
        ),
        "Ensemble.from_posterior": (
            lambda: Ensemble.from_posterior(_Source(), n_members=BIG),
            "n_members",
        ),
        "PBPNet": (lambda: methods.PBPNet([BIG, 10, 1]), "layer_sizes"),
        "ProbLinear": (lambda: methods.ProbLinear(10, BIG), "out_features"),
        "PBPEngine.sample_models": (lambda: _fitted_pbp().sample_models(BIG), "n_models"),
        "make_mlp": (lambda: methods.make_mlp(BIG, 3), "in_features"),
        "gaussian_members": (
            lambda: methods.gaussian_members(torch.full((4,), 0.5), torch.full((4,), 0.01), BIG),
            "n",
        ),
        "BayesianLogisticRegression": (
            lambda: methods.BayesianLogisticRegression(n_samples=BIG, burn_in=1).fit(x2, y2),
            "n_samples",
        ),
        "RandomForestMembers": (
            lambda: methods.RandomForestMembers(n_estimators=BIG).fit(x2, y2),
            "n_estimators",
        ),
        "train_ensemble": (
            lambda: methods.train_ensemble(
                lambda: nn.Linear(2, 2), (x2, y2), n_members=BIG, epochs=1, progress=False
            ),
            "n_members",
        ),
        "VectorScaling": (lambda: calibration.VectorScaling(BIG), "num_classes"),
        "MatrixScaling": (lambda: calibration.MatrixScaling(10**6), "num_classes"),
        "class_conditional_quantiles": (
            lambda: conformal.class_conditional_quantiles(
                torch.rand(5), torch.zeros(5, dtype=torch.long), BIG, 0.1
            ),
            "num_classes",
        ),
        "make_toy_gaussians": (lambda: datasets.make_toy_gaussians(BIG), "n"),
        "make_toy_grid": (lambda: datasets.make_toy_grid(10**7), "n_per_axis"),
        "predict_with_uncertainty": (
            lambda: utils.predict_with_uncertainty(
                nn.Sequential(layers.BayesianLinear(2, 2)), x2, num_samples=BIG
            ),
            "num_samples",
        ),
        "expected_epistemic_calibration_error": (
            lambda: metrics.expected_epistemic_calibration_error(
                torch.rand(3, 10, 2).softmax(-1), y2, n_bins=2, n_seeds=BIG
            ),
            "n_seeds",
        ),
        "RandomSearcher": (
            lambda: search.RandomSearcher(_space(), pool_size=BIG, train_fn=lambda m: None),
            "pool_size",
        ),
        "NESBayesianSampler": (
            lambda: search.NESBayesianSampler(
                _space(), lambda m: None, pool_size=10**5, ensemble_size=10**4
            ),
            "ensemble_size",
        ),
    }
    return [pytest.param(call, name, id=key) for key, (call, name) in cases.items()]


@pytest.mark.parametrize("call, name", _cases())
def test_a_count_beyond_memory_is_refused_first(call: Callable[[], object], name: str) -> None:
    with _time_limit(20.0), pytest.raises(ValueError) as info:
        call()
    message = str(info.value)
    assert f"`{name}`" in message, message
    limit = re.search(r"must be <= (-?\d+)", message)
    assert limit is None or int(limit.group(1)) >= 1, f"a limit below 1 stated: {message}"


def test_classwise_calibration_error_never_states_a_negative_limit() -> None:
    """Too many classes for even one bin: the message blames the classes, not "<= -1"."""
    from bensemble.metrics import classwise_calibration_error

    k = 2**25
    probs = torch.full((1, k), 1.0 / k)
    with pytest.raises(ValueError, match="`probs` must have at most") as info:
        classwise_calibration_error(probs, torch.zeros(1, dtype=torch.long), n_bins=2)
    assert "<= -1" not in str(info.value)


@pytest.mark.parametrize("per_count, itemsize", [(1, 8), (1000, 4), (3, 1)])
def test_the_stated_limit_is_the_true_limit(per_count: int, itemsize: int) -> None:
    with pytest.raises(ValueError) as info:
        check_allocation("f", "n", BIG, per_count=per_count, itemsize=itemsize)
    limit = int(re.search(r"must be <= (\d+)", str(info.value)).group(1))
    assert check_allocation("f", "n", limit, per_count=per_count, itemsize=itemsize) == limit
    with pytest.raises(ValueError):
        check_allocation("f", "n", limit + 1, per_count=per_count, itemsize=itemsize)


def test_when_one_unit_cannot_fit_the_other_sizes_are_named() -> None:
    with pytest.raises(ValueError, match="`in_features` must be smaller") as info:
        check_allocation("f", "out_features", 1, per_count=MEMORY, itemsize=4, others="in_features")
    assert "<= 0" not in str(info.value)


def test_check_count_checks_the_type_first() -> None:
    with pytest.raises(ValueError, match=r"`n` must be an integer >= 1"):
        check_count(1.5, "n", "f")
    assert check_count(3, "n", "f", per_count=10) == 3


def test_machine_memory_is_physical_memory_without_an_override(monkeypatch) -> None:
    monkeypatch.setattr(scalar_checks, "MEMORY_OVERRIDE", None)
    memory = machine_memory_bytes()
    assert 2**26 <= memory <= 2**50
    assert memory == machine_memory_bytes()  # the same answer on a busy and a quiet machine
