"""``bensemble reproduce fashion | mnist | cifar10``: the one-vs-all protocol on image files.

The paper's pipeline (section 4.3, appendix B.1.2; :mod:`bensemble.experiments.one_vs_all`) on
files read from disk, nothing downloaded:

* ``fashion`` - Fashion-MNIST from Debian's ``dataset-fashion-mnist`` package (``make data``
  runs ``apt-get install -y dataset-fashion-mnist``; the four gzipped IDX files under
  ``/usr/share/datasets/fashion-mnist/``) or ``--data-dir``. The MNIST auto-encoder (64-d latent,
  5 epochs) on the 60,000 training images; the classifiers on ``--n-train`` seeded latents
  (default 10,000: about 32 minutes on 2 shared cores; ``0``: all 60,000, hours). The paper has
  no Fashion-MNIST numbers: its MNIST means are printed for scale (not comparable), and its
  orderings are judged.
* ``mnist`` - table 1 from the four MNIST IDX files in ``--data-dir`` (required).
* ``cifar10`` - table 2 from CIFAR-10's binary or python files in ``--data-dir`` (required; the
  python version read with a restricted unpickler that runs no code): the wider auto-encoder
  (256-d latent).

Without the files a run exits with status 2 (``--data-dir`` missing or lacking a file) or 1
(Fashion-MNIST not installed) and one line.
"""

from __future__ import annotations

import os
from functools import cache

import torch

from bensemble.datasets.vision import CIFAR10_CLASSES, load_cifar10, load_idx_dataset, read_idx
from bensemble.experiments._common import DataDirError, DataUnavailableError, RunOptions
from bensemble.experiments.one_vs_all import VisionDataset, one_vs_all_spec
from bensemble.experiments.runner import run_spec

__all__ = [
    "CIFAR10",
    "FASHION",
    "FASHION_CLASSES",
    "FASHION_DIR",
    "MNIST",
    "load_fashion_mnist",
    "read_idx",
    "run_cifar10",
    "run_fashion",
    "run_mnist",
]

FASHION_DIR = "/usr/share/datasets/fashion-mnist"
FASHION_CLASSES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)  # fmt: skip
Splits = dict[str, tuple[torch.Tensor, torch.Tensor]]


def load_fashion_mnist(data_dir: str | os.PathLike = FASHION_DIR) -> Splits:
    """The Fashion-MNIST splits, images ``[N, 1, 28, 28]`` float32 in [0, 1], labels ``[N]``.

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


@cache
def _files(name: str, data_dir: str) -> Splits:
    """A file data set, read once per process (every repeat uses the same files)."""
    if name == "fashion":
        return load_fashion_mnist(data_dir)
    try:
        return load_cifar10(data_dir) if name == "cifar10" else load_idx_dataset(data_dir)
    except FileNotFoundError as err:
        raise DataDirError(f"{err} (pass --data-dir DIR holding its files)") from None


def _loader(name: str, default_dir: str | None = None):
    return lambda config, seed: _files(name, str(config.extra.get("data_dir") or default_dir))


def _needs_data_dir(name: str, what: str):
    def check(options: RunOptions) -> None:
        if not options.extra.get("data_dir"):
            raise DataDirError(f"{name} is not bundled: pass --data-dir DIR ({what})")

    return check


FASHION = VisionDataset(
    name="fashion", title="Fashion-MNIST", load=_loader("fashion", FASHION_DIR),
    class_names=FASHION_CLASSES, latent_dim=64, ae_epochs=5, n_train=10_000, paper="table1",
    paper_label="paper MNIST mean", paper_rows=False,
    stand_in="the paper's value is MNIST's (Fashion-MNIST is a stand-in)",
)  # fmt: skip
MNIST = VisionDataset(
    name="mnist", title="MNIST", load=_loader("mnist"),
    class_names=tuple(f"{k}vsAll" for k in range(10)), latent_dim=64, ae_epochs=5,
    n_train=10_000, paper="table1", paper_label="paper table 1",
    check=_needs_data_dir("MNIST", "the four IDX files"),
)  # fmt: skip
CIFAR10 = VisionDataset(
    name="cifar10", title="CIFAR-10", load=_loader("cifar10"), class_names=CIFAR10_CLASSES,
    latent_dim=256, ae_epochs=5, n_train=10_000, paper="table2", paper_label="paper table 2",
    check=_needs_data_dir("CIFAR-10", "data_batch_*.bin ..."),
)  # fmt: skip
SPECS = {
    "fashion": one_vs_all_spec(FASHION, "one-vs-all on Fashion-MNIST (table 1 protocol)"),
    "mnist": one_vs_all_spec(MNIST, "table 1 on MNIST files (--data-dir)"),
    "cifar10": one_vs_all_spec(CIFAR10, "table 2 on CIFAR-10 files (--data-dir)"),
}


def run_fashion(options: RunOptions):
    """Run the one-vs-all protocol on Fashion-MNIST."""
    return run_spec(SPECS["fashion"], options)


def run_mnist(options: RunOptions):
    """Run table 1's protocol on MNIST read from ``options.extra["data_dir"]``."""
    return run_spec(SPECS["mnist"], options)


def run_cifar10(options: RunOptions):
    """Run table 2's protocol on CIFAR-10 read from ``options.extra["data_dir"]``."""
    return run_spec(SPECS["cifar10"], options)
