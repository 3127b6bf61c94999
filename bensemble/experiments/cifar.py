"""``bensemble reproduce cifar10 --data-dir DIR``: table 2 on the real CIFAR-10 (not run offline).

The paper's CIFAR-10 pipeline (section 4.3, appendix B.1.2) on files the user already has, read by
:func:`bensemble.datasets.vision.load_cifar10`: the binary version (``data_batch_1.bin`` ...
``data_batch_5.bin``, ``test_batch.bin``) or the python version (``data_batch_1`` ...,
``test_batch``, read with a restricted unpickler that runs no code). The wider auto-encoder
(Conv2d 3->16 s2, 16->32 s2, Linear 2048->256; mirrored decoder; 5 epochs, MSE, Adam) on the
50,000 training images, then the ten "class vs all" tasks with the nine methods on the 10,000
test images, side by side with the paper's table 2; fig. 4(a) is written beside the tables. The
classifiers see ``--n-train`` seeded training latents (default 10,000; ``0``: all). Without
``--data-dir`` (or when DIR lacks a file) the command exits with status 2 and one line.
"""

from __future__ import annotations

from bensemble.datasets.vision import CIFAR10_CLASSES, load_cifar10
from bensemble.experiments._common import ExperimentResult, RunOptions
from bensemble.experiments.one_vs_all import PAPER_TABLE2, run_image_one_vs_all
from bensemble.experiments.reproduce import DataDirError

__all__ = ["LATENT_DIM", "run"]

LATENT_DIM = 256
AE_EPOCHS = 5
N_TRAIN = 10_000


def run(options: RunOptions) -> ExperimentResult:
    """Run table 2's protocol on CIFAR-10 read from ``options.extra["data_dir"]``."""
    data_dir = options.extra.get("data_dir")
    if not data_dir:
        raise DataDirError("CIFAR-10 is not bundled: pass --data-dir DIR (data_batch_*.bin ...)")
    try:
        data = load_cifar10(data_dir)
    except FileNotFoundError as err:
        raise DataDirError(f"{err}; pass --data-dir DIR holding them") from None
    return run_image_one_vs_all(
        options,
        data,
        name="cifar10",
        title="CIFAR-10",
        class_names=CIFAR10_CLASSES,
        latent_dim=LATENT_DIM,
        ae_epochs=AE_EPOCHS,
        n_train=N_TRAIN,
        paper_by_task=list(range(10)),
        paper_table=PAPER_TABLE2,
        paper_label="paper table 2",
    )
