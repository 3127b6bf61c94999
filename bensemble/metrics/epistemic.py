r"""Epistemic calibration: the EECE, the TECE, and the ECE of the mean prediction.

Following Hoarau's *Can we trust our models? Epistemic calibration in second-order
classification*. Binary task, ``H`` members, ``N`` points: member probabilities
``p[h, n] = P_h(y = 1 | x_n)`` ``[H, N]``, labels ``y [N]`` in {0, 1}.

* Mean prediction ``Delta[n] = mean_h p[h, n]``; epistemic uncertainty
  ``EU[n] = Var_h p[h, n]`` (population variance, divisor ``H``).
* Bins ``B_1..B_M`` partition the points by their whole member vector
  ``v_n = (p[1, n], ..., p[H, n])`` (K-means, see :mod:`bensemble.metrics.binning._fit`).
* Per bin: ``acc_m`` the fraction of ``y = 1``, ``conf[h, m]`` the mean of ``p[h, .]``,
  ``trust_m`` the mean of ``EU``; the signed term is

  .. math:: t_m = \frac{1}{H}\sum_h (\mathrm{acc}_m - \mathrm{conf}_{h,m})^2 - \mathrm{trust}_m
            = (\mathrm{acc}_m - \overline{\mathrm{conf}}_m)^2 + \mathrm{Var}_h \mathrm{conf}_{h,m}
              - \mathrm{trust}_m

  and ``EECE = sum_m (|B_m| / N) |t_m|``.
* ``TECE = E_x | E_h[(pi(x) - h(x))^2] - EU(x) |`` with ``pi`` the true ``P(y = 1 | member
  vector)``; with the default ``EU`` it is ``E_x[(pi(x) - Delta(x))^2]``.

All sums are float64: per-bin counts and sums of ``y`` and ``EU`` come from one ``bincount`` each,
the ``[N, H]`` member matrix from one ``index_add_`` on the bin ids; classes are summed a chunk
at a time (memory ``O(chunk)`` beyond the input).
"""

from __future__ import annotations

import copy
import statistics
from typing import Any

import torch

from bensemble._validation import as_labels, check_bool, check_option
from bensemble.metrics._eece_legacy import is_legacy_binning, legacy_binning
from bensemble.metrics._eece_stats import (
    EECEDetails,
    _eece_compute,
    _eece_update,
    _member_variance,
)
from bensemble.metrics._epistemic_checks import (
    auto_n_bins,
    check_eu,
    merge_infos,
    warn_sparse_bins,
)
from bensemble.metrics._epistemic_targets import (
    binary_calibration_error,
    gaussian_draw_moments,
    illustrative_true_epistemic_calibration_error,
    true_epistemic_calibration_error,
)
from bensemble.metrics.binning import (
    Binning,
    ExplicitBinning,
    KMeansBinning,
    QuantileBinning,
    UniformBinning,
)
from bensemble.metrics.binning._fit import resolve_seed
from bensemble.metrics.binning.base import MULTICLASS, MemberColumns

__all__ = [
    "EECEDetails",
    "auto_n_bins",
    "expected_epistemic_calibration_error",
    "true_epistemic_calibration_error",
    "gaussian_draw_moments",
    "illustrative_true_epistemic_calibration_error",
    "binary_calibration_error",
]

_F64 = torch.float64
#: Member columns summed per chunk of classes (float64 elements: 32 MiB).
_CHUNK_ELEMENTS = 1 << 22


# ----------------------------------------------------------------------------- public API


def expected_epistemic_calibration_error(
    member_probs: Any,
    labels: Any,
    binning: Binning | None = None,
    eu: Any = None,
    multiclass: str | None = None,
    return_details: bool = False,
    *,
    binary: bool = False,
    **deprecated: Any,
) -> float | EECEDetails:
    r"""Expected epistemic calibration error (EECE) of member predictions.

    .. math:: \mathrm{EECE} = \sum_m \frac{|B_m|}{N}\,\Bigl|\frac{1}{H}\sum_h
              (\mathrm{acc}_m - \mathrm{conf}_{h,m})^2 - \mathrm{trust}_m\Bigr|

    The bins ``B_m`` come from ``binning`` (:mod:`bensemble.metrics.binning`): passed *unfitted*
    (the default ``KMeansBinning()``: K-means cells of the member vectors ``v_n = p[:, n]``,
    about ``sqrt(N)`` of them, seed 0) it is fitted on these points; passed *fitted* (on a
    calibration split, or :meth:`~bensemble.metrics.binning.KMeansBinning.from_centroids`) its
    bins are used as they are. For ``K`` classes, ``"classwise"`` averages the binary EECE of
    the ``K`` one-vs-all tasks (each with its own bins, fitted with the same seed);
    ``"top_label"`` scores whether the argmax of the mean prediction is right, with the
    members' probabilities of that class.

    Members are exchangeable: they are first sorted into a canonical, data-derived order (by the
    bytes of each member's predictions), so any permutation of the member axis gives the
    identical value with the same seed, on every backend.

    K-means binning is random (its seeding). ``KMeansBinning(n_seeds=S)`` fits ``S`` partitions
    with the seeds ``seed .. seed + S - 1`` and returns the mean EECE; the details hold every
    per-seed value and their standard deviation. Over 5 seeds the spread is a few percent of the
    value, and the default torch backend and scikit-learn's K-means (the paper's) give means a
    few percent apart (``benchmarks/eece_seed_spread.py``; README "Epistemic calibration").

    Args:
        member_probs: ``[H, N, K]`` class probabilities, or with ``binary=True`` ``[H, N]``
            positive-class probabilities (a 2-D array is never read as members otherwise).
        labels: ``[N]`` integer labels (``{0, 1}`` with ``binary=True``, ``[0, K)`` otherwise).
        binning: a :class:`~bensemble.metrics.binning.Binning` (default
            ``KMeansBinning()``); see above for fitted vs unfitted.
        eu: reported epistemic uncertainty, ``[N]`` (``[N, K]`` for "classwise"); default the
            member variance ``Var_h p``. For methods whose EU is not the member variance.
        multiclass: ``"classwise"`` or ``"top_label"``; ``None``: a fitted binning's, else
            ``"classwise"`` (ignored with ``binary=True``).
        return_details: return an :class:`EECEDetails` instead of the float.
        binary: ``member_probs`` is the binary positive-class form ``[H, N]``.
        **deprecated: the keyword arguments of bensemble 0.3 (``n_bins``, ``seed``,
            ``generator``, ``bins``, ``centroids``, ``backend``, ``n_seeds``, ``subsample``,
            ``refine``, ``max_iter``, ``tol``, ``batch_size``, ``coreset``, ``lloyd_rtol``, and
            ``binning="kmeans" / "kmeans_fit"`` or an ``n_bins`` in the ``binning`` slot):
            still accepted, with a ``DeprecationWarning``, and give the numbers they gave
            (:mod:`bensemble.metrics._eece_legacy`).

    Returns:
        The EECE (lower is better; the mean over seeds), or the details.

    Example:
        >>> import torch
        >>> from bensemble.metrics.binning import KMeansBinning
        >>> p = torch.tensor([[0.2, 0.2, 0.9, 0.9], [0.4, 0.4, 0.7, 0.7]])
        >>> y = torch.tensor([0, 1, 1, 1])
        >>> round(expected_epistemic_calibration_error(
        ...     p, y, KMeansBinning(n_bins=2), binary=True), 4)
        0.04
    """
    fn = "expected_epistemic_calibration_error"
    binary = check_bool(binary, "binary", fn)
    return_details = check_bool(return_details, "return_details", fn)
    if multiclass is not None:
        check_option(multiclass, "multiclass", MULTICLASS, fn)
    if deprecated or is_legacy_binning(binning):
        legacy_mode = multiclass or "classwise"
        classwise = not binary and legacy_mode == "classwise"
        binning = legacy_binning(fn, binning, deprecated, classwise, binary, legacy_mode)
    elif binning is None:
        binning = KMeansBinning()
    elif not isinstance(binning, Binning):
        raise ValueError(
            f"{fn}: `binning` must be a binning from bensemble.metrics.binning, e.g. "
            f"KMeansBinning(n_bins=100) (got {type(binning).__name__})"
        )
    if multiclass is None:
        multiclass = binning.multiclass_ if binning.fitted else "classwise"
        multiclass = "classwise" if multiclass == "binary" else multiclass
    columns = MemberColumns.from_input(member_probs, fn, multiclass, binary)
    n_classes = columns.n_classes or 2
    y = as_labels(labels, "labels", fn, n=columns.n, num_classes=n_classes, device=columns.p.device)
    eu_t = None
    if eu is not None:
        shape = (columns.n, n_classes) if columns.mode == "classwise" else (columns.n,)
        eu_t = check_eu(eu, shape, fn).to(columns.p.device)
    seeds = _seeds(binning, columns, fn)
    values, first = [], None
    for seed in seeds or [None]:  # one partition at a time: the first one's bins are kept
        fitted, ids = _partition(binning, columns, fn, seed)
        slots = fitted.n_bins_
        stats, per_class = _stats(columns, y, eu_t, ids, slots)
        values.append(float(per_class.mean()))
        if first is None:
            first = (stats, per_class, slots, fitted, ids)
    stats, per_class, slots, fitted, ids = first
    groups = columns.groups
    n_filled = int((stats["counts"].view(groups, slots) > 0).sum(dim=1).max())
    warn_sparse_bins(fn, columns.n, n_filled, stacklevel=2)
    value = values[0] if len(values) == 1 else statistics.fmean(values)
    if not return_details:
        return value
    classwise = columns.mode == "classwise"
    shape = (groups, slots) if classwise else (slots,)
    kind, n_bins, backend, settings = _describe(binning, fitted, seeds)
    return EECEDetails(
        value=value,
        **{k: v.reshape(shape) for k, v in stats.items()},
        per_class=per_class if classwise else None,
        binning=kind,
        backend=backend,
        backend_settings=settings,
        seed=seeds[0] if seeds else None,
        n_bins=n_bins,
        n_bins_fitted=n_filled,
        bin_ids=binning.bin_ids_ if isinstance(binning, ExplicitBinning) else None,
        seeds=tuple(seeds),
        seed_values=tuple(values),
        seed_sd=statistics.stdev(values) if len(values) > 1 else None,
        point_bins=torch.stack(ids) if classwise else ids[0],
        fitted_binning=fitted,
    )


# ----------------------------------------------------------------------------- internals


def _seeds(binning: Binning, columns: MemberColumns, fn: str) -> list[int]:
    """The K-means seeds of a binning the EECE fits (``[]``: a fitted or seedless binning)."""
    if binning.fitted:
        if isinstance(binning, KMeansBinning) and binning.n_seeds > 1:
            raise ValueError(
                f"{fn}: `binning` must have n_seeds=1 when fitted (got n_seeds="
                f"{binning.n_seeds}): a fitted binning is one partition; pass it unfitted to "
                "average over seeds"
            )
        binning._check_compatible(columns, fn)
        return []
    if not isinstance(binning, KMeansBinning):
        return []
    first = resolve_seed(None, binning.seed, fn)
    return [(first + i) % 2**63 for i in range(binning.n_seeds)]


def _partition(binning: Binning, columns: MemberColumns, fn: str, seed: int | None):
    """``(fitted binning, bin ids per group)``: the given bins if the binning is fitted, else a
    copy fitted on these points (with ``seed`` for K-means; the caller's binning stays
    unfitted)."""
    if binning.fitted:
        return binning, binning._assign_columns(columns, fn)
    fitted = binning.with_seed(seed) if seed is not None else copy.deepcopy(binning)
    return fitted, fitted._fit_columns(columns, fn)


def _describe(binning: Binning, fitted: Binning, seeds: list[int]):
    """``(details.binning, details.n_bins, backend, backend settings)``."""
    if isinstance(binning, ExplicitBinning):
        return "bins", None, None, {}
    if isinstance(binning, (UniformBinning, QuantileBinning)):
        kind = "uniform" if isinstance(binning, UniformBinning) else "quantile"
        return kind, binning.n_bins, None, {}
    if not seeds:  # fixed K-means cells
        return "kmeans_fit", None, None, {}
    backend, settings = merge_infos(fitted.fit_info_)
    return "kmeans", fitted._state["n_bins_requested"], backend, settings


def _stats(columns: MemberColumns, y, eu, ids: list[torch.Tensor], slots: int):
    """Per-bin statistics of every group (``_eece_update`` / ``_eece_compute``), classes a chunk
    at a time; ``(stats [G * slots] each, per-group EECE [G])``."""
    n, groups = columns.n, columns.groups
    if columns.mode == "classwise":
        step = max(1, _CHUNK_ELEMENTS // max(1, n * columns.n_members))
        parts = []
        for a in range(0, groups, step):
            b = min(groups, a + step)
            cols = columns.p[:, :, a:b].permute(0, 2, 1).reshape(columns.n_members, -1)
            classes = torch.arange(a, b, device=y.device)
            outcome = (y[None, :] == classes[:, None]).reshape(-1).to(_F64)
            eu_rows = _member_variance(cols) if eu is None else eu[:, a:b].T.reshape(-1)
            offsets = torch.arange(b - a, device=y.device).repeat_interleave(n) * slots
            flat = torch.cat(ids[a:b]) + offsets
            parts.append(_eece_update(cols, outcome, eu_rows, flat, (b - a) * slots))
        sums = [torch.cat(part) for part in zip(*parts, strict=True)]
    else:
        cols = columns.single()
        outcome = (
            (y == columns.p.mean(dim=0).argmax(dim=1)) if columns.mode == "top_label" else y == 1
        )
        eu_rows = _member_variance(cols) if eu is None else eu
        sums = list(_eece_update(cols, outcome.to(_F64), eu_rows, ids[0], slots))
    stats = _eece_compute(*sums)
    per_group = stats.pop("weighted").view(groups, slots).sum(dim=1) / n
    return stats, per_group
