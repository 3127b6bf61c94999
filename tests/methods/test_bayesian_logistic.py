"""Tests of the Pólya–Gamma Gibbs sampler for Bayesian logistic regression."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bensemble.datasets.toy import make_toy_gaussians
from bensemble.methods.bayesian_logistic import BayesianLogisticRegression

#: The toy problem's Bayes-optimal logistic weights: logit P(y=1|x) = -(5/3)(x1 + x2) + 0.
TRUE_COEF = torch.tensor([-5.0 / 3.0, -5.0 / 3.0, 0.0], dtype=torch.float64)
FAST = {"n_samples": 200, "burn_in": 50}


@pytest.fixture(scope="module")
def toy_fit():
    data = make_toy_gaussians(50, seed=0)
    blr = BayesianLogisticRegression(n_samples=400, burn_in=100, seed=1).fit(data.x, data.y)
    return blr, data


def _tiny_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(15, 2))
    logits = 1.5 * x[:, 0] - 1.0 * x[:, 1] + 0.3
    y = (rng.uniform(size=15) < 1.0 / (1.0 + np.exp(-logits))).astype(np.int64)
    return x, y


def _reference_rwm_logistic(x, y, prior_var, *, n_chains=200, n_steps=2500, burn=500, seed=0):
    """Random-walk Metropolis for the same posterior, many independent chains in parallel.

    Proposal: N(0, (2.38^2 / D) S) with S the inverse Hessian of the negative log posterior at
    its mode (found by Newton's method), the classical optimal scaling. Returns the kept draws
    ``[n_steps - burn, n_chains, D]`` as float64.
    """
    rng = np.random.default_rng(seed)
    design = np.column_stack([x, np.ones(len(x))])
    dim = design.shape[1]

    def log_post(beta):  # beta [C, D]
        eta = beta @ design.T
        return (y * eta - np.logaddexp(0.0, eta)).sum(axis=1) - (beta**2).sum(axis=1) / (
            2.0 * prior_var
        )

    mode = np.zeros(dim)
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-design @ mode))
        grad = design.T @ (y - p) - mode / prior_var
        hess = design.T @ (design * (p * (1 - p))[:, None]) + np.eye(dim) / prior_var
        mode = mode + np.linalg.solve(hess, grad)
    chol = np.linalg.cholesky(np.linalg.inv(hess)) * (2.38 / math.sqrt(dim))
    beta = mode + rng.normal(size=(n_chains, dim)) @ np.linalg.cholesky(np.linalg.inv(hess)).T
    current = log_post(beta)
    kept = []
    for step in range(n_steps):
        proposal = beta + rng.normal(size=beta.shape) @ chol.T
        candidate = log_post(proposal)
        accept = np.log(rng.uniform(size=n_chains)) < candidate - current
        beta = np.where(accept[:, None], proposal, beta)
        current = np.where(accept, candidate, current)
        if step >= burn:
            kept.append(beta)
    return np.stack(kept)


def _batch_means_se(draws: np.ndarray, n_batches: int) -> np.ndarray:
    """Standard error of the mean of a chain ``[S, D]`` by non-overlapping batch means."""
    usable = draws[: (draws.shape[0] // n_batches) * n_batches]
    means = usable.reshape(n_batches, -1, draws.shape[1]).mean(axis=1)
    return means.std(axis=0, ddof=1) / math.sqrt(n_batches)


def test_agrees_with_random_walk_metropolis_on_tiny_data():
    x, y = _tiny_data()
    prior_var = 2.0  # not the default, so that a variance/sd mix-up would show
    n_chains = 10
    blr = BayesianLogisticRegression(
        prior_var=prior_var, n_samples=3000, burn_in=100, n_chains=n_chains, seed=0
    ).fit(x, y)
    gibbs = blr.coef_samples_.numpy()
    rwm = _reference_rwm_logistic(x, y, prior_var)

    # Monte Carlo errors. Gibbs: batch means within each chain (draws are stored sweep by sweep,
    # chains interleaved). RWM: its chains are independent, so the spread of their means.
    per_chain = gibbs.reshape(-1, n_chains, 3)
    se_gibbs = np.sqrt(
        np.mean([_batch_means_se(per_chain[:, c], 15) ** 2 for c in range(n_chains)], axis=0)
        / n_chains
    )
    chain_means = rwm.mean(axis=0)
    se_rwm = chain_means.std(axis=0, ddof=1) / math.sqrt(rwm.shape[1])
    se = np.sqrt(se_gibbs**2 + se_rwm**2)
    assert np.all(np.abs(gibbs.mean(axis=0) - rwm.reshape(-1, 3).mean(axis=0)) < 4.0 * se)

    # Posterior sd: relative standard error of an sd estimate is ~ 1 / sqrt(2 ESS); the effective
    # sample size of each sampler is its variance over the squared standard error of its mean.
    sd_gibbs, sd_rwm = gibbs.std(axis=0), rwm.reshape(-1, 3).std(axis=0)
    ess_gibbs = sd_gibbs**2 / se_gibbs**2
    ess_rwm = sd_rwm**2 / se_rwm**2
    se_sd = np.sqrt(sd_gibbs**2 / (2 * ess_gibbs) + sd_rwm**2 / (2 * ess_rwm))
    assert np.all(np.abs(sd_gibbs - sd_rwm) < 4.0 * se_sd)
    # The posterior is far from the prior (the test has power): sds well below sqrt(prior_var).
    assert np.all(sd_rwm < 0.9 * math.sqrt(prior_var))
    # Long chains agree with each other.
    assert float(blr.rhat_.max()) < 1.02


def test_posterior_mean_approaches_analytic_weights():
    small = make_toy_gaussians(100, seed=3)
    large = make_toy_gaussians(2000, seed=4)
    settings = {"n_samples": 200, "burn_in": 50, "n_chains": 2, "seed": 0}
    fit_small = BayesianLogisticRegression(**settings).fit(small.x, small.y)
    fit_large = BayesianLogisticRegression(**settings).fit(large.x, large.y)
    # Bernstein-von Mises: for n = 2000 the posterior is ~ N(MLE, I^-1 / n) and the MLE is
    # ~ N(truth, I^-1 / n), so |posterior mean - truth| is about one posterior sd; 4 sd (the Monte
    # Carlo error of the mean adds well under 1 sd: the chains start from Laplace draws, which are
    # nearly exact at this n) is a tolerance a correct sampler essentially never misses, while the
    # posterior sd (~0.15) is small enough that a wrong posterior (a lost prior, a flipped kappa,
    # a PG draw with the wrong scale) lands far outside it.
    sd = fit_large.coef_samples_.std(dim=0)
    error_large = (fit_large.coef_mean_ - TRUE_COEF).abs()
    assert bool((error_large < 4.0 * sd).all()), (fit_large.coef_mean_, sd)
    assert float(sd.max()) < 0.25
    assert float(error_large.norm()) < float((fit_small.coef_mean_ - TRUE_COEF).norm())


def test_split_rhat_flags_disagreeing_chains():
    from bensemble.methods.bayesian_logistic import _split_rhat

    draws = torch.randn(500, 4, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert float(_split_rhat(draws).max()) < 1.02
    shifted = draws.clone()
    shifted[:, 0, 0] += 3.0  # one chain elsewhere
    rhat = _split_rhat(shifted)
    assert float(rhat[0]) > 1.3 and float(rhat[1]) < 1.02
    drifting = draws + torch.linspace(0, 4, 500, dtype=torch.float64)[:, None, None]
    assert bool((_split_rhat(drifting) > 1.3).all())  # a trend within chains (why halves)
    # Against the textbook formula on the 2C half-chains.
    halves = torch.cat([shifted[:250], shifted[250:]], dim=1)[:, :, 0].numpy()
    n = halves.shape[0]
    w = halves.var(axis=0, ddof=1).mean()
    b = n * halves.mean(axis=0).var(ddof=1)
    assert float(rhat[0]) == pytest.approx(math.sqrt(((n - 1) / n * w + b / n) / w), rel=1e-12)


def test_accuracy_on_clean_toy_data(toy_fit):
    blr, _ = toy_fit
    test = make_toy_gaussians(10_000, seed=99)
    accuracy = float((blr.predict_proba(test.x).argmax(dim=1) == test.y).double().mean())
    assert accuracy >= 0.95


def test_predict_proba_is_the_mean_of_all_members(toy_fit):
    blr, data = toy_fit
    members = blr.sample_members(data.x)
    assert members.shape == (400, 50, 2)
    torch.testing.assert_close(blr.predict_proba(data.x), members.mean(dim=0))
    torch.testing.assert_close(members.sum(dim=-1), torch.ones(400, 50, dtype=torch.float64))
    # Each member is sigmoid(x^T beta_s) for a kept draw (intercept last).
    beta = blr.coef_samples_[7]
    want = torch.sigmoid(data.x @ beta[:2] + beta[2])
    torch.testing.assert_close(members[7, :, 1], want)


def test_member_shapes_and_selection(toy_fit):
    blr, data = toy_fit
    x = data.x[:9]
    assert blr.sample_members(x, n=25).shape == (25, 9, 2)
    # Without a generator: evenly spaced draws, first and last included.
    even = blr.sample_members(x, n=3)
    torch.testing.assert_close(even[0], blr.sample_members(x)[0])
    torch.testing.assert_close(even[2], blr.sample_members(x)[-1])
    # With a generator: a random subset without replacement, reproducible.
    a = blr.sample_members(x, n=400, generator=torch.Generator().manual_seed(0))
    b = blr.sample_members(x, n=400, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(a.mean(0), blr.predict_proba(x))  # a permutation of all draws
    c = blr.sample_members(x, n=10, generator=torch.Generator().manual_seed(1))
    assert not torch.equal(c, blr.sample_members(x, n=10, generator=torch.Generator()))
    with pytest.raises(ValueError, match="at most the number of kept draws"):
        blr.sample_members(x, n=401)


def test_coherence_of_members(toy_fit):
    blr, data = toy_fit
    rows = torch.tensor([4, 0, 31, 17])
    full = blr.sample_members(data.x, n=30, generator=torch.Generator().manual_seed(5))
    again = blr.sample_members(data.x, n=30, generator=torch.Generator().manual_seed(5))
    subset = blr.sample_members(data.x[rows], n=30, generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(full, again)
    torch.testing.assert_close(subset, full[:, rows])


def test_determinism_under_fixed_generator():
    data = make_toy_gaussians(30, seed=2)
    a = BayesianLogisticRegression(**FAST, seed=4).fit(data.x, data.y).coef_samples_
    b = BayesianLogisticRegression(**FAST, seed=4).fit(data.x, data.y).coef_samples_
    gen = torch.Generator().manual_seed(4)
    c = BayesianLogisticRegression(**FAST, generator=gen).fit(data.x, data.y).coef_samples_
    d = BayesianLogisticRegression(**FAST, seed=5).fit(data.x, data.y).coef_samples_
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(a, c)
    assert not torch.equal(a, d)
    # Numpy inputs give the same chain as tensors.
    e = BayesianLogisticRegression(**FAST, seed=4).fit(data.x.numpy(), data.y.numpy())
    torch.testing.assert_close(a, e.coef_samples_)


def test_options_shape_the_draws():
    data = make_toy_gaussians(30, seed=2)
    no_intercept = BayesianLogisticRegression(**FAST, fit_intercept=False, seed=0)
    no_intercept.fit(data.x, data.y)
    assert no_intercept.coef_samples_.shape == (200, 2)
    assert no_intercept.predict_proba(data.x).shape == (30, 2)
    thinned = BayesianLogisticRegression(n_samples=7, burn_in=3, thin=2, n_chains=3, seed=0)
    thinned.fit(data.x, data.y)
    assert thinned.coef_samples_.shape == (7, 3)
    assert thinned.coef_mean_.shape == (3,)
    single = BayesianLogisticRegression(**FAST, n_chains=1, seed=0).fit(data.x, data.y)
    assert single.rhat_.shape == (3,) and bool(torch.isfinite(single.rhat_).all())


@pytest.mark.parametrize(
    "kwargs, match",
    [
        pytest.param({"prior_var": 0.0}, "`prior_var`", id="prior_var"),
        pytest.param({"n_samples": 0}, "`n_samples`", id="n_samples"),
        pytest.param({"burn_in": -1}, "`burn_in`", id="burn_in"),
        pytest.param({"thin": 1.5}, "`thin`", id="thin"),
        pytest.param({"n_chains": 0}, "`n_chains`", id="n_chains"),
        pytest.param({"fit_intercept": 1}, "`fit_intercept`", id="fit_intercept"),
        pytest.param({"seed": 1, "generator": torch.Generator()}, "not both", id="both"),
        pytest.param({"seed": -3}, "`seed`", id="seed"),
    ],
)
def test_bad_hyper_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BayesianLogisticRegression(**kwargs)


@pytest.mark.parametrize(
    "x, y, match",
    [
        pytest.param(torch.zeros(5), torch.zeros(5, dtype=torch.long), "`X` must be 2-D", id="1d"),
        pytest.param(torch.zeros(5, 2), torch.zeros(5), "integer dtype", id="float-labels"),
        pytest.param(torch.zeros(5, 2), torch.full((5,), 2), r"\[0, 1\]", id="label-2"),
        pytest.param(torch.zeros(5, 2), torch.zeros(4, dtype=torch.long), "same number", id="len"),
        pytest.param(
            torch.full((5, 2), float("inf")), torch.zeros(5, dtype=torch.long), "finite", id="inf"
        ),
    ],
)
def test_bad_fit_input(x, y, match):
    with pytest.raises(ValueError, match=match):
        BayesianLogisticRegression(**FAST).fit(x, y)


def test_prediction_input_checks(toy_fit):
    blr, _ = toy_fit
    with pytest.raises(ValueError, match="not fitted"):
        BayesianLogisticRegression().predict_proba(torch.zeros(3, 2))
    with pytest.raises(ValueError, match="2 features"):
        blr.predict_proba(torch.zeros(3, 3))
    with pytest.raises(ValueError, match="`n`"):
        blr.sample_members(torch.zeros(3, 2), n=0)
    with pytest.raises(ValueError, match="`generator`"):
        blr.sample_members(torch.zeros(3, 2), n=2, generator=0)
