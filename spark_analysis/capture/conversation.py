"""Captured NameServer conversations: each TCP connection's remoting commands, in order, with
the time each became readable.  Decoding uses the server's own codec, never a second one.

Used by the replay conformance test and by the Spark decode step.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from spark_analysis.capture.packets import tcp_segments
from spark_analysis.capture.reassembly import Chunk, Connection, Direction, reassemble
from spark_analysis.capture.records import read_records
from twisted_namesrv.remoting import DEFAULT_MAX_FRAME_LENGTH, FrameDecoder, RemotingCommand, RemotingDecodeError
from twisted_namesrv.remoting.frame import frame_spans, split_header_word
from twisted_namesrv.remoting.header import HeaderTemplates

REQUEST = "request"
RESPONSE = "response"

# A frame's first 8 bytes: a length below 16 MiB (top byte 0), then serialize type JSON or ROCKETMQ.
_FRAME_CANDIDATE = re.compile(rb"(?=\x00...[\x00\x01])", re.DOTALL)
_FRAME_PREFIX = struct.Struct(">iI")
# A frame in progress ends within the largest frame Java accepts: the next one starts before this.
_RESYNC_WINDOW = DEFAULT_MAX_FRAME_LENGTH + 8
# Any frame length a peer could send: a capture is cut as it was sent, the NameServer's limit aside.
_MAX_FRAME_LENGTH = 1 << 31
# A capture holds the headers of every client of a cluster (clients x topics route queries): keep
# all their templates rather than re-parse each after a server-sized set starts over.
_TEMPLATES = HeaderTemplates(1 << 16)


@dataclass
class CapturedCommand:
    """A decoded frame. Its raw bytes and ``command.body`` are views of the reassembled stream
    (bodies are most of a capture: no copies); ``bytes()`` of them to keep or compare them."""

    ts: float
    direction: str  # REQUEST: client -> server bytes; RESPONSE: server -> client bytes
    command: RemotingCommand
    raw: bytes | memoryview  # the frame as captured, without its length prefix

    @property
    def frame(self) -> bytes:
        """The whole frame as captured, length prefix included."""
        return len(self.raw).to_bytes(4, "big") + bytes(self.raw)


@dataclass
class Conversation:
    connection: Connection
    commands: list[CapturedCommand] = field(default_factory=list)
    #: client bytes from the first frame the codec refused (Java closes such channels)
    undecodable: bytes = b""
    undecodable_ts: float | None = None
    #: bytes not cut into frames: around capture gaps, or before the first frame found in a
    #: stream whose start was not captured
    lost_bytes: int = 0

    def requests(self) -> list[CapturedCommand]:
        return [c for c in self.commands if c.direction == REQUEST]

    def responses_by_opaque(self) -> dict[int, CapturedCommand]:
        return {c.command.opaque: c for c in self.commands if c.direction == RESPONSE and c.command.is_response}


#: a frame's bytes (a view of its run where possible) and when its last byte arrived
TimedFrame = tuple[float, bytes | memoryview]


def timed_frames(chunks: list[Chunk], data: bytes, start: int = 0
                 ) -> tuple[list[TimedFrame], bytes, float | None]:
    """Cut one run of a direction (``data``: its chunks joined) into frames from ``start``; each
    frame's ts is when its last byte arrived. Frames are views of ``data``: no copy.

    Returns (frames, the bytes after the last whole frame - a frame that does not decode or
    never completed -, and the ts they arrived at). If the codec refuses a frame, the chunks are
    fed one by one instead, which says in which chunk that happened."""
    view = memoryview(data)
    try:
        spans, used = frame_spans(view, _MAX_FRAME_LENGTH, start)
    except RemotingDecodeError:
        return _timed_frames_by_chunk(_skip(chunks, start))
    timed: list[TimedFrame] = []
    index, chunk_end = 0, len(chunks[0].data) if chunks else 0
    for frame_start_, frame_end in spans:
        while chunk_end < frame_end:
            index += 1
            chunk_end += len(chunks[index].data)
        timed.append((chunks[index].ts, view[frame_start_:frame_end]))
    rest = data[used:]
    return timed, rest, chunks[-1].ts if rest else None


def _timed_frames_by_chunk(chunks: list[Chunk]) -> tuple[list[TimedFrame], bytes, float | None]:
    """timed_frames feeding one chunk at a time: the rest starts with the chunk the decoder refused."""
    decoder = FrameDecoder(max_frame_length=_MAX_FRAME_LENGTH)
    frames: list[TimedFrame] = []
    last_ts = None
    for chunk in chunks:
        try:
            frames.extend((chunk.ts, frame) for frame in decoder.feed(bytes(chunk.data)))  # rare: a refused frame
        except RemotingDecodeError:
            return frames, bytes(chunk.data), chunk.ts
        last_ts = chunk.ts
    return frames, decoder.pending, last_ts if decoder.pending else None


def _decode(ts: float, frame: bytes | memoryview, direction: str) -> CapturedCommand:
    return CapturedCommand(ts, direction, RemotingCommand.decode(frame, _TEMPLATES), frame)


def conversation_of(connection: Connection) -> Conversation:
    """Decode both directions. A stream is cut into frames from its first byte when that byte
    follows the SYN; after a capture gap, or when the capture began mid-stream, cutting resumes
    at the next plausible frame header (see frame_start)."""
    conversation = Conversation(connection)
    for direction, stream in ((REQUEST, connection.to_server), (RESPONSE, connection.to_client)):
        runs = contiguous_runs(stream)
        for index, run in enumerate(runs):
            resynchronise = not (index == 0 and _starts_at_first_frame(stream, run))
            _decode_run(conversation, direction, run, index == len(runs) - 1, resynchronise)
    conversation.commands.sort(key=lambda c: c.ts)
    return conversation


def contiguous_runs(direction: Iterable[Chunk]) -> list[list[Chunk]]:
    """Split a direction's chunks at its gaps."""
    runs: list[list[Chunk]] = []
    end = None
    for chunk in direction:
        if chunk.offset != end:
            runs.append([])
        runs[-1].append(chunk)
        end = chunk.offset + len(chunk.data)
    return runs


def frame_start(data: bytes | memoryview) -> int | None:
    """The first offset in ``data`` where a frame plausibly starts, or None.

    Plausible: the codec decodes the header that the length and header-length words delimit, and
    the header of the frame after it too when that lies within ``data``.
    """
    for candidate in _FRAME_CANDIDATE.finditer(data):
        offset = candidate.start()
        end = _frame_end(data, offset)
        if end is not None and (end + 8 > len(data) or _frame_end(data, end) is not None):
            return offset
    return None


def _frame_end(data: bytes | memoryview, offset: int) -> int | None:
    """Where the frame at ``offset`` ends, if its header is within ``data`` and decodes."""
    if offset + 8 > len(data):
        return None
    length: int
    length, word = _FRAME_PREFIX.unpack_from(data, offset)
    header_length = split_header_word(word)[1]
    header_end = offset + 8 + header_length
    if not 4 + header_length <= length <= DEFAULT_MAX_FRAME_LENGTH - 4 or header_end > len(data):
        return None
    try:
        RemotingCommand.decode(data[offset + 4 : header_end], _TEMPLATES)
    except RemotingDecodeError:
        return None
    return offset + 4 + length


def _starts_at_first_frame(stream: Direction, run: list[Chunk]) -> bool:
    return stream.from_syn and run[0].offset == 0


def _skip(run: list[Chunk], count: int) -> list[Chunk]:
    """The run without its first ``count`` bytes."""
    kept = []
    for chunk in run:
        if count >= len(chunk.data):
            count -= len(chunk.data)
            continue
        kept.append(Chunk(chunk.ts, chunk.offset + count, chunk.data[count:]) if count else chunk)
        count = 0
    return kept


def _decode_run(conversation: Conversation, direction: str, run: list[Chunk], last_run: bool,
                resynchronise: bool) -> None:
    """Decode a run's frames; ``resynchronise``: from its first plausible frame (the bytes before
    it count as lost), because the run does not start where a frame does."""
    data = b"".join([chunk.data for chunk in run])
    start = 0
    if resynchronise:
        found = frame_start(memoryview(data)[:_RESYNC_WINDOW])
        if found is None:
            conversation.lost_bytes += len(data)
            return
        conversation.lost_bytes += found
        start = found
    frames, rest, rest_ts = timed_frames(run, data, start)
    for ts, frame in frames:
        try:
            conversation.commands.append(_decode(ts, frame, direction))
        except RemotingDecodeError:
            if direction == REQUEST and conversation.undecodable_ts is None:
                conversation.undecodable, conversation.undecodable_ts = len(frame).to_bytes(4, "big") + frame, ts
    if not rest:
        return
    if not last_run:  # a frame cut short by the gap that ends the run
        conversation.lost_bytes += len(rest)
    elif direction == REQUEST and conversation.undecodable_ts is None:
        conversation.undecodable, conversation.undecodable_ts = rest, rest_ts


def read_conversations(path: str | Path, server_port: int = 9876) -> list[Conversation]:
    connections = reassemble(tcp_segments(read_records(path)), frozenset({server_port}))
    return [conversation_of(c) for c in connections]
