"""Seed 000 (bensemble's "Calibration & Metrics" page): every code block runs as written.

The page's two code blocks are copied verbatim below and executed in a namespace that holds the
validation / test logits the page assumes, produced by a small real model: a 2-layer MLP trained
to over-fit a synthetic 3-class problem, so its held-out logits are over-confident.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
import torch
from sklearn.datasets import make_classification
from torch import nn

SEED_PAGE = Path(__file__).resolve().parents[3] / "shared" / "seeds" / "000_4ab6c5e054466196.txt"

# ---- verbatim from the seed page --------------------------------------------------------------
SEED_BLOCK_SCALING = """\
import torch
from bensemble.calibration.scaling import VectorScaling

# logits and labels from a validation set the model was not trained on
scaler = VectorScaling(num_classes=3).fit(val_logits, val_labels)

# apply to new logits before the softmax
probs = torch.softmax(scaler(test_logits), dim=-1)
"""

SEED_BLOCK_METRICS = """\
from bensemble.metrics import (
    brier_score,
    expected_calibration_error,
    negative_log_likelihood,
)

for name, logits in [("before", test_logits), ("after", scaler(test_logits))]:
    p = torch.softmax(logits, dim=-1)
    print(
        f"{name}: NLL={negative_log_likelihood(p, test_labels):.3f} "
        f"Brier={brier_score(p, test_labels):.3f} "
        f"ECE={expected_calibration_error(p, test_labels):.3f}"
    )
"""
# -----------------------------------------------------------------------------------------------

_LINE = re.compile(r"^(before|after): NLL=(\d+\.\d{3}) Brier=(\d+\.\d{3}) ECE=(\d+\.\d{3})$")


def _overconfident_model_logits():
    """Validation / test logits of an over-fitted MLP on a noisy 3-class problem."""
    x, y = make_classification(
        n_samples=3000,
        n_features=10,
        n_informative=6,
        n_redundant=0,
        n_classes=3,
        n_clusters_per_class=1,
        flip_y=0.1,
        class_sep=1.0,
        random_state=0,
    )
    x = torch.tensor(x, dtype=torch.float32)
    y = torch.tensor(y, dtype=torch.int64)
    train, val, test = slice(0, 400), slice(400, 1400), slice(1400, 3000)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 3))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    for _ in range(300):  # full batch, no regularisation: over-fits the 400 training rows
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x[train]), y[train]).backward()
        optimizer.step()
    with torch.no_grad():
        return model(x[val]), y[val], model(x[test]), y[test]


def _parse(stdout: str) -> dict[str, tuple[float, float, float]]:
    rows = {}
    for line in stdout.strip().splitlines():
        match = _LINE.match(line)
        assert match, f"unexpected output line {line!r}"
        rows[match.group(1)] = tuple(float(v) for v in match.group(2, 3, 4))
    return rows


def test_seed_blocks_are_verbatim_copies():
    if not SEED_PAGE.exists():  # the seed texts live beside the repository, not in it
        pytest.skip("seed page not available")
    page = SEED_PAGE.read_text()
    assert SEED_BLOCK_SCALING.strip() in page
    assert SEED_BLOCK_METRICS.strip() in page


def test_seed_page_runs_as_written_and_scaling_improves_every_metric():
    val_logits, val_labels, test_logits, test_labels = _overconfident_model_logits()
    namespace = {
        "val_logits": val_logits,
        "val_labels": val_labels,
        "test_logits": test_logits,
        "test_labels": test_labels,
    }
    exec(compile(SEED_BLOCK_SCALING, "seed-000-block-1", "exec"), namespace)
    probs = namespace["probs"]
    assert probs.shape == (len(test_labels), 3)
    torch.testing.assert_close(probs.sum(-1), torch.ones(len(test_labels)))
    assert namespace["scaler"].converged_

    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        exec(compile(SEED_BLOCK_METRICS, "seed-000-block-2", "exec"), namespace)
    rows = _parse(stdout.getvalue())
    assert set(rows) == {"before", "after"}
    (nll_0, brier_0, ece_0), (nll_1, brier_1, ece_1) = rows["before"], rows["after"]
    assert nll_1 < nll_0
    assert brier_1 < brier_0
    assert ece_1 < ece_0
