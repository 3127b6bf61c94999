"""``bensemble reproduce digits``: the paper's one-vs-all protocol (tables 1-2) on ``load_digits``.

Protocol (section 4.3, appendix B.1.2), scaled to scikit-learn's bundled 8x8 digits (1,797
images; nothing is downloaded):

1. a stratified 50/50 train/test split (seeded);
2. the representation: by default (``features="ae"``) the latent of the paper's convolutional
   auto-encoder (Conv 1->16 stride 2, Conv 16->32 stride 2, Linear -> latent, and the mirrored
   decoder; MSE, Adam) sized for 8x8 inputs, with a 32-d latent and 100 epochs (the paper's 5
   MNIST epochs are ~9,000 steps; 100 epochs on 898 images are ~1,400), trained on the training
   images only; ``features="raw"`` uses the 64 pixels scaled to [0, 1];
3. ten one-vs-all binary tasks ("k vs all"); for each, the nine methods of
   :data:`~bensemble.experiments.zoo.PAPER_ORDER` with the paper's settings, scored on the test
   split: accuracy, ECE of the mean prediction (15 equal-width bins) and EECE (100 K-means bins).

The paper's numbers are its MNIST table 1 (28x28 images, 60,000 training points), the closest
published setting: digits are smaller and fewer, so expect the same ranking rather than the same
values. Per task the paper's value is in parentheses; the "mean" row averages the ten tasks (its
sd, in the summary table, is across tasks, as the paper's "mean and variance").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from bensemble._validation import check_positive_int
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
from bensemble.experiments.likelihood_variants import (
    likelihood_variant_records,
    write_likelihood_variants,
)
from bensemble.experiments.zoo import PAPER_ORDER, ZooSettings, member_probs

__all__ = [
    "METRICS",
    "PAPER_TABLE1",
    "ConvAutoEncoder",
    "encode",
    "one_vs_all_records",
    "paper_mean",
    "summarize_one_vs_all",
    "run",
    "train_autoencoder",
]

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
PAPER_TABLE1: dict[str, tuple[tuple[float, ...], ...]] = {
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

LATENT_DIM = 32
AE_EPOCHS = 100
AE_BATCH = 64
QUICK = {"n_train": 120, "n_test": 150, "tasks": (0, 1), "ae_epochs": 2, "n_bins": 10}


def paper_mean(metric: str, method: str) -> float:
    """Mean over the ten tasks of table 1 for ``metric`` and ``method``."""
    j = PAPER_ORDER.index(method)
    return mean_sd(row[j] for row in PAPER_TABLE1[metric])[0]


# ----------------------------------------------------------------------------- auto-encoder
class ConvAutoEncoder(nn.Module):
    """The paper's MNIST auto-encoder (appendix B.1.2), sized by the image side.

    Encoder: Conv2d ``C -> 16`` (3x3, stride 2) ReLU, Conv2d ``16 -> 32`` (stride 2) ReLU,
    Linear ``32 (S/4)^2 -> latent_dim`` ReLU; the decoder mirrors it with transposed
    convolutions and a final Sigmoid. For ``S = 28`` the linear layer is ``1568 -> 64``, as in
    the paper.

    Args:
        side: image side ``S`` (a multiple of 4).
        latent_dim: size of the latent code.
        channels: image channels ``C``.
    """

    def __init__(self, side: int = 28, latent_dim: int = 64, channels: int = 1) -> None:
        super().__init__()
        fn = "ConvAutoEncoder"
        side = check_positive_int(side, "side", fn, minimum=4)
        if side % 4:
            raise ValueError(f"{fn}: `side` must be a multiple of 4 (got {side})")
        latent_dim = check_positive_int(latent_dim, "latent_dim", fn)
        channels = check_positive_int(channels, "channels", fn)
        q = side // 4
        flat = 32 * q * q
        self.encoder = nn.Sequential(
            nn.Conv2d(channels, 16, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(flat, latent_dim),
            nn.ReLU(),
        )
        self.decoder = nn.Sequential(
            nn.Linear(latent_dim, flat),
            nn.ReLU(),
            nn.Unflatten(1, (32, q, q)),
            nn.ConvTranspose2d(32, 16, 3, stride=2, padding=1, output_padding=1),
            nn.ReLU(),
            nn.ConvTranspose2d(16, channels, 3, stride=2, padding=1, output_padding=1),
            nn.Sigmoid(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Reconstruction ``[B, C, S, S]`` of images ``x [B, C, S, S]`` in [0, 1]."""
        return self.decoder(self.encoder(x))


def train_autoencoder(
    images: torch.Tensor,
    *,
    latent_dim: int,
    epochs: int,
    batch_size: int = AE_BATCH,
    seed: int = 0,
    progress: bool = False,
) -> ConvAutoEncoder:
    """Fit a :class:`ConvAutoEncoder` on ``images [N, C, S, S]`` (MSE, Adam, lr 1e-3).

    The initialisation and the batch order come from ``seed``; the global RNG is restored.
    Returns the auto-encoder in eval mode.
    """
    x = torch.as_tensor(images, dtype=torch.float32)
    if x.ndim != 4 or x.shape[2] != x.shape[3]:
        raise ValueError(
            f"train_autoencoder: `images` must have shape [N, C, S, S] (got {list(x.shape)})"
        )
    order = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        ae = ConvAutoEncoder(side=x.shape[2], latent_dim=latent_dim, channels=x.shape[1])
    opt = torch.optim.Adam(ae.parameters(), lr=1e-3)
    ae.train()
    try:
        epochs_iter = progress_bar(range(epochs), desc="auto-encoder", enabled=progress)
        for _ in epochs_iter:
            for idx in torch.randperm(x.shape[0], generator=order).split(batch_size):
                batch = x[idx]
                opt.zero_grad(set_to_none=True)
                loss = nn.functional.mse_loss(ae(batch), batch)
                loss.backward()
                opt.step()
    finally:
        ae.eval()
    return ae


def encode(ae: ConvAutoEncoder, images: torch.Tensor, batch_size: int = 2048) -> torch.Tensor:
    """Latent codes ``[N, latent_dim]`` (float32) of ``images [N, C, S, S]``."""
    x = torch.as_tensor(images, dtype=torch.float32)
    with torch.no_grad():
        return torch.cat([ae.encoder(b) for b in x.split(batch_size)])


# ----------------------------------------------------------------------------- protocol
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
) -> dict[str, list[dict[str, Any]]]:
    """The three tables of a one-vs-all run.

    Args:
        records: :func:`one_vs_all_records` of every repeat.
        task_names: the tasks, in order.
        paper_by_task: for each task, its row in :data:`PAPER_TABLE1` (``None``: compare the
            means only, e.g. another data set).

    Returns:
        ``per_task`` (numeric, one row per task and method, mean ± sd over repeats, with the
        paper's value), ``summary`` (one row per method: mean over tasks, sd across tasks, the
        paper's mean) and ``table`` (the paper's layout: "ours (paper)" text cells).
    """
    values = [m for m, _ in METRICS]
    per_task = aggregate(records, ["task", "method"], values)
    for row in per_task:
        j = PAPER_ORDER.index(row["method"])
        t = task_names.index(row["task"])
        for metric in values:
            paper = None if paper_by_task is None else PAPER_TABLE1[metric][paper_by_task[t]][j]
            row[f"paper {metric}"] = paper
    task_means = [{k: r[k] for k in ("task", "method", *values)} for r in per_task]
    summary = []
    for row in aggregate(task_means, ["method"], values):
        out: dict[str, Any] = {"method": row["method"]}
        for metric in values:
            out[metric] = row[metric]
            if f"{metric} sd" in row:
                out[f"{metric} sd"] = row[f"{metric} sd"]
            out[f"paper {metric}"] = paper_mean(metric, row["method"])
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


# ----------------------------------------------------------------------------- experiment
def _digits_split(seed: int, quick: bool) -> tuple[torch.Tensor, ...]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    images = torch.tensor(data.images / 16.0, dtype=torch.float32)[:, None]  # [N, 1, 8, 8]
    labels = torch.tensor(data.target, dtype=torch.int64)
    train, test = train_test_split(
        torch.arange(len(labels)).numpy(), test_size=0.5, random_state=seed, stratify=data.target
    )
    if quick:
        train, test = train[: QUICK["n_train"]], test[: QUICK["n_test"]]
    return images[train], labels[train], images[test], labels[test]


def run(options: RunOptions) -> ExperimentResult:
    """Run the one-vs-all protocol on scikit-learn's digits; print and write its tables."""
    watch, printer = Stopwatch(), Printer()
    quick = options.quick
    features = options.extra.get("features", "ae")
    if features not in ("ae", "raw"):
        raise ValueError(f"digits: `features` must be 'ae' or 'raw' (got {features!r})")
    settings = zoo_settings(quick)
    classes = QUICK["tasks"] if quick else tuple(range(10))
    tasks = [(k, f"{k}vsAll") for k in classes]
    n_bins = QUICK["n_bins"] if quick else EECE_BINS
    ae_epochs = QUICK["ae_epochs"] if quick else AE_EPOCHS
    repeats = options.n_repeats(1)
    report = options.report("digits")
    rep = (
        f"the latent ({LATENT_DIM}-d) of the paper's conv auto-encoder trained {ae_epochs} "
        "epochs on the training images"
        if features == "ae"
        else "the raw 64 pixels scaled to [0, 1]"
    )
    printer(
        f"digits: scikit-learn's 8x8 digits, stratified 50/50 split, features = {rep}; "
        f"{len(tasks)} one-vs-all tasks x 9 methods; EECE with {n_bins} K-means bins "
        f"({EECE_BACKEND}); {repeats} repeat(s), seed {options.seed}"
        f"{' (quick settings)' if quick else ''}"
    )
    records, variants = [], []  # variants: the Likelihood's readings (likelihood_variants)
    with single_thread():
        for seed in repeat_seeds(options.seed, repeats):
            x_tr, y_tr, x_te, y_te = _digits_split(seed, quick)
            if features == "ae":
                ae = train_autoencoder(
                    x_tr,
                    latent_dim=LATENT_DIM,
                    epochs=ae_epochs,
                    seed=seed,
                    progress=options.progress,
                )
                z_tr, z_te = encode(ae, x_tr), encode(ae, x_te)
            else:
                z_tr, z_te = x_tr.flatten(1), x_te.flatten(1)
            records += one_vs_all_records(
                z_tr,
                y_tr,
                z_te,
                y_te,
                tasks,
                settings=settings,
                seed=seed,
                n_bins=n_bins,
                progress=options.progress,
                desc=f"digits (seed {seed})",
            )
            variants += likelihood_variant_records(
                z_tr,
                y_tr,
                z_te,
                y_te,
                tasks,
                seed=seed,
                n_bins=n_bins,
                n_members=settings.n_samples,
            )
    tables = summarize_one_vs_all(records, [n for _, n in tasks], paper_by_task=list(classes))
    write_one_vs_all("digits", tables, report, printer, paper_label="paper MNIST")
    write_likelihood_variants("digits", variants, tables, report, printer)
    return finish("digits", report, tables, watch, printer)
