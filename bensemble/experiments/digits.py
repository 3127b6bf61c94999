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
   :data:`~bensemble.methods.zoo.PAPER_ORDER` with the paper's settings, scored on the test
   split: accuracy, ECE of the mean prediction (15 equal-width bins) and EECE (100 K-means bins).

The paper's numbers are its MNIST table 1 (28x28 images, 60,000 training points), the closest
published setting: digits are smaller and fewer, so expect the same ranking rather than the same
values. Per task the paper's value is in parentheses; the "mean" row averages the ten tasks (its
sd, in the summary table, is across tasks, as the paper's "mean and variance").
"""

from __future__ import annotations

import torch

from bensemble.experiments._common import (
    EECE_BACKEND,
    EECE_BINS,
    ExperimentResult,
    Printer,
    RunOptions,
    Stopwatch,
    finish,
    repeat_seeds,
    single_thread,
    zoo_settings,
)
from bensemble.experiments.autoencoder import (
    AE_BATCH,
    ConvAutoEncoder,
    encode,
    train_autoencoder,
)
from bensemble.experiments.likelihood_variants import (
    likelihood_variant_records,
    write_likelihood_variants,
)
from bensemble.experiments.one_vs_all import (
    METRICS,
    PAPER_TABLE1,
    SHORT,
    one_vs_all_records,
    paper_mean,
    summarize_one_vs_all,
    write_one_vs_all,
)

__all__ = [
    "AE_BATCH",
    "METRICS",
    "PAPER_TABLE1",
    "SHORT",
    "ConvAutoEncoder",
    "encode",
    "one_vs_all_records",
    "paper_mean",
    "summarize_one_vs_all",
    "run",
    "train_autoencoder",
    "write_one_vs_all",
]

LATENT_DIM = 32
AE_EPOCHS = 100
QUICK = {"n_train": 120, "n_test": 150, "tasks": (0, 1), "ae_epochs": 2, "n_bins": 10}


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
                z_tr, y_tr, z_te, y_te, tasks, seed=seed, n_bins=n_bins,
                n_members=settings.n_samples,
            )  # fmt: skip
    tables = summarize_one_vs_all(records, [n for _, n in tasks], paper_by_task=list(classes))
    write_one_vs_all("digits", tables, report, printer, paper_label="paper MNIST")
    write_likelihood_variants("digits", variants, tables, report, printer)
    return finish("digits", report, tables, watch, printer, options)
