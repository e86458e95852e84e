"""One TCP connection's captured segments -> the rows of ``frames/``, ``calls/`` and ``registrations/``.

Pure Python (no Spark), so a Spark task runs it per connection and tests run it directly. Rows are
plain tuples in the column order of ``schema.py``; timestamps are float seconds (and the broker's
dataVersion timestamp integer milliseconds) that the job turns into Spark timestamps.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import lru_cache
from typing import NamedTuple

from spark_analysis.conversation import REQUEST, RESPONSE, CapturedCommand, Conversation, conversation_of
from spark_analysis.packets import TcpSegment
from spark_analysis.streams import Connection, reassemble
from twisted_namesrv.processor import java_bool, optional_long
from twisted_namesrv.protocol.register import RegisterBodyError, decode_register_body
from twisted_namesrv.remoting import RequestCode, SerializeType
from twisted_namesrv.remoting.codes import code_name, version_name
from twisted_namesrv.remoting.crc import crc32_masked

FRAME, CALL, REGISTRATION, CONNECTION = "frame", "call", "registration", "connection"
HEARTBEAT_CODES = (RequestCode.REGISTER_BROKER, RequestCode.QUERY_DATA_VERSION, RequestCode.BROKER_HEARTBEAT)

_code_name = lru_cache(maxsize=4096)(code_name)
_version_name = lru_cache(maxsize=4096)(version_name)


class ConnectionStats(NamedTuple):
    """What a connection row carries: only counted, never written out."""

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


def batch_rows(batches: Iterable[list[tuple]], server_port: int) -> Iterator[tuple[str, tuple]]:
    """Tagged rows of one 4-tuple from the segment batches that reading tasks made (see
    inputs.SegmentRow), put in capture order: (ts, file, split, record number) is unique."""
    rows = sorted(row for batch in batches for row in batch)
    return connection_rows(((row[0], TcpSegment(*row[4:])) for row in rows), server_port)


def connection_rows(segments: Iterable[tuple[float, TcpSegment]], server_port: int) -> Iterator[tuple[str, tuple]]:
    """Tagged rows for every connection (port reuse split by SYN) among segments in capture order."""
    for connection in reassemble(segments, server_port):
        yield from conversation_rows(conversation_of(connection))


def connection_id(connection: Connection) -> str:
    """Unique across a capture even when a client port is reused: the opening time is part of it."""
    return f"{connection.client}>{connection.server}@{connection.opened_ts:.6f}"


def conversation_rows(conversation: Conversation) -> Iterator[tuple[str, tuple]]:
    """FRAME rows in time order, then a CALL row per request (paired with the answer carrying its
    opaque from the other side), a REGISTRATION row per REGISTER_BROKER request, one CONNECTION row."""
    connection = conversation.connection
    conn_id = connection_id(connection)
    requests: list[CapturedCommand] = []
    answers: list[CapturedCommand | None] = []
    waiting: dict[tuple[str, int], list[int]] = {}  # (side that asked, opaque) -> indexes in requests
    for captured in conversation.commands:
        yield FRAME, frame_row(conn_id, connection, captured)
        command = captured.command
        if command.is_response:
            asker = REQUEST if captured.direction == RESPONSE else RESPONSE
            queue = waiting.get((asker, command.opaque))
            if queue:  # an opaque reused before its answer came: answers come in order
                answers[queue.pop(0)] = captured
        else:
            waiting.setdefault((captured.direction, command.opaque), []).append(len(requests))
            requests.append(captured)
            answers.append(None)
    bodies = _BodyCache()
    for request, answer in zip(requests, answers, strict=True):
        yield CALL, call_row(conn_id, connection.client, request, answer)
        if request.command.code == RequestCode.REGISTER_BROKER and request.direction == REQUEST:
            yield REGISTRATION, registration_row(conn_id, request, answer, bodies)
    gaps = len(connection.to_server.gaps) + len(connection.to_client.gaps)
    yield CONNECTION, ConnectionStats(gaps, conversation.lost_bytes, len(conversation.undecodable))


def frame_row(conn_id: str, connection: Connection, captured: CapturedCommand) -> tuple:
    command = captured.command
    header = command.header
    response = command.is_response
    return (
        captured.ts, conn_id, connection.client, connection.server, RESPONSE if response else REQUEST,
        header.code, _code_name(header.code, response), header.opaque, header.flag, command.is_oneway,
        header.version, _version_name(header.version), header.language, SerializeType(command.serialize_type).name,
        header.remark, header.ext_fields or {}, len(command.body or b""),
    )


def call_row(conn_id: str, client: str, request: CapturedCommand, answer: CapturedCommand | None) -> tuple:
    command = request.command
    response_code = latency_ms = None
    if answer is not None:
        response_code = answer.command.code
        latency_ms = (answer.ts - request.ts) * 1000.0
    return (request.ts, conn_id, client, command.code, _code_name(command.code), command.opaque, response_code,
            latency_ms)


def registration_row(conn_id: str, request: CapturedCommand, answer: CapturedCommand | None,
                     bodies: _BodyCache) -> tuple:
    """``crc_declared`` is bodyCrc32 as sent; ``crc_ok`` is None where the NameServer skips the check
    (bodyCrc32 absent, 0, or not a Java int, e.g. an unmasked CRC >= 2**31), else whether the masked
    CRC32 of the body equals it: False exactly when the NameServer answers "crc32 not match"."""
    command = request.command
    ext = command.ext
    compressed = java_bool(ext.get("compressed"))
    body = bodies.summary(command.body, compressed, command.version)
    checked = optional_long(ext.get("bodyCrc32"), bits=32) or 0
    return (
        request.ts, conn_id, ext.get("clusterName"), ext.get("brokerName"), ext.get("brokerAddr"),
        optional_long(ext.get("brokerId")), ext.get("haServerAddr"), compressed, len(command.body or b""),
        optional_long(ext.get("bodyCrc32")), None if checked == 0 else body.crc == checked,
        body.topic_count, body.data_version_counter, body.data_version_ms, body.filter_servers,
        None if answer is None else answer.command.code,
    )


class _BodyCache:
    """A broker re-sends the same body every 30 s until its topics change: decode it once."""

    def __init__(self) -> None:
        self._last: tuple[bytes | None, bool, int, BodySummary] | None = None

    def summary(self, body: bytes | None, compressed: bool, version: int) -> BodySummary:
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
                       list(decoded.filterServerList))
