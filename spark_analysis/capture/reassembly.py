"""Reassemble TCP connections from captured segments into in-order byte streams per direction.

The replay test and the Spark jobs need what each side's application actually read: bytes in
sequence order, each once, with the time they became readable. So retransmitted and
overlapping bytes are dropped (the copy delivered first wins), out-of-order segments wait for
the hole before them, and a hole never filled is reported as a gap, after which the stream
carries on so that a frame parser can resynchronise.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from spark_analysis.capture.captured import Buffer
from spark_analysis.capture.packets import ACK, FIN, RST, SYN, TcpSegment
from twisted_namesrv.state.config import DEFAULT_LISTEN_PORT

DEFAULT_SERVER_PORT = DEFAULT_LISTEN_PORT
#: which side of a connection whose SYN was not captured is the server: an endpoint ("ip:port") of
#: the set, or one on a port of it (the job finds the listening endpoints in the capture itself)
Servers = frozenset[str | int]
DEFAULT_SERVERS: Servers = frozenset({DEFAULT_SERVER_PORT})


def is_server(endpoint: str, servers: Servers) -> bool:
    return endpoint in servers or _port(endpoint) in servers


def as_servers(given: Servers | int) -> Servers:
    """A port alone (``--port``, older callers) as Servers."""
    return frozenset({given}) if isinstance(given, int) else given


def server_ports(servers: Servers) -> tuple[int, ...]:
    """The ports among ``servers``: what a reading keeps (capture.packets.Ports)."""
    return tuple(sorted(s for s in servers if isinstance(s, int)))

_CONTROL = SYN | FIN | RST
#: the SEGMENT columns the reassembly walks (``missing`` is looked up only for the segments cut)
_WALKED = ("ts", "file", "order", "offset", "length", "seq", "ack", "flags", "forward")
_SEQ_MOD = 1 << 32
_HALF_SEQ = 1 << 31
#: timestamps going back by more than this within a file are a clock stepped back (or files joined
#: out of order), not the reordering of packets captured on several CPUs or interfaces
STEP_BACK_TOLERANCE_S = 5.0
_chunk = tuple.__new__  # _chunk(Chunk, fields): a Chunk without NamedTuple's Python-level __new__ (a chunk per segment)
#: the fewest rows a plain stretch (_plain_stretches) must have to be delivered at once: below, the
#: numpy calls that set it up cost more than the rows walked one by one
_STRETCH_ROWS = 16
#: how many times in a row a stretch is tried again a row further on when it could not start
_RETRIES = 3
#: how far before a stream's first captured byte the receiver's first acknowledgment may put its
#: start (a capture begun mid-stream while segments arrived out of order: bytes it had not received)
_REBASE_WINDOW = 1 << 20
#: the segments of a stream begun before the capture held until its receiver's first acknowledgment
#: says where it starts: past them (a capture of one direction, no acknowledgment), it starts at the first
_HELD_AT_START = 64


class Chunk(NamedTuple):
    """In-order stream bytes starting at stream ``offset``, readable from time ``ts``."""

    ts: float
    offset: int
    data: Buffer


class Direction:
    """One direction's reassembled bytes as chunks in stream order, kept as columns (``ts``,
    ``offset``, ``data``: a chunk is a segment, and a tuple a segment cost more than the rest of its
    reassembly's delivery); iterating it gives Chunks.

    ``gaps`` holds (offset, length) of every stretch that was never captured (packets the capture
    lost: a sequence gap); the chunk after a gap starts at ``offset + length``. ``uncaptured`` holds
    (offset, length) of the stretches a snap length cut off packets that were captured: sent,
    seen, not kept (their end is known, so frames are followed across them). ``unseen`` holds
    (offset, length) of the stretches of a stream begun before the capture that no captured segment
    carried but that its receiver already had (its SACK blocks said so) as the capture began: they
    arrived out of order before it, so they are no gap and no loss, and frames are followed across
    them as across ``uncaptured``. ``from_syn`` says
    offset 0 is the first byte after the sender's SYN, i.e. where its first frame starts;
    otherwise the capture began mid-stream. ``unheard``: not one packet of this direction was
    captured, though the other side's acknowledgments say it sent bytes: a capture of one direction
    (``dst port 9876``, ``tcpdump -Q in``, a one-way mirror), not a silent peer (_unheard_end).
    """

    __slots__ = ("ts", "offset", "data", "gaps", "uncaptured", "unseen", "from_syn", "unheard")

    def __init__(self) -> None:
        self.ts: list[float] = []
        self.offset: list[int] = []
        self.data: list[Buffer] = []
        self.gaps: list[tuple[int, int]] = []
        self.uncaptured: list[tuple[int, int]] = []
        self.unseen: list[tuple[int, int]] = []
        self.from_syn = False
        self.unheard = False

    def append(self, ts: float, offset: int, data: Buffer) -> None:
        self.ts.append(ts)
        self.offset.append(offset)
        self.data.append(data)

    def __len__(self) -> int:
        return len(self.ts)

    def __iter__(self) -> Iterator[Chunk]:
        return map(_chunk, itertools.repeat(Chunk), zip(self.ts, self.offset, self.data, strict=True))

    def __getitem__(self, index: int) -> Chunk:
        return Chunk(self.ts[index], self.offset[index], self.data[index])


#: One TCP segment of a 4-tuple. (ts, file, order) is its place in capture order, ``order`` being
#: unique within a file; its payload is ``length`` bytes at ``offset`` of its file's source buffer;
#: ``forward`` says it was sent by the lower of the 4-tuple's two endpoints.
#: ``missing``: the payload bytes after those ``length`` that a snap length cut off (sent, not captured).
#: ``sack_left``, ``sack_right``: the span of its SACK blocks (TcpSegment.sack), both 0 when it has none.
SEGMENT = np.dtype([("ts", "<f8"), ("file", "<i4"), ("order", "<i8"), ("offset", "<i8"), ("length", "<i4"),
                    ("seq", "<u4"), ("ack", "<u4"), ("flags", "<u2"), ("forward", "?"), ("missing", "<i4"),
                    ("sack_left", "<u4"), ("sack_right", "<u4")])


class SegmentTable(NamedTuple):
    """The segments of one 4-tuple (both directions, every connection on it) in capture order."""

    ends: tuple[str, str]  # (lower, higher) "ip:port"
    rows: np.ndarray  # of SEGMENT
    sources: Mapping[int, Buffer]  # file -> the buffer its payload offsets index


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
    first_packet: tuple[float, int, int] = field(default=(0.0, 0, 0), repr=False)  # (ts, file, order)


def reassemble(
    segments: Iterable[tuple[float, TcpSegment]], servers: Servers | int = DEFAULT_SERVERS
) -> list[Connection]:
    """Group (ts, segment) pairs, in capture order, into connections in order of first packet."""
    servers = as_servers(servers)
    connections = [c for table in segment_tables(segments) for c in reassemble_table(table, servers)]
    connections.sort(key=lambda c: c.first_packet)
    for conn_id, connection in enumerate(connections):
        connection.conn_id = conn_id
    return connections


def segment_tables(segments: Iterable[tuple[float, TcpSegment]]) -> list[SegmentTable]:
    """(ts, segment) pairs in capture order as one table per 4-tuple, over one payload buffer."""
    by_ends: dict[tuple[str, str], list[tuple[Any, ...]]] = {}
    payloads: list[bytes] = []
    offset = 0
    for order, (ts, segment) in enumerate(segments):
        src, dst = segment.src, segment.dst
        ends = (src, dst) if src < dst else (dst, src)
        length = len(segment.payload)
        by_ends.setdefault(ends, []).append(
            (ts, 0, order, offset, length, segment.seq, segment.ack, segment.flags, src == ends[0], segment.missing,
             *segment.sack))
        payloads.append(segment.payload)
        offset += length
    sources = {0: b"".join(payloads)}
    return [SegmentTable(ends, np.array(rows, SEGMENT), sources) for ends, rows in by_ends.items()]


def merge_tables(tables: Iterable[SegmentTable]) -> SegmentTable:
    """Tables of one 4-tuple read from different files or byte ranges as one, in capture order:
    by time, then file, then place in the file (the capture order of several files is by time).
    A file whose clock stepped back (its stamps going back more than STEP_BACK_TOLERANCE_S) keeps
    its own order: by time its packets after the step would be read among those stamped the same
    before it, the later bytes of a connection ahead of the earlier, and the earlier dropped as
    retransmissions (_capture_times)."""
    tables = list(tables)
    rows = np.concatenate([table.rows for table in tables]) if len(tables) > 1 else tables[0].rows
    if not _in_capture_order(rows, rows["ts"]):  # one file's piece mostly is: no sort, no copy
        times = _capture_times(rows)
        if not _in_capture_order(rows, times):
            rows = rows[np.lexsort((rows["order"], rows["file"], times))]
    sources = {file: buffer for table in tables for file, buffer in table.sources.items()}
    return SegmentTable(tables[0].ends, rows, sources)


def _in_capture_order(rows: np.ndarray, times: np.ndarray) -> bool:
    """Whether ``rows`` are sorted by (``times``, file, order) already (what a stable sort leaves as is)."""
    file, order = rows["file"], rows["order"]
    later, same = times[1:] > times[:-1], times[1:] == times[:-1]
    next_file, same_file = file[1:] > file[:-1], file[1:] == file[:-1]
    return bool(np.all(later | same & (next_file | same_file & (order[1:] >= order[:-1]))))


def _capture_times(rows: np.ndarray) -> np.ndarray:
    """The time each row is ordered by: its stamp, except in a file whose stamps step back more
    than STEP_BACK_TOLERANCE_S, where it is the latest stamp of the file up to it (in the file's
    order), so that its rows keep the file's order and sit among other files' by when they were
    written. One sort by (file, order), then each file's run of rows once: a connection spanning
    thousands of rotated files costs no pass over all its rows per file."""
    times: np.ndarray = rows["ts"].copy()
    in_files = np.lexsort((rows["order"], rows["file"]))
    files, stamps = rows["file"][in_files], times[in_files]
    starts = np.flatnonzero(files[1:] != files[:-1]) + 1
    for start, end in zip([0, *starts.tolist()], [*starts.tolist(), len(rows)], strict=True):
        latest = np.maximum.accumulate(stamps[start:end])
        if (latest - stamps[start:end]).max() > STEP_BACK_TOLERANCE_S:
            times[in_files[start:end]] = latest
    return times


def reassemble_table(table: SegmentTable, servers: Servers = DEFAULT_SERVERS) -> list[Connection]:
    """The connections on one 4-tuple, in order.

    A SYN without ACK opens a new connection on its 4-tuple unless it repeats the SYN of a
    connection that is still open there (same ISN): that is how port reuse is told apart from
    a retransmitted SYN.
    """
    lower, higher = table.ends
    sources = {file: memoryview(buffer) for file, buffer in table.sources.items()}
    rows = _fullest_copies(table.rows)
    cut_rows = np.flatnonzero(rows["missing"])
    # (file, order) -> bytes not captured, of the few segments a snap length cut: nothing to look up
    # (one falsy test a segment) in a capture taken whole
    cut = dict(zip(zip(rows["file"][cut_rows].tolist(), rows["order"][cut_rows].tolist(), strict=True),
                   rows["missing"][cut_rows].tolist(), strict=True)) if len(cut_rows) else None
    sacks = _sacks(rows)
    trackers: list[_Tracker] = []
    tracker = None
    client_forward = False  # the tracker's client is the lower endpoint
    position = 0  # rows walked or delivered
    stretches = [(start, end, _RETRIES) for start, end in reversed(_plain_stretches(rows))]  # the next one last
    while True:
        start, end, retries = stretches.pop() if stretches else (len(rows), len(rows), 0)
        start = min(max(start, position), len(rows))
        if start < len(rows) and end - start < _STRETCH_ROWS:
            continue
        # the rows before the stretch one by one (after the last stretch: all that are left)
        for ts, file, order, offset, length, seq, ack, flags, forward in _walked(rows, position, start):
            missing = cut.get((file, order), 0) if cut else 0
            if tracker is not None and not flags & _CONTROL:  # data or a bare ACK: straight to its direction
                to_server = forward == client_forward
                reassembler, other = (tracker.to_server, tracker.to_client) if to_server else (
                    tracker.to_client, tracker.to_server)
                if flags & ACK and (other.pending or other.watching):
                    other.receiver_ack(ack, sacks.get((file, order)) if sacks else None)
                if length or missing:
                    reassembler.add(ts, seq, sources[file][offset:offset + length], missing=missing)
                elif reassembler.base_seq is None:
                    reassembler.add(ts, seq, b"")
                continue
            src = lower if forward else higher
            if tracker is None or flags & SYN and tracker.is_new_connection(src, seq, flags):
                dst = higher if forward else lower
                tracker = _Tracker.open(len(trackers), ts, src, dst, flags, servers)
                tracker.connection.first_packet = (ts, file, order)
                client_forward = tracker.connection.client == lower
                trackers.append(tracker)
            tracker.add(ts, src, seq, flags, sources[file][offset:offset + length] if length else b"", missing, ack,
                        sacks.get((file, order)) if sacks else None)
        position = start
        if start == len(rows):
            break
        done = 0 if tracker is None else _deliver_stretch(tracker, client_forward, rows[start:end], sources)
        if done:
            position += done
            retries = _RETRIES
        if retries:  # the row that stopped it (a retransmission, a segment ahead of a hole) walked, then again
            stretches.append((position + 1, end, retries - 1))
    for tracker in trackers:
        tracker.finish()
    unheard = _unheard_end(rows, table.ends)
    for tracker in trackers if unheard else ():
        connection = tracker.connection
        (connection.to_client if connection.server == unheard else connection.to_server).unheard = True
    return [tracker.connection for tracker in trackers]


def _fullest_copies(rows: np.ndarray) -> np.ndarray:
    """``rows`` with the first copy of each packet captured several times in a file (the same direction,
    seq, ack, flags and length sent: dumpcap given two interfaces that see it, ``-i any`` and ``-i lo``)
    carrying the payload of the copy that kept most of it, where a snap length cut one copy more
    than another (``-s 96`` on one interface, ``-s 256`` on the other): the bytes are the same, and
    the first copy delivered wins (the others are retransmissions), so it must be the fullest. A
    capture cut nowhere is returned as is."""
    if not rows["missing"].any():
        return rows
    sent = rows["length"].astype(np.int64) + rows["missing"]
    data = np.flatnonzero(sent > 0)
    keys = (rows["file"][data], rows["forward"][data], rows["seq"][data], rows["ack"][data], rows["flags"][data],
            sent[data])
    by_key = data[np.lexsort((data, *reversed(keys)))]  # each packet's copies together, in capture order
    if len(by_key) < 2:
        return rows
    ordered = [key[np.searchsorted(data, by_key)] for key in keys]
    starts = np.flatnonzero(np.any([key[1:] != key[:-1] for key in ordered], axis=0)) + 1
    firsts = np.concatenate(([0], starts))
    lengths = rows["length"][by_key]
    fullest = np.maximum.reduceat(lengths, firsts)
    positions = np.arange(len(by_key))
    group = np.repeat(np.arange(len(firsts)), np.diff(np.append(firsts, len(by_key))))
    where = np.minimum.reduceat(np.where(lengths == fullest[group], positions, len(by_key)), firsts)
    better = np.flatnonzero(lengths[firsts] < fullest)
    if not len(better):
        return rows
    rows = rows.copy()
    first, best = by_key[firsts[better]], by_key[where[better]]
    for name in ("offset", "length", "missing"):
        rows[name][first] = rows[name][best]
    return rows


def _sacks(rows: np.ndarray) -> dict[tuple[int, int], tuple[int, int]] | None:
    """(file, order) -> the span of its SACK blocks, of the few segments that carry any (a receiver
    acknowledging out of order); None when none does."""
    chosen = np.flatnonzero(rows["sack_left"] | rows["sack_right"])
    if not len(chosen):
        return None
    keys = zip(rows["file"][chosen].tolist(), rows["order"][chosen].tolist(), strict=True)
    return dict(zip(keys, zip(rows["sack_left"][chosen].tolist(), rows["sack_right"][chosen].tolist(), strict=True),
                    strict=True))


def _unheard_end(rows: np.ndarray, ends: tuple[str, str]) -> str | None:
    """The end of a 4-tuple not one of whose packets was captured while the other end's ACKs moved
    on (acknowledging bytes it did send): a capture of one direction. A peer that went silent (a
    partition, a dead host) leaves the other's ACK number standing, so is never taken for one."""
    forward = rows["forward"]
    if forward.all():
        silent = ends[1]
    elif not forward.any():
        silent = ends[0]
    else:
        return None
    acks = rows["ack"][rows["flags"] & ACK != 0]
    return silent if len(acks) and acks.min() != acks.max() else None


def _walked(rows: np.ndarray, start: int, stop: int) -> Iterator[tuple[Any, ...]]:
    """The _WALKED columns of ``rows[start:stop]`` as Python values, row by row: only the rows walked
    one by one are converted (those a stretch delivers never are)."""
    if stop - start == 1:
        row = rows[start]
        return iter(((*(row[name].item() for name in _WALKED),),))
    part = rows[start:stop]
    return zip(*(part[name].tolist() for name in _WALKED), strict=True)


def _plain_stretches(rows: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) of the stretches of at least _STRETCH_ROWS rows that the walk above would
    deliver one by one on its fast path (the in-order case of _Reassembler.add), told from the
    columns: data or bare ACKs, no SYN, FIN or RST, nothing a snap length cut, and each direction's
    data following on from its previous data segment in sequence. Whether a stretch's first data
    segment of each direction follows what its direction delivered is only known when the walk
    gets there (_deliver_stretch)."""
    if len(rows) < _STRETCH_ROWS:
        return []
    length, forward = rows["length"], rows["forward"]
    seq = rows["seq"].astype(np.int64)
    plain = (rows["flags"] & _CONTROL == 0) & (rows["missing"] == 0)
    follows = np.zeros(len(rows), bool)
    for sender in (True, False):
        data = np.flatnonzero((length > 0) & (forward == sender))
        follows[data[1:]] = seq[data[1:]] == (seq[data[:-1]] + length[data[:-1]]) % _SEQ_MOD
    breaks = ~plain | ((length > 0) & ~follows)
    # a stretch starts where a plain row breaks the one before (a data segment that may still follow
    # what its direction delivered) or follows a row that is not plain
    after_break = np.ones(len(rows), bool)
    after_break[1:] = ~plain[:-1]
    starts = np.flatnonzero(plain & (breaks | after_break))
    break_at = np.flatnonzero(breaks)
    ends = np.append(break_at, len(rows))[np.searchsorted(break_at, starts, side="right")]
    long = ends - starts >= _STRETCH_ROWS
    return list(zip(starts[long].tolist(), ends[long].tolist(), strict=True))


def _deliver_stretch(tracker: _Tracker, client_forward: bool, rows: np.ndarray, sources: Mapping[int, memoryview]
                     ) -> int:
    """Deliver a plain stretch's data segments as the walk's fast path would, one column operation
    per direction, when that is what the walk would do: nothing pending in either direction, both
    begun, and the stretch's first data segment of a direction at the sequence number it expects
    (the stretch is cut before one that is not). Returns how many of its rows it delivered."""
    to_server, to_client = tracker.to_server, tracker.to_client
    if (to_server.pending or to_client.pending or to_server.next_seq is None or to_client.next_seq is None
            or to_server.watching or to_client.watching):
        return 0
    first = rows[0]
    if first["length"] and int(first["seq"]) != (to_server if first["forward"] == client_forward else
                                                 to_client).next_seq:
        return 0  # told before any column operation: a refusal costs little
    length, forward, seq = rows["length"], rows["forward"], rows["seq"]
    has_data = length > 0
    count = len(rows)
    chosen = []
    for sender, mask in ((True, has_data & forward), (False, has_data & ~forward)):
        reassembler = to_server if sender == client_forward else to_client
        data = np.flatnonzero(mask)
        if len(data) and int(seq[data[0]]) != reassembler.next_seq:
            count = min(count, int(data[0]))
        chosen.append((reassembler, data))
    for reassembler, data in chosen:
        if count < len(rows):
            data = data[data < count]
        if not len(data):
            continue
        lengths = length[data].astype(np.int64)
        ends = np.cumsum(lengths)
        out = reassembler.out
        out.ts.extend(rows["ts"][data].tolist())
        out.offset.extend((reassembler.next_offset + ends - lengths).tolist())
        out.data.extend(_views(rows["file"][data], rows["offset"][data], lengths, sources))
        reassembler.next_offset += int(ends[-1])
        reassembler.next_seq = (int(seq[data[-1]]) + int(lengths[-1])) % _SEQ_MOD
    return count


def _views(files: np.ndarray, starts: np.ndarray, lengths: np.ndarray, sources: Mapping[int, memoryview]
           ) -> Iterator[memoryview]:
    """Views of segments' payloads (``lengths`` bytes at ``starts`` of their ``files``' sources):
    by map, no Python loop per segment, when they lie in one source (a file's: always, but for
    several files' pieces)."""
    slices = map(slice, starts.tolist(), (starts + lengths).tolist())
    if (files != files[0]).any():
        return map(memoryview.__getitem__, map(sources.__getitem__, files.tolist()), slices)
    return map(sources[int(files[0])].__getitem__, slices)


def stream_bytes(direction: Iterable[Chunk]) -> list[Chunk]:
    """Merge chunks into maximal contiguous runs; a run's ts is that of its first chunk.

    A direction without gaps gives at most one run: its whole byte stream.
    """
    runs: list[Chunk] = []
    parts: list[Buffer] = []
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
    def open(cls, conn_id: int, ts: float, src: str, dst: str, flags: int, servers: Servers) -> _Tracker:
        """Start a connection; the client is the SYN sender, else the side that is not a server."""
        syn_ack = flags & (SYN | ACK)
        if syn_ack == SYN:
            client = src
        elif syn_ack == SYN | ACK:
            client = dst
        elif is_server(src, servers) and not is_server(dst, servers):
            client = dst
        else:
            client = src
        server = dst if client == src else src
        return cls(Connection(conn_id, client, server, ts))

    def is_new_connection(self, src: str, seq: int, flags: int) -> bool:
        if flags & (SYN | ACK) != SYN:
            return False
        still_open = self.connection.closed_ts is None
        return not (still_open and src == self.connection.client and seq == self.client_isn)

    def add(self, ts: float, src: str, seq: int, flags: int, payload: Buffer, missing: int = 0, ack: int = 0,
            sack: tuple[int, int] | None = None) -> None:
        connection = self.connection
        from_client = src == connection.client
        if flags & (FIN | RST) and connection.closed_ts is None:
            connection.closed_ts = ts
            connection.close_kind = "rst" if flags & RST else "fin"
            connection.first_close_by = "client" if from_client else "server"
        if flags & RST:  # a reset's sequence number and payload say nothing about the stream
            return
        if flags & (SYN | ACK) == SYN and from_client:
            self.client_isn = seq
        reassembler, other = (self.to_server, self.to_client) if from_client else (self.to_client, self.to_server)
        if flags & ACK and other.watching:
            other.receiver_ack(ack, sack)
        # A SYN consumes one sequence number: its (rare) data starts after it.
        syn = bool(flags & SYN)
        reassembler.add(ts, seq + 1 if syn else seq, payload, syn, missing)

    def finish(self) -> None:
        self.to_server.finish()
        self.to_client.finish()


class _Reassembler:
    """In-order delivery of one direction. Offsets count from the first byte after the ISN
    (or from the first sequence number seen when the capture starts mid-stream) and are
    unwrapped around the expected position, so 32-bit wraparound and >4 GiB streams work.

    A stream begun before the capture (no SYN) starts where its receiver's first acknowledgment
    says, when that is before its first segment captured: segments arriving out of order as the
    capture began (a later one captured first) are the stream's, not retransmissions. Until then
    its segments are held (``provisional``, at most _HELD_AT_START), and until its start has
    settled (``watching``) the span of each SACK block its receiver sends is noted, and the bytes
    before its first acknowledgment captured when segments came before it: bytes it had then, out of
    order, that no captured segment carried arrived before the capture (Direction.unseen).
    """

    def __init__(self, out: Direction) -> None:
        self.out = out
        self.base_seq: int | None = None
        self.next_offset = 0
        self.next_seq: int | None = None  # the sequence number of the byte at next_offset
        # heap of (offset, arrival, ts, data, bytes not captured after it)
        self.pending: list[tuple[int, int, float, Buffer, int]] = []
        self.arrivals = 0
        self.provisional = False
        self.watching = True
        #: (ts, seq, payload, missing) of the segments before the first one captured, while provisional
        self.before: list[tuple[float, int, Buffer, int]] = []
        #: spans (left, right sequence numbers) the receiver had while watching: its SACK blocks', and
        #: all before its first acknowledgment captured where that came after segments it acknowledges
        self.sacked: list[tuple[int, int]] = []
        self.heard = False  # an acknowledgment of its receiver was captured

    def add(self, ts: float, seq: int, payload: Buffer, syn: bool = False, missing: int = 0) -> None:
        """``missing``: the bytes after ``payload`` that the segment carried but a snap length cut."""
        if seq == self.next_seq and payload and not self.pending and not missing:  # the common case: in order
            self.out.append(ts, self.next_offset, payload)
            self.next_offset += len(payload)
            self.next_seq = (seq + len(payload)) % _SEQ_MOD
            return
        if self.base_seq is None:
            self.base_seq = seq % _SEQ_MOD
            self.out.from_syn = syn
            if syn:
                self.next_seq, self.watching = self.base_seq, False
            else:  # begun before the capture: where it starts is known at its receiver's first acknowledgment
                self.provisional = True
        if not payload and not missing:
            return
        delta = (seq - self.base_seq - self.next_offset) % _SEQ_MOD
        offset = self.next_offset + (delta - _SEQ_MOD if delta >= _HALF_SEQ else delta)
        if self.provisional:
            self._hold(ts, seq, offset, payload, missing)
            return
        if offset + len(payload) + missing <= self.next_offset:
            return  # retransmission of bytes already delivered
        if offset > self.next_offset:
            heapq.heappush(self.pending, (offset, self.arrivals, ts, payload, missing))
            self.arrivals += 1
            return
        self._deliver(ts, offset, payload, missing)
        # Buffered bytes become readable only now, so they take this packet's timestamp.
        while self.pending and self.pending[0][0] <= self.next_offset:
            pending_offset, _, _, data, cut = heapq.heappop(self.pending)
            self._deliver(ts, pending_offset, data, cut)

    def _hold(self, ts: float, seq: int, offset: int, payload: Buffer, missing: int) -> None:
        """A segment of a stream whose start is not known yet: kept until it is (its receiver's first
        acknowledgment, or _HELD_AT_START of them)."""
        if offset < 0:
            self.before.append((ts, seq, payload, missing))
        else:
            heapq.heappush(self.pending, (offset, self.arrivals, ts, payload, missing))
            self.arrivals += 1
        if len(self.before) + len(self.pending) >= _HELD_AT_START:
            self._start(None)

    def receiver_ack(self, ack: int, sack: tuple[int, int] | None) -> None:
        """The receiver's acknowledgment (``ack``, and the span of its SACK blocks): noted while the
        stream's start is not settled, the start settled by the first, holes before ``ack`` given up."""
        if sack is not None and self.watching:
            self.sacked.append(sack)
        first, self.heard = not self.heard, True
        if self.base_seq is None:
            return
        if self.provisional:
            self._start(ack)
            if first:  # what it had when the capture first heard from it: before the capture, as a SACK says
                self.sacked.append((self.base_seq, ack))
        if self.pending:
            self.acknowledged(ack)
        elif self.sacked:  # bytes it acknowledged past those delivered, which it had as the capture began
            self._unseen_before(ack)
        self.watching = bool(self.provisional or self.pending)
        if not self.watching:
            self.sacked = []  # its start settled: what the receiver had then is no longer in question

    def _unseen_before(self, ack: int) -> None:
        """The bytes before ``ack`` past those delivered, when the receiver's SACK blocks noted while
        watching cover them: unseen (it had them before the capture saw them sent), the stream going on
        at ``ack``; else left to be a gap once bytes after them are captured."""
        assert self.next_seq is not None
        ahead = (ack - self.next_seq) % _SEQ_MOD
        if 0 < ahead < _HALF_SEQ and self._had(self.next_offset, ahead):
            self.out.unseen.append((self.next_offset, ahead))
            self._advance(ahead)

    def _start(self, ack: int | None) -> None:
        """Where a stream begun before the capture starts: at its receiver's acknowledgment ``ack``
        if that is before its first segment captured (bytes it had not received: the segments
        captured later that carry them are the stream's), else there; then the held segments are
        delivered as they follow on, each at the time it was captured."""
        assert self.base_seq is not None
        self.provisional = False
        back = 0 if ack is None else (self.base_seq - ack) % _SEQ_MOD
        if ack is not None and 0 < back <= _REBASE_WINDOW:
            self.base_seq = ack % _SEQ_MOD
            self.pending = [(offset + back, arrival, ts, data, cut)  # still a heap
                            for offset, arrival, ts, data, cut in self.pending]
        self.next_seq = self.base_seq
        before, self.before = self.before, []
        for ts, seq, payload, missing in before:
            offset = (seq - self.base_seq) % _SEQ_MOD
            if offset < _HALF_SEQ and payload:  # at or after the start now, else a retransmission
                heapq.heappush(self.pending, (offset, self.arrivals, ts, payload, missing))
                self.arrivals += 1
        while self.pending and self.pending[0][0] <= self.next_offset:
            offset, _, ts, data, cut = heapq.heappop(self.pending)
            self._deliver(ts, offset, data, cut)

    def acknowledged(self, ack: int) -> None:
        """The receiver acknowledged every byte before ``ack``: a hole before that was filled
        where the capture did not see it, so it becomes a gap now, not at the end of the stream
        (bounding what is held; without this a capture loss early in a long connection would keep
        the rest of it pending)."""
        assert self.base_seq is not None  # called once bytes are pending, so after the first segment
        delta = (ack - self.base_seq - self.next_offset) % _SEQ_MOD
        if 0 < delta < _HALF_SEQ:
            self._give_up_before(self.next_offset + delta)

    def finish(self) -> None:
        """Give up on holes never filled: record each as a gap and deliver what follows it."""
        if self.provisional:
            self._start(None)
        self._give_up_before(None)

    def _give_up_before(self, limit: int | None) -> None:
        """Deliver the pending bytes starting before ``limit`` (all: None), the holes between
        them becoming gaps; each keeps its own timestamp. A hole before the first byte delivered of
        a stream begun before the capture is where its captured part starts (no gap), one its
        receiver had as the capture began (``sacked``) is unseen (no gap)."""
        while self.pending and (limit is None or self.pending[0][0] < limit):
            offset, _, ts, data, missing = heapq.heappop(self.pending)
            if offset > self.next_offset and not self._leading(offset):
                hole = (self.next_offset, offset - self.next_offset)
                (self.out.unseen if self._had(*hole) else self.out.gaps).append(hole)
                self._advance(offset - self.next_offset)
            elif offset > self.next_offset:  # the captured part starts there: its offset 0
                self._rebase(offset)
                offset = 0
            self._deliver(ts, offset, data, missing)

    def _leading(self, offset: int) -> bool:
        """Whether bytes at ``offset`` would be the first delivered of a stream begun before the capture."""
        out = self.out
        return not (out.from_syn or out or out.gaps or out.uncaptured or out.unseen) and self.next_offset == 0

    def _rebase(self, offset: int) -> None:
        """Let the stream start ``offset`` bytes further on (nothing delivered yet)."""
        assert self.base_seq is not None and self.next_seq is not None
        self.base_seq = self.next_seq = (self.base_seq + offset) % _SEQ_MOD
        self.pending = [(pending - offset, arrival, ts, data, cut) for pending, arrival, ts, data, cut in self.pending]

    def _had(self, start: int, length: int) -> bool:
        """Whether the receiver's SACK blocks noted while watching cover ``length`` bytes at ``start``."""
        if not self.sacked:
            return False
        assert self.base_seq is not None
        for left, right in self.sacked:
            low = (left - self.base_seq) % _SEQ_MOD
            high = low + (right - left) % _SEQ_MOD
            if low < _HALF_SEQ and low <= start and start + length <= high:
                return True
        return False

    def _deliver(self, ts: float, offset: int, data: Buffer, missing: int = 0) -> None:
        """Append the part of ``data`` past what was already delivered (the first copy wins), then
        the part of the ``missing`` bytes after it, as not captured."""
        skip = self.next_offset - offset
        if skip < len(data):
            fresh = data[skip:] if skip > 0 else data
            self.out.append(ts, self.next_offset, fresh)
            self._advance(len(fresh))
        cut = offset + len(data) + missing - self.next_offset
        if missing and cut > 0:
            uncaptured = self.out.uncaptured
            if uncaptured and sum(uncaptured[-1]) == self.next_offset:  # runs on from the last: one stretch
                uncaptured[-1] = (uncaptured[-1][0], uncaptured[-1][1] + cut)
            else:
                uncaptured.append((self.next_offset, cut))
            self._advance(cut)

    def _advance(self, count: int) -> None:
        self.next_offset += count
        assert self.next_seq is not None  # bytes are delivered after the first segment set it
        self.next_seq = (self.next_seq + count) % _SEQ_MOD
