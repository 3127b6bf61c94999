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
from dataclasses import dataclass
from typing import Any

import torch

from bensemble._ray import ray_session
from bensemble.methods._member_training import NullBar, build_member

__all__ = ["BACKENDS", "MemberBackend", "run_members"]

BACKENDS = ("sequential", "joblib", "ray")


@dataclass(frozen=True)
class MemberBackend:
    """Where :func:`~bensemble.methods.train_ensemble` trains its members: the options that
    travel together (a plain string such as ``"joblib"`` means this object with its defaults).

    Attributes:
        name: ``"sequential"`` (this process), ``"joblib"`` (a loky process pool) or ``"ray"``
            (one Ray task per member). Every backend returns the same members under the same
            seeds; the parallel ones train each member with one torch thread.
        n_jobs: parallel workers (default: the CPU count, at most ``n_members``); for Ray the
            ``num_cpus`` of the local instance it starts (an initialised Ray is reused as is).
        temp_dir: directory for the backend's temporary files (Ray's session directory, joblib's
            memmapping folder); default: the backend's own default.

    Example:
        >>> MemberBackend("joblib", n_jobs=2)
        MemberBackend(name='joblib', n_jobs=2, temp_dir=None)
    """

    name: str = "sequential"
    n_jobs: int | None = None
    temp_dir: str | os.PathLike | None = None

    def __post_init__(self) -> None:
        from bensemble._validation import check_option, check_positive_int

        fn = "MemberBackend"
        check_option(self.name, "name", BACKENDS, fn)
        if self.n_jobs is not None:
            check_positive_int(self.n_jobs, "n_jobs", fn)
        if self.temp_dir is not None and not isinstance(self.temp_dir, (str, os.PathLike)):
            raise ValueError(
                f"{fn}: `temp_dir` must be a path or None (got {type(self.temp_dir).__name__})"
            )

    @classmethod
    def of(cls, backend: str | MemberBackend, fn: str) -> MemberBackend:
        """``backend`` as an object: a :class:`MemberBackend` as is, a name with defaults."""
        if isinstance(backend, cls):
            return backend
        if not isinstance(backend, str):
            raise ValueError(
                f"{fn}: `backend` must be one of {BACKENDS} or a MemberBackend "
                f"(got {type(backend).__name__})"
            )
        from bensemble._validation import check_option

        return cls(check_option(backend, "backend", BACKENDS, fn))


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
    with ray_session(config.fn, _n_workers(n_jobs, len(seeds)), temp_dir) as ray:
        task = ray.remote(num_cpus=1)(_member_task)
        data_ref = ray.put(dataset)
        refs = [task.remote(make_model, data_ref, config, a, b) for a, b in seeds]
        members = []
        for ref in refs:
            members.append(ray.get(ref))
            bar.update(config.epochs)
        return members
