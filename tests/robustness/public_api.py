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

#: Parts of the tree that are applications, not an importable API (their names are tested by
#: the CLI and report tests).
APPLICATIONS = ("bensemble.app", "bensemble.experiments", "bensemble.cli")
#: Public modules inside a package that the package does not re-export (an optional extra).
EXTRA_MODULES = ("bensemble.integrations.torchmetrics",)
#: Packages that need an optional extra; they may be missing.
OPTIONAL = {"bensemble.integrations.torchmetrics"}


def _discovered() -> tuple[str, ...]:
    """``bensemble``, every public sub-package at any depth (``bensemble.metrics.intervals``
    included), the top-level public modules (``bensemble.io``, ``losses``, ``utils``) and
    :data:`EXTRA_MODULES`: walked, not listed, so a new package is covered the day it appears."""
    import pkgutil

    import bensemble

    found = ["bensemble"]
    for info in pkgutil.walk_packages(bensemble.__path__, "bensemble."):
        parts = info.name.split(".")
        if any(part.startswith("_") for part in parts[1:]):
            continue
        if info.name.startswith(APPLICATIONS):
            continue
        if info.ispkg or len(parts) == 2:
            found.append(info.name)
    return tuple(found) + EXTRA_MODULES


#: Every sub-package whose ``__all__`` is public API, in walk order.
PACKAGES = _discovered()


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
