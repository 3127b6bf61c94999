"""The paper's findings, measured repeat by repeat on an experiment's records.

The paper states some results in words - orderings of methods, trends, a best number of bins.
Each is checked here with a stated rule *in every repeat* (for the one-vs-all runs: in every
task of every repeat, the paper's own unit of repetition), and judged by
:func:`~bensemble.experiments.verdicts.finding_verdict` on the fraction of repeats where it holds:

* **toy** (section 4.1, fig. 3a): the illustrative methods are worst (each has a larger EECE than
  every active method), the random forest is the worst active method, Bayesian logistic
  regression is "almost perfectly" calibrated (TECE below :data:`BLR_TECE_TOLERANCE`);
* **one-vs-all** (sections 4.3, 5): the three illustrative methods have the three largest EECE;
  the random forest has the largest EECE of the six active methods; DropConnect and MC-Dropout
  are at least as well calibrated as the other two networks; the nine methods' EECE ranks like
  the paper's (Spearman's rho >= :data:`RANK_RHO` against the paper's row of that task);
* **trends** (section 4.2): the forest's EECE falls with the training-set size and grows with
  the input corruption (Spearman's rho of the repeat's sweep <= -RANK_RHO / >= RANK_RHO);
* **values** the text states (size, noise): :func:`value_verdicts` compares the repeats' values
  with :func:`~bensemble.experiments.verdicts.compare_values`.

Every function returns verdict rows (:func:`~bensemble.experiments.runner.verdict_row`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bensemble.experiments._repeats import mean_sd
from bensemble.experiments._scores import MEMBERS
from bensemble.experiments.runner import verdict_row
from bensemble.experiments.verdicts import compare_values, finding_verdict
from bensemble.methods.zoo import ACTIVE_METHODS, ILLUSTRATIVE_METHODS, PAPER_ORDER

__all__ = [
    "BLR_TECE_TOLERANCE",
    "RANK_RHO",
    "group_by",
    "one_vs_all_findings",
    "spearman",
    "toy_findings",
    "trend_finding",
    "value_verdicts",
]

#: A ranking or trend holds in a repeat at |Spearman rho| >= this.
RANK_RHO = 0.6
#: "Almost perfectly calibrated": a TECE below this.
BLR_TECE_TOLERANCE = 0.01
NETWORKS = ("DropConnect", "MC-Dropout", "Deep Ensemble", "Bayesian Deep")
Records = Sequence[Mapping[str, Any]]


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation (average ranks for ties); ``nan`` when a side is constant."""

    def ranks(v: Sequence[float]) -> list[float]:
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2.0
            i = j + 1
        return r

    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    den = math.sqrt(sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb))
    return cov / den if den else float("nan")


def group_by(records: Records, keys: Sequence[str]) -> dict[tuple, list[Mapping[str, Any]]]:
    """Records grouped by the values of ``keys`` (first-seen order)."""
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for record in records:
        groups.setdefault(tuple(record.get(k) for k in keys), []).append(record)
    return groups


def _means(units: Sequence[Mapping[str, float]], methods: Sequence[str]) -> dict[str, float]:
    return {m: mean_sd(u[m] for u in units)[0] for m in methods}


def _ordering_rows(
    units: Sequence[Mapping[str, float]], quick: bool, rows, unit: str = "repeats"
) -> list[dict]:
    """One verdict row per ``(name, quantity, paper, test, detail)`` of ``rows``."""
    out = []
    for name, quantity, paper, test, detail in rows:
        outcomes = [test(u) for u in units]
        verdict = finding_verdict(outcomes, quick=quick, detail=detail, unit=unit)
        out.append(verdict_row(name, quantity, paper, verdict))
    return out


def _worst_active(u: Mapping[str, float]) -> str:
    return max(ACTIVE_METHODS, key=lambda m: u[m])


def _worst_detail(mean: Mapping[str, float]) -> str:
    worst = _worst_active(mean)
    rf = "" if worst == "Random Forest" else f", Random Forest {mean['Random Forest']:.4f}"
    return f"means: worst active {worst} {mean[worst]:.4f}{rf}"


def toy_findings(config: Any, records: Records) -> list[dict[str, Any]]:
    """The toy's three findings, per repeat (``config.convention`` for the illustrative rows)."""
    keep = (MEMBERS, config.convention.label)
    units = []
    for group in group_by([r for r in records if r["convention"] in keep], ["seed"]).values():
        unit = {r["method"]: r["eece"] for r in group if r["method"] in PAPER_ORDER}
        unit["BLR TECE"] = next(r["tece"] for r in group if r["method"] == "Bayesian Log. Reg.")
        units.append(unit)
    mean = _means(units, (*PAPER_ORDER, "BLR TECE"))
    best_illus = min(ILLUSTRATIVE_METHODS, key=mean.get)
    worst = _worst_active(mean)
    said = "yes (section 4, fig. 3a)"
    return _ordering_rows(units, config.quick, [
        ("illustrative methods worst", "min illustrative EECE > max active EECE", said,
         lambda u: min(u[m] for m in ILLUSTRATIVE_METHODS) > max(u[m] for m in ACTIVE_METHODS),
         f"means: best illustrative {best_illus} {mean[best_illus]:.4f}, worst active "
         f"{worst} {mean[worst]:.4f}"),
        ("Random Forest worst active", "largest EECE of the 6 active methods", said,
         lambda u: _worst_active(u) == "Random Forest", _worst_detail(mean)),
        (f"BLR near perfect (TECE < {BLR_TECE_TOLERANCE:g})", "Bayesian Log. Reg. TECE",
         "yes (fig. 6a)", lambda u: u["BLR TECE"] < BLR_TECE_TOLERANCE,
         f"mean TECE {mean['BLR TECE']:.4f}"),
    ])  # fmt: skip


def one_vs_all_findings(
    config: Any, units: Sequence[Mapping[str, float]], paper_rows: Sequence[Sequence[float]]
) -> list[dict[str, Any]]:
    """The one-vs-all orderings over ``units`` (method -> EECE, one per task and repeat).

    ``paper_rows[i]`` is the paper's EECE of the nine methods (in ``PAPER_ORDER``) for unit
    ``i``'s task (for the ranking).
    """
    mean = _means(units, PAPER_ORDER)
    worst3 = sorted(PAPER_ORDER, key=mean.get, reverse=True)[:3]
    best_pair = max(mean["DropConnect"], mean["MC-Dropout"])
    others = min(mean["Deep Ensemble"], mean["Bayesian Deep"])
    rhos = [spearman([u[m] for m in PAPER_ORDER], list(p)) for u, p in zip(units, paper_rows)]
    units = [{**u, "rho": rho} for u, rho in zip(units, rhos)]
    finite = [r for r in rhos if math.isfinite(r)]
    rho_mean = sum(finite) / len(finite) if finite else float("nan")
    return _ordering_rows(units, config.quick, [
        ("illustrative methods worst", "the 3 largest EECE", ", ".join(ILLUSTRATIVE_METHODS),
         lambda u: set(sorted(PAPER_ORDER, key=u.get)[-3:]) == set(ILLUSTRATIVE_METHODS),
         "means: " + ", ".join(f"{m} {mean[m]:.4f}" for m in worst3)),
        ("Random Forest worst active", "largest EECE of the 6 active methods", "Random Forest",
         lambda u: _worst_active(u) == "Random Forest", _worst_detail(mean)),
        ("DropConnect, MC-Dropout best networks",
         "max(DropConnect, MC-Dropout) <= min(Deep Ensemble, Bayesian Deep)", "yes (section 5)",
         lambda u: max(u["DropConnect"], u["MC-Dropout"])
         <= min(u["Deep Ensemble"], u["Bayesian Deep"]),
         f"means: {best_pair:.4f} vs {others:.4f}"),
        ("ranking of the nine methods", f"Spearman rho with the paper's EECE row >= {RANK_RHO}",
         "rho = 1", lambda u: u["rho"] >= RANK_RHO,
         f"mean rho {rho_mean:+.2f}"),
    ], unit="tasks x repeats")  # fmt: skip


def trend_finding(
    config: Any, records: Records, x: str, y: str, sign: int, name: str, paper: str
) -> dict[str, Any]:
    """A monotone trend of ``y`` with ``x``, holding in a repeat when ``sign * rho >= RANK_RHO``."""
    outcomes, firsts, lasts = [], [], []
    for group in group_by(records, ["seed"]).values():
        xs, ys = [float(r[x]) for r in group], [float(r[y]) for r in group]
        rho = spearman(xs, ys)
        outcomes.append(math.isfinite(rho) and sign * rho >= RANK_RHO)
        firsts.append(ys[0])
        lasts.append(ys[-1])
    detail = f"mean {y} {mean_sd(firsts)[0]:.4f} -> {mean_sd(lasts)[0]:.4f}"
    verdict = finding_verdict(outcomes, quick=config.quick, detail=detail)
    return verdict_row(name, f"Spearman rho of {y} with {x}, per repeat", paper, verdict)


def value_verdicts(
    config: Any,
    records: Records,
    key: str,
    column: str,
    paper: Mapping[Any, str],
    *,
    label: Callable[[Any], str] = str,
) -> list[dict[str, Any]]:
    """Our repeats' ``column`` at each ``key`` value the paper gives a number for."""
    out = []
    for (value,), group in group_by(records, [key]).items():
        text = paper.get(value)
        if text is None:
            continue
        verdict = compare_values([r[column] for r in group], text, quick=config.quick)
        out.append(verdict_row(f"{key} = {label(value)}", column, text, verdict))
    return out
