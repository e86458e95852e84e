"""Synthetic traffic for the capture tests: TCP segments, IPv4/IPv6 packets, link-layer frames,
classic pcap and pcapng files, and NameServer frames cut into client segments."""

from __future__ import annotations

import socket
import struct

from spark_analysis.capture.packets import ACK, PSH, SYN, TcpSegment
from spark_analysis.capture.reassembly import Chunk, Connection
from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig, encode_register_body
from twisted_namesrv.remoting import RemotingCommand, RequestCode, SerializeType
from twisted_namesrv.remoting.codes import V4_9_8
from twisted_namesrv.remoting.crc import crc32_masked

CLIENT, SERVER = ("10.0.0.1", 40000), ("10.0.0.2", 9876)
CLIENT6, SERVER6 = ("2001:db8::1", 40000), ("2001:db8::2", 9876)


def tcp(src: tuple[str, int], dst: tuple[str, int], seq: int, flags: int = ACK, payload: bytes = b"", ack: int = 0,
        options: bytes = b"") -> bytes:
    offset_words = (20 + len(options)) // 4
    header = struct.pack("!HHIIBBHHH", src[1], dst[1], seq % 2**32, ack, offset_words << 4, flags, 65535, 0, 0)
    return header + options + payload


def ipv4(src: str, dst: str, transport: bytes, protocol: int = 6, options: bytes = b"", fragment: int = 0) -> bytes:
    header_len = 20 + len(options)
    header = struct.pack("!BBHHHBBH4s4s", 0x40 | header_len // 4, 0, header_len + len(transport), 1, fragment, 64,
                         protocol, 0, socket.inet_aton(src), socket.inet_aton(dst))
    return header + options + transport


def ipv6(src: str, dst: str, transport: bytes, extensions: tuple[tuple[int, bytes], ...] = ()) -> bytes:
    """``extensions``: (header type, body) pairs walked before TCP; bodies are padded to 8 octets."""
    chain = b""
    types = [header_type for header_type, _ in extensions] + [6]
    for (_, body), next_header in zip(extensions, types[1:], strict=True):
        padded = body + bytes(-(len(body) + 2) % 8)
        chain += bytes([next_header, (len(padded) + 2) // 8 - 1]) + padded
    payload = chain + transport
    return (struct.pack("!IHBB", 6 << 28, len(payload), types[0], 64)
            + socket.inet_pton(socket.AF_INET6, src) + socket.inet_pton(socket.AF_INET6, dst) + payload)


def ethernet(packet: bytes, ethertype: int = 0x0800, vlans: int = 0) -> bytes:
    tags = b"".join(struct.pack("!HH", 0x8100, 7) for _ in range(vlans))
    return b"\x02" * 6 + b"\x04" * 6 + tags + struct.pack("!H", ethertype) + packet


def segment(src: tuple[str, int], dst: tuple[str, int], seq: int, flags: int = ACK,
            payload: bytes = b"", ack: int = 0) -> TcpSegment:
    return TcpSegment(f"{src[0]}:{src[1]}", f"{dst[0]}:{dst[1]}", seq % 2**32, ack % 2**32, flags, payload)


def pcap(frames: list[tuple[float, bytes]], endian: str = "<", nanos: bool = False, linktype: int = 1,
         snaplen: int = 65535) -> bytes:
    magic, units = (0xA1B23C4D, 10**9) if nanos else (0xA1B2C3D4, 10**6)
    out = [struct.pack(endian + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype)]
    for ts, frame in frames:
        ticks = round(ts * units)
        out.append(struct.pack(endian + "IIII", ticks // units, ticks % units, len(frame), len(frame)) + frame)
    return b"".join(out)


def pcapng_block(endian: str, block_type: int, body: bytes) -> bytes:
    body += bytes(-len(body) % 4)
    length = len(body) + 12
    return struct.pack(endian + "II", block_type, length) + body + struct.pack(endian + "I", length)


def pcapng_idb(endian: str, linktype: int, tsresol: int | None = None) -> bytes:
    options = b""
    if tsresol is not None:
        options = struct.pack(endian + "HHB3x", 9, 1, tsresol) + struct.pack(endian + "HH", 0, 0)
    return pcapng_block(endian, 1, struct.pack(endian + "HHI", linktype, 0, 0) + options)


def pcapng_epb(endian: str, interface: int, ticks: int, frame: bytes) -> bytes:
    header = struct.pack(endian + "IIIII", interface, ticks >> 32, ticks & 0xFFFFFFFF, len(frame), len(frame))
    return pcapng_block(endian, 6, header + frame)


def pcapng_shb(endian: str) -> bytes:
    return pcapng_block(endian, 0x0A0D0D0A, struct.pack(endian + "IHHq", 0x1A2B3C4D, 1, 0, -1))


def handshake(client: tuple[str, int] = CLIENT, server: tuple[str, int] = SERVER, client_isn: int = 1000,
              server_isn: int = 5000, ts: float = 1.0) -> list[tuple[float, TcpSegment]]:
    return [
        (ts, segment(client, server, client_isn, SYN)),
        (ts + 0.001, segment(server, client, server_isn, SYN | ACK)),
        (ts + 0.002, segment(client, server, client_isn + 1, ACK)),
    ]


def joined(chunks: list[Chunk]) -> bytes:
    return b"".join(chunk.data for chunk in chunks)


def only(connections: list[Connection]) -> Connection:
    assert len(connections) == 1
    return connections[0]


# --- NameServer frames ---------------------------------------------------------------------------


def route_query(opaque: int, oneway: bool = False) -> bytes:
    return RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicTest"}, opaque=opaque,
                                   oneway=oneway).encode()


def answer(opaque: int, body: bytes = b"") -> bytes:
    request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, opaque=opaque)
    return RemotingCommand.response_to(request, body=body or None).encode()


BODY = encode_register_body(RegisterBrokerBody(topicConfigTable={"T": TopicConfig("T")}), False, v5=False)


def registration(crc: str | None, serialize_type: int = SerializeType.JSON, compressed: bool = False) -> bytes:
    """A REGISTER_BROKER request; ``crc`` is bodyCrc32 as sent, "right" for the body's own CRC."""
    body = encode_register_body(RegisterBrokerBody(topicConfigTable={"T": TopicConfig("T")}), True, False) \
        if compressed else BODY
    ext = {"brokerAddr": "10.0.0.9:10911", "brokerName": "b", "clusterName": "C", "brokerId": "0",
           "compressed": str(compressed).lower()}
    if crc is not None:
        ext["bodyCrc32"] = str(crc32_masked(body)) if crc == "right" else crc
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body, opaque=7, version=V4_9_8,
                                   serialize_type=serialize_type).encode()


def client_stream(*frames: bytes, start: int = 1001, ts: float = 2.0, cut: int = 700) -> list:
    """The frames as client segments of at most ``cut`` bytes."""
    data = b"".join(frames)
    return [(ts + i * 0.001, segment(CLIENT, SERVER, start + offset, PSH | ACK, data[offset:offset + cut]))
            for i, offset in enumerate(range(0, len(data), cut))]
