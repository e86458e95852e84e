"""compiled.py's module lists (the mypyc measurement, docs/benchmarks.md): the strict layers' files
but those mypyc cannot compile, every one a file that exists, none with what mypyc refuses."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools" / "bench"))
import compiled  # noqa: E402  (tools/bench)


def test_the_pure_modules_are_the_strict_layers_but_the_oserror_subclasses() -> None:
    pure = compiled.modules("pure", REPO)
    assert all((REPO / name).is_file() for name in pure)
    assert "twisted_namesrv/state/routes.py" in pure and "twisted_namesrv/remoting/header.py" in pure
    assert not any(name.endswith(("state/files.py", "state/store.py")) for name in pure)
    handler = compiled.modules("handler", REPO)
    assert set(handler) - set(pure) == {f"twisted_namesrv/{name}" for name in compiled.HANDLER}


def test_no_compiled_module_holds_a_surrogate_in_a_string_literal() -> None:
    """mypyc refuses a lone surrogate in a literal ("use chr(...) instead"): fastjson's and acl's
    were spelled so that the measurement's build compiles this tree as it is."""
    for name in compiled.modules("handler", REPO):
        tree = ast.parse((REPO / name).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert not any(0xD800 <= ord(c) <= 0xDFFF for c in node.value), f"{name}:{node.lineno}"
