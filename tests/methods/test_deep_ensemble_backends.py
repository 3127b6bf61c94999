"""train_ensemble on joblib and Ray: the same members, member for member, as the sequential run."""

from __future__ import annotations

import shutil
import tempfile

import pytest
import torch
from torch import nn

from bensemble.methods import MemberBackend, train_ensemble


def _data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(120, 4, generator=g)
    return x, (x[:, 0] + x[:, 1] > 0).long() + (x[:, 2] > 1).long()


def _make():
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.1), nn.Linear(8, 3))


def _train(**kw):
    return train_ensemble(
        lambda: _make(), _data(), n_members=4, epochs=3, batch_size=16, seed=5, progress=False, **kw
    )


def _assert_same_members(a, b):
    assert len(a) == len(b)
    for m, n in zip(a, b, strict=True):
        assert not n.training
        for (name, p), (_, q) in zip(m.state_dict().items(), n.state_dict().items(), strict=True):
            assert torch.equal(p, q), name


@pytest.mark.slow
def test_joblib_backend_matches_sequential(tmp_path):
    before = torch.get_num_threads()
    _assert_same_members(
        _train(), _train(backend=MemberBackend("joblib", n_jobs=2, temp_dir=tmp_path))
    )
    assert torch.get_num_threads() == before


@pytest.mark.slow
def test_ray_backend_matches_sequential():
    ray = pytest.importorskip("ray")
    if ray.is_initialized():  # pragma: no cover - another test left Ray running
        pytest.skip("a Ray instance is already running in this process")
    temp = tempfile.mkdtemp(prefix="bray", dir="/tmp")  # short: Ray's socket paths are limited
    try:
        members = _train(backend=MemberBackend("ray", n_jobs=2, temp_dir=temp))
        assert not ray.is_initialized()  # we shut down the instance we started
        _assert_same_members(_train(), members)
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def test_backend_options_are_checked():
    with pytest.raises(ValueError, match="train_ensemble: `backend` must be one of 'sequential'"):
        _train(backend="dask")
    with pytest.raises(ValueError, match="MemberBackend: `n_jobs` must be"):
        _train(backend=MemberBackend("joblib", n_jobs=0))
    with pytest.raises(ValueError, match="train_ensemble: `backend` must be one of"):
        _train(backend=3)
