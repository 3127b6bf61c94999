"""The targets and companions of the EECE: the TECE and the paper's ECE of the mean prediction.

Both are positive-class quantities of a binary task and follow the shape mechanism of
:mod:`bensemble.metrics.epistemic`: ``[H, N, 2]`` member probabilities, or ``[H, N]``
positive-class probabilities with ``binary=True``. Members are put in the canonical order first,
so their order never changes a value. Public through :mod:`bensemble.metrics` (and
:mod:`bensemble.metrics.epistemic`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from bensemble._validation import (
    as_confidences,
    as_float_tensor,
    as_labels,
    check_option,
    check_same_length,
)
from bensemble.metrics._binning import bin_sums
from bensemble.metrics._epistemic_checks import canonical_member_order, check_eu, positive_class
from bensemble.metrics.calibration import calibration_error

__all__ = [
    "binary_calibration_error",
    "gaussian_draw_moments",
    "illustrative_true_epistemic_calibration_error",
    "true_epistemic_calibration_error",
]

CONDITION_ON = ("x", "psi")
#: How an illustrative method's members are scored: ``"reported"`` uses the method's own EU as
#: the trust, ``"draws"`` the variance of its Gaussian draws.
TRUST = ("reported", "draws")


def true_epistemic_calibration_error(
    member_probs: Any,
    eta: Any,
    eu: Any = None,
    condition_on: str = "x",
    *,
    psi: Any = None,
    binary: bool = False,
) -> float:
    r"""True epistemic calibration error (TECE) against a known ``P(y = 1 | x)``.

    .. math:: \mathrm{TECE} = \frac{1}{N}\sum_n \Bigl|\frac{1}{H}\sum_h (\pi_n - p_{h,n})^2
              - \mathrm{EU}_n\Bigr|

    With the default ``EU = Var_h p`` each term is ``(pi_n - Delta_n)^2 >= 0``. Members are put in
    the canonical order first (as the EECE does), so their order never changes the value.

    Args:
        member_probs: ``[H, N, 2]`` member probabilities, or with ``binary=True`` ``[H, N]``
            positive-class probabilities (the same numbers give the same value).
        eta: ``[N]`` true ``P(y = 1 | x_n)`` (e.g. :func:`bensemble.datasets.toy_posterior`).
        eu: ``[N]`` reported epistemic uncertainty (default: the member variance).
        condition_on: ``"x"`` uses ``pi_n = eta_n``; ``"psi"`` conditions on the member vector:
            ``pi_n`` is the mean of ``eta`` over the points whose member vectors are identical to
            ``x_n``'s (needed for piecewise-constant models such as random forests), or, when
            ``psi`` is given, over the points whose rows of ``psi`` are identical.
        psi: ``[N, D]`` parameters of each point's second-order distribution, used with
            ``condition_on="psi"`` to group points when the member vector is *not* the
            distribution itself - e.g. ``(h(x), EU(x))`` of a method whose members are
            independent Gaussian draws (grouping on the draws would condition on ``x``).
            For such methods :func:`illustrative_true_epistemic_calibration_error` gives the
            exact (population) value.
        binary: ``member_probs`` is the binary positive-class form ``[H, N]``.

    Returns:
        The TECE.

    Example:
        >>> import torch
        >>> p = torch.tensor([[0.2, 0.8], [0.4, 0.6]])
        >>> round(true_epistemic_calibration_error(p, torch.tensor([0.3, 0.5]), binary=True), 4)
        0.02
    """
    fn = "true_epistemic_calibration_error"
    p = positive_class(member_probs, fn, binary)
    e = as_confidences(eta, "eta", fn).to(p.device)
    check_option(condition_on, "condition_on", CONDITION_ON, fn)
    n = p.shape[1]
    if e.shape[0] != n:
        raise ValueError(f"{fn}: `eta` must have length {n}, one per point (got {e.shape[0]})")
    groups = None
    if psi is not None:
        if condition_on != "psi":
            raise ValueError(f"{fn}: `psi` must be None unless condition_on='psi' (got an array)")
        groups = as_float_tensor(psi, "psi", fn).to(p.device)
        groups = groups[:, None] if groups.ndim == 1 else groups
        if groups.ndim != 2 or groups.shape[0] != n:
            raise ValueError(
                f"{fn}: `psi` must be [N] or [N, D] with N = {n}, one row per point "
                f"(got shape {list(groups.shape)})"
            )
    order = canonical_member_order(p)
    if order is not None:
        p = p[order]
    eu_t = p.var(dim=0, unbiased=False) if eu is None else check_eu(eu, (n,), fn).to(p.device)
    if condition_on == "psi":
        e = _group_mean(e, p.T if groups is None else groups)
    squared_error = ((e[None, :] - p) ** 2).mean(dim=0)
    return float((squared_error - eu_t).abs().mean())


def _group_mean(values: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Each point's value replaced by the mean over the points with an identical key row."""
    _, inverse = torch.unique(keys, dim=0, return_inverse=True)
    counts, sums = bin_sums(inverse, int(inverse.max()) + 1, values)
    return (sums / counts)[inverse]


def gaussian_draw_moments(
    positive_probs: Any, epistemic_uncertainty: Any, *, clip: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and variance of ``phi ~ N(h, sqrt(EU))``, clipped to [0, 1] or not, per point.

    Unclipped they are ``(h, EU)``. Clipped (the censored normal): with ``a = -h / s``,
    ``b = (1 - h) / s``, ``s = sqrt(EU)``, ``Phi``/``phi`` the standard normal cdf/pdf,
    ``E = (1 - Phi(b)) + h (Phi(b) - Phi(a)) + s (phi(a) - phi(b))`` and
    ``E2 = (1 - Phi(b)) + (h^2 + s^2)(Phi(b) - Phi(a)) + s ((h) phi(a) - (1 + h) phi(b))``;
    ``EU = 0`` gives the point mass at ``clip(h)``.

    Args:
        positive_probs: ``h(x)`` ``[N]`` in [0, 1].
        epistemic_uncertainty: ``EU(x)`` ``[N]``, non-negative (the normal's variance).
        clip: clip the draws to [0, 1] (the :func:`bensemble.methods.gaussian_members` default).

    Returns:
        ``(mean [N], variance [N])`` float64.

    Example:
        >>> m, v = gaussian_draw_moments([0.5], [0.01], clip=False)
        >>> float(m[0]), float(v[0])
        (0.5, 0.01)
    """
    h, eu = check_positive_probs_and_eu(
        positive_probs, epistemic_uncertainty, "gaussian_draw_moments"
    )
    if not clip:
        return h, eu
    s = eu.sqrt()
    safe = torch.where(s > 0, s, torch.ones_like(s))
    normal = torch.distributions.Normal(torch.zeros_like(h), torch.ones_like(h))
    a, b = -h / safe, (1.0 - h) / safe
    cdf_a, cdf_b = normal.cdf(a), normal.cdf(b)
    pdf_a, pdf_b = normal.log_prob(a).exp(), normal.log_prob(b).exp()
    above, inside = 1.0 - cdf_b, cdf_b - cdf_a
    m1 = above + h * inside + safe * (pdf_a - pdf_b)
    m2 = above + (h**2 + safe**2) * inside + safe * (h * pdf_a - (1.0 + h) * pdf_b)
    mean = torch.where(s > 0, m1, h)
    var = torch.where(s > 0, (m2 - m1**2).clamp_min(0.0), torch.zeros_like(h))
    return mean, var


def check_positive_probs_and_eu(h: Any, eu: Any, fn: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A method's reported pairs: positive-class probabilities ``h [N]`` in [0, 1] and
    epistemic uncertainties ``eu [N]`` >= 0, as float tensors on ``h``'s device."""
    h = as_float_tensor(h, "positive_probs", fn, ndim=1)
    eu = as_float_tensor(eu, "epistemic_uncertainty", fn, ndim=1).to(h.device)
    check_same_length(fn, positive_probs=h, epistemic_uncertainty=eu)
    lo, hi = float(h.min()), float(h.max())
    if lo < 0.0 or hi > 1.0:
        raise ValueError(
            f"{fn}: `positive_probs` must lie in [0, 1] (got values in [{lo:.4g}, {hi:.4g}])"
        )
    if float(eu.min()) < 0.0:
        raise ValueError(
            f"{fn}: `epistemic_uncertainty` must be >= 0 (got minimum {float(eu.min()):.4g})"
        )
    return h, eu


def illustrative_true_epistemic_calibration_error(
    positive_probs: Any,
    epistemic_uncertainty: Any,
    eta: Any,
    *,
    trust: str = "reported",
    clip: bool = False,
) -> float:
    r"""Exact TECE of a method that reports ``(h(x), EU(x))`` and is sampled as Gaussian draws.

    The second-order distribution of such a method at ``x`` is ``Psi(x) = N(h(x), sqrt(EU(x)))``
    (clipped to [0, 1] or not), fully described by ``(h(x), EU(x))``. So
    ``P(Y = 1 | Pi(X) = Psi)`` is the mean of ``eta`` over the points sharing ``(h, EU)`` -
    *not* over points sharing a vector of independent draws, which never repeats - and the
    expectation over ``phi ~ Psi`` is exact: with ``m, v`` the mean and variance of the draws
    (:func:`gaussian_draw_moments`),

    .. math:: \mathrm{TECE} = rac{1}{N}\sum_n igl|(\pi_n - m_n)^2 + v_n
              - \mathrm{trust}_nigr|,

    where ``trust`` is the reported ``EU`` (``"reported"``) or the draws' variance ``v``
    (``"draws"``). Unclipped, ``m = h`` and ``v = EU``: both conventions give
    ``mean_n (pi_n - h_n)^2``.

    Args:
        positive_probs: ``h(x)`` ``[N]`` in [0, 1].
        epistemic_uncertainty: ``EU(x)`` ``[N]``, non-negative.
        eta: ``[N]`` true ``P(y = 1 | x)``.
        trust: ``"reported"`` or ``"draws"``.
        clip: whether the draws are clipped to [0, 1].

    Returns:
        The TECE conditioned on ``Psi = (h, EU)``.

    Example:
        >>> round(illustrative_true_epistemic_calibration_error([0.3, 0.3], [0.01, 0.01],
        ...                                                      [0.2, 0.6]), 4)
        0.01
    """
    fn = "illustrative_true_epistemic_calibration_error"
    h, eu = check_positive_probs_and_eu(positive_probs, epistemic_uncertainty, fn)
    check_option(trust, "trust", TRUST, fn)
    e = as_confidences(eta, "eta", fn).to(h.device)
    if e.shape[0] != h.shape[0]:
        raise ValueError(
            f"{fn}: `eta` must have length {h.shape[0]}, one per point (got {e.shape[0]})"
        )
    mean, var = gaussian_draw_moments(h, eu, clip=bool(clip))
    pi = _group_mean(e.to(torch.float64), torch.stack([h, eu], dim=1))
    reported = eu if trust == "reported" else var
    return float(((pi - mean) ** 2 + var - reported).abs().mean())


#: Largest ``n_bins`` of :func:`binary_calibration_error` (an equal-width histogram of more bins
#: than this is not an estimate; the bound stops absurd values before any allocation).
MAX_ECE_BINS = 10**6


def binary_calibration_error(
    member_probs: Any,
    labels: Any,
    n_bins: int = 15,
    *,
    norm: str = "l1",
    binning: str = "uniform",
    binary: bool = False,
) -> float:
    """The paper's ECE: the binned calibration error of the mean prediction ``Delta = P(y = 1)``.

    Confidences are ``Delta[n] = mean_h p[h, n]`` (members in the canonical order, so the mean
    does not depend on their order) and outcomes ``y``, binned by
    :func:`bensemble.metrics.calibration_error` (``(lower, upper]`` equal-width bins by default).

    Args:
        member_probs: ``[H, N, 2]`` member probabilities, or with ``binary=True`` ``[H, N]``
            positive-class probabilities.
        labels: ``[N]`` labels in {0, 1}.
        n_bins: number of bins, in ``[1, 10**6]``.
        norm: ``"l1"`` (ECE), ``"l2"`` or ``"max"``.
        binning: ``"uniform"`` or ``"quantile"``.
        binary: ``member_probs`` is the binary positive-class form ``[H, N]``.

    Returns:
        The calibration error of ``Delta``.

    Example:
        >>> import torch
        >>> p = torch.tensor([[0.2, 0.9], [0.4, 0.7]])
        >>> round(binary_calibration_error(p, torch.tensor([0, 1]), n_bins=5, binary=True), 4)
        0.25
    """
    fn = "binary_calibration_error"
    p = positive_class(member_probs, fn, binary)
    ok = isinstance(n_bins, (int, np.integer)) and not isinstance(n_bins, (bool, np.bool_))
    if not ok or not 1 <= n_bins <= MAX_ECE_BINS:
        raise ValueError(
            f"{fn}: `n_bins` must be an integer in [1, {MAX_ECE_BINS}] (got {n_bins!r})"
        )
    y = as_labels(labels, "labels", fn, n=p.shape[1], num_classes=2, device=p.device)
    order = canonical_member_order(p)
    if order is not None:
        p = p[order]
    return calibration_error(p.mean(dim=0), y, int(n_bins), norm=norm, binning=binning)
