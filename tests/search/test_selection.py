"""Forward selection on cached predictions equals brute force; loaders and NaN handling."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from bensemble.search.selection import (
    classification_nll_criterion,
    forward_select,
    regression_mse_criterion,
    select_on_predictions,
)


def _pool(n=8, d=4, k=3, seed=0):
    torch.manual_seed(seed)
    return [nn.Sequential(nn.Linear(d, 6), nn.Tanh(), nn.Linear(6, k)) for _ in range(n)]


def _data(n=90, d=4, k=3, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g), torch.randint(0, k, (n,), generator=g)


# float32 forward passes of these networks (<= 6 terms per dot product, |terms| <= ~3) made at
# different batch sizes or on other CPU kernels differ by ~n eps32 sum|terms| ~ 1e-6 per logit;
# the NLL / MSE move by about as much, relative to values ~1: a float32 bound, not 1e-10.
F32_REL = 1e-5


def _reference_loop_nll(members, x, y) -> float:
    """Plain float64 loop: mean over samples of -log of the members' mean softmax probability."""
    total = 0.0
    with torch.no_grad():
        probs = [torch.softmax(m(x).double(), dim=-1) for m in members]
    for i in range(x.shape[0]):
        p = sum(float(pr[i, y[i]]) for pr in probs) / len(members)
        total += -math.log(max(p, 1e-12))
    return total / x.shape[0]


def _brute_force(pool, x, y, size, score):
    chosen = []
    for _ in range(size):
        best, best_score = None, math.inf
        for i, m in enumerate(pool):
            if i in chosen:
                continue
            s = score([pool[j] for j in chosen] + [m], x, y)
            if s < best_score:
                best, best_score = i, s
        chosen.append(best)
    return chosen


def test_cached_selection_equals_brute_force_criterion_values() -> None:
    pool, (x, y) = _pool(), _data()
    loader = DataLoader(TensorDataset(x, y), batch_size=32)
    expected = _brute_force(pool, x, y, 4, _reference_loop_nll)
    chosen = forward_select(pool, loader, 4, criterion=classification_nll_criterion)
    assert [pool.index(m) for m in chosen] == expected
    # the criterion values the cache computes equal the reference loop's
    for size in range(1, 5):
        members = [pool[i] for i in expected[:size]]
        value = classification_nll_criterion(members, loader, None)
        assert value == pytest.approx(_reference_loop_nll(members, x, y), rel=F32_REL)
    # the generic (one call per candidate) path agrees
    generic = forward_select(pool, loader, 4, None, lambda m, dl, dev: _score_via_loader(m, dl))
    assert [pool.index(m) for m in generic] == expected


def _score_via_loader(members, batches):
    xs, ys = zip(*batches)
    return _reference_loop_nll(members, torch.cat(xs), torch.cat(ys))


def test_shuffled_and_unshuffled_loaders_select_the_same_members() -> None:
    pool, (x, y) = _pool(n=10), _data(n=120)
    plain = DataLoader(TensorDataset(x, y), batch_size=16)
    torch.manual_seed(5)
    shuffled = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
    a = forward_select(pool, plain, 5, criterion=classification_nll_criterion)
    b = forward_select(pool, shuffled, 5, criterion=classification_nll_criterion)
    assert [pool.index(m) for m in a] == [pool.index(m) for m in b]
    assert classification_nll_criterion(a, shuffled, None) == pytest.approx(
        classification_nll_criterion(a, plain, None), rel=F32_REL
    )


def test_regression_mse_matches_reference_and_never_broadcasts() -> None:
    torch.manual_seed(0)
    pool = [nn.Linear(3, 1) for _ in range(6)]
    x = torch.randn(50, 3)
    y = x.sum(1)  # [N] targets for [N, 1] outputs: compared row by row, not broadcast
    loader = DataLoader(TensorDataset(x, y), batch_size=7, shuffle=True)

    def ref(members, xx, yy):
        with torch.no_grad():
            mean = torch.stack([m(xx)[:, 0].double() for m in members]).mean(0)
        return float(((mean - yy.double()) ** 2).mean())

    expected = _brute_force(pool, x, y, 3, ref)
    chosen = forward_select(pool, loader, 3, criterion=regression_mse_criterion)
    assert [pool.index(m) for m in chosen] == expected
    assert regression_mse_criterion(chosen, loader) == pytest.approx(ref(chosen, x, y), rel=F32_REL)
    with pytest.raises(ValueError, match="one value per model output"):
        regression_mse_criterion(chosen, [(x, torch.randn(50, 2))])


class _NaNNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        return self.lin(x) * float("nan")


def test_nan_scores_rank_last_with_a_warning() -> None:
    pool, (x, y) = [_NaNNet(), *_pool(n=3)], _data()
    with pytest.warns(RuntimeWarning, match="scored NaN"):
        chosen = forward_select(pool, [(x, y)], 3, criterion=classification_nll_criterion)
    assert pool[0] not in chosen
    with pytest.raises(ValueError, match="NaN for every remaining candidate"):
        forward_select([_NaNNet()], [(x, y)], 1)


class _Pinned(nn.Linear):
    """Fails if anyone tries to move it."""

    def to(self, *args, **kwargs):  # pragma: no cover - a failure path
        raise AssertionError("the caller's model was moved")

    cuda = cpu = to


def test_models_are_not_moved_and_modes_restored() -> None:
    torch.manual_seed(0)
    pool = [_Pinned(4, 3) for _ in range(3)]
    pool[1].eval()
    forward_select(pool, [_data()], 2, device="cpu")
    assert pool[0].training and not pool[1].training


def test_select_on_predictions_and_argument_errors() -> None:
    probs = torch.softmax(torch.randn(5, 20, 3, generator=torch.Generator().manual_seed(0)), -1)
    labels = torch.randint(0, 3, (20,), generator=torch.Generator().manual_seed(1))
    chosen = select_on_predictions(probs, labels, 3, classification_nll_criterion)
    assert len(set(chosen)) == 3
    with pytest.raises(ValueError, match="`ensemble_size` must be at most the pool size"):
        select_on_predictions(probs, labels, 6, classification_nll_criterion)
    with pytest.raises(ValueError, match="`ensemble_size` must be at most the pool size"):
        forward_select(_pool(n=2), [_data()], 3)
    with pytest.raises(ValueError, match="labels must lie in"):
        select_on_predictions(probs, labels + 5, 2, classification_nll_criterion)


def test_select_on_predictions_takes_numpy_and_checks_its_inputs() -> None:
    import numpy as np

    preds = torch.softmax(torch.randn(4, 20, 3, generator=torch.Generator().manual_seed(0)), -1)
    y = torch.arange(20) % 3
    chosen = select_on_predictions(preds, y, 2, classification_nll_criterion)
    assert (
        select_on_predictions(preds.numpy(), y.numpy(), 2, classification_nll_criterion) == chosen
    )
    with pytest.raises(ValueError, match="`criterion` must be a CachedCriterion"):
        select_on_predictions(preds, y, 2, lambda members, loader, device: 0.0)
    with pytest.raises(ValueError, match="`member_preds` must be non-empty"):
        select_on_predictions(np.zeros((0, 20, 3)), y, 1, classification_nll_criterion)
    with pytest.raises(ValueError, match="`targets` must have one entry per prediction"):
        select_on_predictions(preds, y[:5], 1, classification_nll_criterion)
    with pytest.raises(ValueError, match="`targets` must be finite"):
        select_on_predictions(
            preds[..., :1], torch.full((20,), float("nan")), 1, regression_mse_criterion
        )
