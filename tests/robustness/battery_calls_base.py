"""What the call battery's case lists share: :class:`CallCase` and the temporary folder of files
the cases read and write (removed when the test process exits)."""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class CallCase:
    """``valid()`` must return; each ``(call, argument)`` in ``bad`` must raise a ``ValueError``
    whose message names ``argument`` in backticks. ``valid=None``: no call can succeed here
    (``why`` says why)."""

    name: str
    valid: Callable[[], Any] | None
    bad: list[tuple[Callable[[], Any], str]] = field(default_factory=list)
    why: str = ""


@functools.cache
def files() -> Path:
    """A temporary folder holding the arrays the cases load (probabilities, labels, a NaN table,
    a ``[3, 5, 2]`` stack for the chunked reader, a CSV)."""
    folder = Path(tempfile.mkdtemp(prefix="bensemble-calls-"))
    atexit.register(shutil.rmtree, folder, True)
    np.save(folder / "probs.npy", np.full((5, 3), 1 / 3))
    np.save(folder / "labels.npy", np.arange(5) % 3)
    np.save(folder / "nan.npy", np.full((5, 3), np.nan))
    np.save(folder / "stack.npy", np.arange(30, dtype=np.float32).reshape(3, 5, 2))
    np.savetxt(folder / "probs.csv", np.full((5, 3), 1 / 3), delimiter=",")
    return folder
