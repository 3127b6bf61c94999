"""``bensemble reproduce all``: the index, its verdicts and their tolerances."""

from __future__ import annotations

import pytest

from bensemble.cli import main
from bensemble.experiments.all import ABS_TOL, REL_TOL, verdict, verdict_rows


@pytest.mark.parametrize(
    ("ours", "paper", "expected"),
    [
        pytest.param(0.03, 0.01, "holds", id="within-abs"),
        pytest.param(0.04, 0.01, "differs", id="outside-abs"),
        pytest.param(11.0, "~10", "holds", id="approximate-text"),
        pytest.param(14.0, "~10", "differs", id="outside-rel"),
        pytest.param(0.1, "n/a", "not comparable", id="no-number"),
        pytest.param(None, 0.1, "not comparable", id="no-ours"),
        pytest.param(float("nan"), 0.1, "not comparable", id="nan"),
    ],
)
def test_verdict_uses_the_stated_tolerances(ours, paper, expected):
    assert (ABS_TOL, REL_TOL) == (0.02, 0.3)
    assert verdict(ours, paper) == expected


def test_verdict_rows_pair_columns_and_mark_stand_ins_not_comparable():
    rows = verdict_rows("size", {"size": [{"n_train": 10, "paper EECE": 0.07, "EECE leaf5": 0.08}]})
    assert rows == [
        {"table": "size", "row": "n_train = 10", "quantity": "EECE leaf5", "paper": 0.07,
         "ours": 0.08, "verdict": "holds"},
    ]  # fmt: skip
    summary = [
        {"method": m, "eece": e, "paper eece": p}
        for m, e, p in (("A", 0.1, 0.1), ("B", 0.2, 0.2), ("C", 0.3, 0.3))
    ]
    for name, expected in (("digits", "not comparable"), ("cifar10", "holds")):
        out = verdict_rows(name, {"summary": summary, "per_task": []})
        assert [r["verdict"] for r in out[:3]] == [expected] * 3
        assert out[-1]["quantity"].startswith("Spearman") and out[-1]["ours"] == pytest.approx(1.0)
        assert out[-1]["verdict"] == "holds"
    finding = {"row": "x", "quantity": "q", "paper": "yes", "ours": "no", "verdict": "differs"}
    assert verdict_rows("fig1", {"f": [finding]}) == [{"table": "f", **finding}]


@pytest.mark.slow
def test_reproduce_all_quick_writes_an_index_linking_every_artefact(tmp_path):
    out = tmp_path / "out"
    assert main(["reproduce", "all", "--quick", "--no-progress", "--out", str(out)]) == 0
    index = (out / "index.md").read_text()
    for name in ("toy", "size", "noise", "binning", "digits", "fig1"):
        assert f"## {name}" in index
    for link in ("digits/digits_fig4a.png", "fig1/fig1.png", "size/size.md"):
        assert f"]({link})" in index and (out / link).is_file()
    assert "| holds |" in index or "| differs |" in index
    assert "mnist, cifar10" in index and "--data-dir" in index


def test_reproduce_all_plans_mnist_and_cifar_only_when_their_files_are_in_data_dir(tmp_path):
    import gzip

    import numpy as np

    from bensemble.experiments._common import RunOptions
    from bensemble.experiments.all import OFFLINE, _plan

    assert [n for n, _ in _plan(RunOptions())][: len(OFFLINE)] == list(OFFLINE)
    assert not {"mnist", "cifar10"} & {n for n, _ in _plan(RunOptions())}
    folder = tmp_path / "mnist"
    folder.mkdir()
    for prefix in ("train", "t10k"):
        for kind, array in (("images-idx3", np.zeros((2, 4, 4))), ("labels-idx1", np.zeros(2))):
            header = bytes([0, 0, 8, array.ndim]) + np.asarray(array.shape, ">u4").tobytes()
            raw = header + array.astype(np.uint8).tobytes()
            (folder / f"{prefix}-{kind}-ubyte.gz").write_bytes(gzip.compress(raw))
    plan = dict(_plan(RunOptions(extra={"data_dir": str(tmp_path)})))
    assert plan["mnist"] == {"data_dir": str(folder)} and "cifar10" not in plan


def test_reproduce_fig1_quick_writes_the_figure_and_measures_the_bias(tmp_path):
    import json

    out = tmp_path / "out"
    assert main(["reproduce", "fig1", "--quick", "--no-progress", "--out", str(out)]) == 0
    assert (out / "fig1" / "fig1.png").stat().st_size > 0
    finding = json.loads((out / "fig1" / "fig1_finding.json").read_text())["rows"][0]
    assert finding["verdict"] in ("holds", "differs")
    bias = json.loads((out / "fig1" / "smooth_bias.json").read_text())["rows"]
    at_02 = [r for r in bias if r["bandwidth"] == 0.2 and r["confidences"] == "Beta(5, 2)"]
    assert len(at_02) == 5
    for row in at_02:  # 20,000 draws in quick mode: within 0.02 of the analytic bias
        assert abs(row["measured"] - row["analytic"]) < 0.02
