r"""Epistemic calibration of regression members: the regression EECE and TECE.

Hoarau's epistemic calibration (*Can we trust our models?*) carried from ``P(Y = 1 | x)`` to real
targets: the members' spread around the truth must match the epistemic uncertainty they report,
``E_h[(E[Y | members] - mu_h)^2] = EU``, with ``EU(x) = Var_h mu_h(x)`` (population variance,
divisor ``H``; the epistemic part of
:func:`~bensemble.uncertainty.decompose_regression_uncertainty`).
Only the members' means enter; their variances (aleatoric) do not.

**Bins.** K-means cells of the member mean vectors ``v_n = (mu_1(x_n), ..., mu_H(x_n))``
(:mod:`bensemble.regression._binning`, bensemble's K-means; ``n_bins="auto"`` is the
classification EECE's rule, about ``sqrt(N)`` bins).

**Estimator.** In bin ``b`` with ``n_b`` points, ``ybar_b`` the mean label, ``mubar_{h,b}`` member
``h``'s mean prediction and ``mean EU_b`` the mean reported EU:

.. math:: t_b = \frac1H \sum_h (\bar y_b - \bar\mu_{h,b})^2 - \frac{s_b^2}{n_b}
          - \overline{\mathrm{EU}}_b, \qquad
          \mathrm{EECE} = \sum_b \frac{n_b}{N} |t_b|,

where ``s_b^2`` is the sample variance (divisor ``n_b - 1``) in the bin of the residuals
``r_n = y_n - mean_h mu_h(x_n)``. The correction: ``mean_h (ybar_b - mubar_{h,b})^2 =
(rbar_b)^2 + Var_h mubar_{h,b}`` and, for points drawn i.i.d. within the bin,
``E[rbar_b^2] = (E[r | b])^2 + Var(r | b) / n_b``: the label noise inflates the plug-in
term by ``Var(r | b) / n_b``, which ``s_b^2 / n_b`` removes without bias (``bias_correction=True``,
default). A bin of one point gets no correction. The classification EECE has none (its per-bin
noise ``acc (1 - acc) / n_b`` is bounded by ``1 / (4 n_b)``); regression noise is unbounded, so
without it EECE grows with the label noise. The aggregation is the paper's: weights ``n_b / N``
and the absolute value per bin (``details.signed`` keeps the signs). Units: ``y`` squared.

**TECE** with a known regression function ``f(x) = E[Y | x]``:
``TECE = (1/N) sum_n | mean_h (f(x_n) - mu_h(x_n))^2 - EU(x_n) |``, i.e.
``mean (f - mean_h mu_h)^2`` for the default EU. It conditions on ``x`` rather than on the member
vector, which is the same thing whenever the member vector determines ``x``.

Members equal to the truth (``mu_h = f``) have EECE -> 0 as ``N`` grows (``O(Var(Y|x) / n_b)``
noise per bin); members that agree with each other more than with the truth (a shared bias
``b(x)`` on top of their spread) have EECE -> ``E[b^2]``, the TECE (tests/regression).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from bensemble._validation import as_float_tensor, check_bool
from bensemble.metrics._epistemic_checks import warn_sparse_bins
from bensemble.metrics.binning._fit import resolve_seed
from bensemble.regression import _binning
from bensemble.regression._eece_kernels import RegressionEECEDetails, _reece_compute, _reece_update
from bensemble.regression._inputs import RegressionMembers, as_member_predictions, as_targets

__all__ = [
    "RegressionEECEDetails",
    "fit_regression_bins",
    "regression_epistemic_calibration_error",
    "true_regression_epistemic_calibration_error",
]

_F64 = torch.float64


def _check_eu(eu: Any, n: int, fn: str, device: torch.device) -> torch.Tensor:
    t = as_float_tensor(eu, "eu", fn, ndim=1)
    if t.shape[0] != n:
        raise ValueError(f"{fn}: `eu` must have one value per point ({n}) (got {t.shape[0]})")
    lowest = float(t.min())
    if lowest < 0:
        raise ValueError(f"{fn}: `eu` must be >= 0, a variance (got a minimum of {lowest:.4g})")
    return t.to(device)


def _seed(seed: Any, generator: Any, fn: str) -> int:
    return resolve_seed(generator if seed is None else None, seed, fn)


def _reece_chunk_update(
    members: RegressionMembers,
    y: torch.Tensor,
    centroids: torch.Tensor,
    eu: torch.Tensor | None = None,
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The per-bin sums of one chunk of points under fixed ``centroids`` ``[B, H]``.

    The streaming form: fit the centroids once (:func:`fit_regression_bins`), then add the
    states of the chunks (:func:`~bensemble.regression.scoring.merge_states`) and finish with
    ``_reece_compute(state, bias_correction)``. Keep one member order for every chunk and the
    centroids' columns (the one-shot function uses the canonical order of
    :mod:`~bensemble.regression._binning`; any fixed order gives the same value up to rounding).

    Returns:
        ``(state, bin ids [n])``.
    """
    eu_t = members.moments()[3] if eu is None else eu
    ids = _binning.assign(members.means.T.contiguous(), centroids)
    return _reece_update(members.means, y, eu_t, ids, centroids.shape[0]), ids


def fit_regression_bins(
    member_preds: Any,
    n_bins: int | str = "auto",
    *,
    seed: int | None = 0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """K-means centroids of the member mean vectors, to fix the EECE's bins on one split.

    Fit on a calibration (or first) split, then pass ``centroids=`` to
    :func:`regression_epistemic_calibration_error` on others: the bins stay fixed, and the EECE's
    per-bin sums become additive over chunks of the data.

    Args:
        member_preds: ``[M, N]`` points or ``[M, N, 2]`` (mean, variance) members.
        n_bins: number of bins, or ``"auto"`` (about ``sqrt(N)``).
        seed: the K-means seed (fixed default: identical calls agree); ``None`` draws it from
            ``generator`` (or torch's global RNG).
        generator: source of the seed when ``seed=None``.

    Returns:
        ``[B, M]`` float64 centroids (``B <= n_bins``), one column per member in the given order.

    Example:
        >>> import torch
        >>> means = torch.tensor([[0.0, 0.1, 5.0, 5.1], [0.0, 0.2, 5.0, 5.2]])
        >>> fit_regression_bins(means, 2).shape
        torch.Size([2, 2])
    """
    fn = "fit_regression_bins"
    members = as_member_predictions(member_preds, fn)
    n_bins = _binning.resolve_n_bins(n_bins, members.n, fn)
    run_seed = _seed(seed, generator, fn)
    order = _binning.canonical(members.means)
    means = members.means if order is None else members.means[order]
    centroids = _binning.fit_centroids(means.T.contiguous(), n_bins, run_seed)
    if order is not None:  # back to the caller's member order
        centroids = centroids[:, torch.argsort(order.to(centroids.device))]
    return centroids


def regression_epistemic_calibration_error(
    member_preds: Any,
    labels: Any,
    *,
    n_bins: int | str = "auto",
    eu: Any = None,
    bias_correction: bool = True,
    centroids: Any = None,
    seed: int | None = 0,
    generator: torch.Generator | None = None,
    return_details: bool = False,
) -> float | RegressionEECEDetails:
    r"""Expected epistemic calibration error of regression members (module docstring).

    .. math:: \mathrm{EECE} = \sum_b \frac{n_b}{N}\Bigl|\frac1H\sum_h
              (\bar y_b - \bar\mu_{h,b})^2 - \frac{s_b^2}{n_b} - \overline{\mathrm{EU}}_b\Bigr|

    Lower is better; units of ``y`` squared (compare it with the mean EU, or with the MSE).

    Args:
        member_preds: ``[M, N]`` points or ``[M, N, 2]`` (mean, variance) members; only the
            means enter.
        labels: ``[N]`` real targets.
        n_bins: number of K-means bins (an integer in ``[1, N]``) or ``"auto"``.
        eu: ``[N]`` reported epistemic uncertainty (a variance); default ``Var_h mu_h``.
        bias_correction: subtract ``s_b^2 / n_b`` from each bin's squared error.
        centroids: ``[B, M]`` fixed bins (from :func:`fit_regression_bins`, columns in the
            members' order) instead of a K-means fit on these points.
        seed: the K-means seed (fixed default); ``None`` draws it from ``generator``.
        generator: source of the seed when ``seed=None``.
        return_details: return a :class:`RegressionEECEDetails` (the per-bin ingredients,
            the signed error, the bins and the seed) instead of the float.

    Returns:
        The EECE as a float, or a :class:`RegressionEECEDetails` with ``return_details=True``.

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> x = torch.rand(4000, generator=g, dtype=torch.float64)
        >>> y = torch.sin(6 * x) + 0.1 * torch.randn(4000, generator=g, dtype=torch.float64)
        >>> truth = torch.sin(6 * x).expand(5, -1)  # five members equal to E[Y | x]
        >>> regression_epistemic_calibration_error(truth, y) < 1e-3
        True
        >>> regression_epistemic_calibration_error(truth + 0.3, y) > 0.08  # shared bias 0.3
        True
        >>> details = regression_epistemic_calibration_error(truth + 0.3, y, return_details=True)
        >>> details.signed > 0.08  # the members' spread under-reports the squared error
        True
    """
    fn = "regression_epistemic_calibration_error"
    members = as_member_predictions(member_preds, fn)
    h, n = members.n_members, members.n
    y = as_targets(labels, n, fn, members.means.device)
    bias_correction = check_bool(bias_correction, "bias_correction", fn)
    return_details = check_bool(return_details, "return_details", fn)
    if centroids is not None:
        fixed = _binning.check_centroids(centroids, h, fn).to(members.means.device)
        n_bins_asked, run_seed = None, None
    else:
        n_bins_asked = _binning.resolve_n_bins(n_bins, n, fn)
        run_seed = _seed(seed, generator, fn)
    eu_t = None if eu is None else _check_eu(eu, n, fn, y.device)
    # one canonical member order before anything order-sensitive: member order changes no bit
    order = _binning.canonical(members.means)
    ordered = members.reordered(order)
    if centroids is None:
        fitted = _binning.fit_centroids(ordered.means.T.contiguous(), n_bins_asked, run_seed)
    else:
        fitted = fixed if order is None else fixed[:, order.to(fixed.device)]
    state, ids = _reece_chunk_update(ordered, y, fitted, eu_t)
    stats = _reece_compute(state, bias_correction)
    filled = int((stats["counts"] > 0).sum())
    warn_sparse_bins(fn, n, filled, stacklevel=3)
    value, signed = float(stats.pop("value")), float(stats.pop("signed"))
    if not math.isfinite(value):
        raise ValueError(
            f"{fn}: `member_preds` and `labels` must give finite squared errors in float64 "
            f"(got {value}); rescale the targets"
        )
    if not return_details:
        return value
    caller_centroids = (
        fitted if order is None else fitted[:, torch.argsort(order.to(fitted.device))]
    )
    return RegressionEECEDetails(
        value=value,
        signed=signed,
        **stats,
        n_bins=n_bins_asked,
        n_bins_fitted=filled,
        seed=run_seed,
        bias_correction=bias_correction,
        centroids=caller_centroids,
        point_bins=ids,
    )


def true_regression_epistemic_calibration_error(
    member_preds: Any, true_mean: Any, *, eu: Any = None
) -> float:
    """TECE against a known regression function ``f(x) = E[Y | x]`` (module docstring).

    ``(1/N) sum_n | mean_h (f(x_n) - mu_h(x_n))^2 - EU(x_n) |``; for the default
    ``EU = Var_h mu_h`` this is ``mean_n (f(x_n) - mean_h mu_h(x_n))^2``.

    Args:
        member_preds: ``[M, N]`` points or ``[M, N, 2]`` (mean, variance) members.
        true_mean: ``[N]`` the true ``E[Y | x_n]`` (e.g. :func:`bensemble.datasets.
            regression_toy_mean`).
        eu: ``[N]`` reported epistemic uncertainty; default ``Var_h mu_h``.

    Returns:
        The TECE (units of ``y`` squared), a Python float.

    Example:
        >>> import torch
        >>> true_regression_epistemic_calibration_error(torch.tensor([[1.0], [3.0]]), [2.0])
        0.0
    """
    fn = "true_regression_epistemic_calibration_error"
    members = as_member_predictions(member_preds, fn)
    f = as_float_tensor(true_mean, "true_mean", fn, ndim=1)
    if f.shape[0] != members.n:
        raise ValueError(
            f"{fn}: `true_mean` must have one value per point ({members.n}) (got {f.shape[0]})"
        )
    f = f.to(members.means.device)
    eu_t = members.moments()[3] if eu is None else _check_eu(eu, members.n, fn, f.device)
    error = (f[None, :] - members.means).square().mean(dim=0)
    value = float((error - eu_t).abs().mean())
    if not math.isfinite(value):
        raise ValueError(
            f"{fn}: `member_preds` and `true_mean` must give finite squared errors in float64 "
            f"(got {value}); rescale the targets"
        )
    return value
