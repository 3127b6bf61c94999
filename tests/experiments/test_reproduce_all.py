"""``bensemble reproduce all``: the index, and the paper's findings measured repeat by repeat."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from bensemble.cli import main
from bensemble.experiments.findings import (
    one_vs_all_findings,
    toy_findings,
    trend_finding,
    value_verdicts,
)
from bensemble.experiments.illustrative import Convention
from bensemble.methods.zoo import PAPER_ORDER

FULL = SimpleNamespace(quick=False, convention=Convention())
QUICK = SimpleNamespace(quick=True, convention=Convention())


@pytest.mark.slow
def test_reproduce_all_quick_marks_every_verdict_not_comparable(tmp_path):
    out = tmp_path / "out"
    assert main(["reproduce", "all", "--quick", "--no-progress", "--out", str(out)]) == 0
    index = (out / "index.md").read_text()
    for name in ("toy", "size", "noise", "binning", "digits", "fig1"):
        assert f"## {name}" in index
    for link in ("digits/digits_fig4a.png", "fig1/fig1.png", "size/size.md"):
        assert f"]({link})" in index and (out / link).is_file()
    table = index.split("## Every verdict")[1].split("\n## ")[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) > 30  # the header and every experiment's verdicts
    assert all("| not comparable |" in row for row in rows[1:])
    assert "| holds |" not in index and "| differs |" not in index
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
    out = tmp_path / "out"
    argv = ["reproduce", "fig1", "--quick", "--no-progress", "--repeats", "2", "--out", str(out)]
    assert main(argv) == 0
    assert (out / "fig1" / "fig1.png").stat().st_size > 0
    finding = json.loads((out / "fig1" / "fig1_verdicts.json").read_text())["rows"][0]
    assert finding["verdict"] == "not comparable" and " of 2 repeats" in finding["ours"]
    bias = json.loads((out / "fig1" / "smooth_bias.json").read_text())["rows"]
    at_02 = [r for r in bias if r["bandwidth"] == 0.2 and r["confidences"] == "Beta(5, 2)"]
    assert len(at_02) == 5
    for row in at_02:  # 20,000 draws in quick mode: within 0.02 of the analytic bias
        assert abs(row["measured"] - row["analytic"]) < 0.02


# --------------------------------------------------------------- the paper's findings, measured
_PAPER_LIKE = {  # table 1's ordering: illustrative worst, then the forest, networks near 0
    "Centroids": 0.09, "DropConnect": 0.001, "Bayesian Log. Reg.": 0.004, "Likelihood": 0.14,
    "EK-NN": 0.04, "Random Forest": 0.015, "MC-Dropout": 0.001, "Deep Ensemble": 0.002,
    "Bayesian Deep": 0.003,
}  # fmt: skip
_PAPER_ROW = [_PAPER_LIKE[m] for m in PAPER_ORDER]


def test_one_vs_all_orderings_are_judged_per_task_and_repeat():
    units = [dict(_PAPER_LIKE) for _ in range(5)]
    rows = one_vs_all_findings(FULL, units, [_PAPER_ROW] * 5)
    assert [r["row"] for r in rows] == [
        "illustrative methods worst",
        "Random Forest worst active",
        "DropConnect, MC-Dropout best networks",
        "ranking of the nine methods",
    ]
    assert [r["verdict"] for r in rows] == ["holds"] * 4
    assert rows[0]["ours"].startswith("holds in 5 of 5 tasks x repeats")
    # two of five units with EK-NN below the forest and MC-Dropout above Deep Ensemble
    swapped = {**_PAPER_LIKE, "EK-NN": 0.01, "Random Forest": 0.03, "MC-Dropout": 0.005}
    units = [*units[:3], swapped, swapped]
    rows = one_vs_all_findings(FULL, units, [_PAPER_ROW] * 5)
    assert [r["verdict"] for r in rows[:3]] == ["differs", "holds", "differs"]
    assert rows[0]["ours"].startswith("holds in 3 of 5 tasks x repeats")
    assert {r["verdict"] for r in one_vs_all_findings(QUICK, units, [_PAPER_ROW] * 5)} == {
        "not comparable"
    }


def _toy_records(likelihood_eece: list[float]) -> list[dict]:
    records = []
    for seed, like in enumerate(likelihood_eece):
        for method, eece in _PAPER_LIKE.items():
            illustrative = method in ("Centroids", "Likelihood", "EK-NN")
            records.append({
                "seed": seed, "method": method,
                "convention": Convention().label if illustrative else "members",
                "eece": like if method == "Likelihood" else eece + (0.2 if illustrative else 0),
                "tece": 0.005,
            })  # fmt: skip
    return records


def test_toy_findings_use_the_spread_of_the_repeats():
    # the case: a constant-predicting Likelihood whose EECE is set by the class split
    rows = toy_findings(FULL, _toy_records([0.025, 0.122, 0.366, 0.366, 0.366]))
    worst = rows[0]
    assert worst["row"] == "illustrative methods worst"
    # the worst active method's EECE is 0.015 (the forest): 0.025 > 0.015 in every repeat
    assert worst["verdict"] == "holds"
    rows = toy_findings(FULL, _toy_records([0.001, 0.002, 0.366, 0.366, 0.366]))
    assert rows[0]["verdict"] == "differs" and "3 of 5" in rows[0]["ours"]
    assert rows[1]["verdict"] == "holds" and rows[2]["verdict"] == "holds"  # RF; TECE 0.005


def test_trends_and_values_are_judged_per_repeat():
    size = [
        {"seed": s, "n_train": n, "EECE leaf5": e + 0.001 * s}
        for s in range(5)
        for n, e in ((10, 0.07), (20, 0.03), (50, 0.019))
    ]
    row = trend_finding(FULL, size, "n_train", "EECE leaf5", -1, "falls", "decreases")
    assert row["verdict"] == "holds" and row["ours"].startswith("holds in 5 of 5 repeats")
    assert trend_finding(FULL, size, "n_train", "EECE leaf5", +1, "rises", "")["verdict"] == (
        "differs"
    )
    rows = value_verdicts(FULL, size, "n_train", "EECE leaf5", {10: "0.07", 50: "0.007"})
    assert [(r["row"], r["verdict"]) for r in rows] == [
        ("n_train = 10", "holds"),
        ("n_train = 50", "differs"),  # 0.021 +- 0.0016 against 0.007
    ]


def test_reuse_recomputes_the_verdicts_from_the_stored_repeats(tmp_path):
    folder = tmp_path / "size"
    folder.mkdir()
    repeats = [
        {"seed": s, "n_train": n, "EECE leaf5": e + 0.002 * s}
        for s in range(5)
        for n, e in ((10, 0.066), (20, 0.03), (50, 0.015))
    ]
    (folder / "size_repeats.json").write_text(json.dumps({"title": "r", "rows": repeats}))
    files = ["size_repeats.json", "size.md", "summary.json"]
    options = {"seed": 3, "repeats": 5, "quick": False}
    summary = {"experiment": "size", "options": options, "elapsed_s": 12.5, "files": files}
    (folder / "summary.json").write_text(json.dumps(summary))
    (folder / "size.md").write_text("table\n")
    assert main(["reproduce", "all", "--reuse", "--no-progress", "--out", str(tmp_path)]) == 0
    index = (tmp_path / "index.md").read_text()
    assert "12.5 s. Options: seed 3, repeats 5. Files:" in index and "](size/size.md)" in index
    every = index.split("## Every verdict")[1].split("\n## ")[0]
    assert "| size | n_train = 10 | EECE leaf5 | 0.07 |" in every
    line = next(r for r in every.splitlines() if "| n_train = 50 |" in r)
    assert "| differs |" in line
    assert "| size | EECE falls with size |" in every and "holds in 5 of 5" in every
    assert "no report in" in index.split("## toy")[1].split("##")[0]  # nothing ran
    assert not (tmp_path / "toy").exists()
    summary["experiment"] = "noise"
    (folder / "summary.json").write_text(json.dumps(summary))
    assert main(["reproduce", "all", "--reuse", "--no-progress", "--out", str(tmp_path)]) == 2


def test_reuse_is_an_option_of_all_only(tmp_path, capsys):
    argv = ["reproduce", "size", "--reuse", "--quick", "--out", str(tmp_path)]
    assert main(argv) == 2
    assert "--reuse applies to `all` only" in capsys.readouterr().err
    assert not (tmp_path / "size").exists()
