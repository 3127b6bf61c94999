"""Split conformal regression (absolute / normalized) and CQR: peers, coverage, contract."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from bensemble.conformal import ConformalizedQuantileRegressor, SplitConformalRegressor
from bensemble.datasets import make_regression_toy
from bensemble.regression import interval_coverage, mean_interval_width

F64 = torch.float64


def _members(n: int, seed: int = 0):
    """Toy data and three Gaussian members that are off: biased means, variances too small."""
    data = make_regression_toy(n, seed=seed)
    x = data.x[:, 0]
    means = torch.stack([data.mean + 0.1 * torch.sin(k * x) for k in (1.0, 2.0, 3.0)])
    variances = 0.5 * data.variance.expand(3, -1)
    return torch.stack([means, variances], -1), data.y


def _quantile_members(n: int, seed: int = 0):
    data = make_regression_toy(n, seed=seed)
    sd = data.variance.sqrt()
    band = torch.stack([data.mean - 1.2 * sd, data.mean + 1.2 * sd + 0.1], -1)  # too narrow
    return torch.stack([band, band + 0.05]), data.y


def _lookup(values):
    from sklearn.base import BaseEstimator, RegressorMixin

    class Lookup(RegressorMixin, BaseEstimator):
        def __init__(self, values=None):
            self.values = values

        def fit(self, X, y):  # noqa: N803
            return self

        @property
        def fitted_(self):  # what MAPIE's prefit check looks for
            return True

        def predict(self, X):  # noqa: N803
            return np.asarray(self.values)[np.asarray(X)[:, 0].astype(int)]

    return Lookup(values)


@pytest.mark.parametrize("score", ["absolute", "normalized"])
def test_intervals_equal_crepes(score):
    crepes = pytest.importorskip("crepes")
    p, y = _members(1000, seed=1)
    mean = p[..., 0].mean(0).numpy()
    sigma = (p[..., 1].mean(0) + p[..., 0].var(0, unbiased=False)).sqrt().numpy()
    cal, test = slice(0, 500), slice(500, 1000)
    ours = SplitConformalRegressor(score, alpha=0.1).calibrate(p[:, cal], y[cal])
    lower, upper = ours.predict_interval(p[:, test])
    sig = score == "normalized"
    reference = crepes.ConformalRegressor().fit(
        y[cal].numpy() - mean[cal], sigmas=sigma[cal] if sig else None
    )
    bounds = reference.predict_int(mean[test], sigmas=sigma[test] if sig else None, confidence=0.9)
    np.testing.assert_allclose(lower.numpy(), bounds[:, 0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(upper.numpy(), bounds[:, 1], rtol=0, atol=1e-12)


def test_absolute_intervals_and_cqr_equal_mapie():
    mapie = pytest.importorskip("mapie.regression")
    p, y = _members(1000, seed=2)
    mean = p[..., 0].mean(0).numpy()
    index = np.arange(1000)[:, None]
    cal, test = slice(0, 500), slice(500, 1000)
    reference = mapie.SplitConformalRegressor(_lookup(mean), confidence_level=0.9, prefit=True)
    reference.conformalize(index[cal], y[cal].numpy())
    _, bounds = reference.predict_interval(index[test])
    lower, upper = (
        SplitConformalRegressor(alpha=0.1).calibrate(p[:, cal], y[cal]).predict_interval(p[:, test])
    )
    np.testing.assert_allclose(lower.numpy(), bounds[:, 0, 0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(upper.numpy(), bounds[:, 1, 0], rtol=0, atol=1e-12)

    q, y = _quantile_members(1000, seed=3)
    band = q.mean(0).numpy()
    estimators = [_lookup(band[:, 0]), _lookup(band[:, 1]), _lookup(band.mean(1))]
    cqr = mapie.ConformalizedQuantileRegressor(estimators, confidence_level=0.9, prefit=True)
    cqr.conformalize(index[cal], y[cal].numpy())
    for symmetric in (True, False):
        _, bounds = cqr.predict_interval(index[test], symmetric_correction=symmetric)
        ours = ConformalizedQuantileRegressor(alpha=0.1, symmetric=symmetric)
        lower, upper = ours.calibrate(q[:, cal], y[cal]).predict_interval(q[:, test])
        np.testing.assert_allclose(lower.numpy(), bounds[:, 0, 0], rtol=0, atol=1e-12)
        np.testing.assert_allclose(upper.numpy(), bounds[:, 1, 0], rtol=0, atol=1e-12)


def _coverages(make, predictor, n_splits: int = 200, n_cal: int = 500):
    data, y = make
    n = y.shape[0]
    g = torch.Generator().manual_seed(0)
    coverages, widths = [], []
    for _ in range(n_splits):
        perm = torch.randperm(n, generator=g)
        cal, test = perm[:n_cal], perm[n_cal:]
        lower, upper = predictor.calibrate(data[:, cal], y[cal]).predict_interval(data[:, test])
        coverages.append(interval_coverage(lower, upper, y[test]))
        widths.append(mean_interval_width(lower, upper))
    return float(np.mean(coverages)), float(np.mean(widths))


@pytest.mark.parametrize(
    "name, predictor",
    [
        pytest.param("absolute", SplitConformalRegressor("absolute", alpha=0.1), id="absolute"),
        pytest.param(
            "normalized", SplitConformalRegressor("normalized", alpha=0.1), id="normalized"
        ),
        pytest.param(
            "normalized",
            SplitConformalRegressor("normalized", 0.1, spread="epistemic"),
            id="normalized-epistemic",
        ),
        pytest.param("cqr", ConformalizedQuantileRegressor(alpha=0.1), id="cqr"),
        pytest.param(
            "cqr", ConformalizedQuantileRegressor(alpha=0.1, symmetric=False), id="cqr-asymmetric"
        ),
    ],
)
def test_coverage_over_200_random_splits(name, predictor):
    """Marginal coverage >= 1 - alpha (mean over 200 splits of 500 / 1500 points, minus 0.005
    for the Monte Carlo error) and not much above 1 - alpha + 1 / (n + 1) either."""
    make = _quantile_members(2000, seed=4) if name.startswith("cqr") else _members(2000, seed=4)
    coverage, _ = _coverages(make, predictor)
    assert coverage >= 0.9 - 0.005
    assert coverage <= 0.9 + 1 / 501 + 0.01


def test_normalized_intervals_are_narrower_where_the_noise_is_smaller():
    p, y = _members(4000, seed=5)
    absolute = SplitConformalRegressor("absolute").calibrate(p[:, :2000], y[:2000])
    normalized = SplitConformalRegressor("normalized").calibrate(p[:, :2000], y[:2000])
    a_lo, a_hi = absolute.predict_interval(p[:, 2000:])
    n_lo, n_hi = normalized.predict_interval(p[:, 2000:])
    assert mean_interval_width(n_lo, n_hi) < mean_interval_width(a_lo, a_hi)
    assert float((a_hi - a_lo).std()) == pytest.approx(0.0, abs=1e-12)


def test_too_small_calibration_sets_give_infinite_intervals_with_a_warning():
    p, y = _members(20, seed=6)
    with pytest.warns(UserWarning, match="too few for alpha=0.1"):
        cp = SplitConformalRegressor(alpha=0.1).calibrate(p[:, :5], y[:5])
    lower, upper = cp.predict_interval(p[:, 5:])
    assert cp.threshold_ == float("inf") and bool(
        torch.isinf(lower).all() & torch.isinf(upper).all()
    )


def test_crossed_cqr_bands_become_empty_intervals_at_their_midpoint():
    band = torch.tensor([[[0.0, 10.0]] * 9], dtype=F64)  # far too wide: q < 0
    y = torch.linspace(4.0, 6.0, 9, dtype=F64)
    cqr = ConformalizedQuantileRegressor(alpha=0.2).calibrate(band, y)
    assert cqr.threshold_ < -5.0 + 1e-12 + 1.0
    lower, upper = cqr.predict_interval(torch.tensor([[[0.0, 1.0]]], dtype=F64))
    assert float(lower) == float(upper) == 0.5


def test_contract_of_the_inputs():
    p, y = _members(50, seed=7)
    with pytest.raises(ValueError, match="calibrate"):
        SplitConformalRegressor().predict_interval(p)
    with pytest.raises(ValueError, match="`score` must be one of 'absolute', 'normalized'"):
        SplitConformalRegressor("gamma")
    with pytest.raises(ValueError, match="`spread` must be one of"):
        SplitConformalRegressor("normalized", spread="std")
    with pytest.raises(ValueError, match="`alpha`"):
        ConformalizedQuantileRegressor(alpha=1.0)
    with pytest.raises(ValueError, match="spread > 0"):
        SplitConformalRegressor("normalized").calibrate(p[:1, :, 0], y)  # one point member
    with pytest.raises(ValueError, match="`member_quantiles` must be \\[M, N, 2\\]"):
        ConformalizedQuantileRegressor().calibrate(p[0], y)
    with pytest.raises(ValueError, match="`labels`"):
        SplitConformalRegressor().calibrate(p, y[:-1])
    bad = p.clone()
    bad[0, 3, 0] = float("nan")
    with pytest.raises(ValueError, match="`member_preds`"):
        SplitConformalRegressor().calibrate(bad, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cp = SplitConformalRegressor().calibrate(p, y)
    assert "threshold=" in repr(cp) and "score='absolute'" in repr(cp)
