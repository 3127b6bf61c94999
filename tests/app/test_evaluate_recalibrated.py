"""``evaluate --recalibrate-epistemic``: the EpistemicRecalibrator fitted on the temperature half,
every test read transformed, the same numbers in one piece, in chunks and in shards."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bensemble.app.evaluate import split_indices
from bensemble.app.evaluate.api import evaluate_shards
from bensemble.calibration import EpistemicRecalibrator
from bensemble.cli import main
from bensemble.metrics import negative_log_likelihood

M, N, K = 6, 2400, 4
SPLIT = 0.5


def _members(c: float, n: int = N, seed: int = 0):
    """Float32 member probabilities [M, n, K] whose spread is ``c`` times the truth's, labels
    drawn from the well-spread members' pool."""
    g = torch.Generator().manual_seed(seed)
    centre = 2.0 * torch.randn(n, K, generator=g, dtype=torch.float64)
    xi = torch.randn(M, n, K, generator=g, dtype=torch.float64)
    xi = xi - xi.mean(0)
    truth = torch.softmax(centre + xi, -1).mean(0)
    labels = torch.multinomial(truth, 1, generator=g).squeeze(1)
    return torch.softmax(centre + c * xi, -1).float(), labels


@pytest.fixture(scope="module")
def narrow():
    return _members(0.4)


@pytest.fixture(scope="module")
def whole(narrow):
    probs, labels = narrow
    return evaluate_shards(
        [probs], labels, backend="serial", calibration_split=SPLIT, recalibrate_epistemic=True,
        bootstrap=0,
    )  # fmt: skip


def test_after_stage_is_the_recalibrator_fitted_on_the_temperature_half(narrow, whole):
    probs, labels = narrow
    temp_idx, _, test = split_indices(N, SPLIT, seed=0)
    ref = EpistemicRecalibrator().fit(probs[:, temp_idx].double(), labels[temp_idx])
    row = whole.recalibration
    assert row["temperature"] == pytest.approx(ref.temperature_, rel=1e-9)
    assert row["spread"] == pytest.approx(ref.spread_, rel=1e-9)
    assert row["n_fit"] == len(temp_idx) and row["at_boundary"] == "no"
    pooled = ref.predict_proba(probs[:, test].double())
    after = whole.metrics[2]
    assert after["stage"].startswith("epistemically recalibrated")
    assert after["n"] == len(test)
    want = negative_log_likelihood(pooled, labels[test])
    assert after["nll"] == pytest.approx(want, rel=1e-9)
    before = whole.metrics[0]["nll"]
    assert abs(after["nll"] - before) > 1e-3  # the transform did act on the test reads
    assert whole.ensemble["eece"] == row["eece_before"]


def test_spread_too_narrow_is_widened(whole):
    row = whole.recalibration
    # members 0.4 times too narrow: s near 1 / 0.4 (1,200 fitting points), more member variance
    assert 1.3 < row["spread"] < 4.0
    assert row["mean_member_variance_after"] > 2 * row["mean_member_variance_before"]
    assert row["mean_epistemic_after"] > row["mean_epistemic_before"]
    assert whole.recalibration_details is not None


def test_chunks_and_shards_give_the_same_numbers(narrow, whole):
    probs, labels = narrow
    parts = [probs[:, :700].numpy(), probs[:, 700:1900], probs[:, 1900:]]
    chunked = evaluate_shards(
        parts, labels, backend="serial", workers=3, calibration_split=SPLIT,
        recalibrate_epistemic=True, bootstrap=0, chunk_size=257,
    )  # fmt: skip
    a, b = whole.recalibration, chunked.recalibration
    assert a.keys() == b.keys()
    for key, value in a.items():
        if isinstance(value, float):
            assert b[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
        else:
            assert b[key] == value, key
    for r1, r2 in zip(whole.metrics, chunked.metrics, strict=True):
        assert r1["stage"] == r2["stage"]
        for key in ("accuracy", "nll", "brier", "ece", "classwise_ece"):
            assert r2[key] == pytest.approx(r1[key], rel=1e-9, abs=1e-12), key


def test_needs_a_split_and_members():
    probs, labels = _members(1.0, n=200)
    with pytest.raises(ValueError, match="`recalibrate_epistemic`.*`calibration_split`"):
        evaluate_shards([probs], labels, backend="serial", recalibrate_epistemic=True)
    with pytest.raises(ValueError, match="M > 1"):
        evaluate_shards(
            [probs[0]], labels, backend="serial", calibration_split=0.5,
            recalibrate_epistemic=True,
        )  # fmt: skip
    with pytest.raises(ValueError, match="recalibrate_epistemic"):
        evaluate_shards([probs], labels, backend="serial", recalibrate_epistemic="yes")


def test_command_line_writes_the_recalibration_table_and_diagram(tmp_path, narrow, capsys):
    probs, labels = narrow
    np.save(tmp_path / "p.npy", probs.numpy())
    np.save(tmp_path / "y.npy", labels.numpy())
    out = tmp_path / "report"
    argv = [tmp_path / "p.npy", "--labels", tmp_path / "y.npy", "--calibration-split", "0.5"]
    argv += ["--recalibrate-epistemic", "--bootstrap", "0", "--out", out, "--json"]
    code = main(["evaluate", *map(str, argv)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    payload = json.loads(captured.out)
    assert payload["recalibration"]["spread"] > 1.3
    written = sorted(p.name for p in out.iterdir())
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(summary["files"]) == written
    for name in ("recalibration.md", "recalibration.csv", "epistemic_reliability_recalibrated.png"):
        assert name in written
    html = (out / "report.html").read_text()
    assert "Epistemic recalibration" in html and "epistemically recalibrated" in html


def test_command_line_without_split_exits_2_with_one_line(tmp_path, narrow, capsys):
    probs, labels = narrow
    np.save(tmp_path / "p.npy", probs.numpy())
    np.save(tmp_path / "y.npy", labels.numpy())
    argv = [tmp_path / "p.npy", "--labels", tmp_path / "y.npy", "--recalibrate-epistemic"]
    code = main(["evaluate", *map(str, argv), "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "--calibration-split" in err
    assert not (tmp_path / "r").exists()
