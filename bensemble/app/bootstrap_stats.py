"""The headline numbers of a report as statistics of a bootstrap plan.

Shared by ``bensemble demo`` (its verdicts) and ``bensemble evaluate`` (its intervals): each
helper turns the per-sample quantities of one prediction into the plan's statistics, so that
all-ones weights reproduce the values the metric functions report (a test checks it), and
:func:`stage_intervals` turns the replicates into the report's interval rows.
"""

from __future__ import annotations

from typing import Any

import torch

from bensemble.app.bootstrap import BootstrapPlan, percentile_interval

__all__ = [
    "BIASED_METRICS",
    "STAGE_METRICS",
    "eece_partition",
    "per_sample_nll",
    "register_stage",
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


def per_sample_nll(probs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``-log(p_y + 1e-8)`` per sample, float64 (the terms of bensemble's NLL)."""
    p_y = probs.to(_F64).gather(1, labels[:, None]).squeeze(1)
    return -(p_y + _NLL_EPS).log()
