"""The length-prefixed frame every remoting command travels in.

    int32 length | int32 (serializeType << 24 | headerLen) | header | body
    length = 4 + headerLen + bodyLen  (not counting itself; all big-endian)

The declarative definition is a construct Struct in the codec tests
(tests/remoting/declarations.py).  ``FrameDecoder`` (``frame_spans``, ``cut_frames``),
``encode_frame``, ``split_frame`` read and write the same two int32s with precompiled ``struct``,
because construct's parse costs tens of times more per frame; the tests check them against the
definition on every captured frame.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

from .errors import RemotingDecodeError

DEFAULT_MAX_FRAME_LENGTH = 16 * 1024 * 1024  # com.rocketmq.remoting.frameMaxLength
HEADER_LENGTH_MASK = 0x00FFFFFF



_LENGTH = struct.Struct(">i")
_PREFIX = struct.Struct(">iI")


def split_header_word(word: int) -> tuple[int, int]:
    """(serialize type, header length) from the second int32 of a frame."""
    return (word >> 24) & 0xFF, word & HEADER_LENGTH_MASK


def encode_frame(serialize_type: int, header: bytes, body: bytes | memoryview | None) -> bytes:
    body = body or b""
    length = 4 + len(header) + len(body)
    return _PREFIX.pack(length, (serialize_type << 24) | len(header)) + header + body


def split_frame(frame: bytes | memoryview) -> tuple[int, bytes, bytes | memoryview | None]:
    """(serialize type, header, body or None) of a frame whose length prefix was stripped.
    The body of a memoryview frame is a view of it (capture analysis: no copy of big bodies)."""
    if len(frame) < 4:
        raise RemotingDecodeError(f"decode error, frame of {len(frame)} bytes")
    serialize_type, header_length = split_header_word(_LENGTH.unpack_from(frame, 0)[0] & 0xFFFFFFFF)
    if header_length > len(frame) - 4:
        raise RemotingDecodeError(f"decode error, bad header length: {header_length}")
    header = bytes(frame[4:4 + header_length])
    body = frame[4 + header_length:] or None
    return serialize_type, header, body


def frame_spans(data: bytes | bytearray | memoryview, max_frame_length: int, start: int = 0,
                max_header_length: int | None = None) -> tuple[list[tuple[int, int]], int]:
    """Where the whole frames in ``data`` from ``start`` are, as (start, end) of each frame without
    its length prefix, and where the bytes not yet making a frame begin.

    A negative length, or one whose whole frame (prefix included) exceeds ``max_frame_length``,
    raises ``RemotingDecodeError`` as soon as its length word is there; a header longer than
    ``max_header_length`` as soon as its header word is (Java bounds a header only by the frame,
    16 MiB of JSON to parse)."""
    spans: list[tuple[int, int]] = []
    append, unpack = spans.append, _PREFIX.unpack_from
    end = len(data)
    longest = max_frame_length - 4
    longest_header = HEADER_LENGTH_MASK if max_header_length is None else max_header_length
    while end - start >= 8:  # the usual case, kept short: one unpack and one comparison per frame
        length, word = unpack(data, start)
        if not 4 <= length <= longest or word & HEADER_LENGTH_MASK > longest_header:
            _check_prefix(length, word, max_frame_length, max_header_length)
        stop = start + 4 + length
        if stop > end:
            return spans, start
        append((start + 4, stop))
        start = stop
    while end - start >= 4:  # fewer than 8 bytes left: the length word alone
        (length,) = _LENGTH.unpack_from(data, start)
        _check_prefix(length, 0, max_frame_length, max_header_length)
        if end - start - 4 < length:
            break
        append((start + 4, start + 4 + length))
        start += 4 + length
    return spans, start


class FramePart(NamedTuple):
    """A frame of a stream some of whose bytes were not captured (``frame_parts``)."""

    start: int  # where its bytes (after the length prefix) start in the captured bytes
    length: int  # its length, as its prefix says (without the prefix)
    captured: int  # of its bytes from ``start`` on, how many were captured in a row (the header first)
    missing: int  # of its bytes, how many were sent but not captured

    @property
    def whole(self) -> bool:
        return self.captured == self.length


#: where bytes were not captured: (position in the captured bytes, how many were sent there
#: before the byte at that position but not kept), by position; a position may be their end
Holes = Sequence[tuple[int, int]]


def frame_parts(data: bytes | bytearray | memoryview, holes: Holes, max_frame_length: int, start: int = 0
                ) -> tuple[list[FramePart], int, int | None]:
    """``frame_spans`` over a stream a snap length cut: ``data`` holds the bytes captured, back to
    back, and ``holes`` where the others were. A frame is followed across holes by its length word,
    as Netty's decoder would (it counts bytes, it never reads them), so each frame says how much of
    it is there: its header when captured, and exactly how many of its bytes are missing.

    Returns (the frames, where in ``data`` the bytes not yet making a frame begin, and None; or,
    when a frame boundary falls where no byte was captured - inside a hole, or a length word cut by
    one - the position after that hole, where the caller must find the next frame by other means).
    A length word that cannot be raises ``RemotingDecodeError`` as in ``frame_spans``."""
    parts: list[FramePart] = []
    end = len(data)
    hole = 0  # the first hole at or after ``start``
    while hole < len(holes) and holes[hole][0] < start:
        hole += 1
    while True:
        hole_at = holes[hole][0] if hole < len(holes) else end
        room = hole_at - start  # bytes captured in a row from ``start``
        if room < 4:  # the length word is not all there: cut by a hole, or still coming
            return parts, start, hole_at if hole < len(holes) else None
        (length,) = _LENGTH.unpack_from(data, start)
        _check_prefix(length, _LENGTH.unpack_from(data, start + 4)[0] if room >= 8 else 0, max_frame_length, None)
        captured, missing = min(length, room - 4), 0
        at, left = start + 4 + captured, length - captured
        while left:
            if hole < len(holes) and holes[hole][0] == at:
                skip = min(left, holes[hole][1])
                left, missing = left - skip, missing + skip
                if skip < holes[hole][1]:  # the frame ends inside the hole, and the next one starts there
                    parts.append(FramePart(start + 4, length, captured, missing))
                    return parts, at, at
                hole += 1
                continue
            stop = holes[hole][0] if hole < len(holes) else end
            if at == stop:
                return parts, start, None  # the frame runs past what was sent so far: still coming
            take = min(left, stop - at)  # captured bytes of the frame after a hole
            at, left = at + take, left - take
        parts.append(FramePart(start + 4, length, captured, missing))
        start = at


def cut_frames(data: bytes, max_frame_length: int, max_header_length: int | None = None) -> tuple[list[bytes], int]:
    """``frame_spans`` for a read of bytes, with the frames cut out (one copy each) in the same loop:
    the server's usual read, where a list of spans and a second loop cost as much as the cutting."""
    frames: list[bytes] = []
    append, unpack = frames.append, _PREFIX.unpack_from
    start, end = 0, len(data)
    longest = max_frame_length - 4
    longest_header = HEADER_LENGTH_MASK if max_header_length is None else max_header_length
    while end - start >= 8:
        length, word = unpack(data, start)
        if not 4 <= length <= longest or word & HEADER_LENGTH_MASK > longest_header:
            _check_prefix(length, word, max_frame_length, max_header_length)
        stop = start + 4 + length
        if stop > end:
            return frames, start
        append(data[start + 4:stop])
        start = stop
    if end - start >= 4:  # fewer than 8 bytes left: what frame_spans makes of them
        spans, start = frame_spans(data, max_frame_length, start, max_header_length)
        frames += [data[a:b] for a, b in spans]
    return frames, start


def _check_prefix(length: int, word: int, max_frame_length: int, max_header_length: int | None) -> None:
    """Raise RemotingDecodeError for a frame that cannot be, as soon as its length (and header) word is there."""
    if length < 0:
        raise RemotingDecodeError(f"negative frame length {length}", "frame_length")
    if length + 4 > max_frame_length:
        raise RemotingDecodeError(f"frame length {length + 4} exceeds {max_frame_length}", "frame_length")
    if max_header_length is not None and length >= 4 and word & HEADER_LENGTH_MASK > max_header_length:
        header_length = word & HEADER_LENGTH_MASK
        raise RemotingDecodeError(f"header length {header_length} exceeds {max_header_length}", "header_length")


#: frames (in one read) from which FrameDecoder copies through a memoryview: fewer copies, but
#: a view costs more than a small frame's second copy
ONE_COPY_FROM = 1 << 16


class FrameDecoder:
    """Cuts a TCP byte stream into frames (length prefix stripped), like Netty's
    LengthFieldBasedFrameDecoder(maxFrame, 0, 4, 0, 4) with failFast.

    A negative length or one whose whole frame (prefix included) exceeds ``max_frame_length``
    raises ``RemotingDecodeError`` as soon as the length word arrives, and a header longer than
    ``max_header_length`` as soon as the header word does: the peer is broken.

    One per connection, and most reads are whole frames: the buffer for a frame not yet whole is
    made when a read leaves one over and let go once it is cut (an empty bytearray held by each of
    the scale curve's 6,000 connections was 0.4 MB).
    """

    __slots__ = ("max_frame_length", "max_header_length", "_buffer")  # one per connection

    def __init__(self, max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH, max_header_length: int | None = None) -> None:
        self.max_frame_length = max_frame_length
        self.max_header_length = max_header_length
        #: the bytes of a frame not yet whole; None when none are held
        self._buffer: bytearray | None = None

    @property
    def pending(self) -> bytes:
        """Bytes received that do not yet make a whole frame."""
        return bytes(self._buffer or b"")

    @property
    def empty(self) -> bool:
        """No bytes are held: the next read starts with a frame."""
        return not self._buffer

    @property
    def pending_memory(self) -> int:
        """What the bytes held for a frame not yet whole take in memory (the buffer's allocation,
        which grows ahead of its length), 0 when none are."""
        buffer = self._buffer
        return buffer.__sizeof__() if buffer else 0

    def feed(self, data: bytes) -> list[bytes]:
        buffer = self._buffer
        if not buffer and len(data) < ONE_COPY_FROM:  # the usual read: whole frames, nothing pending
            frames, used = cut_frames(data, self.max_frame_length, self.max_header_length)
            if used < len(data):
                self._buffer = bytearray(memoryview(data)[used:])
            return frames
        if buffer is None:
            buffer = self._buffer = bytearray(data)
        else:
            buffer += data
        spans, used = frame_spans(buffer, self.max_frame_length, 0, self.max_header_length)
        if used < ONE_COPY_FROM:
            frames = [bytes(buffer[start:end]) for start, end in spans]
        else:  # through a view: one copy of each frame, not two (a registration is megabytes)
            with memoryview(buffer) as view:
                frames = [bytes(view[start:end]) for start, end in spans]
        if used == len(buffer):
            self._buffer = None
        elif used:
            del buffer[:used]
        return frames
