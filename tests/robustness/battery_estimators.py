"""The estimator battery's cases: one per public class with a fit (or calibrate / search) step.

An :class:`EstimatorCase` says how to build the estimator, fit it, ask it for a prediction, and
feed it a bad input. test_battery_estimators.py checks, for every case: ``repr`` before and after
fitting; a prediction before fitting raises a ``ValueError`` naming the missing step; ``fit``
returns ``self`` (or the documented exception); two identical fits agree (fixed default seeds);
a bad input raises a ``ValueError`` naming an argument and leaves a previous fit in place;
``copy.deepcopy`` and (for nn.Modules) ``state_dict`` keep the fitted predictions.

Adding an estimator: one ``EstimatorCase(...)`` below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from bensemble import calibration as cal
from bensemble import conformal as conf
from bensemble import methods
from bensemble import regression as reg
from bensemble.diversity import MCDropoutEnsembler
from bensemble.search import EvolutionarySearcher, NESBayesianSampler, RandomSearcher
from bensemble.search.space import SearchSpace


@dataclass(frozen=True)
class EstimatorCase:
    """How the battery drives one estimator.

    Attributes:
        name: the public class covered.
        build: ``build()`` -> a fresh, unfitted estimator.
        fit: ``fit(est, bad)`` -> what the fit step returns; ``bad=True`` feeds an input holding a
            NaN (or another invalid value), which must raise a ``ValueError``.
        predict: ``predict(est)`` -> a fitted prediction (a tensor, or tensors).
        step: the word a "predict before fit" error must contain (``None``: usable unfitted).
        returns: ``"self"``, or what ``fit`` documents returning instead (and why).
    """

    name: str
    build: Callable[[], Any]
    fit: Callable[[Any, bool], Any]
    predict: Callable[[Any], Any]
    step: str | None = "fit"
    returns: str = "self"


def _g(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _xy(
    n: int = 30, d: int = 2, k: int = 2, bad: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Two well separated classes (or ``k``) in ``d`` dimensions; ``bad`` puts a NaN in ``X``."""
    g = _g(11)
    y = torch.arange(n) % k
    x = torch.randn(n, d, generator=g, dtype=torch.float64) + 2.0 * y[:, None]
    if bad:
        x[3, 0] = float("nan")
    return x, y


def _logits(bad: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    g = _g(12)
    y = torch.randint(0, 3, (60,), generator=g)
    z = torch.randn(60, 3, generator=g) + 2.5 * torch.nn.functional.one_hot(y, 3)
    if bad:
        z[5, 1] = float("nan")
    return z, y


def _probs(bad: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    z, y = _logits(bad)
    return z.softmax(-1), y


def _sklearn_style(cls: type, **kw: Any) -> EstimatorCase:
    return EstimatorCase(
        cls.__name__,
        lambda: cls(**kw),
        lambda est, bad: est.fit(*_xy(bad=bad)),
        lambda est: est.predict_proba(_xy()[0][:5]),
    )


def _scaler(cls: type, *args: Any) -> EstimatorCase:
    return EstimatorCase(
        cls.__name__,
        lambda: cls(*args),
        lambda est, bad: est.fit(*_logits(bad)),
        lambda est: est(_logits()[0][:5]),
        step=None,  # an unfitted scaler is the identity map: usable before fitting
    )


def _calibrator(cls: type, **kw: Any) -> EstimatorCase:
    """A calibrator of probabilities: refuses to predict before ``fit``."""
    return EstimatorCase(
        cls.__name__,
        lambda: cls(**kw),
        lambda est, bad: est.fit(*_probs(bad)),
        lambda est: est.predict_proba(_probs()[0][:5]),
    )


def _recalibrator() -> EstimatorCase:
    def members(bad: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        z, y = _logits(bad)
        shifts = torch.tensor([0.0, 0.6, -0.4], dtype=z.dtype)[:, None, None]
        return (z + shifts * torch.randn(3, 1, 3, generator=_g(13))).softmax(-1), y

    return EstimatorCase(
        "EpistemicRecalibrator",
        cal.EpistemicRecalibrator,
        lambda est, bad: est.fit(*members(bad)),
        lambda est: est.transform(members()[0][:, :5]),
        step=None,  # an unfitted recalibrator is the identity map
    )


def _regression_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 1))


def _classifier_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 2))


def _xy_float(bad: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = _xy(d=2, bad=bad)
    return x.float(), y


class _Space(SearchSpace):
    def sample(self, generator=None) -> dict:
        return {"hidden": int(torch.randint(3, 7, (1,), generator=generator))}

    def mutate(self, config: dict, generator=None) -> dict:
        return {
            "hidden": max(
                2, config["hidden"] + int(torch.randint(-1, 2, (1,), generator=generator))
            )
        }

    def build(self, config: dict) -> nn.Module:
        return nn.Sequential(
            nn.Linear(2, config["hidden"]), nn.ReLU(), nn.Linear(config["hidden"], 2)
        )


def _val_loader(bad: bool = False) -> list:
    x, y = _xy_float(bad)
    return [(x[:15], y[:15]), (x[15:], y[15:])]


def _searcher(cls: type, **kw: Any) -> EstimatorCase:
    return EstimatorCase(
        cls.__name__,
        lambda: cls(_Space(), pool_size=4, ensemble_size=2, train_fn=lambda m: None, seed=0, **kw),
        lambda est, bad: est.search(_val_loader(bad)),
        lambda est: torch.tensor(est.selected_indices_),
        step=None,  # no prediction method: search() returns the Ensemble
        returns="the selected Ensemble (bensemble 0.2's search API)",
    )


def _nes_sampler() -> EstimatorCase:
    return EstimatorCase(
        "NESBayesianSampler",
        lambda: NESBayesianSampler(
            _Space(), train_fn=lambda m: None, pool_size=4, ensemble_size=2, seed=0
        ),
        lambda est, bad: est.build_pool(_val_loader(bad)),
        lambda est: est.posterior(),
        step="build_pool",
    )


def _conformal() -> EstimatorCase:
    return EstimatorCase(
        "SplitConformalClassifier",
        # randomised sets are re-seeded for every predict_set: repeated predictions agree
        lambda: conf.SplitConformalClassifier("aps", alpha=0.2),
        lambda est, bad: est.calibrate(*_probs(bad)),
        lambda est: est.predict_set(_probs()[0][:5]),
        step="calibrate",
    )


def _pbp() -> EstimatorCase:
    def fit(est: Any, bad: bool) -> Any:
        x, y = _xy(bad=bad)
        return est.fit([(x, y.double())], num_epochs=2)

    def build() -> Any:
        torch.manual_seed(0)
        return methods.PBPEngine(layer_sizes=[2, 6, 1])

    return EstimatorCase("PBPEngine", build, fit, lambda est: est.predict(_xy()[0][:5]),
                         returns="the per-epoch history (bensemble 0.2's API)")  # fmt: skip


def _laplace() -> EstimatorCase:
    def fit(est: Any, bad: bool) -> Any:
        x, y = _xy_float(bad)
        return est.compute_curvature([(x, y[:, None].float())])

    return EstimatorCase(
        "LaplaceApproximation",
        lambda: methods.LaplaceApproximation(_regression_net(), likelihood="regression"),
        fit,
        lambda est: est.predictive(_xy_float()[0][:5]),
        step="compute_curvature",
        returns="None (bensemble 0.2's compute_curvature)",
    )


def _last_layer_laplace() -> EstimatorCase:
    return EstimatorCase(
        "LastLayerLaplace",
        lambda: methods.LastLayerLaplace(_classifier_net(), prior_precision=1.0),
        lambda est, bad: est.fit(_xy_float(bad)),
        lambda est: est.predictive(_xy_float()[0][:5]),
    )


def _mc_dropout() -> EstimatorCase:
    def net() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Dropout(0.3), nn.Linear(8, 2))

    def fit(est: Any, bad: bool) -> Any:
        return est.build_ensemble(num_samples=-1 if bad else 4, generator=_g())

    return EstimatorCase(
        "MCDropoutEnsembler",
        lambda: MCDropoutEnsembler(net()),
        fit,
        lambda est: est.build_ensemble(num_samples=4, generator=_g()).predict_members(
            _xy_float()[0][:5]
        ),
        step=None,
        returns="the Ensemble it builds (a factory, not a fitted model)",
    )


def _regression(bad: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``[3, 60, 2]`` (mean, variance) members and real labels; ``bad`` puts a NaN label."""
    g = _g(13)
    means = torch.randn(3, 60, generator=g, dtype=torch.float64)
    variances = 0.1 + torch.rand(3, 60, generator=g, dtype=torch.float64)
    y = means.mean(0) + 2.0 * torch.randn(60, generator=g, dtype=torch.float64)
    if bad:
        y[4] = float("nan")
    return torch.stack([means, variances], -1), y


def _quantile_bands(bad: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    p, y = _regression(bad)
    sd = p[..., 1].sqrt()
    return torch.stack([p[..., 0] - sd, p[..., 0] + sd], -1), y


ESTIMATOR_CASES: list[EstimatorCase] = [
    _scaler(cal.TemperatureScaling),
    _scaler(cal.VectorScaling, 3),
    _scaler(cal.MatrixScaling, 3),
    _calibrator(cal.IsotonicCalibration),
    _calibrator(cal.HistogramBinningCalibration, n_bins=5),
    _calibrator(cal.BetaCalibration),
    _calibrator(cal.DirichletCalibration, off_diagonal_l2=1e-2, intercept_l2=1e-2),
    _recalibrator(),
    _conformal(),
    _sklearn_style(methods.BayesianLogisticRegression, n_samples=20, burn_in=10, seed=0),
    _sklearn_style(methods.Centroids),
    _sklearn_style(methods.EvidentialKNN, n_neighbors=4),
    _sklearn_style(methods.RelativeLikelihood, n_neighbors=4),
    _sklearn_style(methods.RandomForestMembers, n_estimators=4, random_state=0),
    _pbp(),
    _laplace(),
    _last_layer_laplace(),
    _searcher(RandomSearcher),
    _searcher(EvolutionarySearcher, population_size=3, num_parent_candidates=2),
    _nes_sampler(),
    _mc_dropout(),
    # second-order regression
    EstimatorCase(
        "VarianceScaling",
        lambda: reg.VarianceScaling(),
        lambda est, bad: est.fit(*_regression(bad)),
        lambda est: est.transform(_regression()[0][:, :5]),
        step=None,  # unfitted: s = 1, the identity map (as the logit scalers)
    ),
    EstimatorCase(
        "QuantileRecalibration",
        lambda: reg.QuantileRecalibration(n_quantiles=9),
        lambda est, bad: est.fit(*_regression(bad)),
        lambda est: est.predictive_interval(_regression()[0][:, :5]),
    ),
    EstimatorCase(
        "SplitConformalRegressor",
        lambda: conf.SplitConformalRegressor("normalized", alpha=0.2),
        lambda est, bad: est.calibrate(*_regression(bad)),
        lambda est: est.predict_interval(_regression()[0][:, :5]),
        step="calibrate",
    ),
    EstimatorCase(
        "ConformalizedQuantileRegressor",
        lambda: conf.ConformalizedQuantileRegressor(alpha=0.2, symmetric=False),
        lambda est, bad: est.calibrate(*_quantile_bands(bad)),
        lambda est: est.predict_interval(_quantile_bands()[0][:, :5]),
        step="calibrate",
    ),
]

#: Public names the estimator battery covers.
ESTIMATOR_NAMES = sorted({case.name for case in ESTIMATOR_CASES})
