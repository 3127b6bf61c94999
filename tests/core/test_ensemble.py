"""The Ensemble: constructors, predictions, persistence, scikit-learn members."""

import io

import numpy as np
import pytest
import torch
from sklearn.ensemble import BaggingClassifier, ExtraTreesClassifier, RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.neighbors import KNeighborsClassifier
from torch import nn

import bensemble
from bensemble.core import (
    Ensemble,
    ExplicitMembers,
    KLProvider,
    MemberSource,
    PosteriorSource,
    Predictor,
    SklearnMembers,
    StochasticMembers,
)
from bensemble.core.ensemble import Ensemble as EnsembleOldPath
from bensemble.core.member import MemberAdapter
from bensemble.core.types import MemberPredictions, Predictions
from bensemble.layers import DropConnectLinear


def _mlp(seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))


def _x(n: int = 10) -> torch.Tensor:
    return torch.randn(n, 4, generator=torch.Generator().manual_seed(99))


def _median(preds: torch.Tensor) -> torch.Tensor:
    """A module-level combiner (picklable)."""
    return preds.median(dim=0).values


# ---------------------------------------------------------------------------- predictions
def test_from_models_predictions() -> None:
    models = [_mlp(s) for s in range(4)]
    ens = Ensemble.from_models(models, packed=False)  # bensemble 0.2's loop, bit for bit
    x = _x()
    members = ens.predict_members(x)
    reference = torch.stack([m(x) for m in models]).detach()
    torch.testing.assert_close(members, reference, rtol=0, atol=0)
    torch.testing.assert_close(ens(x), reference.mean(0))  # 0.2's forward: mean of raw outputs
    torch.testing.assert_close(ens.predict_member_probs(x), reference.softmax(-1))
    bma = reference.softmax(-1).mean(0)
    torch.testing.assert_close(ens.predict_proba(x), bma)
    # the model average is not the softmax of the mean logits
    assert not torch.allclose(bma, reference.mean(0).softmax(-1), atol=1e-4)
    assert ens.num_members == 4 and ens.member_modules == models
    assert ens.output_kind == "logits"
    with ens.sample_masks():  # fixed members: a no-op context
        torch.testing.assert_close(ens.predict_members(x), members, rtol=0, atol=0)


def test_probability_members_are_not_softmaxed_again() -> None:
    models = [nn.Sequential(_mlp(s), nn.Softmax(dim=-1)) for s in range(3)]
    ens = Ensemble.from_models(models, output_kind="probs")
    x = _x()
    torch.testing.assert_close(ens.predict_member_probs(x), ens.predict_members(x))
    torch.testing.assert_close(ens.predict_proba(x).sum(-1), torch.ones(10))


def test_custom_combiner() -> None:
    ens = Ensemble.from_models([_mlp(s) for s in range(5)])
    ens.combiner = _median
    x = _x()
    torch.testing.assert_close(ens(x), ens.predict_members(x).median(0).values)


def test_list_is_wrapped_and_bad_members_rejected() -> None:
    ens = Ensemble([_mlp(0), _mlp(1)])
    assert isinstance(ens.members, ExplicitMembers)
    with pytest.raises(ValueError, match="Ensemble: `members` must be a MemberAdapter"):
        Ensemble(members=42)
    with pytest.raises(ValueError, match="Ensemble: `combiner` must be callable"):
        Ensemble([_mlp(0)], combiner="mean")


def test_modules_is_still_the_nn_module_method() -> None:
    models = [_mlp(s) for s in range(2)]
    ens = Ensemble.from_models(models)
    assert type(ens).modules is nn.Module.modules
    modules = list(ens.modules())
    assert modules[0] is ens and all(m in modules for m in models)
    assert ens.member_modules == models


def test_import_paths_of_bensemble_02() -> None:
    assert EnsembleOldPath is Ensemble and bensemble.Ensemble is Ensemble
    assert bensemble.StochasticMembers is StochasticMembers
    assert bensemble.ExplicitMembers is ExplicitMembers
    assert issubclass(StochasticMembers, MemberAdapter)
    assert MemberPredictions is torch.Tensor and Predictions is torch.Tensor
    from bensemble.diversity.dropout import MCDropoutEnsembler

    assert bensemble.MCDropoutEnsembler is MCDropoutEnsembler


def test_protocols_are_runtime_checkable() -> None:
    class Source:
        def sample_models(self, n_models: int) -> list[nn.Module]:
            return [_mlp(i) for i in range(n_models)]

    class Sampler:
        def sample_members(self, x, n, generator=None):
            return torch.full((n, len(x), 2), 0.5)

    assert isinstance(Source(), PosteriorSource) and not isinstance(Source(), MemberSource)
    assert isinstance(Sampler(), MemberSource)
    assert isinstance(_mlp(0), Predictor)
    assert isinstance(DropConnectLinear(2, 2), Predictor)
    assert not isinstance(_mlp(0), KLProvider)


# ---------------------------------------------------------------------------- from_stochastic
def test_from_stochastic_builds_stochastic_members() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 3))
    gen = torch.Generator().manual_seed(1)
    ens = Ensemble.from_stochastic(model, num_samples=7, generator=gen)
    assert isinstance(ens.members, StochasticMembers)
    assert ens.num_members == 7 and ens.member_modules == [model]
    x = _x()
    assert ens.predict_proba(x).shape == (10, 3)
    assert float(ens.predict_member_probs(x).std(0).min()) > 0
    with ens.sample_masks():
        torch.testing.assert_close(ens.predict_members(x[:4]), ens.predict_members(x)[:, :4])


def test_from_posterior() -> None:
    class Posterior:
        def __init__(self) -> None:
            self.calls: list[tuple] = []

        def sample_models(self, n_models: int, temperature: float = 1.0) -> list[nn.Module]:
            self.calls.append((n_models, temperature))
            return [_mlp(i) for i in range(n_models)]

    source = Posterior()
    ens = Ensemble.from_posterior(source, n_members=3, temperature=0.5)
    assert source.calls == [(3, 0.5)] and ens.num_members == 3
    with pytest.raises(ValueError, match="`source` must have a sample_models"):
        Ensemble.from_posterior(object())
    with pytest.raises(ValueError, match="`n_members` must be an integer >= 1"):
        Ensemble.from_posterior(source, n_members=0)


# ---------------------------------------------------------------------------- persistence
def _roundtrip(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


def test_torch_save_load_explicit_and_combiner() -> None:
    ens = Ensemble.from_models([_mlp(s) for s in range(3)])
    loaded = _roundtrip(ens)
    x = _x()
    torch.testing.assert_close(loaded(x), ens(x), rtol=0, atol=0)
    ens.combiner = _median
    torch.testing.assert_close(_roundtrip(ens)(x), ens(x), rtol=0, atol=0)


def test_torch_save_load_stochastic_keeps_generator_state() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Dropout(0.5), nn.Linear(8, 3))
    ens = Ensemble.from_stochastic(model, 6, generator=torch.Generator().manual_seed(3))
    loaded = _roundtrip(ens)
    x = _x()
    assert torch.equal(loaded.predict_members(x), ens.predict_members(x))


def test_state_dict_roundtrip() -> None:
    source = Ensemble.from_models([_mlp(s) for s in range(3)])
    target = Ensemble.from_models([_mlp(s + 10) for s in range(3)])
    x = _x()
    assert not torch.allclose(source(x), target(x))
    target.load_state_dict(source.state_dict())
    torch.testing.assert_close(target(x), source(x), rtol=0, atol=0)
    keys = set(source.state_dict())
    assert "members.models.0.0.weight" in keys


# ---------------------------------------------------------------------------- scikit-learn
@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 5))
    y = (x[:, 0] + x[:, 1] > 0).astype(int) + (x[:, 2] > 1).astype(int)
    return x, y


@pytest.mark.parametrize("cls", [RandomForestClassifier, ExtraTreesClassifier])
def test_from_sklearn_forest(cls, data) -> None:
    x, y = data
    forest = cls(n_estimators=15, min_samples_leaf=3, random_state=0).fit(x, y)
    ens = Ensemble.from_sklearn(forest)
    members = ens.predict_members(x[:30])
    manual = np.stack([tree.predict_proba(x[:30]) for tree in forest.estimators_])
    assert members.dtype == torch.float64 and members.shape == (15, 30, 3)
    np.testing.assert_allclose(members.numpy(), manual, rtol=0, atol=1e-12)
    np.testing.assert_allclose(
        ens.predict_proba(x[:30]).numpy(), forest.predict_proba(x[:30]), rtol=0, atol=1e-12
    )
    # tensors and numpy arrays give the same members; the adapter is not a softmaxing one
    assert torch.equal(ens.predict_members(torch.from_numpy(x[:30])), members)
    assert ens.output_kind == "probs" and ens.member_modules == []
    torch.testing.assert_close(ens.predict_member_probs(x[:30]), members)


def test_from_sklearn_bagging_with_feature_subsets(data) -> None:
    x, y = data
    labels = np.array(["cat", "dog", "emu"])[y]
    bag = BaggingClassifier(n_estimators=12, max_features=0.6, random_state=0).fit(x, labels)
    assert any(len(f) < 5 for f in bag.estimators_features_)
    ens = Ensemble.from_sklearn(bag)
    np.testing.assert_allclose(
        ens.predict_proba(x).numpy(), bag.predict_proba(x), rtol=0, atol=1e-12
    )


def test_from_sklearn_maps_missing_classes(data) -> None:
    """A member that never saw a class gives it probability 0 in the right column."""
    x, y = data
    labels = np.array(["a", "b", "c"])[y]
    bag = BaggingClassifier(
        KNeighborsClassifier(n_neighbors=3),
        n_estimators=10,
        max_samples=8,
        max_features=0.8,
        random_state=1,
    ).fit(x, labels)
    short = [i for i, e in enumerate(bag.estimators_) if len(e.classes_) < 3]
    assert short, "the test needs a member with a missing class"
    members = SklearnMembers(bag).predict_all(x).numpy()
    for i in short:
        sub = bag.estimators_[i]
        cols = np.asarray(sub.classes_, dtype=int)
        proba = sub.predict_proba(x[:, bag.estimators_features_[i]])
        np.testing.assert_allclose(members[i][:, cols], proba, rtol=0, atol=0)
        missing = np.setdiff1d(np.arange(3), cols)
        assert np.all(members[i][:, missing] == 0)
    np.testing.assert_allclose(members.mean(0), bag.predict_proba(x), rtol=0, atol=1e-12)


def test_from_sklearn_validation(data) -> None:
    x, y = data
    with pytest.raises(ValueError, match="`estimator` must be fitted.*call fit first"):
        Ensemble.from_sklearn(RandomForestClassifier())
    with pytest.raises(ValueError, match="without estimators_; for a single model") as info:
        Ensemble.from_sklearn(LogisticRegression().fit(x, y))
    assert "call fit first" not in str(info.value)  # it is fitted: say what is accepted
    forest = RandomForestClassifier(n_estimators=3, random_state=0).fit(x, y)
    ens = Ensemble.from_sklearn(forest)
    with pytest.raises(ValueError, match="`x` must have 5 features"):
        ens.predict_members(x[:, :4])
    with pytest.raises(ValueError, match="`x` must be 2-D"):
        ens.predict_members(x[0])
    with pytest.raises(ValueError, match="`x` must be finite"):
        ens.predict_members(np.full((2, 5), np.nan))


def test_from_sklearn_survives_torch_save(data) -> None:
    x, y = data
    ens = Ensemble.from_sklearn(RandomForestClassifier(n_estimators=4, random_state=0).fit(x, y))
    assert torch.equal(_roundtrip(ens).predict_members(x), ens.predict_members(x))
