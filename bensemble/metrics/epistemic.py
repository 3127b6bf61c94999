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

import statistics
import warnings
from typing import Any

import torch

from bensemble._validation import as_labels, check_option, check_positive, check_positive_int
from bensemble.metrics._eece_stats import (
    EECEDetails,
    _eece_compute,
    _eece_update,
    _member_variance,
)
from bensemble.metrics._epistemic_checks import (
    WARN_OCCUPANCY,
    auto_n_bins,
    canonical_member_order,
    check_bins,
    check_class_centroids,
    check_eu,
    check_flag,
    check_member_probs,
    check_n_seeds,
    merge_infos,
    partition,
    resolve_n_bins,
)
from bensemble.metrics._epistemic_targets import (
    binary_calibration_error,
    gaussian_draw_moments,
    illustrative_true_epistemic_calibration_error,
    true_epistemic_calibration_error,
)
from bensemble.metrics._kmeans import (
    DEFAULT_LLOYD_RTOL,
    DEFAULT_REFINE,
    DEFAULT_SUBSAMPLE,
    MIN_MINIBATCH,
    _check_centroids,
    _check_fit_options,
    resolve_seed,
)
from bensemble.metrics._kmeans_batched import map_classes
from bensemble.metrics._kmeans_classes import fit_classes

__all__ = [
    "EECEDetails",
    "auto_n_bins",
    "expected_epistemic_calibration_error",
    "true_epistemic_calibration_error",
    "gaussian_draw_moments",
    "illustrative_true_epistemic_calibration_error",
    "binary_calibration_error",
]

BINNINGS = ("kmeans", "kmeans_fit")
MULTICLASS = ("classwise", "top_label")
_F64 = torch.float64


# ----------------------------------------------------------------------------- public API


def expected_epistemic_calibration_error(
    member_probs: Any,
    labels: Any,
    n_bins: int | str = "auto",
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
    binary: bool = False,
    n_seeds: int = 1,
    subsample: int | None = DEFAULT_SUBSAMPLE,
    refine: int = DEFAULT_REFINE,
    max_iter: int = 300,
    tol: float = 1e-4,
    batch_size: int = MIN_MINIBATCH,
    coreset: int | None = None,
    lloyd_rtol: float = DEFAULT_LLOYD_RTOL,
) -> float | EECEDetails:
    r"""Expected epistemic calibration error (EECE) of member predictions.

    .. math:: \mathrm{EECE} = \sum_m \frac{|B_m|}{N}\,\Bigl|\frac{1}{H}\sum_h
              (\mathrm{acc}_m - \mathrm{conf}_{h,m})^2 - \mathrm{trust}_m\Bigr|

    Bins are K-means cells of the member vectors ``v_n = p[:, n]`` (see the module docstring of
    :mod:`bensemble.metrics._kmeans` for the backends and their conventions). For ``K`` classes,
    ``"classwise"`` averages the binary EECE of the ``K`` one-vs-all tasks (each with its own
    bins, fitted with the same seed); ``"top_label"`` scores whether the argmax of the mean
    prediction is right, with members' probabilities of that class.

    Members are exchangeable: they are first sorted into a canonical, data-derived order (by the
    bytes of each member's predictions), so any permutation of the member axis gives the
    identical value with the same seed, on every backend.

    The binning is random (K-means seeding). ``n_seeds=S`` fits ``S`` partitions with the seeds
    ``seed, seed + 1, ..., seed + S - 1`` and returns the mean EECE; the details hold every
    per-seed value and their standard deviation. Over 5 seeds the spread is a few percent of the
    value, and the default torch backend and scikit-learn's K-means (the paper's) give means a
    few percent apart (measured by ``benchmarks/eece_seed_spread.py``; see the README section
    "Epistemic calibration") - report the mean over seeds when such differences matter.

    Args:
        member_probs: ``[H, N, K]`` class probabilities, or with ``binary=True`` ``[H, N]``
            positive-class probabilities (a 2-D array is never read as members otherwise).
        labels: ``[N]`` integer labels (``{0, 1}`` with ``binary=True``, ``[0, K)`` otherwise).
        n_bins: number of K-means bins ``M``, or ``"auto"``: about ``sqrt(N)`` bins, at least 10
            points per bin on average, at most 200 (:func:`auto_n_bins`: 100 bins at the paper's
            10,000 test points). An integer must lie in ``[1, N]``. The bins actually fitted are
            capped at the number of distinct member vectors (clusters that end empty drop out);
            a ``UserWarning`` says when they hold fewer than 10 points on average.
        binning: ``"kmeans"`` (fit on these points) or ``"kmeans_fit"`` (assign each point to the
            nearest of the given ``centroids``, fitted on a separate split with
            :func:`~bensemble.metrics.fit_bins`).
        eu: reported epistemic uncertainty, ``[N]`` (``[N, K]`` for "classwise"); default the
            member variance ``Var_h p``. For methods whose EU is not the member variance.
        multiclass: ``"classwise"`` or ``"top_label"`` (ignored with ``binary=True``).
        generator: source of the K-means seed.
        seed: the K-means seed (instead of ``generator``). The seed used is in the details.
        bins: ``[N]`` explicit bin ids (overrides ``binning``; shared by all classes). Per-bin
            arrays follow the sorted distinct ids (``details.bin_ids``), whatever their values.
        centroids: ``[M, H]`` (``[K, M, H]`` or a list of ``K`` ``[M_k, H]`` for "classwise")
            with ``binning="kmeans_fit"``; columns in the order of the members given.
        backend: K-means backend, one of ``"auto"``, ``"torch"``, ``"sklearn"``, ``"minibatch"``,
            ``"faiss"``.
        return_details: return an :class:`EECEDetails` instead of the float.
        binary: ``member_probs`` is the binary positive-class form ``[H, N]``.
        n_seeds: number of K-means seeds to average (``binning="kmeans"`` only).
        subsample: K-means fits on this many seeded rows when ``N`` is larger (``None``: all).
        refine: after a subsample fit, this many Lloyd steps over all ``N`` rows.
        max_iter: maximum Lloyd iterations.
        tol: Lloyd tolerance relative to the mean feature variance.
        batch_size: mini-batch size of the ``"minibatch"`` backend.
        coreset: opt-in for "classwise" ``"torch"`` fits of more than ``2 * coreset`` rows: fit
            on a weighted coreset of this many rows (``fit_bins(..., coreset=...)``).
        lloyd_rtol: "classwise" ``"torch"`` fits stop Lloyd when a step lowers the inertia by
            at most this fraction of it (default ``3e-4``: 2.5-2.7x less CPU at 50,000 rows,
            inertia within 1% of the exact fit's, see :mod:`bensemble.metrics._kmeans_classes`);
            ``0``: the exact per-class fit. Top-label and binary fits are always exact.

    Returns:
        The EECE (lower is better; the mean over seeds), or the details.

    Example:
        >>> import torch
        >>> p = torch.tensor([[0.2, 0.2, 0.9, 0.9], [0.4, 0.4, 0.7, 0.7]])
        >>> y = torch.tensor([0, 1, 1, 1])
        >>> round(expected_epistemic_calibration_error(p, y, n_bins=2, seed=0, binary=True), 4)
        0.04
    """
    fn = "expected_epistemic_calibration_error"
    p = check_member_probs(member_probs, fn, binary)
    n_members, n = p.shape[0], p.shape[1]
    check_option(binning, "binning", BINNINGS, fn)
    check_option(multiclass, "multiclass", MULTICLASS, fn)
    return_details = check_flag(return_details, "return_details", fn)
    n_seeds = check_n_seeds(n_seeds, fn)
    batch_size = _check_fit_options(fn, backend, subsample, refine, max_iter, tol, batch_size)
    if coreset is not None:
        check_positive_int(coreset, "coreset", fn)
    check_positive(lloyd_rtol, "lloyd_rtol", fn, allow_zero=True)
    if bins is not None and centroids is not None:
        raise ValueError(f"{fn}: pass either `bins` or `centroids`, not both (got both)")
    if bins is None and binning == "kmeans_fit" and centroids is None:
        raise ValueError(f"{fn}: `centroids` must be given with binning='kmeans_fit' (got None)")
    if bins is None and binning == "kmeans" and centroids is not None:
        raise ValueError(
            f"{fn}: `centroids` must be None with binning='kmeans' "
            "(pass binning='kmeans_fit' to use fitted centroids)"
        )
    random_bins = bins is None and binning == "kmeans"
    if n_seeds > 1 and not random_bins:
        raise ValueError(
            f"{fn}: `n_seeds` must be 1 unless binning='kmeans' fits the bins (got {n_seeds} "
            "with explicit bins or centroids, which involve no randomness)"
        )
    n_bins = resolve_n_bins(n_bins, n, fn) if random_bins else None
    classwise = p.ndim == 3 and multiclass == "classwise"
    n_classes = p.shape[2] if p.ndim == 3 else 2
    y = as_labels(labels, "labels", fn, n=n, num_classes=n_classes, device=p.device)
    bin_ids = dense_ids = None
    if bins is not None:
        bin_ids, dense_ids = check_bins(bins, n, fn)
        dense_ids = dense_ids.to(p.device)
    class_centroids = None
    if bins is None and binning == "kmeans_fit":
        if classwise:
            class_centroids = check_class_centroids(centroids, n_classes, n_members, fn)
        else:
            class_centroids = [_check_centroids(centroids, n_members, fn)]
    if random_bins:
        run_seed = resolve_seed(generator, seed, fn)

    # Exchangeable members: one canonical order before anything order-sensitive.
    order = canonical_member_order(p)
    if order is not None:
        p = p[order]
        if class_centroids is not None:
            class_centroids = [c[:, order.to(c.device)] for c in class_centroids]

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
        eu_t = check_eu(eu, eu_shape, fn).to(p.device)
        eu_rows = eu_t.T.reshape(-1) if classwise else eu_t
    outcome = outcome.to(_F64)

    def partitions(run: int | None) -> tuple[list[torch.Tensor], int, str, str | None, dict]:
        """Bin ids per class. A Python loop over classes is used ONLY here, because every class
        has its own K-means fit; all statistics are one vectorised pass over every class."""
        if dense_ids is not None:
            return [dense_ids] * groups, int(bin_ids.numel()), "bins", None, {}

        options = {"subsample": subsample, "refine": refine, "max_iter": max_iter, "tol": tol}
        if classwise:  # the classwise fit options
            options.update(coreset=coreset, lloyd_rtol=lloyd_rtol)

        def vectors(k: int) -> torch.Tensor:
            return cols[:, k * n : (k + 1) * n].T

        def fit_class(k: int) -> tuple[torch.Tensor, int, dict[str, Any]]:
            return partition(
                vectors(k),
                binning=binning,
                n_bins=n_bins,
                centroids=None if class_centroids is None else class_centroids[k],
                backend=backend,
                seed=run,
                fit_options={**options, "batch_size": batch_size},
            )

        # the K per-class fits: "torch" ones batched (bensemble.metrics._kmeans_classes), others
        # concurrently (._kmeans_batched); both single-threaded, the results of the 1-thread loop
        if groups > 1 and binning == "kmeans" and backend in ("auto", "torch"):
            results = fit_classes(vectors, groups, n_bins, seed=run, fallback=fit_class, **options)
        else:
            results = map_classes(fit_class, groups) if groups > 1 else [fit_class(0)]
        class_ids, class_slots, infos = (list(r) for r in zip(*results, strict=True))
        return class_ids, max(class_slots), binning, *merge_infos(infos)

    seeds = [(run_seed + i) % 2**63 for i in range(n_seeds)] if random_bins else [None]
    values, first = [], None
    for run in seeds:
        class_ids, slots, method, backend_name, settings = partitions(run)
        offsets = torch.arange(groups, device=p.device).repeat_interleave(n) * slots
        flat_ids = torch.cat(class_ids) + offsets
        stats = _eece_compute(*_eece_update(cols, outcome, eu_rows, flat_ids, groups * slots))
        per_class = stats.pop("weighted").view(groups, slots).sum(dim=1) / n
        values.append(float(per_class.mean()))
        if first is None:
            first = (stats, per_class, slots, method, backend_name, settings, class_ids)
    stats, per_class, slots, method, backend_name, settings, class_ids = first
    fitted = int((stats["counts"].view(groups, slots) > 0).sum(dim=1).max())
    if n / fitted < WARN_OCCUPANCY:
        # One text for every call, so that Python's default filter shows it once per call site
        # (a sweep over many tasks does not flood the log); the numbers are in the details.
        warnings.warn(
            f"{fn}: bins hold fewer than {WARN_OCCUPANCY} points on average (N / "
            "details.n_bins_fitted); the per-bin errors are noise-dominated - use fewer bins "
            "(n_bins='auto') or more points",
            UserWarning,
            stacklevel=2,
        )
    value = values[0] if len(values) == 1 else statistics.fmean(values)
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
        seed=seeds[0],
        n_bins=n_bins,
        n_bins_fitted=fitted,
        bin_ids=bin_ids,
        seeds=tuple(seeds) if random_bins else (),
        seed_values=tuple(values),
        seed_sd=statistics.stdev(values) if len(values) > 1 else None,
        point_bins=torch.stack(class_ids) if classwise else class_ids[0],
    )
