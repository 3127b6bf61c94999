"""Member-parallel training backends for :func:`bensemble.methods.train_ensemble`.

Members are independent jobs: member ``m`` is a pure function of ``(make_model, data, config,
init_seed, order_seed)`` (see :mod:`bensemble.methods.deep_ensemble`), so running them on other
processes returns the same members as the sequential loop. Each task trains one member with one
torch intra-op thread (``torch.set_num_threads(1)``): ``n_jobs`` members then use ``n_jobs``
cores without oversubscribing them.

* ``"joblib"`` - a ``joblib.Parallel`` loky process pool (``n_jobs`` workers; its memmapping
  folder is ``temp_dir``).
* ``"ray"`` - one Ray task per member (``num_cpus=1`` each). An already initialised Ray (a
  cluster the caller connected to) is reused and left running; otherwise a local instance is
  started with ``ray.init(num_cpus=n_jobs, _temp_dir=temp_dir)`` and shut down afterwards.
  Ray is an optional extra (``pip install 'bensemble[ray]'``). Ray's Unix sockets live under
  ``temp_dir``, whose path must stay short (about 40 characters: socket paths are limited to
  107 bytes).
"""

from __future__ import annotations

import os
from typing import Any

import torch

from bensemble.methods._member_training import NullBar, build_member

__all__ = ["BACKENDS", "run_members"]

BACKENDS = ("sequential", "joblib", "ray")


def _member_task(make_model, dataset, config, init_seed: int, order_seed: int):
    """Train one member in a worker with one intra-op thread; returns the trained module."""
    torch.set_num_threads(1)
    return build_member(make_model, dataset, config, init_seed, order_seed, NullBar())


def _n_workers(n_jobs: int | None, n_members: int) -> int:
    return max(1, min(n_members, n_jobs if n_jobs is not None else (os.cpu_count() or 1)))


def run_members(
    backend: str,
    make_model,
    dataset,
    config,
    seeds: list[list[int]],
    *,
    n_jobs: int | None,
    temp_dir: str | os.PathLike | None,
    bar: Any,
) -> list:
    """Train every ``(init_seed, order_seed)`` member on ``backend``; results in seed order."""
    if backend == "joblib":
        from joblib import Parallel, delayed

        workers = _n_workers(n_jobs, len(seeds))
        temp = None if temp_dir is None else os.fspath(temp_dir)
        parallel = Parallel(n_jobs=workers, backend="loky", temp_folder=temp, return_as="generator")
        members = []
        for model in parallel(
            delayed(_member_task)(make_model, dataset, config, a, b) for a, b in seeds
        ):
            members.append(model)
            bar.update(config.epochs)
        return members
    return _run_ray(make_model, dataset, config, seeds, n_jobs, temp_dir, bar)


def _run_ray(make_model, dataset, config, seeds, n_jobs, temp_dir, bar) -> list:
    fn = config.fn
    try:
        import ray
    except ImportError:
        raise ValueError(
            f"{fn}: `backend` 'ray' needs the optional ray package (pip install "
            "'bensemble[ray]'); it is not installed"
        ) from None
    started = False
    if not ray.is_initialized():
        options: dict[str, Any] = {
            "num_cpus": _n_workers(n_jobs, len(seeds)),
            "include_dashboard": False,
            "log_to_driver": False,
        }
        if temp_dir is not None:
            options["_temp_dir"] = os.path.abspath(os.fspath(temp_dir))
        ray.init(**options)
        started = True
    try:
        task = ray.remote(num_cpus=1)(_member_task)
        data_ref = ray.put(dataset)
        refs = [task.remote(make_model, data_ref, config, a, b) for a, b in seeds]
        members = []
        for ref in refs:
            members.append(ray.get(ref))
            bar.update(config.epochs)
        return members
    finally:
        if started:
            ray.shutdown()
