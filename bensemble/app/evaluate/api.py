"""The Python entry points of ``bensemble evaluate``: one engine for every input.

* :func:`evaluate_predictions` - in-memory member probabilities (or logits) and labels; by
  default the whole input is one chunk, ``chunk_size`` bounds the float64 temporaries;
* :func:`evaluate_shards` - several arrays or files (a memory-mapped ``.npy`` is read a chunk
  at a time) taken as one dataset, the main pass over the shards run in ``workers`` processes or
  Ray tasks;
* :func:`evaluate_source` - the engine itself on a :class:`~bensemble.app.evaluate.sources.
  Predictions` source (what the command line builds).

All three return the same :class:`~bensemble.app.evaluate.evaluation.Evaluation` for the same
rows: prepare (split, temperature, conformal threshold, EECE bins) -> the main pass into
mergeable states -> compute -> intervals, notes and verdicts.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from bensemble import _validation as V
from bensemble.app.bootstrap import DEFAULT_BOOTSTRAP
from bensemble.app.evaluate.evaluation import Evaluation
from bensemble.app.evaluate.options import EvaluateOptions
from bensemble.app.evaluate.sources import Predictions, ShardSpec
from bensemble.app.evaluate.timing import Timings

__all__ = ["evaluate_predictions", "evaluate_shards", "evaluate_source"]


def evaluate_source(
    source: Predictions,
    options: EvaluateOptions,
    *,
    workers: int = 1,
    backend: str = "serial",
    temp_dir: str | os.PathLike | None = None,
    timings: Timings | None = None,
    fn: str = "evaluate_predictions",
) -> Evaluation:
    """Evaluate every row of ``source`` with checked ``options`` (module docstring)."""
    from bensemble.app.evaluate.compute import evaluation_of
    from bensemble.app.evaluate.engine import one_thread, prepare, ranges, warn_on_simplex
    from bensemble.app.evaluate.parallel import run_ranges

    timings = timings or Timings(enabled=options.progress)
    if options.recalibrate_epistemic:  # before / after (app.evaluate.recalibrated)
        from bensemble.app.evaluate.recalibrated import evaluate_recalibrated

        def run(src: Predictions, opts: EvaluateOptions) -> Evaluation:
            return evaluate_source(src, opts, workers=workers, backend=backend,
                                   temp_dir=temp_dir, timings=timings, fn=fn)  # fmt: skip

        return evaluate_recalibrated(source, options, run, fn=fn)
    plan = prepare(source, options, fn=fn, stage=timings.stage, workers=max(1, workers))
    tasks = ranges(source.n, source.sizes, max(1, workers)) if workers > 1 else [(0, source.n)]
    with timings.stage("metrics, uncertainty, EECE sums (main pass)"):
        if len(tasks) == 1 and backend != "ray":  # one range: this process, this source
            from bensemble.app.evaluate.engine import accumulate

            states = [accumulate(source, plan, progress=options.progress)]
        else:
            states = run_ranges(
                source, plan, tasks, backend=backend, workers=workers, temp_dir=temp_dir
            )
    warn_on_simplex(source, states)
    state = states[0]
    for other in states[1:]:
        state.merge(other)
    label = "compute" if options.bootstrap == 0 else f"compute, intervals ({options.bootstrap})"
    with timings.stage(label), one_thread():
        ev = evaluation_of(plan, state)
    ev.timings = timings.seconds
    return ev


def evaluate_predictions(
    member_probs: Any,
    labels: Any,
    *,
    calibration_split: float | None = None,
    alpha: float = 0.1,
    n_bins: int = 15,
    eece_bins: int | str = "auto",
    eece_seeds: int = 1,
    conformal_score: str = "lac",
    seed: int = 0,
    bootstrap: int = DEFAULT_BOOTSTRAP,
    chunk_size: int | str | None = None,
    from_logits: bool = False,
) -> Evaluation:
    """Score member predictions (protocol and formulas: :mod:`bensemble.app.evaluate`).

    Args:
        member_probs: member probabilities ``[M, N, K]`` (or ``[N, K]`` for one model); a torch
            tensor (CPU or GPU) or a numpy array, memory-mapped ones included.
        labels: integer labels ``[N]`` in ``[0, K)``.
        calibration_split: fraction in ``(0, 1)`` used for temperature scaling and conformal
            calibration (two separate halves); ``None`` reports on all samples, no scaling.
        alpha: conformal miscoverage level in ``(0, 1)``.
        n_bins: bins of the ECE and classwise ECE.
        eece_bins: bins of the EECE (``M > 1`` only): ``"auto"`` (about ``sqrt(N)``, see
            :func:`bensemble.metrics.epistemic.auto_n_bins`) or an integer.
        eece_seeds: K-means seeds the EECE averages (their sd is reported as ``eece_sd``).
        conformal_score: ``"lac"``, ``"aps"`` or ``"raps"``.
        seed: seeds the split, the EECE, randomised conformal scores and the bootstrap.
        bootstrap: bootstrap replicates of the 95% intervals (``0``: none; the verdicts then
            read the point estimates).
        chunk_size: samples per read (``None``: the whole input as one chunk; ``"auto"``:
            about 2^18 values per chunk); the numbers do not depend on it beyond float64
            summation order.
        from_logits: ``member_probs`` holds logits (a softmax per member, in float64).

    Returns:
        An :class:`~bensemble.app.evaluate.evaluation.Evaluation`.

    Stage lines and progress bars on a terminal: :func:`evaluate_shards` with
    ``progress=True`` (one shard is one array), or the command line.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> member_probs = torch.softmax(torch.randn(3, 200, 4, generator=g), dim=-1)
        >>> labels = torch.randint(0, 4, (200,), generator=g)
        >>> ev = evaluate_predictions(member_probs, labels, calibration_split=0.5, seed=0)
        >>> ev.setup["n_temperature"], ev.setup["n_conformal"], ev.setup["n_test"]
        (50, 50, 100)
        >>> [row["stage"].split()[0] for row in ev.metrics]
        ['unscaled', 'temperature-scaled']
    """
    fn = "evaluate_predictions"
    options = EvaluateOptions(
        calibration_split=calibration_split,
        alpha=alpha,
        n_bins=n_bins,
        eece_bins=eece_bins,
        eece_seeds=eece_seeds,
        conformal_score=conformal_score,
        seed=seed,
        bootstrap=bootstrap,
        chunk_size=chunk_size,
    )
    source = _in_memory([member_probs], fn, from_logits)
    source.set_labels(V.as_labels(labels, "labels", fn, n=source.n, num_classes=source.k))
    return evaluate_source(source, options.checked(fn), fn=fn)


def _in_memory(shards: Sequence[Any], fn: str, from_logits: bool) -> Predictions:
    from_logits = V.check_bool(from_logits, "from_logits", fn)
    specs = []
    for i, shard in enumerate(shards):
        name = "member_probs" if len(shards) == 1 else f"shards[{i}]"
        if isinstance(shard, (str, os.PathLike)):
            specs.append(ShardSpec(path=os.fspath(shard), name=name, where=str(shard)))
        else:
            specs.append(ShardSpec(array=_as_array(shard, name, fn), name=name, where=fn))
    return Predictions(specs, None, from_logits=from_logits)


def _as_array(value: Any, name: str, fn: str) -> Any:
    """A tensor or an array as it is (a numpy memory map, or any object with ``shape``, ``dtype``
    and slicing, stays one: it is read a chunk at a time); anything else a tensor."""
    if isinstance(value, torch.Tensor) or all(
        hasattr(value, a) for a in ("shape", "dtype", "__getitem__")
    ):
        return value
    return V.to_tensor(value, name, fn)


def evaluate_shards(
    shards: Sequence[Any],
    labels: Any,
    *,
    workers: int = 1,
    backend: str = "processes",
    temp_dir: str | os.PathLike | None = None,
    from_logits: bool = False,
    **options: Any,
) -> Evaluation:
    """Evaluate several shards of predictions as one dataset (rows in shard order).

    Args:
        shards: ``[M, N_i, K]`` (or ``[N_i, K]``) arrays or tensors, or files (a ``.npy`` is
            memory-mapped, other formats as :func:`bensemble.io.load_array` reads them).
        labels: ``[sum N_i]`` integer labels, or one ``[N_i]`` array per shard.
        workers: processes (or Ray tasks) for the main pass; each takes whole shards, or an
            even share of the rows when there are fewer shards than workers.
        backend: ``"serial"``, ``"processes"`` or ``"ray"``
            (:mod:`bensemble.app.evaluate.parallel`).
        temp_dir: a local Ray's temporary folder (short path).
        from_logits: the shards hold logits.
        **options: the keyword options of :func:`evaluate_predictions`.

    Returns:
        The :class:`~bensemble.app.evaluate.evaluation.Evaluation` of all rows: the same
        numbers whatever the backend and the number of workers (up to float64 summation order).
    """
    from bensemble.app.evaluate.parallel import BACKENDS

    fn = "evaluate_shards"
    if isinstance(shards, (str, os.PathLike)) or not isinstance(shards, Sequence) or not shards:
        raise ValueError(
            f"{fn}: `shards` must be a non-empty list of arrays or files (got {shards!r})"
        )
    backend = V.check_option(backend, "backend", BACKENDS, fn)
    workers = V.check_positive_int(workers, "workers", fn)
    unknown = set(options) - set(EvaluateOptions.__dataclass_fields__)
    if unknown:
        raise ValueError(f"{fn}: unknown options {sorted(unknown)} (see evaluate_predictions)")
    checked = EvaluateOptions(**options).checked(fn)
    source = _in_memory(list(shards), fn, from_logits)
    per_shard = (
        len(shards) > 1
        and isinstance(labels, Sequence)
        and len(labels) == len(shards)
        and all(hasattr(y, "__len__") for y in labels)
    )
    if per_shard:
        parts = [
            V.as_labels(y, f"labels[{i}]", fn, n=n, num_classes=source.k)
            for i, (y, n) in enumerate(zip(labels, source.sizes, strict=True))
        ]
        y = torch.cat(parts)
    else:
        y = V.as_labels(labels, "labels", fn, n=source.n, num_classes=source.k)
    source.set_labels(y)
    return evaluate_source(
        source, checked, workers=workers, backend=backend, temp_dir=temp_dir, fn=fn
    )
