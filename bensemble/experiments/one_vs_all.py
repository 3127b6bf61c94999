"""The paper's one-vs-all protocol (section 4.3, tables 1-2, fig. 4(a)), shared by the vision runs.

``digits``, ``fashion``, ``mnist`` and ``cifar10`` all go through here:

* :data:`PAPER_TABLE1` (MNIST) and :data:`PAPER_TABLE2` (CIFAR-10): the paper's accuracy / ECE /
  EECE per one-vs-all task and method, transcribed;
* :func:`one_vs_all_records` trains and scores the nine methods on each "k vs all" task;
* :func:`summarize_one_vs_all` builds the per-task, summary and paper-layout tables;
* :func:`write_one_vs_all` prints and writes them with the bar figures and fig. 4(a) (log-log mean
  EECE vs mean ECE per method, variance over the tasks as error bars);
* :func:`run_image_one_vs_all` is the whole pipeline on images read from files: the paper's
  auto-encoder on every training image, then the classifiers on (a subset of) the latents.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from bensemble._options import check_seed
from bensemble.experiments._common import (
    EECE_BACKEND,
    EECE_BINS,
    ExperimentResult,
    Printer,
    RunOptions,
    Stopwatch,
    aggregate,
    bar_figure,
    binary_scores,
    columns_of,
    finish,
    mean_sd,
    one_vs_all,
    progress_bar,
    repeat_seeds,
    single_thread,
    zoo_settings,
)
from bensemble.experiments.autoencoder import encode, train_autoencoder
from bensemble.experiments.likelihood_variants import (
    likelihood_variant_records,
    write_likelihood_variants,
)
from bensemble.methods.zoo import PAPER_ORDER, ZooSettings, member_probs

__all__ = [
    "METRICS",
    "PAPER_TABLE1",
    "PAPER_TABLE2",
    "QUICK",
    "eece_ece_scatter",
    "one_vs_all_records",
    "paper_mean",
    "run_image_one_vs_all",
    "summarize_one_vs_all",
    "write_one_vs_all",
]

PaperTable = dict[str, tuple[tuple[float, ...], ...]]

#: The three scores of tables 1-2, with their row labels.
METRICS = (("accuracy", "Acc."), ("ece", "ECE"), ("eece", "EECE"))
SHORT = {
    "Centroids": "Centroids",
    "DropConnect": "DropConnect",
    "Bayesian Log. Reg.": "BayesLogReg",
    "Likelihood": "Likelihood",
    "EK-NN": "EK-NN",
    "Random Forest": "RandForest",
    "MC-Dropout": "MC-Dropout",
    "Deep Ensemble": "DeepEns",
    "Bayesian Deep": "BayesDeep",
}

# Table 1 of the paper (MNIST, one-vs-all): rows 0vsAll..9vsAll, columns in PAPER_ORDER.
# fmt: off
PAPER_TABLE1: PaperTable = {
    "accuracy": (
        (0.94, 1.00, 0.99, 1.00, 1.00, 0.99, 1.00, 1.00, 1.00),
        (0.95, 1.00, 0.99, 1.00, 1.00, 1.00, 1.00, 1.00, 1.00),
        (0.93, 0.99, 0.98, 1.00, 1.00, 0.98, 1.00, 1.00, 1.00),
        (0.88, 0.99, 0.97, 0.99, 0.99, 0.98, 1.00, 1.00, 0.99),
        (0.87, 0.99, 0.98, 0.99, 0.99, 0.98, 1.00, 1.00, 1.00),
        (0.85, 0.99, 0.96, 1.00, 1.00, 0.98, 1.00, 1.00, 1.00),
        (0.95, 1.00, 0.98, 1.00, 1.00, 0.99, 1.00, 1.00, 1.00),
        (0.94, 0.99, 0.98, 0.99, 0.99, 0.98, 1.00, 1.00, 0.99),
        (0.89, 0.99, 0.97, 0.99, 0.99, 0.98, 0.99, 1.00, 0.99),
        (0.83, 0.99, 0.96, 0.99, 0.99, 0.98, 0.99, 0.99, 0.99),
    ),
    "ece": (
        (0.35, 0.01, 0.01, 0.01, 0.03, 0.04, 0.01, 0.01, 0.01),
        (0.36, 0.01, 0.01, 0.01, 0.03, 0.02, 0.01, 0.01, 0.01),
        (0.37, 0.01, 0.01, 0.01, 0.03, 0.05, 0.01, 0.01, 0.01),
        (0.36, 0.02, 0.02, 0.01, 0.03, 0.05, 0.01, 0.01, 0.01),
        (0.37, 0.01, 0.01, 0.01, 0.03, 0.04, 0.01, 0.01, 0.01),
        (0.39, 0.02, 0.01, 0.01, 0.03, 0.05, 0.01, 0.01, 0.01),
        (0.37, 0.01, 0.01, 0.01, 0.03, 0.03, 0.01, 0.01, 0.01),
        (0.36, 0.01, 0.01, 0.01, 0.03, 0.04, 0.01, 0.01, 0.01),
        (0.37, 0.02, 0.02, 0.01, 0.03, 0.05, 0.01, 0.01, 0.01),
        (0.37, 0.01, 0.02, 0.01, 0.03, 0.04, 0.01, 0.01, 0.01),
    ),
    "eece": (
        (0.07, 0.00, 0.00, 0.14, 0.04, 0.01, 0.00, 0.00, 0.00),
        (0.09, 0.00, 0.00, 0.14, 0.04, 0.01, 0.00, 0.00, 0.00),
        (0.10, 0.00, 0.00, 0.14, 0.04, 0.02, 0.00, 0.00, 0.00),
        (0.09, 0.00, 0.00, 0.14, 0.04, 0.02, 0.00, 0.00, 0.00),
        (0.09, 0.00, 0.00, 0.14, 0.04, 0.01, 0.00, 0.00, 0.00),
        (0.10, 0.00, 0.00, 0.14, 0.04, 0.02, 0.00, 0.00, 0.00),
        (0.09, 0.00, 0.00, 0.14, 0.04, 0.01, 0.00, 0.00, 0.00),
        (0.09, 0.00, 0.00, 0.14, 0.04, 0.01, 0.00, 0.00, 0.00),
        (0.10, 0.00, 0.00, 0.14, 0.04, 0.02, 0.00, 0.00, 0.00),
        (0.09, 0.00, 0.00, 0.14, 0.04, 0.02, 0.00, 0.00, 0.00),
    ),
}
# fmt: on

# Table 2 of the paper (CIFAR-10, one-vs-all): rows airplane..truck, columns in PAPER_ORDER.
# fmt: off
PAPER_TABLE2: PaperTable = {
    "accuracy": (
        (0.71, 0.71, 0.93, 0.93, 0.91, 0.91, 0.92, 0.92, 0.92),
        (0.70, 0.70, 0.93, 0.93, 0.91, 0.91, 0.91, 0.91, 0.91),
        (0.65, 0.65, 0.91, 0.91, 0.90, 0.90, 0.90, 0.90, 0.90),
        (0.67, 0.67, 0.90, 0.90, 0.90, 0.90, 0.90, 0.90, 0.90),
        (0.67, 0.67, 0.91, 0.91, 0.90, 0.90, 0.88, 0.88, 0.88),
        (0.68, 0.68, 0.91, 0.91, 0.90, 0.90, 0.91, 0.91, 0.91),
        (0.64, 0.64, 0.92, 0.92, 0.90, 0.90, 0.90, 0.90, 0.91),
        (0.63, 0.63, 0.93, 0.93, 0.91, 0.91, 0.91, 0.91, 0.91),
        (0.71, 0.71, 0.94, 0.94, 0.91, 0.91, 0.91, 0.91, 0.91),
        (0.70, 0.70, 0.92, 0.92, 0.69, 0.69, 0.91, 0.91, 0.91),
    ),
    "ece": (
        (0.34, 0.01, 0.02, 0.05, 0.04, 0.04, 0.02, 0.02, 0.03),
        (0.37, 0.03, 0.01, 0.06, 0.03, 0.04, 0.02, 0.01, 0.04),
        (0.38, 0.02, 0.01, 0.07, 0.05, 0.02, 0.01, 0.04, 0.05),
        (0.38, 0.01, 0.01, 0.03, 0.01, 0.01, 0.01, 0.04, 0.07),
        (0.35, 0.01, 0.01, 0.09, 0.07, 0.02, 0.01, 0.03, 0.04),
        (0.38, 0.01, 0.01, 0.03, 0.01, 0.03, 0.02, 0.03, 0.06),
        (0.36, 0.02, 0.01, 0.06, 0.04, 0.04, 0.02, 0.01, 0.04),
        (0.39, 0.02, 0.01, 0.05, 0.02, 0.04, 0.01, 0.02, 0.04),
        (0.35, 0.02, 0.01, 0.06, 0.06, 0.04, 0.01, 0.02, 0.03),
        (0.35, 0.01, 0.19, 0.06, 0.03, 0.03, 0.01, 0.02, 0.04),
    ),
    "eece": (
        (0.06, 0.00, 0.00, 0.14, 0.09, 0.04, 0.01, 0.01, 0.01),
        (0.07, 0.00, 0.00, 0.15, 0.08, 0.03, 0.01, 0.01, 0.01),
        (0.07, 0.00, 0.00, 0.14, 0.09, 0.04, 0.00, 0.01, 0.01),
        (0.07, 0.00, 0.00, 0.15, 0.09, 0.04, 0.00, 0.01, 0.01),
        (0.07, 0.00, 0.00, 0.13, 0.09, 0.04, 0.01, 0.01, 0.01),
        (0.07, 0.00, 0.00, 0.15, 0.09, 0.04, 0.01, 0.01, 0.01),
        (0.07, 0.00, 0.00, 0.14, 0.09, 0.04, 0.01, 0.01, 0.01),
        (0.08, 0.00, 0.00, 0.15, 0.08, 0.04, 0.01, 0.01, 0.01),
        (0.05, 0.00, 0.00, 0.14, 0.08, 0.04, 0.01, 0.00, 0.01),
        (0.06, 0.00, 0.24, 0.15, 0.08, 0.04, 0.01, 0.01, 0.01),
    ),
}
# fmt: on


def paper_mean(metric: str, method: str, table: PaperTable | None = None) -> float:
    """Mean over the ten tasks of the paper's ``table`` (default table 1) for ``metric``."""
    j = PAPER_ORDER.index(method)
    table = PAPER_TABLE1 if table is None else table
    return mean_sd(row[j] for row in table[metric])[0]


def one_vs_all_records(
    x_train: torch.Tensor,
    y_train: torch.Tensor,
    x_test: torch.Tensor,
    y_test: torch.Tensor,
    tasks: Sequence[tuple[int, str]],
    *,
    settings: ZooSettings,
    seed: int,
    n_bins: int,
    progress: bool,
    desc: str,
) -> list[dict[str, Any]]:
    """Train and score the nine methods on each one-vs-all task ``(class, name)``.

    Returns:
        One record per (task, method): ``task``, ``method``, ``accuracy``, ``ece``, ``eece``.
    """
    seed = check_seed(seed, "seed", "one_vs_all_records")
    records = []
    jobs = [(k, name, m) for k, name in tasks for m in PAPER_ORDER]
    for k, name, method in progress_bar(jobs, desc=desc, enabled=progress):
        yb_train, yb_test = one_vs_all(y_train, k), one_vs_all(y_test, k)
        probs = member_probs(method, x_train, yb_train, x_test, settings=settings, seed=seed)
        scores = binary_scores(probs[..., 1], yb_test, n_bins=n_bins, seed=seed)
        records.append({"task": name, "method": method, **scores})
    return records


def summarize_one_vs_all(
    records: Sequence[dict[str, Any]],
    task_names: Sequence[str],
    *,
    paper_by_task: Sequence[int] | None,
    paper_table: PaperTable | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """The three tables of a one-vs-all run.

    Args:
        records: :func:`one_vs_all_records` of every repeat.
        task_names: the tasks, in order.
        paper_by_task: for each task, its row in ``paper_table`` (``None``: compare the
            means only, e.g. another data set).
        paper_table: the paper's table to compare with (default :data:`PAPER_TABLE1`, MNIST;
            :data:`PAPER_TABLE2` for CIFAR-10).

    Returns:
        ``per_task`` (numeric, one row per task and method, mean ± sd over repeats, with the
        paper's value), ``summary`` (one row per method: mean over tasks, sd across tasks, the
        paper's mean) and ``table`` (the paper's layout: "ours (paper)" text cells).
    """
    values = [m for m, _ in METRICS]
    paper_table = PAPER_TABLE1 if paper_table is None else paper_table
    per_task = aggregate(records, ["task", "method"], values)
    for row in per_task:
        j = PAPER_ORDER.index(row["method"])
        t = task_names.index(row["task"])
        for metric in values:
            paper = None if paper_by_task is None else paper_table[metric][paper_by_task[t]][j]
            row[f"paper {metric}"] = paper
    task_means = [{k: r[k] for k in ("task", "method", *values)} for r in per_task]
    summary = []
    for row in aggregate(task_means, ["method"], values):
        out: dict[str, Any] = {"method": row["method"]}
        for metric in values:
            out[metric] = row[metric]
            if f"{metric} sd" in row:
                out[f"{metric} sd"] = row[f"{metric} sd"]
            out[f"paper {metric}"] = paper_mean(metric, row["method"], paper_table)
        summary.append(out)
    lookup = {(r["task"], r["method"]): r for r in per_task}
    means = {r["method"]: r for r in summary}
    table = []
    for metric, label in METRICS:
        for name in (*task_names, "mean"):
            line: dict[str, Any] = {"metric": label, "task": name}
            for method in PAPER_ORDER:
                if name == "mean":
                    ours, paper = means[method][metric], means[method][f"paper {metric}"]
                else:
                    r = lookup[(name, method)]
                    ours, paper = r[metric], r[f"paper {metric}"]
                line[SHORT[method]] = f"{ours:.2f}" + ("" if paper is None else f" ({paper:.2f})")
            table.append(line)
    return {"per_task": per_task, "summary": summary, "table": table}


def write_one_vs_all(
    name: str,
    tables: dict[str, list[dict[str, Any]]],
    report,
    printer: Printer,
    *,
    paper_label: str,
) -> None:
    """Print and write the tables and the two bar figures of a one-vs-all run."""
    title = (
        f"{name}: accuracy / ECE / EECE per one-vs-all task, ours ({paper_label} in parentheses)"
    )
    printer.table(tables["table"], title, digits=2)
    title_s = f"{name}: mean over the one-vs-all tasks (sd across tasks) vs {paper_label}"
    printer.table(tables["summary"], title_s, digits=4)
    report.add_table(f"{name}_table", tables["table"], title=title)
    report.add_table(f"{name}_summary", tables["summary"], title=title_s)
    report.add_table(f"{name}_per_task", tables["per_task"], title=f"{name}: per task and method")
    summary = tables["summary"]
    methods = columns_of(summary, "method")
    for metric, label in (("eece", "EECE"), ("ece", "ECE")):
        sd = columns_of(summary, f"{metric} sd") if f"{metric} sd" in summary[0] else None
        fig = bar_figure(
            methods,
            {
                "ours": (columns_of(summary, metric), sd),
                paper_label: (columns_of(summary, f"paper {metric}"), None),
            },
            ylabel=f"mean {label} over tasks",
            title=f"{name}: mean {label} per method",
        )
        report.add_figure(f"{name}_{metric}", fig)
    report.add_figure(f"{name}_fig4a", eece_ece_scatter(tables["per_task"], name=name))


def eece_ece_scatter(per_task: Sequence[dict[str, Any]], *, name: str) -> Any:
    """Fig. 4(a) of a run: :func:`bensemble.plots.plot_eece_vs_ece` on its per-task rows."""
    from bensemble.plots.scatter import plot_eece_vs_ece

    return plot_eece_vs_ece(per_task, title=f"{name}: mean EECE vs mean ECE (fig. 4(a))")


#: Tiny settings of the file-based runs (``--quick``), for tests.
QUICK = {"n_train": 100, "n_test": 100, "tasks": (0, 1), "ae_epochs": 1, "n_bins": 10}


def run_image_one_vs_all(
    options: RunOptions,
    data: dict[str, tuple[torch.Tensor, torch.Tensor]],
    *,
    name: str,
    title: str,
    class_names: Sequence[str],
    latent_dim: int,
    ae_epochs: int,
    n_train: int,
    paper_by_task: Sequence[int] | None,
    paper_table: PaperTable | None,
    paper_label: str,
) -> ExperimentResult:
    """The paper's vision pipeline on ``data`` (images ``[N, C, S, S]`` in [0, 1]).

    Per repeat: the auto-encoder (``latent_dim``, ``ae_epochs``) on every training image; the
    classifiers on ``n_train`` seeded training latents (``<= 0``: all); the ten one-vs-all
    tasks scored on the test images (``options.extra["n_test"]``: a subset of that many, drawn
    once with ``options.seed``; default all). ``options.quick`` uses :data:`QUICK`.
    """
    watch, printer = Stopwatch(), Printer()
    quick = options.quick
    x_train, y_train = data["train"]
    x_test, y_test = data["test"]
    if x_train.shape[-1] % 4 or x_train.shape[-1] != x_train.shape[-2]:
        raise ValueError(
            f"{name}: images must be square with a side divisible by 4 "
            f"(got {list(x_train.shape[1:])})"
        )
    settings = zoo_settings(quick)
    classes = QUICK["tasks"] if quick else tuple(range(10))
    tasks = [(k, class_names[k]) for k in classes]
    n_bins = QUICK["n_bins"] if quick else EECE_BINS
    ae_epochs = QUICK["ae_epochs"] if quick else ae_epochs
    asked = options.extra.get("n_train")
    n_train = (QUICK["n_train"] if quick else n_train) if asked is None else int(asked)
    if n_train <= 0 or n_train > len(y_train):
        n_train = len(y_train)
    if quick:
        x_test, y_test = x_test[: QUICK["n_test"]], y_test[: QUICK["n_test"]]
    n_test = options.extra.get("n_test")
    if n_test is not None and 0 < int(n_test) < len(y_test):  # a seeded subset of the test set
        keep = torch.randperm(len(y_test), generator=torch.Generator().manual_seed(options.seed))
        x_test, y_test = x_test[keep[: int(n_test)]], y_test[keep[: int(n_test)]]
    repeats = options.n_repeats(1)
    report = options.report(name)
    printer(
        f"{name}: {title}, the paper's conv auto-encoder ({latent_dim}-d latent, "
        f"{ae_epochs} epochs on {len(y_train)} images), classifiers on {n_train} training "
        f"latents, {len(y_test)} test images; {len(tasks)} one-vs-all tasks x 9 methods; EECE "
        f"with {n_bins} K-means bins ({EECE_BACKEND}); {repeats} repeat(s), seed {options.seed}"
        f"{' (quick settings)' if quick else ''}"
    )
    records, variants = [], []  # variants: the Likelihood's readings (likelihood_variants)
    with single_thread():
        for seed in repeat_seeds(options.seed, repeats):
            ae = train_autoencoder(
                x_train, latent_dim=latent_dim, epochs=ae_epochs, seed=seed,
                progress=options.progress,
            )  # fmt: skip
            pick = torch.randperm(len(y_train), generator=torch.Generator().manual_seed(seed))
            pick = pick[:n_train]
            z_tr, z_te = encode(ae, x_train[pick]), encode(ae, x_test)
            records += one_vs_all_records(
                z_tr, y_train[pick], z_te, y_test, tasks, settings=settings, seed=seed,
                n_bins=n_bins, progress=options.progress, desc=f"{name} (seed {seed})",
            )  # fmt: skip
            variants += likelihood_variant_records(
                z_tr, y_train[pick], z_te, y_test, tasks, seed=seed, n_bins=n_bins,
                n_members=settings.n_samples,
            )  # fmt: skip
    tables = summarize_one_vs_all(
        records,
        [n for _, n in tasks],
        paper_by_task=None if paper_by_task is None else [paper_by_task[k] for k in classes],
        paper_table=paper_table,
    )
    write_one_vs_all(name, tables, report, printer, paper_label=paper_label)
    write_likelihood_variants(name, variants, tables, report, printer)
    return finish(name, report, tables, watch, printer, options)
