"""Packed evaluation of small MLP members equals the member-by-member loop."""

import io

import pytest
import torch
from torch import nn

from bensemble.core import Ensemble, ExplicitMembers, PackedMembers
from bensemble.core.packed import PACK_MAX_ROWS, PACK_MAX_WORK, packable


def _mlps(n: int = 10, dims=(20, 64, 64, 2), act=nn.ReLU, bias: bool = True) -> list[nn.Module]:
    torch.manual_seed(0)
    members = []
    for _ in range(n):
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
            layers.append(nn.Linear(a, b, bias=bias))
            if i < len(dims) - 2:
                layers.append(act())
        members.append(nn.Sequential(*layers))
    return members


def _loop(models, x):
    with torch.no_grad():
        return torch.stack([m(x) for m in models])


@pytest.mark.parametrize(
    ("dims", "act", "bias"),
    [
        pytest.param((20, 64, 64, 2), nn.ReLU, True, id="20-64-64-2"),
        pytest.param((5, 3), nn.ReLU, True, id="single-linear"),
        pytest.param((7, 16, 16, 16, 4), nn.Tanh, False, id="tanh-nobias"),
        pytest.param((7, 16, 4), nn.GELU, True, id="gelu"),
    ],
)
def test_packed_equals_loop(dims, act, bias) -> None:
    models = _mlps(6, dims, act, bias)
    ens = Ensemble.from_models(models, packed=True)
    assert isinstance(ens.members, PackedMembers)
    x = torch.randn(33, dims[0], generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(ens.predict_members(x), _loop(models, x), rtol=1e-6, atol=1e-6)
    x64 = x.double()
    models64 = [m.double() for m in models]
    ens64 = Ensemble.from_models(models64, packed=True)
    torch.testing.assert_close(
        ens64.predict_members(x64), _loop(models64, x64), rtol=1e-12, atol=1e-12
    )


def test_leading_activation_and_leaky_settings() -> None:
    torch.manual_seed(0)
    models = [
        nn.Sequential(nn.Tanh(), nn.Linear(3, 5), nn.LeakyReLU(0.2), nn.Linear(5, 2))
        for _ in range(4)
    ]
    ens = Ensemble.from_models(models, packed=True)
    x = torch.randn(9, 3)
    torch.testing.assert_close(ens.predict_members(x), _loop(models, x), rtol=1e-6, atol=1e-6)
    models[2][2] = nn.LeakyReLU(0.3)  # different settings: not packable
    assert not packable(models)


def test_cache_follows_parameter_updates() -> None:
    models = _mlps(3, (4, 8, 2))
    ens = Ensemble.from_models(models, packed=True)
    x = torch.randn(5, 4)
    before = ens.predict_members(x)
    with torch.no_grad():
        models[1][0].weight.mul_(2.0)  # in-place, as an optimiser step
    after = ens.predict_members(x)
    assert not torch.allclose(before[1], after[1])
    torch.testing.assert_close(after, _loop(models, x), rtol=1e-6, atol=1e-6)
    models[0].load_state_dict(models[2].state_dict())
    torch.testing.assert_close(ens.predict_members(x), _loop(models, x), rtol=1e-6, atol=1e-6)
    models[1][0].weight = nn.Parameter(torch.randn(8, 4))  # a replaced parameter
    torch.testing.assert_close(ens.predict_members(x), _loop(models, x), rtol=1e-6, atol=1e-6)
    models[2][1] = nn.Tanh()  # a replaced layer: no longer packable, the loop takes over
    assert not ens.members.use_packed(x)
    torch.testing.assert_close(ens.predict_members(x), _loop(models, x), rtol=0, atol=0)


def test_auto_choice_and_fallbacks() -> None:
    models = _mlps(4, (20, 64, 64, 2))
    ens = Ensemble.from_models(models)  # "auto" is the default
    assert isinstance(ens.members, PackedMembers)
    members = ens.members
    small = torch.randn(8, 20)
    assert members.use_packed(small)
    assert not members.use_packed(torch.randn(PACK_MAX_ROWS + 1, 20))  # many rows: loop
    wide = Ensemble.from_models(_mlps(2, (20, 512, 512, 2))).members
    assert 8 * (20 * 512 + 512 * 512 + 512 * 2) > PACK_MAX_WORK
    assert not wide.use_packed(torch.randn(8, 20))  # too much work per member: loop
    assert not members.use_packed(torch.randn(2, 3, 20))  # 3-D input: the loop handles it
    torch.testing.assert_close(
        members.predict_all(torch.randn(2, 3, 20)).shape, torch.Size([4, 2, 3, 2])
    )
    # not packable: plain loop
    mixed = [_mlps(1, (4, 8, 2))[0], nn.Sequential(nn.Linear(4, 2))]
    assert type(Ensemble.from_models(mixed).members) is ExplicitMembers
    assert type(Ensemble.from_models(models, packed=False).members) is ExplicitMembers
    with pytest.raises(ValueError, match="`models` must be nn.Sequential stacks"):
        Ensemble.from_models(mixed, packed=True)
    with pytest.raises(ValueError, match="`packed` must be one of 'auto', True, False"):
        Ensemble.from_models(models, packed="yes")


@pytest.mark.parametrize(
    "models",
    [
        pytest.param([nn.Sequential(nn.ReLU())], id="no-linear"),
        pytest.param([nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.1))], id="dropout"),
        pytest.param([nn.Sequential(nn.Linear(2, 2)), nn.Sequential(nn.Linear(2, 3))], id="shape"),
        pytest.param([nn.Linear(2, 2)], id="not-sequential"),
        pytest.param([], id="empty"),
    ],
)
def test_not_packable(models) -> None:
    assert not packable(models)


def test_packed_state_dict_and_pickle() -> None:
    models = _mlps(3, (4, 8, 2))
    ens = Ensemble.from_models(models, packed=True)
    x = torch.randn(5, 4)
    ens.predict_members(x)  # fill the cache
    assert set(ens.state_dict()) == set(Ensemble.from_models(models, packed=False).state_dict())
    buffer = io.BytesIO()
    torch.save(ens, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert loaded.members._cache is None
    torch.testing.assert_close(loaded.predict_members(x), ens.predict_members(x))


def test_cache_follows_dtype_and_device_conversions() -> None:
    """``.double()`` replaces parameter data without a new identity or version."""
    torch.manual_seed(0)
    models = [nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3)) for _ in range(3)]
    ens = Ensemble.from_models(models, packed=True)
    x = torch.randn(6, 4)
    want = ens.predict_members(x)
    ens.double()
    got = ens.predict_members(x.double())
    assert got.dtype == torch.float64
    torch.testing.assert_close(got.float(), want, rtol=1e-5, atol=1e-6)
    assert torch.equal(ens.float().predict_members(x), want)
