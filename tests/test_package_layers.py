"""twisted_namesrv in layers, imports pointing one way (GUIDE: wire codec -> dispatch by
RequestCode -> pure state -> Twisted services, read bottom-up): the wire (remoting/, bodies/,
steps.py, compat.py, properties.py, escapes.py) imports nothing of the server above it; state/
imports only the wire; every other module sits above both.  Every import counts, also those inside
functions.  Drawn with each subpackage as one room, no import runs back up (no cycle among rooms),
and nothing is imported for what importing it does (a side effect): one place wires everything
(service.py)."""

from __future__ import annotations

from pathlib import Path

from tests.import_graph import cycles, graph, rooms, unused_imports, upward

PACKAGE = Path(__file__).resolve().parents[1] / "twisted_namesrv"
#: (layer name, the modules in it by dotted prefix), bottom first; the rest of the package is above them all
LAYERS = (("wire", ("twisted_namesrv.remoting", "twisted_namesrv.bodies", "twisted_namesrv.steps",
                    "twisted_namesrv.compat", "twisted_namesrv.properties", "twisted_namesrv.escapes")),
          ("state", ("twisted_namesrv.state",)))


def layer(name: str) -> int:
    """A module's layer: its position in LAYERS; the package itself below them all, the rest above."""
    if name == "twisted_namesrv":
        return -1
    for index, (_, prefixes) in enumerate(LAYERS):
        if any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes):
            return index
    return len(LAYERS)


def test_imports_point_one_way() -> None:
    edges = graph(PACKAGE)
    assert {layer(name) for name in edges} >= set(range(len(LAYERS) + 1)), "every layer holds modules"
    assert upward(edges, layer) == []


def test_the_state_layer_imports_no_twisted() -> None:
    """The pure state: clock injected, no reactor, no Twisted (GUIDE)."""
    found = sorted(str(path.relative_to(PACKAGE.parent)) for path in (PACKAGE / "state").rglob("*.py")
                   if "twisted." in path.read_text().replace("twisted_namesrv", ""))
    assert found == []


def test_no_import_cycle_below_the_services() -> None:
    """Within the wire and the state, no module imports one that imports it back."""
    edges = graph(PACKAGE)
    low = {name: {t for t in targets if layer(t) < len(LAYERS)} for name, targets in edges.items()
           if layer(name) < len(LAYERS)}
    assert cycles(low) == []


def test_the_check_finds_an_upward_import_and_a_cycle() -> None:
    """The checks above can fail: the import state/config.py had of controller/config.py is found."""
    edges = {"twisted_namesrv.state.config": {"twisted_namesrv.controller.config"},
             "twisted_namesrv.controller.config": {"twisted_namesrv.state.config"}}
    assert upward(edges, layer) == ["twisted_namesrv.state.config -> twisted_namesrv.controller.config"]
    assert cycles(edges) == ["twisted_namesrv.controller.config -> twisted_namesrv.state.config -> "
                             "twisted_namesrv.controller.config"]


def test_no_import_runs_back_up_between_rooms() -> None:
    """controller/tap.py imported tap.py, which imported controller/config.py: the controller
    folder and tap.py each stood above the other.  Each subpackage drawn as one room, no cycle."""
    assert cycles(rooms(graph(PACKAGE), PACKAGE.name)) == []


def test_nothing_is_imported_for_a_side_effect() -> None:
    """tap.py, service.py and controller/__init__.py imported controller/config.py only so that
    its keys joined NamesrvConfig's (``noqa: F401``): every import of the package's own modules is
    used by the importing module (a package's __init__ may hand on what its __all__ lists)."""
    assert unused_imports(PACKAGE) == []


def test_the_room_and_side_effect_checks_can_fail() -> None:
    edges = {"twisted_namesrv.tap": {"twisted_namesrv.controller.config"},
             "twisted_namesrv.controller.tap": {"twisted_namesrv.tap"},
             "twisted_namesrv.controller.config": set()}
    assert cycles(rooms(edges, "twisted_namesrv")) == [
        "twisted_namesrv.controller -> twisted_namesrv.tap -> twisted_namesrv.controller"]
