"""The properties codec (twisted_namesrv/properties.py) holds to Java 17's java.util.Properties:

- a table of texts and pairs run through Java's own Properties (tests/data/java_properties.json,
  made by tools/java_properties_table.py): what Java's load reads, we read; what Java's store
  writes, we read back; what we write, Java reads back as the pair it came from;
- a literal port of Java's LineReader/load0/loadConvert as the oracle for generated texts;
- round trips: any key and value written load back as exactly themselves and add no key, alone,
  in a file of other pairs, and through NamesrvConfig's saved file and a restart.

The hole of issue 44: ``str.splitlines()`` ended lines at U+2028, U+0085, \\x0b, \\x1c..\\x1e, so a
value saved raw became new keys at the next start.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from twisted_namesrv import properties
from twisted_namesrv.escapes import CONTROLS
from twisted_namesrv.properties import PropertiesError, dump, dump_line, load
from twisted_namesrv.state.config import JAVA_TRIMMED, NamesrvConfig

TABLE = json.loads((Path(__file__).parent / "data" / "java_properties.json").read_text())
#: every line end str.splitlines() knows but Java's Properties does not
SEPARATORS = ["\u2028", "\u2029", "\u0085", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"]


def attack(separator: str) -> str:
    return separator.join(["x", "aclEnable=false", "kvConfigPath=/tmp/evil", "listenPort=1", "bindAddress=0.0.0.0",
                           "nsaddrList=6.6.6.6:9876", "enableElectUncleanMaster=true"])


# -- Java's own verdicts --------------------------------------------------------------------------

@pytest.mark.parametrize("row", TABLE["load"], ids=lambda row: repr(row["text"])[:60])
def test_we_load_what_java_17_loads(row):
    if "error" in row:
        with pytest.raises(PropertiesError):
            load(row["text"])
    else:
        assert load(row["text"]) == row["loaded"]


@pytest.mark.parametrize("row", TABLE["store"], ids=lambda row: repr((row["key"], row["value"]))[:60])
def test_what_java_stores_we_load_and_what_we_write_java_loads(row):
    pair = {row["key"]: row["value"]}
    assert load(row["java_writer"]) == pair and load(row["java_stream"]) == pair
    # the table's verdict is about the lines we write today (else: run tools/java_properties_table.py again)
    assert dump_line(row["key"], row["value"]) == row["ours"]
    assert dump_line(row["key"], row["value"], ascii_only=True) == row["ours_ascii"]
    assert row["java_loads_ours"] == pair and row["java_loads_ours_ascii"] == pair


def test_the_table_holds_the_attack_of_issue_44_in_every_form():
    texts = {row["text"] for row in TABLE["load"]}
    for separator in SEPARATORS:
        assert any(separator in text and "aclEnable=false" in text for text in texts)
        assert any(f"\\u{ord(separator):04x}" in text for text in texts)


@pytest.mark.parametrize("separator", SEPARATORS)
@pytest.mark.parametrize("escaped", [False, True])
def test_a_line_separator_in_a_value_adds_no_key(separator, escaped):
    value = attack(separator)
    text = "productEnvName=" + (value.replace(separator, f"\\u{ord(separator):04x}") if escaped else value) + "\n"
    assert load(text) == {"productEnvName": value}
    line = dump_line("productEnvName", value)
    assert load(line) == {"productEnvName": value}
    assert line.splitlines() == [line[:-1]] and not CONTROLS.search(line[:-1])  # one line to every reader


def test_ordinary_values_are_written_as_java_answers_them():
    """MixAll.properties2String writes ``key=value`` raw: an ordinary value is byte-identical."""
    for key, value in (("nsaddrList", "10.0.0.1:9876;10.0.0.2:9876"), ("kvConfigPath", "/home/ns/kv.json"),
                       ("configBlackList", "configBlackList;configStorePath;kvConfigPath"), ("e", "a=b#c!d")):
        assert dump_line(key, value) == f"{key}={value}\n"


# -- the oracle: Java 17's code, line by line --------------------------------------------------

def java_load(text: str) -> dict[str, str]:
    """Properties.load(Reader) of Java 17, transliterated (LineReader.readLine, load0, loadConvert)."""
    pos, end, loaded = 0, len(text), {}

    def read_line() -> list[str] | None:
        nonlocal pos
        line: list[str] = []
        skip_white, appended_line_begin, preceding_backslash = True, False, False
        while True:
            if pos >= end:
                if not line:
                    return None
                return line[:-1] if preceding_backslash else line
            c = text[pos]
            pos += 1
            if skip_white:
                if c in " \t\f":
                    continue
                if not appended_line_begin and c in "\r\n":
                    continue
                skip_white = appended_line_begin = False
            if not line and c in "#!":
                while pos < end and text[pos] not in "\r\n":
                    pos += 1
                pos += 1
                skip_white = True
                continue
            if c not in "\n\r":
                line.append(c)
                preceding_backslash = not preceding_backslash if c == "\\" else False
                continue
            if not line:
                skip_white = True
                continue
            if pos >= end:
                return line[:-1] if preceding_backslash else line
            if not preceding_backslash:
                return line
            line.pop()
            skip_white = appended_line_begin = True
            preceding_backslash = False
            if c == "\r" and text[pos] == "\n":
                pos += 1

    def convert(chars: list[str]) -> str:
        out, i = [], 0
        while i < len(chars):
            c, i = chars[i], i + 1
            if c != "\\":
                out.append(c)
                continue
            c, i = chars[i], i + 1
            if c != "u":
                out.append({"t": "\t", "r": "\r", "n": "\n", "f": "\f"}.get(c, c))
                continue
            if i > len(chars) - 4:
                raise PropertiesError("Malformed \\uxxxx encoding.")
            value = 0
            for _ in range(4):
                c, i = chars[i], i + 1
                if c not in "0123456789abcdefABCDEF":
                    raise PropertiesError("Malformed \\uxxxx encoding.")
                value = value * 16 + int(c, 16)
            out.append(chr(value))
        return "".join(out).encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")

    while (line := read_line()) is not None:
        limit, key_len, value_start, has_sep, preceding = len(line), 0, len(line), False, False
        while key_len < limit:
            c = line[key_len]
            if c in "=:" and not preceding:
                value_start, has_sep = key_len + 1, True
                break
            if c in " \t\f" and not preceding:
                value_start = key_len + 1
                break
            preceding = not preceding if c == "\\" else False
            key_len += 1
        while value_start < limit:
            c = line[value_start]
            if c not in " \t\f":
                if has_sep or c not in "=:":
                    break
                has_sep = True
            value_start += 1
        loaded[convert(line[:key_len])] = convert(line[value_start:])
    return loaded


TRICKY = st.lists(st.sampled_from(["a", "b", "=", ":", " ", "\t", "\f", "\\", "\\", "\n", "\r", "\r\n", "#", "!",
                                   "u", "0", "4", "1", "D", "8", "\u2028", "\x0b", "\x85", "\x1c", "é", "🎉"]),
                  max_size=40).map("".join)


def outcome(read, text: str) -> dict[str, str] | str:
    try:
        return read(text)
    except PropertiesError:
        return "PropertiesError"


@settings(max_examples=3000, deadline=None)
@given(TRICKY)
@example("\\\n")
@example("\\\r\n")
@example("a\\\r\rb\n")
def test_load_is_javas_line_by_line(text):
    assert outcome(load, text) == outcome(java_load, text)


def test_the_oracle_agrees_with_java_17_on_the_table():
    for row in TABLE["load"]:
        assert outcome(java_load, row["text"]) == row.get("loaded", "PropertiesError"), row["text"]


# -- round trips -----------------------------------------------------------------------------------

ANY_TEXT = st.text(st.characters(exclude_categories=()))  # surrogates and controls included
PAIRS = st.lists(st.tuples(ANY_TEXT, ANY_TEXT), max_size=8)


@settings(max_examples=1000, deadline=None)
@given(ANY_TEXT, ANY_TEXT)
@example("productEnvName", attack("\u2028"))
@example("k", " \\ lead\\")
@example("#k", "")
def test_any_key_and_value_load_back_as_themselves(key, value):
    line = dump_line(key, value)
    assert load(line) == {key: value}
    assert load(dump_line(key, value, ascii_only=True)) == {key: value}
    assert dump_line(key, value, ascii_only=True).isascii()
    assert line.endswith("\n") and len(line.splitlines()) == 1 and not CONTROLS.search(line[:-1])


@settings(max_examples=300, deadline=None)
@given(PAIRS, ANY_TEXT, ANY_TEXT)
def test_a_pair_written_into_a_file_adds_no_other_key(pairs, key, value):
    text = dump(pairs)
    assert load(text) == dict(pairs)
    assert load(text + dump_line(key, value)) == {**dict(pairs), key: value}


@settings(max_examples=500, deadline=None)
@given(ANY_TEXT)
def test_load_raises_nothing_but_properties_error(text):
    try:
        load(text)
    except PropertiesError:
        assert "\\u" in text


@settings(max_examples=150, deadline=None)
@given(ANY_TEXT)
@example(attack("\u2028"))
@example(attack("\x1e"))
def test_a_saved_value_is_the_value_after_a_restart_and_adds_no_key(tmp_path_factory, value):
    """NamesrvConfig's saved file (what UPDATE_NAMESRV_CONFIG writes to the -c file) read at the next
    start: the value as Java's properties2Object trims it, and not one key more."""
    path = tmp_path_factory.mktemp("restart") / "ns.properties"
    path.write_text(f"kvConfigPath={path.parent / 'kv.json'}\n")
    config = NamesrvConfig.from_file(str(path))
    config.apply({"productEnvName": value})
    path.write_text(config.stored_text(), encoding="utf-8")
    saved = load(path.read_text(encoding="utf-8"))
    assert set(saved) <= set(config.listed_keys())  # the keys listed (unset ones left out), not one more
    again = NamesrvConfig.from_file(str(path))
    assert again["productEnvName"] == value.strip(JAVA_TRIMMED)
    assert again.values == config.values and again.extra == config.extra == {}
    assert again["aclEnable"] is False and again["kvConfigPath"] == str(path.parent / "kv.json")


def test_the_codec_is_the_one_reader_of_properties():
    """No other module reads or writes properties text on its own (splitlines, split('=')...)."""
    package = Path(properties.__file__).parent
    others = [p for p in package.rglob("*.py") if p.name != "properties.py"]
    found = [str(p.relative_to(package)) for p in others
             if 'split("=", 1)' in p.read_text() or "def parse_properties" in p.read_text()]
    assert found == []
