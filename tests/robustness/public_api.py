"""Every public name of bensemble, found by walking each sub-package's ``__all__``.

The batteries (battery_registry.py) and the function sweep (sweep_registry.py) are generated from
this walk, so a name added to an ``__all__`` reaches the battery test without anyone listing it.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, is_dataclass
from functools import cache
from typing import Any

from torch import nn

#: Every sub-package whose ``__all__`` is public API (optional extras are skipped when absent).
PACKAGES = (
    "bensemble",
    "bensemble.core",
    "bensemble.layers",
    "bensemble.methods",
    "bensemble.metrics",
    "bensemble.calibration",
    "bensemble.uncertainty",
    "bensemble.conformal",
    "bensemble.regression",
    "bensemble.plots",
    "bensemble.datasets",
    "bensemble.integrations",
    "bensemble.integrations.torchmetrics",
    "bensemble.diversity",
    "bensemble.search",
    "bensemble.io",
    "bensemble.losses",
    "bensemble.utils",
    "bensemble.reporting",
)
#: Packages that need an optional extra; they may be missing.
OPTIONAL = {"bensemble.integrations.torchmetrics", "bensemble.regression"}


@dataclass(frozen=True)
class PublicName:
    """One public object: its short name, where it was first exported, and what it is."""

    name: str
    package: str
    obj: Any

    @property
    def kind(self) -> str:
        """``module`` (nn.Module class), ``exception``, ``dataclass``, ``class``, ``function``,
        ``callable`` (an instance that can be called) or ``constant``."""
        obj = self.obj
        if inspect.isclass(obj):
            if issubclass(obj, nn.Module):
                return "module"
            if issubclass(obj, BaseException):
                return "exception"
            return "dataclass" if is_dataclass(obj) else "class"
        if inspect.isfunction(obj) or inspect.isbuiltin(obj):
            return "function"
        return "callable" if callable(obj) else "constant"


@cache
def public_names() -> tuple[PublicName, ...]:
    """Every public object once (the first package exporting it names it), in package order."""
    found: dict[int, PublicName] = {}
    for package in PACKAGES:
        try:
            module = importlib.import_module(package)
        except ImportError:
            if package in OPTIONAL:
                continue
            raise
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name)
            found.setdefault(id(obj), PublicName(name, package, obj))
    return tuple(found.values())


@cache
def exported_names() -> frozenset[str]:
    """Every name in any public ``__all__`` (aliases of one object included)."""
    names: set[str] = set()
    for package in PACKAGES:
        try:
            names |= set(getattr(importlib.import_module(package), "__all__", ()))
        except ImportError:
            if package not in OPTIONAL:
                raise
    return frozenset(names)


def public_functions() -> dict[str, Any]:
    """``{name: function}`` of every public plain function."""
    return {p.name: p.obj for p in public_names() if p.kind == "function"}
