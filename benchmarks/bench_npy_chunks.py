"""Chunked reading of a ``.npy`` file: :func:`bensemble.io.open_npy_chunks` (positioned reads,
``os.preadv`` into the result) vs ``np.load(mmap_mode="r")`` slicing (what
``bensemble evaluate --chunk-size`` did), in the same run.

Both read the whole file ``--chunk`` rows at a time into a fresh in-memory array (the memory map
copied with ``np.array(mm[a:b])``, as the evaluate path does), page cache warm (one untimed pass
first). Timed: CPU time of this process (``time.process_time``: user + system, page faults
included), best and median of ``--repeats`` alternating passes, so another process on the
shared machine slows neither side more than the other. Two layouts: ``[N, 10]`` (samples on
axis 0, one read per chunk) and ``[5, N / 5, 10]`` (members first, samples on axis 1: one read
per member and chunk). The ratio printed is mmap / chunks (> 1: positioned reads are faster). A
last check reads every value back and compares the two readers.

A third column reads into one buffer reused for every chunk (``read(..., out=buffer)``), which
spares the fresh pages a new array costs per chunk.

Run: ``python benchmarks/bench_npy_chunks.py [--rows 10000000] [--chunk 65536] [--repeats 15]``
"""

from __future__ import annotations

import argparse
import mmap
import tempfile
import time
from pathlib import Path

import numpy as np

from bensemble.io import open_npy_chunks


def _write(path: Path, shape: tuple[int, ...]) -> None:
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=shape)
    flat = out.reshape(-1)
    rng = np.random.default_rng(0)
    step = 1 << 22
    for s in range(0, flat.size, step):
        flat[s : s + step] = rng.random(min(step, flat.size - s), dtype=np.float32)
    out.flush()
    del out


def _mmap_pass(path: Path, axis: int, chunk: int) -> float:
    array = np.load(path, mmap_mode="r")
    n = array.shape[axis]
    total = 0.0
    for s in range(0, n, chunk):
        block = np.array(array[s : s + chunk] if axis == 0 else array[:, s : s + chunk])
        total += float(block.reshape(-1)[0])
    handle = getattr(array, "_mmap", None)
    if handle is not None and hasattr(mmap, "MADV_DONTNEED"):
        handle.madvise(mmap.MADV_DONTNEED)
    del array
    return total


def _chunks_pass(path: Path, axis: int, chunk: int, reuse: bool = False) -> float:
    total = 0.0
    with open_npy_chunks(path) as chunks:
        n = chunks.shape[axis]
        shape = list(chunks.shape)
        shape[axis] = min(chunk, n)
        buffer = np.empty(shape, dtype=chunks.dtype) if reuse else None
        for s in range(0, n, chunk):
            out = buffer if reuse and s + chunk <= n else None
            block = chunks.read(s, s + chunk, axis=axis, out=out)
            total += float(block.reshape(-1)[0])
    return total


def _chunks_reuse_pass(path: Path, axis: int, chunk: int) -> float:
    return _chunks_pass(path, axis, chunk, reuse=True)


def _cpu(fn, *args) -> float:
    start = time.process_time()
    fn(*args)
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10**7)
    parser.add_argument("--chunk", type=int, default=65_536)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        layouts = {
            f"[{args.rows}, 10] axis 0": ((args.rows, 10), 0),
            f"[5, {args.rows // 5}, 10] axis 1": ((5, args.rows // 5, 10), 1),
        }
        for label, (shape, axis) in layouts.items():
            path = Path(tmp) / "p.npy"
            _write(path, shape)
            mb = path.stat().st_size / 2**20
            passes = {"mmap": _mmap_pass, "chunks": _chunks_pass, "reuse": _chunks_reuse_pass}
            for run in passes.values():  # warm the page cache
                run(path, axis, args.chunk)
            times: dict[str, list[float]] = {k: [] for k in passes}
            for _ in range(args.repeats):
                for key, run in passes.items():
                    times[key].append(_cpu(run, path, axis, args.chunk))
            best = {k: min(v) for k, v in times.items()}
            median = {k: float(np.median(v)) for k, v in times.items()}
            print(
                f"{label} float32 ({mb:.0f} MiB), chunk {args.chunk}, CPU s (best / median of "
                f"{args.repeats}): np.load(mmap_mode='r') slicing {best['mmap']:.3f} / "
                f"{median['mmap']:.3f}; open_npy_chunks.read {best['chunks']:.3f} / "
                f"{median['chunks']:.3f}; read(out=reused buffer) {best['reuse']:.3f} / "
                f"{median['reuse']:.3f}. Ratio mmap/chunks (median): "
                f"{median['mmap'] / median['chunks']:.2f}x, mmap/reuse "
                f"{median['mmap'] / median['reuse']:.2f}x"
            )
            mm = np.load(path, mmap_mode="r")
            with open_npy_chunks(path) as chunks:
                same = all(
                    np.array_equal(
                        chunks.read(s, s + args.chunk, axis=axis),
                        mm[s : s + args.chunk] if axis == 0 else mm[:, s : s + args.chunk],
                    )
                    for s in range(0, shape[axis], args.chunk)
                )
            del mm
            print(f"  every value identical: {same}")
            path.unlink()


if __name__ == "__main__":
    main()
