"""The MNIST / CIFAR-10 readers on small synthetic files written in the exact formats."""

from __future__ import annotations

import gzip
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from bensemble.datasets.vision import (
    CIFAR10_RECORD,
    load_cifar10,
    load_mnist,
    read_cifar10_bin,
    read_cifar10_pickle,
    read_idx,
)


def _write_idx(path: Path, array: np.ndarray, compress: bool) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + np.asarray(array.shape, ">u4").tobytes()
    raw = header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()
    path.write_bytes(gzip.compress(raw) if compress else raw)


def _fake_mnist(folder: Path, n_train: int = 12, n_test: int = 8) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for prefix, n, gz in (("train", n_train, True), ("t10k", n_test, False)):
        labels = (np.arange(n) % 10).astype(np.uint8)
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        suffix = ".gz" if gz else ""
        _write_idx(folder / f"{prefix}-images-idx3-ubyte{suffix}", images, gz)
        _write_idx(folder / f"{prefix}-labels-idx1-ubyte{suffix}", labels, gz)
        arrays[prefix] = images
    return arrays


def _cifar_arrays(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(n, 3072), dtype=np.uint8), np.arange(n) % 10


def _fake_cifar_bin(folder: Path, n: int = 4) -> dict[str, np.ndarray]:
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for i, name in enumerate([*(f"data_batch_{k}" for k in range(1, 6)), "test_batch"]):
        data, labels = _cifar_arrays(n, i)
        records = np.concatenate([labels[:, None].astype(np.uint8), data], axis=1)
        (folder / f"{name}.bin").write_bytes(records.tobytes())
        written[name] = data
    return written


def _fake_cifar_py(folder: Path, n: int = 4) -> dict[str, np.ndarray]:
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for i, name in enumerate([*(f"data_batch_{k}" for k in range(1, 6)), "test_batch"]):
        data, labels = _cifar_arrays(n, i)
        batch = {
            b"batch_label": b"batch",
            b"labels": [int(v) for v in labels],
            b"data": data,
            b"filenames": [f"img{j}.png".encode() for j in range(n)],
        }
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
        written[name] = data
    return written


# ----------------------------------------------------------------------------- IDX / MNIST
def test_load_mnist_reads_gz_and_plain_files(tmp_path):
    arrays = _fake_mnist(tmp_path)
    data = load_mnist(tmp_path)
    x, y = data["train"]
    assert x.shape == (12, 1, 28, 28) and x.dtype == torch.float32
    torch.testing.assert_close(x[:, 0], torch.from_numpy(arrays["train"]).float() / 255.0)
    assert y.tolist() == [i % 10 for i in range(12)]
    assert data["test"][0].shape == (8, 1, 28, 28)


def test_load_mnist_names_the_missing_file(tmp_path):
    _fake_mnist(tmp_path)
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(FileNotFoundError, match="t10k-labels-idx1-ubyte"):
        load_mnist(tmp_path)


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_read_idx_refuses_truncated_and_wrong_magic(tmp_path, compress):
    path = tmp_path / "f"
    array = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    header = bytes([0, 0, 0x08, 3]) + np.asarray(array.shape, ">u4").tobytes()
    good = header + array.tobytes()
    write = lambda raw: path.write_bytes(gzip.compress(raw) if compress else raw)  # noqa: E731
    write(good)
    np.testing.assert_array_equal(read_idx(path), array)
    write(good[:-1])
    with pytest.raises(ValueError, match="must hold 40 bytes"):
        read_idx(path)
    write(good + b"\x00")
    with pytest.raises(ValueError, match="must hold 40 bytes"):
        read_idx(path)
    write(b"\x01\x00" + good[2:])
    with pytest.raises(ValueError, match="bad magic number"):
        read_idx(path)
    write(b"\x00\x00\x07\x03" + good[4:])
    with pytest.raises(ValueError, match="type code"):
        read_idx(path)
    write(header[:9])
    with pytest.raises(ValueError, match="truncated header"):
        read_idx(path)


def test_read_idx_refuses_a_huge_header_before_allocating(tmp_path):
    path = tmp_path / "bomb.gz"
    huge = bytes([0, 0, 0x08, 3]) + np.asarray([60000, 60000, 60000], ">u4").tobytes()
    path.write_bytes(gzip.compress(huge + b"\x00" * 10))
    with pytest.raises(ValueError, match="cannot hold that many"):
        read_idx(path)
    plain = tmp_path / "bomb"
    plain.write_bytes(huge)
    with pytest.raises(ValueError, match="must hold 216000000000016 bytes"):
        read_idx(plain)


# ----------------------------------------------------------------------------- CIFAR-10
def test_load_cifar10_binary_version(tmp_path):
    written = _fake_cifar_bin(tmp_path, n=4)
    data = load_cifar10(tmp_path)
    x, y = data["train"]
    assert x.shape == (20, 3, 32, 32) and y.shape == (20,)
    first = torch.from_numpy(written["data_batch_1"][0].reshape(3, 32, 32)).float() / 255.0
    torch.testing.assert_close(x[0], first)
    assert data["test"][1].tolist() == [0, 1, 2, 3]


def test_load_cifar10_python_version_matches_the_binary_one(tmp_path):
    _fake_cifar_bin(tmp_path / "bin", n=3)
    _fake_cifar_py(tmp_path / "py" / "cifar-10-batches-py", n=3)
    a, b = load_cifar10(tmp_path / "bin"), load_cifar10(tmp_path / "py")
    for split in ("train", "test"):
        torch.testing.assert_close(a[split][0], b[split][0])
        assert a[split][1].tolist() == b[split][1].tolist()


def test_read_cifar10_bin_refuses_truncated_files_and_bad_labels(tmp_path):
    _fake_cifar_bin(tmp_path, n=2)
    path = tmp_path / "test_batch.bin"
    raw = path.read_bytes()
    path.write_bytes(raw[:-1])
    with pytest.raises(ValueError, match=f"multiple of {CIFAR10_RECORD} bytes"):
        read_cifar10_bin(path)
    path.write_bytes(b"\x0a" + raw[1:])
    with pytest.raises(ValueError, match="labels must lie in 0..9"):
        read_cifar10_bin(path)
    (tmp_path / "data_batch_3.bin").unlink()
    with pytest.raises(FileNotFoundError, match="data_batch_3.bin"):
        load_cifar10(tmp_path)


class _Exploit:
    """A pickle that, unrestricted, runs a shell command creating ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_restricted_unpickler_refuses_a_payload_that_would_run_code(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "data_batch_1"
    payload = pickle.dumps({b"data": _Exploit(marker), b"labels": [0]}, protocol=2)
    path.write_bytes(payload)
    with pytest.raises(ValueError, match="is not allowed"):
        read_cifar10_pickle(path)
    assert not marker.exists()
    # The same bytes through the plain unpickler would have run it (the test can fail).
    pickle.loads(payload)
    assert marker.exists()


def test_read_cifar10_pickle_refuses_wrong_contents(tmp_path):
    path = tmp_path / "b"
    path.write_bytes(pickle.dumps([1, 2, 3], protocol=2))
    with pytest.raises(ValueError, match="must hold a dict"):
        read_cifar10_pickle(path)
    path.write_bytes(pickle.dumps({b"data": np.zeros((2, 10), np.uint8), b"labels": [0, 1]}))
    with pytest.raises(ValueError, match=r"shape \[N, 3072\]"):
        read_cifar10_pickle(path)
    path.write_bytes(pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 11]}))
    with pytest.raises(ValueError, match="0..9"):
        read_cifar10_pickle(path)
    path.write_bytes(pickle.dumps({b"data": np.zeros((2, 3072), np.uint8)})[:-5])
    with pytest.raises(ValueError, match="CIFAR-10 python batch"):
        read_cifar10_pickle(path)


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_read_cifar10_pickle_reads_every_protocol_and_the_old_numpy_module_name(tmp_path, protocol):
    data, labels = _cifar_arrays(3, 0)
    raw = pickle.dumps({b"data": data, b"labels": labels.tolist()}, protocol=protocol)
    path = tmp_path / "b"
    # Protocol 2 names globals as text: rename to numpy 1.x's module (the real files' form).
    renamed = raw.replace(b"numpy._core", b"numpy.core") if protocol == 2 else raw
    for payload in (raw, renamed):
        path.write_bytes(payload)
        images, y = read_cifar10_pickle(path)
        np.testing.assert_array_equal(images.reshape(3, -1), data)
        assert y.tolist() == [0, 1, 2]
