"""``bensemble evaluate``'s report: report.html, intervals, per-class table, conformal extras,
the --bootstrap option and the per-stage progress lines."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bensemble.app.evaluate import evaluate_predictions
from bensemble.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _reference_evaluate import reference_evaluation  # noqa: E402


def _members(m=3, n=300, k=4, seed=0, sharpness=1.0):
    g = torch.Generator().manual_seed(seed)
    true = 2.0 * torch.randn(n, k, generator=g, dtype=torch.float64)
    labels = torch.multinomial(torch.softmax(true, 1), 1, generator=g).squeeze(1)
    noise = 0.3 * torch.randn(m, n, k, generator=g, dtype=torch.float64)
    return torch.softmax(sharpness * (true + noise), -1), labels


def _save(tmp_path, m=3, n=300, k=4):
    probs, labels = _members(m, n, k)
    np.save(tmp_path / "pred.npy", probs.numpy())
    np.save(tmp_path / "labels.npy", labels.numpy())
    return str(tmp_path / "pred.npy"), str(tmp_path / "labels.npy")


def _run(argv, capsys):
    code = main(["evaluate", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def split_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ev")
    pred, lab = _save(tmp)
    out = tmp / "report"
    argv = ["evaluate", pred, "--labels", lab, "--calibration-split", "0.5", "--out", str(out)]
    argv += ["--bootstrap", "50", "--conformal-score", "aps", "--json"]
    stdout = io.StringIO()
    real = sys.stdout
    sys.stdout = stdout
    try:
        code = main(argv)
    finally:
        sys.stdout = real
    return code, json.loads(stdout.getvalue()), out


# ----------------------------------------------------------------------------- report.html
def test_report_html_is_self_contained_with_the_verdict_block(split_run):
    code, result, out = split_run
    assert code == 0
    html = (out / "report.html").read_text()
    assert any(f.endswith("report.html") for f in result["report"]["files"])
    assert not re.search(r"""(src|href)\s*=\s*["']?https?://""", html)
    imgs = re.findall(r"<img [^>]*src=\"([^\"]*)\"", html)
    assert len(imgs) >= 4 and all(src.startswith("data:image/png;base64,") for src in imgs)
    assert '<section class="summary" id="verdict"' in html
    for question in (
        "Is the model calibrated?",
        "Did temperature scaling help on held-out data?",
        "Are the members&#x27; uncertainties epistemically calibrated?",
    ):
        assert question in html
    assert "<script" not in html
    summary = json.loads((out / "summary.json").read_text())
    assert "report.html" in summary["files"] and "risk_coverage.png" in summary["files"]


def test_embedded_figures_are_the_png_files(split_run):
    import base64

    _, _, out = split_run
    html = (out / "report.html").read_text()
    embedded = {base64.b64decode(s) for s in re.findall(r"base64,([A-Za-z0-9+/=]+)", html)}
    for name in ("reliability", "reliability_scaled", "epistemic_reliability", "risk_coverage"):
        assert (out / f"{name}.png").read_bytes() in embedded, name


def test_uncertainty_columns_have_units_in_markdown_and_html(split_run):
    _, _, out = split_run
    md = (out / "ensemble.md").read_text()
    html = (out / "report.html").read_text()
    for text in (md, html):
        assert "mutual information" in text and "nats" in text
        assert "squared-probability units" in text


# ----------------------------------------------------------------------------- intervals
def test_every_headline_number_has_an_interval_around_the_reported_value(split_run):
    _, result, _ = split_run
    rows = {(r["stage"], r["metric"]): r for r in result["intervals"]}
    metrics = ("accuracy", "nll", "brier", "ece", "classwise_ece", "error_auroc", "aurc")
    stages = ("unscaled", "temperature-scaled")
    for stage, row, sel in zip(stages, result["metrics"], result["selective"]):
        row = {**row, **sel}
        for metric in metrics:
            got = rows[(stage, metric)]
            assert got["value"] == row[metric]
            assert got["ci_low"] <= got["ci_high"]
    for metric in ("coverage", "mean_set_size", "empty_set_rate"):
        assert rows[("conformal", metric)]["value"] == result["conformal"][metric]
    assert rows[("ensemble", "eece")]["value"] == result["ensemble"]["eece"]
    assert ("scaled - unscaled", "nll") in rows


def test_bootstrap_zero_disables_intervals(tmp_path, capsys):
    pred, lab = _save(tmp_path)
    out = tmp_path / "r"
    code, stdout, stderr = _run(
        [pred, "--labels", lab, "--bootstrap", "0", "--out", out, "--json"], capsys
    )
    assert code == 0, stderr
    result = json.loads(stdout)
    assert result["intervals"] == [] and result["setup"]["bootstrap"] == 0
    assert not (out / "intervals.csv").exists()
    assert "No interval" in result["verdicts"][0]["detail"]


def test_intervals_are_seeded(tmp_path):
    probs, labels = _members(n=200)
    a = evaluate_predictions(probs, labels, bootstrap=30, seed=1).intervals
    b = evaluate_predictions(probs, labels, bootstrap=30, seed=1).intervals
    c = evaluate_predictions(probs, labels, bootstrap=30, seed=2).intervals
    assert a == b and a != c


@pytest.mark.parametrize("bad", ["-1", "1.5", "100001", "many"])
def test_bad_bootstrap_exits_2_with_one_line(tmp_path, capsys, bad):
    pred, lab = _save(tmp_path)
    code, stdout, stderr = _run(
        [pred, "--labels", lab, "--bootstrap", bad, "--out", tmp_path / "r"], capsys
    )
    assert code == 2
    assert stderr.count("\n") == 1 and stderr.startswith("bensemble evaluate: error: ")
    assert "--bootstrap" in stderr
    assert not (tmp_path / "r").exists()


def test_bad_bootstrap_in_the_function():
    probs, labels = _members(n=50)
    with pytest.raises(ValueError, match="`bootstrap` must be an integer in"):
        evaluate_predictions(probs, labels, bootstrap=-3)


# ----------------------------------------------------------------------------- per class, conformal
@pytest.mark.parametrize("k", [20, 21])
def test_per_class_table_for_at_most_20_classes(tmp_path, capsys, k):
    pred, lab = _save(tmp_path, m=2, n=420, k=k)
    out = tmp_path / "r"
    argv = [pred, "--labels", lab, "--bootstrap", "0", "--out", out, "--json"]
    code, stdout, stderr = _run(argv, capsys)
    assert code == 0, stderr
    result = json.loads(stdout)
    html = (out / "report.html").read_text()
    if k <= 20:
        assert len(result["per_class"]) == k and (out / "per_class.csv").exists()
        assert "Per class" in html
        labels = np.load(tmp_path / "labels.npy")
        assert [r["support"] for r in result["per_class"]] == np.bincount(
            labels, minlength=k
        ).tolist()
    else:
        assert result["per_class"] is None and not (out / "per_class.csv").exists()
        assert "Per class" not in html


def test_empty_set_rate_and_per_class_coverage_match_a_direct_computation():
    # randomised APS with a large alpha returns empty sets
    probs, labels = _members(m=2, n=600, k=3, seed=3)
    kw = {"calibration_split": 0.5, "alpha": 0.4, "conformal_score": "aps"}
    ev = evaluate_predictions(probs, labels, bootstrap=0, chunk_size=70, **kw)
    ref = reference_evaluation(probs, labels, **kw)
    sets = ref["sets"].numpy()
    y = ref["labels"].numpy()
    empty = float((~sets.any(1)).mean())
    assert empty > 0
    assert ev.conformal["empty_set_rate"] == pytest.approx(empty, abs=1e-15)
    for row in ev.per_class:
        c = row["class"]
        assert row["coverage"] == pytest.approx(float(sets[y == c, c].mean()), abs=1e-15)
        assert row["support"] == int((y == c).sum())


# ----------------------------------------------------------------------------- progress
class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("flag", [[], ["--no-progress"]])
def test_one_progress_line_per_stage_on_a_terminal(tmp_path, capsys, monkeypatch, flag):
    pred, lab = _save(tmp_path)
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    argv = [pred, "--labels", lab, "--calibration-split", "0.5", "--bootstrap", "20", *flag]
    code = main(["evaluate", *argv, "--out", str(tmp_path / "r")])
    capsys.readouterr()
    assert code == 0
    lines = terminal.getvalue().splitlines()
    if flag:
        assert lines == []
        return
    # the stage lines; the passes' tqdm bars (leave=False) redraw in place between them
    lines = [line for line in lines if " ... " in line and "|" not in line]
    stages = [line.split(" ... ")[0] for line in lines]
    assert stages == [
        "bensemble evaluate: starting Python and importing",
        "bensemble evaluate: opening the inputs",
        "bensemble evaluate: temperature scaling and conformal calibration",
        "bensemble evaluate: EECE bins (K-means)",
        "bensemble evaluate: metrics, uncertainty, EECE sums (main pass)",
        "bensemble evaluate: compute, intervals (20)",
        "bensemble evaluate: figures",
        "bensemble evaluate: writing the report",
    ]
    assert all(re.fullmatch(r".* \.\.\. \d+\.\d s", line) for line in lines)


@pytest.mark.parametrize("stem", ["epistemic_reliability", "reliability"])
def test_figures_are_saved_as_laid_out_and_checked(tmp_path, stem):
    # issue 21: the report keeps the layout the display made and checked (no second constrained
    # layout at savefig); the saved figure still shows everything, the diagram at full size
    import matplotlib.pyplot as plt
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    from bensemble.app.evaluate.figures import figure_makers

    probs, labels = _members(m=5, n=900, k=10)
    ev = evaluate_predictions(probs, labels, bootstrap=0)
    fig = figure_makers(ev)[stem]()
    try:
        assert not isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine)
        fig.savefig(tmp_path / f"{stem}.png", dpi=120)
        renderer = fig.canvas.get_renderer()
        ax = fig.axes[0]
        shown = [ax.get_legend()] + [t for a in fig.axes for t in (a.xaxis.label, a.yaxis.label)]
        for artist in [*shown, ax.title]:
            box = artist.get_window_extent(renderer)
            assert box.x0 >= -0.5 and box.x1 <= fig.bbox.width + 0.5, artist
            assert box.y0 >= -0.5 and box.y1 <= fig.bbox.height + 0.5, artist
        side = ax.get_window_extent()
        assert min(side.width, side.height) >= 0.6 * min(fig.bbox.width, fig.bbox.height)
    finally:
        plt.close(fig)
