"""Classwise K-means at large ``K``: the ``K`` per-class fits run concurrently, single-threaded.

The classwise EECE fits one K-means partition per class on ``member_probs[:, :, k].T``. The
``K`` problems are independent, and each Lloyd step is a stream of small kernels (an ``[rows,
H] x [H, M]`` product per cache-sized chunk, a row-wise argmin, an ``index_add_``). Run one after
the other with torch's default intra-op threads, every small kernel is split across threads
that meet at a barrier, and on a busy machine each barrier waits for the slowest thread: one
50,000 x 10 fit with 100 bins took 13-25 s with 2 intra-op threads on the loaded 2-core
benchmark machine and 1.1 s with 1 (``benchmarks/bench_eece.py``, ``classwise_scaling``).

:func:`map_classes` reorganises the loop without changing the algorithm: every class runs the
very same per-class code (same seed, same draws, same float32 kernels), with intra-op threads
set to 1 for the duration (restored in ``finally``), on a pool of ``min(K, threads)`` Python
threads, ``threads`` being the caller's intra-op budget (``torch.get_num_threads()``). torch
releases the GIL inside its kernels, so classes proceed in parallel without barriers; the
results are those of the sequential single-threaded loop, class for class, in class order.

The classwise EECE's ``"torch"`` fits go one step further and batch the classes
(:mod:`bensemble.metrics.binning._classes`, whose chunks of classes run on this pool); the other
backends, and classes that cannot be batched, run here one class per task.

Against the loop run with several intra-op threads the results can differ slightly: a threaded
reduction sums in another order, and k-means++ may then break a near-tie between candidate
centres the other way. ``benchmarks/bench_eece_classwise.py`` measures the effect as the relative
difference in K-means inertia (reported in ``benchmarks/results.md``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch

__all__ = ["map_classes", "single_threaded"]

T = TypeVar("T")
_LOCK = threading.Lock()


@contextlib.contextmanager
def single_threaded() -> Iterator[int]:
    """Set torch's intra-op threads to 1 for the block; yields the previous count (restored
    afterwards, also on error). Process-wide, as ``torch.set_num_threads`` is."""
    with _LOCK:
        previous = torch.get_num_threads()
        torch.set_num_threads(1)
    try:
        yield previous
    finally:
        with _LOCK:
            torch.set_num_threads(previous)


def map_classes(
    fit_one: Callable[[int], T], n_classes: int, *, workers: int | None = None
) -> list[T]:
    """``[fit_one(k) for k in range(n_classes)]``, computed concurrently with single-threaded
    kernels.

    Args:
        fit_one: the per-class work (pure: it may not rely on the order classes run in).
        n_classes: number of classes ``K``.
        workers: Python threads (default: the intra-op thread count at the call, at most ``K``).

    Returns:
        The results in class order. The first exception raised by a class is re-raised.
    """
    with single_threaded() as budget:
        n_workers = max(1, min(n_classes, workers if workers is not None else budget))
        if n_workers == 1:
            return [fit_one(k) for k in range(n_classes)]
        with ThreadPoolExecutor(
            max_workers=n_workers, thread_name_prefix="bensemble-kmeans"
        ) as pool:
            return list(pool.map(fit_one, range(n_classes)))
