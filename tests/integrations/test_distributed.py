"""Two gloo processes on loopback, each with half the rows: the synced torchmetrics subclasses and
the plain meters (``sync_``) give the single-process values."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

pytest.importorskip("torchmetrics")
if not torch.distributed.is_available():  # pragma: no cover
    pytest.skip("torch.distributed is not available", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).parent))
import _ddp_worker  # noqa: E402


def _single_process():
    members, y, centroids = _ddp_worker.data()
    one_shot, merged = {}, {}
    whole = _ddp_worker.meters(centroids)
    _ddp_worker.feed(whole, members, y, torch.arange(_ddp_worker.N))
    halves = [_ddp_worker.meters(centroids) for _ in range(2)]
    for rank, ms in enumerate(halves):
        _ddp_worker.feed(ms, members, y, torch.arange(rank, _ddp_worker.N, 2))
    for name in whole:
        one_shot[name] = whole[name].compute()
        merged[name] = halves[0][name].merge(halves[1][name]).compute()
    return one_shot, merged


@pytest.mark.slow
def test_two_gloo_ranks_sync_to_the_single_process_values(tmp_path):
    mp.spawn(
        _ddp_worker.worker,
        args=(2, str(tmp_path / "store"), str(tmp_path)),
        nprocs=2,
        join=True,
    )
    one_shot, merged = _single_process()
    for rank in range(2):
        out = torch.load(tmp_path / f"rank{rank}.pt")
        for name in one_shot:
            assert out[f"n/{name}"] == _ddp_worker.N
            # the all-reduce adds the same two float64 states as a local merge: bit-identical
            assert out[f"meter/{name}"] == merged[name], name
            assert out[f"tm/{name}"] == merged[name], name
            assert out[f"meter/{name}"] == pytest.approx(one_shot[name], abs=1e-12, rel=1e-10)
        # ranks with other centroids / class counts are refused everywhere, local states kept
        for kind in ("meter", "tm"):
            assert "same settings on every rank" in out[f"refused/{kind}/eece"] or (
                "settings fingerprints" in out[f"refused/{kind}/eece"]
            )
            assert "classes" in out[f"refused/{kind}/ece"], out[f"refused/{kind}/ece"]
            assert out[f"kept/{kind}/eece"] and out[f"kept/{kind}/ece"]
