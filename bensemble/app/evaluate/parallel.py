"""Run the main pass of an evaluation over ranges of rows, here or elsewhere, and merge.

Every range is a task ``(rows of the source, Plan)``: a worker reopens its rows from the
source's specs (files are reopened, in-memory arrays sent), runs
:func:`~bensemble.app.evaluate.engine.accumulate` with one torch thread and sends its
:class:`~bensemble.app.evaluate.states.EvaluationState` back; the states merge in row order. So
the report of any backend and any number of workers is the report of one pass, up to float64
summation order (counts, the gathered confidences and the interval replicates' draws are the
same; a worker's plan is the coordinator's, bit for bit).

Backends (:data:`BACKENDS`):

* ``"serial"`` - the ranges one after the other in this process;
* ``"processes"`` - a pool of ``workers`` processes (started with ``spawn``: no state of this
  process, threads included, leaks into them);
* ``"ray"`` - one Ray task per range (``num_cpus=1``). A Ray already initialised (a cluster the
  caller connected to) is used and left running; otherwise a local one is started with
  ``num_cpus=workers`` and ``_temp_dir=temp_dir`` (keep that path short: Ray's socket paths
  are limited to 107 bytes) and shut down afterwards.
"""

from __future__ import annotations

import copy
import os
from typing import Any

import torch

from bensemble._ray import ray_session
from bensemble.app.evaluate.engine import accumulate
from bensemble.app.evaluate.plan import Plan
from bensemble.app.evaluate.sources import Predictions
from bensemble.app.evaluate.states import EvaluationState

__all__ = ["BACKENDS", "run_ranges"]

BACKENDS = ("serial", "processes", "ray")


def _task(task: dict[str, Any], plan: Plan) -> EvaluationState:
    """One range in a worker (one torch thread)."""
    torch.set_num_threads(1)
    return accumulate(Predictions(**task), plan)


def run_ranges(
    source: Predictions,
    plan: Plan,
    ranges: list[tuple[int, int]],
    *,
    backend: str,
    workers: int,
    temp_dir: str | os.PathLike | None = None,
) -> list[EvaluationState]:
    """The states of the main pass over each of ``ranges`` (row order), on ``backend``."""
    tasks = [source.task(a, b) for a, b in ranges]
    if backend == "serial" or len(tasks) == 1 and backend != "ray":
        states = [accumulate(Predictions(**t), plan) for t in tasks]
    elif backend == "processes":
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            states = list(pool.map(_task, tasks, [plan] * len(tasks)))
    else:
        states = _run_ray(tasks, plan, workers, temp_dir)
    for state in states:  # a worker sends its state without the plan
        state.plan = plan
    return states


def _run_ray(tasks, plan, workers, temp_dir) -> list[EvaluationState]:
    with ray_session("evaluate_shards", workers, temp_dir) as ray:
        remote = ray.remote(num_cpus=1)(_task)
        plan_ref = ray.put(plan)
        states = ray.get([remote.remote(t, plan_ref) for t in tasks])
        # Ray hands numpy arrays back read-only (zero-copy from its object store); the states
        # merge and sort in place, so they get their own memory
        return [copy.deepcopy(state) for state in states]
