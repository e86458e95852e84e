"""Reassemble TCP connections from captured segments into in-order byte streams per direction.

The replay test and the Spark jobs need what each side's application actually read: bytes in
sequence order, each once, with the time they became readable. So retransmitted and
overlapping bytes are dropped (the copy delivered first wins), out-of-order segments wait for
the hole before them, and a hole never filled is reported as a gap, after which the stream
carries on so that a frame parser can resynchronise.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from spark_analysis.packets import ACK, FIN, RST, SYN, TcpSegment

DEFAULT_SERVER_PORT = 9876
_SEQ_MOD = 1 << 32
_HALF_SEQ = 1 << 31


class Chunk(NamedTuple):
    """In-order stream bytes starting at stream ``offset``, readable from time ``ts``."""

    ts: float
    offset: int
    data: bytes


class Direction(list[Chunk]):
    """One direction's reassembled bytes as chunks in stream order.

    ``gaps`` holds (offset, length) of every stretch that was never captured; the chunk after a
    gap starts at ``offset + length``. ``from_syn`` says offset 0 is the first byte after the
    sender's SYN, i.e. where its first frame starts; otherwise the capture began mid-stream.
    """

    def __init__(self) -> None:
        super().__init__()
        self.gaps: list[tuple[int, int]] = []
        self.from_syn = False


@dataclass(eq=False)
class Connection:
    """One TCP connection: who opened it, how it ended, and both reassembled directions."""

    conn_id: int
    client: str
    server: str
    opened_ts: float
    closed_ts: float | None = None
    close_kind: str | None = None  # "fin" or "rst": whichever came first, from either side
    first_close_by: str | None = None  # "client" or "server"
    to_server: Direction = field(default_factory=Direction, repr=False)
    to_client: Direction = field(default_factory=Direction, repr=False)


def reassemble(
    segments: Iterable[tuple[float, TcpSegment]], server_port: int = DEFAULT_SERVER_PORT
) -> list[Connection]:
    """Group (ts, segment) pairs, in capture order, into connections in order of first packet.

    A SYN without ACK opens a new connection on its 4-tuple unless it repeats the SYN of a
    connection that is still open there (same ISN): that is how port reuse is told apart from
    a retransmitted SYN.
    """
    current: dict[tuple[str, str], _Tracker] = {}
    trackers: list[_Tracker] = []
    for ts, segment in segments:
        key = (segment.src, segment.dst) if segment.src < segment.dst else (segment.dst, segment.src)
        tracker = current.get(key)
        if tracker is None or segment.flags & SYN and tracker.is_new_connection(segment):
            tracker = _Tracker.open(len(trackers), ts, segment, server_port)
            current[key] = tracker
            trackers.append(tracker)
        tracker.add(ts, segment)
    for tracker in trackers:
        tracker.finish()
    return [tracker.connection for tracker in trackers]


def stream_bytes(direction: Iterable[Chunk]) -> list[Chunk]:
    """Merge chunks into maximal contiguous runs; a run's ts is that of its first chunk.

    A direction without gaps gives at most one run: its whole byte stream.
    """
    runs: list[Chunk] = []
    parts: list[bytes] = []
    run_start, run_end, run_ts = 0, 0, 0.0
    for chunk in direction:
        if parts and chunk.offset != run_end:
            runs.append(Chunk(run_ts, run_start, b"".join(parts)))
            parts = []
        if not parts:
            run_start, run_ts = chunk.offset, chunk.ts
        parts.append(chunk.data)
        run_end = chunk.offset + len(chunk.data)
    if parts:
        runs.append(Chunk(run_ts, run_start, b"".join(parts)))
    return runs


def _port(endpoint: str) -> int:
    return int(endpoint.rpartition(":")[2])


class _Tracker:
    """A connection being built, with the reassembly state that the result does not need."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.client_isn: int | None = None
        self.to_server = _Reassembler(connection.to_server)
        self.to_client = _Reassembler(connection.to_client)

    @classmethod
    def open(cls, conn_id: int, ts: float, first: TcpSegment, server_port: int) -> _Tracker:
        """Start a connection; the client is the SYN sender, else the side off the server port."""
        syn_ack = first.flags & (SYN | ACK)
        if syn_ack == SYN:
            client = first.src
        elif syn_ack == SYN | ACK:
            client = first.dst
        elif _port(first.src) == server_port and _port(first.dst) != server_port:
            client = first.dst
        else:
            client = first.src
        server = first.dst if client == first.src else first.src
        return cls(Connection(conn_id, client, server, ts))

    def is_new_connection(self, segment: TcpSegment) -> bool:
        if segment.flags & (SYN | ACK) != SYN:
            return False
        still_open = self.connection.closed_ts is None
        return not (still_open and segment.src == self.connection.client and segment.seq == self.client_isn)

    def add(self, ts: float, segment: TcpSegment) -> None:
        connection = self.connection
        from_client = segment.src == connection.client
        flags = segment.flags
        if flags & (FIN | RST) and connection.closed_ts is None:
            connection.closed_ts = ts
            connection.close_kind = "rst" if flags & RST else "fin"
            connection.first_close_by = "client" if from_client else "server"
        if flags & RST:  # a reset's sequence number and payload say nothing about the stream
            return
        if flags & (SYN | ACK) == SYN and from_client:
            self.client_isn = segment.seq
        reassembler = self.to_server if from_client else self.to_client
        # A SYN consumes one sequence number: its (rare) data starts after it.
        syn = bool(flags & SYN)
        reassembler.add(ts, segment.seq + 1 if syn else segment.seq, segment.payload, syn)

    def finish(self) -> None:
        self.to_server.finish()
        self.to_client.finish()


class _Reassembler:
    """In-order delivery of one direction. Offsets count from the first byte after the ISN
    (or from the first sequence number seen when the capture starts mid-stream) and are
    unwrapped around the expected position, so 32-bit wraparound and >4 GiB streams work.
    """

    def __init__(self, out: Direction) -> None:
        self.out = out
        self.base_seq: int | None = None
        self.next_offset = 0
        self.pending: list[tuple[int, int, float, bytes]] = []  # heap of (offset, arrival, ts, data)
        self.arrivals = 0

    def add(self, ts: float, seq: int, payload: bytes, syn: bool = False) -> None:
        if self.base_seq is None:
            self.base_seq = seq % _SEQ_MOD
            self.out.from_syn = syn
        if not payload:
            return
        delta = (seq - self.base_seq - self.next_offset) % _SEQ_MOD
        offset = self.next_offset + (delta - _SEQ_MOD if delta >= _HALF_SEQ else delta)
        if offset + len(payload) <= self.next_offset:
            return  # retransmission of bytes already delivered
        if offset > self.next_offset:
            heapq.heappush(self.pending, (offset, self.arrivals, ts, payload))
            self.arrivals += 1
            return
        if offset == self.next_offset and not self.pending:  # the common case: the next bytes, in order
            self.out.append(Chunk(ts, offset, payload))
            self.next_offset += len(payload)
            return
        self._deliver(ts, offset, payload)
        # Buffered bytes become readable only now, so they take this packet's timestamp.
        while self.pending and self.pending[0][0] <= self.next_offset:
            pending_offset, _, _, data = heapq.heappop(self.pending)
            self._deliver(ts, pending_offset, data)

    def finish(self) -> None:
        """Give up on holes never filled: record each as a gap and deliver what follows it."""
        while self.pending:
            offset, _, ts, data = heapq.heappop(self.pending)
            if offset > self.next_offset:
                self.out.gaps.append((self.next_offset, offset - self.next_offset))
                self.next_offset = offset
            self._deliver(ts, offset, data)

    def _deliver(self, ts: float, offset: int, data: bytes) -> None:
        """Append the part of ``data`` past what was already delivered (the first copy wins)."""
        skip = self.next_offset - offset
        if skip >= len(data):
            return
        fresh = data[skip:] if skip > 0 else data
        self.out.append(Chunk(ts, self.next_offset, fresh))
        self.next_offset += len(fresh)
