"""The README stays true: every configuration key is documented with its default."""

from __future__ import annotations

import re
from pathlib import Path

from twisted_namesrv.state.config import KEYS

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_lists_every_configuration_key():
    text = README.read_text(encoding="utf-8")
    section = text[text.index("### Configuration keys"):]
    section = section[:section.index("\n## ")]
    documented = set(re.findall(r"`([a-zA-Z.]+)`", section))
    assert [k.name for k in KEYS if k.name not in documented] == []
