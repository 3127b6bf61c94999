"""Progress bars that never flood a log.

Every progress bar in the package goes through :func:`progress`: a tqdm bar on ``sys.stderr``
that tqdm switches off by itself when stderr is not a terminal (``disable=None``), so a CI log,
a redirected ``2> file`` or a pipe gets no carriage-return noise. In Jupyter, ``tqdm.auto``
draws its widget as usual. :func:`stage` times one stage of a command and writes one line with
its time, under the same rule.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["progress", "stage"]


def progress(
    iterable: Iterable | None = None,
    *,
    enabled: bool = True,
    desc: str | None = None,
    total: int | None = None,
    **kwargs: Any,
):
    """A tqdm bar over ``iterable`` (or a manual bar when ``iterable`` is None).

    Args:
        iterable: what to iterate over; ``None`` gives a bar driven by ``bar.update(n)``, used as a
            context manager.
        enabled: ``False`` never draws; ``True`` draws only when stderr is a terminal.
        desc: the bar's label.
        total: the number of steps (defaults to ``len(iterable)`` where defined).
        **kwargs: further tqdm options (``leave``, ``unit``, ...).

    Returns:
        a ``tqdm`` object: iterate over it, or call ``update`` / ``close`` (a disabled bar accepts
        the same calls and draws nothing).

    Example:
        >>> with progress(total=3, desc="steps") as bar:  # stderr is not a terminal here: silent
        ...     for _ in range(3):
        ...         bar.update(1)
        >>> list(progress(range(3), enabled=False))
        [0, 1, 2]
    """
    from tqdm.auto import tqdm

    kwargs.setdefault("file", sys.stderr)
    return tqdm(iterable, desc=desc, total=total, disable=None if enabled else True, **kwargs)


@contextmanager
def stage(label: str, *, enabled: bool = True, prefix: str = "") -> Iterator[None]:
    """Time one stage of a command and write ``prefix: label ... 0.4 s`` on stderr when it ends.

    Like the bars, the line is written only when ``enabled`` and stderr is a terminal, so logs,
    pipes and tests see nothing. Nothing is written for a stage that raised.

    Example:
        >>> with stage("temperature scaling", prefix="evaluate"):  # not a terminal: silent
        ...     pass
    """
    start = time.perf_counter()
    yield
    isatty = getattr(sys.stderr, "isatty", None)
    if enabled and callable(isatty) and isatty():
        head = f"{prefix}: " if prefix else ""
        sys.stderr.write(f"{head}{label} ... {time.perf_counter() - start:.1f} s\n")
        sys.stderr.flush()
