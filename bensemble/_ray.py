"""A Ray session for the member-parallel and shard-parallel backends.

:func:`ray_session` imports Ray (an optional extra), reuses an initialised Ray (a cluster the
caller connected to, left running) or starts a local one with ``num_cpus`` CPUs and its session
files under ``temp_dir``, and shuts down only what it started, even when the work raises.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["ray_session"]


@contextmanager
def ray_session(fn: str, num_cpus: int, temp_dir: str | os.PathLike | None) -> Iterator[Any]:
    """Yield the ``ray`` module with a running Ray; ``fn`` names the caller in the error raised
    when Ray is not installed."""
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
            "num_cpus": max(1, int(num_cpus)),
            "include_dashboard": False,
            "log_to_driver": False,
        }
        if temp_dir is not None:
            options["_temp_dir"] = os.path.abspath(os.fspath(temp_dir))
        ray.init(**options)
        started = True
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()
