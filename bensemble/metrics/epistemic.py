r"""Epistemic calibration: the EECE, the TECE, and the ECE of the mean prediction.

Following Hoarau's *Can we trust our models? Epistemic calibration in second-order
classification*. Binary task, ``H`` members, ``N`` points: member probabilities
``p[h, n] = P_h(y = 1 | x_n)`` ``[H, N]``, labels ``y [N]`` in {0, 1}.

* Mean prediction ``Delta[n] = mean_h p[h, n]``; epistemic uncertainty
  ``EU[n] = Var_h p[h, n]`` (population variance, divisor ``H``).
* Bins ``B_1..B_M`` partition the points by their whole member vector
  ``v_n = (p[1, n], ..., p[H, n])`` (K-means, see :mod:`bensemble.metrics._kmeans`).
* Per bin: ``acc_m`` the fraction of ``y = 1``, ``conf[h, m]`` the mean of ``p[h, .]``,
  ``trust_m`` the mean of ``EU``; the signed term is

  .. math:: t_m = \frac{1}{H}\sum_h (\mathrm{acc}_m - \mathrm{conf}_{h,m})^2 - \mathrm{trust}_m
            = (\mathrm{acc}_m - \overline{\mathrm{conf}}_m)^2 + \mathrm{Var}_h \mathrm{conf}_{h,m}
              - \mathrm{trust}_m

  and ``EECE = sum_m (|B_m| / N) |t_m|``.
* ``TECE = E_x | E_h[(pi(x) - h(x))^2] - EU(x) |`` with ``pi`` the true ``P(y = 1 | member
  vector)``; with the default ``EU`` it is ``E_x[(pi(x) - Delta(x))^2]``.

All sums are float64: per-bin counts and sums of ``y`` and ``EU`` come from one ``bincount`` each,
the ``[N, H]`` member matrix from one ``index_add_`` on the bin ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from bensemble._validation import (
    as_binary_member_probs,
    as_confidences,
    as_float_tensor,
    as_labels,
    as_member_probs,
    check_n_bins,
    check_option,
)
from bensemble.metrics._binning import bin_sums
from bensemble.metrics._kmeans import (
    DEFAULT_REFINE,
    DEFAULT_SUBSAMPLE,
    MIN_MINIBATCH,
    _assign,
    _check_centroids,
    _check_fit_options,
    _fit,
    resolve_seed,
)
from bensemble.metrics._kmeans_batched import map_classes
from bensemble.metrics.calibration import calibration_error

__all__ = [
    "EECEDetails",
    "expected_epistemic_calibration_error",
    "true_epistemic_calibration_error",
    "binary_calibration_error",
]

BINNINGS = ("kmeans", "kmeans_fit")
MULTICLASS = ("classwise", "top_label")
CONDITION_ON = ("x", "psi")
_F64 = torch.float64


@dataclass(frozen=True, eq=False)
class EECEDetails:
    """Per-bin ingredients of an EECE (float64 tensors; an empty bin holds NaN, count 0).

    For ``multiclass="classwise"`` every per-bin field has a leading class axis ``[K, M]`` (``M``
    the largest number of bins of any class; shorter classes are padded with empty bins) and
    :attr:`value` is the mean of :attr:`per_class`.

    Attributes:
        value: the EECE.
        counts: ``[M]`` points per bin ``|B_m|``.
        acc: ``[M]`` fraction of positives ``acc_m``.
        mean_delta: ``[M]`` mean over members of ``conf[h, m]`` (= mean of ``Delta`` in the bin).
        member_variance: ``[M]`` ``Var_h conf[h, m]`` (population variance).
        trust: ``[M]`` mean reported epistemic uncertainty ``trust_m``.
        squared_error: ``[M]`` the members' squared error ``mean_h (acc_m - conf[h, m])^2``.
        terms: ``[M]`` signed terms ``squared_error - trust``.
        per_class: ``[K]`` per-class EECE for "classwise", else ``None``.
        binning: "kmeans", "kmeans_fit" or "bins" (explicit ids).
        backend: the K-means backend that ran ("auto" resolved), or ``None``.
        backend_settings: the backend's settings (per-class values are tuples).
        seed: the integer seed of the K-means fit, or ``None`` when nothing was random.
    """

    value: float
    counts: torch.Tensor
    acc: torch.Tensor
    mean_delta: torch.Tensor
    member_variance: torch.Tensor
    trust: torch.Tensor
    squared_error: torch.Tensor
    terms: torch.Tensor
    per_class: torch.Tensor | None = None
    binning: str = "kmeans"
    backend: str | None = None
    backend_settings: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None

    @property
    def weights(self) -> torch.Tensor:
        """``|B_m| / N`` (per class for "classwise"): ``value == (weights * |terms|).nansum()``
        (divided by ``K`` for "classwise")."""
        return self.counts / self.counts.sum(-1, keepdim=True)


# ----------------------------------------------------------------------------- kernels


def _member_variance(cols: torch.Tensor, chunk: int = 1 << 16) -> torch.Tensor:
    """Population variance over members of ``cols [H, R]`` -> ``[R]``: the two-pass formula
    (mean, then mean squared deviation), a block of columns at a time. About 3x faster than
    ``torch.var`` over the member axis, without a full-size temporary."""
    out = torch.empty(cols.shape[1], dtype=_F64, device=cols.device)
    for start in range(0, cols.shape[1], chunk):
        block = cols[:, start : start + chunk]
        dev = block - block.mean(dim=0)
        out[start : start + chunk] = dev.mul_(dev).mean(dim=0)
    return out


def _eece_update(
    cols: torch.Tensor, y: torch.Tensor, eu: torch.Tensor, ids: torch.Tensor, n_slots: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-bin sufficient statistics in one pass each.

    Args:
        cols: ``[H, R]`` float64 member probabilities, one column per row (point).
        y: ``[R]`` float64 0/1 outcomes.
        eu: ``[R]`` float64 reported epistemic uncertainty.
        ids: ``[R]`` int64 bin ids in ``[0, n_slots)``.
        n_slots: number of bins.

    Returns:
        ``(counts [B], sum_y [B], sum_eu [B], sum_p [B, H])``.
    """
    counts, sum_y, sum_eu = bin_sums(ids, n_slots, y, eu)
    # index_add_ along the point axis of the [H, R] layout: 2-4x faster than on its transpose.
    sum_p = torch.zeros(cols.shape[0], n_slots, dtype=_F64, device=cols.device)
    sum_p.index_add_(1, ids, cols)
    return counts, sum_y, sum_eu, sum_p.T


def _eece_compute(
    counts: torch.Tensor, sum_y: torch.Tensor, sum_eu: torch.Tensor, sum_p: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Per-bin quantities from the sums (empty bins -> NaN) and the weighted ``|terms|``."""
    filled = counts > 0
    denom = counts.clamp_min(1.0)
    nan = torch.tensor(float("nan"), dtype=_F64, device=counts.device)
    acc = sum_y / denom
    conf = sum_p / denom[:, None]  # [B, H]
    trust = sum_eu / denom
    squared_error = ((acc[:, None] - conf) ** 2).mean(dim=1)
    terms = squared_error - trust
    out = {
        "counts": counts,
        "acc": acc,
        "mean_delta": conf.mean(dim=1),
        "member_variance": conf.var(dim=1, unbiased=False),
        "trust": trust,
        "squared_error": squared_error,
        "terms": terms,
    }
    out = {k: v if k == "counts" else torch.where(filled, v, nan) for k, v in out.items()}
    out["weighted"] = torch.where(filled, counts * terms.abs(), torch.zeros_like(counts))
    return out


# ----------------------------------------------------------------------------- validation


def _check_member_probs(member_probs: Any, fn: str) -> torch.Tensor:
    t = as_float_tensor(member_probs, "member_probs", fn, ndim=(2, 3), dtype=None)
    if t.ndim == 2:
        return as_binary_member_probs(t, "member_probs", fn)
    return as_member_probs(t, "member_probs", fn)


def _check_eu(eu: Any, shape: tuple[int, ...], fn: str) -> torch.Tensor:
    t = as_float_tensor(eu, "eu", fn, ndim=len(shape))
    if tuple(t.shape) != shape:
        raise ValueError(f"{fn}: `eu` must have shape {list(shape)} (got {list(t.shape)})")
    lo = float(t.min())
    if lo < 0:
        raise ValueError(f"{fn}: `eu` must be non-negative (got a minimum of {lo:.4g})")
    return t


def _check_bins(bins: Any, n: int, fn: str) -> torch.Tensor:
    ids = as_labels(bins, "bins", fn, n=n)
    lo = int(ids.min())
    if lo < 0:
        raise ValueError(f"{fn}: `bins` must hold bin ids >= 0 (got a minimum of {lo})")
    return ids


def _check_class_centroids(
    centroids: Any, n_classes: int, width: int, fn: str
) -> list[torch.Tensor]:
    """``[K, M, H]``, a sequence of ``K`` ``[M_k, H]`` centroid sets, or one shared ``[M, H]``."""
    if isinstance(centroids, Sequence) and not isinstance(centroids, (str, bytes)):
        items = list(centroids)
        if len(items) == n_classes and all(getattr(c, "ndim", 0) == 2 for c in items):
            return [
                _check_centroids(c, width, fn, name=f"centroids[{k}]") for k, c in enumerate(items)
            ]
    t = as_float_tensor(centroids, "centroids", fn, ndim=(2, 3))
    if t.ndim == 2:
        return [_check_centroids(t, width, fn)] * n_classes
    if t.shape[0] != n_classes:
        raise ValueError(
            f"{fn}: `centroids` must have one centroid set per class, shape [{n_classes}, M, "
            f"{width}] (got shape {list(t.shape)})"
        )
    return [_check_centroids(c, width, fn) for c in t]


# ----------------------------------------------------------------------------- binning


def _partition(
    vectors: torch.Tensor,
    *,
    binning: str,
    n_bins: int,
    centroids: torch.Tensor | None,
    backend: str,
    seed: int | None,
    fit_options: dict[str, Any],
) -> tuple[torch.Tensor, int, dict[str, Any]]:
    """Bin ids ``[N]``, the number of bins, and what the fit reports."""
    if binning == "kmeans_fit":
        ids, _ = _assign(vectors, centroids)
        return ids, centroids.shape[0], {}
    fit = _fit(vectors, n_bins, backend=backend, seed=seed, **fit_options)
    ids, _ = _assign(vectors, fit.centroids)
    info = {
        "backend": fit.backend,
        "n_bins_fitted": fit.centroids.shape[0],
        "n_iter": fit.n_iter,
        "converged": fit.converged,
        "n_fit_rows": fit.n_fit_rows,
        **fit.settings,
    }
    return ids, fit.centroids.shape[0], info


def _merge_infos(infos: list[dict[str, Any]]) -> tuple[str | None, dict[str, Any]]:
    """One settings dict: shared values once, per-class values as tuples."""
    if not infos or not infos[0]:
        return None, {}
    backend = infos[0]["backend"]
    merged: dict[str, Any] = {}
    for key in infos[0]:
        if key == "backend":
            continue
        values = tuple(info[key] for info in infos)
        merged[key] = values[0] if len(infos) == 1 or len(set(values)) == 1 else values
    return backend, merged


# ----------------------------------------------------------------------------- public API


def expected_epistemic_calibration_error(
    member_probs: Any,
    labels: Any,
    n_bins: int = 100,
    binning: str = "kmeans",
    eu: Any = None,
    multiclass: str = "classwise",
    generator: torch.Generator | None = None,
    seed: int | None = None,
    bins: Any = None,
    centroids: Any = None,
    backend: str = "auto",
    return_details: bool = False,
    *,
    subsample: int | None = DEFAULT_SUBSAMPLE,
    refine: int = DEFAULT_REFINE,
    max_iter: int = 300,
    tol: float = 1e-4,
    batch_size: int = MIN_MINIBATCH,
) -> float | EECEDetails:
    r"""Expected epistemic calibration error (EECE) of member predictions.

    .. math:: \mathrm{EECE} = \sum_m \frac{|B_m|}{N}\,\Bigl|\frac{1}{H}\sum_h
              (\mathrm{acc}_m - \mathrm{conf}_{h,m})^2 - \mathrm{trust}_m\Bigr|

    Bins are K-means cells of the member vectors ``v_n = p[:, n]`` (see the module docstring of
    :mod:`bensemble.metrics._kmeans` for the backends and their conventions). For ``K`` classes,
    ``"classwise"`` averages the binary EECE of the ``K`` one-vs-all tasks (each with its own
    bins, fitted with the same seed); ``"top_label"`` scores whether the argmax of the mean
    prediction is right, with members' probabilities of that class.

    Args:
        member_probs: ``[H, N]`` positive-class probabilities, or ``[H, N, K]`` class
            probabilities.
        labels: ``[N]`` integer labels (``{0, 1}`` for ``[H, N]``, ``[0, K)`` otherwise).
        n_bins: number of K-means bins ``M`` (capped at the number of distinct member vectors;
            clusters that end empty drop out).
        binning: ``"kmeans"`` (fit on these points) or ``"kmeans_fit"`` (assign each point to the
            nearest of the given ``centroids``, fitted on a separate split with
            :func:`~bensemble.metrics.fit_bins`).
        eu: reported epistemic uncertainty, ``[N]`` (``[N, K]`` for "classwise"); default the
            member variance ``Var_h p``. For methods whose EU is not the member variance.
        multiclass: ``"classwise"`` or ``"top_label"`` (ignored for ``[H, N]``).
        generator: source of the K-means seed.
        seed: the K-means seed (instead of ``generator``). The seed used is in the details.
        bins: ``[N]`` explicit bin ids (overrides ``binning``; shared by all classes).
        centroids: ``[M, H]`` (``[K, M, H]`` or a list of ``K`` ``[M_k, H]`` for "classwise")
            with ``binning="kmeans_fit"``.
        backend: K-means backend, one of ``"auto"``, ``"torch"``, ``"sklearn"``, ``"minibatch"``,
            ``"faiss"``.
        return_details: return an :class:`EECEDetails` instead of the float.
        subsample: K-means fits on this many seeded rows when ``N`` is larger (``None``: all).
        refine: after a subsample fit, this many Lloyd steps over all ``N`` rows.
        max_iter: maximum Lloyd iterations.
        tol: Lloyd tolerance relative to the mean feature variance.
        batch_size: mini-batch size of the ``"minibatch"`` backend.

    Returns:
        The EECE (lower is better), or the details.

    Example:
        >>> import torch
        >>> p = torch.tensor([[0.2, 0.2, 0.9, 0.9], [0.4, 0.4, 0.7, 0.7]])
        >>> y = torch.tensor([0, 1, 1, 1])
        >>> round(expected_epistemic_calibration_error(p, y, n_bins=2, seed=0), 4)
        0.04
    """
    fn = "expected_epistemic_calibration_error"
    p = _check_member_probs(member_probs, fn)
    n_members, n = p.shape[0], p.shape[1]
    n_bins = check_n_bins(n_bins, fn)
    check_option(binning, "binning", BINNINGS, fn)
    check_option(multiclass, "multiclass", MULTICLASS, fn)
    batch_size = _check_fit_options(fn, backend, subsample, refine, max_iter, tol, batch_size)
    if bins is not None and centroids is not None:
        raise ValueError(f"{fn}: pass either `bins` or `centroids`, not both (got both)")
    if bins is None and binning == "kmeans_fit" and centroids is None:
        raise ValueError(f"{fn}: `centroids` must be given with binning='kmeans_fit' (got None)")
    if bins is None and binning == "kmeans" and centroids is not None:
        raise ValueError(
            f"{fn}: `centroids` must be None with binning='kmeans' "
            "(pass binning='kmeans_fit' to use fitted centroids)"
        )
    classwise = p.ndim == 3 and multiclass == "classwise"
    n_classes = p.shape[2] if p.ndim == 3 else 2
    y = as_labels(labels, "labels", fn, n=n, num_classes=n_classes, device=p.device)
    ids_given = _check_bins(bins, n, fn) if bins is not None else None

    # Columns: [H, R] member probabilities and [R] outcomes, R = N (binary / top-label) or K * N
    # (classwise, class-major). The member vectors that K-means bins are the rows of cols.T.
    if classwise:
        cols = p.permute(0, 2, 1).reshape(n_members, n_classes * n)  # class-major copy
        outcome = (y[None, :] == torch.arange(n_classes, device=p.device)[:, None]).reshape(-1)
        eu_shape: tuple[int, ...] = (n, n_classes)
        groups = n_classes
    else:
        if p.ndim == 3:  # top label of the mean prediction
            top = p.mean(dim=0).argmax(dim=1)
            q = p.gather(2, top[None, :, None].expand(n_members, n, 1)).squeeze(2)
            outcome = y == top
        else:
            q = p
            outcome = y == 1
        cols = q
        eu_shape = (n,)
        groups = 1
    if eu is None:
        eu_rows = _member_variance(cols)
    else:
        eu_t = _check_eu(eu, eu_shape, fn).to(p.device)
        eu_rows = eu_t.T.reshape(-1) if classwise else eu_t

    class_centroids = None
    if ids_given is None and binning == "kmeans_fit":
        if classwise:
            class_centroids = _check_class_centroids(centroids, n_classes, n_members, fn)
        else:
            class_centroids = [_check_centroids(centroids, n_members, fn)]
    run_seed = None
    if ids_given is None and binning == "kmeans":
        run_seed = resolve_seed(generator, seed, fn)

    # Bin ids per class. A Python loop over classes is used ONLY here, because every class has
    # its own K-means fit; all statistics below are one vectorised pass over every class.
    if ids_given is not None:
        slots = int(ids_given.max()) + 1
        class_ids = [ids_given] * groups
        method, backend_name, settings = "bins", None, {}
    else:

        def _fit_class(k: int) -> tuple[torch.Tensor, int, dict[str, Any]]:
            return _partition(
                cols[:, k * n : (k + 1) * n].T,
                binning=binning,
                n_bins=n_bins,
                centroids=None if class_centroids is None else class_centroids[k],
                backend=backend,
                seed=run_seed,
                fit_options={
                    "subsample": subsample,
                    "refine": refine,
                    "max_iter": max_iter,
                    "tol": tol,
                    "batch_size": batch_size,
                },
            )

        # the K per-class fits run concurrently with single-threaded kernels (the results of
        # the sequential single-threaded loop; see bensemble.metrics._kmeans_batched)
        results = map_classes(_fit_class, groups) if groups > 1 else [_fit_class(0)]
        class_ids, class_slots, infos = (list(r) for r in zip(*results, strict=True))
        slots = max(class_slots)
        method = binning
        backend_name, settings = _merge_infos(infos)
    offsets = torch.arange(groups, device=p.device).repeat_interleave(n) * slots
    flat_ids = torch.cat(class_ids) + offsets

    sums = _eece_update(cols, outcome.to(_F64), eu_rows, flat_ids, groups * slots)
    stats = _eece_compute(*sums)
    per_class = stats.pop("weighted").view(groups, slots).sum(dim=1) / n
    value = float(per_class.mean())
    if not return_details:
        return value
    shape = (groups, slots) if classwise else (slots,)
    return EECEDetails(
        value=value,
        **{k: v.reshape(shape) for k, v in stats.items()},
        per_class=per_class if classwise else None,
        binning=method,
        backend=backend_name,
        backend_settings=settings,
        seed=run_seed,
    )


def true_epistemic_calibration_error(
    member_probs: Any, eta: Any, eu: Any = None, condition_on: str = "x"
) -> float:
    r"""True epistemic calibration error (TECE) against a known ``P(y = 1 | x)``.

    .. math:: \mathrm{TECE} = \frac{1}{N}\sum_n \Bigl|\frac{1}{H}\sum_h (\pi_n - p_{h,n})^2
              - \mathrm{EU}_n\Bigr|

    With the default ``EU = Var_h p`` each term is ``(pi_n - Delta_n)^2 >= 0``.

    Args:
        member_probs: ``[H, N]`` positive-class member probabilities.
        eta: ``[N]`` true ``P(y = 1 | x_n)`` (e.g. :func:`bensemble.datasets.toy_posterior`).
        eu: ``[N]`` reported epistemic uncertainty (default: the member variance).
        condition_on: ``"x"`` uses ``pi_n = eta_n``; ``"psi"`` conditions on the member vector:
            ``pi_n`` is the mean of ``eta`` over the points whose member vectors are identical to
            ``x_n``'s (needed for piecewise-constant models such as random forests).

    Returns:
        The TECE.

    Example:
        >>> import torch
        >>> p = torch.tensor([[0.2, 0.8], [0.4, 0.6]])
        >>> round(true_epistemic_calibration_error(p, torch.tensor([0.3, 0.5])), 4)
        0.02
    """
    fn = "true_epistemic_calibration_error"
    p = as_binary_member_probs(member_probs, "member_probs", fn)
    e = as_confidences(eta, "eta", fn).to(p.device)
    check_option(condition_on, "condition_on", CONDITION_ON, fn)
    n = p.shape[1]
    if e.shape[0] != n:
        raise ValueError(f"{fn}: `eta` must have length {n}, one per point (got {e.shape[0]})")
    eu_t = p.var(dim=0, unbiased=False) if eu is None else _check_eu(eu, (n,), fn).to(p.device)
    if condition_on == "psi":
        _, inverse = torch.unique(p.T, dim=0, return_inverse=True)
        counts, sums = bin_sums(inverse, int(inverse.max()) + 1, e)
        e = (sums / counts)[inverse]
    squared_error = ((e[None, :] - p) ** 2).mean(dim=0)
    return float((squared_error - eu_t).abs().mean())


def binary_calibration_error(
    member_probs: Any,
    labels: Any,
    n_bins: int = 15,
    *,
    norm: str = "l1",
    binning: str = "uniform",
) -> float:
    """The paper's ECE: the binned calibration error of the mean prediction ``Delta = P(y = 1)``.

    Confidences are ``Delta[n] = mean_h p[h, n]`` and outcomes ``y``, binned by
    :func:`bensemble.metrics.calibration_error` (``(lower, upper]`` equal-width bins by default).

    Args:
        member_probs: ``[H, N]`` positive-class member probabilities.
        labels: ``[N]`` labels in {0, 1}.
        n_bins: number of bins.
        norm: ``"l1"`` (ECE), ``"l2"`` or ``"max"``.
        binning: ``"uniform"`` or ``"quantile"``.

    Returns:
        The calibration error of ``Delta``.

    Example:
        >>> import torch
        >>> p = torch.tensor([[0.2, 0.9], [0.4, 0.7]])
        >>> round(binary_calibration_error(p, torch.tensor([0, 1]), n_bins=5), 4)
        0.25
    """
    fn = "binary_calibration_error"
    p = as_binary_member_probs(member_probs, "member_probs", fn)
    y = as_labels(labels, "labels", fn, n=p.shape[1], num_classes=2, device=p.device)
    return calibration_error(p.mean(dim=0), y, n_bins, norm=norm, binning=binning)
