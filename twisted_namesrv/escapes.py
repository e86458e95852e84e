"""Control characters in text that came from outside (a peer's header or body, a file, a config
value): the one rule for finding them and the one way of showing them, shared by the terminal
(admin/terminal.py), the log (logs.py) and the properties codec (properties.py writes each as
``\\uXXXX``; UPDATE_NAMESRV_CONFIG refuses values holding one).

What counts (``CONTROLS``): C0, DEL and C1 (a raw ESC starts a terminal escape sequence: recolour,
retitle, rewrite lines already shown; a raw CR or newline forges lines), every Unicode format
character (category Cf: the bidirectional controls, ALM U+061C among them, reorder what is shown; the
zero-width ones, the soft hyphen, the tag characters U+E0000..U+E0FFF hide text) and every other
default-ignorable code point (variation selectors, Hangul fillers, the combining grapheme joiner:
what a viewer draws as nothing), the line and paragraph separators and NEL (line ends to
``str.splitlines`` and to many viewers), the BOM, and lone UTF-16 surrogates (``"\\ud800"`` in a JSON
header: no UTF-8 encoder writes one, so a line holding one is lost).  ``tests/test_escapes.py``
holds the set to Python's own Unicode tables.
"""

from __future__ import annotations

import json
import re
from typing import Any

#: C0, DEL, C1; Unicode's format characters (Cf) and default-ignorable code points (invisible); line and
#: paragraph separators; lone surrogates
_BEYOND_C0 = ("\x7f-\x9f\xad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u115f\u1160"
              "\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff"
              "\uffa0\ufff0-\ufffb\ud800-\udfff\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
              "\U0001d173-\U0001d17a\U000e0000-\U000e0fff")
CONTROLS = re.compile(f"[\x00-\x1f{_BEYOND_C0}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
#: what json.dumps leaves raw in its strings (it escapes C0 itself; with ensure_ascii=True only DEL is left)
_JSON_RAW = re.compile(f"[{_BEYOND_C0}]")


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000
                                else f"\\U{code:08x}")


def escaped(value: Any) -> str:
    """``str(value)`` with every control character as a visible escape (``\\x1b``, ``\\n``, ``\\u202e``)."""
    text = str(value)
    return CONTROLS.sub(_escape, text) if has_controls(text) else text


def has_controls(text: str) -> bool:
    """Whether ``text`` holds a character ``escaped`` shows as an escape.  Printable ASCII (what CONTROLS
    finds in ASCII is C0 and DEL, unprintable) is answered without the search, about 80 µs for 512
    characters: most text, a log line per registration among it (a sixth of the search's CPU), and
    every label of /metrics (2,000 brokers of 512-character names: 28,000 searches, 2.3 s a scrape)."""
    return not (text.isascii() and text.isprintable()) and CONTROLS.search(text) is not None


#: the most characters of one name (a topic, a key, a config value, a broker's name) a line made for
#: people shows: a request's header fields may hold 64 KiB each (Java's NameServer keeps names of
#: megabytes), and each is a log line, an audit event, a status page's event, a report's finding
SHOWN_MAX = 256


def clipped_text(text: str, most: int = SHOWN_MAX) -> str:
    """``text`` as a line shows it: beyond ``most`` characters cut, with how long it was."""
    return text if len(text) <= most else f"{text[:most]}...({len(text)} characters)"


def clipped_name(value: object, most: int = SHOWN_MAX) -> str:
    """A name put into a line for people (``str(value)``), clipped as ``clipped_text`` clips text:
    where the line is made, so the fields it was made of keep the name whole."""
    return clipped_text(str(value), most)


def clipped_repr(value: object, most: int = SHOWN_MAX) -> str:
    """``repr(value)`` put into such a line: a string beyond ``most`` characters cut inside its quotes,
    with how long it was (``'TTT...(20000 characters)'``)."""
    if not isinstance(value, str) or len(value) <= most:
        return repr(value)
    quoted = repr(value[:most])
    return f"{quoted[:-1]}...({len(value)} characters){quoted[-1]}"


#: a value a line for people shows as it is (``quoted``): ASCII letters, digits and ``. _ : / @ % + -``,
#: which no reader takes for a field's end, a second field or a line's end
_TOKEN = re.compile(r"[A-Za-z0-9._:/@%+\-]+")
#: a sentence (an answer's remark) shown as it is in a line's closing parentheses: printable ASCII
#: but what would end the parentheses early or start a quoted or forged part
_SENTENCE = re.compile(r"[ !#-'*-=?-\[\]-~]+")


def quoted(value: object) -> str:
    """``str(value)`` as a field of a line that programs and people read (the audit trail's): itself
    when a plain token (``broker-a``, ``10.0.0.7:51234``), else a JSON string with every control
    character an escape (``json_escaped``).  A peer chooses KV names, broker names, config keys and
    values and the accessKey it claims: unquoted, ``key=k -> ok`` or ``productEnvName=x,
    aclEnable=false`` forged a result or a key inside the line, and a CR or U+2028 a line of its own
    wherever the line is written without logs.py's escaping (``formatEvent``, a syslog observer)."""
    text = str(value)
    return text if _TOKEN.fullmatch(text) else json_escaped(json.dumps(text, ensure_ascii=False))


def quoted_sentence(text: str) -> str:
    """A sentence that may hold a peer's words (an answer's remark: ``No acl config for X``) as a
    line's closing ``(...)`` shows it: as it is when plain (``sentence`` above), else quoted."""
    return text if _SENTENCE.fullmatch(text) else quoted(text)


def json_escaped(text: str) -> str:
    """JSON text from ``json.dumps`` with what it leaves raw in its strings as ``\\uXXXX`` (still JSON,
    the same document)."""
    return _JSON_RAW.sub(lambda match: "".join(f"\\u{unit:04x}" for unit in _utf16_units(match.group())), text)


def _utf16_units(char: str) -> list[int]:
    """The UTF-16 code units of one character (two for one beyond U+FFFF, as JSON writes it)."""
    data = char.encode("utf-16-be", "surrogatepass")
    return [int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2)]


def first_control(text: str) -> str | None:
    """The first control character of ``text`` named as ``U+XXXX``, or None when it holds none."""
    found = CONTROLS.search(text)
    return None if found is None else f"U+{ord(found.group()):04X}"
