"""Cross-checks against laplace-torch where the definitions coincide.

* Last layer, full GGN (``subset_of_weights="last_layer", hessian_structure="full"``): the GGN,
  the log marginal likelihood and the linearised logit covariance.
* K-FAC on bias-free layers (laplace-torch keeps a bias in its own Kronecker block, so only
  bias-free networks share our ``[W | b]`` factorisation) with the prior added to the Kronecker
  eigenvalues (laplace-torch's default, our ``regularization="exact"``): the log determinant of
  the posterior precision, the log marginal likelihood (classification and Gaussian regression)
  and the logit covariance.
* The evidence-tuned prior precision maximises laplace-torch's marginal likelihood.

laplace-torch is optional (``pytest.importorskip``); installed without torchvision (see the
project's notes), it does not break torchmetrics.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from bensemble.methods import LaplaceApproximation, LastLayerLaplace

laplace = pytest.importorskip("laplace")

DELTAS = (0.05, 0.7, 12.0)


def _reference(model, likelihood, structure, loader, delta, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        la = laplace.Laplace(
            model,
            likelihood,
            subset_of_weights="last_layer" if structure == "full" else "all",
            hessian_structure=structure,
            prior_precision=delta,
            **kwargs,
        )
        la.fit(loader)
    return la


def _classification(bias: bool, seed: int = 0):
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Linear(4, 6, bias=bias), nn.Tanh(), nn.Linear(6, 3, bias=bias)
    ).double()
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(50, 4, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (50,), generator=g)
    return model, x, y, DataLoader(TensorDataset(x, y), batch_size=10)


def test_last_layer_ggn_evidence_and_logit_covariance_match_laplace_torch():
    model, x, y, loader = _classification(bias=True)
    ref = _reference(model, "classification", "full", loader, 0.7)
    ours = LastLayerLaplace(model, prior_precision=0.7).fit((x, y))
    # laplace-torch orders the last layer's parameters [vec(W), b]; ours [W | b] row by row.
    index = torch.arange(21).view(3, 7)
    order = torch.cat([index[:, :6].reshape(-1), index[:, 6]])
    want = ref.H.double()  # its backend accumulates partly in float32: a float32 bound
    scale = float(want.abs().max())
    torch.testing.assert_close(ours.hessian_[order][:, order], want, rtol=1e-5, atol=1e-5 * scale)
    _, f_var = ref._glm_predictive_distribution(x[:8])
    phi = torch.cat([torch.tanh(model[0](x[:8])), torch.ones(8, 1, dtype=torch.float64)], 1)
    cov = ours.posterior_covariance_.view(3, 7, 3, 7)
    mine = torch.einsum("ij,kjlm,im->ikl", phi, cov, phi)
    torch.testing.assert_close(mine, f_var.double(), rtol=1e-5, atol=1e-9)
    # log_marginal_likelihood(delta) sets laplace-torch's prior precision: compare it last
    for delta in DELTAS:
        want = float(ref.log_marginal_likelihood(torch.tensor(delta, dtype=torch.float64)))
        assert ours.log_marginal_likelihood(delta) == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("delta", DELTAS)
def test_kfac_bias_free_evidence_and_logit_covariance_match_laplace_torch(delta):
    model, x, y, loader = _classification(bias=False)
    ref = _reference(model, "classification", "kron", loader, delta)
    ours = LaplaceApproximation(model, prior_precision=delta, damping=0.0).fit(loader)
    logdet = sum(float(torch.log(e).sum()) for e in ours._eig.values())
    assert logdet == pytest.approx(float(ref.log_det_posterior_precision), rel=1e-6)
    want = float(ref.log_marginal_likelihood(torch.tensor(delta, dtype=torch.float64)))
    assert ours.log_marginal_likelihood() == pytest.approx(want, rel=1e-6)
    _, f_var = ref._glm_predictive_distribution(x[:8])
    _, cov = _linearised_covariance(ours, x[:8])
    torch.testing.assert_close(cov, f_var.double(), rtol=1e-5, atol=1e-9)


def _linearised_covariance(la, x):
    from bensemble.methods import _kfac_linearised as glm

    chunk = glm.linearise(la.model, la.layers, la.factors_, x, la.likelihood, "test")
    return chunk.outputs, glm.output_covariance(chunk, la.factors_, la._eig)


def test_kfac_bias_free_regression_evidence_matches_laplace_torch():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(3, 5, bias=False), nn.Tanh(), nn.Linear(5, 2, bias=False))
    model = model.double()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(60, 3, generator=g, dtype=torch.float64)
    y = torch.tanh(x[:, :2]) + 0.2 * torch.randn(60, 2, generator=g, dtype=torch.float64)
    loader = DataLoader(TensorDataset(x, y), batch_size=20)
    sigma = 0.3
    ref = _reference(model, "regression", "kron", loader, 1.5, sigma_noise=sigma)
    ours = LaplaceApproximation(model, prior_precision=1.5, damping=0.0, sigma_noise=sigma)
    ours.fit(loader)
    for delta in DELTAS:
        want = float(ref.log_marginal_likelihood(torch.tensor(delta, dtype=torch.float64)))
        assert ours.log_marginal_likelihood(delta) == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("cls", [LaplaceApproximation, LastLayerLaplace], ids=["kfac", "ll"])
def test_evidence_tuned_prior_maximises_laplace_torch_evidence(cls):
    model, x, y, loader = _classification(bias=cls is LastLayerLaplace, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the untrained network may trigger the MAP warning
        ours = cls(model, damping=0.0) if cls is LaplaceApproximation else cls(model)
        ours.fit((x, y))
    structure = "kron" if cls is LaplaceApproximation else "full"
    ref = _reference(model, "classification", structure, loader, 1.0)

    def evidence(delta):
        return float(ref.log_marginal_likelihood(torch.tensor(delta, dtype=torch.float64)))

    chosen = ours.prior_precision_
    assert 1e-4 < chosen < 1e4
    for factor in (0.9, 1.1, 0.5, 2.0):
        assert evidence(chosen) >= evidence(chosen * factor) - 1e-9 * abs(evidence(chosen))
    assert math.isfinite(evidence(chosen))
