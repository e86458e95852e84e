"""What namesrv-admin prints is safe for a terminal: every control character a NameServer's answer
may carry (a broker name, a topic, a KV value, a remark, a config value) is shown as an escape.

A raw ESC starts a terminal escape sequence (recolour, retitle, rewrite lines already shown, on some
terminals answer back); a raw CR or newline inside a value forges lines of a table; the Unicode
bidirectional controls reorder what is shown.  The rule (which characters, how each is shown) is
escapes.py's, the one the server's log uses too.  ``printable`` escapes all of them in one value;
``printable_lines`` in text whose own newlines separate lines (the last guard, for every subcommand's
output and error lines); ``json_text`` for ``--json`` (json escapes C0 itself, not DEL, C1 or the
bidi controls; the escapes it gets here are still JSON).
"""

from __future__ import annotations

import json
from typing import Any

from ..escapes import escaped, json_escaped

#: ``str(value)`` with every control character as a visible escape (``\x1b``, ``\n``, ``\u202e``)
printable = escaped


def printable_lines(text: str) -> str:
    """``text`` escaped but for its newlines and tabs, which lay it out (mqadmin's tables are
    tab-separated); the fields a subcommand puts in it are escaped whole (``printable``)."""
    return "\n".join("\t".join(map(printable, line.split("\t"))) for line in text.split("\n"))


def error_lines(text: str) -> str:
    """An error's text escaped but for its newlines (a Java NameServer's remark has one before its FAQ
    link), each line after the first indented, so that no line a NameServer sent can pass for a line
    of this command's own."""
    return "\n  ".join(map(printable, text.split("\n")))


def json_text(document: Any, indent: int = 2) -> str:
    """``document`` as indented JSON whose strings carry no raw control character."""
    return json_escaped(json.dumps(document, indent=indent, ensure_ascii=False))
