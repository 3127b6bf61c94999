"""Members from a fitted scikit-learn bagging-style ensemble (random forest, bagging, ...)."""

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


class SklearnMembers(MemberAdapter):
    """Members are the fitted sub-estimators of a scikit-learn bagging-style classifier.

    Works with any fitted ensemble exposing ``estimators_`` and ``classes_`` whose
    sub-estimators have ``predict_proba``: ``RandomForestClassifier``, ``ExtraTreesClassifier``,
    ``BaggingClassifier`` (feature subsets in ``estimators_features_`` are applied), and similar.
    A sub-estimator that never saw a class (bootstrap sample without it) gets probability 0 for
    it. Members are equally weighted, so their mean equals the ensemble's own
    ``predict_proba`` for forests and bagging (not for boosting).

    Args:
        estimator: the fitted scikit-learn ensemble classifier.
    """

    output_kind = "probs"

    def __init__(self, estimator: Any) -> None:
        super().__init__()
        fn = "SklearnMembers"
        subs = getattr(estimator, "estimators_", None)
        classes = getattr(estimator, "classes_", None)
        if subs is None or classes is None:
            raise ValueError(
                f"{fn}: `estimator` must be a fitted scikit-learn ensemble classifier with "
                f"`estimators_` and `classes_` (got {type(estimator).__name__}; call fit first)"
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
        classes = np.asarray(classes)
        features = getattr(estimator, "estimators_features_", None)
        self.estimator = estimator
        self.classes_ = classes
        self._subs = subs
        self._features = None if features is None else [np.asarray(f) for f in features]
        self._columns = [
            _class_columns(np.asarray(s.classes_), classes, i) for i, s in enumerate(subs)
        ]

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
