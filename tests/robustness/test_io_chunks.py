"""Issue 19, a file truncated while it is read in chunks: :func:`bensemble.io.open_npy_chunks`.

The reader must give exactly what ``np.load(mmap_mode="r")`` slicing gives (every dtype, byte
order, memory order, axis, ``take`` pattern) and, where a memory map dies with SIGBUS when the file
shrinks underneath, raise one :class:`InputError` naming the file. The first test shows the
defect class on the memory map itself, in a child process, so the contrast is measured here.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bensemble._io_chunks as chunks_module
from bensemble.io import InputError, NpyChunks, open_npy_chunks

_CHILD = """
import os, sys, numpy as np
path, how = sys.argv[1], sys.argv[2]
if how == "mmap":
    array = np.load(path, mmap_mode="r")
else:
    from bensemble.io import open_npy_chunks
    array = open_npy_chunks(path)
os.truncate(path, 4096)  # another process shrinks the file
try:
    block = array[-1000:] if how == "mmap" else array.read(array.shape[0] - 1000, array.shape[0])
    print(float(np.asarray(block).sum()))
except ValueError as exc:
    print("ValueError:", exc)
"""


@pytest.mark.skipif(not hasattr(signal, "SIGBUS"), reason="SIGBUS is POSIX")
def test_truncated_while_read_memory_map_dies_chunk_reader_raises(tmp_path):
    path = tmp_path / "p.npy"
    np.save(path, np.ones((200_000, 10), np.float32))
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    code = textwrap.dedent(_CHILD)
    mmap = subprocess.run(
        [sys.executable, "-c", code, str(path), "mmap"], capture_output=True, text=True, env=env
    )
    assert mmap.returncode == -signal.SIGBUS  # the defect class: the process is killed
    np.save(path, np.ones((200_000, 10), np.float32))
    ours = subprocess.run(
        [sys.executable, "-c", code, str(path), "chunks"], capture_output=True, text=True, env=env
    )
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout.startswith("ValueError: `predictions` file ")
    assert "changed while being read" in ours.stdout and str(path) in ours.stdout


def test_a_short_read_is_an_input_error_naming_the_file(tmp_path, monkeypatch):
    np.save(tmp_path / "p.npy", np.arange(40_000.0).reshape(4, 10_000))
    with open_npy_chunks(tmp_path / "p.npy") as chunks:
        os.truncate(tmp_path / "p.npy", 50_000)
        # the size check passes (as if the file shrank between it and the read)
        monkeypatch.setattr(NpyChunks, "_check_size", lambda self: None)
        with pytest.raises(InputError, match="was truncated while being read") as exc:
            chunks.read(0, 4)
    assert str(tmp_path / "p.npy") in str(exc.value) and "\n" not in str(exc.value)


def test_a_file_that_grew_is_refused_too(tmp_path):
    np.save(tmp_path / "p.npy", np.zeros((10, 3)))
    with open_npy_chunks(tmp_path / "p.npy") as chunks:
        with open(tmp_path / "p.npy", "ab") as f:
            f.write(b"\0" * 24)
        with pytest.raises(InputError, match="held 368 bytes when opened and holds 392 now"):
            chunks.read(0, 1)


# ============================================================================ same values as numpy
DTYPES = ["<f4", ">f4", "<f8", ">f8", "<f2", "<i8", ">i4", "u1", "|b1"]


@settings(max_examples=60, deadline=None)
@given(
    shape=st.lists(st.integers(0, 7), min_size=1, max_size=4).map(tuple),
    dtype=st.sampled_from(DTYPES),
    fortran=st.booleans(),
    data=st.data(),
)
def test_read_and_take_equal_numpy_slicing(tmp_path_factory, shape, dtype, fortran, data):
    rng = np.random.default_rng(0)
    array = (rng.normal(size=shape) * 50).astype(dtype)
    if fortran:
        array = np.asfortranarray(array)
    path = tmp_path_factory.mktemp("c") / "a.npy"
    np.save(path, array)
    axis = data.draw(st.integers(0, len(shape) - 1))
    n = shape[axis]
    start = data.draw(st.integers(0, n + 2))
    stop = data.draw(st.integers(0, n + 3))
    indices = data.draw(st.lists(st.integers(0, max(n - 1, 0)), max_size=12)) if n else []
    with open_npy_chunks(path) as chunks:
        assert chunks.shape == array.shape and chunks.dtype == array.dtype.newbyteorder("=")
        got = chunks.read(start, stop, axis=axis)
        want = np.take(array, np.arange(min(start, n), min(max(start, stop), n)), axis=axis)
        np.testing.assert_array_equal(got, want)
        assert got.flags.c_contiguous and got.flags.writeable and got.dtype.isnative
        taken = chunks.take(np.array(indices, dtype=np.int64), axis=axis)
        want = np.take(array, np.array(indices, dtype=int), axis=axis)
        np.testing.assert_array_equal(taken, want)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_reading_into_a_reused_buffer_gives_the_same_values(tmp_path, axis):
    array = np.random.default_rng(1).normal(size=(4, 30, 5)).astype(">f4")
    np.save(tmp_path / "a.npy", array)
    with open_npy_chunks(tmp_path / "a.npy") as chunks:
        shape = list(array.shape)
        shape[axis] = 2
        buffer = np.empty(shape, dtype=chunks.dtype)
        for s in range(0, array.shape[axis] - 1, 2):
            out = chunks.read(s, s + 2, axis=axis, out=buffer)
            assert out is buffer
            np.testing.assert_array_equal(out, np.take(array, [s, s + 1], axis=axis))
        with pytest.raises(ValueError, match="`out` must be a writable C-contiguous"):
            chunks.read(0, 3, axis=axis, out=buffer)


@pytest.mark.parametrize(("span", "gap"), [(64, 8), (8, 0), (1 << 20, 4096)])
def test_take_reads_scattered_rows_in_bounded_spans(tmp_path, monkeypatch, span, gap):
    monkeypatch.setattr(chunks_module, "SPAN_BYTES", span)
    monkeypatch.setattr(chunks_module, "_GAP_BYTES", gap)
    array = np.arange(3 * 500 * 2, dtype=np.float64).reshape(3, 500, 2)
    np.save(tmp_path / "a.npy", array)
    reads: list[int] = []
    original = NpyChunks.read

    def spy(self, start, stop, **kwargs):
        reads.append(stop - start)
        return original(self, start, stop, **kwargs)

    monkeypatch.setattr(NpyChunks, "read", spy)
    rows = np.random.default_rng(2).permutation(500)[:120]
    with open_npy_chunks(tmp_path / "a.npy") as chunks:
        np.testing.assert_array_equal(chunks.take(rows, axis=1), array[:, rows])
    row_bytes = 3 * 2 * 8  # one index along axis 1 of [3, 500, 2] float64
    if span // row_bytes <= 1:  # a span holds one row: every wanted row read on its own
        assert reads == [1] * len(set(rows.tolist()))
    else:  # rows < 4 KiB apart coalesce: far fewer reads than rows, none past the budget
        assert len(reads) < 10 and max(reads) <= span // row_bytes


def test_columns_of_a_wide_array_are_read_through_small_gaps(tmp_path):
    array = np.arange(2000 * 6, dtype=np.int16).reshape(2000, 6)
    np.save(tmp_path / "a.npy", array)
    with open_npy_chunks(tmp_path / "a.npy") as chunks:
        np.testing.assert_array_equal(chunks.read(2, 4, axis=1), array[:, 2:4])


# ============================================================================ archives, pickling
def test_uncompressed_npz_member_is_read_in_place(tmp_path):
    a, b = np.arange(60.0).reshape(3, 20), np.arange(5)
    np.savez(tmp_path / "p.npz", probs=a, other=b)
    with open_npy_chunks(f"{tmp_path / 'p.npz'}:probs") as chunks:
        np.testing.assert_array_equal(chunks.read(5, 9, axis=1), a[:, 5:9])
    with pytest.raises(InputError, match=r"holds 2 arrays \(probs, other\)"):
        open_npy_chunks(tmp_path / "p.npz")


def test_compressed_npz_and_other_formats_are_refused_with_the_way_out(tmp_path):
    np.savez_compressed(tmp_path / "p.npz", np.zeros(3))
    with pytest.raises(InputError, match="compressed .* save it with numpy.save"):
        open_npy_chunks(tmp_path / "p.npz")
    (tmp_path / "p.csv").write_text("0.5,0.5\n")
    with pytest.raises(InputError, match="cannot be read in chunks"):
        open_npy_chunks(tmp_path / "p.csv")


@pytest.mark.parametrize(
    ("array", "match"),
    [
        (np.array([1 + 2j]), "must hold numbers"),
        (np.array(["a"]), "must hold numbers"),
        (np.zeros(2, dtype=[("x", "<f8")]), "must hold numbers"),
    ],
    ids=["complex", "str", "structured"],
)
def test_non_numeric_arrays_are_refused(tmp_path, array, match):
    np.save(tmp_path / "a.npy", array)
    with pytest.raises(InputError, match=match):
        open_npy_chunks(tmp_path / "a.npy")


def test_object_arrays_and_data_past_the_header_are_refused(tmp_path):
    np.save(tmp_path / "o.npy", np.array([{}], dtype=object), allow_pickle=True)
    with pytest.raises(InputError, match="pickled object array"):
        open_npy_chunks(tmp_path / "o.npy")
    np.save(tmp_path / "a.npy", np.zeros(4))
    with open(tmp_path / "a.npy", "ab") as f:
        f.write(b"\0" * 8)
    with pytest.raises(InputError, match="not described by the header"):
        open_npy_chunks(tmp_path / "a.npy")


def test_pickled_reader_reopens_the_same_file_or_refuses(tmp_path):
    array = np.arange(12.0).reshape(4, 3)
    np.save(tmp_path / "a.npy", array)
    with open_npy_chunks(tmp_path / "a.npy") as chunks:
        blob = pickle.dumps(chunks)
    with pickle.loads(blob) as again:
        np.testing.assert_array_equal(again.read(1, 3), array[1:3])
    os.replace(tmp_path / "a.npy", tmp_path / "old.npy")
    np.save(tmp_path / "a.npy", array)  # same content, another file
    with pytest.raises(InputError, match="changed since it was opened"):
        pickle.loads(blob)


def test_bad_arguments_are_value_errors(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((3, 4)))
    chunks = open_npy_chunks(tmp_path / "a.npy")
    for call, match in [
        (lambda: chunks.read(-1, 2), "`start` must be an int >= 0"),
        (lambda: chunks.read(0, 2.5), "`stop` must be an int >= 0"),
        (lambda: chunks.read(0, 1, axis=2), r"`axis` must lie in \[-2, 1\]"),
        (lambda: chunks.read(True, 1), "`start`"),
        (lambda: chunks.take([0.5]), "1-D array of integers"),
        (lambda: chunks.take([3]), r"must lie in \[0, 2\]"),
    ]:
        with pytest.raises(ValueError, match=match):
            call()
    chunks.close()
    with pytest.raises(ValueError, match="was closed"):
        chunks.read(0, 1)


def test_the_zip_member_offset_follows_the_local_header(tmp_path):
    # a local header whose extra field differs from the central directory's
    np.save(tmp_path / "m.npy", np.arange(6.0))
    with zipfile.ZipFile(tmp_path / "p.npz", "w") as archive:
        info = zipfile.ZipInfo("x.npy")
        info.extra = b"\xfe\xca\x04\x00abcd"  # an unknown 4-byte extra record
        archive.writestr(info, (tmp_path / "m.npy").read_bytes())
    with open_npy_chunks(tmp_path / "p.npz") as chunks:
        np.testing.assert_array_equal(chunks.read(2, 5), [2.0, 3.0, 4.0])
