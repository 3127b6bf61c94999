"""``evaluate --task regression``: every number equals the one-shot :mod:`bensemble.regression` /
:mod:`bensemble.conformal` function on the same points, in one piece, in chunks and from a file;
the report folder and the command line's refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bensemble.app.evaluate import split_indices
from bensemble.app.evaluate.regression import evaluate_regression
from bensemble.app.evaluate.regression_report import planned_regression_files
from bensemble.cli import main
from bensemble.conformal import SplitConformalRegressor
from bensemble.regression import (
    crps,
    interval_score,
    miscalibration_area,
    predictive_interval,
    regression_epistemic_calibration_error,
    regression_negative_log_likelihood,
    sharpness,
)
from bensemble.regression.intervals import interval_coverage, mean_interval_width

M, N = 5, 1500
SPLIT = 0.4


def _problem(n: int = N, seed: int = 0):
    """Heteroscedastic sin(x) targets; Gaussian members ``[M, n, 2]`` around the truth."""
    g = torch.Generator().manual_seed(seed)
    x = 6 * torch.rand(n, generator=g, dtype=torch.float64) - 3
    f, sd = torch.sin(x), 0.2 + 0.1 * x.abs()
    y = f + sd * torch.randn(n, generator=g, dtype=torch.float64)
    means = f + 0.15 * torch.randn(M, n, generator=g, dtype=torch.float64)
    return torch.stack([means, (sd**2).expand(M, n)], -1), y


@pytest.fixture(scope="module")
def problem():
    return _problem()


@pytest.fixture(scope="module")
def split_eval(problem):
    members, y = problem
    return evaluate_regression(members, y, calibration_split=SPLIT)


def _close(a, b):
    assert a == pytest.approx(b, rel=1e-9, abs=1e-12)


def test_numbers_equal_the_one_shot_functions_on_the_test_part(problem, split_eval):
    members, y = problem
    temp, conf, test = split_indices(N, SPLIT, seed=0)
    test = test.sort().values
    cal = torch.cat([temp, conf]).sort().values
    p, t = members[:, test], y[test]
    s = split_eval.scores
    assert s["n"] == len(test) and split_eval.setup["n_calibration"] == len(cal)
    _close(s["nll"], regression_negative_log_likelihood(p, t))
    _close(s["crps"], crps(p, t))
    _close(s["sharpness"], sharpness(p))
    _close(s["miscalibration_area"], miscalibration_area(p, t, n_levels=100))
    lo, hi = predictive_interval(p, 0.1)
    row = split_eval.intervals[0]
    _close(row["coverage"], interval_coverage(lo, hi, t))
    _close(row["mean_width"], mean_interval_width(lo, hi))
    _close(row["interval_score"], interval_score(lo, hi, t, 0.1))
    cp = SplitConformalRegressor("absolute", 0.1).calibrate(members[:, cal], y[cal])
    lo, hi = cp.predict_interval(p)
    row = split_eval.intervals[1]
    assert row["threshold"] == cp.threshold_ and row["n_calibration"] == len(cal)
    _close(row["coverage"], interval_coverage(lo, hi, t))
    _close(row["mean_width"], mean_interval_width(lo, hi))
    assert 0.86 < row["coverage"] < 0.94  # exchangeable points: about the nominal 0.9
    u = split_eval.uncertainty
    _close(u["eece"], regression_epistemic_calibration_error(p[..., 0], t, seed=0))
    _close(u["mean_epistemic"], float(p[..., 0].var(0, unbiased=False).mean()))
    _close(u["mean_aleatoric"], float(p[..., 1].mean()))
    _close(u["mean_total"], u["mean_aleatoric"] + u["mean_epistemic"])


def test_chunks_files_and_layouts_give_the_same_numbers(tmp_path, problem, split_eval):
    members, y = problem
    np.save(tmp_path / "p.npy", members.transpose(0, 1).numpy())  # [N, M, 2]
    np.save(tmp_path / "y.npy", y.numpy())
    chunked = evaluate_regression(
        str(tmp_path / "p.npy"), str(tmp_path / "y.npy"), calibration_split=SPLIT,
        chunk_size=97, members_axis=1,
    )  # fmt: skip
    a, b = split_eval.to_dict(), chunked.to_dict()
    for table in ("scores", "uncertainty"):
        for key, value in a[table].items():
            (_close if isinstance(value, float) else lambda u, v: u == v)(b[table][key], value)
    for r1, r2 in zip(a["intervals"], b["intervals"], strict=True):
        for key, value in r1.items():
            (_close if isinstance(value, float) else lambda u, v: u == v)(r2[key], value)
    assert a["calibration_curve"] == b["calibration_curve"]  # counts: exactly


def test_point_members_score_the_moment_matched_gaussian(problem):
    members, y = problem
    points = members[..., 0]
    ev = evaluate_regression(points, y, chunk_size=400)
    want = regression_negative_log_likelihood(points, y, predictive="gaussian")
    _close(ev.scores["nll"], want)
    _close(ev.scores["crps"], crps(points, y))
    assert ev.uncertainty["mean_aleatoric"] == 0.0
    assert any("moment-matched" in note for note in ev.notes)
    assert ev.intervals[0]["interval"].startswith("predictive (members' order statistics)")


def test_one_model_has_no_member_table(problem):
    members, y = problem
    ev = evaluate_regression(members[:1], y)
    assert ev.uncertainty is None and ev.eece_details is None
    _close(ev.scores["nll"], regression_negative_log_likelihood(members[:1], y))


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda p, y: (torch.zeros(3, 10, 3), torch.zeros(10)), r"\[M, N\] or \[M, N, 2\]"),
        (lambda p, y: (p, y[:-1]), "one per point"),
        (lambda p, y: (p, torch.where(y > 0, torch.nan, y)), "finite"),
        (lambda p, y: (p.clone().index_fill_(2, torch.tensor([1]), -1.0), y), "variance"),
    ],
)
def test_bad_inputs_raise_value_errors(problem, change, match):
    members, y = change(*problem)
    with pytest.raises(ValueError, match=match):
        evaluate_regression(members, y)


def test_bad_options_name_the_argument(problem):
    members, y = problem
    with pytest.raises(ValueError, match="conformal_score.*absolute"):
        evaluate_regression(members, y, calibration_split=0.5, conformal_score="lac")
    with pytest.raises(ValueError, match="n_levels"):
        evaluate_regression(members, y, n_levels=1)


def _files(tmp_path, problem):
    members, y = problem
    np.save(tmp_path / "p.npy", members.float().numpy())
    np.save(tmp_path / "y.npy", y.numpy())
    return [str(tmp_path / "p.npy"), "--labels", str(tmp_path / "y.npy"), "--task", "regression"]


def test_command_line_writes_exactly_the_planned_report(tmp_path, problem, capsys):
    argv = _files(tmp_path, problem) + ["--calibration-split", "0.4", "--chunk-size", "300"]
    out = tmp_path / "report"
    code = main(["evaluate", *argv, "--out", str(out), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    payload = json.loads(captured.out)
    assert payload["task"] == "regression" and payload["intervals"][1]["coverage"] > 0.85
    # the report as the classification command names it: its folder, files and problems
    assert payload["report"]["out"] == str(out) and payload["report"]["problems"] == []
    assert sorted(payload["report"]["files"]) == sorted(str(p) for p in out.iterdir())
    written = sorted(p.name for p in out.iterdir())
    assert written == sorted(planned_regression_files(ensemble=True))
    assert json.loads((out / "summary.json").read_text())["files"] == planned_regression_files(
        ensemble=True
    )
    html = (out / "report.html").read_text()
    assert "Regression calibration curve" in html and "<img" in html
    # each Markdown table carries its column definitions under it (the shared report writer)
    scores_md = (out / "scores.md").read_text()
    assert scores_md.startswith("## ") and "\n- nll: mean -log f(y)" in scores_md
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    code = main(["evaluate", *argv, "--out", str(out)])  # no --overwrite: refused
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--logits"], "--logits applies to --task classification only"),
        (["--recalibrate-epistemic"], "--recalibrate-epistemic applies"),
        (["--calibration-split", "1.5"], "--calibration-split"),
        (["--n-levels", "1"], "--n-levels"),
    ],
)
def test_command_line_refusals_are_one_line_and_write_nothing(
    tmp_path, problem, capsys, extra, match
):
    out = tmp_path / "r"
    code = main(["evaluate", *_files(tmp_path, problem), *extra, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and match in err
    assert not out.exists()


def test_command_line_never_writes_into_an_input_folder(tmp_path, problem, capsys):
    code = main(["evaluate", *_files(tmp_path, problem), "--out", str(tmp_path), "--overwrite"])
    err = capsys.readouterr().err
    assert code == 2 and "would overwrite the input" in err


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"calibration_split": 1.5}, "`calibration_split`"),
        ({"eece_bins": 0}, "`eece_bins`"),
        ({"eece_bins": "many"}, "`eece_bins`"),
        ({"chunk_size": 0}, "`chunk_size`"),
    ],
)
def test_both_tasks_check_their_shared_options_alike(bad, match):
    """Classification and regression options share one check of the split, the EECE bins and
    the chunk size; only classification takes ``chunk_size="auto"``."""
    from bensemble.app.evaluate.options import EvaluateOptions
    from bensemble.app.evaluate.regression import RegressionOptions

    for options in (EvaluateOptions(**bad), RegressionOptions(**bad)):
        with pytest.raises(ValueError, match=match):
            options.checked()
    assert EvaluateOptions(chunk_size="auto").checked().chunk_size == "auto"
    with pytest.raises(ValueError, match="`chunk_size`"):
        RegressionOptions(chunk_size="auto").checked()
    checked = RegressionOptions(calibration_split=0.25, eece_bins=7, chunk_size=64).checked()
    assert (checked.calibration_split, checked.eece_bins, checked.chunk_size) == (0.25, 7, 64)


def test_each_task_refuses_the_other_tasks_options_and_reads_its_own():
    """One table-driven check refuses the other task's options; the options objects take every
    field from the parsed arguments of the same name, except those the command line renames."""
    import argparse

    from bensemble.app.evaluate.cli_options import options_from_args, refuse_other_task_options
    from bensemble.app.evaluate.regression import RegressionOptions
    from bensemble.io import InputError

    args = argparse.Namespace(n_levels=50, regression_score="absolute", n_bins=15, logits=False)
    with pytest.raises(InputError, match="^--n-levels applies to --task regression only$"):
        refuse_other_task_options(args, "classification")
    refuse_other_task_options(args, "regression")  # its own options: accepted
    args.n_bins = 10
    with pytest.raises(InputError, match="^--n-bins applies to --task classification only$"):
        refuse_other_task_options(args, "regression")
    args = argparse.Namespace(
        calibration_split=0.3, alpha=0.2, n_levels=50, eece_bins=4, seed=7, regression_score="x"
    )
    options = options_from_args(RegressionOptions, args, conformal_score="normalized", chunk_size=9)
    assert options == RegressionOptions(0.3, 0.2, 50, 4, "normalized", 7, 9)
