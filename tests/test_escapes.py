"""escapes.py's one rule, held to Python's own Unicode tables: every character a viewer does not draw
as itself (controls, format characters, line and paragraph separators, default-ignorable code points)
is shown as an escape in the log, the terminal and the properties files, and refused in config values."""

from __future__ import annotations

import json
import sys
import unicodedata

import pytest
from twisted.logger import LogLevel

from twisted_namesrv import properties
from twisted_namesrv.escapes import CONTROLS, escaped, json_escaped
from twisted_namesrv.logs import event_as_text_line
from twisted_namesrv.state.config import control_characters

#: Unicode's categories of what is no visible character: controls, format characters (bidi, zero-width,
#: tags), line and paragraph separators, surrogates
HIDDEN_CATEGORIES = ("Cc", "Cf", "Zl", "Zp", "Cs")
#: default-ignorable code points of other categories (DerivedCoreProperties.txt): drawn as nothing
OTHER_IGNORABLES = ["\u034f", "\u115f", "\u1160", "\u17b4", "\u17b5", "\u180b", "\u180f", "\u3164", "\ufe00",
                    "\ufe0f", "\uffa0", "\U000e0100", "\U000e01ef"]


def hidden() -> list[str]:
    return [chr(code) for code in range(sys.maxunicode + 1) if unicodedata.category(chr(code)) in HIDDEN_CATEGORIES]


def test_every_control_format_and_separator_character_is_one_of_the_controls():
    """ALM (U+061C, a bidirectional mark), the soft hyphen, the tag characters and the rest of
    category Cf were written raw into the text log: they reorder or hide what an operator reads."""
    missed = [f"U+{ord(char):04X}" for char in hidden() if not CONTROLS.fullmatch(char)]
    assert not missed


@pytest.mark.parametrize("char", OTHER_IGNORABLES)
def test_default_ignorable_code_points_are_controls(char):
    assert CONTROLS.fullmatch(char)


@pytest.mark.parametrize("char", ["a", "é", "中", "\u00a0", " ", "😀", "\u2764", "-", "\\", "\U0001f1e8"])
def test_visible_characters_are_not(char):
    assert not CONTROLS.search(char)


@pytest.mark.parametrize("char", ["\u061c", "\xad", "\u180e", "\u206a", "\ufff9", "\U000e0041", "\U000e007f",
                                  "\U0001d173", "\u3164", "\ufe0f"])
def test_each_is_escaped_in_a_log_line_refused_in_config_and_escaped_in_properties(char):
    name = f"ns{char}x"
    event = {"log_format": "audit put_kv_config: namespace={namespace}", "namespace": name, "log_time": 0.0,
             "log_namespace": "twisted_namesrv.audit", "log_level": LogLevel.info}
    line = event_as_text_line(event)
    assert char not in line and escaped(name) in line
    assert control_characters({"productEnvName": name})
    written = properties.dump_line("productEnvName", name)
    assert char not in written and properties.load(written) == {"productEnvName": name}


def test_an_escape_beyond_the_basic_plane_is_unambiguous():
    """``\\ue0041`` would read as U+E004 and a 1."""
    assert escaped("\U000e0041") == "\\U000e0041"
    assert escaped("\u061c1") == "\\u061c1"


def test_json_text_escapes_stay_json():
    text = "x\U000e0041\u061c\x85\ud800y"
    written = json_escaped(json.dumps(text, ensure_ascii=False))
    assert not CONTROLS.search(written) and json.loads(written) == text


def test_ascii_text_is_escaped_by_the_same_rule_without_searching_it(monkeypatch):
    """Every ASCII character is escaped exactly when it is one of CONTROLS (C0 and DEL); text
    without one, a log line per registration among it, is not searched (a sixth of the CPU)."""
    for code in range(128):
        char = chr(code)
        assert (escaped(f"a{char}b") != f"a{char}b") == bool(CONTROLS.search(char)), code
    from twisted_namesrv import escapes

    monkeypatch.setattr(escapes, "CONTROLS", None)
    assert escaped("broker registered: cluster=c broker=b id=0 addr=127.0.0.1:10911").startswith("broker")


def test_text_escaped_again_is_as_escaped_once():
    """An escape is printable ASCII: a line escaped twice (the capture report's findings escape
    their items' lines in place, findings._problem, whoever escaped them before) shows what once did."""
    text = "".join(hidden()[::97]) + "".join(OTHER_IGNORABLES) + "a\\x1b\x1b\r\n\t\u202e"
    once = escaped(text)
    assert escaped(once) == once and not CONTROLS.search(once)
