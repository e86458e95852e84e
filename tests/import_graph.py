"""A package's imports as a graph, read from its source with ``ast``: every import counts, also
those inside functions and relative ones.  What the layer tests of both packages check
(tests/test_package_layers.py for twisted_namesrv; spark_analysis may use it too)."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path


def modules(package: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package (a package is its __init__)."""
    found = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _absolute(name: str, is_package: bool, module: str | None, level: int) -> str:
    """``from ..x import y`` in module ``name`` -> the absolute module it names."""
    if not level:
        return module or ""
    base = name.split(".")
    base = base if is_package else base[:-1]
    base = base[:len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The package's modules that a module imports, anywhere in it."""
    found: set[str] = set()
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(name, is_package, node.module, node.level)
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        found.update(target for target in targets if target in known and target != name)
    return found


def graph(package: Path) -> dict[str, set[str]]:
    found = modules(package)
    known = set(found)
    return {name: imports(path, name, known) for name, path in found.items()}


def upward(edges: dict[str, set[str]], layer: Callable[[str], int]) -> list[str]:
    """Every import of a module from a higher layer, as ``importer -> imported``."""
    return sorted(f"{name} -> {target}" for name, targets in edges.items() for target in targets
                  if layer(target) > layer(name))


def cycles(edges: dict[str, set[str]]) -> list[str]:
    """Import cycles (a package's own __init__, imported on the way to any of its modules, aside)."""
    found: list[str] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for target in sorted(edges.get(name, ())):
            if target == name.rpartition(".")[0]:
                continue
            if state.get(target) == 1:
                found.append(" -> ".join(path[path.index(target):] + [target]))
            elif target not in state:
                visit(target, [*path, target])
        state[name] = 2

    for name in sorted(edges):
        if name not in state:
            visit(name, [name])
    return found


def rooms(edges: dict[str, set[str]], package: str) -> dict[str, set[str]]:
    """The graph with each subpackage drawn as one room (``package.controller.tap`` ->
    ``package.controller``), as a reader of the tree sees it: a cycle among rooms is an import that
    runs back up, even when no two modules import each other."""
    def room(name: str) -> str:
        parts = name.split(".")
        return ".".join(parts[:2]) if len(parts) > 2 else name

    subpackages = {".".join(name.split(".")[:2]) for name in edges if len(name.split(".")) > 2}
    merged: dict[str, set[str]] = {}
    for name, targets in edges.items():
        if name == package:
            continue
        source = room(name) if room(name) in subpackages else name
        found = merged.setdefault(source, set())
        for target in targets:
            into = room(target) if room(target) in subpackages else target
            if into not in (source, package):
                found.add(into)
    return merged


def unused_imports(package: Path) -> list[str]:
    """Imports of the package's own modules whose name the importing module never uses: imported
    for what importing does (a side effect), as ``module: imported``.  A package's ``__init__``
    may hand names on when it lists them in ``__all__``."""
    found: list[str] = []
    known = set(modules(package))
    for name, path in modules(package).items():
        tree = ast.parse(path.read_text())
        is_package = path.name == "__init__.py"
        used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
        exported: set[str] = set()
        for node in ast.walk(tree):
            names = [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
            if isinstance(node, ast.Assign) and "__all__" in names:
                exported |= {elt.value for elt in getattr(node.value, "elts", []) if isinstance(elt, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = _absolute(name, is_package, node.module, node.level)
                pairs = [(alias.asname or alias.name, f"{base}.{alias.name}" if f"{base}.{alias.name}" in known
                          else base) for alias in node.names]
            elif isinstance(node, ast.Import):
                pairs = [(alias.asname or alias.name.split(".")[0], alias.name) for alias in node.names]
            else:
                continue
            for bound, target in pairs:
                if target in known and bound not in used and bound not in exported:
                    found.append(f"{name}: {target}")
    return sorted(found)
