"""Members from scikit-learn: a fitted bagging-style ensemble, or a list of fitted classifiers."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from bensemble._validation import as_float_tensor
from bensemble.core.member import MemberAdapter
from bensemble.core.types import MemberPredictions

__all__ = ["SklearnMembers"]


def _class_columns(sub_classes: np.ndarray, classes: np.ndarray, index: int) -> np.ndarray:
    """Columns of the ensemble's ``classes`` that a sub-estimator's ``classes_`` map to.

    scikit-learn's forests and bagging fit their sub-estimators on label indices
    ``0..K-1`` (so a sub-estimator that never saw a class lacks that index); other ensembles may
    fit them on the original labels. Rule: equal class lists map one to one; integer values in
    ``[0, K)`` are indices; otherwise values are looked up in ``classes``.
    """
    k = len(classes)
    if len(sub_classes) == k and np.array_equal(sub_classes, classes):
        return np.arange(k)
    if np.issubdtype(np.asarray(sub_classes).dtype, np.number):
        values = np.asarray(sub_classes, dtype=float)
        if np.all(values == np.round(values)) and values.min() >= 0 and values.max() < k:
            return values.astype(np.int64)
    lookup = {c: i for i, c in enumerate(classes.tolist())}
    try:
        return np.array([lookup[c] for c in np.asarray(sub_classes).tolist()], dtype=np.int64)
    except KeyError as exc:
        raise ValueError(
            f"SklearnMembers: `estimator.estimators_[{index}].classes_` must be label indices or "
            f"labels of the ensemble (got unknown class {exc.args[0]!r})"
        ) from None


_BOOSTING = (
    "AdaBoostClassifier",
    "GradientBoostingClassifier",
    "HistGradientBoostingClassifier",
    "StackingClassifier",
)
_ACCEPTED = (
    "a fitted forest / bagging classifier (RandomForestClassifier, ExtraTreesClassifier, "
    "BaggingClassifier, ...) or a list of fitted classifiers with predict_proba (pipelines "
    "included) that share classes_"
)


def _check_fitted(estimator: Any, name: str, fn: str) -> None:
    """``NotFittedError`` becomes the only "call fit first" message."""
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    try:
        check_is_fitted(estimator)
    except NotFittedError:
        raise ValueError(
            f"{fn}: `{name}` must be fitted (got an unfitted {type(estimator).__name__}; call "
            "fit first)"
        ) from None
    except TypeError:  # not a scikit-learn estimator at all
        raise ValueError(
            f"{fn}: `{name}` must be {_ACCEPTED} (got {type(estimator).__name__})"
        ) from None


class SklearnMembers(MemberAdapter):
    """Members from scikit-learn: a bagging-style ensemble's sub-estimators, or a list.

    Accepted:

    * a fitted ensemble exposing ``estimators_`` and ``classes_`` whose sub-estimators have
      ``predict_proba``: ``RandomForestClassifier``, ``ExtraTreesClassifier``,
      ``BaggingClassifier`` (feature subsets in ``estimators_features_`` are applied), and
      similar. A sub-estimator that never saw a class (bootstrap sample without it) gets
      probability 0 for it. Members are equally weighted, so their mean equals the ensemble's own
      ``predict_proba`` for forests and bagging;
    * a list of fitted classifiers with ``predict_proba`` (pipelines included) whose ``classes_``
      are equal: e.g. models trained on bootstrap samples or with different seeds.

    Boosting (``AdaBoostClassifier``, ``GradientBoostingClassifier``,
    ``HistGradientBoostingClassifier``) and stacking are refused: their stages are not
    exchangeable hypotheses (each stage corrects the previous ones, and the staged probabilities
    of one model are not a sample of models), so treating them as members would give a wrong
    epistemic uncertainty. Put a boosted model in a list with independently trained ones instead.

    Args:
        estimator: the fitted scikit-learn ensemble classifier, or a list of fitted classifiers.
    """

    output_kind = "probs"

    def __init__(self, estimator: Any) -> None:
        super().__init__()
        fn = "SklearnMembers"
        features = None
        if isinstance(estimator, (list, tuple)):
            subs, classes = self._from_list(list(estimator), fn)
        else:
            subs, classes = self._from_ensemble(estimator, fn)
            features = getattr(estimator, "estimators_features_", None)
        self.estimator = estimator
        self.classes_ = classes
        self._subs = subs
        self._features = None if features is None else [np.asarray(f) for f in features]
        self._columns = [
            _class_columns(np.asarray(s.classes_), classes, i) for i, s in enumerate(subs)
        ]

    @staticmethod
    def _from_ensemble(estimator: Any, fn: str) -> tuple[list[Any], np.ndarray]:
        name = type(estimator).__name__
        if name in _BOOSTING:
            raise ValueError(
                f"{fn}: `estimator` must be {_ACCEPTED} (got {name}: boosting / stacking stages "
                "are not exchangeable members, so their spread is not an epistemic uncertainty)"
            )
        subs = getattr(estimator, "estimators_", None)
        classes = getattr(estimator, "classes_", None)
        if subs is None or classes is None:
            if not hasattr(estimator, "fit"):
                raise ValueError(f"{fn}: `estimator` must be {_ACCEPTED} (got {name})")
            _check_fitted(estimator, "estimator", fn)  # "call fit first" only when unfitted
            raise ValueError(
                f"{fn}: `estimator` must be {_ACCEPTED} (got a fitted {name} without "
                "estimators_; for a single model pass a list, [model], or several models)"
            )
        subs = list(np.ravel(np.asarray(subs, dtype=object)))
        if not subs:
            raise ValueError(f"{fn}: `estimator` must have at least one fitted sub-estimator")
        for i, sub in enumerate(subs):
            if not hasattr(sub, "predict_proba") or not hasattr(sub, "classes_"):
                raise ValueError(
                    f"{fn}: `estimator.estimators_[{i}]` must be a classifier with predict_proba "
                    f"(got {type(sub).__name__})"
                )
        return subs, np.asarray(classes)

    @staticmethod
    def _from_list(models: list[Any], fn: str) -> tuple[list[Any], np.ndarray]:
        if not models:
            raise ValueError(f"{fn}: `estimator` must hold at least one classifier (got [])")
        for i, model in enumerate(models):
            if not hasattr(model, "predict_proba"):
                raise ValueError(
                    f"{fn}: `estimator[{i}]` must be a classifier with predict_proba (got "
                    f"{type(model).__name__})"
                )
            _check_fitted(model, f"estimator[{i}]", fn)
        classes = np.asarray(models[0].classes_)
        for i, model in enumerate(models[1:], start=1):
            if not np.array_equal(np.asarray(model.classes_), classes):
                raise ValueError(
                    f"{fn}: `estimator[{i}].classes_` must equal `estimator[0].classes_` (got "
                    f"{np.asarray(model.classes_).tolist()} and {classes.tolist()})"
                )
        return list(models), classes

    @property
    def estimators(self) -> list[Any]:
        """The sub-estimators, one per member."""
        return list(self._subs)

    @torch.no_grad()
    def predict_all(self, x: Any) -> MemberPredictions:
        """Member probabilities ``[M, N, K]`` (float64, CPU) for features ``x [N, D]``."""
        fn = "SklearnMembers.predict_all"
        xt = as_float_tensor(x, "x", fn, ndim=2)
        n_features = getattr(self.estimator, "n_features_in_", None)
        if isinstance(self.estimator, (list, tuple)):
            n_features = getattr(self._subs[0], "n_features_in_", None)
        if n_features is not None and xt.shape[1] != n_features:
            raise ValueError(
                f"{fn}: `x` must have {n_features} features (got shape {tuple(xt.shape)})"
            )
        data = xt.cpu().numpy()
        out = np.zeros((len(self._subs), data.shape[0], len(self.classes_)))
        for m, sub in enumerate(self._subs):
            rows = data if self._features is None else data[:, self._features[m]]
            out[m][:, self._columns[m]] = sub.predict_proba(rows)
        return torch.from_numpy(out)

    @property
    def size(self) -> int:
        return len(self._subs)

    @property
    def member_modules(self) -> list[nn.Module]:
        """Empty: scikit-learn members are not torch modules (see :attr:`estimators`)."""
        return []
