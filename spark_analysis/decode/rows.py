"""One TCP connection's captured segments -> the rows of ``frames/``, ``calls/`` and ``registrations/``.

Pure Python (no Spark), so a Spark task runs it per connection and tests run it directly. Rows are
plain tuples in the column order of ``schema.py``; timestamps are float seconds (and the broker's
dataVersion timestamp integer milliseconds) that the job turns into Spark timestamps.
"""

from __future__ import annotations

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
from spark_analysis.decode.held import HeldTopics
from spark_analysis.decode.schema import REGISTRATION_ROWS
from twisted_namesrv.bodies.register import RegisterBodyError, RegisterBrokerBody, decode_register_body
from twisted_namesrv.bodies.register_header import RegisterBrokerHeader
from twisted_namesrv.remoting import RequestCode, SerializeType
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
#: the registrations/ columns an EVENT row repeats (schema.EVENT_ROWS)
_EVENT_COLUMNS = tuple(_REGISTRATION_COLUMNS.index(name) for name in (
    "topic_count", "cluster", "broker_id"))
_TOPICS_HELD = _REGISTRATION_COLUMNS.index("topics_held")
_REGISTRATION_TAIL = tuple(_REGISTRATION_COLUMNS.index(name) for name in (
    "response_code", "crc_ok", "body_len", "compressed", "data_version_counter", "data_version_ts"))
_BROKER_ADDR, _BROKER_NAME, _RESPONSE_CODE, _VERSION = (
    _REGISTRATION_COLUMNS.index(name) for name in ("broker_addr", "broker_name", "response_code", "version_name"))

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
    held = HeldTopics()
    server = connection.server
    registered: dict[str, Row] = {}  # brokerAddr -> its last registration on this connection
    for request, answer in zip(requests, answers, strict=True):
        yield CALL, call_row(conn_id, connection.client, request, answer, server)
        code = request.command.code
        if code == RequestCode.REGISTER_BROKER and request.direction == REQUEST:
            registration = registration_row(conn_id, request, answer, bodies, held, server)
            yield REGISTRATION, registration
            if registration[_BROKER_ADDR] is not None:
                registered[registration[_BROKER_ADDR]] = registration
                yield EVENT, registration_event(request.ts, registration, _version_name(request.command.version),
                                                request.command.is_oneway, server)
        elif code in NAMING_CODES and request.direction == REQUEST:
            # UNREGISTER_BROKER, QUERY_DATA_VERSION and BROKER_HEARTBEAT name the broker with
            # REGISTER_BROKER's fields: read by its rules, in one place (bodies/register_header.py)
            header = RegisterBrokerHeader.from_ext(request.command.ext)
            if header.brokerAddr is not None:
                if code == RequestCode.UNREGISTER_BROKER:
                    held.unregister(request.ts, header, request.command.version)
                yield EVENT, (header.brokerAddr, header.brokerName, request.ts, code,
                              code != RequestCode.UNREGISTER_BROKER, None, header.clusterName,
                              header.brokerId, _version_name(request.command.version),
                              None if answer is None else answer.command.code, None, None, None, None, None,
                              request.command.is_oneway, server, None, None, None)
        elif code in ADMIN_CODES and request.direction == REQUEST:
            ext = request.command.ext
            yield EVENT, (None, ext.get("brokerName"), request.ts, code, False, None, ext.get("clusterName"), None,
                          _version_name(request.command.version), None if answer is None else answer.command.code,
                          None, None, None, None, None, request.command.is_oneway, server, None, None, ext.get("topic"))
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
        yield EVENT, (addr, name, connection.closed_ts, CONNECTION_CLOSED, False, None, cluster, broker_id,
                      registration[_VERSION], None, None, None, None, None, None, None, connection.server, how,
                      None, None)


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
                     bodies: _BodyCache, held: HeldTopics | None = None, server: str | None = None) -> Row:
    """``crc_declared`` is bodyCrc32 as sent; ``crc_ok`` is None where the NameServer skips the check
    (bodyCrc32 absent, 0, or not a Java int, e.g. an unmasked CRC >= 2**31), else whether the masked
    CRC32 of the body equals it: False exactly when the NameServer answers "crc32 not match"."""
    command = request.command
    header = RegisterBrokerHeader.from_ext(command.ext)
    compressed = header.compressed
    body = bodies.summary(command.body, compressed, command.version)
    checked = header.bodyCrc32
    crc_ok = None if checked == 0 else body.crc == checked
    broker_id = header.brokerId
    accepted = crc_ok is not False and (answer is None or answer.command.code == 0)
    topics_held = held.register(request.ts, header, body.decoded, bodies.last_body, command.version) if (
        held is not None and accepted) else None
    return (
        request.ts, conn_id, header.clusterName, header.brokerName, header.brokerAddr,
        broker_id, header.haServerAddr, compressed, len(command.body or b""),
        header.bodyCrc32Declared, crc_ok,
        body.topic_count, body.data_version_counter, body.data_version_ms, body.filter_servers,
        None if answer is None else answer.command.code, _version_name(command.version), topics_held, server,
        None, None,
    )


def registration_event(ts: float, registration: Row, version: str, oneway: bool, server: str | None = None
                       ) -> Row:
    """A registration as a sign of life, unless the NameServer refused it, with what brokers.csv
    keeps of it (``topics_held``: what the server holds for the broker after it)."""
    return (registration[_BROKER_ADDR], registration[_BROKER_NAME], ts, int(RequestCode.REGISTER_BROKER),
            (registration[_RESPONSE_CODE] or 0) == 0, *(registration[i] for i in _EVENT_COLUMNS), version,
            *(registration[i] for i in _REGISTRATION_TAIL), oneway, server, None, registration[_TOPICS_HELD], None)


class _BodyCache:
    """A broker re-sends the same body every 30 s until its topics change: decode it once."""

    def __init__(self) -> None:
        self._last: tuple[bytes | None, bool, int, BodySummary] | None = None

    @property
    def last_body(self) -> bytes | None:
        """The body last summarised: what tells an unchanged table at once."""
        return None if self._last is None else self._last[0]

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
    try:
        decoded = decode_register_body(body, compressed, version)
    except RegisterBodyError:
        return BodySummary(crc, None, None, None, None)
    data_version = decoded.dataVersion
    return BodySummary(crc, len(decoded.topicConfigTable), data_version.counter, data_version.timestamp,
                       list(decoded.filterServerList), decoded)
