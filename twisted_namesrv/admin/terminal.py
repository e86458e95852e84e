"""What namesrv-admin prints is safe for a terminal: every control character a NameServer's answer
may carry (a broker name, a topic, a KV value, a remark, a config value) is shown as an escape.

A raw ESC starts a terminal escape sequence (recolour, retitle, rewrite lines already shown, on some
terminals answer back); a raw CR or newline inside a value forges lines of a table; the Unicode
bidirectional controls reorder what is shown.  ``printable`` escapes all of them in one value;
``printable_lines`` in text whose own newlines separate lines (the last guard, for every subcommand's
output and error lines); ``json_text`` for ``--json`` (json escapes C0 itself, not DEL, C1 or the
bidi controls; the escapes it gets here are still JSON).
"""

from __future__ import annotations

import json
import re
from typing import Any

#: C0, DEL, C1, zero-width and bidirectional formatting controls, line and paragraph separators, BOM
CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2069\ufeff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
#: what json.dumps leaves raw in its strings (its own newlines, from indent, are structure)
_JSON_RAW = re.compile("[\x7f-\x9f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2069\ufeff]")


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def printable(value: Any) -> str:
    """``str(value)`` with every control character as a visible escape (``\\x1b``, ``\\n``, ``\\u202e``)."""
    return CONTROLS.sub(_escape, str(value))


def printable_lines(text: str) -> str:
    """``text`` escaped but for its newlines and tabs, which lay it out (mqadmin's tables are
    tab-separated); the fields a subcommand puts in it are escaped whole (``printable``)."""
    return "\n".join("\t".join(map(printable, line.split("\t"))) for line in text.split("\n"))


def json_text(document: Any, indent: int = 2) -> str:
    """``document`` as indented JSON whose strings carry no raw control character."""
    return _JSON_RAW.sub(lambda match: f"\\u{ord(match.group()):04x}",
                        json.dumps(document, indent=indent, ensure_ascii=False))
