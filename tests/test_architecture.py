"""The design, checked from the code: layers, circles, module and signature sizes.

The import graph is read with :mod:`ast` by ``scripts/layer_diagram.py`` (nothing is imported),
so a lazy import inside a function counts like one at the top: a dependency is a dependency.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import pkgutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "bensemble"
_spec = importlib.util.spec_from_file_location(
    "_layer_diagram", ROOT / "scripts" / "layer_diagram.py"
)
layers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(layers)

MAX_MODULE_LINES = 400
MAX_PARAMETERS = 12


@pytest.fixture(scope="module")
def edges() -> dict[str, set[str]]:
    return layers.import_graph(PACKAGE)


def test_no_import_circles(edges):
    assert layers.cycles(edges) == []


def test_nothing_imports_from_a_higher_layer(edges):
    assert layers.upward_imports(edges) == []


def test_every_top_level_module_has_a_layer(edges):
    tops = {name.split(".")[1] for name in edges if "." in name}
    assert sorted(tops - set(layers.LAYERS)) == [], "add the new package to LAYERS"


def test_packages_import_each_other_in_no_circle(edges):
    assert layers.cycles(layers.package_edges(edges)) == []


def test_the_checks_can_fail():
    """A planted circle and a planted upward import are found."""
    planted = {
        "bensemble.metrics.a": {"bensemble.app.b"},
        "bensemble.app.b": {"bensemble.metrics.a"},
    }
    assert layers.cycles(planted) == [["bensemble.app.b", "bensemble.metrics.a"]]
    assert layers.upward_imports(planted) == [("bensemble.metrics.a", "bensemble.app.b")]


def test_modules_are_at_most_400_lines():
    long = {
        str(path.relative_to(ROOT)): n
        for path in PACKAGE.rglob("*.py")
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def _public_callables():
    """``(qualified name, callable)`` for every public function, class constructor and public
    method of a class that a sub-package exports in ``__all__``."""
    seen = set()
    for info in pkgutil.walk_packages([str(PACKAGE)], prefix="bensemble."):
        if not info.ispkg and info.name.count(".") > 1:
            continue  # modules: their public names are exported by their package
        if ".experiments" in info.name or ".app" in info.name:
            continue  # applications: command lines, not a library API
        module = importlib.import_module(info.name)
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name, None)
            if inspect.isfunction(obj) and id(obj) not in seen:
                seen.add(id(obj))
                yield f"{obj.__module__}.{obj.__qualname__}", obj
            elif inspect.isclass(obj) and id(obj) not in seen:
                seen.add(id(obj))
                for attr, member in vars(obj).items():
                    if attr.startswith("_") and attr != "__init__":
                        continue
                    if attr == "__init__" and dataclasses.is_dataclass(obj):
                        continue  # a record's fields, not a function's options
                    func = (
                        member.__func__
                        if isinstance(member, (classmethod, staticmethod))
                        else member
                    )
                    if inspect.isfunction(func):
                        yield f"{obj.__module__}.{obj.__qualname__}.{attr}", func


def test_public_functions_take_at_most_12_parameters():
    too_many = {}
    for name, func in _public_callables():
        params = [
            p
            for p in inspect.signature(func).parameters.values()
            if p.name not in ("self", "cls") and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        if len(params) > MAX_PARAMETERS:
            too_many[name] = len(params)
    assert too_many == {}


def test_architecture_page_shows_the_current_layers():
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    start = page.index(layers.BEGIN) + len(layers.BEGIN)
    shown = page[start : page.index(layers.END)]
    assert shown == "\n```text\n" + layers.diagram(PACKAGE) + "```\n", (
        "docs/architecture.md is stale: run python scripts/layer_diagram.py --write"
    )
