"""Prediction never changes the user's model: eval mode, no grad, flags and buffers restored.

Defect 1 of issue 10: ``Ensemble.from_models`` used to predict in whatever mode the members were
in, so straight after a training loop dropout was active and BatchNorm statistics moved.
"""

import numpy as np
import pytest
import torch
from torch import nn

from bensemble.core import Ensemble, ExplicitMembers, StochasticMembers
from bensemble.layers import DropConnectLinear


def _net(seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    net = nn.Sequential(
        nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 3)
    )
    with torch.no_grad():  # non-trivial running statistics, as after training
        for _ in range(3):
            net(torch.randn(32, 4) * 2 + 1)
    return net.train()  # left in train mode, as after a training loop


def _x(n: int = 10) -> torch.Tensor:
    return torch.randn(n, 4, generator=torch.Generator().manual_seed(5))


def _snapshot(models) -> list:
    return [
        ({k: v.clone() for k, v in m.state_dict().items()}, [s.training for s in m.modules()])
        for m in models
    ]


def _assert_unchanged(models, before) -> None:
    for model, (state, flags) in zip(models, before):
        for key, value in model.state_dict().items():
            assert torch.equal(value, state[key]), key
        assert [s.training for s in model.modules()] == flags


class _Bomb(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("boom")


def test_train_mode_members_are_predicted_in_eval_mode() -> None:
    models = [_net(s) for s in range(3)]
    before = _snapshot(models)
    ens = Ensemble.from_models(models)
    x = _x()
    first, second = ens.predict_members(x), ens.predict_members(x)
    assert torch.equal(first, second)  # dropout off: a member is one function
    _assert_unchanged(models, before)  # BatchNorm statistics untouched, flags as they were
    reference = []
    for m in models:
        m.eval()
        reference.append(m(x).detach())
        m.train()
    torch.testing.assert_close(first, torch.stack(reference), rtol=0, atol=0)


def test_one_row_input_with_batchnorm_members() -> None:
    ens = Ensemble.from_models([_net(s) for s in range(2)])
    assert ens.predict_proba(_x(1)).shape == (1, 3)


def test_grad_mode_and_flags_restored_when_a_member_raises() -> None:
    models = [_net(0), nn.Sequential(nn.Linear(4, 4), _Bomb()).train(), _net(2)]
    models[0][3].eval()  # mixed flags come back exactly; member 0's BatchNorm is in train mode
    before = _snapshot(models)
    ens = Ensemble.from_models(models)
    with torch.enable_grad(), pytest.raises(RuntimeError, match="boom"):
        ens.predict_proba(_x())
    assert torch.is_grad_enabled()
    _assert_unchanged(models, before)
    ok = Ensemble.from_models([_net(0)])
    with torch.enable_grad():
        assert not ok.predict_proba(_x()).requires_grad
        assert torch.is_grad_enabled()


def test_stochastic_ensemble_on_a_train_mode_model_raising_halfway() -> None:
    calls = {"n": 0}

    class Halfway(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            calls["n"] += 1
            if calls["n"] == 4:
                raise RuntimeError("boom")
            return x

    net = _net(0)
    model = nn.Sequential(net, Halfway(), DropConnectLinear(3, 3, p=0.3)).train()
    before = _snapshot([model])
    ens = Ensemble.from_stochastic(model, 6, generator=torch.Generator().manual_seed(0))
    with pytest.raises(RuntimeError, match="boom"):
        ens.predict_member_probs(_x())
    _assert_unchanged([model], before)
    assert model[2].force_sample is False and model[2].sample_generator is None
    assert all(not m._forward_hooks for m in model.modules())


def test_stochastic_ensemble_leaves_batchnorm_untouched() -> None:
    model = _net(1)
    before = _snapshot([model])
    ens = Ensemble.from_stochastic(model, 8, generator=torch.Generator().manual_seed(0))
    ens.predict_proba(_x())
    ens.predict_proba(_x(1))
    _assert_unchanged([model], before)


# ---------------------------------------------------------------------------- member outputs
class _Returns(nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn
        self.lin = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor):
        return self.fn(self.lin(x))


BAD_OUTPUTS = [
    pytest.param(lambda z: (z, z), "logits", "a tuple", id="tuple"),
    pytest.param(lambda z: {"logits": z}, "logits", "a dict", id="dict"),
    pytest.param(lambda z: z[:-1], "logits", "rows", id="rows"),
    pytest.param(lambda z: z.masked_fill(z > 0.1, float("nan")), "logits", "finite", id="nan"),
    pytest.param(lambda z: z.softmax(-1) * 1.5, "probs", "sum to 1", id="simplex"),
    pytest.param(lambda z: z, "probs", "probabilities", id="logits_as_probs"),
]


@pytest.mark.parametrize(("bad", "kind", "match"), BAD_OUTPUTS)
def test_bad_member_output_names_the_member(bad, kind: str, match: str) -> None:
    torch.manual_seed(0)
    good = _Returns(lambda z: z.softmax(-1) if kind == "probs" else z)
    models = [good, _Returns(lambda z: z.softmax(-1) if kind == "probs" else z), _Returns(bad)]
    ens = Ensemble.from_models(models, output_kind=kind, packed=False)
    with pytest.raises(ValueError, match=rf"member 2.*{match}|{match}.*member 2"):
        ens.predict_members(_x())


def test_members_of_different_shapes_name_the_member() -> None:
    ens = Ensemble.from_models([nn.Linear(4, 3), nn.Linear(4, 2)], packed=False)
    with pytest.raises(ValueError, match="member 1"):
        ens.predict_members(_x())


def test_stochastic_non_finite_member_is_named() -> None:
    class Blow(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.abs().log()  # -inf where dropout zeroed a unit

    model = nn.Sequential(nn.Linear(4, 3), nn.Dropout(0.9), Blow())
    ens = Ensemble.from_stochastic(model, 20, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"member \d+.*finite"):
        ens.predict_members(_x())


def test_explicit_members_adapter_is_guarded_too() -> None:
    models = [_net(s) for s in range(2)]
    before = _snapshot(models)
    out = ExplicitMembers(models).predict_all(_x())
    assert torch.equal(out, ExplicitMembers(models).predict_all(_x()))
    _assert_unchanged(models, before)
    members = StochasticMembers(_net(3), 4, generator=torch.Generator().manual_seed(1))
    assert np.isfinite(members.predict_all(_x()).numpy()).all()
