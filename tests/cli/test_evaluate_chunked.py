"""``bensemble evaluate --chunk-size N``: every number, table and file of the in-memory path
(``--bootstrap 0``: intervals are in-memory only) from a memory-mapped .npy read chunk by chunk,
with and without a calibration split; bad options; bounded reads."""

from __future__ import annotations

import json
import math
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch

import bensemble.metrics.streaming_eval as se
from bensemble.app.evaluate import evaluate_predictions, planned_files
from bensemble.app.evaluate_memmap import evaluate_memmap
from bensemble.cli import main
from bensemble.metrics._epistemic_checks import canonical_member_order
from bensemble.metrics.streaming_eval import MemberRows, canonical_order_chunked, open_memmap

PROG = "bensemble evaluate: error: "
#: chunked vs in-memory: the same float64 terms summed in another order (per chunk, then over
#: chunks). Reordering a sum of n float64 terms moves it by at most about n * 2.2e-16 of the sum of
#: their magnitudes: ~1e-13 relative for these n <= 20,000 positive terms, so 1e-10 leaves room
#: for the differences (|acc - conf| of the ECEs) without hiding a wrong term. Counts (n, support,
#: sizes) and anything ranked (AUROC, AURC of the same gathered confidences) are compared exactly
#: or to the same tolerance.
REL = 1e-10


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
    """Equal structure (the same keys in the same order, so a number one path gains and the
    other lacks fails); numbers equal to REL (ints and strings exactly, NaN to NaN)."""
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


# ----------------------------------------------------------------------------- same numbers
@pytest.mark.parametrize("m", [1, 3])
@pytest.mark.parametrize("logits", [False, True], ids=["probs", "logits"])
@pytest.mark.parametrize("split", [None, 0.4], ids=["all", "split"])
@pytest.mark.parametrize("chunk", [1, 7, 150])
def test_chunked_equals_in_memory(tmp_path, m, logits, split, chunk):
    z, y = _data(m)
    probs = torch.softmax(z, -1)
    stored = z if logits else probs
    arr = open_memmap(_save(tmp_path, stored.numpy() if m > 1 else stored[0].numpy()))
    kw = {"calibration_split": split, "seed": 3, "eece_bins": 6}
    want = evaluate_predictions(probs, y, bootstrap=0, **kw)
    got = evaluate_memmap(arr, y, chunk_size=chunk, from_logits=logits, progress=False, **kw)
    _assert_same_evaluation(got, want)


@pytest.mark.parametrize("split", [None, 0.5], ids=["all", "split"])
@pytest.mark.parametrize("k", [5, 23], ids=["absent-class", "no-per-class"])
def test_absent_class_and_many_classes(tmp_path, split, k):
    """A class no sample has (accuracy None, coverage NaN as in memory) and K > 20 (no per-class
    table in either path)."""
    z, y = _data(2, n=90, k=k, seed=4)
    y = torch.where(y == 1, 0, y)  # class 1 never occurs
    probs = torch.softmax(z, -1)
    arr = open_memmap(_save(tmp_path, probs.numpy()))
    kw = {"calibration_split": split, "seed": 5, "eece_bins": 4}
    want = evaluate_predictions(probs, y, bootstrap=0, **kw)
    got = evaluate_memmap(arr, y, chunk_size=11, progress=False, **kw)
    _assert_same_evaluation(got, want)
    if k > 20:
        assert got.per_class is None and want.per_class is None
    else:
        assert got.per_class[1]["support"] == 0 and got.per_class[1]["accuracy"] is None
        if split is not None:
            assert math.isnan(got.per_class[1]["coverage"])


def _assert_same_evaluation(got, want):
    """Every reported number (``to_dict``: setup, metrics, selective, ensemble, conformal,
    per_class, notes, verdicts), every table and what the figures draw."""
    assert_same(got.to_dict(), want.to_dict())
    assert want.selective and (want.per_class is not None) == (want.setup["classes"] <= 20)
    assert_same([list(t) for t in got.tables()], [list(t) for t in want.tables()])
    for name, *_ in want.tables():
        assert got.table_notes(name) == want.table_notes(name)
    _assert_same_figure_data(got, want)


def _assert_same_figure_data(got, want):
    """What the report's figures draw: the reliability bins, the gathered confidences of the
    risk-coverage curves and the EECE details."""
    from bensemble.app.evaluate_report import top_confidence
    from bensemble.metrics import binned_calibration_stats

    parts = {"reliability": want.probs}
    if want.scaled_probs is not None:
        parts["reliability_scaled"] = want.scaled_probs
    assert set(got.reliability_bins) == set(parts)
    for name, probs in parts.items():
        conf, pred = probs.max(1)
        ref = binned_calibration_stats(conf, pred == want.labels, 15, "uniform")
        bins = got.reliability_bins[name]
        for key in ("edges", "counts", "sum_confidence", "sum_correct"):
            torch.testing.assert_close(getattr(bins, key), getattr(ref, key), rtol=REL, atol=1e-12)
    stages = dict(zip(["unscaled", "scaled"], parts.values(), strict=False))
    assert set(got.confidence) == set(stages)
    for name, probs in stages.items():
        conf, correct = got.confidence[name]
        want_conf, want_correct = top_confidence(probs, want.labels)
        assert conf.dtype == torch.float64 and correct.dtype == torch.bool
        torch.testing.assert_close(conf, want_conf, rtol=REL, atol=0)
        assert torch.equal(correct, want_correct)
    if want.eece_details is None:
        assert got.eece_details is None
        return
    a, b = got.eece_details, want.eece_details
    for key in ("counts", "acc", "mean_delta", "member_variance", "trust", "squared_error"):
        torch.testing.assert_close(
            getattr(a, key), getattr(b, key), rtol=REL, atol=1e-13, equal_nan=True
        )
    torch.testing.assert_close(a.per_class, b.per_class, rtol=REL, atol=1e-13)
    assert a.value == pytest.approx(b.value, rel=REL)
    assert (a.n_bins, a.n_bins_fitted, a.seeds) == (b.n_bins, b.n_bins_fitted, b.seeds)


@pytest.mark.parametrize("score", ["aps", "raps"])
def test_randomised_conformal_sets_get_the_in_memory_uniforms(tmp_path, score):
    z, y = _data(3, n=200)
    probs = torch.softmax(z, -1)
    arr = open_memmap(_save(tmp_path, probs.numpy().astype(np.float32)))
    kw = {"calibration_split": 0.5, "seed": 1, "conformal_score": score, "eece_seeds": 2}
    want = evaluate_predictions(
        torch.from_numpy(np.load(tmp_path / "pred.npy")), y, bootstrap=0, **kw
    )
    got = evaluate_memmap(arr, y, chunk_size=13, progress=False, **kw)
    _assert_same_evaluation(got, want)
    for key in ("coverage", "mean_set_size", "empty_set_rate"):  # counts: exact
        assert got.conformal[key] == want.conformal[key]
    assert [r["coverage"] for r in got.per_class] == [r["coverage"] for r in want.per_class]


def test_streamed_kmeans_refinement_with_a_split(tmp_path, monkeypatch):
    """A part larger than the K-means subsample: the fit gathers the seeded subsample rows and
    its refinement passes stream over the file (with a split: in file order, not test order)."""
    from bensemble.app.evaluate import split_indices
    from bensemble.metrics import expected_epistemic_calibration_error

    monkeypatch.setattr(se, "DEFAULT_SUBSAMPLE", 120)
    z, y = _data(4, n=600, k=3, seed=5)
    probs = torch.softmax(z, -1)
    arr = open_memmap(_save(tmp_path, z.numpy()))
    for split in (None, 0.3):
        kw = {"calibration_split": split, "seed": 2, "eece_bins": 10}
        got = evaluate_memmap(arr, y, chunk_size=50, from_logits=True, progress=False, **kw)
        test = torch.arange(600) if split is None else split_indices(600, split, seed=2)[2]
        want = expected_epistemic_calibration_error(
            probs[:, test], y[test], n_bins=10, seed=2, subsample=120
        )
        assert got.ensemble["eece"] == pytest.approx(want, rel=REL, abs=1e-14), split
        full = evaluate_predictions(probs, y, bootstrap=0, **kw).to_dict()  # a full fit
        got = got.to_dict()
        for key in ("eece", "eece_bins_fitted"):
            got["ensemble"].pop(key), full["ensemble"].pop(key)
        got["verdicts"].pop(2), full["verdicts"].pop(2)  # the EECE's verdict quotes it
        assert_same(got, full)


# ----------------------------------------------------------------------------- member order
def test_eece_does_not_depend_on_the_member_order(tmp_path):
    z, y = _data(4, n=300, seed=7)
    probs = torch.softmax(z, -1)
    want = evaluate_predictions(probs, y, seed=0, eece_bins=8, bootstrap=0).ensemble["eece"]
    for perm in ([3, 1, 0, 2], [1, 0, 2, 3], [3, 2, 1, 0]):
        arr = open_memmap(_save(tmp_path, probs[perm].numpy(), f"p{perm[0]}{perm[1]}.npy"))
        got = evaluate_memmap(arr, y, seed=0, eece_bins=8, chunk_size=64, progress=False)
        assert got.ensemble["eece"] == pytest.approx(want, rel=REL, abs=1e-14)


def test_canonical_order_reads_on_while_members_are_tied(tmp_path):
    """Members bit-identical on the first rows (and two identical everywhere): the order found
    block by block is the in-memory byte-wise order of the whole arrays."""
    _, y = _data(5, n=40)
    p = torch.softmax(torch.randn(5, 40, 3, generator=torch.Generator().manual_seed(1)), -1)
    p = p.to(torch.float64)
    p[:, :25] = p[0, :25]  # every member equal on the first 25 rows
    p[3] = p[1]  # members 1 and 3 identical throughout
    for perm in ([0, 1, 2, 3, 4], [4, 3, 2, 1, 0], [2, 4, 0, 3, 1]):
        q = p[perm]
        rows = MemberRows(q.numpy(), from_logits=False, name="p", fn="t")
        want = canonical_member_order(q)
        for block in (1, 7, 40):
            got = canonical_order_chunked(rows, block=block)
            assert (got is None) == (want is None)
            if want is not None:
                assert torch.equal(got, want)
        # and on a part given in a shuffled order
        part = np.random.default_rng(0).permutation(40)[:30]
        want = canonical_member_order(q[:, torch.from_numpy(part)])
        got = canonical_order_chunked(rows, part, block=4)
        assert (got is None) == (want is None) and (want is None or torch.equal(got, want))


# ----------------------------------------------------------------------------- bounded reads
class _Spy:
    """A read-only array that records how many rows each read asks for."""

    def __init__(self, array):
        self.array, self.shape, self.dtype, self.reads = array, array.shape, array.dtype, []

    def __getitem__(self, index):
        out = self.array[index]
        self.reads.append(out.shape[1] if out.ndim == 3 else out.shape[0])
        return out


def test_reads_stay_within_a_chunk_and_nothing_is_materialised(tmp_path, monkeypatch):
    import bensemble.metrics._kmeans as km

    monkeypatch.setattr(se, "DEFAULT_SUBSAMPLE", 400)
    monkeypatch.setattr(km, "DEFAULT_SUBSAMPLE", 400)
    n, chunk = 20_000, 256
    z, y = _data(3, n=n, k=4)
    path = _save(tmp_path, torch.softmax(z, -1).numpy())
    full = path.stat().st_size
    spy = _Spy(open_memmap(path))
    tracemalloc.start()
    try:
        ev = evaluate_memmap(spy, y, chunk_size=chunk, eece_bins=20, progress=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert ev.ensemble["eece"] > 0
    assert max(spy.reads) <= chunk
    assert sum(spy.reads) >= 3 * n  # the main pass and two refinement passes, chunk by chunk
    # numpy-side allocations: a few chunks and O(N) scalars (the selective metrics sort one
    # float64 per sample: 8 of the file's 96 bytes per sample), never the file
    assert peak < full / 4, (peak, full)


# ----------------------------------------------------------------------------- command line
def _run(argv, capsys):
    code = main(["evaluate", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("split", [None, "0.5"])
def test_cli_json_and_report_match_the_in_memory_run(tmp_path, capsys, split):
    z, y = _data(3, n=120)
    pred = _save(tmp_path, z.numpy().astype(np.float32))
    lab = _save(tmp_path, y.numpy(), "labels.npy")
    base = [pred, "--labels", lab, "--logits", "--json", "--eece-bins", "5"]
    base += [] if split is None else ["--calibration-split", split]
    mem = [*base, "--bootstrap", "0", "--out", tmp_path / "mem"]
    code, out, err = _run(mem, capsys)
    assert code == 0, err
    want = json.loads(out)
    code, out, err = _run([*base, "--chunk-size", "17", "--out", tmp_path / "chunked"], capsys)
    assert code == 0, err
    got = json.loads(out)
    assert got["inputs"].pop("chunk_size") == 17
    for payload in (got, want):
        report = payload.pop("report")
        assert sorted(report["files"]) == sorted(str(f) for f in Path(report["out"]).iterdir())
    assert_same(got, want)
    files = sorted(p.name for p in (tmp_path / "chunked").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "mem").iterdir())
    assert files == sorted(planned_files(ensemble=True, split=split is not None, intervals=False))
    summary = json.loads((tmp_path / "chunked" / "summary.json").read_text())
    reference = json.loads((tmp_path / "mem" / "summary.json").read_text())
    assert summary["files"] == reference["files"] and sorted(summary["files"]) == files
    for payload in (summary, reference):
        payload.pop("versions"), payload["inputs"].pop("chunk_size", None)
    assert_same(summary, reference)
    for name in files:  # the tables' files and the page: the same text, numbers to REL
        if (
            name.endswith((".csv", ".md", ".json"))
            and name != "summary.json"
            or name.endswith(".html")
        ):
            a, b = ((tmp_path / d / name).read_text() for d in ("chunked", "mem"))
            _assert_same_text(a, b, name)
    html = (tmp_path / "chunked" / "report.html").read_text()
    assert "No bootstrap (--bootstrap 0)" in html and "risk_coverage.png" in html


def _assert_same_text(got, want, name):
    """The same text with the numbers in it equal to REL (summation order may move a last
    digit); the PNGs embedded in the page are drawn from the same data, not compared bytewise."""
    import re

    png = re.compile(r"data:image/png;base64,[A-Za-z0-9+/=]+")
    assert len(png.findall(got)) == len(png.findall(want)), name
    got, want = png.sub("PNG", got), png.sub("PNG", want)
    number = re.compile(r"-?\d+\.\d+(?:e[-+]?\d+)?")
    assert number.sub("#", got) == number.sub("#", want), name
    got_nums = [float(x) for x in number.findall(got)]
    want_nums = [float(x) for x in number.findall(want)]
    assert got_nums == pytest.approx(want_nums, rel=REL, abs=1e-13), name


def test_cli_tables_without_json(tmp_path, capsys):
    z, y = _data(1, n=60)
    pred = _save(tmp_path, torch.softmax(z[0], -1).numpy())
    lab = _save(tmp_path, y.numpy(), "labels.npy")
    code, out, err = _run(
        [pred, "--labels", lab, "--chunk-size", "8", "--out", tmp_path / "r"], capsys
    )
    assert code == 0, err
    assert "Ensemble-mean prediction (all samples)" in out
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == sorted(
        planned_files(ensemble=False, split=False, intervals=False)
    )


@pytest.mark.parametrize("value", ["0", "-1", "x", "1.5"])
def test_bad_chunk_size_exits_2_with_one_line(tmp_path, capsys, value):
    z, y = _data(1, n=20)
    pred = _save(tmp_path, torch.softmax(z[0], -1).numpy())
    lab = _save(tmp_path, y.numpy(), "labels.npy")
    code, out, err = _run([pred, "--labels", lab, "--chunk-size", value, "--json"], capsys)
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and "--chunk-size" in lines[0] and "positive integer" in lines[0]


@pytest.mark.parametrize("ext", [".npz", ".csv", ".pt"])
def test_only_npy_can_be_memory_mapped(tmp_path, capsys, ext):
    z, y = _data(1, n=20)
    probs = torch.softmax(z[0], -1).numpy()
    pred = tmp_path / f"pred{ext}"
    if ext == ".npz":
        np.savez(pred, probs)
    elif ext == ".csv":
        np.savetxt(pred, probs, delimiter=",")
    else:
        torch.save(torch.from_numpy(probs), pred)
    lab = _save(tmp_path, y.numpy(), "labels.npy")
    out = tmp_path / "report"
    code, stdout, err = _run([pred, "--labels", lab, "--chunk-size", "4", "--out", out], capsys)
    assert code == 2 and stdout == "" and not out.exists()
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(PROG) and ".npy files only" in lines[0]


def test_bad_npy_inputs_exit_2_with_one_line(tmp_path, capsys):
    z, y = _data(1, n=20)
    lab = _save(tmp_path, y.numpy(), "labels.npy")
    cases = {
        "missing": (tmp_path / "missing.npy", "does not exist"),
        "not probabilities": (_save(tmp_path, z[0].numpy(), "z.npy"), "--logits"),
        "wrong rank": (_save(tmp_path, np.full((2, 2, 2, 2), 0.5), "r.npy"), "2-D [N, K]"),
        "object": (tmp_path / "obj.npy", "readable .npy"),
        "wrong labels": (_save(tmp_path, torch.softmax(z[0, :10], -1).numpy(), "s.npy"), "10"),
    }
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    for name, (pred, fragment) in cases.items():
        code, out, err = _run([pred, "--labels", lab, "--chunk-size", "4", "--json"], capsys)
        lines = err.splitlines()
        assert code == 2 and out == "" and len(lines) == 1, (name, err)
        assert lines[0].startswith(PROG) and fragment in lines[0], (name, lines[0])


def test_members_options_and_float16(tmp_path, capsys):
    """--members (a stacked 2-D table), --members-axis 1 and float16 rows as in memory."""
    z, y = _data(3, n=40)
    probs = torch.softmax(z, -1).numpy()
    lab = _save(tmp_path, y.numpy(), "labels.npy")
    variants = {
        "stacked": (probs.reshape(-1, probs.shape[-1]), ["--members", "3"]),
        "axis1": (probs.transpose(1, 0, 2).copy(), ["--members-axis", "1"]),
        "half": (probs.astype(np.float16), []),
    }
    for name, (array, extra) in variants.items():
        pred = _save(tmp_path, array, f"{name}.npy")
        argv = [pred, "--labels", lab, "--json", "--eece-bins", "4", *extra]
        code, out, err = _run([*argv, "--bootstrap", "0"], capsys)
        assert code == 0, err
        want = json.loads(out)
        code, out, err = _run([*argv, "--chunk-size", "9"], capsys)
        assert code == 0, (name, err)
        got = json.loads(out)
        got["inputs"].pop("chunk_size")
        assert_same(got, want, name)
        assert math.isfinite(got["ensemble"]["eece"])


def test_probabilities_passed_as_logits_warn_as_in_memory(tmp_path, capsys):
    z, y = _data(2, n=30)
    pred = _save(tmp_path, torch.softmax(z, -1).numpy())
    lab = _save(tmp_path, y.numpy(), "labels.npy")
    argv = [pred, "--labels", lab, "--logits", "--json"]
    code, _, want = _run(argv, capsys)
    assert code == 0 and "already lie on the probability simplex" in want
    code, _, got = _run([*argv, "--chunk-size", "7"], capsys)
    assert code == 0 and got.splitlines() == want.splitlines()


def test_options_needing_every_sample_are_refused_with_one_line(tmp_path, capsys):
    """An option the chunked run cannot honour exactly (bootstrap intervals) is refused, with the
    reason; ``--bootstrap 0`` (what the chunked report is) is accepted."""
    from bensemble.app.evaluate_cli import run_evaluate
    from bensemble.cli import _build_parser

    z, y = _data(1, n=20)
    pred = _save(tmp_path, torch.softmax(z[0], -1).numpy())
    lab = _save(tmp_path, y.numpy(), "labels.npy")
    argv = ["evaluate", str(pred), "--labels", str(lab), "--chunk-size", "4", "--json"]
    args = _build_parser().parse_args(argv)
    args.bootstrap = 200
    assert run_evaluate(args) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(PROG) and "--bootstrap" in err[0]
    out = tmp_path / "r"
    code, stdout, err = _run([*argv[1:], "--bootstrap", "50", "--out", out], capsys)
    assert code == 2 and stdout == "" and not out.exists()
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(PROG), err
    for why in ("--bootstrap 50 cannot be used with --chunk-size", "every prediction", "0"):
        assert why in lines[0], lines[0]
    code, stdout, err = _run([*argv[1:], "--bootstrap", "0"], capsys)
    assert code == 0, err
    assert json.loads(stdout)["setup"]["bootstrap"] == 0
