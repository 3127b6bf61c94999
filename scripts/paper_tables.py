"""Print the README's paper tables (Markdown) from ``bensemble reproduce`` report folders.

    PYTHONPATH=. python scripts/paper_tables.py --runs OUT --runs50 OUT50

``OUT`` holds the reports of ``bensemble reproduce {toy,size,noise,binning,digits,fashion,fig1}
--out OUT`` (fashion with ``--n-train 2000 --n-test 2000``) and ``OUT/index.md`` of
``bensemble reproduce all --reuse --out OUT``; ``OUT50`` the report of ``bensemble reproduce toy
--n-train 50 --out OUT50``. Nothing is computed here: every number is read from the reports'
JSON tables, so the README's tables regenerate from the runs that wrote them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _rows(folder: Path, name: str) -> list[dict]:
    path = folder / f"{name}.json"
    return json.loads(path.read_text())["rows"] if path.is_file() else []


def _ms(row: dict, key: str, digits: int = 3) -> str:
    value, sd = row.get(key), row.get(f"{key} sd")
    if value is None:
        return "-"
    return f"{value:.{digits}f}" + ("" if sd is None else f" ± {sd:.{digits}f}")


def _table(header: list[str], lines: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(line) + " |" for line in lines]
    return "\n".join(out)


def toy(runs: Path, runs50: Path) -> str:
    ten, fifty = _rows(runs / "toy", "toy"), _rows(runs50 / "toy", "toy")
    by50 = {r["method"]: r for r in fifty}
    lines = [[r["method"], _ms(r, "eece"), _ms(r, "tece"),
              _ms(by50.get(r["method"], {}), "eece"), _ms(by50.get(r["method"], {}), "tece")]
             for r in ten]  # fmt: skip
    head = ["method", "EECE, 10 points", "TECE, 10 points", "EECE, 50 points", "TECE, 50 points"]
    return _table(head, lines)


def toy_conventions(runs: Path, runs50: Path) -> str:
    ten = _rows(runs / "toy", "toy_conventions")
    fifty = {(r["method"], r["convention"]): r for r in _rows(runs50 / "toy", "toy_conventions")}
    lines = [[f"{r['method']} ({r['convention']})", _ms(r, "eece"), _ms(r, "tece"),
              _ms(fifty.get((r["method"], r["convention"]), {}), "eece"),
              _ms(fifty.get((r["method"], r["convention"]), {}), "tece")] for r in ten]  # fmt: skip
    head = ["method (convention)", "EECE, 10", "TECE, 10", "EECE, 50", "TECE, 50"]
    return _table(head, lines)


def verdicts(folder: Path, name: str, label: str = "", *, every: bool = False) -> list[list[str]]:
    """An experiment's verdict rows; stand-in values (not comparable) only with ``every``."""
    rows = []
    for v in _rows(folder / name, f"{name}_verdicts"):
        if not every and v["note"].startswith("the paper's value is MNIST's"):
            continue
        finding = v["row"] if v["quantity"] in v["row"] else f"{v['row']}: {v['quantity']}"
        rows.append([label or name, finding, str(v["paper"]), v["ours"], v["verdict"]])
    return rows


def likelihood(runs: Path) -> str:
    digits = _rows(runs / "digits", "likelihood_variants")
    fashion = {r["reading"]: r for r in _rows(runs / "fashion", "likelihood_variants")}
    lines = []
    for r in digits:
        f = fashion.get(r["reading"], {})
        lines.append([r["reading"] + (" (tables)" if r["in tables"] else ""), _ms(r, "mean EU"),
                      _ms(r, "eece"), r["EECE 95% interval"], _ms(f, "mean EU"), _ms(f, "eece"),
                      f.get("EECE 95% interval", "-")])  # fmt: skip
    head = ["reading", "digits: mean EU", "digits: EECE", "digits: 95% interval",
            "Fashion: mean EU", "Fashion: EECE", "Fashion: 95% interval"]  # fmt: skip
    return _table(head, lines)


def one_vs_all(runs: Path, name: str) -> str:
    lines = [[r["method"], _ms(r, "accuracy"), _ms(r, "ece"), _ms(r, "eece"),
              f"{r['paper accuracy']:.2f} / {r['paper ece']:.2f} / {r['paper eece']:.3f}"]
             for r in _rows(runs / name, f"{name}_summary")]  # fmt: skip
    head = ["method", "accuracy", "ECE", "EECE", "paper MNIST (acc. / ECE / EECE)"]
    return _table(head, lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--runs50", type=Path, required=True)
    args = parser.parse_args()
    print("### toy\n\n" + toy(args.runs, args.runs50))
    print("\n### toy conventions\n\n" + toy_conventions(args.runs, args.runs50))
    lines = verdicts(args.runs, "toy", "toy, 10 points") + verdicts(
        args.runs50, "toy", "toy, 50 points"
    )
    for name in ("size", "noise", "binning", "fig1", "digits", "fashion"):
        lines += verdicts(args.runs, name)
    print(
        "\n### verdicts\n\n" + _table(["experiment", "finding", "paper", "ours", "verdict"], lines)
    )
    print("\n### likelihood readings\n\n" + likelihood(args.runs))
    for name in ("digits", "fashion"):
        print(f"\n### {name} summary\n\n" + one_vs_all(args.runs, name))


if __name__ == "__main__":
    main()
