"""Tests of the paper's multilayer perceptrons."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from bensemble.methods.mlp import make_mlp


def _kinds(model: nn.Sequential) -> list[str]:
    return [type(m).__name__ for m in model]


def test_paper_network():
    model = make_mlp(2, 2)
    assert _kinds(model) == ["Linear", "ReLU", "Linear", "ReLU", "Linear"]
    assert [(m.in_features, m.out_features) for m in model if isinstance(m, nn.Linear)] == [
        (2, 100),
        (100, 20),
        (20, 2),
    ]
    assert model(torch.randn(7, 2)).shape == (7, 2)


def test_mc_dropout_variant():
    model = make_mlp(2, 2, dropout=(0.3, 0.2))
    assert _kinds(model) == ["Linear", "ReLU", "Dropout", "Linear", "ReLU", "Dropout", "Linear"]
    assert [m.p for m in model if isinstance(m, nn.Dropout)] == [0.3, 0.2]
    only_last = make_mlp(4, 3, hidden=(5, 6, 7), dropout=(0.0, 0.0, 0.5))
    assert _kinds(only_last).count("Dropout") == 1 and isinstance(only_last[-2], nn.Dropout)
    same = make_mlp(2, 2, dropout=0.1)
    assert [m.p for m in same if isinstance(m, nn.Dropout)] == [0.1, 0.1]


def test_dropconnect_variant():
    layers = pytest.importorskip("bensemble.layers")
    if not hasattr(layers, "DropConnectLinear"):
        pytest.skip("bensemble.layers.DropConnectLinear is not available yet")
    model = make_mlp(2, 2, dropconnect_p=0.3)
    hidden = [m for m in model if isinstance(m, layers.DropConnectLinear)]
    assert len(hidden) == 2 and all(m.p == 0.3 for m in hidden)
    assert [(m.in_features, m.out_features) for m in hidden] == [(2, 100), (100, 20)]
    assert type(model[-1]) is nn.Linear  # the output layer stays plain (last-layer Laplace)
    model.eval()
    assert model(torch.randn(5, 2)).shape == (5, 2)


def test_no_hidden_layer_is_logistic_regression():
    model = make_mlp(3, 4, hidden=())
    assert _kinds(model) == ["Linear"]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        pytest.param({"in_features": 0}, "`in_features`", id="in"),
        pytest.param({"num_classes": 1.5}, "`num_classes`", id="classes"),
        pytest.param({"hidden": 10}, "`hidden`", id="hidden-int"),
        pytest.param({"hidden": (10, 0)}, "`hidden`", id="hidden-zero"),
        pytest.param({"dropout": (0.3,)}, "one value per hidden layer", id="dropout-len"),
        pytest.param({"dropout": 1.0}, r"\[0, 1\)", id="dropout-one"),
        pytest.param({"dropout": -0.1}, "`dropout`", id="dropout-neg"),
        pytest.param({"dropconnect_p": "a"}, "`dropconnect_p`", id="dropconnect"),
    ],
)
def test_bad_input(kwargs, match):
    args = {"in_features": 2, "num_classes": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        make_mlp(**args)
