"""The sweep's entries for second-order regression (joined to sweep_registry.REGISTRY).

Kinds: ``reg_member`` ``[M, N, 2]`` (mean, variance) members, ``means`` ``[M, N]`` point members,
``scores`` ``[N]`` real labels / values, ``conf`` ``[N]`` in ``[0, 1]`` (PIT values, widths).
"""

from __future__ import annotations

import functools
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bensemble import conformal as conf
from bensemble import datasets
from bensemble import regression as reg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sweep_cases import Case, _finite, _in, _tensors_in  # noqa: E402
from sweep_registry import Entry  # noqa: E402


def _interval_pair(value: Any, case: Case) -> None:
    lower, upper = value
    _tensors_in(-math.inf, math.inf)((lower, upper), case)
    assert lower.shape == upper.shape == (case.n,), f"shapes {lower.shape}, {upper.shape}"
    assert bool((lower <= upper).all()), "an interval with lower > upper"


def _conformal_pair(value: Any, case: Case) -> None:
    """Intervals ``(-inf, inf)`` are the documented answer for a too-small calibration set."""
    lower, upper = value
    assert not bool(torch.isnan(lower).any() | torch.isnan(upper).any()), "NaN bounds"
    assert lower.shape == upper.shape == (case.n,), f"shapes {lower.shape}, {upper.shape}"
    assert bool((lower <= upper).all()), "an interval with lower > upper"


def _curve(value: Any, case: Case) -> None:
    _finite(value)
    assert value.n == case.n
    observed = value.observed
    assert bool(((observed >= 0) & (observed <= 1)).all()), f"observed {observed}"
    if value.kind == "quantile":
        assert bool((observed[1:] >= observed[:-1]).all()), "a quantile curve must not decrease"


def _details(value: Any, case: Case) -> None:
    _in(0, math.inf)(value.value, case)
    assert int(value.counts.sum()) == case.n


def _centroids(value: Any, case: Case) -> None:
    _finite(value)
    assert value.ndim == 2 and value.shape[1] == case.m and value.shape[0] >= 1


def _as(x: Any) -> torch.Tensor:
    """A tensor of the same values (a list of Python floats stays float64)."""
    return x if isinstance(x, torch.Tensor) else torch.from_numpy(np.asarray(x))


def _interval_metric(fn):
    """``fn(lower, lower + width, labels)``: well-formed intervals from any lower end."""

    def call(lower, width, labels):
        lo, w = _as(lower), _as(width)
        return fn(lo, lo + w.to(lo.dtype) if lo.shape == w.shape else w, labels)

    return call


def _variance_scaling(member_preds, labels):
    return reg.VarianceScaling().fit(member_preds, labels).transform(member_preds)


def _quantile_recalibration(member_preds, labels):
    fitted = reg.QuantileRecalibration(n_quantiles=5).fit(member_preds, labels)
    return fitted.predictive_interval(member_preds, alpha=0.2)


def _conformal(score: str):
    def run(member_preds, labels):
        predictor = conf.SplitConformalRegressor(score, alpha=0.2)
        return predictor.calibrate(member_preds, labels).predict_interval(member_preds)

    return run


def _cqr(member_quantiles, labels):
    predictor = conf.ConformalizedQuantileRegressor(alpha=0.2)
    return predictor.calibrate(member_quantiles, labels).predict_interval(member_quantiles)


R, Y = "reg_member", "scores"
REGRESSION_ENTRIES: list[Entry] = [
    Entry(
        "regression_negative_log_likelihood",
        reg.regression_negative_log_likelihood,
        {"member_preds": R, "labels": Y},
        _in(-math.inf, math.inf),
    ),
    Entry(
        "regression_negative_log_likelihood[gaussian,points]",
        lambda member_preds, labels: reg.regression_negative_log_likelihood(
            member_preds, labels, predictive="gaussian"
        ),
        {"member_preds": "means", "labels": Y},
        _in(-math.inf, math.inf),
    ),
    Entry("crps", reg.crps, {"member_preds": R, "labels": Y}, _in(0, math.inf)),
    Entry("crps[points]", reg.crps, {"member_preds": "means", "labels": Y}, _in(0, math.inf)),
    Entry(
        "crps_per_sample",
        reg.crps_per_sample,
        {"member_preds": R, "labels": Y},
        _tensors_in(0, math.inf),
    ),
    Entry("sharpness", reg.sharpness, {"member_preds": R}, _in(0, math.inf)),
    Entry(
        "split_member_predictions",
        reg.split_member_predictions,
        {"member_preds": R},
        _tensors_in(-math.inf, math.inf),
    ),
    Entry(
        "predictive_interval",
        lambda member_preds: reg.predictive_interval(member_preds, 0.2),
        {"member_preds": R},
        _interval_pair,
        names=("alpha",),
    ),
    Entry(
        "predictive_interval[points]",
        lambda member_preds: reg.predictive_interval(member_preds, 0.2),
        {"member_preds": "means"},
        _interval_pair,
        names=("alpha",),
    ),
    Entry(
        "interval_coverage",
        _interval_metric(reg.interval_coverage),
        {"lower": Y, "width": "conf", "labels": Y},
        _in(0, 1),
        names=("upper",),
    ),
    Entry(
        "mean_interval_width",
        lambda lower, width: _interval_metric(lambda a, b, c: reg.mean_interval_width(a, b))(
            lower, width, None
        ),
        {"lower": Y, "width": "conf"},
        _in(0, 1),
        names=("upper",),
    ),
    Entry(
        "interval_score",
        _interval_metric(lambda a, b, c: reg.interval_score(a, b, c, 0.2)),
        {"lower": Y, "width": "conf", "labels": Y},
        _in(0, math.inf),
        names=("upper", "alpha"),
        overflows=True,  # (2 / alpha) * 1e30-sized misses exceed float32's range when returned
    ),
    Entry(
        "regression_calibration_curve",
        lambda member_preds, labels: reg.regression_calibration_curve(
            member_preds, labels, n_levels=11
        ),
        {"member_preds": R, "labels": Y},
        _curve,
        names=("n_levels",),
    ),
    Entry(
        "regression_calibration_curve[quantile,points]",
        lambda member_preds, labels: reg.regression_calibration_curve(
            member_preds, labels, n_levels=11, kind="quantile"
        ),
        {"member_preds": "means", "labels": Y},
        _curve,
        names=("n_levels",),
    ),
    Entry(
        "miscalibration_area",
        reg.miscalibration_area,
        {"member_preds": R, "labels": Y},
        _in(0, 0.5),
    ),
    Entry("pit_values", reg.pit_values, {"member_preds": R, "labels": Y}, _tensors_in(0, 1)),
    Entry(
        "calibration_curve_from_pit",
        lambda pit: reg.calibration_curve_from_pit(pit, n_levels=11),
        {"pit": "conf"},
        _curve,
        names=("n_levels",),
    ),
    Entry(
        "regression_epistemic_calibration_error",
        reg.regression_epistemic_calibration_error,
        {"member_preds": R, "labels": Y},
        _in(0, math.inf),
        names=("n_bins",),
    ),
    Entry(
        "regression_epistemic_calibration_error(return_details=True)",
        functools.partial(reg.regression_epistemic_calibration_error, return_details=True),
        {"member_preds": "means", "labels": Y},
        _details,
        names=("n_bins",),
    ),
    Entry(
        "fit_regression_bins",
        lambda member_preds: reg.fit_regression_bins(member_preds, 3),
        {"member_preds": R},
        _centroids,
        names=("n_bins",),
    ),
    Entry(
        "true_regression_epistemic_calibration_error",
        reg.true_regression_epistemic_calibration_error,
        {"member_preds": R, "true_mean": Y},
        _in(0, math.inf),
    ),
    Entry(
        "VarianceScaling.fit",
        _variance_scaling,
        {"member_preds": R, "labels": Y},
        _tensors_in(-math.inf, math.inf),
        names=("bounds",),
    ),
    Entry(
        "QuantileRecalibration.fit",
        _quantile_recalibration,
        {"member_preds": R, "labels": Y},
        _interval_pair,
    ),
    Entry(
        "SplitConformalRegressor[absolute]",
        _conformal("absolute"),
        {"member_preds": R, "labels": Y},
        _conformal_pair,
    ),
    Entry(
        "SplitConformalRegressor[normalized]",
        _conformal("normalized"),
        {"member_preds": R, "labels": Y},
        _conformal_pair,
    ),
    Entry(
        "ConformalizedQuantileRegressor",
        _cqr,
        {"member_quantiles": R, "labels": Y},
        _conformal_pair,
    ),
    Entry(
        "regression_toy_mean",
        datasets.regression_toy_mean,
        {"x": Y},
        _tensors_in(-math.inf, math.inf),
        propagates=True,
    ),
    Entry(
        "regression_toy_variance",
        datasets.regression_toy_variance,
        {"x": Y},
        _tensors_in(0, math.inf),
        propagates=True,
        overflows=True,  # (0.1 + 0.2 |x|)^2 of a 1e200-sized x exceeds float64
    ),
]
