"""Tests of the deep-ensemble training helpers."""

from __future__ import annotations

import io
import sys

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from bensemble.datasets.toy import make_toy_gaussians
from bensemble.methods.deep_ensemble import train_ensemble, train_model
from bensemble.methods.mlp import make_mlp


def _state(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _small_net() -> nn.Module:
    return make_mlp(2, 2, hidden=(8,))


@pytest.fixture(scope="module")
def toy():
    return make_toy_gaussians(50, seed=0)


def test_paper_ensemble_accuracy_on_toy_data(toy):
    members = train_ensemble(lambda: make_mlp(2, 2), (toy.x, toy.y), seed=0, progress=False)
    assert len(members) == 10
    test = make_toy_gaussians(10_000, seed=99)
    with torch.no_grad():
        probs = torch.stack([torch.softmax(m(test.x.float()), dim=-1) for m in members]).mean(0)
    assert float((probs.argmax(dim=1) == test.y).double().mean()) >= 0.95
    assert all(not m.training for m in members)


def test_members_differ_and_same_seed_reproduces(toy):
    data = (toy.x, toy.y)
    a = train_ensemble(_small_net, data, n_members=3, epochs=2, seed=1, progress=False)
    b = train_ensemble(_small_net, data, n_members=3, epochs=2, seed=1, progress=False)
    gen = torch.Generator().manual_seed(1)
    c = train_ensemble(_small_net, data, n_members=3, epochs=2, generator=gen, progress=False)
    for m_a, m_b, m_c in zip(a, b, c):
        torch.testing.assert_close(_state(m_a), _state(m_b))
        torch.testing.assert_close(_state(m_a), _state(m_c))
    assert not torch.equal(_state(a[0]), _state(a[1]))
    d = train_ensemble(_small_net, data, n_members=3, epochs=2, seed=2, progress=False)
    assert not torch.equal(_state(a[0]), _state(d[0]))


def test_members_differ_only_by_initialisation_and_order(toy):
    data = (toy.x, toy.y)
    members = train_ensemble(_small_net, data, n_members=2, epochs=3, seed=4, progress=False)
    # Replay member 0 by hand from its two seeds: same init (seeded global RNG), same data order.
    seeds = torch.randint(0, 2**62, (2, 2), generator=torch.Generator().manual_seed(4)).tolist()
    init_seed, order_seed = seeds[0]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed)
        replay = _small_net()
    order = torch.Generator().manual_seed(order_seed)
    opt = torch.optim.Adam(replay.parameters(), lr=1e-3)
    x, y = toy.x.float(), toy.y
    for _ in range(3):
        for idx in torch.randperm(50, generator=order).split(32):
            opt.zero_grad()
            nn.functional.cross_entropy(replay(x[idx]), y[idx]).backward()
            opt.step()
    torch.testing.assert_close(_state(members[0]), _state(replay))


def test_global_rng_is_left_untouched(toy):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    train_ensemble(_small_net, (toy.x, toy.y), n_members=2, epochs=1, seed=0, progress=False)
    torch.testing.assert_close(torch.rand(3), expected)


def test_dataset_input_and_custom_optimizer_and_loss(toy):
    dataset = TensorDataset(toy.x.float(), toy.y)
    calls = []

    def loss_fn(logits, target):
        calls.append(logits.shape[0])
        return nn.functional.cross_entropy(logits, target)

    members = train_ensemble(
        _small_net,
        dataset,
        n_members=2,
        epochs=2,
        batch_size=16,
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        loss_fn=loss_fn,
        seed=0,
        progress=False,
    )
    assert len(members) == 2
    assert calls == [16, 16, 16, 2] * 4  # 2 members x 2 epochs x 4 batches
    again = train_ensemble(
        _small_net,
        dataset,
        n_members=2,
        epochs=2,
        batch_size=16,
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        seed=0,
        progress=False,
    )
    torch.testing.assert_close(_state(members[1]), _state(again[1]))


def test_train_model_single_member(toy):
    torch.manual_seed(0)
    model = make_mlp(2, 2, dropout=(0.3, 0.2))
    before = _state(model).clone()
    out = train_model(model, (toy.x.numpy(), toy.y.numpy()), epochs=2, seed=3)
    assert out is model and not model.training
    assert not torch.equal(before, _state(model))
    torch.manual_seed(0)
    twin = train_model(make_mlp(2, 2, dropout=(0.3, 0.2)), (toy.x, toy.y), epochs=2, seed=3)
    torch.testing.assert_close(_state(model), _state(twin))  # dropout masks are seeded too


def test_progress_bar_runs(toy, monkeypatch):
    terminal = io.StringIO()
    terminal.isatty = lambda: True  # the bar draws on a terminal only (tests/robustness)
    monkeypatch.setattr(sys, "stderr", terminal)
    train_ensemble(_small_net, (toy.x, toy.y), n_members=1, epochs=1, seed=0, progress=True)
    assert "deep ensemble" in terminal.getvalue()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        pytest.param({"make_model": 3}, "`make_model` must be callable", id="make_model"),
        pytest.param({"make_model": lambda: 3}, "must be a torch.nn.Module", id="not-module"),
        pytest.param({"n_members": 0}, "`n_members`", id="n_members"),
        pytest.param({"epochs": 0}, "`epochs`", id="epochs"),
        pytest.param({"batch_size": 2.5}, "`batch_size`", id="batch_size"),
        pytest.param({"optimizer": "adam"}, "`optimizer`", id="optimizer"),
        pytest.param({"optimizer": lambda p: 3}, "torch.optim.Optimizer", id="optimizer-result"),
        pytest.param({"loss_fn": 1}, "`loss_fn`", id="loss_fn"),
        pytest.param({"seed": 1, "generator": torch.Generator()}, "not both", id="both"),
        pytest.param({"data": torch.zeros(3, 2)}, "`data` must be a pair", id="data"),
        pytest.param(
            {"data": (torch.zeros(3, 2), torch.zeros(3))}, "integer dtype", id="float-labels"
        ),
        pytest.param(
            {"data": (torch.zeros(3, 2), torch.zeros(2, dtype=torch.long))}, "same number", id="n"
        ),
        pytest.param(
            {"data": (torch.full((3, 2), float("nan")), torch.zeros(3, dtype=torch.long))},
            "finite",
            id="nan",
        ),
    ],
)
def test_bad_input(toy, kwargs, match):
    args = {"make_model": _small_net, "data": (toy.x, toy.y), "progress": False, **kwargs}
    with pytest.raises(ValueError, match=match):
        train_ensemble(**args)


def test_train_model_bad_input(toy):
    with pytest.raises(ValueError, match="`model` must be a torch.nn.Module"):
        train_model("net", (toy.x, toy.y))
    with pytest.raises(ValueError, match="trainable parameters"):
        train_model(nn.ReLU(), (toy.x, toy.y))
