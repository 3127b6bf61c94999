"""The import graph of ``bensemble/``, read with :mod:`ast` (nothing is imported), and its layers.

Used by ``tests/test_architecture.py`` (no circles, nothing imported from a higher layer) and by
``scripts/layer_diagram.py`` (the picture in ``docs/architecture.md``).

Layers, lowest first; a module may import its own package and any lower layer, never a higher one:

0 foundation   ``_validation*``, ``_scalar_checks``, ``_options``, ``_progress``, ``_terminal``,
               ``_seeds``, ``_renamed``, ``_ray``, ``_io_*``, ``io``, ``losses``
1 primitives   ``layers``, ``uncertainty``, ``calibration``, ``datasets``, ``utils``
2 models and metrics   ``core``, ``metrics``
3 library      ``regression``, ``conformal``, ``methods``, ``diversity``, ``search``, ``plots``,
               ``integrations`` (no circle among them)
4 shared kit   ``reporting``
5 reproductions  ``experiments``
6 applications ``app``
7 entry point  ``cli``

The root ``bensemble/__init__.py`` is the facade: it names the most used classes lazily and
imports nothing at load time, so it sits outside the layers.
"""

from __future__ import annotations

import ast
from pathlib import Path

LAYERS: dict[str, int] = {
    **dict.fromkeys(
        [
            "_validation",
            "_validation_members",
            "_validation_tensors",
            "_scalar_checks",
            "_options",
            "_progress",
            "_ray",
            "_terminal",
            "_seeds",
            "_renamed",
            "_io_formats",
            "_io_files",
            "_io_csv",
            "_io_chunks",
            "io",
            "losses",
        ],
        0,
    ),
    **dict.fromkeys(["layers", "uncertainty", "calibration", "datasets", "utils"], 1),
    **dict.fromkeys(["core", "metrics"], 2),
    **dict.fromkeys(
        ["regression", "conformal", "methods", "diversity", "search", "plots", "integrations"], 3
    ),
    "reporting": 4,
    "experiments": 5,
    "app": 6,
    "cli": 7,
}
LAYER_NAMES = {
    0: "foundation",
    1: "primitives",
    2: "models and metrics",
    3: "library",
    4: "shared kit",
    5: "reproductions",
    6: "applications",
    7: "entry point",
}


def modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under ``root`` (a package directory)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts)
        if name.endswith(".__init__"):
            name = name[: -len(".__init__")]
        found[name] = path
    return found


def _targets(current: str, is_package: bool, node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    assert isinstance(node, ast.ImportFrom)
    if node.level:
        base = current.split(".")
        keep = len(base) - node.level + (1 if is_package else 0)
        stem = ".".join(base[:keep] + ([node.module] if node.module else []))
    else:
        stem = node.module or ""
    return [stem] + [f"{stem}.{alias.name}" for alias in node.names]


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the package modules it imports (anywhere in the file, lazy imports included;
    ``TYPE_CHECKING`` imports included too, since they state a dependency of the design)."""
    mods = modules(root)
    edges: dict[str, set[str]] = {name: set() for name in mods}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets(name, is_package, node):
                    if target in mods and target != name and target != name.rsplit(".", 1)[0]:
                        edges[name].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def layer_of(module: str) -> int | None:
    """The layer of ``bensemble.<top>...`` (``None`` for the root facade)."""
    parts = module.split(".")
    if len(parts) == 1:
        return None
    return LAYERS.get(parts[1])


def upward_imports(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    """``(importer, imported)`` pairs where a module imports from a higher layer."""
    bad = []
    for source, targets in edges.items():
        here = layer_of(source)
        if here is None:
            continue
        for target in targets:
            there = layer_of(target)
            if there is not None and there > here:
                bad.append((source, target))
    return sorted(bad)


def package_edges(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """Top-level package -> the other top-level packages it imports."""
    out: dict[str, set[str]] = {}
    for source, targets in edges.items():
        parts = source.split(".")
        if len(parts) == 1:
            continue
        here = parts[1]
        out.setdefault(here, set())
        for target in targets:
            tparts = target.split(".")
            if len(tparts) > 1 and tparts[1] != here:
                out[here].add(tparts[1])
    return out


def diagram(root: Path) -> str:
    """The layer picture: one row per layer (highest first) with its packages, each package
    followed by the lower packages it imports, and the checks' verdicts."""
    edges = import_graph(root)
    by_package = package_edges(edges)
    lines = []
    for layer in sorted(set(LAYERS.values()), reverse=True):
        names = sorted(p for p, lay in LAYERS.items() if lay == layer and p in by_package)
        if not names:
            continue
        lines.append(f"{layer} {LAYER_NAMES[layer]}")
        for name in names:
            uses = sorted(by_package[name], key=lambda p: (-LAYERS.get(p, -1), p))
            shown = ", ".join(uses) if uses else "-"
            lines.append(f"    {name:<22} -> {shown}")
    found = cycles(edges)
    up = upward_imports(edges)
    lines.append("")
    lines.append(f"circles: {len(found)}; upward imports: {len(up)}")
    return "\n".join(lines) + "\n"


BEGIN = "<!-- layers:begin (python scripts/layer_diagram.py --write) -->"
END = "<!-- layers:end -->"


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update docs/architecture.md")
    args = parser.parse_args(argv)
    root = Path(__file__).resolve().parents[1]
    text = diagram(root / "bensemble")
    if not args.write:
        print(text, end="")
        return 0
    page = root / "docs" / "architecture.md"
    doc = page.read_text(encoding="utf-8")
    start, stop = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    page.write_text(doc[:start] + "\n```text\n" + text + "```\n" + doc[stop:], encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
