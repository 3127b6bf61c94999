"""Scikit-learn bagging-style ensembles (random forests, ...) as member producers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.ensemble import BaggingClassifier, ExtraTreesClassifier, RandomForestClassifier
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import LogisticRegression
from sklearn.neighbors import KNeighborsClassifier
from sklearn.tree import DecisionTreeClassifier

from bensemble.datasets.toy import make_toy_gaussians
from bensemble.methods.forest import RandomForestMembers, forest_members


@pytest.fixture(scope="module")
def toy():
    return make_toy_gaussians(50, seed=0), make_toy_gaussians(10_000, seed=1)


def _reference_loop_members(forest, X):
    """Plain loop: each member's predict_proba, its columns placed by its encoded classes_."""
    X = np.asarray(X)
    K = len(forest.classes_)
    feats = getattr(forest, "estimators_features_", None)
    out = np.zeros((len(forest.estimators_), X.shape[0], K))
    for t, est in enumerate(forest.estimators_):
        p = est.predict_proba(X if feats is None else X[:, feats[t]])
        for j, c in enumerate(est.classes_):
            out[t, :, int(c)] = p[:, j]
    return out


def _rare_class_data():
    rng = np.random.default_rng(0)
    y = np.array([0] * 2 + [1] * 20 + [2] * 20)  # the rare class is the first column
    X = rng.normal(size=(42, 4)) + y[:, None]
    return X, y


ENSEMBLES = [
    pytest.param(lambda: RandomForestClassifier(20, min_samples_leaf=2, random_state=0), id="rf"),
    pytest.param(lambda: ExtraTreesClassifier(15, random_state=0), id="extra-trees"),
    pytest.param(
        lambda: BaggingClassifier(
            DecisionTreeClassifier(), 25, max_samples=0.3, max_features=0.5, random_state=0
        ),
        id="bagging-features",
    ),
    pytest.param(
        lambda: BaggingClassifier(LogisticRegression(), 10, max_samples=0.3, random_state=1),
        id="bagging-logreg",
    ),
    pytest.param(
        lambda: BaggingClassifier(
            KNeighborsClassifier(3), 25, max_samples=0.3, max_features=0.5, random_state=0
        ),
        id="bagging-knn-missing-classes",
    ),
]


@pytest.mark.parametrize("make", ENSEMBLES)
def test_members_match_the_loop_reference_and_sklearn_mean(make):
    X, y = _rare_class_data()
    forest = make().fit(X, y)
    Xq = np.random.default_rng(1).normal(size=(30, 4)) + 1.0
    members = forest_members(forest, Xq)
    assert members.shape == (len(forest.estimators_), 30, 3)
    assert members.dtype == torch.float64
    torch.testing.assert_close(members, torch.from_numpy(_reference_loop_members(forest, Xq)))
    torch.testing.assert_close(members.mean(0), torch.from_numpy(forest.predict_proba(Xq)))


def test_bagging_members_that_missed_a_class_are_mapped():
    # Members without sample_weight support are fitted on the bootstrap subset itself, so some
    # never see the rare class (recent scikit-learn gives trees bootstrap weights instead).
    X, y = _rare_class_data()
    forest = BaggingClassifier(KNeighborsClassifier(3), 25, max_samples=0.3, random_state=0)
    forest.fit(X, y)
    short = [t for t, est in enumerate(forest.estimators_) if len(est.classes_) < 3]
    assert short, "the setting must produce members whose bootstrap sample missed a class"
    members = forest_members(forest, X)
    t = short[0]
    missing = sorted(set(range(3)) - {int(c) for c in forest.estimators_[t].classes_})
    assert float(members[t][:, missing].abs().max()) == 0.0
    torch.testing.assert_close(members.sum(-1), torch.ones(25, 42, dtype=torch.float64))


def test_arbitrary_labels_follow_the_forest_columns():
    X, y = _rare_class_data()
    labels = np.array([7, -2, 40])[y]
    forest = RandomForestClassifier(10, random_state=0).fit(X, labels)
    members = forest_members(forest, torch.from_numpy(X))
    torch.testing.assert_close(members.mean(0), torch.from_numpy(forest.predict_proba(X)))


def test_random_forest_members_paper_settings_and_accuracy(toy):
    train, test = toy
    model = RandomForestMembers(random_state=0).fit(train.x, train.y)
    assert model.forest_.n_estimators == 100 and model.forest_.min_samples_leaf == 5
    members = model.sample_members(test.x)
    assert members.shape == (100, len(test), 2)
    accuracy = float((model.predict(test.x) == test.y).double().mean())
    # Measured 0.973 with this training draw; over 30 training draws of 50 points the accuracy
    # spans 0.915-0.974 (mean 0.954), so the 0.95 bound is not met by every draw.
    assert accuracy >= 0.95
    torch.testing.assert_close(model.predict_proba(test.x), members.mean(0))
    torch.testing.assert_close(
        model.predict_proba(test.x), torch.from_numpy(model.forest_.predict_proba(test.x.numpy()))
    )


def test_members_are_coherent(toy):
    """The same tree gives the same output for the same x: across calls and across batches."""
    train, test = toy
    model = RandomForestMembers(n_estimators=30, random_state=0).fit(train.x, train.y)
    x = test.x[:500]
    a = model.sample_members(x)
    b = model.sample_members(x)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    subset = torch.tensor([3, 499, 0, 3])
    torch.testing.assert_close(model.sample_members(x[subset]), a[:, subset], rtol=0, atol=0)


def test_first_n_trees_and_determinism(toy):
    train, test = toy
    model = RandomForestMembers(n_estimators=30, random_state=0).fit(train.x, train.y)
    all_members = model.sample_members(test.x[:100])
    torch.testing.assert_close(model.sample_members(test.x[:100], 7), all_members[:7])
    again = RandomForestMembers(n_estimators=30, random_state=0).fit(train.x.numpy(), train.y)
    torch.testing.assert_close(again.sample_members(test.x[:100].numpy()), all_members)
    other = RandomForestMembers(n_estimators=30, random_state=1).fit(train.x, train.y)
    assert not torch.equal(other.sample_members(test.x[:100]), all_members)
    with pytest.raises(ValueError, match="`n` must be <= the number of trees 30"):
        model.sample_members(test.x, 31)
    with pytest.raises(ValueError, match="`n`"):
        model.sample_members(test.x, 0)


def test_forest_members_rejects_bad_forests():
    X, y = _rare_class_data()
    with pytest.raises(NotFittedError, match="`forest` is not fitted"):
        forest_members(RandomForestClassifier(), X)
    with pytest.raises(ValueError, match="`forest` must be a fitted scikit-learn ensemble"):
        forest_members(object(), X)
    multi = RandomForestClassifier(5, random_state=0).fit(X, np.stack([y, y], 1))
    with pytest.raises(ValueError, match="single-output"):
        forest_members(multi, X)
    forest = RandomForestClassifier(5, random_state=0).fit(X, y)
    with pytest.raises(ValueError, match="`X` must have 4 features"):
        forest_members(forest, X[:, :3])
    with pytest.raises(ValueError, match="`X`"):
        forest_members(forest, X[0])


def test_random_forest_members_lifecycle_and_validation(toy):
    train, test = toy
    for method in ["predict_proba", "predict", "sample_members"]:
        with pytest.raises(NotFittedError, match=r"call fit\(X, y\) before " + method):
            getattr(RandomForestMembers(), method)(test.x)
    model = RandomForestMembers(n_estimators=5, random_state=0).fit(train.x, train.y)
    with pytest.raises(ValueError, match="`X` must have 2 features"):
        model.predict_proba(np.zeros((3, 5)))
    with pytest.raises(ValueError, match="`y`"):
        RandomForestMembers().fit(train.x, train.y.double())
    with pytest.raises(ValueError, match="same number of samples"):
        RandomForestMembers().fit(train.x, train.y[:-1])
    with pytest.raises(ValueError, match="two classes"):
        RandomForestMembers().fit(train.x, torch.zeros(50, dtype=torch.long))
    for kwargs, arg in [
        ({"n_estimators": 0}, "`n_estimators`"),
        ({"min_samples_leaf": 0}, "`min_samples_leaf`"),
        ({"random_state": -1}, "`random_state`"),
    ]:
        with pytest.raises(ValueError, match=arg):
            RandomForestMembers(**kwargs)
