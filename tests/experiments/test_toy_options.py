"""`bensemble reproduce toy`: training options, convergence record, conventions, findings."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from bensemble.cli import main
from bensemble.datasets import make_toy_gaussians
from bensemble.experiments._common import RunOptions
from bensemble.experiments.illustrative import Convention
from bensemble.experiments.toy import EPOCHS, FLAT_TOLERANCE, run, toy_config
from bensemble.methods.zoo import LossLog, ZooSettings, member_probs


@pytest.mark.parametrize(
    ("flag", "value", "match"),
    [
        ("--n-train", "5", "n_train"),
        ("--epochs", "0", "epochs"),
        ("--lr", "0", "lr"),
        ("--lr", "nan", "lr"),
        ("--batch-size", "0", "batch_size"),
    ],
)
def test_bad_toy_options_fail_before_training(tmp_path, capsys, flag, value, match):
    start = time.perf_counter()
    code = main(["reproduce", "toy", flag, value, "--no-progress", "--out", str(tmp_path / "o")])
    assert code == 2
    assert match in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    assert time.perf_counter() - start < 5.0


def test_toy_config_defaults_and_validation():
    config = toy_config(RunOptions())
    assert (config.n_train, config.epochs, config.batch_size) == (10, EPOCHS, None)
    assert config.convention == Convention("reported", False)
    assert toy_config(RunOptions(quick=True)).epochs < EPOCHS
    for extra in ({"trust": "variance"}, {"clip": "yes"}, {"n_train": 10.0}, {"lr": True}):
        with pytest.raises(ValueError, match="reproduce toy"):
            toy_config(RunOptions(extra=extra))


def test_loss_flatness_by_hand():
    curve = [1.0] + [0.5] * 8 + [0.4] * 10 + [0.39] * 10  # 29 steps, windows of 2
    last, change = LossLog.flatness(curve)
    assert last == pytest.approx(0.39)
    assert change == pytest.approx(0.0)
    last, change = LossLog.flatness([2.0, 1.0, 0.8, 0.6, 0.4, 0.3, 0.2, 0.1, 0.05, 0.0])
    assert (last, change) == (pytest.approx(0.0), pytest.approx(0.05 / 2.0))


def test_default_toy_training_flattens_the_loss():
    """The toy default (full batch, 1000 Adam steps) leaves a flat loss curve on 10 points."""
    train = make_toy_gaussians(10, seed=0)
    settings = replace(ZooSettings.quick(), epochs=EPOCHS, batch_size=None, n_samples=5)
    curves: list[list[float]] = []
    member_probs("MC-Dropout", train.x, train.y, train.x, settings=settings, training_log=curves)
    assert len(curves) == 1 and len(curves[0]) == EPOCHS
    last, change = LossLog.flatness(curves[0])
    assert change < FLAT_TOLERANCE
    assert last < 0.01 * curves[0][0]


def test_quick_toy_run_records_training_conventions_and_findings(tmp_path):
    extra = {"n_train": 12, "epochs": 20, "trust": "draws", "clip": True}
    options = RunOptions(quick=True, progress=False, out=tmp_path, extra=extra)
    result = run(options)
    rows = result.tables["toy"]
    nets = [r for r in rows if r["method"] in ("Deep Ensemble", "MC-Dropout", "Bayesian Deep")]
    assert all(r["loss change"] is not None and r["train loss"] > 0 for r in nets)
    illus = [r for r in rows if r["group"] == "illustrative"]
    assert {r["convention"] for r in illus} == {"trust=Var(draws), clipped"}
    every = result.tables["toy_conventions"]
    assert len(every) == 12  # three methods under four conventions
    assert len({r["convention"] for r in every}) == 4
    verdicts = result.tables["toy_verdicts"]
    assert [v["row"] for v in verdicts][:2] == [
        "illustrative methods worst",
        "Random Forest worst active",
    ]
    assert {v["verdict"] for v in verdicts} == {"not comparable"}  # --quick
    # every caption names the run's convention
    assert (
        "[illustrative methods: phi ~ N(h, sqrt(EU)) draws clipped to [0, 1], trust = the "
        "variance of the draws]" in result.text
    )
    assert "12 training points" in result.text and "20 epochs" in result.text
    assert "EK-NN: k = 12" not in result.text  # 12 points: the paper's k fits
