"""Evidential k-nearest neighbours: Dempster's combination of the neighbours' evidence.

Reference: T. Denœux, "A k-nearest neighbor classification rule based on Dempster-Shafer theory",
IEEE Transactions on Systems, Man, and Cybernetics 25(5), 1995. Used in Hoarau's
epistemic-calibration paper, appendix B.1.1, with ``k = 12``, ``alpha = 0.4``, ``beta = 0.5``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from bensemble._validation import (
    as_float_tensor,
    as_labels,
    check_positive,
    check_positive_int,
    check_probability,
    to_tensor,
)
from bensemble.methods._illustrative import IllustrativeClassifier, nearest_neighbors

__all__ = ["EvidentialKNN", "combine_simple_support"]


def combine_simple_support(
    support: Any, neighbor_classes: Any, num_classes: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dempster's normalised combination of simple support functions on singletons.

    Neighbour ``i`` of point ``x`` supports its class ``c_i`` with mass ``s_i``:
    ``m_i({c_i}) = s_i``, ``m_i(Omega) = 1 - s_i``. Combining all of them with Dempster's rule has
    a closed form. With ``P_c = prod_{i: c_i = c} (1 - s_i)`` (1 if no neighbour has class ``c``)::

        m({c})   ∝ (1 - P_c) prod_{c' != c} P_c'
        m(Omega) ∝ prod_c P_c

    normalised to sum to 1 (the remaining, conflicting mass falls on the empty set and is
    discarded). Evaluated in log space, so long products never underflow.

    Args:
        support: masses ``s [N, k]`` in ``[0, 1)``.
        neighbor_classes: class index of each neighbour ``[N, k]`` (int, in ``[0, K-1]``).
        num_classes: size ``K >= 2`` of the frame ``Omega``.

    Returns:
        ``(m_singletons [N, K], m_omega [N])`` (float64); each row sums to 1 with ``m_omega``.
    """
    fn = "combine_simple_support"
    s = as_float_tensor(support, "support", fn, ndim=2)
    num_classes = check_positive_int(num_classes, "num_classes", fn, minimum=2)
    raw = to_tensor(neighbor_classes, "neighbor_classes", fn)
    if raw.shape != s.shape:
        raise ValueError(
            f"{fn}: `neighbor_classes` must have the shape of `support` {tuple(s.shape)} "
            f"(got {tuple(raw.shape)})"
        )
    classes = as_labels(raw.reshape(-1), "neighbor_classes", fn, num_classes=num_classes)
    classes = classes.reshape(s.shape)
    if float(s.min()) < 0.0 or float(s.max()) >= 1.0:
        raise ValueError(
            f"{fn}: `support` must lie in [0, 1) (got values in "
            f"[{float(s.min()):.4g}, {float(s.max()):.4g}])"
        )
    return _combine(s, classes.to(s.device), num_classes)


def _combine(
    s: torch.Tensor, classes: torch.Tensor, num_classes: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Vectorised closed form of :func:`combine_simple_support` (inputs already checked)."""
    log_keep = torch.zeros(s.shape[0], num_classes, dtype=torch.float64, device=s.device)
    log_keep.scatter_add_(1, classes, torch.log1p(-s))  # log P_c
    log_all = log_keep.sum(dim=1, keepdim=True)  # log prod_c P_c
    # log(1 - P_c) = log(-expm1(log P_c)); -inf when no neighbour supports c.
    log_single = torch.log(-torch.expm1(log_keep)) + log_all - log_keep
    log_masses = torch.cat([log_single, log_all], dim=1)
    masses = torch.softmax(log_masses, dim=1)
    return masses[:, :num_classes], masses[:, num_classes]


class EvidentialKNN(IllustrativeClassifier):
    """Denœux's evidential k-NN; ``h`` is the pignistic probability and ``EU = m(Omega)``.

    Each of the ``k`` nearest training points (Euclidean distance ``d_i``, class ``c_i``) is a
    piece of evidence ``m_i({c_i}) = alpha exp(-gamma_{c_i} d_i^beta)``, ``m_i(Omega) = 1 - that``.
    The ``k`` pieces are pooled with Dempster's normalised rule (:func:`combine_simple_support`)
    into ``m``, and::

        h_c(x) = BetP(c) = m({c}) + m(Omega) / K          (pignistic probability)
        EU(x)  = m(Omega)                                   (mass left on total ignorance)

    Unless given, ``gamma_c = 1 / dbar_c^beta`` where ``dbar_c`` is the mean Euclidean distance
    between distinct training points of class ``c`` (Denœux's suggestion, so that ``gamma_c d^beta
    = (d / dbar_c)^beta`` is scale free); a class with a single training point uses the mean over
    all distinct training pairs instead.

    Args:
        n_neighbors: number of neighbours ``k`` (the paper uses 12).
        alpha: maximal support of one neighbour, in ``(0, 1)`` (the paper uses 0.4).
        beta: exponent of the distance, ``> 0`` (the paper uses 0.5).
        gamma: ``None`` (per-class default above), one positive number for every class, or a
            sequence of ``K`` positive numbers in the order of ``classes_``.

    Attributes (after ``fit``):
        gamma_: the per-class ``gamma_c`` ``[K]`` used (float64).

    Example:
        >>> X = [[0.0], [1.0], [2.0], [10.0], [11.0], [12.0]]
        >>> model = EvidentialKNN(n_neighbors=3).fit(X, [0, 0, 0, 1, 1, 1])
        >>> bool(model.predict_proba([[1.0]])[0, 0] > 0.5)
        True
    """

    def __init__(
        self,
        n_neighbors: int = 12,
        alpha: float = 0.4,
        beta: float = 0.5,
        gamma: float | Sequence[float] | None = None,
    ) -> None:
        fn = "EvidentialKNN"
        check_positive_int(n_neighbors, "n_neighbors", fn)
        check_probability(alpha, "alpha", fn, open_interval=True)
        check_positive(beta, "beta", fn)
        if gamma is not None:
            values = as_float_tensor(gamma, "gamma", fn, ndim=(0, 1))
            if bool((values <= 0).any()):
                raise ValueError(f"{fn}: `gamma` must be > 0 (got {gamma!r})")
        self.n_neighbors = n_neighbors
        self.alpha = alpha
        self.beta = beta
        self.gamma = gamma

    def _check_training_size(self, n_samples: int, fn: str) -> None:
        if self.n_neighbors > n_samples:
            raise ValueError(
                f"{fn}: `X` must have at least n_neighbors={self.n_neighbors} samples "
                f"(got {n_samples})"
            )

    def _default_gamma(self, X: torch.Tensor, y_index: torch.Tensor, K: int) -> torch.Tensor:
        fn = "EvidentialKNN.fit"
        d = torch.cdist(X, X, compute_mode="donot_use_mm_for_euclid_dist")
        distinct = ~torch.eye(X.shape[0], dtype=torch.bool, device=X.device)
        same = (y_index[:, None] == y_index[None, :]) & distinct
        zeros = torch.zeros(K, dtype=torch.float64, device=X.device)
        total = zeros.scatter_add(0, y_index, (d * same).sum(dim=1))
        pairs = zeros.scatter_add(0, y_index, same.sum(dim=1).to(torch.float64))
        overall = (d * distinct).sum() / distinct.sum()
        mean_dist = torch.where(pairs > 0, total / pairs.clamp(min=1.0), overall)
        if bool((mean_dist <= 0).any()):
            raise ValueError(
                f"{fn}: `X` has a class whose training points all coincide, so the default "
                "gamma = 1 / mean distance^beta is undefined; pass `gamma` explicitly"
            )
        return mean_dist.pow(-float(self.beta))

    def _fit(self, X: torch.Tensor, y_index: torch.Tensor, num_classes: int) -> None:
        if self.gamma is None:
            gamma = self._default_gamma(X, y_index, num_classes)
        else:
            gamma = as_float_tensor(self.gamma, "gamma", "EvidentialKNN.fit", ndim=(0, 1))
            gamma = gamma.to(X.device).expand(num_classes) if gamma.ndim == 0 else gamma
            if gamma.shape[0] != num_classes:
                raise ValueError(
                    f"EvidentialKNN.fit: `gamma` must be one number or {num_classes} numbers, one "
                    f"per class (got {gamma.shape[0]})"
                )
        self.gamma_ = gamma.to(device=X.device, dtype=torch.float64).clone()
        self._X_train = X
        self._y_train = y_index
        self._num_classes = num_classes

    def mass(self, X: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Combined masses ``(m_singletons [N, K], m_omega [N])`` at the inputs ``X [N, D]``."""
        return self._mass(self._check_X(X, "mass"))

    def _mass(self, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        dist, idx = nearest_neighbors(X, self._X_train, int(self.n_neighbors))
        classes = self._y_train[idx]
        support = float(self.alpha) * torch.exp(-self.gamma_[classes] * dist.pow(self.beta))
        return _combine(support, classes, self._num_classes)

    def _predict(self, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        m_single, m_omega = self._mass(X)
        return m_single + m_omega[:, None] / self._num_classes, m_omega
