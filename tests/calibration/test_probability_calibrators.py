"""Isotonic, histogram binning, beta and Dirichlet calibration against independent references.

References (issue 24 item 2): scikit-learn's ``IsotonicRegression`` and unpenalised
``LogisticRegression``, netcal's ``HistogramBinning`` / ``IsotonicRegression`` /
``BetaCalibration``, scipy's L-BFGS-B on the same objective, and plain float64 loops. Where the
algorithms coincide the fitted maps agree to 1e-6 or better; where they do not (netcal's beta
calibration stops short of the optimum) the gap is bounded and explained.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bensemble.calibration import (
    BetaCalibration,
    DirichletCalibration,
    HistogramBinningCalibration,
    IsotonicCalibration,
)

F64 = torch.float64


def _binary(n=2000, seed=0, power=2.0):
    """Scores ``p`` whose true positive rate is ``p ** power`` (overconfident for power > 1)."""
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(n, generator=g, dtype=F64) * 0.98 + 0.01
    y = (torch.rand(n, generator=g, dtype=F64) < p**power).long()
    return p, y


def _multiclass(n=1500, k=4, seed=0, sharpen=2.0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, k, generator=g, dtype=F64) * 1.5
    y = torch.multinomial(logits.softmax(-1), 1, generator=g).squeeze(1)
    shift = torch.linspace(-0.5, 0.5, k, dtype=F64)
    return (sharpen * logits + shift).softmax(-1), y


def _logistic_regression(x: np.ndarray, y: np.ndarray):
    """Unpenalised logistic regression (scikit-learn's spelling changed in 1.8)."""
    from sklearn.linear_model import LogisticRegression

    try:
        model = LogisticRegression(C=np.inf, tol=1e-12, max_iter=100_000)
        return model.fit(x, y)
    except (ValueError, TypeError):  # pragma: no cover - older scikit-learn
        model = LogisticRegression(penalty=None, tol=1e-12, max_iter=100_000)
        return model.fit(x, y)


def _normalised(q: np.ndarray) -> np.ndarray:
    total = q.sum(1, keepdims=True)
    return np.where(total > 0, q / np.where(total > 0, total, 1), 1.0 / q.shape[1])


# ================================================================================== isotonic
def _reference_loop_pava(x: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A plain float64 pool-adjacent-violators loop over the distinct sorted scores."""
    xs, inverse = np.unique(x, return_inverse=True)
    weights = np.bincount(inverse).astype(float)
    means = np.bincount(inverse, weights=t) / weights
    blocks: list[list[float]] = []  # [value, weight, count]
    for value, weight in zip(means, weights):
        blocks.append([value, weight, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            v2, w2, c2 = blocks.pop()
            v1, w1, c1 = blocks.pop()
            blocks.append([(v1 * w1 + v2 * w2) / (w1 + w2), w1 + w2, c1 + c2])
    fitted = np.concatenate([[v] * c for v, _, c in blocks])
    return xs, fitted


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_isotonic_binary_matches_sklearn_and_a_plain_loop(seed):
    from sklearn.isotonic import IsotonicRegression

    p, y = _binary(seed=seed)
    p = torch.round(p * 200) / 200  # many ties
    cal = IsotonicCalibration().fit(p, y)
    reference = IsotonicRegression(out_of_bounds="clip", y_min=0, y_max=1)
    reference.fit(p.numpy(), y.numpy())
    grid = torch.linspace(-0.1, 1.1, 2401, dtype=F64).clamp(0, 1)
    np.testing.assert_allclose(
        cal.transform(grid).numpy(), reference.predict(grid.numpy()), rtol=0, atol=1e-10
    )
    xs, fitted = _reference_loop_pava(p.numpy(), y.numpy().astype(float))
    np.testing.assert_allclose(cal.transform(torch.from_numpy(xs)).numpy(), fitted, atol=1e-10)


def test_isotonic_multiclass_matches_sklearn_one_vs_all_and_netcal():
    from sklearn.isotonic import IsotonicRegression

    netcal_binning = pytest.importorskip("netcal.binning")
    probs, y = _multiclass()
    cal = IsotonicCalibration().fit(probs, y)
    columns = []
    for k in range(probs.shape[1]):
        model = IsotonicRegression(out_of_bounds="clip", y_min=0, y_max=1)
        model.fit(probs[:, k].numpy(), (y == k).numpy().astype(float))
        columns.append(model.predict(probs[:, k].numpy()))
    expected = _normalised(np.stack(columns, 1))
    np.testing.assert_allclose(cal.transform(probs).numpy(), expected, atol=1e-10)
    netcal = netcal_binning.IsotonicRegression().fit(probs.numpy(), y.numpy())
    np.testing.assert_allclose(
        cal.transform(probs).numpy(), netcal.transform(probs.numpy()), atol=1e-10
    )


def test_isotonic_steps_are_kept_per_class_and_trimmed():
    probs, y = _multiclass(k=5, seed=3)
    cal = IsotonicCalibration().fit(probs, y)
    xs, ys = cal.thresholds_x_, cal.thresholds_y_
    assert xs.shape == ys.shape and xs.shape[0] == 5
    assert (np.diff(xs, axis=1) >= 0).all() and (np.diff(ys, axis=1) >= 0).all()
    # no interior point of a constant run survives (scikit-learn's trimming)
    from sklearn.isotonic import IsotonicRegression

    model = IsotonicRegression(out_of_bounds="clip").fit(probs[:, 2].numpy(), (y == 2).numpy())
    row = xs[2][: len(np.unique(xs[2]))]
    np.testing.assert_allclose(row, model.X_thresholds_, atol=0)


# ================================================================================= histogram
def _reference_loop_histogram(p: np.ndarray, t: np.ndarray, n_bins: int) -> np.ndarray:
    """Bin values by a loop over bins: ``(b/B, (b+1)/B]``, 0 in the first bin, empty: centre."""
    values = np.empty(n_bins)
    for b in range(n_bins):
        lower, upper = b / n_bins, (b + 1) / n_bins
        inside = (p > lower) & (p <= upper) if b > 0 else (p <= upper)
        values[b] = t[inside].mean() if inside.any() else (b + 0.5) / n_bins
    return values


@pytest.mark.parametrize("n_bins", [1, 5, 15, 40])
def test_histogram_binary_matches_a_loop_and_netcal(n_bins):
    netcal_binning = pytest.importorskip("netcal.binning")
    p, y = _binary(seed=n_bins)
    cal = HistogramBinningCalibration(n_bins).fit(p, y)
    expected = _reference_loop_histogram(p.numpy(), y.numpy().astype(float), n_bins)
    np.testing.assert_allclose(cal.bin_values_[0], expected, atol=1e-15)
    netcal = netcal_binning.HistogramBinning(bins=n_bins).fit(p.numpy(), y.numpy())
    np.testing.assert_allclose(cal.transform(p).numpy(), netcal.transform(p.numpy()), atol=1e-15)


def test_histogram_multiclass_matches_netcal_and_counts_sum_to_n():
    netcal_binning = pytest.importorskip("netcal.binning")
    probs, y = _multiclass(k=5)
    cal = HistogramBinningCalibration(12).fit(probs, y)
    assert cal.bin_counts_.sum(1).tolist() == [len(y)] * 5
    netcal = netcal_binning.HistogramBinning(bins=12).fit(probs.numpy(), y.numpy())
    np.testing.assert_allclose(
        cal.transform(probs).numpy(), netcal.transform(probs.numpy()), atol=1e-14
    )


def test_histogram_edges_follow_the_library_rule():
    p = torch.tensor([0.0, 0.25, 0.5, 0.50001, 1.0], dtype=F64)
    y = torch.tensor([0, 1, 0, 1, 1])
    cal = HistogramBinningCalibration(2).fit(p, y)  # bins [0, .5] and (.5, 1]
    torch.testing.assert_close(cal.bin_values_[0], np.array([1 / 3, 1.0]), check_dtype=False)


# ====================================================================================== beta
def _beta_features(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return np.stack([np.log(p), -np.log1p(-p)], 1)


@pytest.mark.parametrize("power", [0.5, 2.0, 3.0])
def test_beta_binary_matches_sklearn_logistic_regression(power):
    p, y = _binary(power=power)
    cal = BetaCalibration().fit(p, y)
    x = _beta_features(p.numpy())
    reference = _logistic_regression(x, y.numpy())
    assert (reference.coef_ >= 0).all()  # the constraint is inactive: the problems coincide
    np.testing.assert_allclose(cal.a_, reference.coef_[:, 0], rtol=1e-6)
    np.testing.assert_allclose(cal.b_, reference.coef_[:, 1], rtol=1e-6)
    np.testing.assert_allclose(cal.c_, reference.intercept_, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(
        cal.transform(p).numpy(), reference.predict_proba(x)[:, 1], rtol=0, atol=1e-6
    )
    assert cal.converged_


def test_beta_one_vs_all_matches_per_class_logistic_regressions():
    probs, y = _multiclass(k=3, sharpen=2.5)
    cal = BetaCalibration().fit(probs, y)
    columns = []
    for k in range(3):
        x = _beta_features(probs[:, k].numpy())
        model = _logistic_regression(x, (y == k).numpy().astype(int))
        assert (model.coef_ >= 0).all()
        columns.append(model.predict_proba(x)[:, 1])
    np.testing.assert_allclose(
        cal.transform(probs).numpy(), _normalised(np.stack(columns, 1)), atol=1e-6
    )


def test_beta_constrained_optimum_matches_scipy_with_bounds():
    """Labels independent of a decreasing score: the free optimum has b < 0; the constrained one
    (a, b >= 0) must equal scipy's bounded L-BFGS-B solution."""
    from scipy.optimize import minimize

    g = torch.Generator().manual_seed(4)
    p = torch.rand(3000, generator=g, dtype=F64) * 0.98 + 0.01
    y = (torch.rand(3000, generator=g, dtype=F64) < 0.6 - 0.3 * p).long()
    x, t = _beta_features(p.numpy()), y.numpy().astype(float)
    free = _logistic_regression(x, y.numpy())
    assert (free.coef_ < 0).any()  # the constraint binds

    def nll(theta):
        eta = x @ theta[:2] + theta[2]
        value = np.mean(np.logaddexp(0, eta) - t * eta)
        r = 1 / (1 + np.exp(-eta)) - t
        return value, np.array([np.mean(r * x[:, 0]), np.mean(r * x[:, 1]), np.mean(r)])

    bounds = [(0, None), (0, None), (None, None)]
    ref = minimize(nll, np.array([1.0, 1.0, 0.0]), jac=True, method="L-BFGS-B", bounds=bounds,
                   options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 10_000})  # fmt: skip
    cal = BetaCalibration().fit(p, y)
    ours = np.array([cal.a_[0], cal.b_[0], cal.c_[0]])
    assert nll(ours)[0] <= ref.fun + 1e-12
    np.testing.assert_allclose(ours, ref.x, atol=1e-5)
    assert min(cal.a_[0], cal.b_[0]) == 0.0


def test_beta_against_netcal_differs_only_by_netcals_early_stop():
    """netcal fits with scipy's L-BFGS-B on a finite-difference gradient and stops ~1e-5 short:
    its NLL is never below ours and its probabilities are within 1e-3."""
    netcal_scaling = pytest.importorskip("netcal.scaling")
    p, y = _binary(seed=5)
    cal = BetaCalibration().fit(p, y)
    theirs = netcal_scaling.BetaCalibration().fit(p.numpy(), y.numpy()).transform(p.numpy())
    ours = cal.transform(p).numpy()
    t = y.numpy()

    def nll(q):
        q = np.clip(q, 1e-15, 1 - 1e-15)
        return -np.mean(t * np.log(q) + (1 - t) * np.log1p(-q))

    assert nll(ours) <= nll(theirs) + 1e-9
    assert np.abs(ours - theirs).max() < 1e-3


# ================================================================================= dirichlet
def test_dirichlet_unregularised_matches_sklearn_multinomial_regression():
    probs, y = _multiclass(k=4)
    cal = DirichletCalibration().fit(probs, y)
    x = np.log(probs.numpy())
    reference = _logistic_regression(x, y.numpy())
    np.testing.assert_allclose(cal.transform(probs).numpy(), reference.predict_proba(x), atol=1e-6)
    assert cal.converged_


@pytest.mark.parametrize("lam, mu", [(0.5, 0.0), (0.0, 0.3), (1e-2, 1e-2), (5.0, 5.0)])
def test_dirichlet_odir_matches_scipy_on_the_same_objective(lam, mu):
    from scipy.optimize import minimize

    probs, y = _multiclass(k=4, seed=2)
    k, x, t = 4, np.log(probs.numpy()), y.numpy()
    one_hot = np.eye(k)[t]

    def objective(theta):
        w, b = theta[: k * k].reshape(k, k), theta[k * k :]
        z = x @ w.T + b
        z = z - z.max(1, keepdims=True)
        log_q = z - np.log(np.exp(z).sum(1, keepdims=True))
        off = w - np.diag(np.diag(w))
        value = -np.mean(log_q[np.arange(len(t)), t])
        value += lam / (k * (k - 1)) * (off**2).sum() + mu / k * (b**2).sum()
        residual = (np.exp(log_q) - one_hot) / len(t)
        grad_w = residual.T @ x + 2 * lam / (k * (k - 1)) * off
        grad_b = residual.sum(0) + 2 * mu / k * b
        return value, np.concatenate([grad_w.ravel(), grad_b])

    start = np.concatenate([np.eye(k).ravel(), np.zeros(k)])
    ref = minimize(objective, start, jac=True, method="L-BFGS-B",
                   options={"ftol": 1e-16, "gtol": 1e-12, "maxiter": 100_000})  # fmt: skip
    w, b = ref.x[: k * k].reshape(k, k), ref.x[k * k :]
    z = x @ w.T + b
    expected = np.exp(z - z.max(1, keepdims=True))
    expected /= expected.sum(1, keepdims=True)
    cal = DirichletCalibration(lam, mu).fit(probs, y)
    np.testing.assert_allclose(cal.transform(probs).numpy(), expected, atol=1e-6)
    ours = objective(np.concatenate([cal.weight_.ravel(), cal.bias_]))[0]
    assert ours <= ref.fun + 1e-10  # at least as low as scipy's optimum
    if lam >= 1 and mu >= 1:  # well-conditioned and strictly convex: the parameters agree too
        np.testing.assert_allclose(cal.weight_, w, atol=1e-5)
        np.testing.assert_allclose(cal.bias_, b, atol=1e-5)


def test_dirichlet_regularisation_shrinks_toward_a_diagonal_map():
    probs, y = _multiclass(n=300, k=5, seed=6)
    loose = DirichletCalibration().fit(probs, y)
    tight = DirichletCalibration(off_diagonal_l2=100.0, intercept_l2=100.0).fit(probs, y)

    def off(w):
        return np.abs(w - np.diag(np.diag(w))).sum()

    assert off(tight.weight_) < 0.1 * off(loose.weight_)
    assert np.abs(tight.bias_).sum() < 0.1 * np.abs(loose.bias_).sum()


def test_dirichlet_from_logits_equals_dirichlet_on_their_softmax():
    probs, y = _multiclass(k=3, seed=7)
    logits = probs.log() + 3.0  # any per-row shift
    a = DirichletCalibration(0.1, 0.1, from_logits=True).fit(logits, y).transform(logits)
    b = DirichletCalibration(0.1, 0.1).fit(probs, y).transform(probs)
    torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-9)


# ============================================================================ every calibrator
@pytest.mark.parametrize(
    "make",
    [IsotonicCalibration, HistogramBinningCalibration, BetaCalibration, DirichletCalibration],
    ids=lambda c: c.__name__,
)
def test_calibration_improves_held_out_nll_of_an_overconfident_model(make):
    from bensemble.metrics import expected_calibration_error, negative_log_likelihood

    probs, y = _multiclass(n=6000, k=4, sharpen=3.0, seed=8)
    cal = make().fit(probs[:3000], y[:3000])
    before, after = probs[3000:], cal.transform(probs[3000:])
    assert expected_calibration_error(after, y[3000:]) < 0.5 * expected_calibration_error(
        before, y[3000:]
    )
    if make is not HistogramBinningCalibration:  # histogram bins can give 0: NLL not bounded
        assert negative_log_likelihood(after, y[3000:]) < negative_log_likelihood(before, y[3000:])


def test_a_row_whose_one_vs_all_maps_all_give_zero_becomes_uniform():
    # three classes, every calibration score in the lowest bin belongs to another class
    probs = torch.tensor([[0.05, 0.9, 0.05], [0.9, 0.05, 0.05], [0.05, 0.05, 0.9]] * 4, dtype=F64)
    labels = torch.tensor([1, 0, 2] * 4)
    cal = HistogramBinningCalibration(n_bins=2).fit(probs, labels)
    q = cal.transform(torch.tensor([[0.2, 0.4, 0.4]], dtype=F64))  # every column in bin 0 -> 0
    torch.testing.assert_close(q, torch.full((1, 3), 1 / 3, dtype=F64))


def test_log_complement_is_exact_near_one():
    """``log(1 - p_k)`` from the other classes: exact where ``1 - p`` cancels to 0."""
    from bensemble.calibration._api import log_complement

    g = torch.Generator().manual_seed(10)
    z = torch.randn(200, 5, generator=g, dtype=F64)
    z[:, 0] += torch.linspace(0, 60, 200, dtype=F64)  # p_0 from moderate to 1 - 1e-26
    log_p = z.log_softmax(-1)
    expected = torch.stack(
        [torch.logsumexp(torch.cat([z[:, :k], z[:, k + 1 :]], 1), 1) for k in range(5)], 1
    ) - torch.logsumexp(z, 1, keepdim=True)
    torch.testing.assert_close(log_complement(log_p), expected, rtol=1e-12, atol=1e-12)
    assert bool(torch.isfinite(log_complement(log_p)).all())


def test_beta_from_confident_logits_keeps_the_information_of_tiny_complements():
    """Logits whose probabilities round to 1: the exact log(1 - p) still orders them, so beta
    calibration from logits fits the map a float64 logistic regression on exact features gets."""
    g = torch.Generator().manual_seed(11)
    margin = torch.empty(3000, dtype=F64).uniform_(0, 50, generator=g)
    y = (torch.rand(3000, generator=g, dtype=F64) < torch.sigmoid(margin / 5)).long()
    logits = torch.stack([torch.zeros_like(margin), margin], 1)
    cal = BetaCalibration(from_logits=True).fit(logits, y)
    x = np.stack([-np.logaddexp(0, -margin.numpy()), np.logaddexp(0, margin.numpy())], 1)
    reference = _logistic_regression(x, y.numpy())
    np.testing.assert_allclose(
        cal.transform(logits)[:, 1].numpy(), reference.predict_proba(x)[:, 1], atol=1e-6
    )


def test_dirichlet_refuses_more_classes_than_its_memory_bound():
    from bensemble.calibration.dirichlet import MAX_CLASSES

    probs = torch.full((3, MAX_CLASSES + 1), 1.0 / (MAX_CLASSES + 1), dtype=F64)
    with pytest.raises(ValueError, match="`probs` must have at most"):
        DirichletCalibration().fit(probs, torch.tensor([0, 1, 2]))
