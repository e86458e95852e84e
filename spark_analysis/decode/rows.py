"""One TCP connection's captured segments -> the rows of ``frames/``, ``calls/`` and ``registrations/``.

Pure Python (no Spark), so a Spark task runs it per connection and tests run it directly. Rows are
plain tuples in the column order of ``schema.py``; timestamps are float seconds (and the broker's
dataVersion timestamp integer milliseconds) that the job turns into Spark timestamps.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import operator
from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from spark_analysis.capture.conversation import (
    REQUEST,
    RESPONSE,
    CapturedCommand,
    Conversation,
    CutFrame,
    FrameKind,
    conversation_of,
)
from spark_analysis.capture.inputs import ConnectionKey, Piece, ReadTally, Split, connection_table, read_task
from spark_analysis.capture.packets import TcpSegment
from spark_analysis.capture.reassembly import (
    DEFAULT_SERVERS,
    Connection,
    Servers,
    as_servers,
    reassemble,
    reassemble_table,
    server_ports,
)
from spark_analysis.decode.controller import CONTROLLER, CONTROLLER_NOTE, controller_rows, is_controller_connection
from spark_analysis.decode.schema import CALL_ROWS, EVENT_ROWS, FRAME_ROWS, REGISTRATION_ROWS, arrow_array
from twisted_namesrv.bodies.register import RegisterBodyError, RegisterBrokerBody, decode_register_body
from twisted_namesrv.bodies.register_header import RegisterBrokerHeader
from twisted_namesrv.remoting import RequestCode, ResponseCode, SerializeType
from twisted_namesrv.remoting.codes import code_name, version_name
from twisted_namesrv.remoting.crc import crc32_masked
from twisted_namesrv.remoting.foreign import foreign_protocol
from twisted_namesrv.remoting.header import KEPT_HEADER_MAX

FRAME, CALL, REGISTRATION, CONNECTION, EVENT = "frame", "call", "registration", "connection", "event"
__all__ = ["CONTROLLER", "CONTROLLER_NOTE"]  # rows of calls to a controller, and their notes (decode/controller.py)
#: requests other than REGISTER_BROKER that name a broker (brokerAddr): its signs of life and its goodbye
NAMING_CODES = (RequestCode.UNREGISTER_BROKER, RequestCode.QUERY_DATA_VERSION, RequestCode.BROKER_HEARTBEAT)
#: requests of an administrator that change the NameServer's routes (an EVENT row each, as answered)
ADMIN_CODES = (RequestCode.DELETE_TOPIC_IN_NAMESRV, RequestCode.WIPE_WRITE_PERM_OF_BROKER,
               RequestCode.ADD_WRITE_PERM_OF_BROKER)
#: the code of an EVENT row saying that the connection a broker registered over closed (no request
#: code is negative): the NameServer forgets the broker at once (onChannelDestroy)
CONNECTION_CLOSED = -1
#: the code of an EVENT row saying that bytes a broker sent over its connection were not captured (a
#: sequence gap: the capture dropped them), so a silence they fall in is the capture's, not the broker's
CAPTURE_MISSED = -2
_REGISTRATION_COLUMNS = REGISTRATION_ROWS.names
_EVENT_COLUMNS = EVENT_ROWS.names
_BROKER_ADDR, _BROKER_NAME, _RESPONSE_CODE, _VERSION = (
    _REGISTRATION_COLUMNS.index(name) for name in ("broker_addr", "broker_name", "response_code", "version_name"))
_CRC_OK = _REGISTRATION_COLUMNS.index("crc_ok")
#: (EVENT_ROWS position, REGISTRATION_ROWS position) of the columns a registration's event takes from its row
_REGISTRATION_IN_EVENT = tuple((_EVENT_COLUMNS.index(name), index) for index, name in enumerate(_REGISTRATION_COLUMNS)
                               if name in _EVENT_COLUMNS)
(_EVENT_T, _EVENT_CODE, _EVENT_ALIVE, _EVENT_ONEWAY, _EVENT_SERVER, _EVENT_CLIENT, _EVENT_VERSION, _EVENT_EXT,
 _EVENT_BODY_KEY, _EVENT_BODY) = (_EVENT_COLUMNS.index(name) for name in (
    "t", "code", "alive", "oneway", "server", "client", "version", "ext", "body_key", "body"))
_REGISTER_BROKER = int(RequestCode.REGISTER_BROKER)
#: the codes conversation_rows tells a request's event by, as ints: an enum member read off its class
#: and compared costs ~0.35 us (a tuple of them searched ~0.17 us), four times a route lookup
_NAMING, _ADMIN = frozenset(map(int, NAMING_CODES)), frozenset(map(int, ADMIN_CODES))
_UNREGISTER_BROKER = int(RequestCode.UNREGISTER_BROKER)
_GET_ROUTEINFO_BY_TOPIC, _TOPIC_NOT_EXIST = int(RequestCode.GET_ROUTEINFO_BY_TOPIC), int(ResponseCode.TOPIC_NOT_EXIST)
#: the admin requests' answers that count topics (WIPE/ADD_WRITE_PERM: wipeTopicCount, addTopicCount)
_ANSWERED_COUNTS: dict[int, str] = {RequestCode.WIPE_WRITE_PERM_OF_BROKER: "wipeTopicCount",
                                    RequestCode.ADD_WRITE_PERM_OF_BROKER: "addTopicCount"}

#: a row of one of schema.py's *_ROWS, as a tuple in column order
Row = tuple[Any, ...]
_SERIALIZE_NAMES = {kind.value: kind.name for kind in SerializeType}  # an enum lookup per frame costs more
_code_name = lru_cache(maxsize=4096)(code_name)
_version_name = lru_cache(maxsize=4096)(version_name)


def broker_header(ext: dict[str, str | None]) -> RegisterBrokerHeader:
    """The server's RegisterBrokerHeader of a request's extFields, read once per distinct header: a
    broker sends the same fields (bodyCrc32 included) in every registration and heartbeat until its
    topics change, and reading them by Java's rules costs a dozen fields' parsing each time."""
    return _broker_of(tuple(ext.items()))[1]


def _kind_broker(kind: FrameKind) -> tuple[dict[str, str | None], RegisterBrokerHeader]:
    """One dict of a kind of frame's extFields (never to be changed: a registration's EVENT row
    carries it, so a task's events pickle a broker's fields once, and the liveness task reads its
    header once: replay.Bodies.header) and its broker_header, kept on the kind (a broker's
    registrations and heartbeats alike are one kind: their fields not even hashed again)."""
    if kind.broker is None:
        kind.broker = _broker_of(tuple(kind.ext.items()))
    return kind.broker


def _broker_of(items: tuple[tuple[str, str | None], ...]) -> tuple[dict[str, str | None], RegisterBrokerHeader]:
    """_broker_header's, kept for the worker's later tasks unless the fields are longer than any
    header kept (KEPT_HEADER_MAX, the header templates' rule): a header is any peer's choice up to a
    frame's length, and 4,096 kept could hold gigabytes a task had let go of."""
    if sum(len(key) + len(value or "") for key, value in items) > KEPT_HEADER_MAX:
        return _broker_header.__wrapped__(items)
    return _broker_header(items)


@lru_cache(maxsize=4096)
def _broker_header(items: tuple[tuple[str, str | None], ...]) -> tuple[dict[str, str | None], RegisterBrokerHeader]:
    ext = dict(items)
    return ext, RegisterBrokerHeader.from_ext(ext)  # frozen: one shared by all the requests alike


class ConnectionStats(NamedTuple):
    """What a connection row carries: only counted (and named among the findings), never written out."""

    conn_id: str
    gaps: int
    lost_bytes: int
    undecodable_bytes: int
    cut_frames: int = 0
    uncaptured_bytes: int = 0
    unplaced_bytes: int = 0
    server: str = ""
    #: what the undecodable bytes are when they are a protocol of their own (twisted_namesrv/remoting/foreign.py)
    protocol: str | None = None
    #: the side of a connection carrying frames whose packets the capture holds none of ("server": a
    #: capture of one direction, its answers not in it), else None (unheard_side)
    unheard: str | None = None
    #: captured bytes of frames begun before the capture (Conversation.mid_frame_bytes): not lost
    mid_frame_bytes: int = 0
    #: bytes the receiver had before the capture began, never captured (Conversation.unseen_bytes): not lost
    unseen_bytes: int = 0


class BodySummary(NamedTuple):
    """What registrations/ keeps of a REGISTER_BROKER body."""

    crc: int
    topic_count: int | None
    data_version_counter: int | None
    data_version_ms: int | None
    filter_servers: list[str | None] | None  # (a null entry as Java reads it: null)
    decoded: RegisterBrokerBody | None = None
    key: bytes | None = None  # the body's digest: what the replay keeps it by (EVENT_ROWS ``body_key``)


def piece_rows(pieces: Iterable[Piece], servers: Servers = DEFAULT_SERVERS, blocks: bool = False
               ) -> Iterator[tuple[str, Any]]:
    """Tagged rows of one 4-tuple from the pieces that reading tasks made, merged in capture order
    (``blocks``: each connection's FRAME rows as one FrameBlock, conversation_rows)."""
    table = connection_table(pieces)
    for connection in reassemble_table(table, servers):
        yield from conversation_rows(conversation_of(connection), blocks)


def split_rows(splits: Iterable[Split], servers: Servers | int = DEFAULT_SERVERS) -> Iterator[tuple[str, Row]]:
    """Tagged rows of every 4-tuple in these splits (a reading task each), as the job makes them,
    in this process: what tests compare and benchmarks time without Spark."""
    servers = as_servers(servers)
    pieces: dict[ConnectionKey, list[Piece]] = {}
    for split in splits:
        for piece in read_task([split], server_ports(servers), ReadTally()):
            pieces.setdefault(piece.ends, []).append(piece)
    for parts in pieces.values():
        yield from piece_rows(parts, servers)


def connection_rows(segments: Iterable[tuple[float, TcpSegment]], servers: Servers | int = DEFAULT_SERVERS
                    ) -> Iterator[tuple[str, Row]]:
    """Tagged rows for every connection (port reuse split by SYN) among segments in capture order."""
    for connection in reassemble(segments, servers):
        yield from conversation_rows(conversation_of(connection))


def connection_id(connection: Connection) -> str:
    """Unique across a capture even when a client port is reused: the opening time is part of it."""
    return f"{connection.client}>{connection.server}@{connection.opened_ts:.6f}"


def conversation_rows(conversation: Conversation, blocks: bool = False) -> Iterator[tuple[str, Any]]:
    """FRAME rows in time order, then a CALL row per request (paired with the answer carrying its
    opaque from the other side), a REGISTRATION row per REGISTER_BROKER request, an EVENT row per
    request naming a broker, on a connection to a controller its CONTROLLER rows and notes, one
    CONNECTION row. ``blocks``: the FRAME rows as one (FRAMES, FrameBlock) and the CALL rows as one
    (CALLS, CallBlock) instead, which frame_array and call_array make columns of (what the decoding
    tasks write)."""
    connection = conversation.connection
    conn_id = connection_id(connection)
    requests: list[CapturedCommand] = []
    answers: list[CapturedCommand | None] = []
    waiting: dict[tuple[str, int], list[int]] = {}  # (side that asked, opaque) -> indexes in requests
    orphans: list[CapturedCommand] = []  # answers to no captured request
    frames = FrameBlock(conn_id, connection.client, connection.server)
    calls = CallBlock(conn_id, connection.client, connection.server)
    if conversation.cut:
        yield from cut_conversation_rows(conversation, conn_id, frames, calls, blocks)
        return
    frames.add_all(conversation.commands)
    for captured in conversation.commands:
        if captured.kind.is_response:
            asker = REQUEST if captured.direction == RESPONSE else RESPONSE
            queue = waiting.get((asker, captured.opaque))
            if queue:  # an opaque reused before its answer came: answers come in order
                answers[queue.pop(0)] = captured
            else:
                orphans.append(captured)
        else:
            waiting.setdefault((captured.direction, captured.opaque), []).append(len(requests))
            requests.append(captured)
            answers.append(None)
    yield from _block_rows(frames, blocks)
    unheard = unheard_side(connection)
    calls.add_all(requests, answers, answer_unseen=unheard is not None, seen_until=seen_until(connection))
    yield from _block_rows(calls, blocks)
    bodies = _BodyCache()
    server, client = connection.server, connection.client
    registered: dict[str, Row] = {}  # brokerAddr -> its last registration on this connection
    shipped: set[bytes] = set()  # the digests of the bodies whose event carried them already
    for request, answer in zip(requests, answers, strict=True):
        if request.direction != REQUEST:
            continue
        code = request.kind.code
        if code == _REGISTER_BROKER:
            registration = registration_row(conn_id, request, answer, bodies, server)
            yield REGISTRATION, registration
            if registration[_BROKER_ADDR] is not None:
                registered[registration[_BROKER_ADDR]] = registration
                summary = bodies.last
                body = None if summary.key in shipped else bodies.last_body
                shipped.add(summary.key)  # type: ignore[arg-type]
                yield EVENT, registration_event(request, registration, summary, body, client, server)
        elif code in _NAMING:
            # UNREGISTER_BROKER, QUERY_DATA_VERSION and BROKER_HEARTBEAT name the broker with
            # REGISTER_BROKER's fields: read by its rules, in one place (bodies/register_header.py)
            header = _kind_broker(request.kind)[1]
            if header.brokerAddr is not None:
                yield EVENT, event_row(
                    request, answer, client, server, broker_addr=header.brokerAddr, broker_name=header.brokerName,
                    alive=code != _UNREGISTER_BROKER, cluster=header.clusterName,
                    broker_id=header.brokerId)
        elif code in _ADMIN:
            ext = dict(request.kind.ext)  # the event's own (the kind's is shared by its frames' rows)
            answered = None if answer is None else optional_int(answer.kind.ext.get(_ANSWERED_COUNTS.get(code, "")))
            yield EVENT, event_row(request, answer, client, server, broker_name=ext.get("brokerName"),
                                   cluster=ext.get("clusterName"), topic=ext.get("topic"), topic_count=answered,
                                   ext=ext)
        elif code == _GET_ROUTEINFO_BY_TOPIC and answer is not None and answer.kind.code == _TOPIC_NOT_EXIST:
            yield EVENT, event_row(request, answer, client, server, topic=request.kind.ext.get("topic"))
    if is_controller_connection(requests):
        yield from controller_rows(conn_id, connection, list(zip(requests, answers, strict=True)), orphans)
    yield from missed_events(connection, registered)
    if connection.closed_ts is not None:
        yield from closed_events(connection, registered)
    gaps = len(connection.to_server.gaps) + len(connection.to_client.gaps)
    yield CONNECTION, ConnectionStats(conn_id, gaps, conversation.lost_bytes, len(conversation.undecodable), 0,
                                      conversation.uncaptured_bytes, conversation.unplaced_bytes, connection.server,
                                      foreign_protocol(conversation.undecodable), unheard,
                                      conversation.mid_frame_bytes, conversation.unseen_bytes)


def unheard_side(connection: Connection) -> str | None:
    """The side of a connection a capture of one direction holds nothing of (Direction.unheard):
    "server" (its requests' answers are not missing: they were never in the capture) or "client";
    None when both sides were captured."""
    if connection.to_client.unheard:
        return "server"
    return "client" if connection.to_server.unheard else None


def seen_until(connection: Connection) -> float | None:
    """When the capture last held a byte of a connection it never saw closed, or None (closed in it,
    or no byte). A request carried by those last bytes has no answer in the capture because the
    capture ended there (stopped, or a file still being written read as far as it went: tcpdump
    writes in blocks), not because the server did not answer: it was told "never answered"."""
    if connection.closed_ts is not None:
        return None
    lasts = [max(direction.ts) for direction in (connection.to_server, connection.to_client) if direction.ts]
    return max(lasts) if lasts else None


def closed_events(connection: Connection, registered: dict[str, Row]) -> Iterator[tuple[str, Row]]:
    """An EVENT row per broker that registered over a connection that closed: how it closed
    (``fin``/``rst``, and which side first), when, and the names it last registered with."""
    how = f"{connection.close_kind} from {connection.first_close_by}"
    for addr, registration in registered.items():
        cluster, name, broker_id = (registration[_REGISTRATION_COLUMNS.index(column)] for column in (
            "cluster", "broker_name", "broker_id"))
        yield EVENT, _event(broker_addr=addr, broker_name=name, t=connection.closed_ts, code=CONNECTION_CLOSED,
                            alive=False, cluster=cluster, broker_id=broker_id, version_name=registration[_VERSION],
                            server=connection.server, client=connection.client, closed=how)


def missed_events(connection: Connection, registered: dict[str, Row]) -> Iterator[tuple[str, Row]]:
    """A CAPTURE_MISSED EVENT row per sequence gap in the requests of a connection brokers registered
    over, for each of them: the bytes sent there that the capture missed, between the last chunk
    captured before them (``missed_since``) and the first after (``t``). The sequence numbers prove
    the broker was talking then; what it said is unknown."""
    sent = connection.to_server
    if not registered or not sent.gaps:
        return
    for offset, length in sent.gaps:
        after = bisect.bisect_left(sent.offset, offset + length)
        if not 0 < after < len(sent.ts):
            continue  # no captured chunk on one side of it: nothing places it in time
        for addr, registration in registered.items():
            yield EVENT, _event(broker_addr=addr, broker_name=registration[_BROKER_NAME], t=sent.ts[after],
                                code=CAPTURE_MISSED, alive=False, server=connection.server,
                                client=connection.client, missed=length, missed_since=sent.ts[after - 1])


def _event(**values: Any) -> Row:
    """An EVENT_ROWS row of the values given, the other columns null."""
    return tuple(map(values.get, _EVENT_COLUMNS))


def event_row(request: CapturedCommand, answer: CapturedCommand | None, client: str, server: str | None,
              **values: Any) -> Row:
    """A request's EVENT row: its time, code, version, answer and sender, and the ``values`` given."""
    kind = request.kind
    version = kind.header.version
    return _event(t=request.ts, code=kind.code, version_name=_version_name(version), version=version,
                  response_code=None if answer is None else answer.kind.code, oneway=kind.is_oneway, client=client,
                  server=server, **values)


def optional_int(text: str | None) -> int | None:
    """A count an answer's header gives as text; None where absent or not a number."""
    try:
        return None if text is None else int(text)
    except ValueError:
        return None


FRAMES = "frames"  # a connection's FRAME rows as one FrameBlock (conversation_rows' ``blocks``)
_TS, _KIND, _OPAQUE, _BODY_LEN = map(operator.attrgetter, ("ts", "kind", "opaque", "body_len"))
_FRAME_FIELDS = list(FRAME_ROWS)
#: FRAME_ROWS positions: what a kind of frame says alike, before and after the opaque (_kind_row)
_SAID_FRONT, _SAID_BACK = slice(4, 7), slice(8, 16)


class FrameBlock:
    """A connection's FRAME rows, in time order, as what each says of its own (time, opaque, body
    length, bytes missing) and what it says alike with the frames of its kind (_kind_row, shared):
    rows (``rows``) or, for many connections at once, columns (frame_array): a row a
    frame costs a tuple of 20 values and their conversion to Arrow each, where most are its kind's."""

    __slots__ = ("conn_id", "client", "server", "ts", "said", "opaque", "body_len", "missing")

    def __init__(self, conn_id: str, client: str, server: str) -> None:
        self.conn_id, self.client, self.server = conn_id, client, server
        self.ts: list[float] = []
        self.said: list[tuple[Row, Row]] = []
        self.opaque: list[int | None] = []
        self.body_len: list[int | None] = []
        self.missing: list[int] = []

    def __len__(self) -> int:
        return len(self.ts)

    def add(self, captured: CapturedCommand) -> None:
        """A frame decoded whole."""
        kind = captured.kind
        self.ts.append(captured.ts)
        self.said.append(kind.row or _kind_row(kind))
        self.opaque.append(captured.opaque)
        self.body_len.append(captured.body_len)
        self.missing.append(0)

    def add_all(self, commands: list[CapturedCommand]) -> None:
        """Frames decoded whole, a column at a time."""
        self.ts.extend(map(_TS, commands))
        self.said.extend([kind.row or _kind_row(kind) for kind in map(_KIND, commands)])
        self.opaque.extend(map(_OPAQUE, commands))
        self.body_len.extend(map(_BODY_LEN, commands))
        self.missing.extend(itertools.repeat(0, len(commands)))

    def own(self) -> tuple[list[Any], ...]:
        """The columns of what each frame says of its own: time, opaque, body length, bytes missing."""
        return self.ts, self.opaque, self.body_len, self.missing

    def add_row(self, row: Row) -> None:
        """A FRAME row made whole (a frame a snap length cut: cut_frame_row)."""
        self.ts.append(row[0])
        self.said.append((row[_SAID_FRONT], row[_SAID_BACK]))
        self.opaque.append(row[7])
        self.body_len.append(row[16])
        self.missing.append(row[17])

    def rows(self) -> Iterator[Row]:
        """The FRAME rows, one tuple a frame."""
        for ts, (front, back), opaque, body_len, missing in zip(self.ts, self.said, self.opaque, self.body_len,
                                                              self.missing, strict=True):
            yield (ts, self.conn_id, self.client, self.server, *front, opaque, *back, body_len, missing, None, None)


def _block_rows(block: FrameBlock | CallBlock, blocks: bool) -> Iterator[tuple[str, Any]]:
    """A connection's block of FRAME or CALL rows as itself (``blocks``: FRAMES or CALLS), else its
    rows one by one (FRAME or CALL)."""
    frames = isinstance(block, FrameBlock)
    if blocks:
        if block:
            yield FRAMES if frames else CALLS, block
        return
    kind = FRAME if frames else CALL
    for row in block.rows():
        yield kind, row


def frame_array(blocks: Iterable[FrameBlock]) -> pa.StructArray:
    """The FRAME rows of blocks as one Arrow array of FRAME_ROWS, the same as ``pa.array`` of their
    rows, built by column: what a kind of frame says alike converted once and taken for each frame,
    a connection's names once and taken for each of its frames."""
    (ts, opaque, body_len, missing), named, alike = _block_columns(blocks, 4, _FRAME_FIELDS[1:4], _FRAME_FIELDS[
        _SAID_FRONT] + _FRAME_FIELDS[_SAID_BACK], lambda said: [front + back for front, back in said])
    own = [pa.array(column, field.type) for column, field in zip(
        (ts, opaque, body_len, missing), (_FRAME_FIELDS[0], _FRAME_FIELDS[7], *_FRAME_FIELDS[16:18]), strict=True)]
    nulls = [pa.nulls(len(ts), field.type) for field in _FRAME_FIELDS[18:]]
    columns = [own[0], *named, *alike[:3], own[1], *alike[3:], own[2], own[3], *nulls]
    return pa.StructArray.from_arrays(columns, fields=_FRAME_FIELDS)


def _block_columns(blocks: Iterable[FrameBlock] | Iterable[CallBlock], owned: int, named_fields: list[pa.Field],
                   alike_fields: list[pa.Field], alike_rows: Callable[[list[Any]], list[Row]] = list
                   ) -> tuple[list[list[Any]], list[pa.Array], list[pa.Array]]:
    """The columns of blocks (FrameBlock or CallBlock): their ``owned`` columns of what each row
    says of its own, joined; their connections' names (``named_fields``) and what their rows say
    alike (``alike_fields``, of ``alike_rows`` of the blocks' shared values, each converted once)
    as Arrow arrays taken for each row."""
    own: list[list[Any]] = [[] for _ in range(owned)]
    connection_at: list[int] = []
    connections: list[tuple[str, str, str]] = []
    every_said: list[Any] = []  # each row's shared values (held here: their ids stay unique)
    for block in blocks:
        connection_at.extend(itertools.repeat(len(connections), len(block)))
        connections.append((block.conn_id, block.client, block.server))
        for column, values in zip(own, block.own(), strict=True):
            column.extend(values)
        every_said.extend(block.said)
    # the shared values told apart by identity for all rows at once (a dict lookup a row cost more)
    ids = np.fromiter(map(id, every_said), np.uint64, len(every_said))
    _, first, said_at = np.unique(ids, return_index=True, return_inverse=True)
    said = list(map(every_said.__getitem__, first.tolist()))
    of_connection, of_said = pa.array(connection_at, pa.int32()), pa.array(said_at.reshape(-1).astype(np.int32))
    named = [arrow_array(column, field.type).take(of_connection) for column, field in zip(
        zip(*connections, strict=True) if connections else [()] * len(named_fields), named_fields, strict=True)]
    alike_columns = list(zip(*alike_rows(said), strict=True)) if said else [()] * len(alike_fields)
    alike = [arrow_array(column, field.type).take(of_said) for column, field in zip(alike_columns, alike_fields,
                                                                                    strict=True)]
    return own, named, alike


def _kind_row(kind: FrameKind) -> tuple[Row, Row]:
    """What every FRAME row of a kind of frame says alike, before and after its opaque (kept on the kind)."""
    header, response = kind.header, kind.is_response
    kind.row = ((RESPONSE if response else REQUEST, header.code, _code_name(header.code, response)),
                (header.flag, kind.is_oneway, header.version, _version_name(header.version), header.language,
                 _SERIALIZE_NAMES[kind.serialize_type], header.remark, kind.ext))
    return kind.row


CALLS = "calls"  # a connection's CALL rows as one CallBlock (conversation_rows' ``blocks``)
_CALL_FIELDS = list(CALL_ROWS)
#: CALL_ROWS positions: what a request's kind says alike (_kind_call), the connection's names, what a
#: call says of its own (CallBlock's columns, in their order)
_CALL_ALIKE, _CALL_NAMED, _CALL_OWN = (tuple(CALL_ROWS.names.index(name) for name in names) for names in (
    ("code", "code_name", "oneway", "topic", "broker_addr"), ("conn_id", "client", "server"),
    ("ts", "opaque", "response_code", "latency_ms", "response_remark", "cut")))


class CallBlock:
    """A connection's CALL rows, as FrameBlock keeps its FRAME rows: what each call says of its own
    (time, opaque, its answer's code, remark and latency, whether it was cut) and what its request
    says alike with the requests of its kind (_kind_call, shared), taken once per kind in
    call_array: a row a call cost a tuple of 16 values and their conversion to Arrow each."""

    __slots__ = ("conn_id", "client", "server", "ts", "said", "opaque", "response_code", "latency_ms", "remark",
                 "cut")

    def __init__(self, conn_id: str, client: str, server: str) -> None:
        self.conn_id, self.client, self.server = conn_id, client, server
        self.ts: list[float] = []
        self.said: list[Row] = []
        self.opaque: list[int | None] = []
        self.response_code: list[int | None] = []
        self.latency_ms: list[float | None] = []
        self.remark: list[str | None] = []
        self.cut: list[bool] = []

    def __len__(self) -> int:
        return len(self.ts)

    def add_all(self, requests: list[CapturedCommand], answers: list[CapturedCommand | None],
                answer_unseen: bool = False, seen_until: float | None = None) -> None:
        """Requests decoded whole and their answers (None: not captured), a column at a time.
        ``answer_unseen``: the answers' side of the connection was not captured at all (its ``cut``:
        not known unanswered). ``seen_until``: the connection's last byte captured, where it was not
        closed in the capture: a request not answered from then on is ``cut`` too (seen_until)."""
        self.ts.extend(map(_TS, requests))
        self.said.extend([kind.call or _kind_call(kind) for kind in map(_KIND, requests)])
        self.opaque.extend(map(_OPAQUE, requests))
        self.response_code.extend([None if answer is None else answer.kind.code for answer in answers])
        self.latency_ms.extend([None if answer is None else (answer.ts - request.ts) * 1000.0
                                for request, answer in zip(requests, answers, strict=True)])
        self.remark.extend([None if answer is None else answer.kind.header.remark for answer in answers])
        if answer_unseen or seen_until is None:
            self.cut.extend(itertools.repeat(answer_unseen, len(requests)))
        else:
            self.cut.extend([answer is None and request.ts >= seen_until
                             for request, answer in zip(requests, answers, strict=True)])

    def add_row(self, row: Row) -> None:
        """A CALL row made whole (a call a snap length cut: _cut_call_row)."""
        self.said.append(tuple(row[at] for at in _CALL_ALIKE))
        for column, at in zip(self.own(), _CALL_OWN, strict=True):
            column.append(row[at])

    def own(self) -> tuple[list[Any], ...]:
        """The columns of what each call says of its own, in _CALL_OWN's order."""
        return self.ts, self.opaque, self.response_code, self.latency_ms, self.remark, self.cut

    def rows(self) -> Iterator[Row]:
        """The CALL rows, one tuple a call."""
        for ts, (code, name, oneway, topic, broker_addr), opaque, response_code, latency_ms, remark, cut in zip(
                self.ts, self.said, self.opaque, self.response_code, self.latency_ms, self.remark, self.cut,
                strict=True):
            yield (ts, self.conn_id, self.client, code, name, opaque, response_code, latency_ms, oneway, topic,
                   remark, self.server, broker_addr, cut, None, None)


def _kind_call(kind: FrameKind) -> Row:
    """What every CALL row of a kind of request says alike (kept on the kind): its code and name,
    whether it is oneway, the topic and brokerAddr its extFields name."""
    ext = kind.ext
    kind.call = (kind.code, _code_name(kind.code), kind.is_oneway, ext.get("topic"), ext.get("brokerAddr"))
    return kind.call


def call_array(blocks: Iterable[CallBlock]) -> pa.StructArray:
    """The CALL rows of blocks as one Arrow array of CALL_ROWS, the same as ``pa.array`` of their
    rows, built by column as frame_array builds the FRAME rows'."""
    own, named, alike = _block_columns(blocks, len(_CALL_OWN), [_CALL_FIELDS[at] for at in _CALL_NAMED],
                                       [_CALL_FIELDS[at] for at in _CALL_ALIKE])
    columns: list[pa.Array | None] = [None] * len(_CALL_FIELDS)
    for at, array in zip(_CALL_NAMED + _CALL_ALIKE, named + alike, strict=True):
        columns[at] = array
    for at, values in zip(_CALL_OWN, own, strict=True):
        columns[at] = arrow_array(values, _CALL_FIELDS[at].type)
    for at, field in enumerate(_CALL_FIELDS):  # input and session: filled later (Places)
        if columns[at] is None:
            columns[at] = pa.nulls(len(own[0]), field.type)
    return pa.StructArray.from_arrays(columns, fields=_CALL_FIELDS)


def registration_row(conn_id: str, request: CapturedCommand, answer: CapturedCommand | None,
                     bodies: _BodyCache, server: str | None = None) -> Row:
    """``crc_declared`` is bodyCrc32 as sent; ``crc_ok`` is None where the NameServer skips the check
    (bodyCrc32 absent, 0, or not a Java int, e.g. an unmasked CRC >= 2**31), else whether the masked
    CRC32 of the body equals it: False exactly when the NameServer answers "crc32 not match"."""
    kind = request.kind
    header = _kind_broker(kind)[1]
    compressed = header.compressed
    version = kind.header.version
    body = bodies.summary(request.body, compressed, version)
    checked = header.bodyCrc32
    crc_ok = None if checked == 0 else body.crc == checked
    return (
        request.ts, conn_id, header.clusterName, header.brokerName, header.brokerAddr,
        header.brokerId, header.haServerAddr, compressed, request.body_len,
        header.bodyCrc32Declared, crc_ok,
        body.topic_count, body.data_version_counter, body.data_version_ms, body.filter_servers,
        None if answer is None else answer.kind.code, _version_name(version), server,
        None, None,
    )


def registration_event(request: CapturedCommand, registration: Row, body: BodySummary, raw: bytes | None,
                       client: str, server: str | None = None) -> Row:
    """A registration as a sign of life (unless the NameServer refused it: ``alive``), with what
    brokers.csv keeps of it (its REGISTRATION row's columns of the same names), its header fields
    and its body for the replay: ``raw`` the first time this connection sent it, else None (the
    replay keeps it by ``body.key``). Built by position: a registration's event is made as often
    as its row (most of a capture's bytes are registrations), and a dict of its columns and one
    of keywords cost more than all the rest of its decoding."""
    event: list[Any] = [None] * len(_EVENT_COLUMNS)
    for to, source in _REGISTRATION_IN_EVENT:
        event[to] = registration[source]
    kind = request.kind
    event[_EVENT_T], event[_EVENT_CODE] = request.ts, _REGISTER_BROKER
    event[_EVENT_ALIVE] = (registration[_RESPONSE_CODE] or 0) == 0 and registration[_CRC_OK] is not False
    event[_EVENT_ONEWAY], event[_EVENT_SERVER], event[_EVENT_CLIENT] = kind.is_oneway, server, client
    event[_EVENT_VERSION], event[_EVENT_EXT] = kind.header.version, _kind_broker(kind)[0]
    event[_EVENT_BODY_KEY], event[_EVENT_BODY] = body.key, raw
    return tuple(event)


class _BodyCache:
    """A broker re-sends the same body every 30 s until its topics change: decode it once."""

    def __init__(self) -> None:
        self._last: tuple[bytes | None, bool, int, BodySummary] | None = None

    @property
    def last_body(self) -> bytes | None:
        """The body last summarised."""
        return None if self._last is None else self._last[0]

    @property
    def last(self) -> BodySummary:
        """The summary of the body last summarised."""
        assert self._last is not None
        return self._last[3]

    def summary(self, body: bytes | memoryview | None, compressed: bool, version: int) -> BodySummary:
        last = self._last
        if last is not None and last[1] == compressed and last[2] == version and _same_bytes(last[0], body):
            return last[3]
        kept = None if body is None else bytes(body)  # a view of the reassembled stream: kept as a copy
        summary = _summarise(kept, compressed, version)
        self._last = (kept, compressed, version, summary)
        return summary


def _same_bytes(kept: bytes | None, body: bytes | memoryview | None) -> bool:
    """Whether ``body`` (a view, most often) holds exactly the bytes ``kept``: one memcmp in place.
    A memoryview's ``==`` compares byte by byte, and a copy of it to compare as bytes cost as much
    as the comparison (a registration's body is most of a capture's bytes)."""
    if kept is None or body is None:
        return kept is None and body is None
    return len(body) == len(kept) and kept.startswith(body)  # bytes.startswith reads any buffer in place


def _summarise(body: bytes | None, compressed: bool, version: int) -> BodySummary:
    crc = crc32_masked(body)
    key = hashlib.blake2b(body or b"", digest_size=16).digest()
    try:
        decoded = decode_register_body(body, compressed, version)
    except RegisterBodyError:
        return BodySummary(crc, None, None, None, None, key=key)
    data_version = decoded.dataVersion
    return BodySummary(crc, len(decoded.topicConfigTable), data_version.counter, data_version.timestamp,
                       list(decoded.filterServerList), decoded, key)


# -- frames a snap length cut -------------------------------------------------------------------------
#
# A capture taken with a snap length keeps each packet's first bytes: a frame's length, header
# length, code and often its opaque and topic, rarely a registration's broker address or body.
# conversation.py reads each cut frame as far as its bytes go (CutFrame); the rows below take
# only what that says for certain and leave the rest null: a request whose opaque was cut has no
# known answer (its CALL row says ``cut``, never "unanswered"), a registration whose body was cut
# no topic count nor CRC, and a broker whose address was cut is named by the connection it
# registers over (cut_broker_addr), which is what the NameServer's channel is, unless one of its own
# requests on that channel (an UNREGISTER_BROKER whose header was short enough) carries the address whole.

#: a request or answer of a connection some of whose frames were cut
Said = CapturedCommand | CutFrame


_CUT_ADDR = "? (address not captured; registers from "


def cut_broker_addr(client: str) -> str:
    """What names a broker whose registrations' brokerAddr was not captured: the connection it
    registers over (the NameServer forgets it when that connection closes)."""
    return f"{_CUT_ADDR}{client})"


def is_cut_broker_addr(broker_addr: str | None) -> bool:
    """Whether ``broker_addr`` is cut_broker_addr's name for a broker, not an address it registered."""
    return broker_addr is not None and broker_addr.startswith(_CUT_ADDR)


def cut_conversation_rows(conversation: Conversation, conn_id: str, frames: FrameBlock, calls: CallBlock,
                          blocks: bool = False) -> Iterator[tuple[str, Any]]:
    """conversation_rows for a connection some of whose frames were cut: every frame's FRAME row,
    requests paired with answers by the opaques captured, CALL, REGISTRATION and EVENT rows of
    what is certain, the close of a connection brokers registered over, and its CONNECTION row."""
    connection = conversation.connection
    said: list[Said] = [*conversation.commands, *conversation.cut]
    said.sort(key=_TS)
    requests: list[Said] = []
    answers: list[Said | None] = []
    waiting: dict[tuple[str, int], list[int]] = {}
    unknown = {REQUEST: 0, RESPONSE: 0}  # frames of no known opaque or kind, by direction
    unsure: list[Said] = []  # those frames
    is_request: bool | None
    opaque: int | None
    for item in said:
        if isinstance(item, CapturedCommand):
            frames.add(item)
            is_request, opaque = not item.kind.is_response, item.opaque
        else:
            frames.add_row(cut_frame_row(conn_id, connection, item))
            is_request, opaque = item.is_request, item.known.opaque
        if is_request is None or opaque is None:
            unknown[item.direction] += 1
            unsure.append(item)
            if is_request:
                requests.append(item)
                answers.append(None)
            continue
        if not is_request:
            asker = REQUEST if item.direction == RESPONSE else RESPONSE
            queue = waiting.get((asker, opaque))
            if queue:
                answers[queue.pop(0)] = item
            continue
        waiting.setdefault((item.direction, opaque), []).append(len(requests))
        requests.append(item)
        answers.append(None)
    _pair_the_one_left(connection, requests, answers, unsure)
    yield from _block_rows(frames, blocks)
    server, client = connection.server, connection.client
    registered: dict[str, Row] = {}
    unnamed: set[str] = set()  # the brokers registered here with their brokerAddr cut, as named
    told = _addresses_told(requests)
    bodies = _BodyCache()
    shipped: set[bytes] = set()  # the digests of the bodies whose event carried them already
    unheard = unheard_side(connection)
    for request, answer in zip(requests, answers, strict=True):
        other = RESPONSE if request.direction == REQUEST else REQUEST
        code = _add_cut_call(calls, conn_id, client, request, answer, server,
                             bool(unknown[other]) or unheard is not None)
        if code is None:
            continue
        if request.direction != REQUEST:
            continue
        if code != RequestCode.REGISTER_BROKER:
            yield from _cut_named_event(request, answer, code, client, server,
                                        _unnamed(registered, unnamed, _said_ext(request)))
            continue
        whole = isinstance(request, CapturedCommand) and (answer is None or isinstance(answer, CapturedCommand))
        if isinstance(request, CapturedCommand) and (answer is None or isinstance(answer, CapturedCommand)):
            # ``whole`` spelled out again: mypy narrows the types from the isinstance tests, not the flag
            registration = registration_row(conn_id, request, answer, bodies, server)
        else:
            registration = _cut_registration_row(conn_id, request, answer, server)
        if registration[_BROKER_ADDR] is None:
            named = _told_for(told, registration) or cut_broker_addr(client)
            registration = (*registration[:_BROKER_ADDR], named, *registration[_BROKER_ADDR + 1:])
            unnamed.add(named)
        yield REGISTRATION, registration
        registered[registration[_BROKER_ADDR]] = registration
        if whole and isinstance(request, CapturedCommand):
            summary = bodies.last
            body = None if summary.key in shipped else bodies.last_body
            shipped.add(summary.key)  # type: ignore[arg-type]
            yield EVENT, registration_event(request, registration, summary, body, client, server)
        else:
            yield EVENT, _cut_registration_event(request, registration, client, server)
    yield from _block_rows(calls, blocks)
    yield from missed_events(connection, registered)
    if connection.closed_ts is not None:
        yield from closed_events(connection, registered)
    gaps = len(connection.to_server.gaps) + len(connection.to_client.gaps)
    yield CONNECTION, ConnectionStats(conn_id, gaps, conversation.lost_bytes, len(conversation.undecodable),
                                      len(conversation.cut), conversation.uncaptured_bytes,
                                      conversation.unplaced_bytes, connection.server,
                                      foreign_protocol(conversation.undecodable), unheard,
                                      conversation.mid_frame_bytes, conversation.unseen_bytes)


def cut_frame_row(conn_id: str, connection: Connection, frame: CutFrame) -> Row:
    known = frame.known
    response = None if frame.is_request is None else not frame.is_request
    code = known.code
    return (
        frame.ts, conn_id, connection.client, connection.server,
        frame.direction if response is None else (RESPONSE if response else REQUEST),
        code, None if code is None or response is None else _code_name(code, response), known.opaque, known.flag,
        None if known.flag is None else bool(known.flag & 2), known.version,
        None if known.version is None else _version_name(known.version), known.language,
        None if frame.serialize_type is None else _SERIALIZE_NAMES.get(frame.serialize_type), known.remark,
        known.ext_fields or {}, frame.body_len, frame.missing, None, None,
    )


def _said_code(item: Said) -> int | None:
    return item.command.code if isinstance(item, CapturedCommand) else item.known.code


def _said_ext(item: Said) -> dict[str, str | None]:
    return item.command.ext if isinstance(item, CapturedCommand) else item.known.ext_fields or {}


def _said_version(item: Said) -> int | None:
    return item.command.version if isinstance(item, CapturedCommand) else item.known.version


def _said_oneway(item: Said) -> bool | None:
    if isinstance(item, CapturedCommand):
        return item.command.is_oneway
    return None if item.known.flag is None else bool(item.known.flag & 2)


def _add_cut_call(calls: CallBlock, conn_id: str, client: str, request: Said, answer: Said | None, server: str,
                  answers_unknown: bool) -> int | None:
    """The CALL row of a request whose code is known, added to ``calls``, and that code (None: no
    row); ``cut``: it or its answer was cut, or the other side carried frames whose opaque was
    cut (one of them may be its answer)."""
    if isinstance(request, CapturedCommand) and (answer is None or isinstance(answer, CapturedCommand)) and not (
            answer is None and answers_unknown):
        calls.add_all([request], [answer])
        return request.kind.code
    code = _said_code(request)
    if code is None:
        return None
    response_code = latency_ms = remark = None
    if answer is not None:
        response_code = _said_code(answer)
        remark = answer.command.remark if isinstance(answer, CapturedCommand) else answer.known.remark
        latency_ms = (answer.ts - request.ts) * 1000.0
    opaque = request.command.opaque if isinstance(request, CapturedCommand) else request.known.opaque
    ext = _said_ext(request)
    calls.add_row((request.ts, conn_id, client, code, _code_name(code), opaque, response_code, latency_ms,
                   _said_oneway(request), ext.get("topic"), remark, server, ext.get("brokerAddr"), True, None, None))
    return code


def _cut_registration_row(conn_id: str, request: Said, answer: Said | None, server: str) -> Row:
    """A REGISTER_BROKER request some of whose header or body was cut: the header's fields captured
    whole; no topic count, CRC check or data version (the body is not there)."""
    ext = _said_ext(request)
    header = RegisterBrokerHeader.from_ext(ext)
    body_len = len(request.command.body or b"") if isinstance(request, CapturedCommand) else request.body_len
    version = _said_version(request)
    return (
        request.ts, conn_id, header.clusterName, header.brokerName, header.brokerAddr, header.brokerId,
        header.haServerAddr, header.compressed if "compressed" in ext else None, body_len, header.bodyCrc32Declared,
        None, None, None, None, None, None if answer is None else _said_code(answer),
        None if version is None else _version_name(version), server, None, None,
    )


def _cut_registration_event(request: Said, registration: Row, client: str, server: str) -> Row:
    """A cut registration's EVENT row: a sign of life (unless its answer, when captured, refused it)
    with its header fields captured whole and no body (the replay then keeps its liveness only)."""
    columns = dict(zip(_REGISTRATION_COLUMNS, registration, strict=True))
    version = _said_version(request)
    return _event(broker_addr=columns["broker_addr"], broker_name=columns["broker_name"], t=request.ts,
                  code=int(RequestCode.REGISTER_BROKER), alive=(columns["response_code"] or 0) == 0,
                  cluster=columns["cluster"], broker_id=columns["broker_id"], version_name=columns["version_name"],
                  response_code=columns["response_code"], body_len=columns["body_len"],
                  compressed=columns["compressed"], oneway=_said_oneway(request), server=server, client=client,
                  version=version, ext=_said_ext(request) or None)


def _addresses_told(requests: list[Said]) -> dict[tuple[str | None, int | None], str]:
    """The brokerAddr a broker's own request naming it (UNREGISTER_BROKER, QUERY_DATA_VERSION,
    BROKER_HEARTBEAT) carries whole on one connection, by the (cluster, brokerId) captured with it: one
    address per key, else none (a broker's requests all travel over its one channel to a NameServer)."""
    told: dict[tuple[str | None, int | None], set[str]] = {}
    for request in requests:
        if request.direction == REQUEST and _said_code(request) in NAMING_CODES:
            header = RegisterBrokerHeader.from_ext(_said_ext(request))
            if header.brokerAddr is not None:
                told.setdefault((header.clusterName, header.brokerId), set()).add(header.brokerAddr)
    return {key: addrs.pop() for key, addrs in told.items() if len(addrs) == 1}


def _told_for(told: dict[tuple[str | None, int | None], str], registration: Row) -> str | None:
    """The address told on the connection (_addresses_told) for a registration whose brokerAddr was
    cut: the one of its cluster and brokerId, as far as both were captured."""
    cluster, broker_id = (registration[_REGISTRATION_COLUMNS.index(column)] for column in ("cluster", "broker_id"))
    fits = {addr for (their_cluster, their_id), addr in told.items() if all(
        mine is None or theirs is None or mine == theirs
        for mine, theirs in ((cluster, their_cluster), (broker_id, their_id)))}
    return fits.pop() if len(fits) == 1 else None


def _unnamed(registered: dict[str, Row], unnamed: set[str], ext: dict[str, str | None]) -> str | None:
    """The broker a request naming ``ext``'s broker means on a connection where brokers registered
    with their addresses cut (``unnamed``: as they were named): the one such broker of the same
    cluster and brokerId (as far as captured), unless the request names an address registered over
    the connection (a broker's requests all travel over its one channel to a NameServer)."""
    if ext.get("brokerAddr") in registered:
        return None
    header = RegisterBrokerHeader.from_ext(ext)
    unnamed_here = [addr for addr, row in registered.items() if addr in unnamed and all(
        mine is None or theirs is None or mine == theirs for mine, theirs in (
            (header.clusterName, row[_REGISTRATION_COLUMNS.index("cluster")]),
            (header.brokerId, row[_REGISTRATION_COLUMNS.index("broker_id")])))]
    return unnamed_here[0] if len(unnamed_here) == 1 else None


def _pair_the_one_left(connection: Connection, requests: list[Said], answers: list[Said | None],
                       unsure: list[Said]) -> None:
    """Pairs a connection's one request left without an answer with its one frame the other way of
    unknown kind or opaque, sent after it, when the capture holds the connection from its SYN with no
    gap: every request on it was captured and a server answers nothing else, so that frame can only
    be the answer. mqadmin makes a connection per call, and a snap length keeps of its admin call's
    header only the code and the first extFields (wipeTopicCount, a deletion's topic), not the
    opaque: the NameServer's answered count was left unread."""
    if not (connection.to_server.from_syn and connection.to_client.from_syn) or \
            connection.to_server.gaps or connection.to_client.gaps:
        return
    left = [index for index, answer in enumerate(answers) if answer is None]
    if len(left) != 1:
        return
    request = requests[left[0]]
    others = [item for item in unsure if item is not request]
    if len(others) == 1 and others[0].direction != request.direction and others[0].ts >= request.ts:
        answers[left[0]] = others[0]


def _cut_named_event(request: Said, answer: Said | None, code: int, client: str, server: str, unnamed: str | None
                     ) -> Iterator[tuple[str, Row]]:
    """The EVENT row of a request naming a broker or changing routes, when what names it was captured;
    a broker's request whose brokerAddr was cut names ``unnamed``, the broker registered over the same
    connection with its address cut, if one did."""
    ext = _said_ext(request)
    version = _said_version(request)
    common = dict(t=request.ts, code=code, version_name=None if version is None else _version_name(version),
                  version=version, response_code=None if answer is None else _said_code(answer),
                  oneway=_said_oneway(request), client=client, server=server)
    if code in NAMING_CODES:
        header = RegisterBrokerHeader.from_ext(ext)
        addr = unnamed or header.brokerAddr
        if addr is not None:
            yield EVENT, _event(broker_addr=addr, broker_name=header.brokerName,
                                alive=code != RequestCode.UNREGISTER_BROKER, cluster=header.clusterName,
                                broker_id=header.brokerId, **common)
    elif code in ADMIN_CODES:
        # the count is the answer header's first field: read where the snap length kept it whole
        answered = None if answer is None else optional_int(_said_ext(answer).get(_ANSWERED_COUNTS.get(code, "")))
        yield EVENT, _event(broker_name=ext.get("brokerName"), cluster=ext.get("clusterName"), topic=ext.get("topic"),
                            topic_count=answered, ext=ext or None, **common)
    elif (code == RequestCode.GET_ROUTEINFO_BY_TOPIC and answer is not None
          and _said_code(answer) == ResponseCode.TOPIC_NOT_EXIST):
        yield EVENT, _event(topic=ext.get("topic"), **common)
