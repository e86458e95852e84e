"""layers.py counts a layer's instructions by running each of its calls inside operator.call (the
C function callgrind toggles its counting on): the wrapped layer must answer as before, a
generator's steps included, and every layer it names by default must still exist."""

from __future__ import annotations

import importlib
import inspect
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools" / "bench"))
import layers  # noqa: E402  (tools/bench)

from twisted_namesrv.steps import run_steps  # noqa: E402


def _module(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    module = types.ModuleType("layered")

    def plain(a: int, b: int = 1) -> int:
        return a + b

    def stepped(n: int):  # type: ignore[no-untyped-def]
        for _ in range(n):
            yield
        return n * 2

    class Owner:
        def method(self, x: int) -> int:
            return x * 3

        @classmethod
        def made(cls, x: int) -> tuple[type, int]:
            return cls, x

    module.plain, module.stepped, module.Owner = plain, stepped, Owner  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "layered", module)
    return module


def test_a_wrapped_layer_answers_as_before_inside_operator_call(monkeypatch: pytest.MonkeyPatch) -> None:
    module = _module(monkeypatch)
    inside: list[object] = []

    def call(made, *args, **kwargs):  # type: ignore[no-untyped-def]
        inside.append(made)
        return made(*args, **kwargs)

    monkeypatch.setattr(layers.operator, "call", call)
    monkeypatch.setattr(layers, "COUNTING", [False])
    for layer in ("layered::plain", "layered::stepped", "layered:Owner:method", "layered:Owner:made"):
        layers.wrap(layer)
    assert module.plain(2, b=5) == 7 and not inside  # not counting yet: called as it is
    layers.COUNTING[0] = True
    assert module.plain(2, b=5) == 7
    assert run_steps(module.stepped(3)) == 6  # its steps run at once, inside the call
    assert module.Owner().method(4) == 12
    assert module.Owner.made(5) == module.Owner().made(5) == (module.Owner, 5)
    assert len(inside) == 5


@pytest.mark.parametrize("layer", layers.LAYERS)
def test_every_default_layer_is_still_there(layer: str) -> None:
    """A layer renamed or moved is a failing test here, not a silent count of nothing."""
    module, owner, name = layer.split(":")
    found = importlib.import_module(module)
    if owner:
        found = getattr(found, owner)
    assert callable(getattr(found, name)) and not isinstance(inspect.getattr_static(found, name), property)



def test_the_lines_of_a_first_registration_are_counted_by_function() -> None:
    """``--lines`` (its own process: the server's log lines go to /dev/null there): the counted
    registrations' calls and lines, by function, the routes' one change among them."""
    out = subprocess.run([sys.executable, str(REPO / "tools" / "bench" / "layers.py"), "--lines", "--brokers", "4",
                          "--warm", "2", "--top", "1000"], capture_output=True, text=True, check=True, cwd=REPO,
                         timeout=300).stdout
    head, *rows = out.splitlines()
    calls, lines = (float(n) for n in re.findall(r"([\d.]+) (?:Python calls|lines run)", head))
    by_function = {name: float(count) for count, name in (row.split() for row in rows)}
    assert calls > 0 and lines == pytest.approx(sum(by_function.values()), abs=0.5)
    assert by_function["twisted_namesrv/state/routes.py:apply_registration"] > 0
