"""A stochastic ensemble is a fixed set of M hypotheses, whatever the batching.

Defect 2 of issue 10: ``Ensemble.from_stochastic`` used to draw new hypotheses on every call, so
a test set predicted in batches mixed hypotheses inside one member.
"""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from bensemble.core import Ensemble, StochasticMembers
from bensemble.layers import BayesianLinear, DropConnectLinear
from bensemble.layers.conv import BayesianConv2d
from bensemble.methods.laplace import LastLayerLaplace

N = 23
SPLITS = [1, 7, N]
# batch size alone changes torch's matrix products by a few float32 ulps
TOL = 1e-6


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


class _Functional(nn.Module):
    """Functional dropout tied to the training flag (no dropout module)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(6, 16), nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(F.dropout(F.relu(self.a(x)), 0.4, training=self.training))


class _FunctionalBlock(nn.Module):
    """A block with always-on functional dropout, placed before a dropout module."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(6, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(F.relu(self.a(x)), 0.4, training=True)


def _seq(*layers: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*layers)


def _models():
    """(id, model, input shape, mode) for every stochastic kind."""
    flat = (N, 6)
    img = (N, 2, 4, 4)
    return [
        (
            "Dropout",
            lambda: _seq(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.4), nn.Linear(16, 3)),
            flat,
            "auto",
        ),
        (
            "AlphaDropout",
            lambda: _seq(nn.Linear(6, 16), nn.SELU(), nn.AlphaDropout(0.3), nn.Linear(16, 3)),
            flat,
            "auto",
        ),
        (
            "Dropout1d",
            lambda: _seq(
                nn.Conv1d(2, 4, 3, padding=1), nn.Dropout1d(0.4), nn.Flatten(), nn.Linear(16, 3)
            ),
            (N, 2, 4),
            "auto",
        ),
        (
            "Dropout2d",
            lambda: _seq(
                nn.Conv2d(2, 4, 3, padding=1), nn.Dropout2d(0.4), nn.Flatten(), nn.Linear(64, 3)
            ),
            img,
            "auto",
        ),
        (
            "Dropout3d",
            lambda: _seq(
                nn.Conv3d(1, 3, 3, padding=1), nn.Dropout3d(0.4), nn.Flatten(), nn.Linear(3 * 32, 3)
            ),
            (N, 1, 2, 4, 4),
            "auto",
        ),
        (
            "FeatureAlphaDropout",
            lambda: _seq(
                nn.Conv2d(2, 4, 3, padding=1),
                nn.SELU(),
                nn.FeatureAlphaDropout(0.3),
                nn.Flatten(),
                nn.Linear(64, 3),
            ),
            img,
            "auto",
        ),
        ("functional", lambda: _seq(_Functional()), flat, "dropout"),
        (
            "functional+module",
            lambda: _seq(_FunctionalBlock(), nn.Dropout(0.2), nn.Linear(16, 3)),
            flat,
            "auto",
        ),
        (
            "DropConnect",
            lambda: _seq(nn.Linear(6, 16), nn.ReLU(), DropConnectLinear(16, 3, p=0.4)),
            flat,
            "auto",
        ),
        (
            "BayesianLinear",
            lambda: _seq(BayesianLinear(6, 16), nn.ReLU(), BayesianLinear(16, 3)),
            flat,
            "auto",
        ),
        (
            "BayesianConv2d",
            lambda: _seq(BayesianConv2d(2, 3, 3, padding=1), nn.Flatten(), nn.Linear(48, 3)),
            img,
            "auto",
        ),
        (
            "BN+Dropout+DropConnect",
            lambda: _seq(
                nn.Linear(6, 16),
                nn.BatchNorm1d(16),
                nn.ReLU(),
                nn.Dropout(0.3),
                DropConnectLinear(16, 3, p=0.3),
            ),
            flat,
            "auto",
        ),
    ]


CASES = [pytest.param(make, shape, mode, id=name) for name, make, shape, mode in _models()]


def _batched(ens: Ensemble, x: torch.Tensor, size: int) -> torch.Tensor:
    return torch.cat([ens.predict_members(x[i : i + size]) for i in range(0, len(x), size)], 1)


@pytest.mark.parametrize(("make", "shape", "mode"), CASES)
def test_batched_equals_one_shot(make, shape, mode: str) -> None:
    model = make()
    x = torch.randn(*shape, generator=_gen(1))
    ens = Ensemble.from_stochastic(model, 5, mode=mode, generator=_gen(2))
    whole = ens.predict_members(x)
    assert float(whole.std(0).max()) > 0  # the members differ
    for size in SPLITS:
        torch.testing.assert_close(_batched(ens, x, size), whole, rtol=0, atol=TOL)
        torch.testing.assert_close(ens.predict_members(x, batch_size=size), whole, rtol=0, atol=TOL)
    # the same function on every call, and a fresh ensemble from the same seed is the same
    assert torch.equal(ens.predict_members(x), whole)
    again = Ensemble.from_stochastic(model, 5, mode=mode, generator=_gen(2))
    assert torch.equal(again.predict_members(x), whole)


def test_laplace_posterior_members_batched_equals_one_shot() -> None:
    net = _seq(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    xt, yt = torch.randn(60, 6, generator=_gen(3)), torch.randint(0, 3, (60,), generator=_gen(4))
    laplace = LastLayerLaplace(net, prior_precision=1.0).fit((xt, yt))
    ens = Ensemble.from_posterior(laplace, 6, generator=_gen(5))
    x = torch.randn(N, 6, generator=_gen(1))
    whole = ens.predict_members(x)
    for size in SPLITS:
        torch.testing.assert_close(_batched(ens, x, size), whole, rtol=0, atol=TOL)


def test_from_stochastic_is_one_set_of_hypotheses_across_calls() -> None:
    """Defect 2: four batches of a test set used to get four different hypotheses."""
    model = _seq(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 3))
    ens = Ensemble.from_stochastic(model, 8, mode="dropout")
    x = torch.randn(N, 6, generator=_gen(1))
    torch.testing.assert_close(_batched(ens, x, 6), ens.predict_members(x), rtol=0, atol=TOL)


def test_resample_draws_new_hypotheses_and_seed_reproduces() -> None:
    model = _seq(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 3))
    x = torch.randn(N, 6, generator=_gen(1))
    ens = Ensemble.from_stochastic(model, 8, seed=3)
    first = ens.predict_members(x)
    assert torch.equal(Ensemble.from_stochastic(model, 8, seed=3).predict_members(x), first)
    assert ens.resample(generator=_gen(9)) is ens
    second = ens.predict_members(x)
    assert not torch.allclose(second, first)
    assert torch.equal(ens.predict_members(x), second)
    ens.resample(seed=3)
    assert torch.equal(ens.predict_members(x), first)
    with ens.sample_masks():  # kept for bensemble 0.2 code: the hypotheses stay fixed
        assert torch.equal(ens.predict_members(x), first)
    with pytest.raises(ValueError, match="either `generator` or `seed`"):
        Ensemble.from_stochastic(model, 8, seed=3, generator=_gen(1))
    with pytest.raises(ValueError, match="resample"):
        Ensemble.from_models([nn.Linear(6, 3)]).resample(seed=1)


def test_per_sample_is_an_explicit_incoherent_opt_in() -> None:
    model = _seq(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 3))
    x = torch.randn(N, 6, generator=_gen(1))
    ens = Ensemble.from_stochastic(model, 8, mask="per_sample", generator=_gen(2))
    assert not torch.allclose(_batched(ens, x, 7), ens.predict_members(x))


@pytest.mark.parametrize(
    ("model", "mode"),
    [
        pytest.param(_seq(nn.Linear(4, 4), nn.Dropout(0.0), nn.Linear(4, 2)), "auto", id="p0"),
        pytest.param(_seq(nn.Linear(4, 4), DropConnectLinear(4, 2, p=0.0)), "auto", id="dc_p0"),
        pytest.param(_seq(nn.Linear(4, 2)), "dropout", id="none"),
    ],
)
def test_degenerate_stochastic_ensembles_are_errors(model: nn.Module, mode: str) -> None:
    with pytest.raises(ValueError, match="same prediction|identical"):
        Ensemble.from_stochastic(model, 4, mode=mode).predict_members(torch.randn(3, 4))


def test_pruned_bayesian_layer_is_degenerate() -> None:
    layer = BayesianLinear(4, 2)
    with torch.no_grad():
        layer.w_rho.fill_(-1e8)
        layer.b_rho.fill_(-1e8)
    with pytest.raises(ValueError, match="same prediction|identical"):
        Ensemble.from_stochastic(nn.Sequential(layer), 4).predict_members(torch.randn(3, 4))


def test_unused_dropout_module_is_degenerate() -> None:
    class Unused(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin, self.drop = nn.Linear(4, 2), nn.Dropout(0.5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x)

    ens = Ensemble.from_stochastic(Unused(), 4)
    with pytest.raises(ValueError, match="same prediction|identical"):
        ens.predict_members(torch.randn(3, 4))


def test_num_samples_and_posterior_count() -> None:
    model = _seq(nn.Linear(4, 4), nn.Dropout(0.5))
    with pytest.raises(ValueError, match="`num_samples` must be an integer >= 1"):
        Ensemble.from_stochastic(model, 0)

    class Short:
        def sample_models(self, n_models: int) -> list[nn.Module]:
            return [nn.Linear(4, 2)] * (n_models - 1)

    with pytest.raises(ValueError, match="returned 2 models"):
        Ensemble.from_posterior(Short(), n_members=3)


@pytest.mark.parametrize(
    ("layers", "resolved"),
    [
        pytest.param(lambda: [nn.Linear(4, 4), nn.Dropout(0.5)], "dropout", id="dropout"),
        pytest.param(lambda: [BayesianLinear(4, 4)], "bayesian", id="bayesian"),
        pytest.param(lambda: [DropConnectLinear(4, 4)], "dropconnect", id="dropconnect"),
        pytest.param(lambda: [BayesianLinear(4, 4), nn.Dropout(0.5)], "both", id="both"),
        pytest.param(lambda: [DropConnectLinear(4, 4), nn.Dropout(0.5)], "all", id="all"),
    ],
)
def test_auto_mode_reports_the_resolved_mode(layers, resolved: str) -> None:
    ens = Ensemble.from_stochastic(nn.Sequential(*layers()), 3)
    assert ens.members.mode == resolved
    assert StochasticMembers(nn.Sequential(*layers()), 3, mode="all").mode == "all"


@settings(derandomize=True, max_examples=25, deadline=None)
@given(cuts=st.lists(st.integers(1, N - 1), max_size=5, unique=True))
def test_any_batch_split_gives_the_same_members(cuts: list[int]) -> None:
    """Splitting the rows anywhere leaves every member's outputs unchanged (to TOL)."""
    model = _seq(
        nn.Linear(6, 16),
        nn.ReLU(),
        nn.Dropout(0.4),
        DropConnectLinear(16, 8, p=0.3),
        nn.ReLU(),
        nn.AlphaDropout(0.2),
        nn.Linear(8, 3),
    )
    ens = Ensemble.from_stochastic(model, 4, generator=_gen(7))
    x = torch.randn(N, 6, generator=_gen(8))
    edges = [0, *sorted(cuts), N]
    parts = [ens.predict_members(x[a:b]) for a, b in zip(edges[:-1], edges[1:])]
    torch.testing.assert_close(torch.cat(parts, 1), ens.predict_members(x), rtol=0, atol=TOL)


def test_objects_pickled_before_fixed_members_still_load() -> None:
    import pickle

    model = _seq(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 3))
    members = StochasticMembers(model, 4, generator=_gen(1))
    for name in ("_seeds", "_fresh", "_functional_dropout"):
        del members.__dict__[name]  # the attributes of the former class
    members.__dict__["_frozen_seeds"] = None
    loaded = pickle.loads(pickle.dumps(members))
    x = torch.randn(5, 6, generator=_gen(2))
    assert loaded.predict_all(x).shape == (4, 5, 3)
    assert torch.equal(loaded.predict_all(x), loaded.predict_all(x))


# ------------------------------------------------------ issue 19: members in the state_dict
def _dropout_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 2))


def test_the_state_dict_carries_the_members() -> None:
    import io

    a = Ensemble.from_stochastic(_dropout_net(), num_samples=5, seed=0)
    b = Ensemble.from_stochastic(_dropout_net(), num_samples=5, seed=1)
    x = torch.randn(4, 3)
    assert not torch.equal(a.predict_members(x), b.predict_members(x))
    buffer = io.BytesIO()
    torch.save(a.state_dict(), buffer)
    buffer.seek(0)
    b.load_state_dict(torch.load(buffer, weights_only=True))
    assert torch.equal(a.predict_members(x), b.predict_members(x))
    assert b.members.seeds == a.members.seeds


def test_a_state_dict_saved_before_members_were_saved_still_loads() -> None:
    a = Ensemble.from_stochastic(_dropout_net(), num_samples=5, seed=0)
    old = {k: v for k, v in a.state_dict().items() if not k.endswith("_extra_state")}
    b = Ensemble.from_stochastic(_dropout_net(), num_samples=5, seed=1)
    b.load_state_dict(old)  # strict: the missing members are not an error; b keeps its own
    assert b.members.seeds != a.members.seeds


def test_a_state_with_other_members_is_refused() -> None:
    a = Ensemble.from_stochastic(_dropout_net(), num_samples=5, seed=0)
    b = Ensemble.from_stochastic(_dropout_net(), num_samples=4, seed=0)
    with pytest.raises(ValueError, match="num_samples=4"):
        b.load_state_dict(a.state_dict())
    state = a.state_dict()
    state["members._extra_state"] = {"seeds": ["x"] * 5, "num_samples": 5}
    with pytest.raises(ValueError, match="saved members"):
        a.load_state_dict(state)


@pytest.mark.parametrize("kind", ["dropout", "dropconnect", "bayesian"])
def test_a_member_is_the_same_function_in_float64(kind: str) -> None:
    torch.manual_seed(0)
    if kind == "dropout":
        model = _dropout_net()
    elif kind == "dropconnect":
        model = nn.Sequential(DropConnectLinear(3, 8, p=0.4), nn.ReLU(), nn.Linear(8, 2))
    else:
        model = nn.Sequential(BayesianLinear(3, 8), nn.ReLU(), BayesianLinear(8, 2))
    ens = Ensemble.from_stochastic(model, num_samples=6, seed=0)
    x = torch.randn(5, 3)
    want = ens.predict_members(x)
    got = ens.double().predict_members(x.double())
    torch.testing.assert_close(got.float(), want, rtol=1e-5, atol=1e-5)
