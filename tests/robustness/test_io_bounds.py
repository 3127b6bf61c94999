"""Issue 19, file readers read bounded memory (``bensemble.io``): every case here failed before.

Defect classes: (a) a ``.npy`` / ``.npz`` member whose data is longer than its header says was
read as the header's array, the rest silently ignored; (b) sparse files (a size no data backs)
were read whole; (c) a ``.pt`` file was loaded whatever its size, a ``.csv`` was read into a
Python object per cell (about 50x the file) and accepted non-ASCII digits; (d) file names went
raw into error messages, so a name could recolour the terminal or reorder the line; (e) a path
the system cannot look at (a name too long) escaped as an ``OSError`` traceback.
"""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import bensemble._io_csv as io_csv
import bensemble._io_files as io_files
from bensemble.io import InputError, load_array, load_labels, load_predictions


def _probs(n: int = 40, k: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).dirichlet(np.ones(k), size=(2, n))


def _small_memory(monkeypatch, nbytes: int) -> None:
    monkeypatch.setattr(io_files, "memory_bytes", lambda: nbytes, raising=False)


def _one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text and "Traceback" not in text
    return text


# ====================================================================== (a) data past the header
def test_npy_with_bytes_after_its_data_is_refused(tmp_path):
    np.save(tmp_path / "p.npy", _probs())
    with open(tmp_path / "p.npy", "ab") as f:
        f.write(np.zeros(8).tobytes())  # another array's worth of bytes, not in the header
    with pytest.raises(InputError, match="64 bytes are not described by the header") as exc:
        load_predictions(tmp_path / "p.npy")
    _one_line(exc)


def test_npz_member_with_bytes_after_its_data_is_refused(tmp_path):
    buffer = io.BytesIO()
    np.save(buffer, _probs())
    with zipfile.ZipFile(tmp_path / "p.npz", "w") as archive:
        archive.writestr("p.npy", buffer.getvalue() + b"\x00" * 24)
    with pytest.raises(InputError, match="24 bytes are not described by the header"):
        load_predictions(tmp_path / "p.npz")


def test_npy_whose_header_is_exact_still_loads(tmp_path):
    probs = _probs()
    np.save(tmp_path / "p.npy", probs)
    torch.testing.assert_close(load_predictions(tmp_path / "p.npy"), torch.from_numpy(probs))


# ====================================================================== (b) sparse files
def _sparse_npy(path: Path, shape: tuple[int, ...]) -> None:
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": shape}
    )
    with open(path, "wb") as f:
        f.write(header.getvalue())
        f.truncate(len(header.getvalue()) + 8 * int(np.prod(shape)))


def _sparse_file(path: Path, head: bytes, size: int = 8 << 20) -> None:
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)


def _holes(path: Path) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        return io_files.hole_bytes(fd, path.stat().st_size)
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    ("suffix", "head"),
    [
        pytest.param(".npy", None, id="npy"),
        pytest.param(".npz", b"PK\x03\x04", id="npz"),
        pytest.param(".pt", b"PK\x03\x04", id="pt"),
        pytest.param(".csv", b"0\n", id="csv"),
    ],
)
def test_sparse_files_are_refused_before_they_are_read(tmp_path, suffix, head):
    path = tmp_path / f"p{suffix}"
    if head is None:  # a header claiming exactly the file's apparent size
        _sparse_npy(path, (2, 200_000, 3))
    else:
        _sparse_file(path, head)
    if _holes(path) == 0:
        pytest.skip("this file system does not report holes")
    with pytest.raises(InputError, match="is a sparse file") as exc:
        load_array(path, name="predictions")
    _one_line(exc)


def test_a_dense_file_with_a_short_run_of_zeros_is_not_sparse(tmp_path):
    probs = np.zeros((2, 5000, 3))
    probs[..., 0] = 1.0  # mostly zero bytes, but written
    np.save(tmp_path / "p.npy", probs)
    assert load_predictions(tmp_path / "p.npy").shape == (2, 5000, 3)


# ====================================================================== (c) .pt and .csv
def test_pt_file_larger_than_memory_is_refused_before_loading(tmp_path, monkeypatch):
    # the chosen tensor is small; the file also holds a large one, which torch.load would load
    probs = torch.from_numpy(_probs())
    torch.save({"p": probs, "junk": torch.zeros(100_000)}, tmp_path / "p.pt")
    _small_memory(monkeypatch, 100_000)
    with pytest.raises(InputError, match="too large to load: it is loaded whole"):
        load_predictions(tmp_path / "p.pt:p")


def test_pt_float_labels_are_refused(tmp_path):
    torch.save(torch.tensor([0.0, 1.0, 2.0]), tmp_path / "y.pt")
    with pytest.raises(InputError, match="integer dtype"):
        load_labels(tmp_path / "y.pt")


def test_csv_values_beyond_memory_are_refused_while_parsing(tmp_path, monkeypatch):
    (tmp_path / "y.csv").write_text("\n".join(["1"] * 5000))
    _small_memory(monkeypatch, 16 * 1000)  # room for 1,000 values and their copy
    monkeypatch.setattr(io_csv, "BLOCK_CHARS", 64, raising=False)
    with pytest.raises(InputError, match="too large to load: it holds more than"):
        load_labels(tmp_path / "y.csv")


@pytest.mark.parametrize("block", [3, 7, 64, 1 << 20])
def test_csv_parsed_in_blocks_gives_the_written_table(tmp_path, monkeypatch, block):
    rng = np.random.default_rng(3)
    table = rng.normal(size=(57, 4))
    lines = [",".join(repr(v) for v in row) for row in table.tolist()]
    lines.insert(10, "   ")  # a blank line is skipped
    (tmp_path / "p.csv").write_text("\r\n".join(lines) + "\n\n")
    monkeypatch.setattr(io_csv, "BLOCK_CHARS", block, raising=False)
    got = load_array(tmp_path / "p.csv", name="predictions").numpy()
    np.testing.assert_array_equal(got, table)  # repr round-trips every float64 exactly
    (tmp_path / "y.csv").write_text(",".join(str(v) for v in range(300)))  # one long line
    assert load_labels(tmp_path / "y.csv").tolist() == list(range(300))


def test_csv_a_cell_split_across_blocks_keeps_the_row_structure(tmp_path, monkeypatch):
    monkeypatch.setattr(io_csv, "BLOCK_CHARS", 4, raising=False)
    (tmp_path / "p.csv").write_text("0.25,0.75\n0.5,0.5,0.0\n")
    with pytest.raises(InputError, match="line 2 has 3 columns, expected 2"):
        load_array(tmp_path / "p.csv", name="predictions")


@pytest.mark.parametrize("cell", ["\u0663", "1\u0660", "\uff11"], ids=["arabic", "mixed", "wide"])
def test_csv_digits_outside_ascii_are_refused(tmp_path, cell):
    # Python's int("\u0663") is 3: a label file of Arabic-Indic digits must not pass as ASCII.
    (tmp_path / "y.csv").write_text(f"0\n{cell}\n")
    with pytest.raises(InputError, match="must be a header-less table of numbers"):
        load_labels(tmp_path / "y.csv")


def test_csv_float_labels_are_refused_not_truncated(tmp_path):
    (tmp_path / "y.csv").write_text("0\n1.7\n2\n")
    with pytest.raises(InputError, match="integer dtype"):
        load_labels(tmp_path / "y.csv")


# ====================================================================== (d) printable names
HOSTILE = "p\x1b[2J\u202eyp\n.npy"


@pytest.mark.parametrize(
    "content",
    [b"not a numpy file", b"\x93NUMPY\x01\x00\x02\x00{}"],
    ids=["no-header", "bad-header"],
)
def test_file_names_in_errors_are_shown_escaped(tmp_path, content):
    path = tmp_path / HOSTILE
    path.write_bytes(content)
    with pytest.raises(InputError) as exc:
        load_predictions(path)
    text = _one_line(exc)
    assert not any(c in text for c in "\x1b\u202e\n"), text
    assert "p\\x1b[2J\\u202eyp\\n.npy" in text


def test_missing_file_with_a_hostile_name_is_shown_escaped(tmp_path):
    with pytest.raises(InputError, match=r"p\\x1b\[2J\\u202eyp\\n\.npy does not exist"):
        load_labels(tmp_path / HOSTILE)


# ====================================================================== (e) unreachable paths
def test_a_name_too_long_for_the_file_system_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="cannot be accessed") as exc:
        load_predictions(tmp_path / ("a" * 400 + ".npy"))
    _one_line(exc)


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    os.mkfifo(tmp_path / "p.npy")
    with pytest.raises(InputError, match="is not a file"):
        load_predictions(tmp_path / "p.npy")
