"""java.util.Properties text, read and written with Java's rules: the one codec for every
properties text the server reads or writes (the ``-c`` file, configStorePath, the standalone
controller's ``-c`` file, UPDATE_NAMESRV_CONFIG / UPDATE_CONTROLLER_CONFIG bodies, the
GET_NAMESRV_CONFIG / GET_CONTROLLER_CONFIG answers, ``-p``, what namesrv-admin sends and reads).

Reading is ``Properties.load`` (Java 17's LineReader, load0 and loadConvert), exactly:

- a line ends only at ``\\n``, ``\\r`` or ``\\r\\n``; no other character ends one (``str.splitlines``
  also ends lines at U+2028, U+0085, ``\\x0b``, ``\\x0c``, ``\\x1c``..``\\x1e``: a value holding one
  would become several keys);
- whitespace (space, ``\\t``, ``\\f``) at the start of a line is skipped; a line that is then empty
  is skipped, one starting with ``#`` or ``!`` is a comment (never continued);
- an odd number of backslashes at a line's end joins the next line (its leading whitespace skipped);
- the key ends at the first unescaped ``=``, ``:`` or whitespace; whitespace, then one ``=`` or ``:``
  (when whitespace ended the key), then whitespace again, lead to the value;
- ``\\t \\n \\r \\f`` and ``\\uXXXX`` (exactly four hex digits, else ``PropertiesError`` as Java's
  IllegalArgumentException) are unescaped, any other escaped character stands for itself; UTF-16
  halves written as two escapes make one character, a lone one stays as it is;
- a later key replaces an earlier one.

Writing is ``Properties.store`` (Java's saveConvert), with two differences, each so that what is
written is read back as exactly the key and value it came from, by Java and by any line-based tool:

- every control character (``escapes.CONTROLS``: C0, DEL, C1, the line and paragraph separators,
  the bidirectional controls, lone surrogates) is written as ``\\uXXXX``, also when other characters
  are written as they are (Java's store(Writer) writes them raw);
- ``=``, ``:``, ``#`` and ``!`` inside a value are written as they are (Java escapes them; only a key
  needs it: a value never starts a line and is never searched for a separator), so that an
  ordinary value comes out byte-identical to Java's GET_NAMESRV_CONFIG answer (MixAll.properties2String
  writes ``key=value`` raw: the hole of CVE-2023-37582's class) and files stay readable
  (``nsaddrList=10.0.0.1:9876``).

``tests/test_properties_codec.py`` holds both directions to Java 17's own Properties (a table made
with ``tools/java_properties_table.py``) and to a round-trip property: any key and value written
load back as exactly themselves and add no key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping

from .escapes import CONTROLS


class PropertiesError(ValueError):
    """Text that Properties.load refuses (a malformed ``\\uXXXX``), as Java's IllegalArgumentException."""


# -- reading -----------------------------------------------------------------------------------

#: a byte-order mark in UTF-8, as Windows editors start a file with it
BOM = b"\xef\xbb\xbf"
_LINE_ENDS = re.compile(rb"\r\n|\r|\n")


def decode_file(data: bytes) -> tuple[str, str | None]:
    """The text of a properties file's bytes, and why it is not read as UTF-8 (None when it is).

    UTF-8 first, a byte-order mark at the start read past (Windows editors write one; Java reads it
    into the first key, whose setting is then lost).  Bytes that are not UTF-8 (a file an older
    editor saved in ISO-8859-1 or Windows-1252: ``café`` as ``caf\\xe9``, in a comment or a value)
    are read as ISO-8859-1, the way Java's ``mqnamesrv -c`` reads every file
    (``Properties.load(InputStream)``): such a file means to this server what it meant to Java,
    where refusing it stopped a start Java made with it.  The reason names the first such byte and its
    line, for the warning the caller gives."""
    if data.startswith(BOM):
        data = data[len(BOM):]
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        line = len(_LINE_ENDS.findall(data, 0, exc.start)) + 1
        return data.decode("latin-1"), f"byte 0x{data[exc.start]:02X} on line {line} is not UTF-8"


#: a natural line and its ending: Java's line terminators, ``\r\n`` as one (none at the end of the text)
_NATURAL_LINES = re.compile("([^\r\n]*)(\r\n|\r|\n)?")
_BLANKS = " \t\f"
#: a key: escaped characters or anything but a separator (Properties.load0)
_KEY = re.compile(r"(?:\\.|[^\\=: \t\f])*", re.DOTALL)
_ESCAPE = re.compile(r"\\(?:u(.{0,4})|(.))", re.DOTALL)
_HEX4 = re.compile("[0-9a-fA-F]{4}")
_NAMED_ESCAPES = {"t": "\t", "r": "\r", "n": "\n", "f": "\f"}
_SURROGATE = re.compile("[\ud800-\udfff]")


def load(text: str) -> dict[str, str]:
    """``Properties.load(Reader)`` of ``text``: every key and value, the last of a key kept."""
    return dict(pairs(text))


def pairs(text: str) -> Iterator[tuple[str, str]]:
    """Every key and value of ``text`` in its order, a key given twice twice: what ``load`` keeps
    the last of, for a reader that tells the others (Java drops them in silence)."""
    for line in logical_lines(text):
        key, value = _split(line)
        yield _unescape(key), _unescape(value)


def _natural_lines(text: str) -> Iterator[tuple[str, str | None]]:
    """(content, ending) of each natural line, the last one's ending None: read as it goes, so a
    body of millions of lines is never a list."""
    for found in _NATURAL_LINES.finditer(text):
        content, ending = found.groups()
        yield content, ending
        if ending is None:
            return


def logical_lines(text: str) -> Iterator[str]:
    """Java's LineReader: the logical lines of ``text``, comments and blank lines left out,
    continuations joined, leading whitespace skipped, escapes still in."""
    parts: list[str] = []
    size = 0  # characters in parts: Java's len, 0 where a logical line would start
    continued_by: str | None = None  # the ending of the line before, when it ended in an odd number of backslashes
    for content, ending in _natural_lines(text):
        if ending is None and not content and continued_by is not None:
            # the text ends right after a continuation: Java still returns the line, even an empty one,
            # unless the continuation ended in \r\n (LineReader looks one character past a \r only)
            if size or continued_by != "\r\n":
                yield "".join(parts)
            return
        natural = content.lstrip(_BLANKS)
        if not size and (not natural or natural[0] in "#!"):
            parts, continued_by = [], None
            continue  # a blank line or a comment, where a logical line would start
        if (len(natural) - len(natural.rstrip("\\"))) % 2:
            parts.append(natural[:-1])
            size += len(natural) - 1
            if ending is None:  # a backslash ending the text: dropped, the line returned
                yield "".join(parts)
                return
            continued_by = ending
            continue
        parts.append(natural)
        yield "".join(parts)
        parts, size, continued_by = [], 0, None


def _split(line: str) -> tuple[str, str]:
    """load0: the escaped key and value of one logical line."""
    end = _KEY.match(line).end()  # type: ignore[union-attr]  # matches the empty string at least
    key, at = line[:end], end
    if at < len(line):
        separator = line[at]
        at += 1
        while at < len(line) and line[at] in _BLANKS:
            at += 1
        if separator not in "=:" and at < len(line) and line[at] in "=:":
            at += 1
            while at < len(line) and line[at] in _BLANKS:
                at += 1
    return key, line[at:]


def _unescaped(match: re.Match[str]) -> str:
    digits, other = match.group(1), match.group(2)
    if other is not None:
        return _NAMED_ESCAPES.get(other, other)
    if digits is None:  # a backslash ending the text: LineReader never leaves one
        return ""
    if not _HEX4.fullmatch(digits):
        raise PropertiesError("Malformed \\uxxxx encoding.")
    return chr(int(digits, 16))


def _unescape(text: str) -> str:
    """loadConvert."""
    if "\\" not in text:
        return text
    out = _ESCAPE.sub(_unescaped, text)
    if _SURROGATE.search(out):  # Java's chars are UTF-16 units: two escaped halves make one character
        out = out.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return out


# -- writing -----------------------------------------------------------------------------------

_SAVE_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f", "\\": "\\\\"}
#: what a key needs escaped: saveConvert's with escapeSpace, and every control character
_KEY_SPECIAL = re.compile(f"[\\\\ =:#!]|{CONTROLS.pattern}")
#: what a value needs escaped (a leading space aside): backslashes and every control character
_VALUE_SPECIAL = re.compile(f"[\\\\]|{CONTROLS.pattern}")
_NON_ASCII = re.compile("[^\x20-\x7e]")


def _unicode_escape(char: str) -> str:
    """``\\uXXXX`` per UTF-16 unit, upper-case hex as Java's toHex writes it."""
    data = char.encode("utf-16-be", "surrogatepass")
    return "".join(f"\\u{int.from_bytes(data[i:i + 2], 'big'):04X}" for i in range(0, len(data), 2))


def _save(match: re.Match[str]) -> str:
    char = match.group()
    named = _SAVE_NAMED.get(char)
    if named is not None:
        return named
    if char in " =:#!":
        return "\\" + char
    return _unicode_escape(char)


def _convert(text: str, special: re.Pattern[str], ascii_only: bool) -> str:
    text = special.sub(_save, text)
    return _NON_ASCII.sub(lambda m: _unicode_escape(m.group()), text) if ascii_only else text


def dump_line(key: str, value: str, ascii_only: bool = False) -> str:
    """``key=value\\n`` that ``load`` (and Java's Properties.load) reads back as exactly this key
    and value.  ``ascii_only``: every other non-ASCII character as ``\\uXXXX`` too, as
    Properties.store(OutputStream) writes: for a request body, which Java loads as ISO-8859-1."""
    value_text = _convert(value, _VALUE_SPECIAL, ascii_only)
    if value_text.startswith(" "):
        value_text = "\\" + value_text
    return f"{_convert(key, _KEY_SPECIAL, ascii_only)}={value_text}\n"


def dump(pairs: Mapping[str, str] | Iterable[tuple[str, str]], ascii_only: bool = False) -> str:
    """Every pair as one ``dump_line``, in the order given."""
    items = pairs.items() if isinstance(pairs, Mapping) else pairs
    return "".join(dump_line(key, value, ascii_only) for key, value in items)
