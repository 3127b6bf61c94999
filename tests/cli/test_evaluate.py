"""``bensemble evaluate``: every input format, the calibration split, bad inputs, no clobbering."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bensemble.app.evaluate import evaluate_predictions, planned_files, split_indices
from bensemble.cli import main
from bensemble.io import InputError, load_array, load_labels, load_predictions

M, N, K = 5, 400, 4
PROG = "bensemble evaluate: error: "


# ----------------------------------------------------------------------------- data
def _make(m=M, n=N, k=K, *, seed=0, sharpness=1.0):
    """Member logits [m, n, k] around true logits, labels drawn from the true probabilities."""
    rng = np.random.default_rng(seed)
    true_logits = 2.0 * rng.standard_normal((n, k))
    true_probs = np.exp(true_logits) / np.exp(true_logits).sum(1, keepdims=True)
    labels = (rng.random((n, 1)) > true_probs.cumsum(1)).sum(1).astype(np.int64)
    logits = sharpness * (true_logits[None] + 0.3 * rng.standard_normal((m, n, k)))
    return logits, labels


def _softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _save(path: Path, array: np.ndarray) -> str:
    """Write ``array`` in the format of ``path``'s extension; CSV stacks members as rows."""
    ext = path.suffix
    if ext == ".npy":
        np.save(path, array)
    elif ext == ".npz":
        np.savez(path, array)
    elif ext == ".pt":
        torch.save(torch.from_numpy(np.ascontiguousarray(array)), path)
    elif ext == ".csv":
        table = (
            array.reshape(-1, array.shape[-1]) if array.ndim == 3 else array.reshape(len(array), -1)
        )
        fmt = "%d" if array.dtype.kind in "iu" else "%.17g"
        np.savetxt(path, table, delimiter=",", fmt=fmt)
    else:  # pragma: no cover - test helper misuse
        raise AssertionError(ext)
    return str(path)


# ----------------------------------------------------------------------------- references
def _reference_numpy_scores(probs, labels, n_bins=15):
    """Plain float64 loops: accuracy, NLL (bensemble's log(p + 1e-8)), Brier (summed over
    classes) and top-label ECE with bins (lo, hi]."""
    n = len(labels)
    correct = probs.argmax(1) == labels
    nll = -np.mean(np.log(probs[np.arange(n), labels] + 1e-8))
    onehot = np.eye(probs.shape[1])[labels]
    brier = np.mean(((probs - onehot) ** 2).sum(1))
    conf = probs.max(1)
    ece = 0.0
    for b in range(n_bins):
        lo, hi = b / n_bins, (b + 1) / n_bins
        inside = (conf > lo) & (conf <= hi) if b else (conf >= lo) & (conf <= hi)
        if inside.any():
            ece += inside.mean() * abs(correct[inside].mean() - conf[inside].mean())
    return {"accuracy": correct.mean(), "nll": nll, "brier": brier, "ece": ece}


def _reference_numpy_entropy_decomposition(member_probs):
    mean = member_probs.mean(0)
    total = -(mean * np.log(mean)).sum(-1)
    aleatoric = -(member_probs * np.log(member_probs)).sum(-1).mean(0)
    return total.mean(), aleatoric.mean(), (total - aleatoric).mean()


# ----------------------------------------------------------------------------- helpers
def _run(argv, capsys):
    code = main(["evaluate", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def data():
    return _make()


# ----------------------------------------------------------------------------- formats
FORMATS = [".npy", ".npz", ".pt", ".csv"]


@pytest.mark.parametrize("ext", FORMATS)
@pytest.mark.parametrize("kind", ["probs", "logits"])
@pytest.mark.parametrize("members", [M, 1], ids=["ensemble", "single"])
def test_every_format_matches_numpy_reference(tmp_path, capsys, data, ext, kind, members):
    logits, labels = data
    logits = logits[:members]
    array = _softmax(logits) if kind == "probs" else logits
    if members == 1:
        array = array[0]  # a single model is saved as [N, K]
    pred = _save(tmp_path / f"pred{ext}", array)
    lab = _save(tmp_path / f"labels{ext}", labels)
    out = tmp_path / "report"
    argv = [pred, "--labels", lab, "--out", out, "--json"]
    argv += ["--logits"] if kind == "logits" else []
    argv += ["--members", members] if ext == ".csv" and members > 1 else []
    code, stdout, stderr = _run(argv, capsys)
    assert code == 0, stderr
    assert stderr == ""
    result = json.loads(stdout)

    member_probs = _softmax(logits)
    ref = _reference_numpy_scores(member_probs.mean(0), labels)
    row = result["metrics"][0]
    assert row["n"] == N and row["stage"] == "unscaled"
    for key, value in ref.items():
        assert row[key] == pytest.approx(value, rel=1e-6, abs=1e-9), key
    assert 0.0 <= row["classwise_ece"] <= 1.0
    assert result["setup"]["members"] == members
    assert result["setup"]["classes"] == K
    assert result["temperature"] is None and result["conformal"] is None

    if members > 1:
        total, aleatoric, epistemic = _reference_numpy_entropy_decomposition(member_probs)
        ens = result["ensemble"]
        assert ens["members"] == members
        assert ens["mean_total"] == pytest.approx(total, rel=1e-6)
        assert ens["mean_aleatoric"] == pytest.approx(aleatoric, rel=1e-6)
        assert ens["mean_epistemic"] == pytest.approx(epistemic, rel=1e-6)
        assert np.isfinite(ens["eece"]) and ens["eece"] >= 0.0
    else:
        assert result["ensemble"] is None

    written = sorted(p.name for p in out.iterdir())
    assert written == sorted(planned_files(ensemble=members > 1, split=False))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["metrics"] == result["metrics"]


def test_table_output_and_report_files(tmp_path, capsys, data):
    logits, labels = data
    pred = _save(tmp_path / "pred.npy", _softmax(logits))
    lab = _save(tmp_path / "labels.npy", labels)
    out = tmp_path / "out"
    code, stdout, stderr = _run([pred, "--labels", lab, "--out", out], capsys)
    assert code == 0, stderr
    for word in ("accuracy", "nll", "brier", "ece", "classwise_ece", "eece", "mean_epistemic"):
        assert word in stdout
    assert f"{M} member(s), {N} samples, {K} classes" in stdout
    assert str(out) in stdout
    names = {p.name for p in out.iterdir()}
    assert {"metrics.md", "metrics.csv", "metrics.json", "ensemble.md", "summary.json"} <= names
    for png in ("reliability.png", "epistemic_reliability.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    assert not any(name.startswith(".") for name in names)  # no temp files left behind
    table = json.loads((out / "metrics.json").read_text())
    ref = _reference_numpy_scores(_softmax(logits).mean(0), labels)
    assert table["rows"][0]["accuracy"] == pytest.approx(ref["accuracy"])

    # a second run into the same folder replaces the files and still leaves no temp file
    code, _, _ = _run(
        [pred, "--labels", lab, "--out", out, "--n-bins", "10", "--overwrite"], capsys
    )
    assert code == 0
    assert names == {p.name for p in out.iterdir()}


def test_npz_key_pt_dict_and_list_and_members_axis(tmp_path, capsys, data):
    logits, labels = data
    probs = _softmax(logits)
    lab = _save(tmp_path / "labels.npy", labels)
    np.savez(tmp_path / "many.npz", probs=probs, other=np.zeros(3))
    torch.save({"probs": torch.from_numpy(probs), "note": "text"}, tmp_path / "dict.pt")
    torch.save([torch.from_numpy(p) for p in probs], tmp_path / "list.pt")
    np.save(tmp_path / "nmk.npy", probs.transpose(1, 0, 2))
    runs = {
        "npz:key": [f"{tmp_path / 'many.npz'}:probs"],
        "pt dict": [tmp_path / "dict.pt"],
        "pt list": [tmp_path / "list.pt"],
        "axis 1": [tmp_path / "nmk.npy", "--members-axis", "1"],
    }
    results = {}
    for name, args in runs.items():
        code, stdout, stderr = _run(
            [*args, "--labels", lab, "--out", tmp_path / name, "--json"], capsys
        )
        assert code == 0, (name, stderr)
        results[name] = json.loads(stdout)
    first = results["npz:key"]
    for name, result in results.items():
        assert result["metrics"] == first["metrics"], name
        assert result["ensemble"] == first["ensemble"], name


def test_a_figure_that_fails_to_draw_is_left_out_with_a_warning(
    tmp_path, capsys, data, monkeypatch
):
    from bensemble import plots

    def broken(self, *args, **kwargs):
        raise ValueError("cannot draw\nthis")

    monkeypatch.setattr(plots.ReliabilityDisplay, "plot", broken)
    logits, labels = data
    pred = _save(tmp_path / "pred.npy", _softmax(logits))
    lab = _save(tmp_path / "labels.npy", labels)
    out = tmp_path / "out"
    code, stdout, stderr = _run([pred, "--labels", lab, "--out", out, "--json"], capsys)
    assert code == 0
    assert stderr == (
        "bensemble evaluate: warning: reliability.png left out (ValueError: cannot draw this)\n"
    )
    result = json.loads(stdout)
    assert result["report"]["problems"] == [
        "reliability.png left out (ValueError: cannot draw this)"
    ]
    names = {p.name for p in out.iterdir()}
    assert "reliability.png" not in names and "epistemic_reliability.png" in names
    assert "metrics.csv" in names
    summary = json.loads((out / "summary.json").read_text())
    assert "reliability.png" not in summary["files"] and "metrics.csv" in summary["files"]


# ----------------------------------------------------------------------------- calibration split
def test_split_indices_are_disjoint_seeded_and_halved():
    temp, conf, test = split_indices(101, 0.5, seed=3)
    assert len(temp) + len(conf) == 50 and len(test) == 51
    assert len(temp) == 25 and len(conf) == 25
    together = torch.cat([temp, conf, test])
    assert sorted(together.tolist()) == list(range(101))
    again = split_indices(101, 0.5, seed=3)
    assert all(torch.equal(a, b) for a, b in zip((temp, conf, test), again))
    other = split_indices(101, 0.5, seed=4)
    assert not torch.equal(temp, other[0])
    with pytest.raises(ValueError, match="calibration_split"):
        split_indices(3, 0.1)
    with pytest.raises(ValueError, match="calibration_split"):
        split_indices(100, 1.0)


def test_calibration_split_coverage_and_temperature(tmp_path, capsys):
    # overconfident members (logits x3): temperature scaling should find T near 3 and lower NLL;
    # conformal coverage on the test part should be near 1 - alpha
    logits, labels = _make(m=3, n=3000, k=K, seed=1, sharpness=3.0)
    pred = _save(tmp_path / "pred.npy", logits.astype(np.float32))
    lab = _save(tmp_path / "labels.npy", labels)
    out = tmp_path / "report"
    argv = [pred, "--labels", lab, "--logits", "--calibration-split", "0.5", "--alpha", "0.1"]
    code, stdout, stderr = _run([*argv, "--out", out, "--json", "--seed", "7"], capsys)
    assert code == 0, stderr
    result = json.loads(stdout)
    setup = result["setup"]
    assert (setup["n_temperature"], setup["n_conformal"], setup["n_test"]) == (750, 750, 1500)
    assert 2.0 < result["temperature"] < 4.5
    before, after = result["metrics"]
    assert before["stage"] == "unscaled" and after["stage"].startswith("temperature-scaled")
    assert before["n"] == after["n"] == 1500
    assert after["nll"] < before["nll"]
    assert after["ece"] < before["ece"]
    assert after["accuracy"] == pytest.approx(before["accuracy"])  # T > 0 keeps the argmax
    conf = result["conformal"]
    assert conf["target_coverage"] == pytest.approx(0.9)
    assert abs(conf["coverage"] - 0.9) < 0.04
    assert 1.0 <= conf["mean_set_size"] <= K
    assert (out / "conformal.csv").exists() and (out / "reliability_scaled.png").exists()

    # reference: the metrics on the test part equal the numpy reference on those indices
    _, _, test = split_indices(3000, 0.5, seed=7)
    mean = _softmax(logits.astype(np.float32).astype(np.float64)).mean(0)
    ref = _reference_numpy_scores(mean[test.numpy()], labels[test.numpy()])
    assert before["nll"] == pytest.approx(ref["nll"], rel=1e-6)


def test_temperature_and_conformal_use_separate_halves(monkeypatch):
    """The temperature is fitted on the first half only, the conformal threshold on the second."""
    from bensemble import calibration, conformal

    logits, labels = _make(m=2, n=200, seed=2)
    probs = torch.from_numpy(_softmax(logits))
    temp, conf, _ = split_indices(200, 0.5, seed=0)
    seen = {}
    real_fit = calibration.TemperatureScaling.fit
    real_cal = conformal.SplitConformalClassifier.calibrate

    def fit(self, z, y):
        seen["fit"] = y.clone()
        return real_fit(self, z, y)

    def cal(self, p, y):
        seen["cal"] = y.clone()
        return real_cal(self, p, y)

    monkeypatch.setattr(calibration.TemperatureScaling, "fit", fit)
    monkeypatch.setattr(conformal.SplitConformalClassifier, "calibrate", cal)
    evaluate_predictions(probs, torch.from_numpy(labels), calibration_split=0.5, seed=0)
    y = torch.from_numpy(labels)
    assert torch.equal(seen["fit"], y[temp])
    assert torch.equal(seen["cal"], y[conf])


# ----------------------------------------------------------------------------- bad input
def _bad_cases():
    """(id, setup(tmp) -> argv, expected message fragment)."""
    logits, labels = _make(m=2, n=50, k=3, seed=5)
    probs = _softmax(logits)

    def base(tmp, pred=None, lab=None, extra=()):
        p = pred if pred is not None else _save(tmp / "p.npy", probs)
        y = lab if lab is not None else _save(tmp / "y.npy", labels)
        return [p, "--labels", y, *extra]

    def with_nan(tmp):
        bad = probs.copy()
        bad[1, 3, 0] = np.nan
        return base(tmp, pred=_save(tmp / "p.npy", bad))

    def with_inf_logits(tmp):
        bad = logits.copy()
        bad[0, 0, 2] = np.inf
        return base(tmp, pred=_save(tmp / "p.npy", bad), extra=["--logits"])

    def text_file(tmp, name, text):
        (tmp / name).write_text(text)
        return str(tmp / name)

    def bytes_file(tmp, name, data):
        (tmp / name).write_bytes(data)
        return str(tmp / name)

    def pickled_npy(tmp):
        np.save(tmp / "p.npy", np.array([{"x": 1}], dtype=object), allow_pickle=True)
        return base(tmp, pred=str(tmp / "p.npy"))

    def pickled_pt(tmp):
        torch.save({"p": datetime.date(2020, 1, 1)}, tmp / "p.pt")
        return base(tmp, pred=str(tmp / "p.pt"))

    def numpy_in_pt(tmp):
        torch.save({"p": probs}, tmp / "p.pt")
        return base(tmp, pred=str(tmp / "p.pt"))

    def npz_two(tmp):
        np.savez(tmp / "p.npz", a=probs, b=probs)
        return base(tmp, pred=str(tmp / "p.npz"))

    cases = [
        ("missing predictions", lambda t: base(t, pred=str(t / "nope.npy")), "does not exist"),
        ("missing labels", lambda t: base(t, lab=str(t / "nope.npy")), "does not exist"),
        (
            "unknown extension",
            lambda t: base(t, pred=text_file(t, "p.txt", "0.5,0.5\n")),
            "unsupported extension '.txt'",
        ),
        (
            "1-D predictions",
            lambda t: base(t, pred=_save(t / "p.npy", probs[0, :, 0])),
            "2-D [N, K]",
        ),
        (
            "4-D predictions",
            lambda t: base(t, pred=_save(t / "p.npy", probs[None])),
            "3-D [M, N, K]",
        ),
        ("one class", lambda t: base(t, pred=_save(t / "p.npy", probs[..., :1])), "at least 2"),
        ("NaN", with_nan, "must be finite"),
        ("inf logits", with_inf_logits, "must be finite"),
        ("label out of range", lambda t: base(t, lab=_save(t / "y.npy", labels + 3)), "[0, 2]"),
        ("negative label", lambda t: base(t, lab=_save(t / "y.npy", labels - 1)), "[0, 2]"),
        (
            "float labels",
            lambda t: base(t, lab=_save(t / "y.npy", labels.astype(float))),
            "integer dtype",
        ),
        ("2-D labels", lambda t: base(t, lab=_save(t / "y.npy", np.zeros((5, 2), int))), "1-D"),
        ("too few labels", lambda t: base(t, lab=_save(t / "y.npy", labels[:-1])), "same length"),
        ("too many labels", lambda t: base(t, lab=_save(t / "y.npy", np.r_[labels, 0])), "(50)"),
        ("pickled object array", pickled_npy, "pickled object array"),
        ("pt needing pickle", pickled_pt, "needs pickle"),
        ("numpy array inside pt", numpy_in_pt, "needs pickle"),
        (
            "garbage npy",
            lambda t: base(t, pred=bytes_file(t, "p.npy", b"\x80\x04junk" * 9)),
            "not a .npy file",
        ),
        (
            "garbage pt",
            lambda t: base(t, pred=bytes_file(t, "p.pt", b"junk" * 9)),
            "not a valid .pt",
        ),
        ("npz with two arrays", npz_two, "holds 2 arrays"),
        ("logits without --logits", lambda t: base(t, pred=_save(t / "p.npy", logits)), "--logits"),
        (
            "rows not summing to 1",
            lambda t: base(t, pred=_save(t / "p.npy", probs * 0.9)),
            "summing to 1",
        ),
        (
            "csv with header",
            lambda t: base(t, pred=text_file(t, "p.csv", "a,b,c\n0.2,0.3,0.5\n")),
            "header-less",
        ),
        ("ragged csv", lambda t: base(t, pred=text_file(t, "p.csv", "0.5,0.5\n1\n")), "line 2"),
        (
            "members not dividing rows",
            lambda t: base(t, pred=_save(t / "p.csv", probs), extra=["--members", "3"]),
            "not a multiple",
        ),
        ("alpha above 1", lambda t: base(t, extra=["--alpha", "1.5"]), "--alpha"),
        (
            "split of 1",
            lambda t: base(t, extra=["--calibration-split", "1"]),
            "--calibration-split",
        ),
        ("split too small", lambda t: base(t, extra=["--calibration-split", "0.01"]), "at least 2"),
        ("zero bins", lambda t: base(t, extra=["--n-bins", "0"]), "--n-bins"),
        ("negative seed", lambda t: base(t, extra=["--seed", "-1"]), "--seed"),
    ]
    return [pytest.param(setup, fragment, id=name) for name, setup, fragment in cases]


@pytest.mark.parametrize(("setup", "fragment"), _bad_cases())
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys, setup, fragment):
    argv = setup(tmp_path)
    before = _snapshot(tmp_path)
    out = tmp_path / "report"
    code, stdout, stderr = _run([*argv, "--out", out], capsys)
    assert code == 2
    assert stdout == ""
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(PROG)
    assert fragment in lines[0]
    assert "Traceback" not in stderr
    assert not out.exists()
    assert _snapshot(tmp_path) == before  # nothing written, inputs untouched


# ----------------------------------------------------------------------------- no clobbering
def test_refuses_an_out_folder_that_would_overwrite_an_input(tmp_path, capsys, data):
    logits, labels = data
    out = tmp_path / "report"
    out.mkdir()
    pred = _save(out / "metrics.csv", _softmax(logits).reshape(-1, K))  # named like an output
    lab = _save(tmp_path / "labels.npy", labels)
    before = _snapshot(tmp_path)
    argv = [pred, "--labels", lab, "--members", M, "--out", out, "--json"]
    code, stdout, stderr = _run(argv, capsys)
    assert code == 2 and stdout == ""
    assert stderr.startswith(PROG) and "would overwrite the input" in stderr
    assert len(stderr.splitlines()) == 1
    assert _snapshot(tmp_path) == before

    # --out pointing at an input file itself
    code, _, stderr = _run([pred, "--labels", lab, "--members", M, "--out", lab], capsys)
    assert code == 2 and "is an input file" in stderr
    assert _snapshot(tmp_path) == before

    # the report folder is replaced as a whole: an input inside it under any name is refused
    os.replace(out / "metrics.csv", out / "my_predictions.csv")
    pred = str(out / "my_predictions.csv")
    argv = [pred, "--labels", lab, "--members", M, "--out", out, "--overwrite"]
    code, _, stderr = _run(argv, capsys)
    assert code == 2 and "would overwrite the input" in stderr
    assert sorted(p.name for p in out.iterdir()) == ["my_predictions.csv"]


def test_out_that_is_an_existing_file_is_refused(tmp_path, capsys, data):
    logits, labels = data
    pred = _save(tmp_path / "p.npy", _softmax(logits))
    lab = _save(tmp_path / "y.npy", labels)
    (tmp_path / "taken").write_text("keep me")
    code, _, stderr = _run([pred, "--labels", lab, "--out", tmp_path / "taken"], capsys)
    assert code == 2 and "not a folder" in stderr
    assert (tmp_path / "taken").read_text() == "keep me"


# ----------------------------------------------------------------------------- loader unit tests
def test_csv_dtype_rules(tmp_path):
    (tmp_path / "i.csv").write_text("1,2\n3,-4\n")
    (tmp_path / "f.csv").write_text("1.0,2\n3,4e-1\n\n")
    assert load_array(tmp_path / "i.csv", name="x").dtype == torch.int64
    t = load_array(tmp_path / "f.csv", name="x")
    assert t.dtype == torch.float64 and t.tolist() == [[1.0, 2.0], [3.0, 0.4]]
    (tmp_path / "row.csv").write_text("0,1,2,1\n")
    assert load_labels(tmp_path / "row.csv").tolist() == [0, 1, 2, 1]


def test_load_predictions_shapes(tmp_path, data):
    logits, _ = data
    probs = _softmax(logits)
    _save(tmp_path / "p.csv", probs)
    stacked = load_predictions(tmp_path / "p.csv", members=M)
    torch.testing.assert_close(stacked, torch.from_numpy(probs))
    single = load_predictions(tmp_path / "p.csv")
    assert single.shape == (1, M * N, K)
    np.save(tmp_path / "z.npy", logits[0])
    torch.testing.assert_close(
        load_predictions(tmp_path / "z.npy", logits=True)[0], torch.from_numpy(_softmax(logits[0]))
    )
    with pytest.raises(InputError, match="from_logits=True"):
        load_predictions(tmp_path / "z.npy")


def test_input_error_is_one_line_value_error():
    err = InputError("first\nsecond   third")
    assert isinstance(err, ValueError)
    assert str(err) == "first second third"


# ----------------------------------------------------------------------------- subprocess
def test_console_entry_point_as_subprocess(tmp_path, data):
    logits, labels = data
    pred = _save(tmp_path / "pred.pt", logits.astype(np.float32))
    lab = _save(tmp_path / "labels.csv", labels)
    out = tmp_path / "report"
    cmd = [sys.executable, "-m", "bensemble.cli", "evaluate", pred, "--labels", lab, "--logits"]
    env = {**os.environ, "MPLBACKEND": "Agg"}
    ok = subprocess.run(
        [*cmd, "--calibration-split", "0.5", "--json", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert ok.returncode == 0, ok.stderr
    result = json.loads(ok.stdout)
    assert result["conformal"]["n_test"] == N // 2
    assert (out / "summary.json").exists()


def test_a_usage_error_after_a_warning_prints_the_error_alone(tmp_path, capsys, data):
    logits, _ = data
    pred = _save(tmp_path / "p.npy", _softmax(logits))
    np.save(tmp_path / "short.npy", np.zeros(5, dtype=np.int64))
    argv = [pred, "--labels", tmp_path / "short.npy", "--logits", "--json"]
    code, _, err = _run(argv, capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith(PROG) and "labels" in err
