"""Route answers served from memory.

Clients repeat the same route lookup with a new opaque every 30 s, and load tools far more
often.  A JSON lookup that differs from an earlier one only in its opaque gets the same answer
while that topic's memoized body is still the one in route_memo (any change to the topic, its
brokers, its order config or the switches shaping answers replaces or drops it), so the answer
is kept as bytes around the opaque and checked by identity: no decoding, no dispatch.
"""

from __future__ import annotations

from .processor import NamesrvState, route_variant, waiting_for_service
from .remoting import RemotingCommand, RequestCode, ResponseCode, SerializeType
from .remoting.frame import encode_frame, split_frame
from .remoting.header import OPAQUE_KEY, OPAQUE_NUMBER

MAX_REPLY_MEMO = 65536


def fast_reply(state: NamesrvState, frame: bytes) -> bytes | None:
    """The whole answer frame to a repeated route lookup, or None to decode and dispatch."""
    match = OPAQUE_NUMBER.search(frame, 4)
    if match is None:
        return None
    key = frame[:match.start(1)] + frame[match.end(1):]
    entry = state.reply_memo.get(key)
    if entry is None:
        return None
    topic, variant, body, head, tail = entry
    memo = state.routes.route_memo.get(topic)
    if memo is None or memo.get(variant) is not body:
        del state.reply_memo[key]
        return None
    opaque = int(match.group(1))
    if not -(1 << 31) <= opaque < (1 << 31):
        return None  # decoding refuses it
    header = head + str(opaque).encode() + tail
    return encode_frame(SerializeType.JSON, header, body)


def remember_reply(state: NamesrvState, frame: bytes, request: RemotingCommand, response: RemotingCommand,
                   encoded: bytes) -> None:
    """Keep a successful, plain JSON route answer (``encoded``: its frame) for fast_reply."""
    if (request.code != RequestCode.GET_ROUTEINFO_BY_TOPIC or response.code != ResponseCode.SUCCESS
            or request.serialize_type != SerializeType.JSON or response.serialize_type != SerializeType.JSON
            or request.body or request.is_oneway or waiting_for_service(state)
            or frame.count(OPAQUE_KEY) != 1):
        return
    topic, variant, zone = route_variant(state, request)
    memo = state.routes.route_memo.get(topic) if zone is None else None  # type: ignore[arg-type]
    if memo is None or memo.get(variant) is not response.body:
        return
    match = OPAQUE_NUMBER.search(frame, 4)
    header = split_frame(encoded[4:])[1]
    opaque = f'"opaque":{response.opaque},'.encode()
    split = header.find(opaque)
    if match is None or split < 0:
        return
    if len(state.reply_memo) >= MAX_REPLY_MEMO:
        state.reply_memo.clear()
    head, tail = header[:split + 9], header[split + len(opaque) - 1:]
    state.reply_memo[frame[:match.start(1)] + frame[match.end(1):]] = (topic, variant, response.body, head, tail)
