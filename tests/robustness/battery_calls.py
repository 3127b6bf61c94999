"""The call battery's cases: every public function or helper class no other battery drives.

A :class:`CallCase` gives one valid call (it must return) and bad calls, each with the argument
its ``ValueError`` must name. test_battery_calls.py runs them. Adding a function: one line
(the report kit's and the chunked reader's cases are in battery_calls_reporting.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

from bensemble import conformal, datasets, io, layers, methods, metrics, plots, search, utils
from bensemble.integrations import sync_

sys.path.insert(0, str(Path(__file__).resolve().parent))  # siblings, however this is imported

from battery_calls_base import CallCase  # noqa: E402
from battery_calls_base import files as _files  # noqa: E402
from battery_calls_reporting import REPORTING_CASES  # noqa: E402

NAN = float("nan")


def _g(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _x(n: int = 10, d: int = 4) -> torch.Tensor:
    return torch.randn(n, d, generator=_g(1))


def _y(n: int = 10, k: int = 3) -> torch.Tensor:
    return torch.arange(n) % k


def _nan(t: torch.Tensor) -> torch.Tensor:
    t = t.clone()
    t.view(-1)[0] = NAN
    return t


def _pool(k: int = 3, n: int = 3) -> list[nn.Module]:
    torch.manual_seed(0)
    return [nn.Linear(4, k) for _ in range(n)]


def _forest():
    from sklearn.ensemble import RandomForestClassifier

    return RandomForestClassifier(3, random_state=0).fit(_x().numpy(), _y().numpy())


def _bayes_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(layers.BayesianLinear(4, 3))


CALL_CASES: list[CallCase] = [
    CallCase(
        "MemberBackend",
        lambda: methods.MemberBackend("joblib", n_jobs=2),
        [
            (lambda: methods.MemberBackend("dask"), "name"),
            (lambda: methods.MemberBackend("ray", n_jobs=0), "n_jobs"),
            (lambda: methods.MemberBackend("ray", temp_dir=3), "temp_dir"),
        ],
    ),  # fmt: skip
    CallCase(
        "bernoulli_mask",
        lambda: layers.bernoulli_mask((3, 2), 0.5, generator=_g()),
        [
            (lambda: layers.bernoulli_mask((3, -1), 0.5), "shape"),
            (lambda: layers.bernoulli_mask((3,), 1.5), "keep_prob"),
        ],
    ),  # fmt: skip
    CallCase(
        "relu_moments",
        lambda: methods.relu_moments(torch.randn(4), torch.rand(4)),
        [
            (lambda: methods.relu_moments(torch.randn(4), -torch.rand(4)), "v"),
            (lambda: methods.relu_moments(_nan(torch.randn(4)), torch.rand(4)), "m"),
        ],
    ),  # fmt: skip
    CallCase(
        "make_mlp",
        lambda: methods.make_mlp(4, 3, hidden=(5,)),
        [
            (lambda: methods.make_mlp(4, 3, hidden=(0,)), "hidden"),
            (lambda: methods.make_mlp(4, 3, dropout=1.5), "dropout"),
        ],
    ),  # fmt: skip
    CallCase(
        "gaussian_members",
        lambda: methods.gaussian_members(torch.rand(5), torch.rand(5) / 100, 3, generator=_g()),
        [
            (
                lambda: methods.gaussian_members(torch.rand(5) + 2, torch.rand(5), 3),
                "positive_probs",
            ),
            (lambda: methods.gaussian_members(torch.rand(5), torch.rand(5), 0), "n"),
        ],
    ),  # fmt: skip
    CallCase(
        "forest_members",
        lambda: methods.forest_members(_forest(), _x()),
        [
            (lambda: methods.forest_members(_forest(), _nan(_x())), "X"),
            (lambda: methods.forest_members(5, _x()), "forest"),
        ],
    ),  # fmt: skip
    CallCase(
        "train_model",
        lambda: methods.train_model(nn.Linear(4, 3), (_x(), _y()), epochs=1, progress=False),
        [
            (
                lambda: methods.train_model(
                    nn.Linear(4, 3), (_nan(_x()), _y()), epochs=1, progress=False
                ),
                "X",
            ),
            (lambda: methods.train_model(nn.Linear(4, 3), (_x(), _y()), epochs=0), "epochs"),
        ],
    ),  # fmt: skip
    CallCase(
        "train_ensemble",
        lambda: methods.train_ensemble(
            lambda: nn.Linear(4, 3), (_x(), _y()), n_members=2, epochs=1, progress=False
        ),
        [
            (
                lambda: methods.train_ensemble(lambda: nn.Linear(4, 3), (_x(), _y()), n_members=0),
                "n_members",
            )
        ],
    ),  # fmt: skip
    CallCase(
        "make_toy_gaussians",
        lambda: datasets.make_toy_gaussians(10, seed=0),
        [(lambda: datasets.make_toy_gaussians(0), "n")],
    ),  # fmt: skip
    CallCase(
        "make_regression_toy",
        lambda: datasets.make_regression_toy(10, gap=(0.0, 1.0)),
        [
            (lambda: datasets.make_regression_toy(0), "n"),
            (lambda: datasets.make_regression_toy(10, gap=(2.0, 1.0)), "gap"),
        ],
    ),  # fmt: skip
    CallCase(
        "make_toy_grid",
        lambda: datasets.make_toy_grid(4, seed=0),
        [(lambda: datasets.make_toy_grid(1), "n_per_axis")],
    ),  # fmt: skip
    CallCase(
        "calibration_error_from_bins",
        lambda: metrics.calibration_error_from_bins(
            metrics.binned_calibration_stats(torch.rand(10, generator=_g()), _y(10, 2).bool())
        ),
        [(lambda: metrics.calibration_error_from_bins(5), "bins")],
    ),  # fmt: skip
    CallCase(
        "conformal_rank",
        lambda: conformal.conformal_rank(100, 0.1),
        [
            (lambda: conformal.conformal_rank(100, 1.5), "alpha"),
            (lambda: conformal.conformal_rank(-1, 0.1), "n"),
        ],
    ),  # fmt: skip
    CallCase(
        "wilson_interval",
        lambda: plots.wilson_interval(torch.tensor([3.0]), torch.tensor([10.0])),
        [(lambda: plots.wilson_interval(torch.tensor([30.0]), torch.tensor([10.0])), "successes")],
    ),  # fmt: skip
    CallCase(
        "toy_map_pairs",
        lambda: plots.toy_map_pairs({"a": torch.rand(16)}, {"a": torch.rand(16)}),
        [(lambda: plots.toy_map_pairs(5, 6), "eu")],
    ),  # fmt: skip
    CallCase(
        "enable_dropout",
        lambda: utils.enable_dropout(nn.Sequential(nn.Dropout())),
        [(lambda: utils.enable_dropout(5), "model")],
    ),  # fmt: skip
    CallCase(
        "get_total_kl",
        lambda: utils.get_total_kl(_bayes_net()),
        [(lambda: utils.get_total_kl("net"), "model")],
    ),  # fmt: skip
    CallCase(
        "predict_with_uncertainty",
        lambda: utils.predict_with_uncertainty(_bayes_net(), _x(), 3, generator=_g()),
        [(lambda: utils.predict_with_uncertainty(_bayes_net(), _x(), 1), "num_samples")],
    ),  # fmt: skip
    CallCase(
        "prune_model",
        lambda: utils.prune_model(_bayes_net()),
        [(lambda: utils.prune_model(_bayes_net(), -1.0), "threshold")],
    ),  # fmt: skip
    CallCase(
        "CachedCriterion",
        lambda: search.CachedCriterion("sum", "identity", lambda c, t: c.sum((1, 2))),
        [
            (lambda: search.CachedCriterion("sum", "log", lambda c, t: c), "transform"),
            (lambda: search.CachedCriterion("sum", "identity", None), "score"),
        ],
    ),  # fmt: skip
    CallCase(
        "ValidationSet",
        lambda: search.ValidationSet([(_x(), _y())]),
        [
            (lambda: search.ValidationSet(5), "val_loader"),
            (lambda: search.ValidationSet([(_nan(_x()), _y())]), "val_loader"),
            (lambda: search.ValidationSet([]), "val_loader"),
        ],
    ),  # fmt: skip
    CallCase(
        "classification_nll_criterion",
        lambda: search.classification_nll_criterion(_pool()[:1], [(_x(), _y())]),
        [
            (lambda: search.classification_nll_criterion([], [(_x(), _y())]), "members"),
            (
                lambda: search.classification_nll_criterion(_pool()[:1], [(_nan(_x()), _y())]),
                "val_loader",
            ),
        ],
    ),  # fmt: skip
    CallCase(
        "regression_mse_criterion",
        lambda: search.regression_mse_criterion(_pool(1)[:1], [(_x(), _y().double())]),
        [
            (
                lambda: search.regression_mse_criterion(
                    _pool(1)[:1], [(_x(), _nan(_y().double()))]
                ),
                "val_loader",
            )
        ],
    ),  # fmt: skip
    CallCase(
        "forward_select",
        lambda: search.forward_select(_pool(), [(_x(), _y())], 2),
        [
            (lambda: search.forward_select(_pool(), [(_x(), _y())], 5), "ensemble_size"),
            (lambda: search.forward_select([], [(_x(), _y())], 1), "pool"),
            (lambda: search.forward_select(_pool(), [(_nan(_x()), _y())], 1), "val_loader"),
        ],
    ),  # fmt: skip
    CallCase(
        "select_on_predictions",
        lambda: search.select_on_predictions(
            torch.rand(3, 10, 3).softmax(-1), _y(), 2, search.classification_nll_criterion
        ),
        [
            (
                lambda: search.select_on_predictions(
                    np.zeros((0, 10, 3)), _y(), 1, search.classification_nll_criterion
                ),
                "member_preds",
            ),
            (
                lambda: search.select_on_predictions(torch.rand(3, 10, 3), _y(), 1, "nll"),
                "criterion",
            ),
            (
                lambda: search.select_on_predictions(
                    torch.rand(3, 10, 3), _y(4), 1, search.classification_nll_criterion
                ),
                "targets",
            ),
        ],
    ),  # fmt: skip
    CallCase(
        "sync_",
        None,
        [(lambda: sync_(5), "meter")],
        why="needs an initialised torch.distributed group (tests/integrations/test_distributed.py)",
    ),  # fmt: skip
    CallCase(
        "load_array",
        lambda: io.load_array(_files() / "probs.npy", name="predictions"),
        [(lambda: io.load_array(_files() / "missing.npy", name="predictions"), "predictions")],
    ),  # fmt: skip
    CallCase(
        "load_predictions",
        lambda: io.load_predictions(_files() / "probs.npy"),
        [(lambda: io.load_predictions(_files() / "nan.npy"), "predictions")],
    ),  # fmt: skip
    CallCase(
        "load_labels",
        lambda: io.load_labels(_files() / "labels.npy"),
        [(lambda: io.load_labels(_files() / "probs.npy"), "labels")],
    ),  # fmt: skip
    CallCase("split_key", lambda: io.split_key("p.npz:key"), [(lambda: io.split_key(5), "path")]),
    *REPORTING_CASES,  # the report kit and the chunked .npy reader (battery_calls_reporting.py)
]

#: Public names the call battery covers.
CALL_NAMES = sorted({case.name for case in CALL_CASES})
