"""``bensemble reproduce mnist|cifar10 --data-dir DIR`` end to end on tiny synthetic files."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from bensemble.cli import main
from bensemble.experiments.paper_values import paper_table
from bensemble.plots.scatter import EECEvsECEDisplay, eece_ece_summary

QUICK = ["--quick", "--no-progress"]


def _write_idx(path: Path, array: np.ndarray) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + np.asarray(array.shape, ">u4").tobytes()
    path.write_bytes(gzip.compress(header + array.astype(np.uint8).tobytes()))


def _fake_mnist(folder: Path, n: int = 40) -> None:
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    for prefix in ("train", "t10k"):
        labels = np.arange(n) % 10
        images = rng.integers(0, 256, size=(n, 28, 28))
        images[labels == 0, :14] = 255
        _write_idx(folder / f"{prefix}-images-idx3-ubyte.gz", images)
        _write_idx(folder / f"{prefix}-labels-idx1-ubyte.gz", labels)


def _fake_cifar(folder: Path, n: int = 8) -> None:
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    for name, size in [*((f"data_batch_{k}", n) for k in range(1, 6)), ("test_batch", 5 * n)]:
        labels = (np.arange(size) % 10).astype(np.uint8)
        pixels = rng.integers(0, 256, size=(size, 3072), dtype=np.uint8)
        pixels[labels == 0, :1024] = 255
        (folder / f"{name}.bin").write_bytes(np.concatenate([labels[:, None], pixels], 1).tobytes())


def _table(folder: Path, name: str) -> dict:
    return json.loads((folder / f"{name}.json").read_text())


@pytest.mark.parametrize(
    ("experiment", "fake", "first_task", "table"),
    [
        pytest.param("mnist", _fake_mnist, "0vsAll", "table1", id="mnist"),
        pytest.param("cifar10", _fake_cifar, "airplane", "table2", id="cifar10"),
    ],
)
def test_reproduce_vision_quick_on_tiny_files(tmp_path, experiment, fake, first_task, table):
    data, out = tmp_path / "data", tmp_path / "out"
    fake(data)
    argv = ["reproduce", experiment, *QUICK, "--data-dir", str(data), "--out", str(out)]
    assert main(argv) == 0
    rows = _table(out / experiment, f"{experiment}_table")["rows"]
    assert rows[0]["task"] == first_task
    # Per task: the paper's value of that task in parentheses; the mean row: the paper's mean.
    paper = paper_table(table)
    assert rows[0]["Centroids"].endswith(f"({paper.value('accuracy', 0, 'Centroids')})")
    mean = paper.mean("accuracy", "Centroids", [0, 1]).value  # --quick: the first two tasks
    assert rows[2]["task"] == "mean" and rows[2]["Centroids"].endswith(f"({mean:.2f})")
    assert (out / experiment / f"{experiment}_fig4a.png").stat().st_size > 0


@pytest.mark.parametrize("experiment", ["mnist", "cifar10"])
def test_reproduce_vision_without_files_exits_2_with_one_line(tmp_path, capsys, experiment):
    out = tmp_path / "out"
    for extra in ([], ["--data-dir", str(tmp_path)]):
        assert main(["reproduce", experiment, *QUICK, *extra, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "--data-dir" in err and "[.gz][.gz]" not in err
    assert not out.exists()


def test_paper_table2_is_the_papers_cifar_table():
    table = paper_table("table2")
    assert all(len(table.printed[m]) == 10 for m in ("accuracy", "ece", "eece"))
    blr = "Bayesian Log. Reg."
    assert table.value("eece", 9, blr) == "0.24" and table.value("ece", 9, blr) == "0.19"
    assert table.printed["accuracy"][0] == tuple(
        "0.71 0.71 0.93 0.93 0.91 0.91 0.92 0.92 0.92".split()
    )
    assert table.tasks[0] == "airplane" and table.value("eece", 4, "Likelihood") == "0.13"


def test_eece_ece_display_holds_the_summary():
    rows = [
        {"task": t, "method": m, "ece": e, "eece": ee}
        for t, (e, ee) in enumerate([(0.1, 0.01), (0.3, 0.03)])
        for m in ("A", "B")
    ]
    summary = eece_ece_summary(rows)
    assert summary.methods == ("A", "B")
    np.testing.assert_allclose(summary.ece_mean, [0.2, 0.2])
    np.testing.assert_allclose(summary.ece_var, [0.01, 0.01])
    np.testing.assert_allclose(summary.eece_var, [1e-4, 1e-4])
    display = EECEvsECEDisplay(summary).plot()
    assert display.summary is summary and display.ax_.get_xscale() == "log"
    with pytest.raises(ValueError, match="`rows` must hold"):
        eece_ece_summary([{"method": "A", "ece": "x"}])


def test_eece_ece_display_from_rows_takes_the_papers_values_as_reference():
    rows = [
        {"task": t, "method": "A", "ece": 0.1, "eece": 0.01, "paper ece": p, "paper eece": 0.0}
        for t, p in enumerate([0.2, 0.4])
    ]
    display = EECEvsECEDisplay.from_rows(rows)
    assert display.reference is not None
    np.testing.assert_allclose(display.reference.ece_mean, [0.3])
    assert display.n_floored == 1  # the paper's EECE of 0 is drawn in the band below the floor


def test_fig4a_draws_every_zero_at_its_own_place_in_a_labelled_band():
    """The paper's five 0.00 EECEs (CIFAR-10) must be five visible points, not one."""
    import matplotlib.pyplot as plt

    methods = ["A", "B", "C", "D", "E", "F"]
    rows = [{"method": m, "ece": 0.01 * (i + 1), "eece": 0.0 if i else 0.05,
             "paper ece": 0.01, "paper eece": 0.0} for i, m in enumerate(methods)]  # fmt: skip
    display = EECEvsECEDisplay.from_rows(rows).plot()
    squares = [
        line for line in display.ax_.lines if line.get_marker() == "s" and line.get_xdata().size
    ]
    xs = [float(line.get_xdata()[0]) for line in squares]
    assert len(xs) == 6 and len(set(xs)) == 6  # distinct places
    assert all(1e-5 <= x < 1e-4 for x in xs)
    labels = [t.get_text() for t in display.ax_.get_legend().get_texts()]
    assert any(label.startswith("< 0.0001") for label in labels)
    plt.close(display.figure_)
    assert EECEvsECEDisplay.from_rows([{**rows[0], "paper ece": None}]).reference is None


def test_cifar_autoencoder_is_the_papers_wider_one():
    from torch import nn

    from bensemble.experiments.autoencoder import ConvAutoEncoder
    from bensemble.experiments.vision import CIFAR10

    ae = ConvAutoEncoder(side=32, latent_dim=CIFAR10.latent_dim, channels=3)
    convs = [m for m in ae.encoder if isinstance(m, nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.stride) for c in convs] == [
        (3, 16, (2, 2)),
        (16, 32, (2, 2)),
    ]
    linear = next(m for m in ae.encoder if isinstance(m, nn.Linear))
    assert (linear.in_features, linear.out_features) == (2048, 256)
    last = [m for m in ae.decoder if isinstance(m, nn.ConvTranspose2d)][-1]
    assert (last.in_channels, last.out_channels) == (16, 3)


def test_n_test_scores_a_seeded_subset_of_the_test_images(tmp_path, capsys):
    data = tmp_path / "data"
    _fake_mnist(data)  # 40 test images
    outputs = []
    for run in range(2):
        out = tmp_path / f"out{run}"
        argv = ["reproduce", "mnist", *QUICK, "--data-dir", str(data), "--out", str(out)]
        assert main([*argv, "--n-test", "25"]) == 0
        assert "25 test images" in capsys.readouterr().out
        outputs.append(_table(out / "mnist", "mnist_per_task")["rows"])
    assert outputs[0] == outputs[1]  # the subset is drawn from the seed
