"""MCDropoutEnsembler (bensemble 0.2 compatibility)."""

import pytest
import torch
from torch import nn

from bensemble.core import Ensemble, StochasticMembers
from bensemble.diversity import MCDropoutEnsembler
from bensemble.layers import DropConnectLinear


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(4, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.AlphaDropout(0.3), nn.Linear(16, 3)
    ).eval()


def test_build_ensemble_uses_dropout_only() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), DropConnectLinear(8, 3)).eval()
    ens = MCDropoutEnsembler(model).build_ensemble(num_samples=12)
    assert isinstance(ens, Ensemble) and isinstance(ens.members, StochasticMembers)
    assert ens.members.kinds == ("dropout",) and ens.num_members == 12
    assert ens.members.mask == "per_pass"


def test_build_ensemble_is_reproducible_and_varies() -> None:
    model = _model()
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(1))
    a = MCDropoutEnsembler(model).build_ensemble(8, generator=torch.Generator().manual_seed(2))
    b = MCDropoutEnsembler(model).build_ensemble(8, generator=torch.Generator().manual_seed(2))
    probs = a.predict_member_probs(x)
    assert torch.equal(probs, b.predict_member_probs(x))
    assert float(probs.std(0).min()) > 0  # AlphaDropout is switched on too
    per_sample = MCDropoutEnsembler(model).build_ensemble(8, mask="per_sample")
    assert per_sample.members.mask == "per_sample"


def test_model_without_dropout_is_an_error() -> None:
    model = nn.Sequential(nn.Linear(4, 8), DropConnectLinear(8, 3))
    # functional dropout can only be seen in a forward pass: the first prediction refuses it
    ens = MCDropoutEnsembler(model).build_ensemble()
    with pytest.raises(ValueError, match="mode='dropout'.*drew no noise"):
        ens.predict_proba(torch.randn(3, 4))
    with pytest.raises(ValueError, match="MCDropoutEnsembler: `model` must be a torch.nn.Module"):
        MCDropoutEnsembler(lambda x: x)
