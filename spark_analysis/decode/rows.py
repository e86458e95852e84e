"""One TCP connection's captured segments -> the rows of ``frames/``, ``calls/`` and ``registrations/``.

Pure Python (no Spark), so a Spark task runs it per connection and tests run it directly. Rows are
plain tuples in the column order of ``schema.py``; timestamps are float seconds (and the broker's
dataVersion timestamp integer milliseconds) that the job turns into Spark timestamps.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from functools import lru_cache
from typing import Any, NamedTuple

from spark_analysis.capture.conversation import REQUEST, RESPONSE, CapturedCommand, Conversation, conversation_of
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
from spark_analysis.decode.schema import EVENT_ROWS, REGISTRATION_ROWS
from twisted_namesrv.bodies.register import RegisterBodyError, RegisterBrokerBody, decode_register_body
from twisted_namesrv.bodies.register_header import RegisterBrokerHeader
from twisted_namesrv.remoting import RequestCode, ResponseCode, SerializeType
from twisted_namesrv.remoting.codes import code_name, version_name
from twisted_namesrv.remoting.crc import crc32_masked

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
_REGISTRATION_COLUMNS = REGISTRATION_ROWS.names
_EVENT_COLUMNS = EVENT_ROWS.names
_BROKER_ADDR, _BROKER_NAME, _RESPONSE_CODE, _VERSION = (
    _REGISTRATION_COLUMNS.index(name) for name in ("broker_addr", "broker_name", "response_code", "version_name"))
#: the admin requests' answers that count topics (WIPE/ADD_WRITE_PERM: wipeTopicCount, addTopicCount)
_ANSWERED_COUNTS: dict[int, str] = {RequestCode.WIPE_WRITE_PERM_OF_BROKER: "wipeTopicCount",
                                    RequestCode.ADD_WRITE_PERM_OF_BROKER: "addTopicCount"}

#: a row of one of schema.py's *_ROWS, as a tuple in column order
Row = tuple[Any, ...]
_SERIALIZE_NAMES = {kind.value: kind.name for kind in SerializeType}  # an enum lookup per frame costs more
_code_name = lru_cache(maxsize=4096)(code_name)
_version_name = lru_cache(maxsize=4096)(version_name)


class ConnectionStats(NamedTuple):
    """What a connection row carries: only counted (and named among the findings), never written out."""

    conn_id: str
    gaps: int
    lost_bytes: int
    undecodable_bytes: int


class BodySummary(NamedTuple):
    """What registrations/ keeps of a REGISTER_BROKER body."""

    crc: int
    topic_count: int | None
    data_version_counter: int | None
    data_version_ms: int | None
    filter_servers: list[str] | None
    decoded: RegisterBrokerBody | None = None
    key: bytes | None = None  # the body's digest: what the replay keeps it by (EVENT_ROWS ``body_key``)


def piece_rows(pieces: Iterable[Piece], servers: Servers = DEFAULT_SERVERS) -> Iterator[tuple[str, Row]]:
    """Tagged rows of one 4-tuple from the pieces that reading tasks made, merged in capture order."""
    table = connection_table(pieces)
    for connection in reassemble_table(table, servers):
        yield from conversation_rows(conversation_of(connection))


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


def conversation_rows(conversation: Conversation) -> Iterator[tuple[str, Row]]:
    """FRAME rows in time order, then a CALL row per request (paired with the answer carrying its
    opaque from the other side), a REGISTRATION row per REGISTER_BROKER request, an EVENT row per
    request naming a broker, on a connection to a controller its CONTROLLER rows and notes, one
    CONNECTION row."""
    connection = conversation.connection
    conn_id = connection_id(connection)
    requests: list[CapturedCommand] = []
    answers: list[CapturedCommand | None] = []
    waiting: dict[tuple[str, int], list[int]] = {}  # (side that asked, opaque) -> indexes in requests
    orphans: list[CapturedCommand] = []  # answers to no captured request
    for captured in conversation.commands:
        yield FRAME, frame_row(conn_id, connection, captured)
        command = captured.command
        if command.is_response:
            asker = REQUEST if captured.direction == RESPONSE else RESPONSE
            queue = waiting.get((asker, command.opaque))
            if queue:  # an opaque reused before its answer came: answers come in order
                answers[queue.pop(0)] = captured
            else:
                orphans.append(captured)
        else:
            waiting.setdefault((captured.direction, command.opaque), []).append(len(requests))
            requests.append(captured)
            answers.append(None)
    bodies = _BodyCache()
    server, client = connection.server, connection.client
    registered: dict[str, Row] = {}  # brokerAddr -> its last registration on this connection
    shipped: set[bytes] = set()  # the digests of the bodies whose event carried them already
    for request, answer in zip(requests, answers, strict=True):
        yield CALL, call_row(conn_id, client, request, answer, server)
        if request.direction != REQUEST:
            continue
        code = request.command.code
        if code == RequestCode.REGISTER_BROKER:
            registration = registration_row(conn_id, request, answer, bodies, server)
            yield REGISTRATION, registration
            if registration[_BROKER_ADDR] is not None:
                registered[registration[_BROKER_ADDR]] = registration
                summary = bodies.last
                body = None if summary.key in shipped else bodies.last_body
                shipped.add(summary.key)  # type: ignore[arg-type]
                yield EVENT, registration_event(request, registration, summary, body, client, server)
        elif code in NAMING_CODES:
            # UNREGISTER_BROKER, QUERY_DATA_VERSION and BROKER_HEARTBEAT name the broker with
            # REGISTER_BROKER's fields: read by its rules, in one place (bodies/register_header.py)
            header = RegisterBrokerHeader.from_ext(request.command.ext)
            if header.brokerAddr is not None:
                yield EVENT, event_row(
                    request, answer, client, server, broker_addr=header.brokerAddr, broker_name=header.brokerName,
                    alive=code != RequestCode.UNREGISTER_BROKER, cluster=header.clusterName,
                    broker_id=header.brokerId)
        elif code in ADMIN_CODES:
            ext = request.command.ext
            answered = None if answer is None else optional_int(answer.command.ext.get(_ANSWERED_COUNTS.get(code, "")))
            yield EVENT, event_row(request, answer, client, server, broker_name=ext.get("brokerName"),
                                   cluster=ext.get("clusterName"), topic=ext.get("topic"), topic_count=answered,
                                   ext=ext)
        elif (code == RequestCode.GET_ROUTEINFO_BY_TOPIC and answer is not None
              and answer.command.code == ResponseCode.TOPIC_NOT_EXIST):
            yield EVENT, event_row(request, answer, client, server, topic=request.command.ext.get("topic"))
    if is_controller_connection(requests):
        yield from controller_rows(conn_id, connection, list(zip(requests, answers, strict=True)), orphans)
    if connection.closed_ts is not None:
        yield from closed_events(connection, registered)
    gaps = len(connection.to_server.gaps) + len(connection.to_client.gaps)
    yield CONNECTION, ConnectionStats(conn_id, gaps, conversation.lost_bytes, len(conversation.undecodable))


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


def _event(**values: Any) -> Row:
    """An EVENT_ROWS row of the values given, the other columns null."""
    return tuple(values.get(name) for name in _EVENT_COLUMNS)


def event_row(request: CapturedCommand, answer: CapturedCommand | None, client: str, server: str | None,
              **values: Any) -> Row:
    """A request's EVENT row: its time, code, version, answer and sender, and the ``values`` given."""
    command = request.command
    return _event(t=request.ts, code=command.code, version_name=_version_name(command.version),
                  version=command.version, response_code=None if answer is None else answer.command.code,
                  oneway=command.is_oneway, client=client, server=server, **values)


def optional_int(text: str | None) -> int | None:
    """A count an answer's header gives as text; None where absent or not a number."""
    try:
        return None if text is None else int(text)
    except ValueError:
        return None


def frame_row(conn_id: str, connection: Connection, captured: CapturedCommand) -> Row:
    command = captured.command
    header = command.header
    response = command.is_response
    return (
        captured.ts, conn_id, connection.client, connection.server, RESPONSE if response else REQUEST,
        header.code, _code_name(header.code, response), header.opaque, header.flag, command.is_oneway,
        header.version, _version_name(header.version), header.language, _SERIALIZE_NAMES[command.serialize_type],
        header.remark, header.ext_fields or {}, len(command.body or b""), None, None,
    )


def call_row(conn_id: str, client: str, request: CapturedCommand, answer: CapturedCommand | None,
             server: str | None = None) -> Row:
    command = request.command
    response_code = latency_ms = remark = None
    if answer is not None:
        response_code, remark = answer.command.code, answer.command.remark
        latency_ms = (answer.ts - request.ts) * 1000.0
    ext = command.ext
    return (request.ts, conn_id, client, command.code, _code_name(command.code), command.opaque, response_code,
            latency_ms, command.is_oneway, ext.get("topic"), remark, server, ext.get("brokerAddr"), None, None)


def registration_row(conn_id: str, request: CapturedCommand, answer: CapturedCommand | None,
                     bodies: _BodyCache, server: str | None = None) -> Row:
    """``crc_declared`` is bodyCrc32 as sent; ``crc_ok`` is None where the NameServer skips the check
    (bodyCrc32 absent, 0, or not a Java int, e.g. an unmasked CRC >= 2**31), else whether the masked
    CRC32 of the body equals it: False exactly when the NameServer answers "crc32 not match"."""
    command = request.command
    header = RegisterBrokerHeader.from_ext(command.ext)
    compressed = header.compressed
    body = bodies.summary(command.body, compressed, command.version)
    checked = header.bodyCrc32
    crc_ok = None if checked == 0 else body.crc == checked
    return (
        request.ts, conn_id, header.clusterName, header.brokerName, header.brokerAddr,
        header.brokerId, header.haServerAddr, compressed, len(command.body or b""),
        header.bodyCrc32Declared, crc_ok,
        body.topic_count, body.data_version_counter, body.data_version_ms, body.filter_servers,
        None if answer is None else answer.command.code, _version_name(command.version), server,
        None, None,
    )


def registration_event(request: CapturedCommand, registration: Row, body: BodySummary, raw: bytes | None,
                       client: str, server: str | None = None) -> Row:
    """A registration as a sign of life (unless the NameServer refused it: ``alive``), with what
    brokers.csv keeps of it, its header fields and its body for the replay: ``raw`` the first
    time this connection sent it, else None (the replay keeps it by ``body.key``)."""
    columns = dict(zip(_REGISTRATION_COLUMNS, registration, strict=True))
    return _event(
        broker_addr=columns["broker_addr"], broker_name=columns["broker_name"], t=request.ts,
        code=int(RequestCode.REGISTER_BROKER), alive=(columns["response_code"] or 0) == 0 and columns["crc_ok"]
        is not False, topic_count=columns["topic_count"], cluster=columns["cluster"], broker_id=columns["broker_id"],
        version_name=columns["version_name"], response_code=columns["response_code"], crc_ok=columns["crc_ok"],
        body_len=columns["body_len"], compressed=columns["compressed"],
        data_version_counter=columns["data_version_counter"], data_version_ts=columns["data_version_ts"],
        oneway=request.command.is_oneway, server=server, client=client, version=request.command.version,
        ext=request.command.ext, body_key=body.key, body=raw)


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
        body = None if body is None else bytes(body)  # bytes compare with memcmp, memoryviews byte by byte
        last = self._last
        if last is not None and last[1] == compressed and last[2] == version and last[0] == body:
            return last[3]
        summary = _summarise(body, compressed, version)
        self._last = (body, compressed, version, summary)
        return summary


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
