"""``bensemble reproduce``: every experiment through the CLI (--quick), and the helpers' logic."""

from __future__ import annotations

import gzip
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bensemble.cli import main
from bensemble.experiments._common import (
    aggregate,
    display_rows,
    mean_sd,
    repeat_seeds,
    single_thread,
)
from bensemble.experiments._scores import binary_scores, one_vs_all
from bensemble.experiments.autoencoder import ConvAutoEncoder
from bensemble.experiments.noise import with_ratios
from bensemble.experiments.paper_values import paper_table
from bensemble.experiments.reproduce import (
    EXPERIMENTS,
    DataUnavailableError,
    reproduce,
    runner,
)
from bensemble.experiments.vision import load_fashion_mnist, read_idx
from bensemble.methods.zoo import PAPER_ORDER

QUICK = ["--quick", "--no-progress"]


def _table(folder: Path, name: str) -> dict:
    for ext in (".md", ".csv", ".json"):
        assert (folder / f"{name}{ext}").is_file(), f"{name}{ext} missing in {folder}"
    return json.loads((folder / f"{name}.json").read_text())


def _pngs(folder: Path) -> list[str]:
    names = sorted(p.name for p in folder.glob("*.png"))
    for name in names:
        assert (folder / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return names


def _no_temp_files(folder: Path) -> None:
    assert not [p for p in folder.iterdir() if p.name.startswith(".bensemble-tmp-")]


# ----------------------------------------------------------------------------- CLI, in process
def test_reproduce_toy_quick(tmp_path, capsys):
    assert main(["reproduce", "toy", *QUICK, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    folder = tmp_path / "toy"
    table = _table(folder, "toy")
    assert [r["method"] for r in table["rows"]] == [*PAPER_ORDER, "Random Forest (leaf 1)"]
    for column in ("accuracy", "ece", "eece", "tece", "gap", "paper EECE", "paper finding"):
        assert column in table["columns"]
    for row in table["rows"]:
        assert row["paper EECE"] == "n/a"
        assert math.isclose(row["gap"], abs(row["eece"] - row["tece"]), rel_tol=1e-12)
        assert 0.0 <= row["accuracy"] <= 1.0
    assert _pngs(folder) == ["toy_eece.png", "toy_eu_maps.png"]
    assert "paper EECE" in out and "EK-NN: k = 10" in out and "elapsed" in out
    _no_temp_files(folder)


def test_reproduce_size_quick_with_repeats(tmp_path, capsys):
    assert main(["reproduce", "size", *QUICK, "--repeats", "2", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    table = _table(tmp_path / "size", "size")
    rows = {r["n_train"]: r for r in table["rows"]}
    assert sorted(rows) == [10, 50]
    assert rows[10]["paper EECE"] == "0.07" and rows[50]["paper EECE"] == "0.007"
    # The paper's forest cannot split 10 points: one member vector for every test point.
    assert rows[10]["vectors leaf5"] == 1.0
    assert rows[50]["vectors leaf1"] > 1.0
    for column in ("EECE leaf5", "EECE leaf5 sd", "TECE leaf1", "EECE leaf1 sd"):
        assert column in table["columns"]
    assert "±" in out
    assert _pngs(tmp_path / "size") == ["size.png"]
    verdicts = _table(tmp_path / "size", "size_verdicts")["rows"]
    assert {v["verdict"] for v in verdicts} == {"not comparable"}  # --quick
    repeats = _table(tmp_path / "size", "size_repeats")["rows"]
    assert sorted({r["seed"] for r in repeats}) == [0, 1] and len(repeats) == 4


def test_reproduce_noise_quick(tmp_path):
    assert main(["reproduce", "noise", *QUICK, "--repeats", "1", "--out", str(tmp_path)]) == 0
    table = _table(tmp_path / "noise", "noise")
    assert [r["rho"] for r in table["rows"]] == [0.0, 0.95]
    assert table["rows"][0]["ratio leaf5"] == 1.0
    assert table["rows"][1]["paper ratio"] == "~10"
    assert table["rows"][0]["paper EECE"].startswith("0.007")  # the paper's absolute level
    ratio = table["rows"][1]["EECE leaf5"] / table["rows"][0]["EECE leaf5"]
    assert math.isclose(table["rows"][1]["ratio leaf5"], ratio, rel_tol=1e-12)
    assert "EECE leaf5 sd" not in table["columns"]  # one repeat: no sd
    assert _pngs(tmp_path / "noise") == ["noise.png"]


def test_reproduce_binning_quick(tmp_path, capsys):
    assert main(["reproduce", "binning", *QUICK, "--repeats", "1", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rows = _table(tmp_path / "binning", "binning")["rows"]
    assert [r["n_bins"] for r in rows] == [5, 20, 32, 50]  # 32: n_bins="auto" at N = 1,000
    assert [r["auto"] for r in rows] == ["", "", "n_bins='auto'", ""]
    assert len({r["TECE"] for r in rows}) == 1  # one ensemble, one TECE
    for r in rows:
        assert math.isclose(r["|EECE - TECE|"], abs(r["EECE"] - r["TECE"]), rel_tol=1e-12)
    for r in rows:
        assert math.isclose(r["EECE - TECE"], r["EECE"] - r["TECE"], rel_tol=1e-12)
    verdicts = _table(tmp_path / "binning", "binning_verdicts")["rows"]
    assert [v["row"] for v in verdicts] == ["minimum of |EECE - TECE|", "EECE rises with the bins"]
    assert "n_bins='auto' picks M = 32 at N = 1000" in out
    assert _pngs(tmp_path / "binning") == ["binning.png"]


def test_reproduce_binning_test_size(tmp_path, capsys):
    argv = ["reproduce", "binning", *QUICK, "--n-test", "2500", "--out", str(tmp_path)]
    assert main(argv) == 0
    rows = _table(tmp_path / "binning", "binning")["rows"]
    assert [r["n_bins"] for r in rows] == [5, 20, 50]  # auto = sqrt(2500) = 50
    assert rows[-1]["auto"] == "n_bins='auto'" and rows[-1]["points per bin"] == 50
    assert "2500 test points" in capsys.readouterr().out


@pytest.mark.parametrize("features", ["ae", "raw"])
def test_reproduce_digits_quick(tmp_path, capsys, features):
    argv = ["reproduce", "digits", *QUICK, "--features", features, "--out", str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    folder = tmp_path / "digits"
    table = _table(folder, "digits_table")
    assert [(r["metric"], r["task"]) for r in table["rows"]] == [
        (m, t) for m in ("Acc.", "ECE", "EECE") for t in ("0vsAll", "1vsAll", "mean")
    ]
    # Paper value in parentheses: Centroids, 0vsAll accuracy is 0.94 in table 1.
    assert table["rows"][0]["Centroids"].endswith("(0.94)")
    summary = _table(folder, "digits_summary")["rows"]
    assert [r["method"] for r in summary] == list(PAPER_ORDER)
    per_task = _table(folder, "digits_per_task")["rows"]
    assert len(per_task) == 2 * len(PAPER_ORDER)
    assert _pngs(folder) == ["digits_ece.png", "digits_eece.png", "digits_fig4a.png"]
    assert ("auto-encoder" in out) == (features == "ae")


def _write_idx(path: Path, array: np.ndarray, code: int, compress: bool) -> None:
    dtype = {0x08: ">u1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8", 0x09: ">i1"}[code]
    header = bytes([0, 0, code, array.ndim]) + np.asarray(array.shape, ">u4").tobytes()
    raw = header + np.ascontiguousarray(array, dtype=dtype).tobytes()
    path.write_bytes(gzip.compress(raw) if compress else raw)


def _fake_fashion(folder: Path, n_train: int = 60, n_test: int = 40) -> None:
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    for prefix, n, gz in (("train", n_train, True), ("t10k", n_test, False)):
        labels = np.arange(n, dtype=np.uint8) % 10
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        images[labels == 0, :14] = 255  # something for the classifiers to find
        suffix = ".gz" if gz else ""
        _write_idx(folder / f"{prefix}-images-idx3-ubyte{suffix}", images, 0x08, gz)
        _write_idx(folder / f"{prefix}-labels-idx1-ubyte{suffix}", labels, 0x08, gz)


def test_reproduce_fashion_quick_on_tiny_idx_files(tmp_path):
    data = tmp_path / "data"
    _fake_fashion(data)
    out = tmp_path / "out"
    argv = ["reproduce", "fashion", *QUICK, "--data-dir", str(data), "--out", str(out)]
    assert main(argv) == 0
    table = _table(out / "fashion", "fashion_table")
    assert [r["task"] for r in table["rows"][:3]] == ["T-shirt/top", "Trouser", "mean"]
    # No per-task paper value for Fashion-MNIST; the mean row carries the MNIST mean.
    assert "(" not in table["rows"][0]["Centroids"]
    mean = paper_table("table1").mean("accuracy", "Centroids").value  # all ten MNIST tasks
    assert table["rows"][2]["Centroids"].endswith(f"({mean:.2f})")


def test_reproduce_fashion_without_data_fails_cleanly(tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["reproduce", "fashion", *QUICK, "--data-dir", str(tmp_path / "none"), "--out", str(out)]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert "make data" in err and "dataset-fashion-mnist" in err and "--data-dir" in err
    assert not out.exists()


def test_reproduce_rejects_bad_arguments(tmp_path, capsys):
    assert main(["reproduce", "toy", "--repeats", "0", "--out", str(tmp_path / "o")]) == 2
    assert "`--repeats` must be an integer >= 1" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    assert main(["reproduce", "cifar"]) == 2
    with pytest.raises(ValueError, match="`name` must be one of"):
        reproduce("cifar")
    assert set(EXPERIMENTS) == {
        *("toy", "size", "noise", "binning", "digits", "fashion"),
        *("mnist", "cifar10", "fig1", "all"),
    }
    assert all(callable(runner(name)) for name in EXPERIMENTS)


@pytest.mark.slow
def test_reproduce_toy_quick_as_subprocess(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "bensemble.cli", "reproduce", "toy", *QUICK, "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "MPLBACKEND": "Agg"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "toy: EECE per method" in proc.stdout
    assert (tmp_path / "toy" / "toy.json").is_file()


# ----------------------------------------------------------------------------- helpers
def test_one_vs_all_matches_numpy():
    labels = np.random.default_rng(1).integers(0, 10, size=200)
    for k in (0, 3, 9):
        got = one_vs_all(torch.from_numpy(labels), k)
        assert got.dtype == torch.int64
        np.testing.assert_array_equal(got.numpy(), np.where(labels == k, 1, 0))
    np.testing.assert_array_equal(one_vs_all(labels, np.int64(4)).numpy(), labels == 4)
    with pytest.raises(ValueError, match="`labels`"):
        one_vs_all(torch.tensor([0.0, 1.0]), 1)
    with pytest.raises(ValueError, match="`positive`"):
        one_vs_all(torch.tensor([0, 1]), 1.0)


def test_mean_sd_matches_statistics():
    values = [0.1, 0.4, 0.35, 0.9]
    mean, sd = mean_sd(values)
    assert math.isclose(mean, statistics.fmean(values))
    assert math.isclose(sd, statistics.stdev(values))
    assert mean_sd([0.5]) == (0.5, None)
    assert mean_sd([None, float("nan"), 2.0, 4.0]) == (3.0, math.sqrt(2.0))
    assert math.isnan(mean_sd([])[0])


def test_aggregate_groups_in_order_and_adds_sd_columns():
    records = [
        {"n": 10, "paper": 0.07, "eece": 0.1, "tece": 0.2},
        {"n": 50, "paper": "n/a", "eece": 0.3, "tece": 0.4},
        {"n": 10, "paper": 0.07, "eece": 0.3, "tece": 0.6},
        {"n": 50, "paper": "n/a", "eece": 0.5, "tece": 0.4},
    ]
    rows = aggregate(records, ["n"], ["eece", "tece"])
    assert [r["n"] for r in rows] == [10, 50]
    assert list(rows[0]) == ["n", "paper", "eece", "eece sd", "tece", "tece sd"]
    assert math.isclose(rows[0]["eece"], 0.2) and math.isclose(rows[0]["tece"], 0.4)
    assert math.isclose(rows[0]["eece sd"], statistics.stdev([0.1, 0.3]))
    assert rows[1]["tece sd"] == 0.0 and rows[1]["paper"] == "n/a"
    single = aggregate(records[:2], ["n"], ["eece"])
    assert "eece sd" not in single[0]
    shown = display_rows(rows)
    assert shown[0]["eece"] == "0.2000 ± 0.1414" and "eece sd" not in shown[0]
    assert shown[0]["paper"] == 0.07


def test_single_thread_restores_the_thread_count_even_on_error():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with pytest.raises(RuntimeError):
            with single_thread():
                assert torch.get_num_threads() == 1
                raise RuntimeError("boom")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_repeat_seeds():
    assert repeat_seeds(7, 3) == [7, 8, 9]
    with pytest.raises(ValueError, match="`repeats`"):
        repeat_seeds(0, 0)


def test_binary_scores_against_closed_forms():
    g = torch.Generator().manual_seed(0)
    n = 300
    p = torch.rand(n, generator=g, dtype=torch.float64)
    eta = torch.rand(n, generator=g, dtype=torch.float64)
    y = torch.bernoulli(eta, generator=g).long()
    members = p.expand(4, n)  # identical members: EU = 0, TECE = mean (eta - p)^2
    s = binary_scores(members, y, eta=eta, n_bins=10, seed=0, condition_on="x")
    assert math.isclose(s["tece"], float(((eta - p) ** 2).mean()), rel_tol=1e-12)
    assert math.isclose(s["accuracy"], float(((p > 0.5).long() == y).double().mean()))
    three = binary_scores(torch.stack([1 - members, members], dim=-1), y, n_bins=10, seed=0)
    assert three["eece"] == s["eece"] and "tece" not in three
    with pytest.raises(ValueError, match="member_probs"):
        binary_scores(torch.rand(2, 5, 3), torch.zeros(5, dtype=torch.long))


def test_with_ratios_divides_by_the_same_repeats_first_rho():
    rows = [
        {"seed": 0, "rho": 0.0, "EECE leaf5": 0.01, "EECE leaf1": 0.02},
        {"seed": 0, "rho": 0.95, "EECE leaf5": 0.09, "EECE leaf1": 0.1},
        {"seed": 1, "rho": 0.0, "EECE leaf5": 0.02, "EECE leaf1": 0.05},
        {"seed": 1, "rho": 0.95, "EECE leaf5": 0.1, "EECE leaf1": 0.1},
    ]
    out = with_ratios(rows)
    assert [r["ratio leaf5"] for r in out] == pytest.approx([1.0, 9.0, 1.0, 5.0])
    assert [r["ratio leaf1"] for r in out] == pytest.approx([1.0, 5.0, 1.0, 2.0])


def test_one_vs_all_tables_layout_and_paper_lookup():
    from dataclasses import replace

    from bensemble.experiments._common import RunOptions
    from bensemble.experiments._one_vs_all_tables import _layout, _per_task, _summary
    from bensemble.experiments.digits import SPEC

    config = replace(SPEC.configure(RunOptions()), tasks=((3, "3vsAll"), (7, "7vsAll")))
    records = []
    for seed, shift in ((0, 0.0), (1, 0.02)):
        for task in ("3vsAll", "7vsAll"):
            for j, m in enumerate(PAPER_ORDER):
                convention = "members" if j not in (0, 3, 4) else config.convention.label
                records.append({
                    "seed": seed, "kind": "method", "task": task, "method": m,
                    "convention": convention, "accuracy": 0.9 + shift, "ece": 0.01 * j,
                    "eece": 0.001 * j + shift,
                })  # fmt: skip
    # another convention's rows never reach the tables
    records.append({**records[0], "convention": "trust=EU, clipped", "accuracy": 0.0})
    per_task = {(r["task"], r["method"]): r for r in _per_task(records, config)}
    row = per_task[("7vsAll", "Likelihood")]
    assert math.isclose(row["accuracy"], 0.91) and math.isclose(row["accuracy sd"], 0.02 / 2**0.5)
    assert row["paper eece"] == 0.14
    summary = {r["method"]: r for r in _summary(records, config)}
    assert math.isclose(summary["EK-NN"]["ece"], 0.04)
    assert summary["EK-NN"]["ece sd"] == 0.0  # same value on both tasks
    assert math.isclose(summary["Centroids"]["paper accuracy"], (0.88 + 0.94) / 2)  # rows 3, 7
    layout = _layout(records, config)
    labels = [(r["metric"], r["task"]) for r in layout]
    assert labels[:3] == [("Acc.", "3vsAll"), ("Acc.", "7vsAll"), ("Acc.", "mean")]
    assert layout[0]["Centroids"] == "0.91 (0.88)"  # table 1: Centroids, 3vsAll


def test_paper_table1_is_the_papers_mnist_table():
    table = paper_table("table1")
    for metric in ("accuracy", "ece", "eece"):
        assert len(table.printed[metric]) == 10
        assert all(len(row) == len(PAPER_ORDER) for row in table.printed[metric])
    assert table.methods == PAPER_ORDER
    # Spot checks against the paper's table 1.
    assert table.value("accuracy", 9, "Centroids") == "0.83"
    assert table.value("eece", 0, "Likelihood") == "0.14"
    assert (
        table.value("eece", 2, "Centroids") == "0.10"
        and table.value("ece", 5, "Centroids") == "0.39"
    )


@pytest.mark.parametrize("code", [0x08, 0x09, 0x0B, 0x0C, 0x0D, 0x0E])
@pytest.mark.parametrize("compress", [False, True])
def test_read_idx_round_trip(tmp_path, code, compress):
    rng = np.random.default_rng(code)
    array = (rng.random((3, 4, 5)) * 100).astype(
        {
            0x08: np.uint8,
            0x09: np.int8,
            0x0B: np.int16,
            0x0C: np.int32,
            0x0D: np.float32,
            0x0E: np.float64,
        }[code]
    )
    path = tmp_path / "file.idx"
    _write_idx(path, array, code, compress)
    got = read_idx(path)
    assert got.shape == array.shape and got.dtype.isnative
    np.testing.assert_array_equal(got, array)


def test_read_idx_rejects_malformed_files(tmp_path):
    path = tmp_path / "bad"
    path.write_bytes(b"\x01\x00\x08\x01" + (3).to_bytes(4, "big") + b"abc")
    with pytest.raises(ValueError, match="bad magic"):
        read_idx(path)
    path.write_bytes(b"\x00\x00\x07\x01" + (3).to_bytes(4, "big") + b"abc")
    with pytest.raises(ValueError, match="type code"):
        read_idx(path)
    path.write_bytes(b"\x00\x00\x08\x01" + (4).to_bytes(4, "big") + b"abc")
    with pytest.raises(ValueError, match="must hold 12 bytes"):
        read_idx(path)
    path.write_bytes(b"\x00\x00\x08\x02" + (4).to_bytes(4, "big"))
    with pytest.raises(ValueError, match="truncated header"):
        read_idx(path)


def test_load_fashion_mnist_reads_gz_and_plain_files(tmp_path):
    _fake_fashion(tmp_path, n_train=12, n_test=8)
    data = load_fashion_mnist(tmp_path)
    x, y = data["train"]
    assert x.shape == (12, 1, 28, 28) and x.dtype == torch.float32
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    assert y.tolist() == [i % 10 for i in range(12)]
    assert data["test"][0].shape == (8, 1, 28, 28)
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(DataUnavailableError, match="t10k-labels-idx1-ubyte"):
        load_fashion_mnist(tmp_path)


def test_conv_autoencoder_matches_the_paper_architecture():
    ae = ConvAutoEncoder(side=28, latent_dim=64)
    linear = [m for m in ae.encoder if isinstance(m, torch.nn.Linear)][0]
    assert (linear.in_features, linear.out_features) == (1568, 64)  # appendix B.1.2
    x = torch.rand(3, 1, 28, 28)
    assert ae(x).shape == x.shape and ae.encoder(x).shape == (3, 64)
    small = ConvAutoEncoder(side=8, latent_dim=32)
    assert small(torch.rand(2, 1, 8, 8)).shape == (2, 1, 8, 8)
    with pytest.raises(ValueError, match="multiple of 4"):
        ConvAutoEncoder(side=10)
