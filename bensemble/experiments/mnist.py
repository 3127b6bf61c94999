"""``bensemble reproduce mnist --data-dir DIR``: table 1 on the real MNIST (not run offline here).

The paper's MNIST pipeline (section 4.3, appendix B.1.2) on the four IDX files the user already
has (``train-images-idx3-ubyte`` ... ``t10k-labels-idx1-ubyte``, gzipped or not, read by
:func:`bensemble.datasets.vision.load_mnist`): the convolutional auto-encoder (Conv2d 1->16 s2,
16->32 s2, Linear 1568->64; mirrored decoder; 5 epochs, MSE, Adam) on the 60,000 training images,
then the ten "k vs all" tasks with the nine methods on the 10,000 test images, side by side with
the paper's table 1. The classifiers see ``--n-train`` seeded training latents (default 10,000;
``0``: all 60,000). Nothing is downloaded: without ``--data-dir`` (or when DIR lacks a file) the
command exits with status 2 and one line.
"""

from __future__ import annotations

from bensemble.datasets.vision import load_mnist
from bensemble.experiments._common import ExperimentResult, RunOptions
from bensemble.experiments.one_vs_all import PAPER_TABLE1, run_image_one_vs_all
from bensemble.experiments.reproduce import DataDirError

__all__ = ["LATENT_DIM", "run"]

LATENT_DIM = 64
AE_EPOCHS = 5
N_TRAIN = 10_000


def run(options: RunOptions) -> ExperimentResult:
    """Run table 1's protocol on MNIST read from ``options.extra["data_dir"]``."""
    data_dir = options.extra.get("data_dir")
    if not data_dir:
        raise DataDirError("MNIST is not bundled: pass --data-dir DIR (the four IDX files)")
    try:
        data = load_mnist(data_dir)
    except FileNotFoundError as err:
        raise DataDirError(f"{err} (pass --data-dir DIR holding the four IDX files)") from None
    return run_image_one_vs_all(
        options,
        data,
        name="mnist",
        title="MNIST",
        class_names=[f"{k}vsAll" for k in range(10)],
        latent_dim=LATENT_DIM,
        ae_epochs=AE_EPOCHS,
        n_train=N_TRAIN,
        paper_by_task=list(range(10)),
        paper_table=PAPER_TABLE1,
        paper_label="paper table 1",
    )
