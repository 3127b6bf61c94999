"""One engine: ``bensemble evaluate`` streams every input - a tensor in one chunk, a
memory-mapped .npy read a chunk at a time, shards, worker processes, Ray - and every number of
the report equals the in-memory evaluation it replaced (``_reference_evaluate``, the library's
one-shot functions on whole arrays), with and without a calibration split, probabilities and
logits, one model and ensembles; the intervals are the same for any chunking, shards or workers."""

from __future__ import annotations

import math
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch

import bensemble.metrics._streaming_kmeans as sk
from bensemble.app.evaluate import evaluate_predictions, evaluate_shards
from bensemble.metrics.streaming_eval import open_memmap

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))
from _reference_evaluate import reference_evaluation  # noqa: E402

#: engine vs reference: the same float64 terms summed in another order (per chunk, then over
#: chunks). Reordering a sum of n float64 terms moves it by at most about n * 2.2e-16 of the sum
#: of their magnitudes: ~1e-13 relative for these n <= 20,000 positive terms, so 1e-10 leaves
#: room for the differences (|acc - conf| of the ECEs) without hiding a wrong term. Counts (n,
#: support, set sizes) and ranks (AUROC, AURC) are compared exactly or to the same tolerance.
REL = 1e-10
KEYS = ("metrics", "selective", "ensemble", "conformal", "temperature", "per_class")


def _data(m=3, n=150, k=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    z = 1.5 * torch.randn(m, n, k, generator=g, dtype=torch.float64)
    z += 2 * torch.randn(1, n, k, generator=g, dtype=torch.float64)
    return z, torch.randint(0, k, (n,), generator=g)


def _save(tmp_path, array, name="pred.npy"):
    path = tmp_path / name
    np.save(path, np.asarray(array))
    return path


def assert_same(got, want, path="ev"):
    """Equal structure (the same keys in the same order); numbers equal to REL (ints and strings
    exactly, NaN to NaN)."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), (path, got, want)
        for key in want:
            assert_same(got[key], want[key], f"{path}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), path
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            assert_same(a, b, f"{path}[{i}]")
    elif isinstance(want, float) and not isinstance(want, bool):
        assert isinstance(got, float), (path, got)
        assert got == pytest.approx(want, rel=REL, abs=1e-13, nan_ok=True), path
    else:
        assert got == want and type(got) is type(want), (path, got, want)


def assert_matches_reference(ev, ref):
    """Every number of the report and what each figure draws."""
    from bensemble.metrics import binned_calibration_stats, risk_coverage_curve

    got = ev.to_dict()
    for key in KEYS:
        assert_same(got[key], ref[key], key)
    setup = {key: got["setup"][key] for key in ref["setup"]}
    assert_same(setup, ref["setup"], "setup")
    stages = {"reliability": ref["probs"]}
    if ref["scaled"] is not None:
        stages["reliability_scaled"] = ref["scaled"]
    assert set(ev.reliability) == set(stages)
    for (name, probs), curve in zip(stages.items(), ev.curves.values(), strict=True):
        conf, pred = probs.max(1)
        want = binned_calibration_stats(conf, pred == ref["labels"], 15, "uniform")
        bins = ev.reliability[name]
        for key in ("edges", "counts", "sum_confidence", "sum_correct"):
            torch.testing.assert_close(getattr(bins, key), getattr(want, key), rtol=REL, atol=1e-12)
        # the figure's vertices lie exactly on the full risk-coverage curve
        full = risk_coverage_curve(conf.to(torch.float64), (pred == ref["labels"]).double())
        index = {float(t): i for i, t in enumerate(full[2].tolist())}
        for cov, risk, t in zip(curve.coverage, curve.risk, curve.thresholds, strict=True):
            i = index[float(t)]
            assert (cov, risk) == pytest.approx((float(full[0][i]), float(full[1][i])), rel=1e-12)
    if ref["details"] is None:
        assert ev.eece_details is None
        return
    a, b = ev.eece_details, ref["details"]
    for key in ("counts", "acc", "mean_delta", "member_variance", "trust", "squared_error"):
        torch.testing.assert_close(
            getattr(a, key), getattr(b, key), rtol=REL, atol=1e-13, equal_nan=True
        )
    torch.testing.assert_close(a.per_class, b.per_class, rtol=REL, atol=1e-13)
    assert (a.n_bins, a.n_bins_fitted, a.seeds) == (b.n_bins, b.n_bins_fitted, b.seeds)


# ----------------------------------------------------------------------------- same numbers
@pytest.mark.parametrize("m", [1, 3])
@pytest.mark.parametrize("logits", [False, True], ids=["probs", "logits"])
@pytest.mark.parametrize("split", [None, 0.4], ids=["all", "split"])
@pytest.mark.parametrize("chunk", [1, 7, None])
def test_every_number_equals_the_in_memory_reference(tmp_path, m, logits, split, chunk):
    z, y = _data(m)
    probs = torch.softmax(z, -1)
    stored = (z if logits else probs).numpy()
    arr = open_memmap(_save(tmp_path, stored if m > 1 else stored[0]))
    kw = {"calibration_split": split, "seed": 3, "eece_bins": 6}
    ref = reference_evaluation(probs, y, **kw)
    ev = evaluate_predictions(arr, y, bootstrap=0, chunk_size=chunk, from_logits=logits, **kw)
    assert_matches_reference(ev, ref)


@pytest.mark.parametrize("split", [None, 0.5], ids=["all", "split"])
@pytest.mark.parametrize("k", [5, 23], ids=["absent-class", "no-per-class"])
def test_absent_class_and_many_classes(split, k):
    """A class no sample has (accuracy None, coverage NaN) and K > 20 (no per-class table)."""
    z, y = _data(2, n=90, k=k, seed=4)
    y = torch.where(y == 1, 0, y)  # class 1 never occurs
    probs = torch.softmax(z, -1)
    kw = {"calibration_split": split, "seed": 5, "eece_bins": 4}
    ev = evaluate_predictions(probs, y, bootstrap=0, chunk_size=11, **kw)
    assert_matches_reference(ev, reference_evaluation(probs, y, **kw))
    if k > 20:
        assert ev.per_class is None
    else:
        assert ev.per_class[1]["support"] == 0 and ev.per_class[1]["accuracy"] is None
        if split is not None:
            assert math.isnan(ev.per_class[1]["coverage"])


@pytest.mark.parametrize("score", ["aps", "raps"])
def test_randomised_conformal_sets_get_the_in_memory_uniforms(score):
    z, y = _data(3, n=200)
    probs = torch.softmax(z, -1).to(torch.float32)
    kw = {"calibration_split": 0.5, "seed": 1, "conformal_score": score, "eece_seeds": 2}
    ev = evaluate_predictions(probs, y, bootstrap=0, chunk_size=13, **kw)
    ref = reference_evaluation(probs.double(), y, **kw)
    assert_matches_reference(ev, ref)
    for key in ("coverage", "mean_set_size", "empty_set_rate"):  # counts: exact
        assert ev.conformal[key] == ref["conformal"][key]


def test_streamed_kmeans_refinement_with_a_split(tmp_path, monkeypatch):
    """A part larger than the K-means subsample: the fit gathers the seeded subsample rows and
    its refinement passes stream over the file (with a split: in file order, not test order)."""
    import bensemble.metrics.binning._fit as km

    monkeypatch.setattr(sk, "DEFAULT_SUBSAMPLE", 120)
    monkeypatch.setattr(km, "DEFAULT_SUBSAMPLE", 120)
    z, y = _data(4, n=600, k=3, seed=5)
    probs = torch.softmax(z, -1)
    arr = open_memmap(_save(tmp_path, z.numpy()))
    for split in (None, 0.3):
        kw = {"calibration_split": split, "seed": 2, "eece_bins": 10}
        ev = evaluate_predictions(arr, y, bootstrap=0, chunk_size=50, from_logits=True, **kw)
        assert_matches_reference(ev, reference_evaluation(probs, y, subsample=120, **kw))


def test_eece_does_not_depend_on_the_member_order():
    z, y = _data(4, n=300, seed=7)
    probs = torch.softmax(z, -1)
    want = reference_evaluation(probs, y, eece_bins=8)["ensemble"]["eece"]
    for perm in ([3, 1, 0, 2], [1, 0, 2, 3], [3, 2, 1, 0]):
        ev = evaluate_predictions(probs[perm], y, eece_bins=8, chunk_size=64, bootstrap=0)
        assert ev.ensemble["eece"] == pytest.approx(want, rel=REL, abs=1e-14)


# ----------------------------------------------------------------------------- shards, workers
def _shards(tmp_path, z, cuts):
    edges = [0, *cuts, z.shape[1]]
    paths = []
    for i, (a, b) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
        paths.append(_save(tmp_path, z[:, a:b].numpy().astype(np.float32), f"shard{i}.npy"))
    return paths


def test_four_shards_equal_the_single_file_intervals_included(tmp_path):
    z, y = _data(3, n=400, seed=8)
    whole = _save(tmp_path, z.numpy().astype(np.float32), "whole.npy")
    paths = _shards(tmp_path, z, [90, 200, 310])
    kw = {"calibration_split": 0.3, "seed": 6, "bootstrap": 30, "eece_bins": 9, "chunk_size": 64}
    one = evaluate_shards([whole], y, backend="serial", from_logits=True, **kw)
    four = evaluate_shards(paths, y, backend="serial", from_logits=True, **kw)
    assert_same(four.to_dict(), one.to_dict())
    ys = [y[:90], y[90:200], y[200:310], y[310:]]
    per_shard = evaluate_shards(paths, ys, backend="serial", workers=4, from_logits=True, **kw)
    assert_same(per_shard.to_dict(), one.to_dict())


@pytest.mark.slow
def test_worker_processes_give_the_identical_report(tmp_path):
    z, y = _data(3, n=300, seed=9)
    paths = _shards(tmp_path, z, [140])
    kw = {"seed": 1, "bootstrap": 20, "eece_bins": 6, "from_logits": True}
    serial = evaluate_shards(paths, y, backend="serial", **kw)
    pooled = evaluate_shards(paths, y, backend="processes", workers=2, **kw)
    assert_same(pooled.to_dict(), serial.to_dict())


@pytest.mark.slow
def test_ray_gives_the_identical_report(tmp_path):
    import tempfile

    ray = pytest.importorskip("ray")
    if ray.is_initialized():  # pragma: no cover - another test left Ray running
        ray.shutdown()
    z, y = _data(3, n=300, seed=9)
    paths = _shards(tmp_path, z, [100, 210])
    kw = {"seed": 1, "bootstrap": 20, "eece_bins": 6, "from_logits": True}
    serial = evaluate_shards(paths, y, backend="serial", **kw)
    temp = tempfile.mkdtemp(prefix="bray", dir="/tmp")  # short: Ray's socket paths are limited
    on_ray = evaluate_shards(paths, y, backend="ray", workers=2, temp_dir=temp, **kw)
    assert not ray.is_initialized()  # we shut down the instance we started
    assert_same(on_ray.to_dict(), serial.to_dict())


def test_bad_shards_are_refused():
    z, y = _data(2, n=40)
    with pytest.raises(ValueError, match="evaluate_shards: `shards` must be a non-empty list"):
        evaluate_shards([], y)
    with pytest.raises(ValueError, match="`backend` must be one of"):
        evaluate_shards([z.softmax(-1)], y, backend="spark")
    with pytest.raises(ValueError, match="must share M members and K classes"):
        evaluate_shards([z.softmax(-1), z[:1].softmax(-1)], torch.cat([y, y]), backend="serial")
    with pytest.raises(ValueError, match="unknown options"):
        evaluate_shards([z.softmax(-1)], y, n_bin=3)


# ----------------------------------------------------------------------------- bounded reads
class _Spy:
    """A read-only array that records how many rows each read asks for."""

    def __init__(self, array):
        self.array, self.shape, self.dtype, self.reads = array, array.shape, array.dtype, []
        self.ndim = array.ndim

    def __getitem__(self, index):
        out = self.array[index]
        self.reads.append(out.shape[1] if out.ndim == 3 else out.shape[0])
        return out


def test_reads_stay_within_a_chunk_and_nothing_is_materialised(tmp_path, monkeypatch):
    import bensemble.metrics.binning._fit as km

    monkeypatch.setattr(sk, "DEFAULT_SUBSAMPLE", 400)
    monkeypatch.setattr(km, "DEFAULT_SUBSAMPLE", 400)
    n, chunk = 20_000, 256
    z, y = _data(3, n=n, k=4)
    path = _save(tmp_path, torch.softmax(z, -1).numpy())
    full = path.stat().st_size
    spy = _Spy(open_memmap(path))
    small = torch.softmax(z[:, :300], -1)
    evaluate_predictions(small, y[:300], chunk_size=chunk, eece_bins=5, bootstrap=0)  # imports
    tracemalloc.start()
    try:
        ev = evaluate_predictions(spy, y, chunk_size=chunk, eece_bins=20, bootstrap=0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert ev.ensemble["eece"] > 0
    assert max(spy.reads) <= chunk
    assert sum(spy.reads) >= 3 * n  # the main pass and two refinement passes, chunk by chunk
    # numpy-side allocations: a few chunks, the K-means subsample and O(N) scalars (the
    # selective metrics keep one complex128 per sample: 16 of the file's 96 bytes per sample),
    # never the file (which would be all of it, in float64)
    assert peak < full / 3, (peak, full)
