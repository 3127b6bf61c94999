"""``bensemble evaluate``'s command line over the one streaming engine: ``--chunk-size`` is a
tuning knob (the same JSON, tables, files and page whatever its value, intervals included),
every format streams, several PREDICTIONS files or a glob are one dataset, and bad inputs exit
2 with one line."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from bensemble.app.evaluate import planned_files
from bensemble.cli import main

PROG = "bensemble evaluate: error: "
#: the same float64 terms summed in other chunks: see tests/cli/test_evaluate_streaming.py
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


def assert_same(got, want, path="out"):
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


def _run(argv, capsys):
    code = main(["evaluate", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _assert_same_text(got, want, name):
    """The same text with its numbers equal to REL; embedded PNGs counted, not compared."""
    png = re.compile(r"data:image/png;base64,[A-Za-z0-9+/=]+")
    assert len(png.findall(got)) == len(png.findall(want)), name
    got, want = png.sub("PNG", got), png.sub("PNG", want)
    number = re.compile(r"-?\d+\.\d+(?:e[-+]?\d+)?")
    assert number.sub("#", got) == number.sub("#", want), name
    got_nums = [float(x) for x in number.findall(got)]
    want_nums = [float(x) for x in number.findall(want)]
    assert got_nums == pytest.approx(want_nums, rel=REL, abs=1e-13), name


@pytest.mark.parametrize("split", [None, "0.5"])
def test_chunk_size_changes_no_number_table_file_or_page(tmp_path, capsys, split):
    z, y = _data(3, n=120)
    pred = _save(tmp_path, z.numpy().astype(np.float32))
    lab = _save(tmp_path, y.numpy(), "labels.npy")
    base = [pred, "--labels", lab, "--logits", "--json", "--eece-bins", "5", "--bootstrap", "30"]
    base += [] if split is None else ["--calibration-split", split]
    code, out, err = _run([*base, "--out", tmp_path / "whole"], capsys)
    assert code == 0, err
    want = json.loads(out)
    code, out, err = _run([*base, "--chunk-size", "17", "--out", tmp_path / "chunked"], capsys)
    assert code == 0, err
    got = json.loads(out)
    assert got["inputs"].pop("chunk_size") == 17
    for payload in (got, want):
        report = payload.pop("report")
        assert sorted(report["files"]) == sorted(str(f) for f in Path(report["out"]).iterdir())
    assert got["intervals"] and got["setup"]["bootstrap"] == 30
    assert_same(got, want)
    files = sorted(p.name for p in (tmp_path / "chunked").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "whole").iterdir())
    assert files == sorted(planned_files(ensemble=True, split=split is not None))
    for name in files:
        if (
            name.endswith((".csv", ".md", ".html"))
            or name.endswith(".json")
            and name != ("summary.json")
        ):
            a, b = ((tmp_path / d / name).read_text() for d in ("chunked", "whole"))
            _assert_same_text(a, b, name)
    summary = json.loads((tmp_path / "chunked" / "summary.json").read_text())
    reference = json.loads((tmp_path / "whole" / "summary.json").read_text())
    for payload in (summary, reference):
        payload.pop("versions"), payload["inputs"].pop("chunk_size", None)
    assert_same(summary, reference)


def test_cli_tables_without_json(tmp_path, capsys):
    z, y = _data(1, n=60)
    pred = _save(tmp_path, torch.softmax(z[0], -1).numpy())
    lab = _save(tmp_path, y.numpy(), "labels.npy")
    argv = [pred, "--labels", lab, "--chunk-size", "8", "--bootstrap", "0", "--out", tmp_path / "r"]
    code, out, err = _run(argv, capsys)
    assert code == 0, err
    assert "Ensemble-mean prediction (all samples)" in out
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == sorted(
        planned_files(ensemble=False, split=False, intervals=False)
    )


@pytest.mark.parametrize("value", ["0", "-1", "x", "1.5"])
@pytest.mark.parametrize("option", ["--chunk-size", "--workers"])
def test_bad_chunk_size_or_workers_exit_2_with_one_line(tmp_path, capsys, value, option):
    z, y = _data(1, n=20)
    pred = _save(tmp_path, torch.softmax(z[0], -1).numpy())
    lab = _save(tmp_path, y.numpy(), "labels.npy")
    code, out, err = _run([pred, "--labels", lab, option, value, "--json"], capsys)
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and option in lines[0] and "positive integer" in lines[0]


@pytest.mark.parametrize("ext", [".npz", ".csv", ".pt"])
def test_every_format_streams_with_the_same_numbers(tmp_path, capsys, ext):
    z, y = _data(1, n=40)
    probs = torch.softmax(z[0], -1).numpy()
    pred = tmp_path / f"pred{ext}"
    if ext == ".npz":
        np.savez(pred, probs)
    elif ext == ".csv":
        np.savetxt(pred, probs, delimiter=",", fmt="%.17g")
    else:
        torch.save(torch.from_numpy(probs), pred)
    lab = _save(tmp_path, y.numpy(), "labels.npy")
    npy = _save(tmp_path, probs, "same.npy")
    code, out, err = _run([npy, "--labels", lab, "--json", "--bootstrap", "10"], capsys)
    assert code == 0, err
    want = json.loads(out)
    code, out, err = _run(
        [pred, "--labels", lab, "--chunk-size", "4", "--json", "--bootstrap", "10"], capsys
    )
    assert code == 0, err
    got = json.loads(out)
    for payload in (got, want):
        payload.pop("inputs")
    assert_same(got, want)


def test_bad_npy_inputs_exit_2_with_one_line(tmp_path, capsys):
    z, y = _data(1, n=20)
    lab = _save(tmp_path, y.numpy(), "labels.npy")
    cases = {
        "missing": (tmp_path / "missing.npy", "does not exist"),
        "not probabilities": (_save(tmp_path, z[0].numpy(), "z.npy"), "--logits"),
        "wrong rank": (_save(tmp_path, np.full((2, 2, 2, 2), 0.5), "r.npy"), "2-D [N, K]"),
        "object": (tmp_path / "obj.npy", "pickled object array"),
        "wrong labels": (_save(tmp_path, torch.softmax(z[0, :10], -1).numpy(), "s.npy"), "10"),
    }
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    for name, (pred, fragment) in cases.items():
        code, out, err = _run([pred, "--labels", lab, "--chunk-size", "4", "--json"], capsys)
        lines = err.splitlines()
        assert code == 2 and out == "" and len(lines) == 1, (name, err)
        assert lines[0].startswith(PROG) and fragment in lines[0], (name, lines[0])


def test_members_options_and_float16(tmp_path, capsys):
    """--members (a stacked 2-D table), --members-axis 1 and float16 rows, chunked and not."""
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
        argv = [pred, "--labels", lab, "--json", "--eece-bins", "4", "--bootstrap", "0", *extra]
        code, out, err = _run(argv, capsys)
        assert code == 0, err
        want = json.loads(out)
        code, out, err = _run([*argv, "--chunk-size", "9"], capsys)
        assert code == 0, (name, err)
        got = json.loads(out)
        got["inputs"].pop("chunk_size")
        assert_same(got, want, name)
        assert math.isfinite(got["ensemble"]["eece"])


def test_probabilities_passed_as_logits_warn_once(tmp_path, capsys):
    z, y = _data(2, n=30)
    pred = _save(tmp_path, torch.softmax(z, -1).numpy())
    lab = _save(tmp_path, y.numpy(), "labels.npy")
    argv = [pred, "--labels", lab, "--logits", "--json", "--bootstrap", "0"]
    code, _, want = _run(argv, capsys)
    assert code == 0 and "already lie on the probability simplex" in want
    assert len(want.splitlines()) == 1
    code, _, got = _run([*argv, "--chunk-size", "7"], capsys)
    assert code == 0 and got.splitlines() == want.splitlines()


# ----------------------------------------------------------------------------- shards
def test_shards_and_a_glob_are_one_dataset(tmp_path, capsys):
    z, y = _data(3, n=200, seed=3)
    whole = _save(tmp_path, z.numpy(), "whole.npy")
    (tmp_path / "parts").mkdir()
    cuts = [0, 50, 120, 170, 200]
    for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:], strict=True)):
        _save(tmp_path / "parts", z[:, a:b].numpy(), f"p{i}.npy")
        _save(tmp_path / "parts", y[a:b].numpy(), f"y{i}.npy")
    lab = _save(tmp_path, y.numpy(), "labels.npy")
    common = ["--logits", "--json", "--bootstrap", "20", "--calibration-split", "0.3"]
    code, out, err = _run([whole, "--labels", lab, *common], capsys)
    assert code == 0, err
    want = json.loads(out)
    runs = {
        "files": [*(tmp_path / "parts" / f"p{i}.npy" for i in range(4)), "--labels", lab],
        "glob and labels per shard": [
            tmp_path / "parts" / "p*.npy",
            "--labels",
            *(tmp_path / "parts" / f"y{i}.npy" for i in range(4)),
        ],
        "label glob, chunked": [
            tmp_path / "parts" / "p?.npy",
            "--labels",
            tmp_path / "parts" / "y*.npy",
            "--chunk-size",
            "16",
        ],
    }
    for name, argv in runs.items():
        code, out, err = _run([*argv, *common], capsys)
        assert code == 0, (name, err)
        got = json.loads(out)
        assert got["setup"]["samples"] == 200
        for payload in (got, want):
            payload.pop("inputs", None)
        assert_same(got, want, name)


def test_bad_shards_exit_2_with_one_line(tmp_path, capsys):
    z, y = _data(3, n=40)
    a = _save(tmp_path, z[:, :20].numpy(), "a.npy")
    b = _save(tmp_path, z[:2, 20:].numpy(), "b.npy")
    lab = _save(tmp_path, y.numpy(), "labels.npy")
    cases = {
        "members differ": ([a, b, "--labels", lab], "must share M members and K classes"),
        "no match": ([tmp_path / "none*.npy", "--labels", lab], "matches no file"),
        "labels per shard": ([a, a, "--labels", lab, lab, lab], "one per shard"),
    }
    for name, (argv, fragment) in cases.items():
        out = tmp_path / "r"
        code, stdout, err = _run([*argv, "--logits", "--out", out], capsys)
        lines = err.splitlines()
        assert code == 2 and stdout == "" and len(lines) == 1, (name, err)
        assert lines[0].startswith(PROG) and fragment in lines[0], (name, lines[0])
        assert not out.exists()


@pytest.mark.slow
def test_workers_give_the_identical_report(tmp_path, capsys):
    z, y = _data(3, n=300, seed=4)
    pred = _save(tmp_path, z.numpy(), "p.npy")
    lab = _save(tmp_path, y.numpy(), "labels.npy")
    common = [pred, "--labels", lab, "--logits", "--json", "--bootstrap", "20"]
    code, out, err = _run(common, capsys)
    assert code == 0, err
    want = json.loads(out)
    code, out, err = _run([*common, "--workers", "2", "--chunk-size", "64"], capsys)
    assert code == 0, err
    got = json.loads(out)
    assert got["inputs"].pop("workers") == 2 and got["inputs"].pop("chunk_size") == 64
    assert_same(got, want)
