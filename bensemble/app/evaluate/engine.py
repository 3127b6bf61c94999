"""The passes of one evaluation over a row source (:mod:`bensemble.app.evaluate.sources`).

Whatever the input - an in-memory tensor (one chunk), a memory-mapped ``.npy`` larger than
memory, or shards on a cluster - the same passes run, reading ``chunk_size`` rows at a time:

1. :func:`prepare` fixes what a sum cannot: the calibration split and, on the gathered
   calibration rows, the temperature and the conformal threshold
   (:class:`~bensemble.app.evaluate.calibrated.CalibratedPart`); for ``M > 1`` the EECE's
   canonical member order (the first chunk) and its K-means centroids (the subsample rows once,
   then the ``refine`` Lloyd steps, one streamed pass each, every class and seed at once:
   :func:`~bensemble.metrics.streaming_eval.fit_classwise_centroids`). The result is a
   :class:`~bensemble.app.evaluate.plan.Plan`: small, picklable, the same for every worker.
2. :func:`accumulate` runs the main pass over a range of rows into an
   :class:`~bensemble.app.evaluate.states.EvaluationState`; ranges run here or in other
   processes or Ray tasks (:mod:`bensemble.app.evaluate.parallel`) and their states merge.

Memory is a chunk ``[M, chunk, K]`` (float64) plus one float64 per reported sample (the selective
metrics' confidences), the labels (one byte per sample for ``K <= 127``), the EECE's subsample
columns while it is fitted and, with a split, the calibration part's ensemble means ``[n_cal, K]``
and one boolean (one float64 for APS / RAPS) per sample. The interval accumulator adds its own
(:mod:`bensemble.app.evaluate.replicates`).
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from bensemble import _progress
from bensemble.app.evaluate.calibrated import CalibratedPart, split_indices
from bensemble.app.evaluate.options import EvaluateOptions
from bensemble.app.evaluate.plan import Plan
from bensemble.app.evaluate.states import EvaluationState, rows_of
from bensemble.metrics.binning._threads import single_threaded

__all__ = ["accumulate", "one_thread", "prepare", "ranges", "warn_on_simplex"]

SIMPLEX_WARNING = (
    "{fn}: `{name}` rows already lie on the probability simplex (in [0, 1], summing to 1), so "
    "logits=True applies a softmax to probabilities - a second softmax that flattens them; "
    "leave logits out if these are probabilities"
)


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """One torch intra-op thread and one BLAS thread for the block (both restored afterwards).

    A chunk is too small for intra-op threads, whose barriers stall on a busy machine
    (bench_streaming: 10x slower with 2 threads on a loaded 2-core machine), and numpy's BLAS
    threads spin the same way in the replicate states' small products; parallel work goes to
    worker processes instead (``--workers``)."""
    with single_threaded(), _blas_limit():
        yield


def _blas_limit() -> contextlib.AbstractContextManager:
    """One BLAS thread, through one controller for the process: a controller finds the loaded
    BLAS libraries by reading ``/proc/self/maps`` (hundreds of KB of strings in a process that
    has loaded many libraries), which each ``threadpool_limits`` call would read again."""
    try:
        return _controller().limit(limits=1, user_api="blas")
    except ImportError:  # threadpoolctl < 3: no controller object
        from threadpoolctl import threadpool_limits

        return threadpool_limits(1, user_api="blas")


@functools.cache
def _controller() -> Any:
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def prepare(
    source: Any, options: EvaluateOptions, *, fn: str, stage: Any, workers: int = 1
) -> Plan:
    """The passes before the main one (module docstring); ``stage(label)`` times each.

    ``workers``: threads of the EECE's per-class K-means fits (``--workers``, as the main
    pass's processes; the centroids do not depend on it). One by default: two threads sharing
    the interpreter cost about 1-1.5 s more CPU than one on the 200,000 x 5 x 10 benchmark file
    (``benchmarks/bench_streaming.py --only evaluate``, a busy 2-core machine), where their wall
    time gained little."""
    from bensemble.metrics._epistemic_checks import resolve_n_bins
    from bensemble.metrics.binning._fit import resolve_seed
    from bensemble.metrics.streaming_eval import canonical_order_chunked, fit_classwise_centroids

    o = options
    m, n, k = source.m, source.n, source.k
    block = o.block(n, m * k)
    setup: dict[str, Any] = {
        "members": m,
        "samples": n,
        "classes": k,
        "n_bins": o.n_bins,
        "seed": o.seed,
        "calibration_split": o.calibration_split,
        "bootstrap": o.bootstrap,
    }
    plan = Plan(options=o, m=m, n=n, k=k, n_part=n, setup=setup)
    positions = None
    if o.calibration_split is None:
        setup.update(n_temperature=0, n_conformal=0, n_test=n)
    else:
        temp_idx, conf_idx, test = split_indices(n, o.calibration_split, seed=o.seed)
        setup.update(n_temperature=len(temp_idx), n_conformal=len(conf_idx), n_test=len(test))
        with stage("temperature scaling and conformal calibration"):
            plan.split = CalibratedPart(
                source, temp_idx, conf_idx, test, o.conformal_score, o.alpha, o.seed, block
            )
        setup["temperature_converged"] = plan.split.converged
        setup["temperature_warning"] = plan.split.warning
        positions = test.numpy()
        plan.n_part = len(test)
        if o.bootstrap > 0:
            plan.part_index = torch.empty(n, dtype=torch.int64)
            plan.part_index[test] = torch.arange(len(test))
    if m > 1:
        plan.eece_bins = resolve_n_bins(
            o.eece_bins, plan.n_part, "expected_epistemic_calibration_error"
        )
        first = resolve_seed(None, o.seed, fn)
        plan.seeds = [(first + i) % 2**63 for i in range(o.eece_seeds)]
        with stage("EECE bins (K-means)"), one_thread():
            plan.order = canonical_order_chunked(source, positions, block=block)
            plan.centroids = fit_classwise_centroids(
                source,
                plan.eece_bins,
                plan.seeds,
                positions=positions,
                order=plan.order,
                block=block,
                progress=o.progress,
                workers=workers,
            )
    return plan


def accumulate(source: Any, plan: Plan, *, progress: bool = False) -> EvaluationState:
    """The main pass over every row of ``source`` (global rows ``source.start`` on)."""
    split = plan.split
    lo = source.start
    n_part = source.n if split is None else int(split.is_test[lo : lo + source.n].sum())
    state = EvaluationState(plan, n_part)
    block = plan.options.block(plan.n, plan.m * plan.k)
    bar = _progress.progress(
        total=source.n, enabled=progress, desc="main pass", unit="rows", leave=False
    )
    with one_thread(), bar:
        for start in range(0, source.n, block):
            stop = min(start + block, source.n)
            p = source.slice(start, stop)
            source.release()
            y = source.label_slice(start, stop)
            bar.update(stop - start)
            keep = None if split is None else split.is_test[lo + start : lo + stop]
            if keep is not None:
                p, y = p[:, keep], y[keep]
                if y.numel() == 0:
                    continue
            state.update(p, y, rows_of(lo + start, lo + stop, keep))
    source.release(force=True)
    state.on_simplex = source.on_simplex
    return state


def warn_on_simplex(source: Any, states: list[EvaluationState]) -> None:
    """``--logits`` on rows that already were probabilities: the warning of the loaders."""
    if source.from_logits and all(getattr(s, "on_simplex", False) for s in states):
        spec = source.specs[0]
        warnings.warn(
            SIMPLEX_WARNING.format(fn=spec.where, name=spec.name), UserWarning, stacklevel=3
        )


def ranges(n: int, sizes: list[int], tasks: int) -> list[tuple[int, int]]:
    """Row ranges for ``tasks`` workers: one per shard when there are at least as many shards,
    else ``tasks`` even ranges (so the merge order is the row order)."""
    if len(sizes) >= tasks:
        edges = np.concatenate([[0], np.cumsum(sizes)])
    else:
        edges = np.linspace(0, n, tasks + 1).round().astype(np.int64)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:], strict=True) if b > a]
