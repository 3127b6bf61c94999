"""Ensemble.from_sklearn with lists of fitted classifiers, pipelines, and refused boosting."""

import numpy as np
import pytest
import torch
from sklearn.ensemble import (
    AdaBoostClassifier,
    GradientBoostingClassifier,
    HistGradientBoostingClassifier,
    RandomForestClassifier,
)
from sklearn.linear_model import LogisticRegression
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from bensemble.core import Ensemble


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(90, 4)) * [1.0, 3.0, 0.5, 2.0]
    y = np.array(["a", "b", "c"])[(x[:, 0] > 0).astype(int) + (x[:, 1] > 2).astype(int)]
    return x, y


def test_list_of_fitted_classifiers_and_pipelines(data) -> None:
    x, y = data
    models = [
        LogisticRegression(max_iter=500).fit(x, y),
        make_pipeline(StandardScaler(), LogisticRegression(C=0.3, max_iter=500)).fit(x, y),
        make_pipeline(StandardScaler(), KNeighborsClassifier(7)).fit(x, y),
        RandomForestClassifier(n_estimators=5, random_state=0).fit(x, y),
    ]
    ens = Ensemble.from_sklearn(models)
    members = ens.predict_members(x[:20])
    manual = np.stack([m.predict_proba(x[:20]) for m in models])
    assert members.shape == (4, 20, 3) and ens.output_kind == "probs"
    np.testing.assert_allclose(members.numpy(), manual, rtol=0, atol=1e-12)
    np.testing.assert_allclose(ens.predict_proba(x[:20]).numpy(), manual.mean(0), atol=1e-12)
    assert list(ens.members.classes_) == ["a", "b", "c"]
    # a float32 tensor and the numpy array give the same members (to float32 input rounding)
    torch.testing.assert_close(
        ens.predict_members(torch.from_numpy(x[:20]).float()), members, rtol=0, atol=1e-5
    )


def test_list_validation(data) -> None:
    x, y = data
    fitted = LogisticRegression(max_iter=500).fit(x, y)
    with pytest.raises(ValueError, match=r"`estimator\[1\]` must be fitted.*call fit first"):
        Ensemble.from_sklearn([fitted, LogisticRegression()])
    other = LogisticRegression(max_iter=500).fit(x, np.where(y == "c", "b", y))
    with pytest.raises(ValueError, match=r"`estimator\[1\].classes_` must equal") as info:
        Ensemble.from_sklearn([fitted, other])
    assert "fit first" not in str(info.value)
    with pytest.raises(
        ValueError, match=r"`estimator\[0\]` must be a classifier with predict_proba"
    ):
        Ensemble.from_sklearn([StandardScaler().fit(x)])
    with pytest.raises(ValueError, match="at least one classifier"):
        Ensemble.from_sklearn([])


@pytest.mark.parametrize(
    "booster",
    [
        pytest.param(lambda: AdaBoostClassifier(n_estimators=5), id="adaboost"),
        pytest.param(lambda: GradientBoostingClassifier(n_estimators=5), id="gboost"),
        pytest.param(lambda: HistGradientBoostingClassifier(max_iter=5), id="hist"),
    ],
)
def test_boosting_is_refused_with_what_is_accepted(booster, data) -> None:
    x, y = data
    model = booster().fit(x, y)
    with pytest.raises(ValueError, match="not exchangeable members") as info:
        Ensemble.from_sklearn(model)
    message = str(info.value)
    assert "list of fitted classifiers" in message and "fit first" not in message
    # in a list with other models a boosted classifier is one member
    ens = Ensemble.from_sklearn([model, LogisticRegression(max_iter=500).fit(x, y)])
    assert ens.predict_member_probs(x[:3]).shape == (2, 3, 3)
