"""Worker for test_distributed.py (imported by name in the spawned processes)."""

from __future__ import annotations

import torch
import torch.distributed as dist

N, K, H = 600, 4, 5


def data():
    g = torch.Generator().manual_seed(0)
    logits = 2 * torch.randn(H, N, K, generator=g, dtype=torch.float64)
    members = torch.softmax(logits, -1)
    y = torch.randint(0, K, (N,), generator=g)
    centroids = torch.rand(K, 6, H, generator=g, dtype=torch.float64)
    return members, y, centroids


def meters(centroids):
    from bensemble.metrics import (
        BrierMeter,
        CalibrationErrorMeter,
        ClasswiseCalibrationErrorMeter,
        EECEMeter,
        NLLMeter,
    )

    return {
        "ece": CalibrationErrorMeter(10),
        "classwise": ClasswiseCalibrationErrorMeter(K, 10),
        "nll": NLLMeter(),
        "brier": BrierMeter(),
        "eece": EECEMeter(centroids),
    }


def metrics(centroids):
    from bensemble.integrations import torchmetrics as tm

    return {
        "ece": tm.ExpectedCalibrationError(10),
        "classwise": tm.ClasswiseCalibrationError(K, 10),
        "nll": tm.NegativeLogLikelihood(),
        "brier": tm.BrierScore(),
        "eece": tm.ExpectedEpistemicCalibrationError(centroids),
    }


def feed(objects, members, y, idx):
    for name, obj in objects.items():
        if name == "eece":
            obj.update(members[:, idx], y[idx])
        else:
            obj.update(members[:, idx].mean(0), y[idx])


def mismatches(rank, members, y, centroids, idx) -> dict:
    """Ranks built with other centroids, or fed other class counts: every rank refuses (the
    same ValueError everywhere, no hang) and keeps its local state."""
    from bensemble.integrations import sync_
    from bensemble.integrations import torchmetrics as tm
    from bensemble.metrics import CalibrationErrorMeter, EECEMeter

    out = {}
    shifted = centroids + 0.01 * rank
    k = K - rank  # rank 1 sees one class fewer
    probs = torch.softmax(members[:, idx, :k].mean(0).log(), -1)
    cases = {
        "eece": (EECEMeter(shifted), tm.ExpectedEpistemicCalibrationError(shifted)),
        "ece": (CalibrationErrorMeter(10), tm.ExpectedCalibrationError(10)),
    }
    for name, (meter, metric) in cases.items():
        args = (members[:, idx], y[idx]) if name == "eece" else (probs, y[idx] % k)
        meter.update(*args)
        metric.update(*args)
        local = {key: v.clone() for key, v in meter.state.items()}
        counts = metric.counts.clone()
        for kind, call in (("meter", lambda m=meter: sync_(m)), ("tm", metric.compute)):
            try:
                call()
                out[f"refused/{kind}/{name}"] = ""
            except ValueError as exc:
                out[f"refused/{kind}/{name}"] = str(exc)
        out[f"kept/meter/{name}"] = all(torch.equal(local[key], meter.state[key]) for key in local)
        out[f"kept/tm/{name}"] = torch.equal(counts, metric.counts) and not metric._is_synced
    return out


def worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        from bensemble.integrations import sync_

        members, y, centroids = data()
        idx = torch.arange(rank, N, world)  # each rank holds its share of the rows
        ms, tms = meters(centroids), metrics(centroids)
        feed(ms, members, y, idx)
        feed(tms, members, y, idx)
        out = {}
        for name in ms:
            out[f"meter/{name}"] = sync_(ms[name]).compute()
            out[f"tm/{name}"] = float(tms[name].compute())
            out[f"n/{name}"] = ms[name].n_samples
        out.update(mismatches(rank, members, y, centroids, idx))
        torch.save(out, f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()
