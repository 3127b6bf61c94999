"""The paper's findings (orderings, trends, the binning minimum), measured on result tables.

:func:`finding_rows` turns one experiment's tables into verdict rows (``row``, ``quantity``,
``paper``, ``ours``, ``verdict``) for the ``reproduce all`` index: the statements the paper makes
in words rather than numbers. Each is checked with a rule stated here, so a verdict is measured,
never asserted:

* **one-vs-all** (sections 4.3 and 5): the three illustrative methods have the three largest mean
  EECE ("the three illustrative methods still occupy the bottom of the ranking"); the random
  forest has the largest mean EECE of the six active methods ("Random Forest remains the worst
  epistemically calibrated model"); DropConnect and MC-Dropout are at least as well calibrated as
  the other two networks ("DropConnect and MC-Dropout proved to be better epistemically
  calibrated than their alternatives"). These are orderings, comparable across data sets.
* **Likelihood's EECE** (table 1: 0.14 on every MNIST task): the variant of
  :class:`~bensemble.methods.RelativeLikelihood` whose mean EECE comes closest to 0.14, judged
  with the usual tolerance (not comparable on the stand-in data sets, digits and Fashion-MNIST).
* **size** (section 4.2): the EECE of the paper's forest decreases with the training-set size
  (Spearman rho of mean EECE against ``n_train`` <= ``-RANK_RHO``).
* **noise** (section 4.2): it increases with the input corruption (rho >= ``RANK_RHO``).
* **binning** (fig. 5): the number of bins with the smallest mean ``|EECE - TECE|``, compared
  with the paper's "~200 bins" under the usual tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from bensemble.methods.zoo import ACTIVE_METHODS, ILLUSTRATIVE_METHODS

__all__ = ["RANK_RHO", "finding_rows", "spearman"]

#: A ranking or trend holds at |Spearman rho| >= this.
RANK_RHO = 0.6
#: The paper's best number of bins at 10,000 test points (fig. 5).
PAPER_BEST_BINS = 200
NETWORKS = ("DropConnect", "MC-Dropout", "Deep Ensemble", "Bayesian Deep")
Rows = Sequence[Mapping[str, Any]]


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


def _row(row: str, quantity: str, paper: str, ours: str, holds: bool) -> dict[str, Any]:
    verdict = "holds" if holds else "differs"
    return {"row": row, "quantity": quantity, "paper": paper, "ours": ours, "verdict": verdict}


def one_vs_all_findings(summary: Rows) -> list[dict[str, Any]]:
    """The paper's orderings of the nine methods' mean EECE, measured on a summary table."""
    eece = {r["method"]: float(r["eece"]) for r in summary}
    if not set(ILLUSTRATIVE_METHODS) | set(ACTIVE_METHODS) <= set(eece):
        return []
    ranked = sorted(eece, key=eece.get, reverse=True)
    worst3 = ranked[:3]
    active = {m: eece[m] for m in ACTIVE_METHODS}
    worst_active = max(active, key=active.get)
    best_pair = max(eece["DropConnect"], eece["MC-Dropout"])
    others = min(eece["Deep Ensemble"], eece["Bayesian Deep"])
    return [
        _row(
            "illustrative methods worst",
            "the 3 largest mean EECE",
            ", ".join(ILLUSTRATIVE_METHODS),
            ", ".join(f"{m} {eece[m]:.4f}" for m in worst3),
            set(worst3) == set(ILLUSTRATIVE_METHODS),
        ),
        _row(
            "Random Forest worst active",
            "largest mean EECE of the 6 active methods",
            "Random Forest",
            f"{worst_active} {active[worst_active]:.4f}"
            + (
                ""
                if worst_active == "Random Forest"
                else f" (Random Forest {active['Random Forest']:.4f})"
            ),
            worst_active == "Random Forest",
        ),
        _row(
            "DropConnect, MC-Dropout best networks",
            "max(DropConnect, MC-Dropout) <= min(Deep Ensemble, Bayesian Deep)",
            "yes (section 5)",
            f"{best_pair:.4f} vs {others:.4f}",
            best_pair <= others,
        ),
    ]


def likelihood_findings(variants: Rows, *, comparable: bool) -> list[dict[str, Any]]:
    """The Likelihood variant closest to the paper's MNIST EECE (0.14), with its verdict."""
    from bensemble.experiments.all import verdict

    rows = [r for r in variants if isinstance(r.get("paper EECE"), (int, float))]
    if not rows:
        return []
    paper = float(rows[0]["paper EECE"])
    best = min(rows, key=lambda r: abs(float(r["eece"]) - paper))
    default = next((r for r in rows if (r["supports"], r["eu"]) == ("count", "min")), None)
    ours = f"closest: supports={best['supports']}, eu={best['eu']} {best['eece']:.4f}"
    if default is not None:
        ours += f"; Nguyen's count/min {default['eece']:.4f}"
    return [
        {
            "row": "Likelihood EECE (MNIST 0.14)",
            "quantity": "mean EECE of the closest variant",
            "paper": paper,
            "ours": ours,
            "verdict": verdict(float(best["eece"]), paper, comparable=comparable),
        }
    ]


def _trend(rows: Rows, x: str, y: str, sign: int, what: str, paper: str) -> list[dict]:
    xs = [float(r[x]) for r in rows]
    ys = [float(r[y]) for r in rows if isinstance(r.get(y), (int, float))]
    if len(ys) != len(xs) or len(xs) < 3:
        return []
    rho = spearman(xs, ys)
    holds = math.isfinite(rho) and sign * rho >= RANK_RHO
    ours = f"Spearman rho {rho:+.2f} over {len(xs)} {x} values ({ys[0]:.4f} -> {ys[-1]:.4f})"
    return [_row(what, f"trend of {y} with {x}", paper, ours, holds)]


def binning_findings(rows: Rows) -> list[dict[str, Any]]:
    """The number of bins with the smallest mean ``|EECE - TECE|`` against the paper's ~200."""
    from bensemble.experiments.all import verdict

    key = "|EECE - TECE|"
    if not rows or key not in rows[0]:
        return []
    best = min(rows, key=lambda r: r[key])
    at_paper = next((r for r in rows if r["n_bins"] == PAPER_BEST_BINS), None)
    ours = f"{best['n_bins']} bins ({best[key]:.5f})"
    if at_paper is not None:
        ours += f"; at {PAPER_BEST_BINS}: {at_paper[key]:.5f}"
    return [
        {
            "row": "minimum of |EECE - TECE|",
            "quantity": "number of bins",
            "paper": f"~{PAPER_BEST_BINS}",
            "ours": ours,
            "verdict": verdict(best["n_bins"], PAPER_BEST_BINS),
        }
    ]


def finding_rows(name: str, tables: Mapping[str, Rows]) -> list[dict[str, Any]]:
    """The measured findings of experiment ``name`` (see the module doc); ``[]`` if none."""
    if name in ("digits", "fashion", "mnist", "cifar10"):
        summary = tables.get("summary") or tables.get(f"{name}_summary")
        out = one_vs_all_findings(summary) if summary else []
        comparable = name not in ("digits", "fashion")
        variants = tables.get("likelihood_variants") or []
        return out + likelihood_findings(variants, comparable=comparable)
    if name == "size" and tables.get("size"):
        paper = "decreases (.07 at 10 points, .007 beyond 50)"
        return _trend(tables["size"], "n_train", "EECE leaf5", -1, "EECE falls with size", paper)
    if name == "noise" and tables.get("noise"):
        paper = "increases (almost 10x at rho = 0.95)"
        return _trend(tables["noise"], "rho", "EECE leaf5", +1, "EECE grows with noise", paper)
    if name == "binning" and tables.get("binning"):
        return binning_findings(tables["binning"])
    return []
