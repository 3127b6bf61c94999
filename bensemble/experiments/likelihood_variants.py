"""The Likelihood method's readings on a one-vs-all run, beside the paper's MNIST value (0.14).

The paper's "likelihood-based approach [28] computes positive-class plausibility using 10 nearest
neighbours, where low plausibility for both classes indicates high epistemic uncertainty" leaves
the supports, the EU reading and the input scale open. :data:`VARIANTS` are the readings
:class:`~bensemble.methods.RelativeLikelihood` offers (:mod:`bensemble.methods.
relative_likelihood`), each fitted on every task and scored under the run's convention (the
same draws, seeded by the repeat, as the main table). The table gives the mean over tasks (and
repeats) and the 95% interval of a ten-task mean against the paper's 0.14
(:mod:`bensemble.experiments.verdicts`); on the stand-in data sets (digits, Fashion-MNIST) that
comparison is indicative only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bensemble.experiments._repeats import mean_sd
from bensemble.experiments._scores import one_vs_all
from bensemble.experiments.findings import group_by
from bensemble.experiments.illustrative import Convention, illustrative_scores
from bensemble.experiments.paper_values import paper_table
from bensemble.experiments.verdicts import compare_values
from bensemble.methods.relative_likelihood import READINGS, RelativeLikelihood

__all__ = ["VARIANTS", "likelihood_variant_records", "likelihood_variant_table"]

#: label -> RelativeLikelihood keyword arguments (the named readings, then every count /
#: distance combination of the paper's 10 neighbours).
VARIANTS: dict[str, dict[str, Any]] = {
    **{name: dict(kwargs) for name, kwargs in READINGS.items()},
    **{
        f"k=10, {s}, {e}": {"n_neighbors": 10, "supports": s, "eu": e, "rescale": "none"}
        for s in ("count", "distance")
        for e in ("min", "crossing")
    },
    "k=10, distance, min, rescaled": {
        "n_neighbors": 10, "supports": "distance", "eu": "min", "rescale": "unit_variance"
    },
    "k=7, ceil(sum 1/d), min": {
        "n_neighbors": 7, "supports": "inverse_distance", "eu": "min", "rescale": "none"
    },
}  # fmt: skip


def likelihood_variant_records(
    train: tuple[Any, Any],
    test: tuple[Any, Any],
    task: tuple[int, str],
    *,
    convention: Convention,
    seed: int,
    n_bins: int,
    n_members: int,
) -> list[dict[str, Any]]:
    """One record per reading of :data:`VARIANTS` on one-vs-all task ``(class, name)``."""
    (x_tr, y_tr), (x_te, y_te) = train, test
    k, name = task
    yb_tr, yb_te = one_vs_all(y_tr, k), one_vs_all(y_te, k)
    records = []
    for label, kwargs in VARIANTS.items():
        model = RelativeLikelihood(**kwargs).fit(x_tr, yb_tr)
        h, eu = model.predict_proba(x_te)[:, 1], model.epistemic_uncertainty(x_te)
        scores = illustrative_scores(
            h, eu, yb_te, trust=convention.trust, clip=convention.clip, n_members=n_members,
            n_bins=n_bins, seed=seed,
        )  # fmt: skip
        records.append({"kind": "variant", "task": name, "reading": label,
                        "mean EU": float(eu.mean()), **scores})  # fmt: skip
    return records


def likelihood_variant_table(
    records: Sequence[dict[str, Any]], *, quick: bool, reading_in_use: str
) -> list[dict[str, Any]]:
    """Per reading: mean (sd over tasks and repeats) of EU, accuracy, ECE, EECE; the interval
    of a ten-task mean against the paper's MNIST Likelihood EECE, and which reading the tables
    use."""
    paper = paper_table("table1").mean("eece", "Likelihood")
    rows = []
    for (label,), group in group_by([r for r in records if r["kind"] == "variant"],
                                    ["reading"]).items():  # fmt: skip
        row: dict[str, Any] = {
            "reading": label,
            "in tables": "yes" if label == reading_in_use else "",
        }
        for column in ("mean EU", "accuracy", "ece", "eece"):
            row[column], row[f"{column} sd"] = mean_sd(r[column] for r in group)
        verdict = compare_values([r["eece"] for r in group], paper, paper_repeats=10, quick=quick)
        row.update({"EECE 95% interval": verdict.interval, "paper EECE (MNIST)": "0.14",
                    "vs 0.14": verdict.verdict})  # fmt: skip
        rows.append(row)
    return rows
