"""The Likelihood method's variants on a one-vs-all run, beside the paper's MNIST value.

Every combination of :class:`~bensemble.methods.RelativeLikelihood`'s ``supports`` (``"count"``,
``"distance"``) and ``eu`` (``"min"``, ``"paper"``, ``"crossing"``) is fitted on each task and
scored under the default illustrative convention (:mod:`bensemble.experiments.illustrative`):
mean EU and EECE, averaged over the tasks. Count supports with Nguyen's ``min(pi(1), pi(0))``
cannot reach the paper's MNIST 0.14: where the 10 neighbours agree (most points) the EU is about
0.001.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from bensemble.experiments._common import aggregate, one_vs_all
from bensemble.experiments.illustrative import illustrative_scores
from bensemble.methods.relative_likelihood import EU_READINGS, SUPPORTS, RelativeLikelihood

__all__ = [
    "WHY_COUNTS",
    "likelihood_variant_records",
    "likelihood_variant_table",
    "write_likelihood_variants",
]

WHY_COUNTS = (
    "count supports with min(pi1, pi0) cannot reach the paper's 0.14: where the 10 neighbours "
    "agree (most points) the counts are (10, 0) and the EU is about 0.001"
)


def likelihood_variant_records(
    x_train: Any,
    y_train: Any,
    x_test: Any,
    y_test: Any,
    tasks: Sequence[tuple[int, str]],
    *,
    seed: int,
    n_bins: int,
    n_members: int,
) -> list[dict[str, Any]]:
    """One record per (task, supports, eu): ``mean EU``, ``accuracy``, ``eece``."""
    records = []
    x_tr = torch.as_tensor(x_train, dtype=torch.float64)
    x_te = torch.as_tensor(x_test, dtype=torch.float64)
    for k, name in tasks:
        yb_tr, yb_te = one_vs_all(y_train, k), one_vs_all(y_test, k)
        for supports in SUPPORTS:
            for eu in EU_READINGS:
                model = RelativeLikelihood(supports=supports, eu=eu).fit(x_tr, yb_tr)
                h = model.predict_proba(x_te)[:, 1]
                u = model.epistemic_uncertainty(x_te)
                s = illustrative_scores(h, u, yb_te, n_members=n_members, n_bins=n_bins, seed=seed)
                records.append(
                    {
                        "task": name,
                        "supports": supports,
                        "eu": eu,
                        "mean EU": float(u.mean()),
                        "accuracy": s["accuracy"],
                        "eece": s["eece"],
                    }
                )
    return records


def likelihood_variant_table(records: Sequence[dict[str, Any]], paper: float) -> list[dict]:
    """Mean over tasks (and repeats) per variant, with the paper's Likelihood EECE beside it."""
    rows = aggregate(records, ["supports", "eu"], ("mean EU", "accuracy", "eece"))
    for row in rows:
        row.pop("task", None)
        row["paper EECE"] = paper
    return rows


def write_likelihood_variants(name: str, records, tables: dict, report, printer) -> None:
    """Print the variant table (beside the paper's MNIST Likelihood EECE) and add it."""
    from bensemble.experiments.digits import paper_mean

    rows = likelihood_variant_table(records, paper_mean("eece", "Likelihood"))
    tables["likelihood_variants"] = rows
    title = f"{name}: Likelihood variants, default convention (mean over tasks)"
    printer.table(rows, title)
    printer(f"note: {WHY_COUNTS}")
    report.add_table("likelihood_variants", rows, title=title)
