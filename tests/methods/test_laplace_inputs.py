"""Laplace checks its inputs (issue 19) and leaves the model and itself as they were.

Every bad input is a ``ValueError`` naming the argument (never a linear-algebra error); sizes
are bounded before anything is allocated; a failed fit or re-tuning keeps the previous state;
modes, hooks and grad flags come back even when an error escapes.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from bensemble.methods import LaplaceApproximation, LastLayerLaplace, _laplace_checks

APPROXIMATIONS = [
    pytest.param(LaplaceApproximation, id="kfac"),
    pytest.param(LastLayerLaplace, id="last-layer"),
]


def _classifier(seed: int = 0, n: int = 40):
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Linear(3, 6), nn.Tanh(), nn.Linear(6, 3))
    x, y = torch.randn(n, 3, generator=g), torch.randint(0, 3, (n,), generator=g)
    return model, x, y


@pytest.mark.parametrize("cls", APPROXIMATIONS)
def test_non_finite_weights_are_refused(cls):
    model, x, y = _classifier()
    with torch.no_grad():
        model[0].weight[1, 2] = float("nan")
    with pytest.raises(ValueError, match=r"`model` must have finite weights .*`0\.weight`"):
        cls(model, prior_precision=1.0).fit((x, y))


@pytest.mark.parametrize("cls", APPROXIMATIONS)
@pytest.mark.parametrize("bad", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_non_finite_inputs_are_refused(cls, bad):
    model, x, y = _classifier()
    x_bad = x.clone()
    x_bad[5, 1] = bad
    with pytest.raises(ValueError, match="`data` must be finite"):
        cls(model, prior_precision=1.0).fit((x_bad, y))
    with pytest.raises(ValueError, match="`val` must be finite"):
        cls(model).fit((x, y), val=(x_bad, y))
    la = cls(model, prior_precision=1.0).fit((x, y))
    with pytest.raises(ValueError, match="`x` must be finite"):
        la.predictive(x_bad)


def test_non_finite_regression_targets_are_refused():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 6), nn.Tanh(), nn.Linear(6, 1))
    x = torch.randn(20, 3)
    y = x[:, :1].clone()
    y[4, 0] = float("inf")
    with pytest.raises(ValueError, match="`y` must be finite"):
        LaplaceApproximation(model, prior_precision=1.0).fit((x, y))


@pytest.mark.parametrize("cls", APPROXIMATIONS)
def test_outputs_that_overflow_are_refused(cls):
    model, x, y = _classifier()
    with torch.no_grad():
        model[2].weight.fill_(3e38)  # finite weights, infinite logits
    with pytest.raises(ValueError, match="must be finite"):
        cls(model, prior_precision=1.0).fit((x, y))


@pytest.mark.parametrize("cls", APPROXIMATIONS)
def test_zero_samples_are_refused(cls):
    model, x, y = _classifier()
    with pytest.raises(ValueError, match="`data` must hold at least one sample"):
        cls(model, prior_precision=1.0).fit((x[:0], y[:0]))
    with pytest.raises(ValueError, match="at least one sample"):
        cls(model, prior_precision=1.0).fit(DataLoader(TensorDataset(x[:0], y[:0])))
    with pytest.raises(ValueError, match="`val` must hold at least one sample"):
        cls(model).fit((x, y), val=(x[:0], y[:0]))
    la = cls(model, prior_precision=1.0).fit((x, y))
    with pytest.raises(ValueError, match="`x` must"):
        la.predictive(x[:0])


@pytest.mark.parametrize("cls", APPROXIMATIONS)
def test_curvature_beyond_memory_is_refused_before_allocating(cls, monkeypatch):
    model, x, y = _classifier()
    monkeypatch.setattr(_laplace_checks, "machine_memory_bytes", lambda: 1000)
    with pytest.raises(ValueError, match="`model` must have curvature that fits in memory"):
        cls(model, prior_precision=1.0).fit((x, y))


def test_huge_layers_are_refused_without_touching_their_weights():
    """Meta-device layers: the check reads shapes only, so nothing is ever allocated."""
    wide = nn.Sequential(nn.Linear(3, 10), nn.Linear(10, 400_000, device="meta"))
    with pytest.raises(ValueError, match=r"layer `1`'s Kronecker factors"):
        LaplaceApproximation(wide, prior_precision=1.0).fit((torch.randn(4, 3), torch.randn(4, 1)))
    head = nn.Sequential(nn.Linear(3, 200_000), nn.Linear(200_000, 50, device="meta"))
    with pytest.raises(ValueError, match=r"\[P, P\] Hessian .*use LaplaceApproximation"):
        LastLayerLaplace(head, prior_precision=1.0).fit((torch.randn(4, 3), torch.zeros(4).long()))


def test_dense_covariance_beyond_memory_is_refused(monkeypatch):
    model, x, y = _classifier()
    la = LaplaceApproximation(model, prior_precision=1.0).fit((x, y))
    monkeypatch.setattr(_laplace_checks, "machine_memory_bytes", lambda: 1000)
    with pytest.raises(ValueError, match=r"dense \[P, P\] covariance"):
        la.posterior_covariance("0")


def test_a_failed_cholesky_names_the_remedy():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 4)).double()
    g = torch.Generator().manual_seed(0)
    x, y = 5 * torch.randn(30, 3, generator=g, dtype=torch.float64), torch.randint(0, 4, (30,))
    with pytest.raises(ValueError, match="raise prior_precision"):
        LastLayerLaplace(model, prior_precision=1e-300).fit((x, y))


# ----------------------------------------------------------------------------- state
def _state(la) -> dict:
    keep = ("prior_precision_", "likelihood", "prior_search_")
    return {k: getattr(la, k) for k in keep}


@pytest.mark.parametrize("cls", APPROXIMATIONS)
def test_a_failed_fit_or_tuning_keeps_the_previous_fit(cls):
    model, x, y = _classifier()
    la = cls(model, prior_precision=2.0).fit((x, y))
    before, probs = _state(la), la.predictive(x)
    x_bad = x.clone()
    x_bad[-1, 0] = float("nan")  # in the last batch: the first batches were already summed
    loader = DataLoader(TensorDataset(x_bad, y), batch_size=8)
    with pytest.raises(ValueError, match="must be finite"):
        la.fit(loader)
    assert _state(la) == before
    torch.testing.assert_close(la.predictive(x), probs)
    with pytest.raises(ValueError, match="`val` must hold at least one sample"):
        la.optimize_prior_precision(val=(x[:0], y[:0]))
    assert _state(la) == before


class _Failing(nn.Module):
    """A classifier whose forward raises on a chosen call (after its hooks have run once)."""

    def __init__(self, fail_at: int):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(3, 6), nn.Dropout(0.2), nn.Tanh())
        self.head = nn.Linear(6, 3)
        self.calls, self.fail_at = 0, fail_at

    def forward(self, x):
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError("boom")
        return self.head(self.body(x))


def _hooks(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


@pytest.mark.parametrize("cls", APPROXIMATIONS)
def test_modes_hooks_and_grad_flags_are_restored_when_an_error_escapes(cls):
    _, x, y = _classifier()
    model = _Failing(fail_at=2)
    model.train()
    model.body[1].eval()  # a mixed state must come back exactly
    model.head.bias.requires_grad_(False)
    flags = [m.training for m in model.modules()]
    requires = [p.requires_grad for p in model.parameters()]
    loader = DataLoader(TensorDataset(x, y), batch_size=10)
    with torch.no_grad():
        with pytest.raises(RuntimeError, match="boom"):
            cls(model, prior_precision=1.0).fit(loader)
        assert not torch.is_grad_enabled()
    assert [m.training for m in model.modules()] == flags
    assert [p.requires_grad for p in model.parameters()] == requires
    assert _hooks(model) == 0 and all(p.grad is None for p in model.parameters())
    model.calls, model.fail_at = 0, -1
    la = cls(model, prior_precision=1.0).fit(loader)
    model.calls, model.fail_at = 0, 2
    with pytest.raises(RuntimeError, match="boom"):
        la.predictive(DataLoader(TensorDataset(x), batch_size=10))
    assert [m.training for m in model.modules()] == flags and _hooks(model) == 0
    assert torch.is_grad_enabled() and all(p.grad is None for p in model.parameters())


def test_batches_whose_inputs_and_targets_disagree_are_refused():
    model, x, y = _classifier()
    batches = [(x[:10], y[:10]), (x[10:20], y[10:19])]
    with pytest.raises(ValueError, match="same number of samples"):
        LaplaceApproximation(model, prior_precision=1.0).fit(batches)
    with pytest.raises(ValueError, match="one class label per row"):
        LastLayerLaplace(model, prior_precision=1.0).fit(batches)


def test_sample_counts_beyond_memory_are_refused_before_drawing():
    model, x, y = _classifier()
    la = LaplaceApproximation(model, prior_precision=1.0).fit((x, y))
    for name, call in (
        ("n_models", lambda: la.sample_parameters(10**13)),
        ("n_models", lambda: la.sample_models(10**13)),
        ("n_samples", lambda: la.predictive(x, n_samples=10**13)),
    ):
        with pytest.raises(ValueError, match=rf"`{name}` must be <= [\d,]+ so that"):
            call()
    last = LastLayerLaplace(model, prior_precision=1.0).fit((x, y))
    with pytest.raises(ValueError, match=r"`n` must be <= [\d,]+ so that"):
        last.sample_members(x, 10**13)
    with pytest.raises(ValueError, match=r"`n` must be <= [\d,]+ so that"):
        last.sample_models(10**13)
