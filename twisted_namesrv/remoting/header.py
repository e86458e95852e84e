"""The two header encodings of a remoting command: JSON and ROCKETMQ (binary).

Both map to the same fields: code, language, version, opaque, flag, remark, extFields.
Decoding follows Java's leniency (fastjson for JSON, RocketMQSerializable for binary) and
raises ``RemotingDecodeError`` where Java throws and closes the channel.
"""

from __future__ import annotations

import codecs
import json
import re
import struct
from dataclasses import dataclass, field
from typing import Any, TypeVar

from . import fastjson
from .codes import LanguageCode, RequestCode
from .errors import RemotingDecodeError

_LANGUAGE_NAMES = frozenset(LanguageCode.__members__)


@dataclass(slots=True)
class Header:
    """The header fields.  ``language`` is the LanguageCode name, or None when Java would
    decode it to null (unknown name, unknown byte).  ``json_layout`` remembers how a decoded
    JSON header was written (key order, trailing bytes) so re-encoding reproduces it; None
    means Java's layout (alphabetical keys, nulls omitted)."""

    code: int = 0
    language: str | None = "JAVA"
    version: int = 0
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str | None] | None = None
    json_layout: tuple[tuple[str, ...], bytes] | None = field(default=None, compare=False)


# ---- JSON -----------------------------------------------------------------------------------

def _java_string(value: Any) -> str | None:
    """fastjson's coercion of a JSON value into a Java String field (a header's remark, extFields'
    values: fastjson.java_string_field); one nested deeper than Python writes is undecodable."""
    try:
        return fastjson.java_string_field(value)
    except ValueError as exc:
        raise RemotingDecodeError(f"header is not JSON: {exc}") from None


_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1


def _java_int(name: str, value: Any, default: int = 0) -> int:
    """An int field as fastjson fills it: numbers and numeric strings within int range."""
    if value is None:
        return default
    if isinstance(value, bool):
        raise RemotingDecodeError(f"header field {name} is a boolean")
    try:
        number = value if type(value) is int else int(value)
    except (TypeError, ValueError, OverflowError):
        raise RemotingDecodeError(f"header field {name} is not a number: {str(value)[:40]!r}") from None
    if not _INT_MIN <= number <= _INT_MAX:
        raise RemotingDecodeError(f"header field {name} overflows an int: {str(number)[:40]}")
    return number


def _json_language(value: Any) -> str | None:
    if value is None:
        return "JAVA"
    if isinstance(value, str):
        return value if value in _LANGUAGE_NAMES else None
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return LanguageCode(value).name
        except ValueError:
            raise RemotingDecodeError(f"unknown language code {value}") from None
    raise RemotingDecodeError(f"bad language {value!r}")


#: the opaque's digits in a JSON header (headers differ by little else)
OPAQUE_NUMBER = re.compile(rb'"opaque":(-?\d+)')
OPAQUE_KEY = b'"opaque":'


#: headers a server does not keep as templates: one per broker, repeated every 30 s at most, and the
#: biggest (a thousand brokers' took a megabyte and a half to save a parse each per 30 s)
_NOT_KEPT = frozenset({RequestCode.REGISTER_BROKER})
#: how such a header begins as Java writes it (fastjson, its fields in order: the code first): a
#: server parses one at once, without the template key and kin key looked up for it in vain
_NOT_KEPT_HEADS = tuple(b'{"code":%d,' % code for code in sorted(_NOT_KEPT))
#: the opaque's digits, matched right after OPAQUE_KEY
_OPAQUE_DIGITS = re.compile(rb"-?\d+")
_OPAQUE_KEY_LENGTH = len(OPAQUE_KEY)
K = TypeVar("K")  # what a table kept by headers' bytes holds (HeaderTemplates.keep)


class HeaderTemplates:
    """JSON header decoding with a cache: headers of a client differ only in their opaque, so a
    decoded header is kept as a template under its bytes minus the opaque digits and reused (same
    bytes, same fields: a template never goes stale, unlike a kept answer). At most ``size``
    templates are kept before starting over.  No module holds one: each owner sizes its own (a
    server's answer cache, answer_cache.py; the capture analysis, for every client of a cluster).
    A broker's registration header is kept only with ``keep_registrations``: a server sees each
    broker's every 30 s at most (``_NOT_KEPT``), a capture holds them all (a broker repeats its
    header, bodyCrc32 included, until its topics change: a parse saved each, a fifth of the JSON
    headers' time). Headers alike but for one field's value (a client's route lookups, but for the
    topic; a broker's registrations once its topics changed, but for the bodyCrc32) are kin: the
    template of one not met yet is its kin's with that value (_kin_key), made with no parse.
    Without ``keep_registrations`` a header that begins as Java writes a registration's
    (``_NOT_KEPT_HEADS``) is parsed at once: no template or kin of it is kept to find, so its keys
    were made for nothing (5,000 brokers registering: 3% of a first registration's instructions).

    What is kept is any peer's choice of bytes, so it is bounded in bytes too: a header longer than
    KEPT_HEADER_MAX is parsed and never kept, and each table (the templates, their kin, the binary
    ones) starts over when its keys would pass ``size`` * KEPT_BYTES_PER_TEMPLATE bytes. A parsed
    header holds about ten times its bytes (a dict of many short extFields): before, distinct
    headers of 60 KB (any peer's route lookups with a padding field) were kept 4,096 at a time, a
    gigabyte.
    """

    __slots__ = ("size", "max_bytes", "_templates", "_binary", "_kin", "_templates_bytes", "_binary_bytes",
                 "_kin_bytes", "_not_kept", "_parsed_at_once")

    def __init__(self, size: int, keep_registrations: bool = False) -> None:
        self.size = size
        self.max_bytes = size * KEPT_BYTES_PER_TEMPLATE
        self._templates: dict[bytes, Header] = {}
        self._binary: dict[bytes, Header] = {}  # binary_template_of's, kept apart (its keys are not JSON's)
        self._kin: dict[bytes, Header] = {}  # templates by their key without their kin field's value (_kin_key)
        self._templates_bytes = self._binary_bytes = self._kin_bytes = 0  # the bytes of each table's keys
        self._not_kept = frozenset() if keep_registrations else _NOT_KEPT
        self._parsed_at_once: tuple[bytes, ...] = () if keep_registrations else _NOT_KEPT_HEADS

    def __len__(self) -> int:
        return len(self._templates)

    def kept_bytes(self) -> int:
        """The bytes of every table's keys (what a peer's headers made it keep, parsed ten times that)."""
        return self._templates_bytes + self._binary_bytes + self._kin_bytes

    def keep(self, table: dict[bytes, K], kept_bytes: int, key: bytes, value: K) -> int:
        """Keep ``value`` under ``key`` in ``table``, whose keys hold ``kept_bytes``, starting it over
        first when it holds ``size`` values or its keys would pass ``max_bytes``: its keys' bytes then.
        The rule of every table kept by headers' bytes, these and their owner's (a capture's kinds of
        frames, capture/conversation.py)."""
        kept_bytes += len(key)
        if len(table) >= self.size or kept_bytes > self.max_bytes:
            table.clear()
            kept_bytes = len(key)
        table[key] = value
        return kept_bytes

    def decode_json(self, data: bytes) -> Header:
        if data.startswith(self._parsed_at_once) or len(data) > KEPT_HEADER_MAX:  # (not kept: parsed at once)
            return _parse_json_header(data)
        split = json_split(data)
        if split is None:
            return _parse_json_header(data)  # refuses an opaque out of int32, as fastjson overflows
        key, opaque = split
        template = self._templates.get(key)
        if template is None:
            return self._parsed(key, data, opaque)
        return from_template(template, opaque)

    def template_of(self, data: bytes, split: tuple[bytes, int] | None = None) -> tuple[Header, int] | None:
        """The template a JSON header decodes through and its own opaque, without a Header of its
        own (a capture's frames alike share what their rows say: capture/conversation.FrameKind);
        the template is shared (never to be changed; its opaque is the first header's). None where
        decode_json parses the header for itself (no template is kept of it). ``split``: json_split's
        answer for ``data``, when the caller has it (a capture's header looked up in place first)."""
        if split is None:
            split = json_split(data)
        if split is None or len(data) > KEPT_HEADER_MAX:
            return None
        key, opaque = split
        template = self._templates.get(key)
        if template is None:
            template = self._parsed(key, data, opaque)
            if template.code in self._not_kept:
                return None
        return template, opaque

    def binary_template_of(self, data: bytes, split: tuple[bytes, int] | None = None) -> tuple[Header, int] | None:
        """template_of for a ROCKETMQ (binary) header: its opaque is the int32 after the code,
        language and version (bytes 5-8), so headers alike but for the opaque are the same bytes
        around it, and the rest decodes the same (decode_binary_header, refusing what it refuses,
        once per template: a binary header's extFields cost a dozen reads each time). ``split``:
        binary_split's answer for ``data``, when the caller has it."""
        if split is None:
            split = binary_split(data)
        if split is None:  # too short to hold an opaque, let alone the fields after it
            raise RemotingDecodeError(f"RocketMQ protocol decoding failed: a header of {len(data)} bytes")
        key, opaque = split
        template = self._binary.get(key)
        if template is None:
            template = decode_binary_header(data)
            if template.code in self._not_kept or len(data) > KEPT_HEADER_MAX:
                return None
            self._binary_bytes = self.keep(self._binary, self._binary_bytes, key, template)
        return template, opaque

    def _parsed(self, key: bytes, data: bytes, opaque: int) -> Header:
        """A header no template was kept of: made from its kin's template if one is kept (the same
        fields but for one extFields value and the opaque), else parsed; kept as a template unless
        its code is not kept."""
        kin_key, name, value = _kin_key(key)
        kin = None if kin_key is None else self._kin.get(kin_key)
        if kin is not None and kin.ext_fields is not None:
            ext = dict(kin.ext_fields)
            ext[name] = value
            header = Header(kin.code, kin.language, kin.version, opaque, kin.flag, kin.remark, ext, kin.json_layout)
        else:
            header = _parse_json_header(data)
            if header.code in self._not_kept:
                return header
            if kin_key is not None and header.ext_fields is not None and header.ext_fields.get(name) == value:
                self._kin_bytes = self.keep(self._kin, self._kin_bytes, kin_key, header)
        self._templates_bytes = self.keep(self._templates, self._templates_bytes, key, header)
        return header


#: the extFields whose values alone tell headers apart most often: a route lookup's topic, a
#: registration's bodyCrc32 (each broker's changes with its topics)
_KIN_FIELDS = tuple((name, f'"{name}"'.encode()) for name in ("topic", "bodyCrc32"))
#: a value read in place of a kin's: printable ASCII but the quote (and no backslash anywhere)
_KIN_VALUE = re.compile(rb'[\x20\x21\x23-\x7e]*"')


def _kin_key(key: bytes) -> tuple[bytes | None, str, str]:
    """A template key without the value of the first _KIN_FIELDS field it names, that field's name
    and that value; (None, "", "") where no field serves: it must be named exactly once, its value a
    string of printable ASCII, and the header escape nothing (no backslash). Then headers whose keys
    are the same but for that value parse the same but for that string, which is that extFields
    value wherever their kin's parse put it there (HeaderTemplates._parsed)."""
    if b"\\" in key:
        return None, "", ""
    for name, quoted in _KIN_FIELDS:
        at = key.find(quoted)
        if at < 0 or key.find(quoted, at + 1) >= 0 or not key.startswith(b':"', at + len(quoted)):
            continue
        start = at + len(quoted) + 2
        match = _KIN_VALUE.match(key, start)
        if match is None:
            continue
        end = match.end() - 1
        return key[:start] + key[end:], name, key[start:end].decode("ascii")
    return None, "", ""


def from_template(template: Header, opaque: int) -> Header:
    """The header a template stands for with its own ``opaque``: a Header of its own (its extFields
    a copy: a caller may change them)."""
    return Header(template.code, template.language, template.version, opaque, template.flag, template.remark,
                  None if template.ext_fields is None else dict(template.ext_fields), template.json_layout)


def json_split(data: bytes, start: int = 0, end: int | None = None) -> tuple[bytes, int] | None:
    """The template key and opaque of the JSON header at ``data[start:end]``: opaque_split of a
    header holding OPAQUE_KEY exactly once (else None), found with two ``find``s and a match at the
    key, where a ``count`` and a regex search read the bytes twice (every JSON header a server or a
    capture decodes comes here), in place (a capture's headers lie in their stream's bytes: no copy)."""
    end = len(data) if end is None else end
    at = data.find(OPAQUE_KEY, start, end)
    if at < 0 or data.find(OPAQUE_KEY, at + _OPAQUE_KEY_LENGTH, end) >= 0:
        return None
    return _split_at(data, _OPAQUE_DIGITS.match(data, at + _OPAQUE_KEY_LENGTH, end), 0, start, end)


def json_key_parts(key: bytes) -> tuple[bytes, bytes]:
    """A template key json_split made, cut where its header's opaque digits were: (the header's
    bytes before them, ending with OPAQUE_KEY; those after them). The key holds OPAQUE_KEY once:
    its header did, and a digit in neither part can make another across the cut."""
    cut = key.index(OPAQUE_KEY) + _OPAQUE_KEY_LENGTH
    return key[:cut], key[cut:]


def json_split_alike(data: bytes, start: int, end: int, front: bytes, back: bytes) -> int | None:
    """The opaque json_split finds in the JSON header at ``data[start:end]`` when its key is
    ``front + back`` (json_key_parts of a key met), else None (json_split says what it is then): a
    header alike is ``front``, the opaque's digits, ``back``, told by two comparisons in place and
    no search (a capture's frames mostly repeat the kind before them). Exactly json_split's answer:
    OPAQUE_KEY ends ``front`` and lies nowhere else (digits cannot join it, and ``back`` held none);
    ``back`` begins with no digit (the key's match ended there), so the match is the digits between."""
    digits, after = start + len(front), end - len(back)
    if not 0 < after - digits <= 11 or not data.startswith(front, start) or not data.startswith(back, after):
        return None
    text = data[digits:after]
    if not (text.isdigit() or text[:1] == b"-" and text[1:].isdigit()):  # _OPAQUE_DIGITS, ASCII digits
        return None
    opaque = int(text)
    return opaque if _INT_MIN <= opaque <= _INT_MAX else None


def binary_split(data: bytes, start: int = 0, end: int | None = None) -> tuple[bytes, int] | None:
    """The template key and opaque of the ROCKETMQ (binary) header at ``data[start:end]``: its bytes
    around the opaque (the int32 after the code, language and version), and the opaque; None when
    it is too short to hold one (decode_binary_header refuses it)."""
    end = len(data) if end is None else end
    at = start + _OPAQUE_AT
    if end - at < 4:
        return None
    return data[start:at] + data[at + 4:end], _INT.unpack_from(data, at)[0]


def opaque_split(data: bytes, start: int = 0) -> tuple[bytes, int] | None:
    """``data`` without the digits of its first ``"opaque":N`` (from ``start``), and N: the key
    under which requests that differ only by opaque share a header template or a kept answer.
    None unless N is an int32 (at most 11 characters, so a hostile one is never converted)."""
    match = OPAQUE_NUMBER.search(data, start)
    return _split_at(data, match, 1)


def _split_at(data: bytes, match: re.Match[bytes] | None, group: int, start: int = 0, end: int | None = None
              ) -> tuple[bytes, int] | None:
    """opaque_split's answer for the opaque's digits as matched (``group`` of ``match``), of the
    header at ``data[start:end]``."""
    if match is None:
        return None
    digits, after = match.span(group)
    if after - digits > 11:
        return None
    opaque = int(data[digits:after])
    if not _INT_MIN <= opaque <= _INT_MAX:
        return None
    return data[start:digits] + data[after:end], opaque


#: templates a server keeps: enough for its clients (its answer cache's, answer_cache.py)
SERVER_TEMPLATES_SIZE = 4096
#: the longest request header anything is kept of (a template; a kept answer's key, answer_cache.py):
#: a Java client's route lookup is 150-400 bytes, signed and with a retry topic's name under 1 KiB
KEPT_HEADER_MAX = 4096
#: the average header bytes a template may take (HeaderTemplates.max_bytes): a server's 4,096 keep
#: 2 MiB of keys, parsed about 20 MB at worst
KEPT_BYTES_PER_TEMPLATE = 512


def decode_json_header(data: bytes) -> Header:
    """A JSON header as fastjson reads it, parsed in full (no templates: HeaderTemplates keeps them)."""
    return _parse_json_header(data)


#: the types of extFields' values that need no conversion (_parse_json_header)
_STRINGS_ONLY = frozenset({str})


def _parse_json_header(data: bytes) -> Header:
    try:
        obj = fastjson.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise RemotingDecodeError(f"header is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise RemotingDecodeError("header is not a JSON object")
    ext = obj.get("extFields")
    if ext is not None:
        if not isinstance(ext, dict):
            raise RemotingDecodeError("extFields is not an object")
        if not set(map(type, ext.values())) <= _STRINGS_ONLY:  # every value a str: no generator resumed per value
            ext = _ext_as_java_reads(data, ext)
    trailer = data[len(data.rstrip()):] if data[-1:].isspace() else b""
    language = obj.get("language", "JAVA")
    code, version, opaque, flag = obj.get("code"), obj.get("version"), obj.get("opaque"), obj.get("flag")
    # every peer's usual header: four ints in range, taken as they are (_java_int's rule without its calls)
    if not (type(code) is type(version) is type(opaque) is type(flag) is int
            and _INT_MIN <= min(code, version, opaque, flag) and max(code, version, opaque, flag) <= _INT_MAX):
        code, version = _java_int("code", code), _java_int("version", version)
        opaque, flag = _java_int("opaque", opaque), _java_int("flag", flag)
    remark = obj.get("remark")
    return Header(
        code=code,
        language=language if type(language) is str and language in _LANGUAGE_NAMES else _json_language(language),
        version=version,
        opaque=opaque,
        flag=flag,
        remark=remark if remark is None or type(remark) is str else _java_string(remark),
        ext_fields=ext,
        json_layout=(tuple(obj), trailer),
    )


def _ext_as_java_reads(data: bytes, ext: dict[Any, Any]) -> dict[str, str | None]:
    """extFields holding a value that is not a string, as fastjson fills its HashMap<String, String>:
    read again keeping each number's text (``-0``, ``1.50``, ``1e3`` are ``-0``, ``1.50``, ``1E+3`` in
    Java, where the parsed values wrote ``0``, ``1.5``, ``1000.0``: another topic, another key)."""
    try:
        again = fastjson.loads_keeping_numbers(data)
    except ValueError:  # nested deeper than the json module reads: the values as parsed
        again = None
    kept = again.get("extFields") if isinstance(again, dict) else None
    fields = kept if isinstance(kept, dict) else ext
    return {str(k): _java_string(v) for k, v in fields.items()}


def _json_field(header: Header, key: str, serialize_name: str) -> str | None:
    if key == "code":
        return str(header.code)
    if key == "flag":
        return str(header.flag)
    if key == "opaque":
        return str(header.opaque)
    if key == "version":
        return str(header.version)
    if key == "language":
        return None if header.language is None else f'"{header.language}"'
    if key == "remark":
        return None if header.remark is None else fastjson.dumps(header.remark)
    if key == "extFields":
        return None if header.ext_fields is None else fastjson.dumps(header.ext_fields)
    if key == "serializeTypeCurrentRPC":
        return f'"{serialize_name}"'
    return None


def encode_json_header(header: Header, serialize_name: str = "JSON") -> bytes:
    """fastjson's ``toJSONString(cmd)``: alphabetical keys, null fields omitted; or the
    decoded header's own layout.  ``serialize_name`` is the command's serializeTypeCurrentRPC."""
    if header.json_layout is None:
        return _encode_java_layout(header, serialize_name)
    keys, trailer = header.json_layout
    parts = []
    for key in keys:
        value = _json_field(header, key, serialize_name)
        if value is not None:
            parts.append(f'"{key}":{value}')
    return fastjson.java_utf8("{" + ",".join(parts) + "}") + trailer


def _encode_java_layout(header: Header, serialize_name: str) -> bytes:
    """Java's layout (alphabetical keys) written directly: the path of every answer the server sends."""
    fields = header.ext_fields
    # none ("{}": a master's registration answer, most answers) without the encoder's calls
    ext = "" if fields is None else ',"extFields":' + (fastjson.dumps(fields) if fields else "{}")
    language = "" if header.language is None else f',"language":"{header.language}"'
    remark = "" if header.remark is None else ',"remark":' + fastjson.dumps(header.remark)
    return (f'{{"code":{header.code}{ext},"flag":{header.flag}{language},"opaque":{header.opaque}{remark}'
            f',"serializeTypeCurrentRPC":"{serialize_name}","version":{header.version}}}').encode("utf-8", "replace")


# ---- the captured start of a header ---------------------------------------------------------
#
# A capture taken with a snap length keeps only the first bytes of each packet: a header may end
# mid-way.  What its captured start says is read carefully, so that nothing uncertain is taken: a
# field counts only once its value is complete (a number followed by its delimiter: "code":10
# cut there may be 103), extFields' entries only those captured whole (the map may hold more).


@dataclass(slots=True)
class HeaderPrefix:
    """The fields a header's captured start says for certain; None: not captured (or not certain).
    ``ext_fields``: the entries captured whole, None if no entry was; ``ext_complete``: the map
    ended within the bytes (it has no other entries)."""

    code: int | None = None
    language: str | None = None
    version: int | None = None
    opaque: int | None = None
    flag: int | None = None
    remark: str | None = None
    ext_fields: dict[str, str | None] | None = None
    ext_complete: bool = False


def read_header_prefix(serialize_type: int, data: bytes) -> HeaderPrefix:
    """What the first bytes of a header (JSON or ROCKETMQ binary, by the frame's serialize type)
    say for certain, read by the rules of the whole header's decoders."""
    if serialize_type == 1:
        return _binary_prefix(data)
    if serialize_type == 0:
        return _json_prefix(data)
    return HeaderPrefix()


_JSON_DECODER = json.JSONDecoder()
_SCAN_STRING: Any = json.decoder.scanstring  # type: ignore[attr-defined]  # public, though typeshed leaves it out
_WHITESPACE = " \t\n\r"


def _json_prefix(data: bytes) -> HeaderPrefix:
    text = codecs.getincrementaldecoder("utf-8")("replace").decode(data, final=False)  # a cut last character waits
    known = HeaderPrefix()
    fields = _json_members(text, 0, top=True)
    if fields is None:
        return known
    for key, (value, complete) in fields.items():
        try:
            if key == "code":
                known.code = _java_int("code", value)
            elif key == "opaque":
                known.opaque = _java_int("opaque", value)
            elif key == "flag":
                known.flag = _java_int("flag", value)
            elif key == "version":
                known.version = _java_int("version", value)
            elif key == "language":
                known.language = _json_language(value)
            elif key == "remark":
                known.remark = _java_string(value)
            elif key == "extFields" and isinstance(value, dict):
                known.ext_fields = {str(k): _java_string(v) for k, v in value.items()} or None
                known.ext_complete = complete
        except RemotingDecodeError:
            continue  # a value Java refuses: the whole header would not decode either; say nothing of it
    return known


def _json_members(text: str, at: int, top: bool = False) -> dict[str, tuple[Any, bool]] | None:
    """The members of the JSON object starting at ``at`` that ``text`` holds whole, each with
    whether it is complete (an object value may be taken in part: extFields, at the top level);
    None if ``text`` does not start an object there."""
    at = _skip(text, at)
    if at >= len(text) or text[at] != "{":
        return None
    members: dict[str, tuple[Any, bool]] = {}
    at += 1
    while True:
        at = _skip(text, at)
        if at >= len(text) or text[at] == "}":
            return members
        if text[at] != '"':
            return members
        try:
            key, at = _SCAN_STRING(text, at + 1)
        except ValueError:
            return members
        at = _skip(text, at)
        if at >= len(text) or text[at] != ":":
            return members
        at = _skip(text, at + 1)
        try:
            value, after = _JSON_DECODER.raw_decode(text, at)
        except RecursionError:  # nested deeper than the json module reads (a peer's 1,000 '['): no value
            return members
        except ValueError:  # cut inside the value: an object at the top level is read in part
            if top and at < len(text) and text[at] == "{":
                inner = _json_members(text, at)
                if inner:
                    members[key] = ({k: v for k, (v, _) in inner.items()}, False)
            return members
        following = _skip(text, after)
        if following >= len(text) and not isinstance(value, (str, dict, list)):
            return members  # a number or literal the cut may have ended early: not certain
        members[key] = (value, True)
        if following >= len(text) or text[following] != ",":
            return members
        at = following + 1


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in _WHITESPACE:
        at += 1
    return at


def _binary_prefix(data: bytes) -> HeaderPrefix:
    """RocketMQSerializable's fixed fields, then the remark and the extFields entries captured whole."""
    if len(data) < _FIXED.size:
        return HeaderPrefix()
    code, language_code, version, opaque, flag = _FIXED.unpack_from(data, 0)
    try:
        language: str | None = LanguageCode(language_code).name
    except ValueError:
        language = None
    known = HeaderPrefix(code, language, version, opaque, flag)
    try:
        known.remark, pos = _read_string(data, _FIXED.size, _INT, len(data))
        (ext_length,) = _INT.unpack_from(data, pos)
        pos += 4
        end = pos + max(ext_length, 0)
        ext: dict[str, str | None] = {}
        while pos < min(end, len(data)):
            key, pos = _read_string(data, pos, _SHORT, min(end, len(data)))
            value, pos = _read_string(data, pos, _INT, min(end, len(data)))
            if key:
                ext[key] = value
    except (struct.error, RemotingDecodeError):  # cut inside a string or a length: what came before stands
        known.ext_fields = locals().get("ext") or None
        return known
    known.ext_fields, known.ext_complete = ext or None, True
    return known


# ---- ROCKETMQ binary ------------------------------------------------------------------------
#
# tests/remoting/declarations.py declares RocketMQSerializable's layout with construct.  The codec below
# reads and writes the same layout with struct: construct's compiled parser skips length checks
# (a negative or overlong length reads "the rest"), which hostile input must not get past, and
# its interpreted parser is far slower per header.  The codec tests check both agree on every
# captured binary header.

_FIXED = struct.Struct(">hBhii")  # code, language, version, opaque, flag
_OPAQUE_AT = struct.calcsize(">hBh")  # where the opaque starts (HeaderTemplates.binary_template_of)
_SHORT = struct.Struct(">h")
_INT = struct.Struct(">i")


def _read_string(data: bytes, pos: int, length_field: struct.Struct, end: int) -> tuple[str | None, int]:
    """A length-prefixed UTF-8 string; Java throws (and closes) on a negative length or one past
    its limit, and reads an empty string as null."""
    (length,) = length_field.unpack_from(data, pos)
    pos += length_field.size
    if length < 0 or pos + length > end:
        raise RemotingDecodeError(f"RocketMQ protocol decoding failed: string length {length} exceeds the header")
    return (data[pos:pos + length].decode("utf-8", "replace") or None), pos + length


def decode_binary_header(data: bytes) -> Header:
    """RocketMQSerializable.rocketMQProtocolDecode, with its checks."""
    try:
        code, language_code, version, opaque, flag = _FIXED.unpack_from(data, 0)
        remark, pos = _read_string(data, _FIXED.size, _INT, len(data))
        (ext_length,) = _INT.unpack_from(data, pos)
        pos += 4
        ext: dict[str, str | None] | None = None
        if ext_length > 0:
            end = pos + ext_length
            if end > len(data):
                raise RemotingDecodeError(f"RocketMQ protocol decoding failed, extFields length: {ext_length}")
            ext = {}
            while pos < end:
                key, pos = _read_string(data, pos, _SHORT, end)
                value, pos = _read_string(data, pos, _INT, end)
                if key:
                    ext[key] = value
    except struct.error as exc:
        raise RemotingDecodeError(f"RocketMQ protocol decoding failed: {exc}") from None
    try:
        language: str | None = LanguageCode(language_code).name
    except ValueError:
        language = None
    return Header(code=code, language=language, version=version, opaque=opaque, flag=flag, remark=remark,
                  ext_fields=ext or None)


def encode_binary_header(header: Header) -> bytes:
    """RocketMQSerializable.rocketMQProtocolEncode: null or empty strings as length 0."""
    ext = b"".join(
        _SHORT.pack(len(key)) + key + _INT.pack(len(value)) + value
        for key, value in ((fastjson.java_utf8(k), fastjson.java_utf8(v))
                           for k, v in (header.ext_fields or {}).items() if k and v is not None))
    remark = fastjson.java_utf8(header.remark or "")
    try:
        fixed = _FIXED.pack(header.code, LanguageCode[header.language or "JAVA"].value, header.version,
                            header.opaque, header.flag)
    except struct.error as exc:
        raise ValueError(f"cannot encode binary header: {exc}") from None
    return fixed + _INT.pack(len(remark)) + remark + _INT.pack(len(ext)) + ext
