"""``bensemble reproduce fashion``: the one-vs-all protocol on Fashion-MNIST (not run by CI).

The paper's MNIST pipeline unchanged (appendix B.1.2): its convolutional auto-encoder (64-d
latent, 5 epochs, MSE, Adam) trained on the 60,000 training images, then the ten one-vs-all tasks
with the nine methods, scored on the 10,000 test images (accuracy, ECE, EECE with 100 K-means
bins). The classifiers are trained on a seeded subset of ``n_train`` latent training points
(default 10,000: about 32 minutes on 2 shared CPU cores, 1.5 of them for the auto-encoder;
``--n-train 0`` uses all 60,000, which takes hours); the auto-encoder always sees every
training image. The paper has no Fashion-MNIST numbers: its MNIST
means (table 1) are printed beside ours for scale.

The images come from Debian's ``dataset-fashion-mnist`` package (``make data`` runs
``apt-get install -y dataset-fashion-mnist``), which installs the four IDX files (gzipped) under
``/usr/share/datasets/fashion-mnist/``; :func:`read_idx` parses them with numpy, so nothing is
downloaded at run time. The pipeline,
:func:`~bensemble.experiments.one_vs_all.run_image_one_vs_all`, is shared with ``mnist`` and
``cifar10``.
"""

from __future__ import annotations

import os

import torch

from bensemble.datasets.vision import MNIST_FILES, load_idx_dataset, read_idx
from bensemble.experiments._common import ExperimentResult, RunOptions
from bensemble.experiments.one_vs_all import run_image_one_vs_all
from bensemble.experiments.reproduce import DataUnavailableError

__all__ = ["CLASSES", "DATA_DIR", "FILES", "load_fashion_mnist", "read_idx", "run"]

DATA_DIR = "/usr/share/datasets/fashion-mnist"
#: split -> (images file, labels file), without the optional ``.gz``.
FILES = MNIST_FILES
CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
LATENT_DIM = 64
AE_EPOCHS = 5
N_TRAIN = 10_000


def load_fashion_mnist(
    data_dir: str | os.PathLike = DATA_DIR,
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """The Fashion-MNIST splits as ``{"train": (images, labels), "test": (images, labels)}``.

    Images are ``[N, 1, 28, 28]`` float32 in [0, 1], labels ``[N]`` int64
    (:func:`bensemble.datasets.vision.load_idx_dataset`).

    Raises:
        DataUnavailableError: a file is missing (the message says how to install them).
        ValueError: a file is not a valid IDX file, or images and labels disagree.
    """
    try:
        return load_idx_dataset(data_dir, name="Fashion-MNIST")
    except FileNotFoundError as err:
        raise DataUnavailableError(
            f"{err}; install it with `make data` (apt-get install -y dataset-fashion-mnist) "
            "or pass --data-dir DIR"
        ) from None


def run(options: RunOptions) -> ExperimentResult:
    """Run the one-vs-all protocol on Fashion-MNIST; print and write its tables."""
    data = load_fashion_mnist(options.extra.get("data_dir") or DATA_DIR)
    return run_image_one_vs_all(
        options,
        data,
        name="fashion",
        title="Fashion-MNIST",
        class_names=CLASSES,
        latent_dim=LATENT_DIM,
        ae_epochs=AE_EPOCHS,
        n_train=N_TRAIN,
        paper_by_task=None,
        paper_table=None,
        paper_label="paper MNIST mean",
    )
