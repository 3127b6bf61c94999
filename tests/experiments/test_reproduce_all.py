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
    assert verdict_rows("fig1", {"f": [finding]}) == [{"table": "f", **finding, "finding": True}]


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


# --------------------------------------------------------------- the paper's findings, measured
def _summary(eece: dict[str, float]) -> list[dict]:
    return [{"method": m, "eece": e, "paper eece": 0.0} for m, e in eece.items()]


_PAPER_LIKE = {  # table 1's ordering: illustrative worst, then the forest, networks near 0
    "Centroids": 0.09, "DropConnect": 0.001, "Bayesian Log. Reg.": 0.004, "Likelihood": 0.14,
    "EK-NN": 0.04, "Random Forest": 0.015, "MC-Dropout": 0.001, "Deep Ensemble": 0.002,
    "Bayesian Deep": 0.003,
}  # fmt: skip


def test_one_vs_all_orderings_hold_on_the_papers_order_and_differ_when_swapped():
    from bensemble.experiments.findings import one_vs_all_findings

    rows = one_vs_all_findings(_summary(_PAPER_LIKE))
    assert [r["row"] for r in rows] == [
        "illustrative methods worst",
        "Random Forest worst active",
        "DropConnect, MC-Dropout best networks",
    ]
    assert [r["verdict"] for r in rows] == ["holds"] * 3
    swapped = {**_PAPER_LIKE, "EK-NN": 0.01, "Random Forest": 0.03, "MC-Dropout": 0.005}
    rows = one_vs_all_findings(_summary(swapped))
    # EK-NN (0.01) is now below the forest (0.03): not the bottom three; the forest is still
    # the worst active method; MC-Dropout (0.005) is worse than Deep Ensemble (0.002)
    assert [r["verdict"] for r in rows] == ["differs", "holds", "differs"]
    assert "Random Forest 0.0300" in rows[0]["ours"]
    worse_blr = {**_PAPER_LIKE, "Bayesian Log. Reg.": 0.02}
    assert one_vs_all_findings(_summary(worse_blr))[1]["verdict"] == "differs"


def test_trends_and_the_binning_minimum_are_measured_from_the_tables():
    from bensemble.experiments.findings import finding_rows

    size = [{"n_train": n, "EECE leaf5": e} for n, e in ((10, 0.07), (20, 0.03), (50, 0.01))]
    (row,) = finding_rows("size", {"size": size})
    assert row["verdict"] == "holds" and "-1.00" in row["ours"]
    rising = [{**r, "EECE leaf5": 0.1 - r["EECE leaf5"]} for r in size]
    assert finding_rows("size", {"size": rising})[0]["verdict"] == "differs"
    noise = [{"rho": r, "EECE leaf5": e} for r, e in ((0.0, 0.01), (0.5, 0.05), (0.95, 0.1))]
    assert finding_rows("noise", {"noise": noise})[0]["verdict"] == "holds"
    assert finding_rows("noise", {"noise": noise[:2]}) == []  # two points make no trend
    gaps = {20: 0.004, 100: 0.001, 200: 0.0005, 500: 0.002}
    binning = [{"n_bins": m, "|EECE - TECE|": g} for m, g in gaps.items()]
    (row,) = finding_rows("binning", {"binning": binning})
    assert row["verdict"] == "holds" and row["ours"].startswith("200 bins")
    binning[1]["|EECE - TECE|"] = 0.0001  # the minimum moves to 100 bins: outside 200 +- 60
    (row,) = finding_rows("binning", {"binning": binning})
    assert row["verdict"] == "differs" and row["ours"].startswith("100 bins")


def test_likelihood_finding_takes_the_closest_variant_and_respects_stand_ins():
    from bensemble.experiments.findings import finding_rows

    variants = [
        {"supports": s, "eu": u, "eece": e, "paper EECE": 0.14}
        for s, u, e in (
            ("count", "min", 0.02),
            ("distance", "paper", 0.13),
            ("count", "paper", 0.3),
        )
    ]
    tables = {"summary": _summary(_PAPER_LIKE), "likelihood_variants": variants}
    mnist = finding_rows("mnist", tables)[-1]
    assert mnist["verdict"] == "holds" and "supports=distance, eu=paper 0.1300" in mnist["ours"]
    assert "count/min 0.0200" in mnist["ours"]
    assert finding_rows("fashion", tables)[-1]["verdict"] == "not comparable"
    variants[1]["eece"] = 0.05
    assert finding_rows("mnist", tables)[-1]["verdict"] == "differs"


def test_toy_findings_are_copied_with_their_finding_as_the_row():
    rows = verdict_rows(
        "toy", {"toy_findings": [{"finding": "RF worst active", "ours": "x", "verdict": "holds"}]}
    )
    assert rows == [
        {"table": "toy_findings", "row": "RF worst active", "quantity": "finding",
         "paper": "yes (text)", "ours": "x", "verdict": "holds", "finding": True},
    ]  # fmt: skip


def test_reuse_indexes_the_reports_in_out_without_running_anything(tmp_path):
    import json

    folder = tmp_path / "size"
    folder.mkdir()
    rows = [
        {"n_train": n, "paper EECE": p, "EECE leaf5": e}
        for n, p, e in ((10, 0.07, 0.08), (20, "n/a", 0.03), (50, 0.007, 0.1))
    ]
    (folder / "size.json").write_text(json.dumps({"title": "size", "rows": rows}))
    summary = {"experiment": "size", "options": {"seed": 3, "repeats": 5, "quick": False},
               "elapsed_s": 12.5, "files": ["size.json", "size.md", "summary.json"]}  # fmt: skip
    (folder / "summary.json").write_text(json.dumps(summary))
    (folder / "size.md").write_text("table\n")
    out = tmp_path
    assert main(["reproduce", "all", "--reuse", "--no-progress", "--out", str(out)]) == 0
    index = (out / "index.md").read_text()
    assert "12.5 s. Options: seed 3, repeats 5. Files:" in index and "](size/size.md)" in index
    assert "| size | n_train = 10 | EECE leaf5 | 0.0700 | 0.0800 | holds |" in index
    assert "| size | n_train = 50 | EECE leaf5 | 0.0070 | 0.1000 | differs |" in index
    # the trend 0.08 -> 0.03 -> 0.1 is not a decrease (rho = +0.5); it is in the findings
    assert "| size | EECE falls with size |" in index.split("## size")[0]
    assert "no report in" in index.split("## toy")[1].split("##")[0]  # nothing ran
    assert not (out / "toy").exists()
    summary["experiment"] = "noise"
    (folder / "summary.json").write_text(json.dumps(summary))
    assert main(["reproduce", "all", "--reuse", "--no-progress", "--out", str(out)]) == 2


def test_reuse_is_an_option_of_all_only(tmp_path, capsys):
    argv = ["reproduce", "size", "--reuse", "--quick", "--out", str(tmp_path)]
    assert main(argv) == 2
    assert "--reuse applies to `all` only" in capsys.readouterr().err
    assert not (tmp_path / "size").exists()
