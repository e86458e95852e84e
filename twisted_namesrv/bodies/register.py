"""RegisterBrokerBody: the topic table a broker sends with REGISTER_BROKER.

Three forms: plain JSON; zlib-compressed in the 4.9.8 layout (5 text fields per topic); and
zlib-compressed in the 5.x layout (6 fields, then a queue-mapping section).  We read all three
in either compatibility mode: Java 4.9.8 refuses a 5.x compressed body, we need not.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import Annotated, Any, NamedTuple, Protocol

import msgspec

from ..remoting import fastjson
from ..remoting.codes import V3_0_11
from ..steps import STEP_BYTES, Steps, run_steps
from .route import DataVersion, JavaLong, queue_mapping_info

DEFAULT_MAX_INFLATED = 256 * 1024 * 1024
_INT = struct.Struct(">i")
_DATA_VERSION_KEY = b'"dataVersion":{'
_DATA_VERSION_FIELDS = frozenset({"counter", "timestamp", "stateVersion"})


class RegisterBodyError(ValueError):
    """A registration body that cannot be decoded."""


class RegistrationRefused(Exception):
    """A registration a limit refuses (the NameServer's tables' limits: maxTopicsPerBroker while
    its table is decoded, the others when it would be applied): ``reason`` names the limit as the
    refusal counts it, the text says what passed it.  Nothing is applied."""

    def __init__(self, reason: str, text: str) -> None:
        super().__init__(text)
        self.reason = reason


def too_many_topics(count: int, max_topics: int, what: str = "topics") -> RegistrationRefused:
    return RegistrationRefused("max_topics_per_broker",
                               f"its table lists {count} {what}, over maxTopicsPerBroker ({max_topics})")


#: a TopicConfig's int field: the typed decoding refuses a number past Java's int (the lenient one
#: then refuses it too: fastjson.java_numbers)
JavaInt = Annotated[int, msgspec.Meta(ge=fastjson.JAVA_INT[0], le=fastjson.JAVA_INT[1])]


class TopicConfig(msgspec.Struct, gc=False):
    """One topic of a broker's table. A msgspec Struct so that a JSON body decodes straight into
    it (a dict per topic first was most of a big registration's pause); gc=False: it holds no
    cycles, and 100k of them are not worth the collector's visits."""

    topicName: str
    readQueueNums: JavaInt = 16
    writeQueueNums: JavaInt = 16
    perm: JavaInt = 6
    topicFilterType: str = "SINGLE_TAG"
    topicSysFlag: JavaInt = 0
    order: bool = False
    attributes: dict[str, str] | None = None

    @classmethod
    def from_json(cls, name: str, obj: dict[str, Any]) -> TopicConfig:
        reads, writes, perm, flag = fastjson.java_numbers((obj.get("readQueueNums", 16), obj.get("writeQueueNums", 16),
                                                           obj.get("perm", 6), obj.get("topicSysFlag", 0)))
        return cls(str(obj.get("topicName") or name), reads, writes, perm,
                   str(obj.get("topicFilterType", "SINGLE_TAG")), flag,
                   bool(obj.get("order", False)), obj.get("attributes"))

    def bean(self, v5: bool) -> dict[str, Any]:
        bean: dict[str, Any] = {"attributes": self.attributes or {}} if v5 else {}
        bean.update({"order": self.order, "perm": self.perm, "readQueueNums": self.readQueueNums,
                     "topicFilterType": self.topicFilterType, "topicName": self.topicName,
                     "topicSysFlag": self.topicSysFlag, "writeQueueNums": self.writeQueueNums})
        return bean

    def encode_text(self, v5: bool) -> str:
        """TopicConfig.encode(): the space-separated form of compressed bodies."""
        text = f"{self.topicName} {self.readQueueNums} {self.writeQueueNums} {self.perm} {self.topicFilterType}"
        if v5:
            text += " " + fastjson.dumps(self.attributes or {})
        return text

    @classmethod
    def decode_text(cls, text: str) -> TopicConfig:
        """TopicConfig.decode(): 5 tokens (4.9.8) or more (5.x: attributes JSON after them).
        Java's split drops trailing empty tokens, hence the rstrip."""
        tokens = text.split(" ")
        if len(tokens) == 5:  # the 4.9.8 line: no attributes
            try:
                reads, writes, perm = fastjson.java_numbers(tokens[1:4])
                return cls(tokens[0], reads, writes, perm, tokens[4])
            except ValueError:
                raise RegisterBodyError(f"bad topic config line {text!r}") from None
        tokens = text.rstrip(" ").split(" ")
        if len(tokens) < 5:
            raise RegisterBodyError(f"bad topic config line {text!r}")
        attributes = None
        if len(tokens) > 5:
            try:
                parsed = fastjson.loads(" ".join(tokens[5:]))
                attributes = parsed if isinstance(parsed, dict) else None
            except ValueError:
                attributes = None
        try:
            reads, writes, perm = fastjson.java_numbers(tokens[1:4])
            return cls(tokens[0], reads, writes, perm, tokens[4], attributes=attributes)
        except ValueError:
            raise RegisterBodyError(f"bad topic config line {text!r}") from None


@dataclass(slots=True, frozen=True)
class TablePieces:
    """How a plain JSON topic table was cut into pieces: the key each piece after the first
    begins with (as written), and each piece's digest with the topics it holds. The broker's
    next registration is cut at the same keys, and pieces it sends unchanged are not decoded.
    ``first``: the key the table begins with; a table that begins with another is another
    piece of a table sent in pieces (5.x ``enableSplitRegistration``), not cut at these keys."""

    cuts: tuple[bytes, ...]
    counts: dict[bytes, int]
    first: bytes = b""


class RegisterBrokerBody(msgspec.Struct, gc=False):
    """A decoded registration body.  A msgspec Struct, made in C (a generated ``__init__`` and its
    default factories were ten lines of Python a registration); gc=False: it refers to nothing
    that refers back to it."""

    dataVersion: DataVersion = msgspec.field(default_factory=DataVersion)
    topicConfigTable: dict[str, TopicConfig] = msgspec.field(default_factory=dict)
    #: as fastjson reads a List<String> (``filter_server_list``): null stays null
    filterServerList: list[str | None] = msgspec.field(default_factory=list)
    topicQueueMappingInfoMap: dict[str, dict[str, Any]] = msgspec.field(default_factory=dict)
    #: 5.x JSON form only, carried through unchanged
    mappingDataVersion: DataVersion = msgspec.field(default_factory=DataVersion)
    topicQueueMappingDetailMap: dict[str, Any] = msgspec.field(default_factory=dict)
    #: SHA-1 of everything but the dataVersion: equal digests, equal topic tables (None: unknown)
    tableDigest: bytes | None = None
    #: the table equals the one whose digest the caller passed, so it was not decoded: only
    #: dataVersion is set
    tableUnchanged: bool = False
    #: topics in pieces equal to those of the TablePieces the caller passed: not decoded, not in
    #: topicConfigTable (which holds the others)
    tableSkipped: int = 0
    #: how this table was cut (big plain JSON tables only)
    tablePieces: TablePieces | None = None


def decode_register_body(body: bytes | memoryview | None, compressed: bool, version: int,
                         max_inflated: int = DEFAULT_MAX_INFLATED, known_digests: Collection[bytes] = (),
                         budget: Budget | None = None, max_topics: int | None = None) -> RegisterBrokerBody:
    """decode_register_body_steps straight through."""
    return run_steps(decode_register_body_steps(body, compressed, version, max_inflated, known_digests,
                                                budget=budget, max_topics=max_topics))


def decode_register_body_steps(body: bytes | memoryview | None, compressed: bool, version: int,
                               max_inflated: int = DEFAULT_MAX_INFLATED, known_digests: Collection[bytes] = (),
                               known_pieces: TablePieces | None = None, budget: Budget | None = None,
                               max_topics: int | None = None, split: VersionSplit | None = None
                               ) -> Steps[RegisterBrokerBody]:
    """Java's three paths: no body -> empty; version < V3_0_11 -> a bare
    TopicConfigSerializeWrapper; else RegisterBrokerBody, JSON or compressed.

    Brokers re-send their whole table every 30 s with a new dataVersion; when everything but
    the dataVersion hashes to one of ``known_digests`` (the bodies the broker sent last, one per
    piece of a table sent in pieces) only the dataVersion is decoded. A big table is
    decoded in steps of about STEP_BYTES (steps.py); with ``known_pieces`` (how this broker's
    last table was cut) only its changed pieces are. A body may be a view of its frame.

    ``split``: the JSON body's split_data_version, if the caller has it (else worked out here).

    ``max_topics`` (maxTopicsPerBroker): a table of more topics (or static-topic mappings) is
    refused (RegistrationRefused) as its entries are counted, before they are all built: a
    compressed body by the count it announces, read before it is inflated; a big JSON one piece
    by piece (a body that cannot be cut into pieces is decoded in one go only when it cannot
    hold more entries than that: it has no more ``{``)."""
    if not body:
        return RegisterBrokerBody()
    if isinstance(body, memoryview):
        body = bytes(body)
        yield
    limit = NO_TOPIC_LIMIT if max_topics is None else max_topics
    try:
        if version < V3_0_11:
            yield from _countable_in_one_go(body, limit)
            decoded = _from_wrapper(_json_object(body), [])
        elif compressed:
            announced = _announced_topics(body)
            if announced is not None and announced > limit:
                raise too_many_topics(announced, limit)
            inflated = yield from _inflate(body, max_inflated, budget)
            try:
                decoded = yield from _decode_compressed(inflated, known_digests, limit)
            finally:
                if budget is not None:
                    budget.release(len(inflated))
        else:
            decoded = yield from _decode_json(body, known_digests, known_pieces, limit, split)
    except RegisterBodyError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError, struct.error, zlib.error) as exc:
        raise RegisterBodyError(f"Failed to decode RegisterBrokerBody: {exc}") from None
    if len(decoded.topicConfigTable) + decoded.tableSkipped > limit:
        raise too_many_topics(len(decoded.topicConfigTable) + decoded.tableSkipped, limit)
    if len(decoded.topicQueueMappingInfoMap) > limit:
        raise too_many_topics(len(decoded.topicQueueMappingInfoMap), limit, "static-topic mappings")
    return decoded


#: no limit on the topics of a table (the capture decoder reads what brokers sent)
NO_TOPIC_LIMIT = 1 << 62
#: a JSON table entry takes at least this many bytes (``"":{},``): a body this many times the limit
#: cannot hold more entries than it
_LEAST_ENTRY_BYTES = 6


def _countable_in_one_go(body: bytes, limit: int) -> Steps[None]:
    """Refuse a JSON body that may hold more than ``limit`` entries when it is to be decoded in
    one go: each entry is an object, so it holds no more entries than it has ``{``."""
    if len(body) // _LEAST_ENTRY_BYTES <= limit:
        return
    braces = 0
    for start in range(0, len(body), 8 * STEP_BYTES):
        braces += body.count(b"{", start, start + 8 * STEP_BYTES)
        yield
    if braces > limit:
        raise RegistrationRefused("max_topics_per_broker", f"its table of {len(body)} bytes may list up to {braces} "
                                  f"topics, over maxTopicsPerBroker ({limit}), and cannot be counted piece by piece")


def _announced_topics(body: bytes) -> int | None:
    """The topic count a compressed body announces after its dataVersion, read from the first
    inflated bytes (a refusal then costs them, not the whole body); None when they do not hold it."""
    try:
        head = zlib.decompressobj().decompress(body[:_PEEK_BYTES], _PEEK_BYTES)
    except zlib.error:
        return None  # the whole inflation says what is wrong with it
    if len(head) < 4:
        return None
    (length,) = _INT.unpack_from(head)
    if not 0 <= length <= len(head) - 8:
        return None
    count: int = _INT.unpack_from(head, 4 + length)[0]
    return count


_PEEK_BYTES = 64 * 1024


class _TypedWrapper(msgspec.Struct):
    """TopicConfigSerializeWrapper with its topic table decoded straight into TopicConfig."""

    topicConfigTable: dict[str, TopicConfig] | None = None
    #: read as ``DataVersion.from_json`` reads a flat object of ints in a long's range (absent or null:
    #: the defaults); anything else makes the typed decoding fail, and the lenient one reads it so
    dataVersion: DataVersion | None = None
    topicQueueMappingInfoMap: Any = None
    mappingDataVersion: DataVersion | None = None
    topicQueueMappingDetailMap: Any = None


class _TypedBody(msgspec.Struct):
    topicConfigSerializeWrapper: _TypedWrapper | None = None
    filterServerList: Any = None


class _LooseVersionsWrapper(_TypedWrapper):
    """_TypedWrapper with versions of any JSON (``DataVersion.from_json`` reads them): a body whose
    versions the typed decoding refuses is decoded so, as every body was before they were typed."""

    dataVersion: Any = None
    mappingDataVersion: Any = None


class _LooseVersionsBody(msgspec.Struct):
    topicConfigSerializeWrapper: _LooseVersionsWrapper | None = None
    filterServerList: Any = None


_TYPED_BODY = msgspec.json.Decoder(_TypedBody)
_LOOSE_VERSIONS_BODY = msgspec.json.Decoder(_LooseVersionsBody)
_TABLE_PIECE = msgspec.json.Decoder(dict[str, TopicConfig])
_TABLE_KEY = b'"topicConfigTable":{'
#: topics of a compressed body decoded per step (a Python loop: about a millisecond)
_LINES_PER_STEP = 1000
_WRAPPER_KEY = b'"topicConfigSerializeWrapper":{'
_TOPIC_NAME = attrgetter("topicName")


def _decode_json(body: bytes, known_digests: Collection[bytes], known_pieces: TablePieces | None,
                 limit: int = NO_TOPIC_LIMIT, split: VersionSplit | None = None) -> Steps[RegisterBrokerBody]:
    if split is None:
        split = yield from split_data_version(body)
    if split is not None and split.digest in known_digests:
        return RegisterBrokerBody(split.dataVersion, tableDigest=split.digest, tableUnchanged=True)
    decoded = None
    if len(body) > STEP_BYTES:
        decoded = yield from _decode_typed_in_pieces(body, known_pieces, limit, split.pieces if split else None)
        if decoded is None:
            yield from _countable_in_one_go(body, limit)
    decoded = decoded or _decode_typed(body) or _decode_lenient(body)
    if split is not None and split.dataVersion == decoded.dataVersion:
        decoded.tableDigest = split.digest
    return decoded


def _decode_lenient(body: bytes) -> RegisterBrokerBody:
    obj = _json_object(body)
    wrapper = obj.get("topicConfigSerializeWrapper") or {}
    return _from_wrapper(wrapper, filter_server_list(obj.get("filterServerList"), body))


def _decode_typed(body: bytes) -> RegisterBrokerBody | None:
    """The common case, several times faster: a well-typed body decoded without a dict per topic
    (a big table's decoding is most of a registration's work). None for anything else — a
    string where a number belongs, fastjson's bare keys, odd unicode, no table — which the
    general path decodes with Java's leniency."""
    typed: _TypedBody | _LooseVersionsBody
    try:
        typed = _TYPED_BODY.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        try:  # (its versions as from_json reads them, or a body no typed decoding reads)
            typed = _LOOSE_VERSIONS_BODY.decode(body)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            return None
    wrapper = typed.topicConfigSerializeWrapper
    servers = typed.filterServerList
    if wrapper is None or wrapper.topicConfigTable is None or not isinstance(servers, list | None) or (
            servers and not all(isinstance(server, str) for server in servers)):
        return None  # (a filter server that is not a string: its number's text is the general path's)
    # as _from_wrapper reads a wrapper's fields, without a dict of them (every registration comes here)
    mappings = wrapper.topicQueueMappingInfoMap
    # the versions typed: made in C, from_json's answer; else read by it (a 4.9.8 body's absent mapping
    # version: its defaults, without its call)
    version: Any = wrapper.dataVersion
    mapping: Any = wrapper.mappingDataVersion
    if not isinstance(version, DataVersion):
        version = DataVersion.from_json(version)
    if not isinstance(mapping, DataVersion):
        mapping = DataVersion() if mapping is None else DataVersion.from_json(mapping)
    return RegisterBrokerBody(
        version, _named(wrapper.topicConfigTable), servers or [],
        {topic: queue_mapping_info(info) for topic, info in mappings.items()} if mappings else {}, mapping,
        wrapper.topicQueueMappingDetailMap or {})


def _named(table: dict[str, TopicConfig]) -> dict[str, TopicConfig]:
    """TopicConfig.from_json's rule for typed tables: the key stands in for a missing name."""
    if not all(map(_TOPIC_NAME, table.values())):  # in C: half the time of the loop below
        for name in [name for name, config in table.items() if not config.topicName]:
            table[name].topicName = name
    return table


def _decode_typed_in_pieces(body: bytes, known: TablePieces | None, limit: int = NO_TOPIC_LIMIT,
                            hashed: Mapping[int, tuple[int, bytes]] | None = None) -> Steps[RegisterBrokerBody | None]:
    """_decode_typed for a big body, its topic table a piece of about STEP_BYTES per step.

    The table is cut between entries (``},"name":{``): where ``known`` cut the broker's last
    table, else by size. A piece whose digest ``known`` holds is that broker's unchanged piece
    and is only counted; every other piece must decode on its own as a JSON object, which it
    cannot when a cut falls inside an entry, so a wrong cut is never taken for a right one. The
    rest of the body, with the table emptied, is decoded last and must hold this table as its
    only one. None when any of that fails: the caller decodes the body in one go. More than
    ``limit`` topics are refused as soon as the pieces so far hold them. ``hashed``: the pieces
    split_data_version hashed (VersionSplit.pieces): one cut where it cut is not hashed again."""
    start = opening = body.find(_TABLE_KEY) + len(_TABLE_KEY)
    if opening < len(_TABLE_KEY) or not 0 <= body.find(_WRAPPER_KEY) < opening:
        return None
    table: dict[str, TopicConfig] = {}
    first = body[start + 1:body.find(b'"', start + 1)]
    # another table's keys are looked for in vain, each through the rest of the body (the second
    # piece of a table sent in pieces, cut at the first's keys: three passes over 8 MB in one step)
    anchors = list(known.cuts) if known is not None and known.first == first else []
    cuts, counts, skipped = [], {}, 0
    while (cut := _next_cut(body, start, anchors)) >= 0:
        found = hashed.get(start) if hashed else None  # cut where split_data_version cut: hashed there
        digest = found[1] if found and found[0] == cut else hashlib.sha1(memoryview(body)[start:cut]).digest()
        if known is not None and digest in known.counts:
            count = known.counts[digest]
            skipped += count
        else:
            piece = _decode_piece(body, start, cut)
            if piece is None:
                break  # past the table's end (what follows it looked like an entry), or no entries
            table.update(_named(piece))  # named piece by piece: a pass over the whole table is a long step
            count = len(piece)
        if len(table) + skipped > limit:
            raise too_many_topics(len(table) + skipped, limit)
        counts[digest] = count
        cuts.append(body[cut + 2:body.find(b'"', cut + 2)])
        start = cut + 1  # past the comma
        yield
    end = _table_end(body, start)  # the table's closing brace, after its last piece
    piece = _decode_piece(body, start, end) if end >= 0 else None
    if piece is None:
        return None
    table.update(_named(piece))
    counts[hashlib.sha1(memoryview(body)[start:end]).digest()] = len(piece)
    skeleton = body[:opening] + body[end:]
    rest = _decode_typed(skeleton) if skeleton.count(_TABLE_KEY) == 1 else None
    if rest is None or rest.topicConfigTable:
        return None
    rest.topicConfigTable = table
    rest.tableSkipped = skipped
    rest.tablePieces = TablePieces(tuple(cuts), counts, first)
    return rest


def _next_cut(body: bytes, start: int, anchors: list[bytes]) -> int:
    """Where the piece from ``start`` ends (the index of the comma after an entry), -1 when no
    entry ends a piece's length after it: before the next of ``anchors`` (the keys the last
    table was cut at, consumed) within two pieces' length, else after a piece's length."""
    missed = 0
    while anchors and missed < 3:
        pattern = b'},"' + anchors[0] + b'":{'
        at = body.find(pattern, start, start + 2 * STEP_BYTES + len(pattern))
        if at >= 0:
            del anchors[0]
            return at + 1
        if body.find(pattern, start) >= 0:
            break  # further on: the table grew here
        del anchors[0]  # a topic that left
        missed += 1
    if missed == 3:
        anchors.clear()  # many left: cut by size from here on rather than look for each
    return _entry_end(body, start + STEP_BYTES)


def _entry_end(body: bytes, at: int) -> int:
    """Where the first table entry ending at or after ``at`` ends (the index of the comma after
    its closing brace), if a ``"name":{`` follows it; -1 when none does."""
    while (brace := body.find(b'},"', at)) >= 0:
        quote = body.find(b'"', brace + 3)
        if quote >= 0 and body[quote + 1:quote + 3] == b":{":
            return brace + 1
        at = brace + 1
    return -1


def _table_end(body: bytes, start: int) -> int:
    """The index of the closing brace of a table whose last entries begin at ``start``: the
    first ``}}`` after which the entries decode (a few tries: an entry may end with ``}}``),
    looked for within two pieces' length, so that a body built to fail costs a few pieces."""
    at, within = start, start + 2 * STEP_BYTES
    for _ in range(4):
        close = body.find(b"}}", at, within)
        if close < 0:
            return -1
        if _decode_piece(body, start, close + 1) is not None:
            return close + 1
        at = close + 1
    return -1


def _decode_piece(body: bytes, start: int, end: int) -> dict[str, TopicConfig] | None:
    """The table entries in ``body[start:end]`` (no braces around them), or None when they
    are not a run of whole, well-typed entries."""
    try:
        with memoryview(body) as view:
            return _TABLE_PIECE.decode(b"".join((b"{", view[start:end], b"}")))
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None


class VersionSplit(NamedTuple):
    """A JSON body's first ``"dataVersion":{...}`` (Java writes it first) apart from the rest:
    the DataVersion, its text as sent, and the SHA-1 of the rest but 5.x's mappingDataVersion
    after it (``mapping_version_span``): the table's memo digest, and, with the text, what tells
    the whole body from another (state/registration.registration_digest), hashed once for both."""

    dataVersion: DataVersion
    text: bytes
    digest: bytes
    #: the SHA-1 of each piece of the table the digest was made of, by where the piece begins:
    #: (where it ends, its SHA-1); the decoder cutting a piece there too takes it from here
    pieces: Mapping[int, tuple[int, bytes]] = {}


def split_data_version(body: bytes | memoryview) -> Steps[VersionSplit | None]:
    """The body's VersionSplit, hashed in steps (mappingDataVersion is stamped anew in every 5.x
    registration, so a 5.x broker's table sent again was never known by its digest); None unless
    that object really is a flat DataVersion.  A view of a frame is not copied: its versions are
    looked for where Java writes them, in its first kilobyte (None when they lie further on).

    A big body's table is hashed a piece at a time (``HASHED_PIECE``, cut as the decoder cuts),
    the digest made of the pieces' digests (VersionSplit.pieces, which the decoder then does not
    hash again); a small body is hashed whole.  Either digest is tagged with its form and the
    lengths it joins, so no two bodies give one digest unless they are the same bytes, and the
    same bytes give the same digest as a view or as bytes."""
    head = body if isinstance(body, bytes) else bytes(body[:_VIEW_HEAD])
    found = _found_versions(head, head is not body)
    if found is None:
        return None
    opening, end, version, rest = found
    view = memoryview(body)
    table = head.find(_TABLE_KEY, rest, _VIEW_HEAD) + len(_TABLE_KEY) if len(body) > HASHED_PIECE else -1
    if table < len(_TABLE_KEY):  # a small body, or a table not where Java writes it: hashed whole
        digest = _hashed_before(view, opening)
        yield from _hash_steps(digest, view[rest:])
        return VersionSplit(version, head[opening:end], digest.digest())
    digest = hashlib.sha1(b"pieces %d %d " % (opening, table - rest))
    digest.update(view[:opening])
    digest.update(view[rest:table])
    pieces = yield from _hash_pieces(digest, view, table)
    return VersionSplit(version, head[opening:end], digest.digest(), pieces)


def _found_versions(head: bytes, in_view: bool = False) -> tuple[int, int, DataVersion, int] | None:
    """The first ``"dataVersion":{...}`` of ``head`` when it is a flat DataVersion: where its object
    starts and ends, the DataVersion, and where the rest of the body begins (after 5.x's
    mappingDataVersion when that comes right after it); ``in_view``: ``head`` is a view's first bytes,
    where it must lie where Java writes it (None otherwise: only a copy of the whole body would tell)."""
    start = head.find(_DATA_VERSION_KEY)
    if start < 0:
        return None
    opening = start + len(_DATA_VERSION_KEY) - 1
    end = head.find(b"}", opening) + 1
    if in_view and not (start < VERSIONS_WITHIN and 0 < end <= 2 * VERSIONS_WITHIN):
        return None
    version = _flat_version(head[opening:end]) if end else None
    if version is None:
        return None
    return opening, end, version, end if (mapping := _mapping_version_end(head, end)) is None else mapping


#: the tag a small body's digest begins with (its dataVersion's start: ``_hashed_before``)
WHOLE_TAG = b"whole %d "


def _hashed_before(view: memoryview, opening: int) -> Any:
    """A small body's digest (the ``whole`` form) as far as its dataVersion: the tag, then its bytes
    before it; the rest of the body after its versions follows."""
    digest = hashlib.sha1(WHOLE_TAG % opening)
    digest.update(view[:opening])
    return digest


def whole_hash(body: memoryview, opening: int, rest: int) -> Any:
    """The SHA-1 a small body's digest is taken from (``split_data_version``'s ``whole`` form): the
    tag, the body before its dataVersion (at ``opening``) and after its versions (from ``rest``);
    the broker's renewal key hashes these first too (answer_cache.renewal_key_steps)."""
    digest = _hashed_before(body, opening)
    digest.update(body[rest:])
    return digest


class WholeSplit(NamedTuple):
    """A small body's VersionSplit with what its digest was made of (``split_small``): the SHA-1
    it was taken from (the tag, the body but its versions), where its dataVersion starts and ends,
    and where the rest begins (after a 5.x mappingDataVersion)."""

    split: VersionSplit
    hashed: Any
    opening: int
    end: int
    rest: int


def split_small(body: bytes) -> WholeSplit | None:
    """``split_data_version`` of a body of at most HASHED_PIECE bytes, at once (no steps: it takes
    none), with the SHA-1 its digest was taken from, which the broker's renewal key goes on from
    (answer_cache.renewal_key_after_split: the body is hashed once for both; processor.register_fused);
    None where split_data_version answers None."""
    found = _found_versions(body) if len(body) <= HASHED_PIECE else None
    if found is None:
        return None
    opening, end, version, rest = found
    digest = whole_hash(memoryview(body), opening, rest)
    return WholeSplit(VersionSplit(version, body[opening:end], digest.digest()), digest, opening, end, rest)


#: the pieces split_data_version hashes a big table in, each on its own, cut as the decoder cuts
#: them (_entry_end, from the table's start): a table decoded in pieces is hashed once, not twice
#: (whole for its memo digest, then each piece for TablePieces), since the memo digest stands on
#: its pieces' digests.  Bound here once: the memo digest of a body is the same whatever the
#: decoder's piece size (where they differ, the decoder hashes its own pieces)
HASHED_PIECE = STEP_BYTES
#: where a hashed piece's end is looked for: this many bytes after its length (a copy of them, so
#: that a view of a frame is cut without a copy of the whole body); an entry is a few hundred
#: bytes, so its end lies within them, else the rest is hashed whole (the same for any copy of
#: the same bytes, where the decoder may cut otherwise: only its pieces are then hashed again)
_CUT_WINDOW = 16 * 1024


def _hash_pieces(digest: Any, view: memoryview, start: int) -> Steps[dict[int, tuple[int, bytes]]]:
    """The table's entries from ``start`` into ``digest``: each piece's SHA-1 (``p`` and 20 bytes,
    so that no body's bytes read as another's digests), then the rest of the body whole (``r``),
    a few megabytes per step; the pieces' digests by where they begin (VersionSplit.pieces)."""
    pieces: dict[int, tuple[int, bytes]] = {}
    hashed = 0
    while (cut := _entry_end(bytes(view[start + HASHED_PIECE:start + HASHED_PIECE + _CUT_WINDOW]), 0)) >= 0:
        cut += start + HASHED_PIECE
        piece = hashlib.sha1(view[start:cut]).digest()
        digest.update(b"p" + piece)
        pieces[start] = (cut, piece)
        hashed += cut - start
        start = cut + 1  # past the comma
        if hashed >= 8 * STEP_BYTES:
            hashed = 0
            yield
    digest.update(b"r")
    yield from _hash_steps(digest, view[start:])
    return pieces


#: how much of a view split_data_version reads: a dataVersion in its first kilobyte ending in
#: the second, and room for the mappingDataVersion after it (its end looked for within a kilobyte)
_VIEW_HEAD = 4 * 1024


#: the types of a flat DataVersion's values (_flat_data_version)
_INTS_ONLY = frozenset({int})


class _FlatVersion(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """A flat DataVersion's text read typed: only its fields, ints (no bool), in a long's range."""

    timestamp: JavaLong = 0
    counter: JavaLong = 0
    stateVersion: JavaLong = 0


_FLAT_VERSION = msgspec.json.Decoder(_FlatVersion)


def _flat_version(text: bytes) -> DataVersion | None:
    """``text``'s DataVersion (as ``DataVersion.from_json`` reads it) when it is a flat object of ints
    (``_flat_data_version``), else None: read typed in one call, in C; what that refuses (an int past
    a long's range, a form only the json module reads) the way it was read before."""
    try:
        flat = _FLAT_VERSION.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError):
        fields = _flat_data_version(text)
        return None if fields is None else DataVersion.from_json(fields)
    return DataVersion(flat.timestamp, flat.counter, flat.stateVersion)


def _is_flat(text: bytes) -> bool:
    """Whether ``text`` is a flat object of ints (``_flat_data_version``), read typed first."""
    try:
        _FLAT_VERSION.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return _flat_data_version(text) is not None
    return True


def _flat_data_version(text: bytes) -> dict[str, int] | None:
    """``text`` as a DataVersion's fields when it is a flat object of ints (then any decoding of a
    body reads it alike), else None."""
    try:
        fields = fastjson.loads(text)
    except ValueError:
        return None
    if not isinstance(fields, dict) or not fields.keys() <= _DATA_VERSION_FIELDS or not set(
            map(type, fields.values())) <= _INTS_ONLY:  # every value an int (not a bool), looked at in C
        return None
    return fields


_MAPPING_VERSION_KEY = b',"mappingDataVersion":{'
#: where the wrapper's versions lie: Java writes them first (a body's first few hundred bytes)
VERSIONS_WITHIN = 1024


def _mapping_version_end(body: bytes, at: int) -> int | None:
    """The end of a flat ``,"mappingDataVersion":{...}`` written at ``at`` (where Java writes it:
    right after the wrapper's dataVersion), else None."""
    if not body.startswith(_MAPPING_VERSION_KEY, at):
        return None
    opening = at + len(_MAPPING_VERSION_KEY) - 1
    close = body.find(b"}", opening, opening + VERSIONS_WITHIN) + 1
    return close if close and _is_flat(body[opening:close]) else None


def mapping_version_span(body: bytes | memoryview) -> tuple[int, int] | None:
    """Where the wrapper's mappingDataVersion lies in a JSON body (start, end), or None: 5.x brokers
    write a new one, its timestamp the time of writing, into every registration, and nothing reads
    it (Java's RouteInfoManager neither), so a registration sent again is the same one without it.
    Only where Java writes it, right after the first ``"dataVersion":{...}``, and only a flat
    DataVersion (int fields), which any decoding of the body reads alike whatever its values."""
    spans = version_spans(body)
    return None if spans is None or spans[2] == spans[1] else (spans[1], spans[2])


def version_spans(body: bytes | memoryview) -> tuple[int, int, int] | None:
    """Where the wrapper's versions lie in a JSON body's first kilobyte (where Java writes them):
    the first ``"dataVersion":{...}``'s object (start, end) and the end of the flat mappingDataVersion
    right after it (``mapping_version_span``; the dataVersion's end when there is none); None without
    a dataVersion there.  The dataVersion is not read: a registration's renewal key hashes its text
    (answer_cache.renewal_key_steps)."""
    head = bytes(body[:VERSIONS_WITHIN])
    start = head.find(_DATA_VERSION_KEY)
    end = head.find(b"}", start) + 1 if start >= 0 else 0
    if not end:
        return None
    close = _mapping_version_end(head, end)
    return start + len(_DATA_VERSION_KEY) - 1, end, end if close is None else close


def _hash_steps(digest: Any, data: memoryview) -> Steps[None]:
    """digest.update(data), a few megabytes per step; data of one step's bytes or fewer takes none
    (no yield)."""
    size = 8 * STEP_BYTES
    if len(data) <= size:
        digest.update(data)
        return
    for start in range(0, len(data), size):
        digest.update(data[start:start + size])
        yield


def _json_object(data: bytes) -> dict[str, Any]:
    obj = fastjson.loads(data)
    if not isinstance(obj, dict):
        raise RegisterBodyError("RegisterBrokerBody is not a JSON object")
    return obj


def filter_server_list(servers: Any, text: bytes, whole: bool = False) -> list[str | None]:
    """filterServerList as fastjson reads RegisterBrokerBody's List<String> (checked against Java
    4.9.8's route answer): a string itself, any other value as a String field takes it
    (``fastjson.java_string_field``: a number's literal text ``1.50``, ``true``, an object's JSON),
    null kept as null; Python's ``str()`` made ``None`` and ``1.5`` of them.  ``text``: the JSON
    the list was read from (the body, or the list itself when ``whole``), read again keeping
    numbers' text only when an entry is not a string."""
    if not servers:
        return []
    if all(isinstance(server, str) for server in servers):
        return list(servers)
    try:
        exact = fastjson.loads_keeping_numbers(text)
    except ValueError:
        exact = None
    if not whole and exact is not None:
        exact = exact.get("filterServerList") if isinstance(exact, dict) else None
    if not isinstance(exact, list):  # (fastjson's own syntax the exact reading does not take)
        exact = servers
    return [fastjson.java_string_field(server) for server in exact]


def _from_wrapper(wrapper: dict[str, Any], filter_servers: list[str | None]) -> RegisterBrokerBody:
    table = wrapper.get("topicConfigTable") or {}
    mappings = wrapper.get("topicQueueMappingInfoMap") or {}
    return RegisterBrokerBody(
        DataVersion.from_json(wrapper.get("dataVersion")),
        {name: TopicConfig.from_json(name, cfg) for name, cfg in table.items()},
        filter_servers,
        {topic: queue_mapping_info(info) for topic, info in mappings.items()},
        DataVersion.from_json(wrapper.get("mappingDataVersion")),
        wrapper.get("topicQueueMappingDetailMap") or {},
    )


#: the most one call to zlib may inflate: its output is built in blocks and then copied into one
#: bytes object, so an unbounded call holds twice what it inflates (a bomb: 2 x inflateMaxLength)
INFLATE_PIECE = 1 << 20


class Budget(Protocol):
    """budget.MemoryBudget, as inflating uses it: bytes held for all peers together."""

    def take(self, size: int) -> bool: ...

    def release(self, size: int) -> None: ...


def _inflate(data: bytes, max_inflated: int, budget: Budget | None = None) -> Steps[bytes]:
    """The inflated body, a slice of the compressed one per step, at most INFLATE_PIECE per call;
    at most ``max_inflated`` bytes (a small body may inflate to gigabytes), each piece held
    against ``budget``.  The result stays held (the caller releases its length once decoded)."""
    inflater, parts, size, step = zlib.decompressobj(), [], 0, STEP_BYTES
    try:
        for start in range(0, len(data), step):
            chunk = data[start:start + step]
            while chunk:
                part = inflater.decompress(chunk, INFLATE_PIECE)
                chunk = inflater.unconsumed_tail
                if size + len(part) > max_inflated:
                    raise RegisterBodyError(f"compressed RegisterBrokerBody inflates beyond {max_inflated} bytes")
                if budget is not None and not budget.take(len(part)):
                    raise RegisterBodyError(f"compressed RegisterBrokerBody: inflating past {size} bytes would "
                                            "exceed receiveMemoryBudget (what all peers may make the server hold)")
                size += len(part)
                parts.append(part)
            yield
        if budget is not None and not budget.take(size):  # the joined copy, while the pieces are still there
            raise RegisterBodyError(f"compressed RegisterBrokerBody: its {size} inflated bytes would exceed "
                                    "receiveMemoryBudget")
    except BaseException:
        if budget is not None:
            budget.release(sum(map(len, parts)))
        raise
    joined = b"".join(parts)
    del parts
    if budget is not None:
        budget.release(size)
    return joined


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def int32(self) -> int:
        value: int
        (value,) = _INT.unpack_from(self.data, self.pos)
        self.pos += 4
        return value

    def chunk(self) -> bytes:
        return self.chunks(1)[0]

    def chunks(self, count: int) -> list[bytes]:
        """``count`` length-prefixed chunks; one tight loop, as a table holds thousands."""
        data, pos, end, unpack = self.data, self.pos, len(self.data), _INT.unpack_from
        out = []
        for _ in range(count):
            (length,) = unpack(data, pos)
            pos += 4
            if length < 0 or pos + length > end:
                raise RegisterBodyError(f"bad length {length} in compressed RegisterBrokerBody")
            out.append(data[pos:pos + length])
            pos += length
        self.pos = pos
        return out


def _decode_compressed(data: bytes, known_digests: Collection[bytes],
                       limit: int = NO_TOPIC_LIMIT) -> Steps[RegisterBrokerBody]:
    reader = _Reader(data)
    data_version = DataVersion.from_json(fastjson.loads(reader.chunk()))
    digest = hashlib.sha1()
    yield from _hash_steps(digest, memoryview(data)[reader.pos:])
    if digest.digest() in known_digests:
        return RegisterBrokerBody(data_version, tableDigest=digest.digest(), tableUnchanged=True)
    topics: dict[str, TopicConfig] = {}
    decode_text = TopicConfig.decode_text
    count = reader.int32()
    if count > limit:
        raise too_many_topics(count, limit)
    lines = reader.chunks(count)  # all at once: cut in slices, they fragment the heap (+20 MB at 300k)
    for start in range(0, len(lines), _LINES_PER_STEP):
        for line in lines[start:start + _LINES_PER_STEP]:
            config = decode_text(line.decode("utf-8"))
            topics[config.topicName] = config
        yield
    del lines
    chunk = reader.chunk()
    filter_servers = filter_server_list(fastjson.loads(chunk), chunk, whole=True)
    mappings: dict[str, dict[str, Any]] = {}
    if reader.remaining() >= 4:  # 5.x layout: queue-mapping section
        count = reader.int32()
        if count > limit:
            raise too_many_topics(count, limit, "static-topic mappings")
        for _ in range(count):
            info = queue_mapping_info(fastjson.loads(reader.chunk()))
            mappings[str(info.get("topic"))] = info
    return RegisterBrokerBody(data_version, topics, filter_servers, mappings, tableDigest=digest.digest())


def encode_register_body(body: RegisterBrokerBody, compressed: bool, v5: bool) -> bytes:
    """RegisterBrokerBody.encode(compress) as the 4.9.8 (v5=False) or 5.3.3 broker writes it."""
    if not compressed:
        wrapper: dict[str, Any] = {"dataVersion": body.dataVersion.bean(v5)}
        if v5:
            wrapper["mappingDataVersion"] = body.mappingDataVersion.bean(v5)
        wrapper["topicConfigTable"] = {n: c.bean(v5) for n, c in body.topicConfigTable.items()}
        if v5:
            wrapper["topicQueueMappingDetailMap"] = body.topicQueueMappingDetailMap
            wrapper["topicQueueMappingInfoMap"] = body.topicQueueMappingInfoMap
        return fastjson.dumps_bytes({"filterServerList": body.filterServerList, "topicConfigSerializeWrapper": wrapper})
    parts = [_chunk(fastjson.dumps_bytes(body.dataVersion.bean(v5))), _INT.pack(len(body.topicConfigTable))]
    parts += [_chunk(c.encode_text(v5).encode("utf-8")) for c in body.topicConfigTable.values()]
    parts.append(_chunk(fastjson.dumps_bytes(body.filterServerList)))
    if v5:
        parts.append(_INT.pack(len(body.topicQueueMappingInfoMap)))
        parts += [_chunk(fastjson.dumps_bytes(info)) for info in body.topicQueueMappingInfoMap.values()]
    return zlib.compress(b"".join(parts), 9)


def _chunk(data: bytes) -> bytes:
    return _INT.pack(len(data)) + data
