"""Laplace defaults a user can act on (issue 20, item 1), for K-FAC and last-layer Laplace.

The likelihood is read off the targets; the prior precision is tuned (held-out NLL with
validation data, else the evidence, with a warning when that is worse than the network) and
reported; ``n`` is the number of training points seen, whatever the container; ``predictive``
takes what ``Ensemble.predict_*`` takes; sampling is reproducible by default.
"""

from __future__ import annotations

import math
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from bensemble.core import Ensemble
from bensemble.methods import LaplaceApproximation, LastLayerLaplace
from bensemble.methods.deep_ensemble import train_model
from bensemble.methods.mlp import make_mlp
from bensemble.uncertainty import decompose_classification_uncertainty

APPROXIMATIONS = [
    pytest.param(LaplaceApproximation, id="kfac"),
    pytest.param(LastLayerLaplace, id="last-layer"),
]


@pytest.fixture(scope="module")
def digits():
    """A smaller version of the demo's digits MLP (one hidden layer of 32, 60 full-batch Adam
    steps, no weight decay) on 60% of scikit-learn's digits, 20% validation, 20% test.
    ``benchmarks/laplace_digits.py`` measures the demo's own network."""
    data = load_digits()
    x = torch.tensor(data.data / 16.0, dtype=torch.float32)
    y = torch.tensor(data.target, dtype=torch.int64)
    train, rest = train_test_split(
        np.arange(len(y)), test_size=0.4, random_state=0, stratify=data.target
    )
    val, test = train_test_split(rest, test_size=0.5, random_state=0, stratify=data.target[rest])
    torch.manual_seed(0)
    net = train_model(
        make_mlp(64, 10, (32,)),
        (x[train], y[train]),
        epochs=60,
        batch_size=len(train),
        optimizer=lambda params: torch.optim.Adam(params, lr=1e-2),
        seed=0,
    )
    noise = torch.rand(len(test), 64, generator=torch.Generator().manual_seed(1))
    return SimpleNamespace(
        net=net, train=(x[train], y[train]), val=(x[val], y[val]), test=(x[test], y[test]),
        noise=noise,
    )  # fmt: skip


def _nll(probs: torch.Tensor, labels: torch.Tensor) -> float:
    return float(-torch.log(probs.double()[torch.arange(len(labels)), labels]).mean())


def _members(la, x: torch.Tensor, n: int = 30) -> torch.Tensor:
    if isinstance(la, LastLayerLaplace):
        return la.sample_members(x, n)
    return Ensemble.from_posterior(la, n_members=n).predict_member_probs(x).double()


def _mean_eu(members: torch.Tensor) -> float:
    return float(decompose_classification_uncertainty(members)[2].mean())


# ----------------------------------------------------------------------------- helps
@pytest.mark.parametrize("cls", APPROXIMATIONS)
def test_validation_tuned_laplace_is_no_worse_than_the_network_and_sees_noise(digits, cls):
    x_test, y_test = digits.test
    with torch.no_grad():
        map_nll = _nll(torch.softmax(digits.net(x_test), -1), y_test)
    la = cls(digits.net).fit(digits.train, val=digits.val)
    assert la.prior_search_.method == "held-out NLL"
    assert _nll(la.predictive(x_test), y_test) <= map_nll + 0.02
    members_in = _members(la, x_test)
    assert _nll(members_in.mean(0), y_test) <= map_nll + 0.02
    assert _mean_eu(_members(la, digits.noise)) >= 1.25 * _mean_eu(members_in)


def test_evidence_alone_warns_when_the_network_ignored_the_prior(digits):
    """Trained without weight decay, the evidence picks a prior that the network never had."""
    x_test, y_test = digits.test
    with pytest.warns(UserWarning, match="Pass validation data"):
        la = LaplaceApproximation(digits.net).fit(digits.train)
    search = la.prior_search_
    assert search.method == "evidence" and search.laplace_nll > search.map_nll + 0.02
    with torch.no_grad():
        map_nll = _nll(torch.softmax(digits.net(x_test), -1), y_test)
    assert _nll(la.predictive(x_test), y_test) > map_nll + 0.02  # and the warning is right


def test_evidence_does_not_warn_for_a_map_of_the_prior():
    """A logistic regression trained to the MAP of N(0, 1/delta) with the evidence's delta."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, 3, generator=g, dtype=torch.float64)
    y = (x @ torch.tensor([1.5, -1.0, 0.5], dtype=torch.float64) > 0).long()
    y[:30] = 1 - y[:30]
    model = nn.Linear(3, 2).double()
    delta = 1.0
    for _ in range(3):  # MAP at delta, then delta from the evidence, until they agree
        opt = torch.optim.LBFGS(model.parameters(), max_iter=200, line_search_fn="strong_wolfe")

        def closure(opt=opt, delta=delta):
            opt.zero_grad()
            theta = torch.cat([model.weight.reshape(-1), model.bias])
            loss = nn.functional.cross_entropy(model(x), y, reduction="sum")
            loss = loss + 0.5 * delta * (theta**2).sum()
            loss.backward()
            return loss

        opt.step(closure)
        delta = LaplaceApproximation(model, damping=0.0).fit((x, y)).prior_precision_
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        la = LaplaceApproximation(model, damping=0.0).fit((x, y))
    assert la.prior_search_.laplace_nll <= la.prior_search_.map_nll + 0.02


# ----------------------------------------------------------------------------- tuning
def _toy_classifier(seed: int = 0, n: int = 120):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    y = (x[:, 0] + x[:, 1] ** 2 > 0.5).long() + (x[:, 2] > 1).long()
    model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 3))
    opt = torch.optim.Adam(model.parameters(), lr=0.03)
    for _ in range(150):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x[:80]), y[:80]).backward()
        opt.step()
    return model, (x[:80], y[:80]), (x[80:], y[80:])


@pytest.mark.parametrize("cls", APPROXIMATIONS)
def test_held_out_curve_is_the_nll_of_predictive_at_each_grid_value(cls):
    model, train, val = _toy_classifier()
    la = cls(model, n_prior_grid=9).fit(train, val=val)
    search = la.prior_search_
    assert search.n_points == 40 and search.grid.shape == search.values.shape == (9,)
    best = int(np.argmin(search.values))
    assert la.prior_precision_ == pytest.approx(search.grid[best], rel=1e-12)
    for g in (0, best, 8):
        fixed = cls(model, prior_precision=float(search.grid[g])).fit(train)
        assert _nll(fixed.predictive(val[0]), val[1]) == pytest.approx(search.values[g], rel=1e-9)
    with torch.no_grad():
        assert search.map_nll == pytest.approx(_nll(torch.softmax(model(val[0]), -1), val[1]))
    assert f"prior_precision_={la.prior_precision_:.4g} (held-out NLL on 40 points)" in repr(la)


def test_kfac_evidence_is_maximised_and_reported():
    model, train, _ = _toy_classifier()
    with pytest.warns(UserWarning, match="Pass validation data"):  # trained without a prior
        la = LaplaceApproximation(model).fit(train)
    chosen = la.prior_precision_
    assert la.prior_search_.method == "evidence" and "(evidence)" in repr(la)
    fine = np.exp(np.linspace(math.log(chosen) - 2, math.log(chosen) + 2, 201))
    best = max(la.log_marginal_likelihood(float(d)) for d in fine)
    assert la.log_marginal_likelihood() >= best - 1e-7
    assert la.log_marginal_likelihood(chosen * 1.5) < la.log_marginal_likelihood()


@pytest.mark.parametrize("cls", APPROXIMATIONS)
def test_fixed_prior_is_kept_and_can_be_retuned(cls):
    model, train, val = _toy_classifier()
    la = cls(model, prior_precision=2.0).fit(train)
    assert la.prior_precision_ == 2.0 and la.prior_search_.method == "fixed"
    assert "prior_precision_=2 (fixed)" in repr(la)
    with pytest.raises(ValueError, match="`val` tunes the prior precision"):
        cls(model, prior_precision=2.0).fit(train, val=val)
    chosen = la.optimize_prior_precision(val=val)
    assert la.prior_precision_ == chosen and la.prior_search_.method == "held-out NLL"
    assert _nll(la.predictive(val[0]), val[1]) == pytest.approx(la.prior_search_.laplace_nll)


# ----------------------------------------------------------------------------- likelihood
def test_kfac_reads_the_likelihood_off_the_targets():
    model, train, _ = _toy_classifier()
    assert LaplaceApproximation(model, prior_precision=1.0).fit(train).likelihood == (
        "classification"
    )
    reg = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    x = torch.randn(30, 4)
    assert LaplaceApproximation(reg).fit((x, x[:, :2] * 2)).likelihood == "regression"
    one = nn.Linear(4, 1)
    assert LaplaceApproximation(one, prior_precision=1.0).fit((x, x[:, 0])).likelihood == (
        "regression"
    )


def test_likelihood_messages_name_the_value_to_pass():
    model, (x, y), _ = _toy_classifier()
    with pytest.raises(ValueError, match="pass likelihood='classification'"):
        LaplaceApproximation(model, "regression").fit((x, y))
    with pytest.raises(ValueError, match="need likelihood='regression'"):
        LaplaceApproximation(model, "classification").fit((x, torch.randn(80, 3)))
    with pytest.raises(ValueError, match="likelihood='classification'.*likelihood='regression'"):
        LaplaceApproximation(nn.Linear(4, 1)).fit((x, y))  # labels for one output
    with pytest.raises(ValueError, match="use LaplaceApproximation"):
        LastLayerLaplace(model).fit((x, torch.randn(80, 3)))
    with pytest.raises(ValueError, match="use LaplaceApproximation"):
        LastLayerLaplace(model, likelihood="regression")


# ----------------------------------------------------------------------------- data size
def test_tuple_and_dataloader_of_the_same_data_give_the_same_posterior():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 6), nn.Tanh(), nn.Linear(6, 2))
    x, y = torch.randn(1100, 3), torch.randint(0, 2, (1100,))
    a = LaplaceApproximation(model, prior_precision=1.0).fit((x, y))
    b = LaplaceApproximation(model, prior_precision=1.0)
    b.compute_curvature(DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True))
    assert a.dataset_size == b.dataset_size == 1100
    for name in a.factors_:
        torch.testing.assert_close(a._eig[name], b._eig[name], rtol=1e-5, atol=1e-8)


def test_num_samples_is_deprecated_and_counts_the_points_seen():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 6), nn.Tanh(), nn.Linear(6, 2))
    x, y = torch.randn(50, 3), torch.randint(0, 2, (50,))
    sizes = []
    for data in ((x, y), DataLoader(TensorDataset(x, y), batch_size=8)):
        la = LaplaceApproximation(model, "classification", prior_precision=1.0)
        with pytest.warns(FutureWarning, match="`num_samples` is deprecated"):
            la.compute_curvature(data, num_samples=20)
        sizes.append(la.dataset_size)
    assert sizes == [20, 20]


# ----------------------------------------------------------------------------- inputs
def test_kfac_predictive_takes_the_inputs_of_ensemble_predict():
    model, train, (x, y) = _toy_classifier()
    la = LaplaceApproximation(model, prior_precision=1.0).fit(train)
    want = la.predictive(x)
    loader = DataLoader(TensorDataset(x, y), batch_size=7)
    for form in (x.numpy(), loader, DataLoader(TensorDataset(x), batch_size=9), list(x.split(5))):
        torch.testing.assert_close(la.predictive(form), want, rtol=1e-6, atol=1e-9)
    sampled = la.predictive(x, n_samples=5)
    torch.testing.assert_close(la.predictive(loader, n_samples=5), sampled, rtol=1e-6, atol=1e-9)
    reg = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    xr = torch.randn(40, 4)
    lr = LaplaceApproximation(reg).fit((xr, xr[:, :1]))
    mean, var = lr.predictive(DataLoader(TensorDataset(xr, xr[:, :1]), batch_size=16))
    torch.testing.assert_close((mean, var), lr.predictive(xr), rtol=1e-6, atol=1e-9)


def test_last_layer_predictive_and_members_take_loaders():
    model, train, (x, y) = _toy_classifier()
    la = LastLayerLaplace(model, prior_precision=1.0).fit(train)
    loader = DataLoader(TensorDataset(x, y), batch_size=7)
    torch.testing.assert_close(la.predictive(loader), la.predictive(x))
    torch.testing.assert_close(la.predictive(x.numpy()), la.predictive(x))
    torch.testing.assert_close(la.sample_members(loader, 4), la.sample_members(x, 4))


# ----------------------------------------------------------------------------- randomness
@pytest.mark.parametrize("cls", APPROXIMATIONS)
def test_identical_sampling_calls_agree_and_seed_none_opts_out(cls):
    model, train, (x, _) = _toy_classifier()
    la = cls(model, prior_precision=1.0).fit(train)
    first = [m(x) for m in la.sample_models(3)]
    second = [m(x) for m in la.sample_models(3)]
    torch.testing.assert_close(first, second)
    fresh = cls(model, prior_precision=1.0, seed=None).fit(train)
    torch.manual_seed(1)
    a = fresh.sample_models(1)[0](x)
    torch.manual_seed(2)
    assert not torch.equal(a, fresh.sample_models(1)[0](x))
    other = cls(model, prior_precision=1.0, seed=7).fit(train)
    assert not torch.equal(first[0], other.sample_models(3)[0](x))
