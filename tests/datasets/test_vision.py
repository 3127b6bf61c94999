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


# ============================================================================ issue 19: bounded
# reading. Each test failed before: a float label was truncated (1.7 -> 1), a pickle's labels were
# converted before their structure was checked, a sparse or oversized file was read whole, a
# pickle could make numpy allocate what it claimed, and file names went raw into messages.
def _sparse(path: Path, header: bytes, size: int) -> None:
    with open(path, "wb") as f:
        f.write(header)
        f.truncate(size)  # the rest: a hole, no blocks on disk


def _small_memory(monkeypatch, nbytes: int) -> None:
    import bensemble._io_files as files

    monkeypatch.setattr(files, "memory_bytes", lambda: nbytes, raising=False)


def test_idx_float_labels_are_refused_not_truncated(tmp_path):
    _fake_mnist(tmp_path)
    labels = np.array([1.7] * 8, dtype=">f4")
    header = bytes([0, 0, 0x0D, 1]) + np.asarray([8], ">u4").tobytes()
    (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(header + labels.tobytes())
    with pytest.raises(ValueError, match=r"labels must be integers \(got dtype float32\)"):
        load_mnist(tmp_path)


def test_read_idx_refuses_a_sparse_file_before_reading_it(tmp_path):
    path = tmp_path / "sparse-idx"
    shape = (64, 256, 256)  # 4 MiB claimed, matching the file's apparent size
    header = bytes([0, 0, 0x08, 3]) + np.asarray(shape, ">u4").tobytes()
    _sparse(path, header, len(header) + int(np.prod(shape)))
    assert os.stat(path).st_blocks * 512 < 1 << 20  # the test means what it says
    with pytest.raises(ValueError, match="sparse file"):
        read_idx(path)


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_read_idx_refuses_a_size_beyond_memory(tmp_path, monkeypatch, compress):
    array = np.zeros((50, 28, 28), dtype=np.uint8)
    path = tmp_path / "f"
    _write_idx(path, array, compress)
    _small_memory(monkeypatch, 10_000)
    with pytest.raises(ValueError, match="too large to load: its header claims shape"):
        read_idx(path)


def test_read_cifar10_bin_refuses_sparse_and_oversized_files(tmp_path, monkeypatch):
    path = tmp_path / "test_batch.bin"
    _sparse(path, b"\x00", CIFAR10_RECORD * 1000)
    with pytest.raises(ValueError, match="sparse file"):
        read_cifar10_bin(path)
    _fake_cifar_bin(tmp_path, n=4)
    _small_memory(monkeypatch, 3 * CIFAR10_RECORD)
    with pytest.raises(ValueError, match="too large to load"):
        read_cifar10_bin(path)


def _batch(labels, n: int = 3, protocol: int = 2) -> bytes:
    return pickle.dumps({b"data": np.zeros((n, 3072), np.uint8), b"labels": labels}, protocol)


@pytest.mark.parametrize(
    ("labels", "match"),
    [
        pytest.param([1.7, 2.0, 0.0], "float items; a float label is refused", id="float"),
        pytest.param([True, False, True], "bool items", id="bool"),
        pytest.param([[1, 2], [3], [4]], "list items", id="nested"),
        pytest.param([1, 2], r"shape \[3\]", id="short"),
        pytest.param(np.array([1.0, 2.0, 3.0]), "float64 array", id="float-array"),
        pytest.param(np.array([[1, 2, 3]]), r"of shape \[1, 3\]", id="2d-array"),
        pytest.param([1, 2, 10**30], r"0..9", id="huge-int"),
        pytest.param("012", "str", id="string"),
    ],
)
def test_read_cifar10_pickle_checks_the_label_list_before_converting_it(tmp_path, labels, match):
    path = tmp_path / "b"
    path.write_bytes(_batch(labels))
    with pytest.raises(ValueError, match=match):
        read_cifar10_pickle(path)


def test_read_cifar10_pickle_refuses_a_memo_bomb_of_labels_without_expanding_it(tmp_path):
    # 3 labels, each a list holding 2^12 references to a list of 2^12 references...: a few KB
    # of pickle that np.asarray would expand to 2^36 values.
    inner: list = [0] * 4096
    for _ in range(2):
        inner = [inner] * 4096
    path = tmp_path / "b"
    path.write_bytes(_batch([inner, inner, inner]))
    assert path.stat().st_size < 200_000
    with pytest.raises(ValueError, match="list items"):
        read_cifar10_pickle(path)


def _reduce_ndarray_pickle(shape: tuple[int, ...]) -> bytes:
    """A protocol-2 pickle calling numpy.ndarray(shape) directly (not through _reconstruct)."""
    dims = b"".join(b"J" + int(d).to_bytes(4, "little") for d in shape)
    return b"\x80\x02cnumpy\nndarray\n(" + dims + b"tR."


def test_restricted_unpickler_never_lets_a_pickle_allocate_what_it_claims(tmp_path):
    path = tmp_path / "b"
    # numpy.ndarray called with a huge shape: not callable through the restricted unpickler
    path.write_bytes(_reduce_ndarray_pickle((10**6, 10**6)))
    with pytest.raises(ValueError, match="CIFAR-10 python batch"):
        read_cifar10_pickle(path)
    # _reconstruct with a claimed shape other than numpy's own (0,)
    raw = pickle.dumps(np.zeros(3, np.uint8), protocol=2)
    assert b"K\x00\x85" in raw  # the (0,) numpy writes: BININT1 0, TUPLE1
    path.write_bytes(raw.replace(b"K\x00\x85", b"J\x00\xe1\xf5\x05\x85", 1))  # (10**8,)
    with pytest.raises(ValueError, match="only as numpy writes it"):
        read_cifar10_pickle(path)
    # more arrays than a batch holds (a memo could otherwise multiply one)
    many = {b"data": np.zeros((1, 3072), np.uint8), b"labels": [0]}
    many[b"extra"] = [np.zeros(1, np.uint8) for _ in range(8)]
    path.write_bytes(pickle.dumps(many, protocol=2))
    with pytest.raises(ValueError, match="more than 4 arrays"):
        read_cifar10_pickle(path)


def test_read_cifar10_pickle_refuses_a_sparse_file(tmp_path):
    path = tmp_path / "data_batch_1"
    _sparse(path, b"\x80\x02", 8 << 20)
    with pytest.raises(ValueError, match="sparse file"):
        read_cifar10_pickle(path)


def test_file_names_in_reader_errors_are_printable(tmp_path):
    path = tmp_path / "x\x1b[31m\u202ered"
    path.write_bytes(b"\x01\x02")
    for reader in (read_idx, read_cifar10_bin):
        with pytest.raises(ValueError) as exc:
            reader(path)
        text = str(exc.value)
        assert "\x1b" not in text and "\u202e" not in text, text
        assert "\\x1b[31m\\u202ered" in text


def test_readers_refuse_a_fifo_without_waiting_for_a_writer(tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    os.mkfifo(tmp_path / "train-images-idx3-ubyte")
    for reader in (read_idx, read_cifar10_bin, read_cifar10_pickle):
        with pytest.raises(ValueError, match="is not a regular file"):
            reader(tmp_path / "train-images-idx3-ubyte")
