"""Stage timings of one run of ``bensemble evaluate``: every stage a user waits for, imports,
figures and writing included.

:class:`Timings` records the seconds of each stage (``Evaluation.timings``) and, like
:func:`bensemble._progress.stage`, writes one line per stage on a terminal's stderr
(``bensemble evaluate: EECE bins (K-means) ... 1.2 s``). :func:`process_seconds` is the time
since the interpreter started, so the first line can say how long starting Python and importing
took before the command ran.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["Timings", "process_seconds"]


def process_seconds() -> float | None:
    """Wall seconds since this process started (``None`` where the OS does not say)."""
    try:
        import os

        with open(f"/proc/{os.getpid()}/stat") as handle:
            ticks = int(handle.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as handle:
            uptime = float(handle.read().split()[0])
        return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return None


class Timings:
    """Seconds per stage, in order; each stage also printed on a terminal when ``enabled``."""

    def __init__(self, *, enabled: bool = False, prefix: str = "bensemble evaluate") -> None:
        self.enabled = enabled
        self.prefix = prefix
        self.seconds: dict[str, float] = {}

    def add(self, label: str, seconds: float) -> None:
        self.seconds[label] = self.seconds.get(label, 0.0) + seconds
        isatty = getattr(sys.stderr, "isatty", None)
        if self.enabled and callable(isatty) and isatty():
            sys.stderr.write(f"{self.prefix}: {label} ... {seconds:.1f} s\n")
            sys.stderr.flush()

    @contextmanager
    def stage(self, label: str) -> Iterator[None]:
        """Time the block (nothing is recorded for a block that raised)."""
        start = time.perf_counter()
        yield
        self.add(label, time.perf_counter() - start)
