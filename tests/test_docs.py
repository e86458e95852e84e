"""The docs stay true: every configuration key is documented, and every relative link and anchor leads somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from twisted_namesrv.schema import SERVER_SCHEMA

ROOT = Path(__file__).resolve().parents[1]
CONFIGURATION = ROOT / "docs" / "configuration.md"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_configuration_doc_lists_every_key():
    text = CONFIGURATION.read_text(encoding="utf-8")
    section = text[text.index("\n## Keys\n"):]
    section = section[:section.index("\n## ", 1)]
    documented = set(re.findall(r"`([a-zA-Z.]+)`", section))
    assert [k.name for k in SERVER_SCHEMA.keys if k.name not in documented] == []


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


def broken_links(page: Path) -> list[str]:
    """Relative links of one Markdown page to a missing file or to a heading its file does not have."""
    broken = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        path, _, anchor = target.partition("#")
        if re.match(r"[a-z]+:", path):
            continue  # a URL
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{page.relative_to(ROOT)}: {target}")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{page.relative_to(ROOT)}: {target}")
    return broken


def test_relative_links_resolve():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    assert [link for page in pages for link in broken_links(page)] == []


@pytest.mark.parametrize("package", ["twisted_namesrv", "spark_analysis"])
def test_architecture_has_a_row_for_every_module(package):
    """docs/architecture.md's module map names every module of both packages (its first column,
    in its package's section): a module added without a row fails here."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split(f"## {package}\n", 1)[1].split("\n## ", 1)[0]
    named = {name for line in section.splitlines() if line.startswith("| `")
             for name in re.findall(r"`([^`]+)`", line.split(" | ")[0])}
    modules = {path.relative_to(ROOT / package).as_posix() for path in (ROOT / package).rglob("*.py")
               if path.name != "__init__.py"}
    assert sorted(modules - named) == []
    assert sorted(name for name in named if name.endswith(".py") and name not in modules) == []


def test_the_controller_acl_table_lists_the_codes_the_controller_serves_by_their_class():
    """security.md's ACL table of the controller port names each code the controller serves (Java
    5.3.3's ControllerManager.registerProcessor: 904, 1001-1006, 1009-1013) under the class
    controller_request_class gives it, and no other: it listed 1007 GET_BROKER_EPOCH_CACHE as a read,
    a code Java's controller and this one answer 3 (REQUEST_CODE_NOT_SUPPORTED)."""
    from twisted_namesrv.controller.processor import HANDLERS
    from twisted_namesrv.state.acl import controller_request_class

    text = (ROOT / "docs" / "security.md").read_text(encoding="utf-8")
    section = text[text.index("\n## The controller port\n"):]
    rows = re.findall(r"^  \| (broker|admin|read) \| ([^|]+) \|", section, re.MULTILINE)
    listed: dict[str, set[int]] = {kind: {int(code) for code in re.findall(r"\b(\d{3,4})\b", codes)}
                                   for kind, codes in rows}
    assert set(listed) == {"broker", "admin", "read"}
    assert set().union(*listed.values()) == {int(code) for code in HANDLERS}
    for kind, codes in listed.items():
        for code in codes:
            designated = {"designateElect": "true"} if kind == "admin" else {}
            assert controller_request_class(code, designated) == kind, (kind, code)
