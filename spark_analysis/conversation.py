"""Captured NameServer conversations: each TCP connection's remoting commands, in order, with
the time each became readable.  Decoding uses the server's own codec, never a second one.

Used by the replay conformance test and by the Spark decode step.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from spark_analysis.packets import tcp_segments
from spark_analysis.pcapio import read_records
from spark_analysis.streams import Chunk, Connection, reassemble
from twisted_namesrv.remoting import FrameDecoder, RemotingCommand, RemotingDecodeError

REQUEST = "request"
RESPONSE = "response"


@dataclass
class CapturedCommand:
    ts: float
    direction: str  # REQUEST: client -> server bytes; RESPONSE: server -> client bytes
    command: RemotingCommand
    frame: bytes  # the whole frame as captured, length prefix included


@dataclass
class Conversation:
    connection: Connection
    commands: list[CapturedCommand] = field(default_factory=list)
    #: client bytes from the first frame the codec refused (Java closes such channels)
    undecodable: bytes = b""
    undecodable_ts: float | None = None

    def requests(self) -> list[CapturedCommand]:
        return [c for c in self.commands if c.direction == REQUEST]

    def responses_by_opaque(self) -> dict[int, CapturedCommand]:
        return {c.command.opaque: c for c in self.commands if c.direction == RESPONSE and c.command.is_response}


def timed_frames(chunks: Iterable[Chunk]) -> tuple[list[tuple[float, bytes]], bytes, float | None]:
    """Cut one direction into frames; each frame's ts is when its last byte arrived.

    Returns (frames, the bytes after the last whole frame - a frame that does not decode or
    never completed -, and the ts they arrived at)."""
    decoder = FrameDecoder(max_frame_length=1 << 31)
    frames: list[tuple[float, bytes]] = []
    last_ts = None
    for chunk in chunks:
        try:
            frames.extend((chunk.ts, frame) for frame in decoder.feed(chunk.data))
        except RemotingDecodeError:
            return frames, chunk.data, chunk.ts
        last_ts = chunk.ts
    return frames, decoder.pending, last_ts if decoder.pending else None


def _decode(ts: float, frame: bytes, direction: str) -> CapturedCommand:
    return CapturedCommand(ts, direction, RemotingCommand.decode(frame), len(frame).to_bytes(4, "big") + frame)


def conversation_of(connection: Connection) -> Conversation:
    conversation = Conversation(connection)
    for direction, chunks in ((REQUEST, connection.to_server), (RESPONSE, connection.to_client)):
        frames, rest, rest_ts = timed_frames(chunks)
        for ts, frame in frames:
            try:
                conversation.commands.append(_decode(ts, frame, direction))
            except RemotingDecodeError:
                if direction == REQUEST and conversation.undecodable_ts is None:
                    conversation.undecodable, conversation.undecodable_ts = len(frame).to_bytes(4, "big") + frame, ts
        if direction == REQUEST and rest and conversation.undecodable_ts is None:
            conversation.undecodable, conversation.undecodable_ts = rest, rest_ts
    conversation.commands.sort(key=lambda c: c.ts)
    return conversation


def read_conversations(path: str | Path, server_port: int = 9876) -> list[Conversation]:
    connections = reassemble(tcp_segments(read_records(path)), server_port)
    return [conversation_of(c) for c in connections]
