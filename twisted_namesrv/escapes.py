"""Control characters in text that came from outside (a peer's header or body, a file, a config
value): the one rule for finding them and the one way of showing them, shared by the terminal
(admin/terminal.py), the log (logs.py) and the properties codec (properties.py writes each as
``\\uXXXX``; UPDATE_NAMESRV_CONFIG refuses values holding one).

What counts (``CONTROLS``): C0, DEL and C1 (a raw ESC starts a terminal escape sequence: recolour,
retitle, rewrite lines already shown; a raw CR or newline forges lines), the zero-width and
bidirectional formatting controls (they reorder or hide what is shown), the line and paragraph
separators and NEL (line ends to ``str.splitlines`` and to many viewers), the BOM, and lone UTF-16
surrogates (``"\\ud800"`` in a JSON header: no UTF-8 encoder writes one, so a line holding one is lost).
"""

from __future__ import annotations

import re
from typing import Any

#: C0, DEL, C1, zero-width and bidirectional formatting controls, line and paragraph separators, BOM,
#: lone surrogates
CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2069\ufeff\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
#: what json.dumps leaves raw in its strings (it escapes C0 itself; with ensure_ascii=True only DEL is left)
_JSON_RAW = re.compile("[\x7f-\x9f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2069\ufeff\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def escaped(value: Any) -> str:
    """``str(value)`` with every control character as a visible escape (``\\x1b``, ``\\n``, ``\\u202e``)."""
    text = str(value)
    return CONTROLS.sub(_escape, text) if CONTROLS.search(text) else text


def json_escaped(text: str) -> str:
    """JSON text from ``json.dumps`` with what it leaves raw in its strings as ``\\uXXXX`` (still JSON,
    the same document)."""
    return _JSON_RAW.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def first_control(text: str) -> str | None:
    """The first control character of ``text`` named as ``U+XXXX``, or None when it holds none."""
    found = CONTROLS.search(text)
    return None if found is None else f"U+{ord(found.group()):04X}"
