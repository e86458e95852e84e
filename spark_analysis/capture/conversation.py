"""Captured NameServer conversations: each TCP connection's remoting commands, in order, with
the time each became readable.  Decoding uses the server's own codec, never a second one.

Used by the replay conformance test and by the Spark decode step.
"""

from __future__ import annotations

import bisect
import itertools
import operator
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from spark_analysis.capture.captured import Buffer
from spark_analysis.capture.packets import tcp_segments
from spark_analysis.capture.reassembly import Connection, Direction, reassemble
from spark_analysis.capture.records import read_records, read_words
from twisted_namesrv.remoting import DEFAULT_MAX_FRAME_LENGTH, FrameDecoder, RemotingCommand, RemotingDecodeError
from twisted_namesrv.remoting.codes import RequestCode, ResponseCode, SerializeType
from twisted_namesrv.remoting.command import ONEWAY_FLAG, RESPONSE_FLAG
from twisted_namesrv.remoting.frame import (
    HEADER_LENGTH_MASK,
    FramePart,
    Holes,
    frame_parts,
    frame_spans,
    split_header_word,
)
from twisted_namesrv.remoting.header import (
    Header,
    HeaderPrefix,
    HeaderTemplates,
    binary_split,
    from_template,
    json_key_parts,
    json_split,
    json_split_alike,
    read_header_prefix,
)

_TS = operator.attrgetter("ts")
REQUEST = "request"
RESPONSE = "response"

# A frame's first 8 bytes: a length below 16 MiB (top byte 0), then serialize type JSON or ROCKETMQ.
_FRAME_CANDIDATE = re.compile(rb"(?=\x00...[\x00\x01])", re.DOTALL)
_FRAME_PREFIX = struct.Struct(">iI")
_WORD = struct.Struct(">I")  # a frame's header word: serialize type and header length
# A frame in progress ends within the largest frame Java accepts: the next one starts before this.
_RESYNC_WINDOW = DEFAULT_MAX_FRAME_LENGTH + 8
# Any frame length a peer could send: a capture is cut as it was sent, the NameServer's limit aside.
_MAX_FRAME_LENGTH = 1 << 31
# A capture holds the headers of every client of a cluster (clients x topics route queries): keep
# all their templates rather than re-parse each after a server-sized set starts over; and its
# brokers' registration headers, each repeated until the broker's topics change.
_TEMPLATES = HeaderTemplates(1 << 16, keep_registrations=True)


class FrameKind:
    """What frames alike say (their headers the same but for the opaque): the header's fields,
    read once for all of them (a capture's frames are mostly a few hundred kinds: each client's
    route lookups, each broker's registrations and heartbeats, their answers). ``header`` is shared
    (its opaque is the first frame's): never to be changed. ``row``, ``call`` and ``broker``: memos of
    what every FRAME row and every CALL row of the kind say alike and of the broker its extFields
    name, filled by decode/rows.py. ``parts``: a JSON kind's template key cut at the opaque
    (header.json_key_parts), what a header alike is told by (header.json_split_alike), once its
    frames came twice in a row (most kinds never do: a client's lookups of one topic each)."""

    __slots__ = ("header", "serialize_type", "code", "is_response", "is_oneway", "ext", "row", "call", "broker",
                 "parts")

    def __init__(self, header: Header, serialize_type: int) -> None:
        self.header, self.serialize_type = header, serialize_type
        self.code = header.code
        self.is_response, self.is_oneway = bool(header.flag & RESPONSE_FLAG), bool(header.flag & ONEWAY_FLAG)
        self.ext: dict[str, str | None] = header.ext_fields or {}
        self.row: tuple[Any, ...] | None = None
        self.call: tuple[Any, ...] | None = None
        self.broker: tuple[Any, ...] | None = None
        self.parts: tuple[bytes, bytes] | None = None  # set by _decode_frames once met twice in a row


class CapturedCommand:
    """A decoded frame: its kind (FrameKind) and opaque, and where it lies in the reassembled stream
    (``source[start:end]``, its body the last ``body_len`` bytes): ``raw`` and ``body`` are views of
    it made when asked for (bodies are most of a capture: no copies; ``bytes()`` of them to keep or
    compare them; most frames' rows need neither). ``command``, the RemotingCommand, is made when
    first asked for: most frames' rows need only what their kind says."""

    __slots__ = ("ts", "direction", "kind", "opaque", "body_len", "_source", "_start", "_end", "_command")

    def __init__(self, ts: float, direction: str, kind: FrameKind, opaque: int, source: bytes | memoryview,
                 start: int, header_end: int, end: int) -> None:
        self.ts = ts
        self.direction = direction  # REQUEST: client -> server bytes; RESPONSE: server -> client bytes
        self.kind, self.opaque = kind, opaque
        self._source, self._start, self._end = source, start, end
        self.body_len = end - header_end
        self._command: RemotingCommand | None = None

    @classmethod
    def decoded(cls, ts: float, direction: str, command: RemotingCommand, raw: bytes | memoryview
                ) -> CapturedCommand:
        """A frame the codec decoded whole (one whose header no kind is kept of)."""
        body_len = 0 if command.body is None else len(command.body)
        captured = cls(ts, direction, FrameKind(command.header, command.serialize_type), command.opaque, raw, 0,
                       len(raw) - body_len, len(raw))
        captured._command = command
        return captured

    @property
    def raw(self) -> bytes | memoryview:
        """The frame as captured, without its length prefix."""
        return self._source[self._start:self._end]

    @property
    def body(self) -> bytes | memoryview | None:
        if self._command is not None:  # decoded whole (or asked for): its body, as the codec read it
            return self._command.body
        return self._source[self._end - self.body_len:self._end] if self.body_len else None

    @property
    def command(self) -> RemotingCommand:
        if self._command is None:
            self._command = RemotingCommand(from_template(self.kind.header, self.opaque), self.body,
                                            self.kind.serialize_type)
        return self._command

    @property
    def code(self) -> int:
        return self.kind.code

    @property
    def frame(self) -> bytes:
        """The whole frame as captured, length prefix included."""
        return len(self.raw).to_bytes(4, "big") + bytes(self.raw)

    def __repr__(self) -> str:
        return f"CapturedCommand({self.ts!r}, {self.direction!r}, {self.command!r})"


@dataclass
class CutFrame:
    """A frame a snap length cut: what its captured start says for certain (``known``), how long
    it was and how many of its bytes were not captured. ``is_request``: from its flag when
    captured, else True for a request code sent to the server (the way requests travel: a frame
    going there with a code that only requests carry), else None (not known)."""

    ts: float
    direction: str
    length: int  # without the length prefix
    missing: int
    serialize_type: int | None  # None: the header word was not captured
    header_length: int | None
    known: HeaderPrefix
    is_request: bool | None

    @property
    def body_len(self) -> int | None:
        return None if self.header_length is None else self.length - 4 - self.header_length


@dataclass
class Conversation:
    connection: Connection
    commands: list[CapturedCommand] = field(default_factory=list)
    #: frames a snap length cut, read as far as their bytes go (decode/rows.py makes rows of what is certain)
    cut: list[CutFrame] = field(default_factory=list)
    #: bytes of the two directions sent but not captured (a snap length: Direction.uncaptured)
    uncaptured_bytes: int = 0
    #: captured bytes that no frame could be placed in: a frame boundary fell where bytes were cut
    unplaced_bytes: int = 0
    #: client bytes from the first frame the codec refused (Java closes such channels)
    undecodable: bytes = b""
    undecodable_ts: float | None = None
    #: bytes not cut into frames around capture gaps: of frames a gap cut short, or passed over
    #: after one to the next frame found
    lost_bytes: int = 0
    #: captured bytes before the first frame found in a stream whose start was not captured: the
    #: rest of a frame begun before the capture (a capture started mid-stream), not lost
    mid_frame_bytes: int = 0
    #: bytes of the two directions their receivers had before the capture began, out of order, that no
    #: captured segment carried (Direction.unseen): no gap, no loss
    unseen_bytes: int = 0

    def requests(self) -> list[CapturedCommand]:
        return [c for c in self.commands if c.direction == REQUEST]

    def responses_by_opaque(self) -> dict[int, CapturedCommand]:
        return {c.command.opaque: c for c in self.commands if c.direction == RESPONSE and c.command.is_response}


class Run(NamedTuple):
    """Chunks of a direction that follow each other (none lost between them), as the Direction's
    columns: when each became readable, where it starts in the stream, its bytes."""

    ts: list[float]
    offset: list[int]
    data: list[Buffer]


def frame_times(run: Run, stops: list[int]) -> list[float]:
    """When each frame ending at ``stops`` (positions in the run's bytes joined) became readable:
    the ts of the chunk its last byte came with (the first ending at or after it), found for all at once.
    The run's chunks follow each other (no byte cut between: _decode_run's), so each ends where the
    next starts: their ends are the offsets the Direction kept, not their lengths summed again."""
    offsets = run.offset
    ends = np.array([*offsets[1:], offsets[-1] + len(run.data[-1])], np.int64) - offsets[0]
    return list(map(run.ts.__getitem__, np.searchsorted(ends, stops).tolist()))


def _timed_frames_by_chunk(run: Run) -> tuple[list[tuple[float, bytes]], bytes, float | None]:
    """A run's frames found feeding its chunks one at a time, each with when its last byte came, and
    the bytes left (starting with the chunk the decoder refused) with their ts: where frame_spans
    refused the run, this says in which chunk that happened."""
    decoder = FrameDecoder(max_frame_length=_MAX_FRAME_LENGTH)
    frames: list[tuple[float, bytes]] = []
    last_ts = None
    for ts, data in zip(run.ts, run.data, strict=True):
        try:
            frames.extend((ts, frame) for frame in decoder.feed(bytes(data)))  # rare
        except RemotingDecodeError:
            return frames, bytes(data), ts
        last_ts = ts
    return frames, decoder.pending, last_ts if decoder.pending else None


#: the kinds of the headers decoded, by serialize type (JSON, ROCKETMQ) and template key: a header's
#: bytes but for its opaque (HeaderTemplates' json_split and binary_split, the server's own rule),
#: kept as the templates are (HeaderTemplates.keep: a key is any peer's bytes, so bounded in bytes too)
_KINDS: dict[int, dict[bytes, FrameKind]] = {SerializeType.JSON.value: {}, SerializeType.ROCKETMQ.value: {}}
#: the bytes of each table's keys
_KIND_BYTES = dict.fromkeys(_KINDS, 0)
_SPLIT = {SerializeType.JSON.value: json_split, SerializeType.ROCKETMQ.value: binary_split}
_JSON = SerializeType.JSON.value
#: a header's template and opaque by its serialize type, read by the codec (a kind not met yet)
_TEMPLATE_OF = {SerializeType.JSON.value: _TEMPLATES.template_of,
                SerializeType.ROCKETMQ.value: _TEMPLATES.binary_template_of}


def forget_kinds() -> None:
    """Forget the kinds of frames met (as a new worker starts: tests)."""
    for kinds in _KINDS.values():
        kinds.clear()
    _KIND_BYTES.update(dict.fromkeys(_KINDS, 0))


def _kind_at(data: bytes, serialize_type: int, start: int, end: int, split: tuple[bytes, int] | None = None
             ) -> tuple[FrameKind, int] | None:
    """The kind and the opaque of the header at ``data[start:end]`` (of a serialize type in _SPLIT),
    looked up in place by its template key (``split``: its key and opaque, when found already); a
    kind not met yet is read by the codec (refusing what it refuses: RemotingDecodeError) and kept.
    None where the codec decodes the header for itself."""
    if split is None:
        split = _SPLIT[serialize_type](data, start, end)
    if split is None:
        return None
    key, opaque = split
    kinds = _KINDS[serialize_type]
    kind = kinds.get(key)
    if kind is None:
        found = _TEMPLATE_OF[serialize_type](data[start:end], split)
        if found is None:
            return None
        kind = FrameKind(found[0], serialize_type)
        _KIND_BYTES[serialize_type] = _TEMPLATES.keep(kinds, _KIND_BYTES[serialize_type], key, kind)
    return kind, opaque


def _decode_at(ts: float, source: bytes | memoryview, start: int, end: int, direction: str, data: bytes,
               split: tuple[bytes, int] | None = None) -> CapturedCommand:
    """The frame at ``source[start:end]`` (without its length prefix) as the server's codec reads it
    (RemotingCommand.decode, refusing what it refuses), its header through its kind, read in place in
    ``data`` (``source``'s bytes as bytes; ``split``: its header's template key and opaque, when
    found already); its bytes and body stay views where ``source`` is one."""
    if end - start >= 4:  # shorter: the codec says why (RemotingCommand.decode)
        serialize_type, header_length = split_header_word(_WORD.unpack_from(data, start)[0])
        header_end = start + 4 + header_length
        if header_end <= end and serialize_type in _SPLIT:
            found = _kind_at(data, serialize_type, start + 4, header_end, split)
            if found is not None:
                return CapturedCommand(ts, direction, found[0], found[1], source, start, header_end, end)
    frame = source[start:end]
    return CapturedCommand.decoded(ts, direction, RemotingCommand.decode(frame, _TEMPLATES), frame)


def _decode_frames(conversation: Conversation, direction: str, data: bytes, times: list[float],
                   spans: list[tuple[int, int]]) -> None:
    """_decode_at of each frame of a run (``data``) at ``spans``, with their header words read for
    all at once: each frame's header is looked up where it lies (a JSON header alike the one before
    but for the opaque: that kind, told by comparing in place, no search; of another kind met: its
    key and the kind, no call more), its bytes and body are views of the run when asked for."""
    view = memoryview(data)
    starts, stops = zip(*spans, strict=True)
    # a frame shorter than its header-length word (a length under 4) as the run's last has no word to
    # read: read where one ends the run instead, whatever it says (its header would end past the
    # frame, so the codec refuses it: _decode_at); reading past the end stopped the whole report
    at = np.minimum(np.array(starts, np.int64), max(len(data) - 4, 0))
    words = read_words(np.frombuffer(data, np.uint8), at, ">u4", 1)[:, 0].astype(np.int64)
    header_ends = (np.array(starts, np.int64) + 4 + (words & HEADER_LENGTH_MASK)).tolist()
    append = conversation.commands.append
    json_kinds = _KINDS[_JSON]
    # the kind of the last JSON frame found by its key, and whether the one found before it was of
    # the same kind: then the next is tried as alike first (a run of answers, a broker's heartbeats)
    # by its key's parts, where a client's lookups of one topic after another are never tried
    last: FrameKind | None = None
    front = back = b""
    alike = False
    for ts, start, end, serialize_type, header_end in zip(times, starts, stops, (words >> 24).tolist(), header_ends,
                                                          strict=True):
        split = None
        if serialize_type == _JSON and header_end <= end:
            if alike and last is not None and (
                    opaque := json_split_alike(data, start + 4, header_end, front, back)) is not None:
                append(CapturedCommand(ts, direction, last, opaque, view, start, header_end, end))
                continue
            split = json_split(data, start + 4, header_end)
            if split is not None and (kind := json_kinds.get(split[0])) is not None:
                append(CapturedCommand(ts, direction, kind, split[1], view, start, header_end, end))
                if kind is not last:
                    last, alike = kind, False
                elif not alike:
                    if kind.parts is None:
                        kind.parts = json_key_parts(split[0])
                    (front, back), alike = kind.parts, True
                continue
        try:  # any other frame: a kind not met yet (its key found: no search again), a binary header, one the
            append(_decode_at(ts, view, start, end, direction, data, split))  # codec decodes itself
        except RemotingDecodeError:
            _undecodable(conversation, direction, ts, view[start:end])


def _undecodable(conversation: Conversation, direction: str, ts: float, frame: bytes | memoryview) -> None:
    """A frame the codec refused: the client's first is kept (Java closes such channels)."""
    if direction == REQUEST and conversation.undecodable_ts is None:
        conversation.undecodable, conversation.undecodable_ts = len(frame).to_bytes(4, "big") + frame, ts


def conversation_of(connection: Connection) -> Conversation:
    """Decode both directions. A stream is cut into frames from its first byte when that byte
    follows the SYN; after a capture gap, or when the capture began mid-stream, cutting resumes
    at the next plausible frame header (see frame_start). Bytes a snap length cut are no gap: the
    frames are followed across them (_decode_cut_run), and so are bytes the receiver had before
    the capture began (Direction.unseen)."""
    conversation = Conversation(connection)
    for direction, stream in ((REQUEST, connection.to_server), (RESPONSE, connection.to_client)):
        cut = dict(stream.uncaptured)
        conversation.uncaptured_bytes += sum(cut.values())
        if stream.unseen:
            cut.update(stream.unseen)
            conversation.unseen_bytes += sum(length for _, length in stream.unseen)
        runs = contiguous_runs(stream, cut)
        for index, run in enumerate(runs):
            resynchronise = not (index == 0 and _starts_at_first_frame(stream, run))
            begun_before = index == 0 and not stream.from_syn  # what precedes its first frame is no gap's
            holes = _holes(run, cut) if cut else None
            if holes:
                _decode_cut_run(conversation, direction, run, holes, index == len(runs) - 1, resynchronise,
                                begun_before)
            else:
                _decode_run(conversation, direction, run, index == len(runs) - 1, resynchronise, begun_before)
    conversation.commands.sort(key=_TS)
    conversation.cut.sort(key=_TS)
    return conversation


def contiguous_runs(direction: Direction, uncaptured: dict[int, int] | None = None) -> list[Run]:
    """Split a direction's chunks at its gaps; with ``uncaptured`` (offset -> length of the bytes a
    snap length cut there), not where only such bytes lie between two chunks. A reassembled
    Direction without gaps or cut bytes is one run (its chunks follow each other by construction)."""
    ts, offsets, data = direction.ts, direction.offset, direction.data
    if not direction.uncaptured and not direction.unseen:
        if not direction.gaps:
            return [Run(ts, offsets, data)] if direction else []
        # the chunk after a gap starts where the gap ends, and only there do chunks not follow each other
        cuts = [bisect.bisect_left(offsets, start + length) for start, length in direction.gaps]
        bounds = [0, *(cut for cut in cuts if 0 < cut < len(direction)), len(direction)]
        return [Run(ts[a:b], offsets[a:b], data[a:b]) for a, b in itertools.pairwise(bounds) if a < b]
    runs: list[Run] = []
    end = None
    for chunk_ts, offset, chunk in zip(ts, offsets, data, strict=True):
        if offset != end and not (uncaptured and end is not None and end + uncaptured.get(end, -end) == offset):
            runs.append(Run([], [], []))
        run = runs[-1]
        run.ts.append(chunk_ts)
        run.offset.append(offset)
        run.data.append(chunk)
        end = offset + len(chunk)
    return runs


def _holes(run: Run, uncaptured: dict[int, int]) -> list[tuple[int, int]]:
    """Where a run's bytes were cut, as frame_parts takes it: (position in the run's captured
    bytes, bytes not captured there), including those after its last chunk."""
    holes = []
    position = 0
    for offset, data in zip(run.offset, run.data, strict=True):
        position += len(data)
        cut = uncaptured.get(offset + len(data))
        if cut:
            holes.append((position, cut))
    return holes


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


def cut_frame_start(packet: bytes | memoryview) -> bool:
    """Whether a packet a snap length cut (its captured bytes) plausibly starts with a frame, whose
    header frame_start cannot decode whole: its length and header-length words fit, and the header's
    captured start says its code for certain (a JSON header begins ``{"code":N,``; a binary one its
    code, a known language and its version).  Only a packet's first byte is tried: where a capture
    began mid-stream (a rotated file's connections) or a boundary fell in a cut, the next frame most
    often starts a packet; bytes inside a body do not pass (a length word of text is over 16 MiB)."""
    if len(packet) < 8:
        return False
    length, word = _FRAME_PREFIX.unpack_from(packet, 0)
    serialize_type, header_length = split_header_word(word)
    if serialize_type not in (0, 1) or not 4 + header_length <= length <= DEFAULT_MAX_FRAME_LENGTH - 4:
        return False
    known = read_header_prefix(serialize_type, bytes(packet[8:8 + header_length]))
    return known.code is not None and (serialize_type == 0 or known.language is not None)


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


def _starts_at_first_frame(stream: Direction, run: Run) -> bool:
    return stream.from_syn and run.offset[0] == 0


def _skip(run: Run, count: int) -> Run:
    """The run without its first ``count`` bytes."""
    kept = Run([], [], [])
    for ts, offset, data in zip(run.ts, run.offset, run.data, strict=True):
        if count >= len(data):
            count -= len(data)
            continue
        kept.ts.append(ts)
        kept.offset.append(offset + count)
        kept.data.append(data[count:] if count else data)
        count = 0
    return kept


def _decode_run(conversation: Conversation, direction: str, run: Run, last_run: bool,
                resynchronise: bool, begun_before: bool = False) -> None:
    """Decode a run's frames; ``resynchronise``: from its first plausible frame (the bytes before
    it count as lost, or, ``begun_before``, the capture began after the stream did, as mid-frame
    bytes), because the run does not start where a frame does."""
    data = b"".join(run.data)
    start = 0
    if resynchronise:
        found = frame_start(memoryview(data)[:_RESYNC_WINDOW])
        _passed(conversation, len(data) if found is None else found, begun_before)
        if found is None:
            return
        start = found
    try:
        spans, used = frame_spans(data, _MAX_FRAME_LENGTH, start)
    except RemotingDecodeError:  # the chunks one by one say where the codec refused the run
        frames, rest, rest_ts = _timed_frames_by_chunk(_skip(run, start))
        for ts, frame in frames:
            try:
                conversation.commands.append(_decode_at(ts, frame, 0, len(frame), direction, frame))
            except RemotingDecodeError:
                _undecodable(conversation, direction, ts, frame)
    else:
        if spans:
            _decode_frames(conversation, direction, data, frame_times(run, [stop for _, stop in spans]), spans)
        rest, rest_ts = data[used:], run.ts[-1] if used < len(data) else None
    if not rest:
        return
    if not last_run:  # a frame cut short by the gap that ends the run
        conversation.lost_bytes += len(rest)
    elif direction == REQUEST and conversation.undecodable_ts is None:
        conversation.undecodable, conversation.undecodable_ts = rest, rest_ts


def read_conversations(path: str | Path, server_port: int = 9876) -> list[Conversation]:
    connections = reassemble(tcp_segments(read_records(path)), frozenset({server_port}))
    return [conversation_of(c) for c in connections]


def _passed(conversation: Conversation, passed: int, begun_before: bool) -> None:
    """Captured bytes passed over to a stream's first frame found: the rest of a frame begun before
    the capture (``begun_before``), else lost around a gap."""
    if begun_before:
        conversation.mid_frame_bytes += passed
    else:
        conversation.lost_bytes += passed


def _decode_cut_run(conversation: Conversation, direction: str, run: Run, holes: Holes, last_run: bool,
                    resynchronise: bool, begun_before: bool = False) -> None:
    """_decode_run for a run some of whose bytes a snap length cut: frame_parts follows the frames
    across the cuts; a whole frame decodes as usual, a cut one says what its captured start says for
    certain (CutFrame). Where a frame boundary falls in a cut, the next frame is found as after a gap,
    in the captured bytes that follow (the bytes before it are counted as unplaced).  A frame found so
    starts at a captured byte: a cut at its position is behind it, and is left out of what frame_parts
    is given (else the walk stood still there, for ever)."""
    data = b"".join(run.data)
    view = memoryview(data)
    ends = list(itertools.accumulate(map(len, run.data)))
    cut_at = [position for position, _ in holes]
    start: int | None = 0
    ahead = holes
    if resynchronise:
        start, passed = _resume(view, holes, 0)
        _passed(conversation, passed, begun_before)
        ahead = holes[bisect.bisect_right(cut_at, start or 0):]
    while start is not None:
        try:
            parts, stop, resume = frame_parts(view, ahead, _MAX_FRAME_LENGTH, start)
        except RemotingDecodeError:
            parts, stop, resume = [], start, None
            if direction == REQUEST and conversation.undecodable_ts is None:
                index = bisect.bisect_right(ends, start)
                conversation.undecodable, conversation.undecodable_ts = bytes(data[start:]), run.ts[min(
                    index, len(run.ts) - 1)]
            return
        for number, part in enumerate(parts):
            frame_end = parts[number + 1].start - 4 if number + 1 < len(parts) else stop
            ts = run.ts[min(bisect.bisect_left(ends, frame_end), len(run.ts) - 1)]
            _add_part(conversation, direction, ts, data, view, part)
        if resume is None:
            rest = len(data) - stop
            if rest and not last_run:
                conversation.lost_bytes += rest
            elif rest and direction == REQUEST and conversation.undecodable_ts is None:
                conversation.undecodable, conversation.undecodable_ts = bytes(data[stop:]), run.ts[-1]
            return
        start, passed = _resume(view, holes, resume)
        conversation.unplaced_bytes += resume - stop + passed
        if start is not None:
            ahead = holes[bisect.bisect_right(cut_at, start):]


def _resume(view: memoryview, holes: Holes, at: int) -> tuple[int | None, int]:
    """The first plausible frame start from ``at`` on, looked for in each stretch of captured bytes
    between two cuts in turn, and the captured bytes passed to it (the caller says whose: lost after
    a gap, mid-frame before a stream's first frame, unplaced after a cut)."""
    cuts = [position for position, _ in holes if position > at]
    passed = 0
    for edge in [*cuts, len(view)]:
        if at >= len(view):
            return None, passed
        found = 0 if edge in cuts and cut_frame_start(view[at:edge]) else frame_start(
            view[at:min(edge, at + _RESYNC_WINDOW)])
        passed += (edge - at) if found is None else found
        if found is not None:
            return at + found, passed
        at = edge
    return None, passed


def _add_part(conversation: Conversation, direction: str, ts: float, data: bytes, view: memoryview,
              part: FramePart) -> None:
    """A frame frame_parts found (in ``data``, ``view`` a view of it): decoded whole when captured
    whole, else what its start says."""
    if part.whole:
        try:
            conversation.commands.append(_decode_at(ts, view, part.start, part.start + part.length, direction, data))
        except RemotingDecodeError:
            _undecodable(conversation, direction, ts, view[part.start:part.start + part.length])
        return
    serialize_type = header_length = None
    known = HeaderPrefix()
    if part.captured >= 4:
        serialize_type, header_length = split_header_word(_FRAME_PREFIX.unpack_from(view, part.start - 4)[1])
        if header_length > part.length - 4:
            serialize_type = header_length = None  # the codec refuses it: no header to read
        else:
            captured = min(header_length, part.captured - 4)
            known = read_header_prefix(serialize_type, bytes(view[part.start + 4:part.start + 4 + captured]))
    conversation.cut.append(CutFrame(ts, direction, part.length, part.missing, serialize_type, header_length, known,
                                     _is_request(direction, known)))


_REQUEST_ONLY_CODES = frozenset(int(code) for code in RequestCode) - frozenset(int(code) for code in ResponseCode)


def _is_request(direction: str, known: HeaderPrefix) -> bool | None:
    if known.flag is not None:
        return not known.flag & RESPONSE_FLAG
    if direction == REQUEST and known.code in _REQUEST_ONLY_CODES:
        return True
    return None
