"""Random forests (and any scikit-learn bagging-style ensemble) as producers of members.

Each fitted base estimator is one member: its ``predict_proba`` is a coherent hypothesis (the same
tree gives the same output for the same ``x`` in every call), so the stack of trees' predictions
``[T, N, K]`` is the second-order sample the paper evaluates. Reference for the method:
L. Breiman, "Random Forests", Machine Learning 45, 2001; Hoarau's epistemic-calibration paper,
appendix B.1.1, uses 100 trees with at least 5 samples per leaf.
"""

from __future__ import annotations

from typing import Any

import torch
from sklearn.base import BaseEstimator
from sklearn.ensemble import RandomForestClassifier
from sklearn.exceptions import NotFittedError

from bensemble._validation import (
    MIN_MEMBER_BYTES,
    as_float_tensor,
    as_labels,
    check_count,
    check_positive_int,
    check_same_length,
)
from bensemble.core.sklearn_members import SklearnMembers

__all__ = ["forest_members", "RandomForestMembers"]


def forest_members(forest: Any, X: Any) -> torch.Tensor:
    """Per-member class probabilities ``[T, N, K]`` of a fitted scikit-learn ensemble.

    Works for any classifier ensemble that stores its fitted members in ``estimators_`` and its
    labels in ``classes_`` (``RandomForestClassifier``, ``ExtraTreesClassifier``,
    ``BaggingClassifier``, ...), where every member has ``predict_proba``:

    * members trained on a feature subset (``BaggingClassifier(max_features < 1)``) get the
      columns listed in ``estimators_features_``;
    * scikit-learn fits the members on *encoded* labels, so a member's ``classes_`` are indices
      into the ensemble's ``classes_`` (labels of the ensemble are accepted too, for ensembles
      that fit members on raw labels). A member whose training sample missed a class has fewer
      columns; they are placed at those indices and the missing classes get probability 0 (the
      convention of scikit-learn's own ``predict_proba``, so the members' mean equals the
      ensemble's ``predict_proba``).

    This is the functional form of ``Ensemble.from_sklearn(forest)``: it checks its inputs, then
    uses the same adapter, :class:`bensemble.core.member.SklearnMembers`, so both share one
    implementation of the column mapping.

    Args:
        forest: a fitted single-output scikit-learn classifier ensemble.
        X: inputs ``[N, D]`` (torch tensor or numpy array).

    Returns:
        Member probabilities ``[T, N, K]`` (float64, CPU), member ``t`` = ``forest.estimators_[t]``,
        column ``k`` = ``forest.classes_[k]``.
    """
    fn = "forest_members"
    estimators = getattr(forest, "estimators_", None)
    if estimators is None or not hasattr(forest, "classes_"):
        if hasattr(forest, "fit") and hasattr(forest, "predict_proba"):
            raise NotFittedError(
                f"{fn}: `forest` is not fitted yet (got an unfitted {type(forest).__name__}); "
                "call its fit(X, y) first"
            )
        raise ValueError(
            f"{fn}: `forest` must be a fitted scikit-learn ensemble with `estimators_` and "
            f"`classes_` (got {type(forest).__name__})"
        )
    if isinstance(forest.classes_, list):
        raise ValueError(
            f"{fn}: `forest` must be a single-output classifier (got a multi-output "
            f"{type(forest).__name__} with {len(forest.classes_)} outputs)"
        )
    estimators = list(estimators)
    if not estimators:
        raise ValueError(f"{fn}: `forest` must have at least one fitted member (got none)")
    X = as_float_tensor(X, "X", fn, ndim=2)
    n_features = getattr(forest, "n_features_in_", None)
    if n_features is not None and X.shape[1] != n_features:
        raise ValueError(
            f"{fn}: `X` must have {n_features} features, as seen in fit (got shape "
            f"{tuple(X.shape)})"
        )
    # One implementation of the member mapping: the core adapter behind Ensemble.from_sklearn.
    return SklearnMembers(forest).predict_all(X)


class RandomForestMembers(BaseEstimator):
    """A random forest with the paper's settings whose trees are the members.

    Wraps :class:`sklearn.ensemble.RandomForestClassifier` (other settings at scikit-learn's
    defaults: bootstrap samples, ``sqrt(D)`` features per split, Gini impurity). Members are
    :func:`forest_members` of the fitted forest; the forest's ``predict_proba`` is their mean.

    Args:
        n_estimators: number of trees ``T`` (the paper uses 100).
        min_samples_leaf: minimum number of training samples per leaf (the paper uses 5).
        random_state: seed of the forest (scikit-learn's name for ``seed``; default 0: identical
            fits grow identical forests; ``None``: fresh, from NumPy's global random state).
        n_jobs: passed to scikit-learn.

    Attributes (after ``fit``):
        forest_: the fitted ``RandomForestClassifier``.
        classes_: the training labels ``[K]`` (int64 tensor).
        n_features_in_: number of input features.

    Example:
        >>> X = [[0.0], [1.0], [2.0], [10.0], [11.0], [12.0]]
        >>> model = RandomForestMembers(n_estimators=5, min_samples_leaf=1, random_state=0)
        >>> model.fit(X, [0, 0, 0, 1, 1, 1]).sample_members([[0.5], [11.5]]).shape
        torch.Size([5, 2, 2])
    """

    def __init__(
        self,
        n_estimators: int = 100,
        min_samples_leaf: int = 5,
        random_state: int | None = 0,
        n_jobs: int | None = None,
    ) -> None:
        fn = "RandomForestMembers"
        # at least one fitted tree object per estimator (MIN_MEMBER_BYTES) before any is grown
        check_count(n_estimators, "n_estimators", fn, itemsize=MIN_MEMBER_BYTES)
        check_positive_int(min_samples_leaf, "min_samples_leaf", fn)
        if random_state is not None:
            check_positive_int(random_state, "random_state", fn, minimum=0)
        self.n_estimators = n_estimators
        self.min_samples_leaf = min_samples_leaf
        self.random_state = random_state
        self.n_jobs = n_jobs

    def fit(self, X: Any, y: Any) -> RandomForestMembers:
        """Fit the forest on inputs ``X [N, D]`` and integer labels ``y [N]``; returns ``self``."""
        fn = "RandomForestMembers.fit"
        X = as_float_tensor(X, "X", fn, ndim=2)
        y = as_labels(y, "y", fn)
        check_same_length(fn, X=X, y=y)
        if torch.unique(y).numel() < 2:
            raise ValueError(
                f"{fn}: `y` must contain at least two classes (got only {torch.unique(y).tolist()})"
            )
        forest = RandomForestClassifier(
            n_estimators=self.n_estimators,
            min_samples_leaf=self.min_samples_leaf,
            random_state=self.random_state,
            n_jobs=self.n_jobs,
        )
        forest.fit(X.cpu().numpy(), y.cpu().numpy())
        self.forest_ = forest
        self.classes_ = torch.as_tensor(forest.classes_, dtype=torch.int64)
        self.n_features_in_ = int(X.shape[1])
        return self

    def _check_X(self, X: Any, method: str) -> torch.Tensor:
        fn = f"RandomForestMembers.{method}"
        if not hasattr(self, "forest_"):
            raise NotFittedError(
                f"{fn}: this RandomForestMembers is not fitted yet; call fit(X, y) before {method}"
            )
        X = as_float_tensor(X, "X", fn, ndim=2)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(
                f"{fn}: `X` must have {self.n_features_in_} features, as seen in fit "
                f"(got shape {tuple(X.shape)})"
            )
        return X

    def predict_proba(self, X: Any) -> torch.Tensor:
        """Mean of the trees' probabilities ``[N, K]`` (float64)."""
        X = self._check_X(X, "predict_proba")
        return forest_members(self.forest_, X).mean(dim=0)

    def predict(self, X: Any) -> torch.Tensor:
        """Predicted labels ``[N]``: ``classes_[argmax_k mean_t p_tk(x)]``."""
        X = self._check_X(X, "predict")
        probs = forest_members(self.forest_, X).mean(dim=0)
        return self.classes_[probs.argmax(dim=1)]

    def sample_members(
        self, X: Any, n: int | None = None, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """The trees' probabilities ``[n, N, K]`` (float64).

        Args:
            X: inputs ``[N, D]``.
            n: number of members; ``None`` gives all ``T`` trees. ``n < T`` gives the first ``n``
                trees: the trees are already i.i.d. draws given ``random_state``, so any fixed
                subset is as random as a shuffled one, and the result never depends on an RNG.
            generator: accepted for the member-producer protocol; unused (nothing is drawn).

        Returns:
            Member probabilities ``[n, N, K]``; the same tree gives the same output for the same
            ``x`` in every call (members are coherent).
        """
        fn = "RandomForestMembers.sample_members"
        X = self._check_X(X, "sample_members")
        total = len(self.forest_.estimators_)
        n = total if n is None else check_positive_int(n, "n", fn)
        if n > total:
            raise ValueError(f"{fn}: `n` must be <= the number of trees {total} (got {n})")
        if n == total:
            return forest_members(self.forest_, X)
        return forest_members(_FirstMembers(self.forest_, n), X)


class _FirstMembers:
    """Read-only view of a fitted ensemble exposing only its first ``n`` members."""

    def __init__(self, forest: Any, n: int) -> None:
        self.estimators_ = forest.estimators_[:n]
        self.classes_ = forest.classes_
        self.n_features_in_ = forest.n_features_in_
        features = getattr(forest, "estimators_features_", None)
        if features is not None:
            self.estimators_features_ = features[:n]
