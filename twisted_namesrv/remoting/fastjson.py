"""JSON as fastjson 1.2.x writes and reads it, so our bytes match Java's.

Writing (``dumps``):
- plain mode (``RemotingSerializable.encode``): integer map keys come out *unquoted*
  (``{0:"127.0.0.1:10911"}``, not valid JSON), strings are raw UTF-8, maps keep the order
  the caller gives (use ``java_hash_order`` for a Java HashMap's order);
- standard mode (route answers to clients of version >= V4_9_4 or with
  ``acceptStandardJsonOnly``: BrowserCompatible + MapSortField): keys quoted, maps sorted,
  non-ASCII as upper-case ``\\uXXXX``, ``/`` as ``\\/``, longs beyond 2^53 as strings.
Beans are plain dicts whose keys the caller already put in alphabetical order (SortField):
sorting them again in standard mode is a no-op.  ``None`` values are omitted, as fastjson
omits null properties and null map values by default.

Reading (``loads``): lenient like fastjson's parser - unquoted numeric keys are accepted.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

import msgspec

_plain_string = json.JSONEncoder(ensure_ascii=False).encode
_ascii_string = json.JSONEncoder(ensure_ascii=True).encode
_LOWER_HEX_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\u([0-9a-f]{4})")
_MAX_SAFE_LONG = 9007199254740991
K = TypeVar("K")
V = TypeVar("V")


def _standard_string(text: str) -> str:
    escaped = _ascii_string(text).replace("/", "\\/")
    if "\\u" not in escaped:
        return escaped
    return _LOWER_HEX_ESCAPE.sub(lambda m: m.group(1) + "\\u" + m.group(2).upper(), escaped)


#: the range of Java's int and long fields, as (least, greatest)
JAVA_INT = (-(1 << 31), (1 << 31) - 1)
JAVA_LONG = (-(1 << 63), (1 << 63) - 1)
#: the values ``java_numbers(..., JAVA_LONG)`` answers with themselves: an ``int`` (exactly: a bool is
#: read as 0 or 1) in this range.  A caller reading longs at every registration tests
#: ``type(value) is int and value in JAVA_LONG_INTS`` (no Python call: a range's ``in`` is C) and
#: hands anything else to java_numbers (DataVersion.from_json)
JAVA_LONG_INTS = range(JAVA_LONG[0], JAVA_LONG[1] + 1)


def java_numbers(values: Iterable[Any], bounds: tuple[int, int] = JAVA_INT) -> list[int]:
    """Int (``JAVA_INT``) or long (``JAVA_LONG``) fields as fastjson fills them from JSON values:
    ``int()`` of a number, a numeric string or a boolean, and a ValueError past the fields' range, as
    fastjson refuses an int overflow (Python keeps any number: a 4,000-digit ``perm`` was served in
    routes no Java client could read).  Builtins only: a registration reads three a DataVersion."""
    numbers = list(map(int, values))
    if numbers and (min(numbers) < bounds[0] or max(numbers) > bounds[1]):
        kind = "an int" if bounds == JAVA_INT else "a long"
        raise ValueError(f"{max(numbers, key=abs)!s:.40} is out of the range of {kind} (Java's)")
    return numbers


def java_utf8(text: str) -> bytes:
    """String.getBytes(UTF_8): a lone surrogate (JSON can carry one) becomes '?', never an error."""
    return text.encode("utf-8", "replace")


def _utf16(text: str) -> bytes:
    """Java's UTF-16 code units, lone surrogates included (hashing and TreeMap order use them)."""
    return text.encode("utf-16-be", "surrogatepass")


def _sort_key(key: Any) -> tuple[int, Any]:
    if isinstance(key, int):
        return (0, key)
    return (1, _utf16(str(key)))


def dumps(value: Any, standard: bool = False) -> str:
    """Serialize like fastjson's ``JSON.toJSONString`` (see module docstring)."""
    out: list[str] = []
    _write(value, standard, out)
    return "".join(out)


def dumps_bytes(value: Any, standard: bool = False) -> bytes:
    return java_utf8(dumps(value, standard))


#: a UTF-16 surrogate code unit: in a str, one UTF-8 cannot carry (a JSON header's ``"\\ud800"``); spelled by
#: ``chr``: mypyc (tools/bench/compiled.py) compiles no surrogate in a literal
_SURROGATE = re.compile(f"[{chr(0xD800)}-{chr(0xDFFF)}]")


def dumps_stored(value: Any) -> bytes:
    """``dumps_bytes`` for a file this server reads back (the KV store): a lone surrogate is written
    as its ``\\uXXXX`` escape, which fastjson and ``loads`` read back as that surrogate.  Java's
    fastjson writes it as ``?`` (String.getBytes), so two keys became one at the next start: an
    unsigned put of ``T\\ud800`` replaced the ``T?`` an operator had put.  Outside strings JSON is
    ASCII, and a backslash in one is written ``\\\\``, so every surrogate is a string's own character."""
    text = dumps(value)
    return java_utf8(_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text))


def _write(value: Any, standard: bool, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(_standard_string(value) if standard else _plain_string(value))
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        if standard and not -_MAX_SAFE_LONG <= value <= _MAX_SAFE_LONG:
            out.append(f'"{value}"')
        else:
            out.append(str(value))
    elif isinstance(value, float):
        out.append(repr(value) if math.isfinite(value) else "null")
    elif isinstance(value, dict):
        _write_map(value, standard, out)
    elif isinstance(value, (list, tuple, set, frozenset)):
        out.append("[")
        first = True
        for item in value:
            if not first:
                out.append(",")
            first = False
            if item is None:
                out.append("null")
            else:
                _write(item, standard, out)
        out.append("]")
    elif value is None:
        out.append("null")
    else:
        raise TypeError(f"cannot serialize {type(value).__name__}")


def _write_map(mapping: dict[Any, Any], standard: bool, out: list[str]) -> None:
    items: Iterable[tuple[Any, Any]] = mapping.items()
    if standard:
        items = sorted(items, key=lambda kv: _sort_key(kv[0]))
    out.append("{")
    first = True
    for key, item in items:
        if item is None:
            continue
        if not first:
            out.append(",")
        first = False
        if isinstance(key, int) and not standard:
            out.append(str(key))
        else:
            _write(str(key), standard, out)
        out.append(":")
        _write(item, standard, out)
    out.append("}")


# A JSON string, or an unquoted numeric key right after '{' or ','.
_BARE_KEY = re.compile(r'"(?:[^"\\]|\\.)*"|([{,]\s*)(-?\d+)(\s*:)', re.DOTALL)


def _quote_bare_keys(text: str) -> str:
    def quote(m: re.Match[str]) -> str:
        return m.group(0) if m.group(1) is None else f'{m.group(1)}"{m.group(2)}"{m.group(3)}'

    return _BARE_KEY.sub(quote, text)


#: standard JSON read by msgspec: what the json module reads alike, several times faster (a JSON
#: header, every request's); whatever it refuses (NaN, a lone surrogate, 1e400, a bare key) is
#: read the json module's way, which says what is wrong
_STANDARD = msgspec.json.Decoder()


def loads(data: bytes | str) -> Any:
    """Parse JSON, also accepting fastjson's unquoted numeric keys (they become strings).

    Raises ``ValueError`` on anything else that is not JSON.
    """
    try:
        return _STANDARD.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        pass
    text = data if isinstance(data, str) else str(data, "utf-8")
    try:
        try:
            return json.loads(text)
        except ValueError:
            return json.loads(_quote_bare_keys(text))
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def java_string_hash(text: str) -> int:
    """``String.hashCode()``: 31-based over UTF-16 code units, as a signed 32-bit int.  ASCII text
    (every name a broker registers, in practice) is read as two numbers in base 31 by C (each
    character c is the digits c // 31 and c % 31): a loop over its characters took 170 us for a
    name of 512, and a route naming 20,000 such groups hashed each at every lookup after a change."""
    if text.isascii():
        return _signed(_ascii_hash(text.encode("ascii")))
    h = 0
    for unit in _utf16_units(text):
        h = (31 * h + unit) & 0xFFFFFFFF
    return _signed(h)


#: base 31's digits, and each ASCII byte as its high (c // 31) and low (c % 31) digit in base 31
_BASE31 = b"0123456789abcdefghijklmnopqrstu"
_HIGH_DIGIT = bytes.maketrans(bytes(range(128)), bytes(_BASE31[c // 31] for c in range(128)))
_LOW_DIGIT = bytes.maketrans(bytes(range(128)), bytes(_BASE31[c % 31] for c in range(128)))
#: characters read by one int() (under Python's 4,300 digits of sys.get_int_max_str_digits)
_HASH_PIECE = 4096


def _ascii_hash(data: bytes) -> int:
    """sum(c * 31 ** (n - 1 - i)) mod 2 ** 32 over the bytes: sum((31 * high + low) * 31 ** ...) is
    the high digits read with one more place plus the low digits, piece by piece."""
    h = 0
    for start in range(0, len(data), _HASH_PIECE):
        piece = data[start:start + _HASH_PIECE]
        value = int(piece.translate(_HIGH_DIGIT) + b"0", 31) + int(piece.translate(_LOW_DIGIT), 31)
        h = (h * pow(31, len(piece), 1 << 32) + value) & 0xFFFFFFFF
    return h


def _signed(h: int) -> int:
    return h - (1 << 32) if h & 0x80000000 else h


def _utf16_units(text: str) -> Iterable[int]:
    if text.isascii():
        return text.encode("ascii")
    data = _utf16(text)
    return (int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2))


def _java_hash(key: Any) -> int:
    if isinstance(key, str):
        return java_string_hash(key)
    if isinstance(key, int):  # Long.hashCode
        v = key & 0xFFFFFFFFFFFFFFFF
        return (v ^ (v >> 32)) & 0xFFFFFFFF
    raise TypeError(f"no Java hash for {type(key).__name__}")


def table_size(count: int, initial: int | None = None, concurrent: bool = False) -> int:
    """Bucket count of a java.util.HashMap or ConcurrentHashMap holding ``count`` entries,
    built with ``new X(initial)`` (None: the no-argument constructor, 16 buckets): the
    constructor's rounding, then doubling at load factor 0.75 (ConcurrentHashMap one entry
    earlier)."""
    if initial is None:
        wanted = 16
    else:
        wanted = initial + (initial >> 1) + 1 if concurrent else initial
    size = 1
    while size < wanted:
        size <<= 1
    while (count >= size - (size >> 2)) if concurrent else (count > size * 3 // 4):
        size <<= 1
    return size


def java_hash_order(keys: Iterable[Any], table: int | None = None) -> list[Any]:
    """Iteration order of a java.util.HashMap/HashSet (or ConcurrentHashMap) holding ``keys``
    inserted in the given order: by bucket ``(h ^ h >>> 16) & (table - 1)``, insertion order
    within a bucket.  ``table`` defaults to what a default-sized map grows to; a map that once
    held many more entries than now may iterate differently in Java, and clients never depend
    on it, but this keeps most answers byte-identical to Java's."""
    keys = list(keys)
    mask = (table or table_size(len(keys))) - 1
    return sorted(keys, key=lambda key: java_spread(key) & mask)


def java_spread(key: Any) -> int:
    """A key's hash as Java's HashMap spreads it (``h ^ h >>> 16``): its bucket is this & (table - 1)."""
    h = _java_hash(key) & 0xFFFFFFFF
    return h ^ (h >> 16)


#: how many keys one C call of ``bucket_order`` sorts (and ``topic_list_body`` encodes): a few
#: milliseconds, so that a thread building a big answer lets the reactor's thread in at the
#: interpreter's switch interval
ORDER_PIECE = 16384
#: how many parts ``bucket_order`` splits more keys than that into at a time, by their buckets' top bits
_SPLIT_BITS = 6


def bucket_order(spreads: Sequence[int], mask: int) -> list[int]:
    """The positions 0..n-1 of keys with these ``java_spread`` values in the iteration order of a
    Java hash table of ``mask + 1`` buckets they were inserted into in order: ``java_hash_order``
    for a million keys, without one sort of them all (which would hold the interpreter for
    hundreds of milliseconds): split by bucket ranges, each part sorted alone."""
    keys = [(spread & mask) << 32 | position for position, spread in enumerate(spreads)]
    return [key & 0xFFFFFFFF for key in _by_bucket(keys, mask.bit_length())]


def _by_bucket(keys: list[int], bits: int) -> list[int]:
    """``keys`` (bucket << 32 | position, in position order; their buckets differ in the low
    ``bits`` bits only) in bucket order, positions in order within one: sorted at once when few,
    else split by the next bits into parts, each still in position order (keys of one bucket
    are already in order)."""
    if bits == 0:
        return keys
    if len(keys) <= ORDER_PIECE:
        return sorted(keys)
    low = max(bits - _SPLIT_BITS, 0)
    shift, top = 32 + low, (1 << (bits - low)) - 1
    parts: list[list[int]] = [[] for _ in range(top + 1)]
    for key in keys:
        parts[key >> shift & top].append(key)
    return [key for part in parts for key in _by_bucket(part, low)]


def java_hash_map(mapping: dict[K, V]) -> dict[K, V]:
    """The same dict, re-ordered as a Java HashMap with these insertions would iterate."""
    return {key: mapping[key] for key in java_hash_order(mapping)}
