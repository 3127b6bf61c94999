"""Configuration of the docstring examples (``--doctest-modules`` over ``bensemble/``).

The tests proper are configured by ``tests/conftest.py``. Here: every item starts from a fixed
torch seed, figures use the Agg backend, and a module that cannot be imported because an
optional extra (faiss, torchmetrics, ray) is missing is left out of doctest collection instead of
breaking it.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
os.environ.setdefault("MPLBACKEND", "Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

OPTIONAL_EXTRAS = frozenset({"faiss", "torchmetrics", "ray"})
_ROOT = Path(__file__).resolve().parent
_PACKAGE = _ROOT / "bensemble"


def _module_name(path: Path) -> str | None:
    try:
        relative = path.resolve().relative_to(_ROOT)
    except ValueError:
        return None
    if relative.suffix != ".py" or relative.parts[0] != "bensemble":
        return None
    parts = list(relative.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Skip a package module whose import needs a missing optional extra."""
    name = _module_name(Path(collection_path))
    if name is None:
        return None
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as err:
        if (err.name or "").split(".")[0] in OPTIONAL_EXTRAS:
            return True
    return None  # any other import error is reported by the collection itself


@pytest.fixture(autouse=True)
def _doctest_seed():
    torch.manual_seed(0)
