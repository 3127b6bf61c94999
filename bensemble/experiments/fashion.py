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
downloaded at run time.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np
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
from bensemble.experiments.digits import (
    encode,
    one_vs_all_records,
    summarize_one_vs_all,
    train_autoencoder,
    write_one_vs_all,
)
from bensemble.experiments.likelihood_variants import (
    likelihood_variant_records,
    write_likelihood_variants,
)
from bensemble.experiments.reproduce import DataUnavailableError

__all__ = ["CLASSES", "DATA_DIR", "FILES", "load_fashion_mnist", "read_idx", "run"]

DATA_DIR = "/usr/share/datasets/fashion-mnist"
#: split -> (images file, labels file), without the optional ``.gz``.
FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
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
QUICK = {"n_train": 100, "n_test": 100, "tasks": (0, 1), "ae_epochs": 1, "n_bins": 10}

#: IDX type codes -> big-endian numpy dtypes.
_IDX_DTYPES = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an IDX file (the MNIST format), gzipped or not, into a numpy array.

    Layout: two zero bytes, a type code (0x08 unsigned byte, 0x09 signed byte, 0x0B int16,
    0x0C int32, 0x0D float32, 0x0E float64), the number of dimensions ``d``, then ``d``
    big-endian uint32 sizes and the values in row-major order. A gzip stream is recognised by
    its magic bytes, whatever the file name.

    Args:
        path: the file.

    Returns:
        An array of the stored shape, in native byte order.

    Raises:
        ValueError: the file is not a well-formed IDX file (bad magic, unknown type code,
            size mismatch).
    """
    fn = "read_idx"
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise ValueError(f"{fn}: `path` must be an IDX file (got {path}: bad magic number)")
    code, ndim = raw[2], raw[3]
    if code not in _IDX_DTYPES:
        raise ValueError(f"{fn}: `path` must be an IDX file (got {path}: type code {code:#04x})")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{fn}: `path` must be an IDX file (got {path}: truncated header)")
    shape = tuple(int(s) for s in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = _IDX_DTYPES[code]
    expected = header + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(raw) != expected:
        raise ValueError(
            f"{fn}: `path` must hold {expected} bytes for shape {list(shape)} "
            f"(got {path}: {len(raw)} bytes)"
        )
    data = np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape)
    return data.astype(dtype.newbyteorder("="))


def _find(folder: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def load_fashion_mnist(
    data_dir: str | os.PathLike = DATA_DIR,
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """The Fashion-MNIST splits as ``{"train": (images, labels), "test": (images, labels)}``.

    Images are ``[N, 1, 28, 28]`` float32 in [0, 1], labels ``[N]`` int64.

    Raises:
        DataUnavailableError: a file is missing (the message says how to install them).
        ValueError: a file is not a valid IDX file, or images and labels disagree.
    """
    folder = Path(data_dir)
    out = {}
    for split, stems in FILES.items():
        paths = [_find(folder, stem) for stem in stems]
        missing = [stem for stem, p in zip(stems, paths) if p is None]
        if missing:
            raise DataUnavailableError(
                f"Fashion-MNIST not found: {folder} lacks {missing[0]}[.gz]; install it with "
                "`make data` (apt-get install -y dataset-fashion-mnist) or pass --data-dir DIR"
            )
        images, labels = (read_idx(p) for p in paths)
        if images.ndim != 3 or labels.ndim != 1 or images.shape[0] != labels.shape[0]:
            raise ValueError(
                f"load_fashion_mnist: `{split}` images [N, H, W] and labels [N] must agree "
                f"(got shapes {list(images.shape)} and {list(labels.shape)})"
            )
        x = torch.from_numpy(images.astype(np.float32) / 255.0)[:, None]
        out[split] = (x, torch.from_numpy(labels.astype(np.int64)))
    return out


def run(options: RunOptions) -> ExperimentResult:
    """Run the one-vs-all protocol on Fashion-MNIST; print and write its tables."""
    watch, printer = Stopwatch(), Printer()
    quick = options.quick
    data = load_fashion_mnist(options.extra.get("data_dir") or DATA_DIR)
    x_train, y_train = data["train"]
    x_test, y_test = data["test"]
    if x_train.shape[-1] % 4:
        raise ValueError(
            f"fashion: images must have a side divisible by 4 (got {x_train.shape[-1]})"
        )
    settings = zoo_settings(quick)
    classes = QUICK["tasks"] if quick else tuple(range(10))
    tasks = [(k, CLASSES[k]) for k in classes]
    n_bins = QUICK["n_bins"] if quick else EECE_BINS
    ae_epochs = QUICK["ae_epochs"] if quick else AE_EPOCHS
    n_train = options.extra.get("n_train")
    n_train = (QUICK["n_train"] if quick else N_TRAIN) if n_train is None else int(n_train)
    if n_train <= 0 or n_train > len(y_train):
        n_train = len(y_train)
    if quick:
        x_test, y_test = x_test[: QUICK["n_test"]], y_test[: QUICK["n_test"]]
    repeats = options.n_repeats(1)
    report = options.report("fashion")
    printer(
        f"fashion: Fashion-MNIST, the paper's conv auto-encoder ({LATENT_DIM}-d latent, "
        f"{ae_epochs} epochs on {len(y_train)} images), classifiers on {n_train} training "
        f"latents, {len(y_test)} test images; {len(tasks)} one-vs-all tasks x 9 methods; EECE "
        f"with {n_bins} K-means bins ({EECE_BACKEND}); {repeats} repeat(s), seed {options.seed}"
        f"{' (quick settings)' if quick else ''}"
    )
    records, variants = [], []  # variants: the Likelihood's readings (likelihood_variants)
    with single_thread():
        for seed in repeat_seeds(options.seed, repeats):
            ae = train_autoencoder(
                x_train,
                latent_dim=LATENT_DIM,
                epochs=ae_epochs,
                seed=seed,
                progress=options.progress,
            )
            pick = torch.randperm(len(y_train), generator=torch.Generator().manual_seed(seed))
            pick = pick[:n_train]
            z_tr, z_te = encode(ae, x_train[pick]), encode(ae, x_test)
            records += one_vs_all_records(
                z_tr,
                y_train[pick],
                z_te,
                y_test,
                tasks,
                settings=settings,
                seed=seed,
                n_bins=n_bins,
                progress=options.progress,
                desc=f"fashion (seed {seed})",
            )
            variants += likelihood_variant_records(
                z_tr,
                y_train[pick],
                z_te,
                y_test,
                tasks,
                seed=seed,
                n_bins=n_bins,
                n_members=settings.n_samples,
            )
    tables = summarize_one_vs_all(records, [n for _, n in tasks], paper_by_task=None)
    write_one_vs_all("fashion", tables, report, printer, paper_label="paper MNIST mean")
    write_likelihood_variants("fashion", variants, tables, report, printer)
    return finish("fashion", report, tables, watch, printer)
