"""Tables and figures of a one-vs-all run (:mod:`bensemble.experiments.one_vs_all`).

* ``<name>_per_task``: per task and method, mean ± sd over repeats, the paper's printed value;
* ``<name>_summary``: per method, the mean over tasks, the sd across tasks, the paper's mean;
* ``<name>_table``: the paper's layout, "ours (paper)" cells;
* ``<name>_conventions``: the illustrative methods under every scoring convention;
* ``likelihood_variants``: the Likelihood's readings (:mod:`bensemble.experiments.
  likelihood_variants`);
* figures: mean EECE and ECE per method beside the paper's, and fig. 4(a).
"""

from __future__ import annotations

from typing import Any

from bensemble.experiments._common import aggregate
from bensemble.experiments._plotting import bar_figure
from bensemble.experiments._scores import MEMBERS
from bensemble.experiments.findings import group_by
from bensemble.experiments.likelihood_variants import likelihood_variant_table
from bensemble.experiments.paper_values import paper_table
from bensemble.experiments.runner import Table, by
from bensemble.experiments.verdicts import PaperValue
from bensemble.methods.zoo import PAPER_ORDER

__all__ = ["METRICS", "SHORT", "figures", "paper_of", "tables", "task_units"]

#: The three scores of tables 1-2, with their row labels.
METRICS = (("accuracy", "Acc."), ("ece", "ECE"), ("eece", "EECE"))
VALUES = tuple(m for m, _ in METRICS)
SHORT = {
    "Centroids": "Centroids", "DropConnect": "DropConnect", "Bayesian Log. Reg.": "BayesLogReg",
    "Likelihood": "Likelihood", "EK-NN": "EK-NN", "Random Forest": "RandForest",
    "MC-Dropout": "MC-Dropout", "Deep Ensemble": "DeepEns", "Bayesian Deep": "BayesDeep",
}  # fmt: skip


def _task_rows(config) -> list[int]:
    """The paper's table rows of the run's tasks (all ten when tasks do not correspond)."""
    if config.dataset.paper_rows:
        return [k for k, _ in config.tasks]
    return list(range(10))


def paper_of(config, metric: str, method: str) -> PaperValue:
    """The paper's mean of ``metric`` for ``method`` over the run's tasks (their rows)."""
    return paper_table(config.dataset.paper).mean(metric, method, _task_rows(config))


def _main(config):
    return lambda r: r["kind"] == "method" and r["convention"] in (MEMBERS, config.convention.label)


def _per_task(records, config) -> list[dict[str, Any]]:
    table = paper_table(config.dataset.paper)
    row_of = {name: k for k, name in config.tasks}

    def paper(row, c):
        if not c.dataset.paper_rows:
            return {}
        k = row_of[row["task"]]
        return {f"paper {m}": float(table.value(m, k, row["method"])) for m in VALUES}

    return by(["task", "method"], VALUES, where=_main(config), paper=paper)(records, config)


def _summary(records, config) -> list[dict[str, Any]]:
    per_task = [{k: r[k] for k in ("task", "method", *VALUES)} for r in _per_task(records, config)]
    rows = []
    for row in aggregate(per_task, ["method"], VALUES):
        row.pop("task", None)
        for metric in VALUES:
            row[f"paper {metric}"] = round(paper_of(config, metric, row["method"]).value, 4)
        rows.append(row)
    return rows


def _layout(records, config) -> list[dict[str, Any]]:
    per_task = {(r["task"], r["method"]): r for r in _per_task(records, config)}
    means = {r["method"]: r for r in _summary(records, config)}
    out = []
    for metric, label in METRICS:
        for k, task in (*config.tasks, (None, "mean")):
            line: dict[str, Any] = {"metric": label, "task": task}
            for method in PAPER_ORDER:
                r = means[method] if k is None else per_task[(task, method)]
                paper = r.get(f"paper {metric}")
                cell = f"{r[metric]:.2f}"
                line[SHORT[method]] = cell if paper is None else f"{cell} ({float(paper):.2f})"
            out.append(line)
    return out


def tables(dataset) -> tuple[Table, ...]:
    """The report's tables of a one-vs-all run on ``dataset``."""
    name, label = dataset.name, dataset.paper_label
    return (
        Table(f"{name}_table", f"accuracy / ECE / EECE per task, ours ({label} in parentheses)",
              _layout, digits=2),
        Table(f"{name}_summary", f"mean over the tasks (sd across tasks) vs {label}", _summary),
        Table(f"{name}_per_task", "per task and method (mean ± sd over repeats)", _per_task),
        Table(f"{name}_conventions", "the illustrative methods under every convention",
              by(["method", "convention"], ("mean EU", *VALUES),
                 where=lambda r: r["kind"] == "method" and r["group"] == "illustrative")),
        Table("likelihood_variants", "the Likelihood's readings (mean over tasks) vs MNIST's 0.14",
              lambda records, c: likelihood_variant_table(
                  records, quick=c.quick, reading_in_use=c.settings.likelihood)),
    )  # fmt: skip


def task_units(config, records) -> tuple[list[dict], list[list[float]]]:
    """Per (repeat, task): ``(method, metric) -> value``, and the paper's EECE row of the task."""
    table = paper_table(config.dataset.paper)
    row_of = {name: k for k, name in config.tasks}
    means = [paper_of(config, "eece", m).value for m in PAPER_ORDER]
    units, rows = [], []
    for (_, task), group in group_by([r for r in records if _main(config)(r)],
                                     ["seed", "task"]).items():  # fmt: skip
        units.append({(r["method"], m): r[m] for r in group for m in VALUES})
        if config.dataset.paper_rows:
            rows.append([float(table.value("eece", row_of[task], m)) for m in PAPER_ORDER])
        else:
            rows.append(means)
    return units, rows


def figures(report, built: dict, config, first) -> None:
    """Mean EECE and ECE per method beside the paper's (bars), and fig. 4(a)."""
    from bensemble.plots.scatter import plot_eece_vs_ece

    name, caption = config.dataset.name, config.convention.caption
    summary = built[f"{name}_summary"]
    methods = [r["method"] for r in summary]
    for metric, label in (("eece", "EECE"), ("ece", "ECE")):
        fig = bar_figure(
            methods,
            {"ours": ([r[metric] for r in summary], [r.get(f"{metric} sd") for r in summary]),
             config.dataset.paper_label: ([r[f"paper {metric}"] for r in summary], None)},
            ylabel=f"mean {label} over tasks", title=f"{name}: mean {label} per method",
            caption=f"{caption}; error bars: sd across tasks",
        )  # fmt: skip
        report.add_figure(f"{name}_{metric}", fig)
    fig = plot_eece_vs_ece(
        built[f"{name}_per_task"], title=f"{name}: mean EECE vs mean ECE (fig. 4(a))"
    )
    fig.get_layout_engine().set(rect=(0, 0.05, 1, 0.95))
    fig.text(0.01, 0.005, caption, fontsize=7, color="dimgray", va="bottom")
    report.add_figure(f"{name}_fig4a", fig)
