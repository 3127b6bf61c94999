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

from bensemble._validation import as_confidences, as_labels, check_option
from bensemble.metrics._binning import bin_sums
from bensemble.metrics._epistemic_checks import canonical_member_order, check_eu, positive_class
from bensemble.metrics.calibration import calibration_error

__all__ = ["true_epistemic_calibration_error", "binary_calibration_error"]

CONDITION_ON = ("x", "psi")


def true_epistemic_calibration_error(
    member_probs: Any, eta: Any, eu: Any = None, condition_on: str = "x", *, binary: bool = False
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
            ``x_n``'s (needed for piecewise-constant models such as random forests).
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
    order = canonical_member_order(p)
    if order is not None:
        p = p[order]
    eu_t = p.var(dim=0, unbiased=False) if eu is None else check_eu(eu, (n,), fn).to(p.device)
    if condition_on == "psi":
        _, inverse = torch.unique(p.T, dim=0, return_inverse=True)
        counts, sums = bin_sums(inverse, int(inverse.max()) + 1, e)
        e = (sums / counts)[inverse]
    squared_error = ((e[None, :] - p) ** 2).mean(dim=0)
    return float((squared_error - eu_t).abs().mean())


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
