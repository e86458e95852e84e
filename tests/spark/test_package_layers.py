"""The package in layers, imports pointing one way: capture/ -> decode/ -> model/ -> analysis/ ->
output/ -> spark/; only spark/ imports pyspark, and only the command (__main__) imports spark/.
Every import counts, also those inside functions: no module of the package imports, however
indirectly, one that imports it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests import import_graph
from tests.import_graph import cycles

PACKAGE = Path(__file__).resolve().parents[2] / "spark_analysis"
LAYERS = ("capture", "decode", "model", "analysis", "output", "spark")
#: modules above every layer: the command, and the name tools/setup-env.sh asks the class archive of
TOP = {"spark_analysis.__main__"}


def modules() -> dict[str, Path]:
    return import_graph.modules(PACKAGE)


def imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The package's modules (and pyspark) that a module imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
            assert all(t.split(".")[0] != "spark_analysis" or t in known for t in targets), f"{name}: {targets}"
        elif isinstance(node, ast.ImportFrom):
            assert not node.level, f"{name}: a relative import"  # the package imports by absolute names
            base = node.module or ""
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
            assert base.split(".")[0] != "spark_analysis" or base in known, f"{name}: no module {base}"
            assert base != "spark_analysis" or all(target != base for target in targets), (
                f"{name}: from spark_analysis import a name that is no module")
        else:
            continue
        for target in targets:
            if target.split(".")[0] == "pyspark":
                found.add("pyspark")
            elif target in known and target != name:
                found.add(target)
    return found


def graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: imports(path, name, known) for name, path in found.items()}


def layer(name: str) -> int:
    """A module's layer: its position in LAYERS, the package itself below them all, TOP above."""
    if name in TOP:
        return len(LAYERS)
    parts = name.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else -1


def test_imports_point_one_way() -> None:
    edges = graph()
    assert {layer(name) for name in edges} >= set(range(len(LAYERS))), "every layer holds modules"
    upward = sorted(f"{name} -> {target}" for name, targets in edges.items() for target in targets
                    if target != "pyspark" and layer(target) > layer(name))
    assert upward == []


def test_only_the_spark_layer_imports_pyspark_and_only_the_command_imports_it() -> None:
    edges = graph()
    pyspark = sorted(name for name, targets in edges.items() if "pyspark" in targets)
    assert pyspark and all(layer(name) in (LAYERS.index("spark"), len(LAYERS)) for name in pyspark), pyspark
    outside = sorted(f"{name} -> {target}" for name, targets in edges.items() for target in targets
                     if target != "pyspark" and layer(target) == LAYERS.index("spark")
                     and layer(name) < LAYERS.index("spark"))
    assert outside == []


def test_no_import_cycle() -> None:
    edges = graph()
    assert cycles({name: targets - {"pyspark"} for name, targets in edges.items()}) == []


def test_the_check_finds_a_cycle_and_an_upward_import() -> None:
    """The checks above can fail: a module importing one that imports it back is found."""
    edges = {"a": {"b"}, "b": {"a"}}
    assert layer("spark_analysis.spark.job") > layer("spark_analysis.capture.inputs")
    state: dict[str, int] = {}
    found = []

    def visit(name: str) -> None:
        state[name] = 1
        for target in edges[name]:
            if state.get(target) == 1:
                found.append((name, target))
            elif target not in state:
                visit(target)
        state[name] = 2

    visit("a")
    assert found == [("b", "a")]


def test_the_pure_layers_pass_strict_mypy() -> None:
    """capture/, decode/, model/ and analysis/ under mypy --strict (tests/spark/mypy-layers.ini)."""
    config = Path(__file__).with_name("mypy-layers.ini")
    checked = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(config),
                              *(str(PACKAGE / name) for name in LAYERS[:4])],
                             capture_output=True, text=True, cwd=PACKAGE.parent)
    assert checked.returncode == 0, checked.stdout + checked.stderr
