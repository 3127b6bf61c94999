"""Print the README's paper tables (Markdown) from ``bensemble reproduce`` report folders.

    PYTHONPATH=. python scripts/paper_tables.py --runs OUT --runs50 OUT50
    PYTHONPATH=. python scripts/paper_tables.py --runs OUT --runs50 OUT50 \
        --results benchmarks/paper_results.md

``OUT`` holds the reports of ``bensemble reproduce {toy,size,noise,binning,digits,fashion,fig1}
--out OUT`` (fashion with ``--n-train 2000 --n-test 2000``) and ``OUT/index.md`` of
``bensemble reproduce all --reuse --out OUT``; ``OUT50`` the report of ``bensemble reproduce toy
--n-train 50 --out OUT50``. Nothing is computed here: every number is read from the reports'
JSON tables, so the README's tables regenerate from the runs that wrote them. ``--results FILE``
also writes the full tables of every report (``benchmarks/paper_results.md``), each under the
command that wrote it, with the verdicts recomputed by today's rule.
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
    def cells(values: list[str]) -> str:
        return "| " + " | ".join(str(v).replace("|", "\\|") for v in values) + " |"

    return "\n".join([cells(header), "|" + "---|" * len(header), *(cells(line) for line in lines)])


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
    """An experiment's verdicts, recomputed from its stored repeats with today's rule (as
    ``reproduce all --reuse`` does); stand-in values (not comparable) only with ``every``."""
    from bensemble.experiments.all import _options_of, load_report, verdicts_of

    if not (folder / name / "summary.json").is_file():
        return [[label or name, "(not run)", "", "", ""]]
    result = load_report(folder / name, name)
    rows = []
    for v in verdicts_of(name, result, _options_of(result)):
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


#: (heading command, folder key, report name, tables) of ``--results``.
RESULTS = (
    ("bensemble reproduce toy", "runs", "toy", ("toy", "toy_conventions")),
    ("bensemble reproduce toy --n-train 50", "runs50", "toy", ("toy", "toy_conventions")),
    ("bensemble reproduce size", "runs", "size", ("size",)),
    ("bensemble reproduce noise", "runs", "noise", ("noise",)),
    ("bensemble reproduce binning", "runs", "binning", ("binning",)),
    ("bensemble reproduce fig1", "runs", "fig1", ("fig1_forests", "smooth_bias")),
    ("bensemble reproduce digits", "runs", "digits",
     ("digits_summary", "digits_conventions", "likelihood_variants", "digits_table")),
    ("bensemble reproduce fashion --n-train 2000 --n-test 2000", "runs", "fashion",
     ("fashion_summary", "fashion_conventions", "likelihood_variants", "fashion_table")),
)  # fmt: skip


def results(folders: dict[str, Path]) -> str:
    """Every report's tables and recomputed verdicts, under the command that wrote them."""
    from bensemble.experiments.all import _options_of, load_report, verdicts_of
    from bensemble.experiments.runner import VERDICT_COLUMNS
    from bensemble.reporting.report import markdown_table

    out = [
        "# The paper's experiments: measured tables",
        "",
        "Written by `PYTHONPATH=. python scripts/paper_tables.py --runs OUT --runs50 OUT50 "
        "--results benchmarks/paper_results.md` from the reports of the commands in the "
        "headings (each report folder also holds CSV, JSON, the figures, every repeat's scores "
        "and `summary.json`), run on the shared 2-core development machine under heavy load "
        "(`nice -n 10`, about a dozen other jobs), so the run times are pessimistic. Values are "
        "mean ± sd over repeats, or, for the one-vs-all runs (one repeat), over the ten tasks. "
        "The verdicts are recomputed from the stored repeats by `bensemble.experiments."
        "verdicts` (as `bensemble reproduce all --reuse`).",
        "",
    ]
    for command, key, name, stems in RESULTS:
        folder = folders[key] / name
        out += [f"## `{command}`", ""]
        if not (folder / "summary.json").is_file():
            out += ["Not run.", ""]
            continue
        result = load_report(folder, name)
        out += [f"{result.elapsed:.0f} s wall.", ""]
        for stem in stems:
            text = (folder / f"{stem}.md").read_text().strip().splitlines()
            out += ["#" + text[0], *text[1:], ""]
        rows = verdicts_of(name, result, _options_of(result))
        out += [f"### {name}: verdicts", "", markdown_table(rows, list(VERDICT_COLUMNS), 4), ""]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--runs50", type=Path, required=True)
    parser.add_argument("--results", type=Path, default=None, help="also write the full tables")
    args = parser.parse_args()
    if args.results is not None:
        args.results.write_text(results({"runs": args.runs, "runs50": args.runs50}))
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
