"""Shared base of the paper's three *illustrative* (non-second-order) uncertainty methods.

:class:`~bensemble.methods.Centroids`, :class:`~bensemble.methods.RelativeLikelihood` and
:class:`~bensemble.methods.EvidentialKNN` each report a prediction ``h(x)`` and an epistemic
uncertainty ``EU(x)`` that is *not* the variance of a distribution over hypotheses. Hoarau's
epistemic-calibration paper (section 4 and appendix B.1.1) turns them into member predictions
anyway, by drawing for every point *independently*::

    phi ~ N(h(x), sd = sqrt(EU(x))),      member = [1 - phi, phi]

where ``h(x)`` is the predicted probability of the positive class. By default the draws are
**clipped to [0, 1]** so that every member is a probability vector (the form every metric of
:mod:`bensemble.metrics` accepts); clipping pulls the members' mean toward 1/2 and shrinks their
variance below ``EU(x)`` wherever ``h(x) +- sqrt(EU(x))`` leaves [0, 1]. ``clip=False`` keeps the
draws as the paper writes them (they may leave [0, 1]; score them with
:func:`bensemble.experiments.illustrative.illustrative_scores`).

Scoring convention. The paper does not say how the trust of these members is measured; its
text reads: "we sample hypotheses from a normal distribution using the predicted epistemic
uncertainty as the variance, i.e. phi ~ N(h(x), sqrt(EU(x)))" (section 4) - the reported
``EU(x)`` *is* the variance of the second-order distribution, and nothing is clipped. The
experiments therefore score these methods by default with trust = the reported ``EU`` and
unclipped draws, and print the other convention (trust = the variance of the draws) beside it;
see :mod:`bensemble.experiments.illustrative`.
Two mismatches with a real second-order model follow, and the paper uses them on purpose to show
why these methods score badly on the expected epistemic calibration error (EECE):

* ``EU(x)`` is a belief/plausibility/kernel quantity, not a variance, so its scale is arbitrary;
* draws are independent across points, so "member j" is not one coherent hypothesis: it gives a
  fresh, unrelated value for the same ``x`` in every call (members are incoherent by design).

Only binary tasks can be sampled this way (the paper is binary): :meth:`sample_members` raises a
``ValueError`` for ``K > 2``. For a multi-class problem fit one-vs-rest binary estimators, as the
paper does on MNIST and CIFAR-10. ``predict_proba`` and ``epistemic_uncertainty`` of
:class:`Centroids` and :class:`EvidentialKNN` work for any ``K >= 2``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError

from bensemble._seeds import DEFAULT_SEED, check_generator
from bensemble._validation import (
    as_float_tensor,
    as_labels,
    check_count,
    check_positive_int,
    check_same_length,
)

__all__ = ["IllustrativeClassifier", "gaussian_members", "nearest_neighbors"]

#: Upper bound on the number of entries of one block of the distance matrix (kNN queries are
#: processed in row blocks of at most this many query x training distances).
_DISTANCE_BLOCK = 1 << 22


def gaussian_members(
    positive_probs: Any,
    epistemic_uncertainty: Any,
    n: int,
    *,
    clip: bool = True,
    generator: torch.Generator | None = None,
    seed: int | None = DEFAULT_SEED,
) -> torch.Tensor:
    """Binary members drawn as in the paper: ``phi ~ N(h(x), sqrt(EU(x)))``, clipped or not.

    Each of the ``n x N`` draws uses its own standard normal, independent across members and
    points; ``member[j, i] = [1 - phi_ji, phi_ji]`` with ``phi_ji = clip(h_i + sqrt(EU_i) z_ji,
    0, 1)``. The clipped draw has mean ``E[clip(Z)]`` (not ``h``) and variance below ``EU``
    wherever the normal puts mass outside [0, 1]
    (:func:`bensemble.metrics.epistemic.gaussian_draw_moments` gives both exactly).
    With ``clip=False`` ``phi_ji = h_i + sqrt(EU_i) z_ji`` as the paper writes it: mean ``h``,
    variance ``EU``, but the "members" may leave [0, 1] and are then not probability vectors (the
    metrics reject them). The same generator state gives the same ``z`` either way.

    Args:
        positive_probs: ``h(x)``, predicted ``P(y = 1 | x)`` ``[N]`` in [0, 1].
        epistemic_uncertainty: ``EU(x)`` ``[N]``, non-negative; used as the variance.
        n: number of members to draw (``>= 1``).
        clip: clip the draws to [0, 1] (default) or keep them as drawn.
        generator: torch random generator (its state advances: calls differ); the draws are
            made on its device and moved to the inputs' device.
        seed: seed of the draws when no ``generator`` is given (default 0: identical calls give
            identical members); ``None``: torch's global random state.

    Returns:
        Member probabilities ``[n, N, 2]`` (float64; with ``clip=False`` possibly outside [0, 1]).

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> gaussian_members([0.5, 1.0], [0.01, 0.0], 3, generator=g).shape
        torch.Size([3, 2, 2])
    """
    fn = "gaussian_members"
    h = as_float_tensor(positive_probs, "positive_probs", fn, ndim=1)
    eu = as_float_tensor(epistemic_uncertainty, "epistemic_uncertainty", fn, ndim=1)
    check_same_length(fn, positive_probs=h, epistemic_uncertainty=eu)
    n = check_count(n, "n", fn, per_count=3 * h.shape[0], itemsize=8)  # noise, phi, stack [n, N, 2]
    if not isinstance(clip, bool):
        raise ValueError(f"{fn}: `clip` must be True or False (got {clip!r})")
    lo, hi = float(h.min()), float(h.max())
    if lo < 0.0 or hi > 1.0:
        raise ValueError(
            f"{fn}: `positive_probs` must lie in [0, 1] (got values in [{lo:.4g}, {hi:.4g}])"
        )
    if float(eu.min()) < 0.0:
        raise ValueError(
            f"{fn}: `epistemic_uncertainty` must be >= 0 (got minimum {float(eu.min()):.4g})"
        )
    eu = eu.to(h.device)
    generator = check_generator(generator, seed, fn)
    where = h.device if generator is None else generator.device
    z = torch.randn(n, h.shape[0], generator=generator, dtype=torch.float64, device=where)
    z = z.to(h.device)
    phi = h + eu.sqrt() * z
    if clip:
        phi = phi.clamp_(0.0, 1.0)
    return torch.stack([1.0 - phi, phi], dim=-1)


def nearest_neighbors(
    queries: torch.Tensor, reference: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Euclidean distances and indices of the ``k`` nearest reference rows of every query row.

    Exact float64 distances (``torch.cdist`` without the matrix-product shortcut), computed in row
    blocks so the memory stays bounded for large query sets. Ties are broken by ``torch.topk``.

    Args:
        queries: ``[N, D]`` float64.
        reference: ``[M, D]`` float64 with ``M >= k``.
        k: number of neighbours.

    Returns:
        ``(distances [N, k], indices [N, k])``, nearest first.
    """
    block = max(1, _DISTANCE_BLOCK // max(1, reference.shape[0]))
    dists, idxs = [], []
    for start in range(0, queries.shape[0], block):
        d = torch.cdist(
            queries[start : start + block], reference, compute_mode="donot_use_mm_for_euclid_dist"
        )
        top = torch.topk(d, k, dim=1, largest=False, sorted=True)
        dists.append(top.values)
        idxs.append(top.indices)
    return torch.cat(dists), torch.cat(idxs)


class IllustrativeClassifier(BaseEstimator):
    """Scikit-learn-style base for a method that reports ``h(x)`` and ``EU(x)``.

    Subclasses implement ``_fit(X, y_index)`` (``y_index`` holds class *indices* into
    ``classes_``) and ``_predict(X) -> (probs [N, K], eu [N])``; this class validates inputs, keeps
    the lifecycle (predict before fit raises :class:`sklearn.exceptions.NotFittedError`, a
    ``ValueError``), and turns the two outputs into members with :func:`gaussian_members`.

    Inputs may be torch tensors or numpy arrays; ``X`` is ``[N, D]`` real and finite, ``y`` holds
    integer labels ``[N]`` (at least two distinct classes). Column ``k`` of every probability output
    is class ``classes_[k]`` (class ``k`` when the labels are ``0..K-1``); for binary tasks the
    positive class is ``classes_[1]``. Computation is float64 on the device of the training data.

    Attributes (after ``fit``):
        classes_: sorted distinct training labels ``[K]`` (int64).
        n_features_in_: number of input features ``D``.
    """

    #: Whether the method itself is only defined for two classes.
    _binary_only: ClassVar[bool] = False

    # ----------------------------------------------------------------------------- lifecycle
    def fit(self, X: Any, y: Any) -> IllustrativeClassifier:
        """Fit on inputs ``X [N, D]`` and integer labels ``y [N]``; returns ``self``."""
        fn = f"{type(self).__name__}.fit"
        X = as_float_tensor(X, "X", fn, ndim=2)
        y = as_labels(y, "y", fn).to(X.device)
        check_same_length(fn, X=X, y=y)
        classes, y_index = torch.unique(y, sorted=True, return_inverse=True)
        if classes.numel() < 2:
            raise ValueError(
                f"{fn}: `y` must contain at least two classes (got only {classes.tolist()})"
            )
        if self._binary_only and classes.numel() != 2:
            raise ValueError(
                f"{fn}: `y` must contain exactly two classes, {type(self).__name__} is a binary "
                f"method (got {classes.numel()} classes); fit one estimator per class "
                "(one-vs-rest) for multi-class problems"
            )
        self._check_training_size(X.shape[0], fn)
        self._fit(X, y_index, classes.numel())
        self.classes_ = classes
        self.n_features_in_ = int(X.shape[1])
        return self

    def _check_training_size(self, n_samples: int, fn: str) -> None:
        """Hook for subclasses that need a minimum number of training points."""

    def _fit(self, X: torch.Tensor, y_index: torch.Tensor, num_classes: int) -> None:
        raise NotImplementedError

    def _predict(self, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def _check_X(self, X: Any, method: str) -> torch.Tensor:
        fn = f"{type(self).__name__}.{method}"
        if not hasattr(self, "classes_"):
            raise NotFittedError(
                f"{fn}: this {type(self).__name__} is not fitted yet; call fit(X, y) before "
                f"{method}"
            )
        X = as_float_tensor(X, "X", fn, ndim=2)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(
                f"{fn}: `X` must have {self.n_features_in_} features, as seen in fit "
                f"(got shape {tuple(X.shape)})"
            )
        return X.to(self.classes_.device)

    # ----------------------------------------------------------------------------- outputs
    def predict_proba(self, X: Any) -> torch.Tensor:
        """Predicted class probabilities ``h(x)`` ``[N, K]`` (float64)."""
        probs, _ = self._predict(self._check_X(X, "predict_proba"))
        return probs

    def predict(self, X: Any) -> torch.Tensor:
        """Predicted labels ``[N]``: ``classes_[argmax_k h_k(x)]`` (ties go to the lower class)."""
        probs, _ = self._predict(self._check_X(X, "predict"))
        return self.classes_[probs.argmax(dim=1)]

    def epistemic_uncertainty(self, X: Any) -> torch.Tensor:
        """The method's own epistemic uncertainty ``EU(x)`` ``[N]`` in [0, 1] (float64)."""
        _, eu = self._predict(self._check_X(X, "epistemic_uncertainty"))
        return eu

    def sample_members(
        self,
        X: Any,
        n: int,
        generator: torch.Generator | None = None,
        *,
        clip: bool = True,
        seed: int | None = DEFAULT_SEED,
    ) -> torch.Tensor:
        """Members ``[n, N, 2]`` drawn as in the paper (binary tasks only).

        ``phi ~ N(h(x), sd = sqrt(EU(x)))`` independently per point and member, clipped to
        [0, 1] unless ``clip=False``; see :func:`gaussian_members` and the module docstring
        for why these members are neither coherent nor variance-calibrated.

        Args:
            X: inputs ``[N, D]``.
            n: number of members (``>= 1``).
            generator: torch random generator (its state advances: calls differ).
            clip: clip the draws to [0, 1] (default; see the module docstring).
            seed: seed of the draws when no ``generator`` is given (default 0: identical calls
                give identical members); ``None``: torch's global random state.

        Returns:
            Member probabilities ``[n, N, 2]`` (float64).
        """
        fn = f"{type(self).__name__}.sample_members"
        X = self._check_X(X, "sample_members")
        n = check_positive_int(n, "n", fn)
        if self.classes_.numel() != 2:
            raise ValueError(
                f"{fn}: the Gaussian member scheme is defined for binary tasks only (the model "
                f"was fitted on {self.classes_.numel()} classes); fit one-vs-rest binary "
                "estimators to sample members"
            )
        probs, eu = self._predict(X)
        return gaussian_members(probs[:, 1], eu, n, clip=clip, generator=generator, seed=seed)
