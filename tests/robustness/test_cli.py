"""Issue 11, the command line: usage errors, report folders, options checked before any work.

Organised by the issue's classes. Class 1: ``--logits`` on rows that already are probabilities
warns on one stderr line. Class 3: seeds and counts of the experiment helpers are validated (no
bool, float or negative). Class 5: every usage error is one stderr line and exit 2; ``reproduce``
and ``demo`` check every option before training; a report folder holds exactly one run's files;
``--out ""`` is refused; ``--json`` without ``--out`` writes nothing; ``summary.json`` records the
versions. Commands run in-process (fast) except where the real process's exit status matters.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import bensemble
from bensemble.cli import main

M, N, K = 3, 80, 3


def _save_inputs(folder: Path, *, m: int = M, dtype=np.float64) -> tuple[str, str]:
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(K), size=(m, N)).astype(dtype)
    labels = rng.integers(0, K, size=N)
    np.save(folder / "p.npy", probs)
    np.save(folder / "y.npy", labels)
    return str(folder / "p.npy"), str(folder / "y.npy")


def _run(argv, capsys) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_error_line(err: str, prog: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{prog}: error: "), err
    return lines[0]


@pytest.fixture
def no_training(monkeypatch):
    """Fail the test if any experiment or the demo starts training."""
    import bensemble.app.demo as demo
    import bensemble.experiments.reproduce as reproduce

    def refuse(*args, **kwargs):
        raise AssertionError("training started before the options were checked")

    monkeypatch.setattr(reproduce, "runner", refuse)
    monkeypatch.setattr(demo, "_toy_runs", refuse)


# ============================================================================ class 1
def test_class1_logits_on_probabilities_warns_on_one_stderr_line(tmp_path, capsys):
    pred, lab = _save_inputs(tmp_path)
    code, out, err = _run(["evaluate", pred, "--labels", lab, "--logits", "--json"], capsys)
    assert code == 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("bensemble evaluate: warning: ") and "--logits" in lines[0]
    assert "already" in lines[0]
    json.loads(out)  # the run went on


@pytest.mark.parametrize("dtype", [np.float16], ids=["float16"])
def test_class1_half_precision_probabilities_evaluate_from_the_command_line(
    tmp_path, capsys, dtype
):
    pred, lab = _save_inputs(tmp_path, dtype=dtype)
    code, out, err = _run(["evaluate", pred, "--labels", lab, "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["setup"]["members"] == M


# ============================================================================ class 3
@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"seed": 1.7}, "seed"),
        ({"seed": -1}, "seed"),
        ({"seed": True}, "seed"),
        ({"repeats": 2.5}, "repeats"),
        ({"repeats": True}, "repeats"),
        ({"repeats": 0}, "repeats"),
        ({"quick": "no"}, "quick"),
    ],
    ids=[
        "seed-float",
        "seed-negative",
        "seed-bool",
        "repeats-float",
        "repeats-bool",
        "repeats-0",
        "quick-str",
    ],
)
def test_class3_run_options_are_validated(kwargs, name):
    from bensemble.experiments._common import RunOptions

    with pytest.raises(ValueError, match=f"`{name}`"):
        RunOptions(**kwargs)


@pytest.mark.parametrize("seed", [1.7, -1, True], ids=["float", "negative", "bool"])
def test_class3_repeat_seeds_refuses_bad_seeds(seed):
    from bensemble.experiments._common import repeat_seeds

    with pytest.raises(ValueError, match="`seed`"):
        repeat_seeds(seed, 2)


@pytest.mark.parametrize("seed", [1.7, -1, True], ids=["float", "negative", "bool"])
def test_class3_split_indices_refuses_bad_seeds(seed):
    from bensemble.app.evaluate import split_indices

    with pytest.raises(ValueError, match="`seed`"):
        split_indices(100, 0.5, seed=seed)


def test_class3_evaluate_predictions_accepts_a_numpy_integer_seed():
    from bensemble.app.evaluate import evaluate_predictions

    probs = torch.softmax(torch.randn(2, 50, 3, generator=torch.Generator().manual_seed(0)), -1)
    labels = torch.arange(50) % 3
    a = evaluate_predictions(probs, labels, calibration_split=0.5, seed=np.int64(3))
    b = evaluate_predictions(probs, labels, calibration_split=0.5, seed=3)
    assert a.metrics == b.metrics


@pytest.mark.parametrize("seed", [1.7, -1, True], ids=["float", "negative", "bool"])
def test_class3_run_demo_refuses_bad_seeds_before_training(tmp_path, seed, no_training):
    from bensemble.app.demo import run_demo

    with pytest.raises(ValueError, match="`seed`"):
        run_demo(seed=seed, out=tmp_path / "r", progress=False)


@pytest.mark.parametrize(
    "field, value",
    [("toy_train", 0), ("toy_test", 2.5), ("grid_per_axis", True), ("toy_calibration", -3)],
    ids=["train-0", "test-float", "grid-bool", "calibration-negative"],
)
def test_class3_demo_config_sizes_are_validated(field, value):
    from bensemble.app.demo import DemoConfig

    with pytest.raises(ValueError, match=f"`{field}`"):
        DemoConfig(**{field: value})


@pytest.mark.parametrize(
    "field, value",
    [("n_members", 0), ("epochs", 1.5), ("n_trees", True), ("dropconnect_p", 1.5)],
    ids=["members-0", "epochs-float", "trees-bool", "dropconnect-1.5"],
)
def test_class3_zoo_settings_are_validated(field, value):
    from bensemble.methods.zoo import ZooSettings

    with pytest.raises(ValueError, match=f"`{field}`"):
        ZooSettings(**{field: value})


@pytest.mark.parametrize("seed", [1.7, -1], ids=["float", "negative"])
def test_class3_zoo_member_probs_refuses_bad_seeds(seed):
    from bensemble.methods.zoo import member_probs

    x = torch.randn(20, 2)
    with pytest.raises(ValueError, match="`seed`"):
        member_probs("Random Forest", x, torch.arange(20) % 2, x, seed=seed)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"seed": 1.7}, "seed"),
        ({"seed": -1}, "seed"),
        ({"epochs": 2.5}, "epochs"),
        ({"batch_size": 0}, "batch_size"),
    ],
    ids=["seed-float", "seed-negative", "epochs-float", "batch-0"],
)
def test_class3_train_autoencoder_validates_seed_and_counts(kwargs, name):
    from bensemble.experiments.autoencoder import train_autoencoder

    args = {"latent_dim": 2, "epochs": 1, "seed": 0, **kwargs}
    with pytest.raises(ValueError, match=f"`{name}`"):
        train_autoencoder(torch.zeros(4, 1, 8, 8), **args)


def test_class3_encode_refuses_a_zero_batch_size():
    from bensemble.experiments.autoencoder import ConvAutoEncoder, encode

    with pytest.raises(ValueError, match="`batch_size`"):
        encode(ConvAutoEncoder(side=8, latent_dim=2, channels=1), torch.zeros(4, 1, 8, 8), 0)


@pytest.mark.parametrize(
    "kwargs, name",
    [({"seed": -1}, "seed"), ({"seed": 2.5}, "seed"), ({"n_trees": 0}, "n_trees")],
    ids=["seed-negative", "seed-float", "trees-0"],
)
def test_class3_forest_scores_validates_seed_and_trees(kwargs, name):
    from bensemble.datasets import make_toy_gaussians
    from bensemble.experiments.size import forest_scores

    data = make_toy_gaussians(20, generator=torch.Generator().manual_seed(0))
    args = {"min_samples_leaf": 1, "n_trees": 3, "n_bins": 2, "seed": 0, **kwargs}
    with pytest.raises(ValueError, match=f"`{name}`"):
        forest_scores(data.x, data.y, data, **args)


@pytest.mark.parametrize("seed", [1.7, -1], ids=["float", "negative"])
def test_class3_score_method_refuses_bad_seeds(seed):
    from bensemble.experiments._common import zoo_settings
    from bensemble.experiments._scores import score_method
    from bensemble.experiments.illustrative import CONVENTIONS

    x, y = torch.randn(6, 2), torch.tensor([0, 1, 0, 1, 0, 1])
    with pytest.raises(ValueError, match="`seed`"):
        score_method("EK-NN", (x, y), (x, y), settings=zoo_settings(True), seed=seed,
                     conventions=CONVENTIONS, n_bins=2)  # fmt: skip


# ============================================================================ class 4
def test_class4_huge_n_bins_is_a_usage_error_not_an_allocation(tmp_path, capsys):
    pred, lab = _save_inputs(tmp_path)
    code, _, err = _run(["evaluate", pred, "--labels", lab, "--json", "--n-bins", 2**40], capsys)
    assert code == 2
    assert "--n-bins" in _one_error_line(err, "bensemble evaluate")


# ============================================================================ class 5
@pytest.mark.parametrize(
    "argv, prog",
    [
        (["evaluate"], "bensemble evaluate"),
        (["evaluate", "p.npy", "--labels", "y.npy", "--seed", "x"], "bensemble evaluate"),
        (
            ["evaluate", "p.npy", "--labels", "y.npy", "--conformal-score", "bad"],
            "bensemble evaluate",
        ),
        (["evaluate", "p.npy", "--labels", "y.npy", "--bogus"], "bensemble"),
        (["reproduce", "cifar"], "bensemble reproduce"),
        (["demo", "--seed"], "bensemble demo"),
        (["frobnicate"], "bensemble"),
    ],
    ids=[
        "missing-args",
        "bad-int",
        "bad-choice",
        "unknown-option",
        "bad-experiment",
        "missing-value",
        "unknown-command",
    ],
)
def test_class5_usage_errors_are_one_line_and_exit_2(argv, prog, capsys):
    code, out, err = _run(argv, capsys)
    assert code == 2
    _one_error_line(err, prog)
    assert out == ""


def test_class5_help_returns_0(capsys):
    code, out, err = _run(["evaluate", "--help"], capsys)
    assert code == 0 and "--labels" in out and err == ""


def test_class5_usage_error_of_the_real_process(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "bensemble.cli", "evaluate", "--seed", "x"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith("bensemble evaluate: error: ")


@pytest.mark.parametrize("command", ["evaluate", "demo", "reproduce"])
def test_class5_empty_out_is_refused(tmp_path, capsys, monkeypatch, command, no_training):
    monkeypatch.chdir(tmp_path)
    pred, lab = _save_inputs(tmp_path)
    argv = {
        "evaluate": ["evaluate", pred, "--labels", lab],
        "demo": ["demo", "--quick", "--no-progress"],
        "reproduce": ["reproduce", "toy", "--quick", "--no-progress"],
    }[command]
    before = sorted(os.listdir(tmp_path))
    code, _, err = _run([*argv, "--out", ""], capsys)
    assert code == 2
    assert "--out" in _one_error_line(err, f"bensemble {command}")
    assert sorted(os.listdir(tmp_path)) == before


def test_class5_json_without_out_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    pred, lab = _save_inputs(tmp_path)
    before = sorted(os.listdir(tmp_path))
    code, out, err = _run(["evaluate", pred, "--labels", lab, "--json"], capsys)
    assert code == 0, err
    assert sorted(os.listdir(tmp_path)) == before
    assert json.loads(out)["report"] is None


def test_class5_evaluate_summary_records_versions(tmp_path, capsys):
    pred, lab = _save_inputs(tmp_path)
    code, _, err = _run(["evaluate", pred, "--labels", lab, "--out", tmp_path / "r"], capsys)
    assert code == 0, err
    versions = json.loads((tmp_path / "r" / "summary.json").read_text())["versions"]
    assert versions["bensemble"] == bensemble.__version__
    assert versions["torch"] == torch.__version__ and versions["numpy"] == np.__version__
    assert versions["platform"] and versions["python"]


def test_class5_smaller_rerun_leaves_only_its_own_files(tmp_path, capsys):
    pred, lab = _save_inputs(tmp_path)
    out = tmp_path / "r"
    big = ["evaluate", pred, "--labels", lab, "--calibration-split", "0.5", "--out", out]
    assert _run(big, capsys)[0] == 0
    assert (out / "ensemble.json").exists() and (out / "conformal.json").exists()
    one = tmp_path / "one.npy"
    np.save(one, np.load(pred)[0])
    code, _, err = _run(["evaluate", one, "--labels", lab, "--out", out, "--overwrite"], capsys)
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(p.name for p in out.iterdir()) == sorted(summary["files"])
    assert not (out / "ensemble.json").exists() and not (out / "conformal.csv").exists()


def test_class5_existing_report_is_refused_without_overwrite(tmp_path, capsys):
    pred, lab = _save_inputs(tmp_path)
    out = tmp_path / "r"
    assert _run(["evaluate", pred, "--labels", lab, "--out", out], capsys)[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    code, _, err = _run(["evaluate", pred, "--labels", lab, "--out", out, "--n-bins", "5"], capsys)
    assert code == 2
    assert "--overwrite" in _one_error_line(err, "bensemble evaluate")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


@pytest.mark.parametrize("overwrite", [False, True], ids=["plain", "overwrite"])
def test_class5_folder_holding_other_files_is_never_replaced(tmp_path, capsys, overwrite):
    pred, lab = _save_inputs(tmp_path)
    out = tmp_path / "r"
    (out / "thesis").mkdir(parents=True)
    (out / "thesis" / "chapter1.tex").write_text("keep me")
    argv = ["evaluate", pred, "--labels", lab, "--out", out] + (["--overwrite"] * overwrite)
    code, _, err = _run(argv, capsys)
    assert code == 2
    assert "thesis" in _one_error_line(err, "bensemble evaluate")
    assert sorted(p.name for p in out.iterdir()) == ["thesis"]


def test_class5_interleaved_runs_into_one_folder_never_mix(tmp_path):
    from bensemble.reporting.report import Report

    out = tmp_path / "r"
    first = Report(out, staged=True, overwrite=True)
    second = Report(out, staged=True, overwrite=True)
    first.add_text("a.txt", "first\n")
    second.add_text("b.txt", "second\n")
    first.add_text("c.txt", "first\n")
    assert not out.exists()  # nothing visible before a run commits
    second.commit()
    assert sorted(p.name for p in out.iterdir()) == ["b.txt"]
    first.commit()
    assert sorted(p.name for p in out.iterdir()) == ["a.txt", "c.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]  # no staging folder left


def test_class5_failed_run_leaves_no_staging_folder(tmp_path):
    from bensemble.reporting.report import Report

    with pytest.raises(RuntimeError), Report(tmp_path / "r", staged=True) as report:
        report.add_text("a.txt", "x\n")
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "extra, word",
    [
        (["--seed", "-1"], "--seed"),
        (["--seed", str(2**40)], "--seed"),
    ],
    ids=["seed-negative", "seed-huge"],
)
def test_class5_reproduce_checks_every_option_before_training(
    tmp_path, capsys, extra, word, no_training
):
    argv = ["reproduce", "toy", "--quick", "--no-progress", "--out", tmp_path / "o", *extra]
    code, _, err = _run(argv, capsys)
    assert code == 2
    assert word in _one_error_line(err, "bensemble reproduce")
    assert not (tmp_path / "o").exists()


def test_class5_reproduce_refuses_an_existing_report_before_training(tmp_path, capsys, no_training):
    (tmp_path / "o" / "toy").mkdir(parents=True)
    (tmp_path / "o" / "toy" / "toy.md").write_text("an earlier run\n")
    argv = ["reproduce", "toy", "--quick", "--no-progress", "--out", tmp_path / "o"]
    code, _, err = _run(argv, capsys)
    assert code == 2
    assert "--overwrite" in _one_error_line(err, "bensemble reproduce")


def test_class5_demo_refuses_an_existing_report_before_training(tmp_path, capsys, no_training):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "summary.json").write_text("{}\n")
    code, _, err = _run(["demo", "--quick", "--no-progress", "--out", tmp_path / "r"], capsys)
    assert code == 2
    assert "--overwrite" in _one_error_line(err, "bensemble demo")


def test_class5_reproduce_rerun_replaces_the_whole_report(tmp_path, capsys):
    out = tmp_path / "o"
    stale = out / "noise"
    stale.mkdir(parents=True)
    (stale / "old_figure.png").write_bytes(b"\x89PNG stale")
    argv = ["reproduce", "noise", "--quick", "--no-progress", "--repeats", "1", "--out", out]
    code, _, err = _run([*argv, "--overwrite"], capsys)
    assert code == 0, err
    names = sorted(p.name for p in stale.iterdir())
    assert "old_figure.png" not in names
    summary = json.loads((stale / "summary.json").read_text())
    assert sorted(summary["files"]) == names
    assert summary["versions"]["torch"] == torch.__version__


def test_class5_failed_experiment_leaves_nothing_in_the_report_root(tmp_path, monkeypatch):
    import bensemble.experiments.toy as toy
    from bensemble.experiments.reproduce import reproduce

    def failing_run(options):
        options.report("toy").add_text("half.txt", "written before the failure\n")
        raise RuntimeError("training diverged")

    monkeypatch.setattr(toy, "run", failing_run)
    with pytest.raises(RuntimeError, match="diverged"):
        reproduce("toy", out=tmp_path / "o", quick=True, progress=False)
    assert not (tmp_path / "o").exists() or list((tmp_path / "o").iterdir()) == []


def test_class5_reproduce_out_that_is_a_file_is_refused_before_training(
    tmp_path, capsys, no_training
):
    (tmp_path / "taken").write_text("keep me")
    argv = ["reproduce", "toy", "--quick", "--no-progress", "--out", tmp_path / "taken"]
    code, _, err = _run(argv, capsys)
    assert code == 2
    assert "not a folder" in _one_error_line(err, "bensemble reproduce")
    assert (tmp_path / "taken").read_text() == "keep me"


def test_class5_concurrent_commits_leave_exactly_one_runs_files(tmp_path):
    import threading

    from bensemble.reporting.report import Report

    out, runs = tmp_path / "r", 6
    barrier = threading.Barrier(runs)
    errors: list[BaseException] = []

    def one_run(i: int) -> None:
        try:
            report = Report(out, staged=True, overwrite=True)
            for j in range(3):
                report.add_text(f"run{i}_{j}.txt", f"{i}\n")
            barrier.wait()
            report.commit()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=one_run, args=(i,)) for i in range(runs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    names = sorted(p.name for p in out.iterdir())
    owners = {name.split("_")[0] for name in names}
    assert len(owners) == 1 and len(names) == 3, names
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]  # no staging or old folder left
