"""Intervals, selective-prediction scores and per-class rows of ``bensemble evaluate`` / ``demo``.

Everything here is measured on the reported (test) part and never changes a number the metric
functions report: the intervals of :func:`stage_intervals` are percentile bootstrap intervals
(:mod:`bensemble.app.bootstrap`) around the values of :mod:`bensemble.metrics`, and a test
proves that all-ones weights reproduce those values.

Definitions (the tables' notes repeat them):

* ``error_auroc``: misclassification AUROC of the score ``1 - max_k p_k`` (larger = more likely
  wrong; a sample is wrong when the argmax, first index on ties, differs from its label); 0.5 is
  chance, 1 a perfect ranking. ``None`` when the part has no error or only errors.
* ``aurc``: area under the risk-coverage curve of the confidence ``max_k p_k``
  (:func:`bensemble.metrics.aurc`, lower is better; ties spread evenly).
"""

from __future__ import annotations

from typing import Any

import torch

from bensemble.app.bootstrap import BootstrapPlan, percentile_interval

__all__ = [
    "STAGE_METRICS",
    "class_rows",
    "eece_partition",
    "per_class_rows",
    "per_sample_nll",
    "register_stage",
    "selective_from_confidence",
    "selective_scores",
    "stage_intervals",
]

#: Metrics of one stage that get an interval, in table order.
STAGE_METRICS = ("accuracy", "nll", "brier", "ece", "classwise_ece", "error_auroc", "aurc")
_F64 = torch.float64
_NLL_EPS = 1e-8  # bensemble's negative_log_likelihood(eps=1e-8)


def _top(probs: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    pred = probs.argmax(1)
    conf = probs.gather(1, pred[:, None]).squeeze(1)
    return conf, (pred == labels).to(_F64)


def selective_scores(probs: torch.Tensor, labels: torch.Tensor) -> dict[str, float | None]:
    """``error_auroc`` and ``aurc`` of ``probs [n, K]`` (definitions: module docstring)."""
    conf, correct = _top(probs, labels)
    return selective_from_confidence(conf.to(_F64), correct)


def selective_from_confidence(conf: torch.Tensor, correct: torch.Tensor) -> dict[str, float | None]:
    """:func:`selective_scores` from the confidences ``max_k p_k [n]`` (float64) and the
    correctness ``[n]`` (float64 0/1 or bool) alone (``--chunk-size`` gathers these two)."""
    from bensemble.metrics import aurc, auroc

    correct = correct.to(_F64)
    errors = int((correct == 0).sum())
    both = 0 < errors < correct.shape[0]
    return {
        "error_auroc": auroc(1.0 - conf.to(_F64), 1.0 - correct) if both else None,
        "aurc": aurc(conf.to(_F64), correct),
    }


def selective_from_gathered(
    conf: torch.Tensor, correct: torch.Tensor, block: int
) -> dict[str, float | None]:
    """:func:`selective_from_confidence` with one float64 of extra memory per sample and
    ``O(block)`` temporaries (the chunked path's gathered ``conf [n]`` float64 and ``correct [n]``
    bool; no sort index, see :mod:`bensemble.metrics._selective_sorted`): the same numbers up to
    float64 summation order."""
    from bensemble.metrics._selective_sorted import aurc_sorted, error_auroc_sorted

    c = conf.to(_F64).numpy()
    ok = correct.to(torch.bool).numpy()
    return {
        "error_auroc": error_auroc_sorted(c, ok, block=block),
        "aurc": aurc_sorted(c, ok, block=block),
    }


def register_stage(
    plan: BootstrapPlan, prefix: str, probs: torch.Tensor, labels: torch.Tensor, n_bins: int
) -> None:
    """Register the :data:`STAGE_METRICS` of one prediction ``probs [n, K]`` as ``prefix:name``."""
    from bensemble.metrics._binning import uniform_bin_ids

    k = probs.shape[1]
    conf, correct = _top(probs, labels)
    p64 = probs.to(_F64)
    onehot = torch.nn.functional.one_hot(labels, k).to(_F64)
    plan.mean(f"{prefix}:accuracy", correct)
    plan.mean(f"{prefix}:nll", per_sample_nll(probs, labels))
    plan.mean(f"{prefix}:brier", ((p64 - onehot) ** 2).sum(1))
    # the bins of expected_calibration_error: confidences compared in their own dtype
    plan.binned_gap(
        f"{prefix}:ece", uniform_bin_ids(conf, n_bins), correct - conf.to(_F64), n_bins + 1
    )
    if plan.room(f"{prefix}:classwise_ece", probs.numel()):
        ids = uniform_bin_ids(probs, n_bins)
        plan.binned_gap(f"{prefix}:classwise_ece", ids, onehot - p64, n_bins + 1)
    plan.selective(f"{prefix}:error_auroc", f"{prefix}:aurc", conf.to(_F64), correct)


def eece_partition(
    member_probs: torch.Tensor, labels: torch.Tensor, details: Any, *, binary: bool = False
) -> dict[str, Any]:
    """The arguments of :meth:`BootstrapPlan.eece` for the partition behind ``details``.

    The bins are ``details.point_bins`` (the first seed's partition of
    :func:`bensemble.metrics.expected_epistemic_calibration_error`, nothing refitted); the
    member columns are put in the same canonical member order, so all-ones weights give
    ``details.seed_values[0]`` (a test checks it). The bins stay fixed in every replicate.
    """
    from bensemble.metrics._eece_stats import _member_variance
    from bensemble.metrics._epistemic_checks import canonical_member_order, check_member_probs

    fn = "eece_partition"
    if getattr(details, "point_bins", None) is None:
        raise ValueError(
            f"{fn}: `details` must carry the per-point bins (EECEDetails.point_bins) (got "
            f"{type(details).__name__} without them)"
        )
    p = check_member_probs(member_probs, fn, binary)
    order = canonical_member_order(p)
    if order is not None:
        p = p[order]
    h, n = p.shape[0], p.shape[1]
    y = labels.to(p.device)
    if p.ndim == 3:  # classwise, class-major
        k = p.shape[2]
        cols = p.permute(0, 2, 1).reshape(h, k * n)
        outcome = (y[None, :] == torch.arange(k)[:, None]).reshape(-1).to(_F64)
    else:
        k, cols, outcome = 1, p, (y == 1).to(_F64)
    slots = details.counts.shape[-1]
    ids = details.point_bins.reshape(k, n).to(torch.int64)
    flat = (ids + torch.arange(k)[:, None] * slots).reshape(-1)
    eu = _member_variance(cols)
    return {
        "cols": cols,
        "outcome": outcome,
        "eu": eu,
        "flat_ids": flat,
        "groups": k,
        "slots": slots,
    }


#: Binned calibration errors: their intervals are bias-corrected (:func:`percentile_interval`).
BIASED_METRICS = ("ece", "classwise_ece", "eece")


def _row(stage: str, metric: str, value: Any, values: torch.Tensor | None) -> dict[str, Any]:
    debias = value if metric in BIASED_METRICS and value is not None else None
    ci = None
    if values is not None and values.numel() > 0:
        ci = percentile_interval(values, debias_from=debias)
    return {
        "stage": stage,
        "metric": metric,
        "value": value,
        "ci_low": None if ci is None else ci[0],
        "ci_high": None if ci is None else ci[1],
    }


def stage_intervals(
    replicates: dict[str, torch.Tensor], reported: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """Rows ``stage, metric, value, ci_low, ci_high``: one per registered ``stage:metric``.

    ``reported`` maps a stage to its reported numbers (the ``value`` column); a metric missing
    there (e.g. an AUROC without errors) gets ``value`` ``None``.
    """
    rows = []
    for key, values in replicates.items():
        stage, metric = key.split(":", 1)
        rows.append(_row(stage, metric, reported.get(stage, {}).get(metric), values))
    return rows


def per_class_rows(
    probs: torch.Tensor,
    labels: torch.Tensor,
    n_bins: int,
    *,
    scaled: torch.Tensor | None = None,
    sets: torch.Tensor | None = None,
) -> list[dict[str, Any]]:
    """One row per class: ``support``, ``accuracy`` (recall), ``classwise_ece`` (that class's
    term of the classwise ECE, ``sum_b |B_kb| / N |acc - conf|``; after scaling too with
    ``scaled``) and ``coverage`` of the conformal ``sets`` among that class's samples."""
    from bensemble.conformal import per_class_coverage
    from bensemble.metrics.calibration import _classwise_stats, _norm_from_sums

    k = probs.shape[1]
    support = torch.bincount(labels, minlength=k)
    hits = torch.bincount(labels, weights=(probs.argmax(1) == labels).to(_F64), minlength=k)
    cols = {"support": support.tolist(), "accuracy": (hits / support.clamp_min(1)).tolist()}
    stages = (
        {"classwise_ece": probs}
        if scaled is None
        else {
            "classwise_ece_unscaled": probs,
            "classwise_ece_scaled": scaled,
        }
    )
    for name, p in stages.items():  # binned in their own dtype, as the metric does
        cols[name] = _norm_from_sums(*_classwise_stats(p, labels, n_bins, "uniform"), "l1").tolist()
    if sets is not None:
        cols["coverage"] = per_class_coverage(sets, labels).tolist()
    return class_rows(cols)


def class_rows(cols: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """The rows of :func:`per_class_rows` from its columns (``support`` and ``accuracy`` first;
    ``accuracy`` ``None`` for a class without support)."""
    k = len(cols["support"])
    rows = []
    for c in range(k):
        row: dict[str, Any] = {"class": c}
        row.update({name: values[c] for name, values in cols.items()})
        if row["support"] == 0:
            row["accuracy"] = None
        rows.append(row)
    return rows


def per_sample_nll(probs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``-log(p_y + 1e-8)`` per sample, float64 (the terms of bensemble's NLL)."""
    p_y = probs.to(_F64).gather(1, labels[:, None]).squeeze(1)
    return -(p_y + _NLL_EPS).log()
