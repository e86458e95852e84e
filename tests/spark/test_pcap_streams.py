"""Capture reading, packet decoding and TCP reassembly: on the shared captures of real NameServer
traffic, and on synthetic captures built here for what those clean loopback captures never show
(loss, reordering, other link types, other file formats)."""

from __future__ import annotations

import bisect
import itertools
import socket
import struct
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from spark_analysis.capture.packets import ACK, FIN, PSH, RST, SYN, TcpSegment, parse_tcp, segment_columns, tcp_segments
from spark_analysis.capture.reassembly import Chunk, Connection, reassemble, stream_bytes
from spark_analysis.capture.records import (
    PCAP_HEADER_LEN,
    RecordIndex,
    find_record_boundary,
    iter_pcap_records,
    iter_records,
    parse_pcap_header,
    read_records,
)
from tests.support import require_captures

CAPTURES = Path(__file__).resolve().parents[2].parent / "shared" / "captures"
CAPTURE_FILES = sorted(CAPTURES.glob("*.pcap"))
# Connections on port 9876 in each shared capture (see its README for the scenarios).
EXPECTED_CONNECTIONS = {
    "binary_lifecycle.pcap": 29,
    "compressed_bulk.pcap": 29,
    "json_lifecycle.pcap": 29,
    "v5_probe.pcap": 6,
}
MAX_FRAME = 16 * 1024 * 1024  # Java's default remoting frame limit: larger length words are refused

CLIENT, SERVER = ("10.0.0.1", 40000), ("10.0.0.2", 9876)
CLIENT6, SERVER6 = ("2001:db8::1", 40000), ("2001:db8::2", 9876)


# --- building synthetic packets and captures ---------------------------------------------------


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


# --- the shared captures ------------------------------------------------------------------------


def whole_frames(stream: bytes) -> tuple[list[bytes], bytes]:
    """Cut a RocketMQ byte stream into frames (4-byte length + that many bytes); returns the rest."""
    frames, offset = [], 0
    while offset + 4 <= len(stream):
        (length,) = struct.unpack_from(">i", stream, offset)
        if offset + 4 + length > len(stream):
            break
        frames.append(stream[offset + 4 : offset + 4 + length])
        offset += 4 + length
    return frames, stream[offset:]


def plausible_frame_start(stream: bytes) -> bool:
    if len(stream) < 8:
        return False
    length, type_and_header_len = struct.unpack_from(">iI", stream)
    return length > 0 and (type_and_header_len & 0xFFFFFF) < length and type_and_header_len >> 24 in (0, 1)


def record_offsets(data: bytes) -> list[int]:
    """True record offsets of a little-endian classic pcap, end of file included."""
    offsets, offset = [], PCAP_HEADER_LEN
    while offset < len(data):
        offsets.append(offset)
        offset += 16 + struct.unpack_from("<I", data, offset + 8)[0]
    return offsets + [len(data)]


@pytest.fixture(params=[p.name for p in CAPTURE_FILES] or ["<none>"])
def capture(request: pytest.FixtureRequest) -> Path:
    if not CAPTURE_FILES:
        require_captures(str(CAPTURES))
    return CAPTURES / request.param


def test_every_capture_yields_tcp_records(capture: Path) -> None:
    records = read_records(capture)
    assert records
    assert all(record.linktype == 1 and len(record.data) == record.orig_len for record in records)
    assert len(list(tcp_segments(records))) == len(records)
    assert all(a.ts <= b.ts for a, b in pairwise(records))


def test_captured_connections_carry_whole_frames(capture: Path) -> None:
    connections = reassemble(tcp_segments(read_records(capture)))
    assert len(connections) == EXPECTED_CONNECTIONS[capture.name]
    refused = []
    for connection in connections:
        assert connection.server == "127.0.0.1:9876"
        assert connection.close_kind == "fin"
        assert not connection.to_server.gaps and not connection.to_client.gaps
        requests = joined(connection.to_server)
        assert plausible_frame_start(requests), connection
        frames, rest = whole_frames(requests)
        if rest:  # only the probe's oversized length word, which the server refuses by closing
            assert struct.unpack_from(">i", rest)[0] > MAX_FRAME and len(rest) == 8
            assert connection.first_close_by == "server"
            refused.append(connection.conn_id)
        assert whole_frames(joined(connection.to_client))[1] == b""
    assert len(refused) == (0 if capture.name == "v5_probe.pcap" else 1)


def test_cutting_a_capture_anywhere_finds_the_next_record(capture: Path) -> None:
    data = capture.read_bytes()
    header = parse_pcap_header(data)
    offsets = record_offsets(data)
    # Every offset of the first 8 KiB, then a sparser sample over the rest of the file.
    starts = [*range(PCAP_HEADER_LEN, 8192), *range(8192, len(data) + 1, 61), len(data)]
    for start in starts:
        assert find_record_boundary(data, start, header) == offsets[bisect.bisect_left(offsets, start)], start


def test_byte_ranges_split_anywhere_yield_every_record_once(capture: Path) -> None:
    data = capture.read_bytes()
    header = parse_pcap_header(data)
    cuts = [PCAP_HEADER_LEN, *range(1000, len(data), len(data) // 7 + 13), len(data)]
    boundaries = [find_record_boundary(data, cut, header) for cut in cuts]
    split = [record for start, stop in pairwise(boundaries)
             for record in iter_pcap_records(data, header, start, stop)]
    assert split == list(iter_records(data))


# --- pcap formats ---------------------------------------------------------------------------------


FRAMES = [(1700000000.123456, ethernet(ipv4("10.0.0.1", "10.0.0.2", tcp(CLIENT, SERVER, 7, payload=b"abc")))),
          (1700000001.5, b"\x00" * 60)]


@pytest.mark.parametrize("endian", ["<", ">"])
@pytest.mark.parametrize("nanos", [False, True])
def test_classic_pcap_byte_orders_and_resolutions(endian: str, nanos: bool) -> None:
    records = list(iter_records(pcap(FRAMES, endian, nanos, linktype=1)))
    assert [bytes(r.data) for r in records] == [frame for _, frame in FRAMES]
    assert [r.ts for r in records] == pytest.approx([ts for ts, _ in FRAMES], abs=1e-6)
    assert {r.linktype for r in records} == {1}


def test_nanosecond_timestamps_keep_nanoseconds() -> None:
    (record,) = iter_records(pcap([(5.000000007, b"x")], nanos=True))
    assert record.ts == pytest.approx(5.000000007, abs=1e-12)


def test_truncated_capture_stops_before_the_partial_record() -> None:
    data = pcap(FRAMES)
    record_ends = [PCAP_HEADER_LEN + 16 + len(FRAMES[0][1]), len(data)]
    for cut in range(len(data) + 1):
        assert len(list(iter_records(data[:cut]))) == sum(end <= cut for end in record_ends), cut


def test_unknown_magic_is_refused() -> None:
    with pytest.raises(ValueError):
        list(iter_records(b"GIF89a" + bytes(40)))


def test_boundary_search_in_big_endian_nanosecond_file() -> None:
    frames = [(100 + i * 0.25, bytes([i]) * (20 + 7 * i)) for i in range(12)]
    data = pcap(frames, ">", nanos=True)
    header = parse_pcap_header(data)
    offsets = [PCAP_HEADER_LEN]
    for _, frame in frames:
        offsets.append(offsets[-1] + 16 + len(frame))
    for start in range(PCAP_HEADER_LEN, len(data) + 1):
        assert find_record_boundary(data, start, header) == offsets[bisect.bisect_left(offsets, start)]


def test_boundary_search_in_a_window_short_of_the_file_end() -> None:
    data = pcap([(1.0 + i, bytes(40)) for i in range(5)])
    header = parse_pcap_header(data)
    second = PCAP_HEADER_LEN + 56
    assert find_record_boundary(data[: second + 56 * 3], PCAP_HEADER_LEN + 1, header, at_eof=False) == second
    assert find_record_boundary(data[: second + 56 * 2], PCAP_HEADER_LEN + 1, header, at_eof=False) is None


@pytest.mark.parametrize("endian", ["<", ">"])
def test_pcapng_interfaces_resolutions_and_simple_packets(endian: str) -> None:
    frame4 = ethernet(ipv4("10.0.0.1", "10.0.0.2", tcp(CLIENT, SERVER, 1, payload=b"v4")))
    frame6 = ipv6(CLIENT6[0], SERVER6[0], tcp(CLIENT6, SERVER6, 1, payload=b"v6"))
    data = b"".join([
        pcapng_shb(endian),
        pcapng_idb(endian, 1),  # default resolution: microseconds
        pcapng_idb(endian, 101, tsresol=9),
        pcapng_block(endian, 5, b"interface statistics: skipped"),
        pcapng_epb(endian, 0, 1_500_000, frame4),
        pcapng_epb(endian, 1, 2_250_000_000, frame6),
        pcapng_block(endian, 3, struct.pack(endian + "I", len(frame4)) + frame4),
        pcapng_shb(endian),  # a new section forgets the interfaces of the last one
        pcapng_idb(endian, 229, tsresol=0x80 | 10),  # binary resolution: 2**-10 s
        pcapng_epb(endian, 0, 3 * 1024, frame6),
    ])
    records = list(iter_records(data))
    assert [(r.ts, r.linktype, bytes(r.data)) for r in records] == [
        (1.5, 1, frame4), (2.25, 101, frame6), (2.25, 1, frame4), (3.0, 229, frame6)]
    assert [parse_tcp(r.linktype, r.data).payload for r in records] == [b"v4", b"v6", b"v4", b"v6"]
    assert list(iter_records(data[:-5])) == records[:-1]


# --- link layers and IP ---------------------------------------------------------------------------


V4_TCP = ipv4("192.0.2.1", "192.0.2.2", tcp(("", 1234), ("", 9876), 42, PSH | ACK, b"hello", ack=7),
              options=b"\x01\x01\x01\x00")
V6_TCP = ipv6(CLIENT6[0], SERVER6[0], tcp(CLIENT6, SERVER6, 42, PSH | ACK, b"hello", ack=7),
              extensions=((0, b"\x01\x00"), (60, b"\x01\x02\x00\x00"), (44, b"\x00\x00\x00\x00\x00\x01")))


IPV4_FRAMES = [(1, ethernet(V4_TCP) + bytes(6)), (1, ethernet(V4_TCP, vlans=2)),
               (113, struct.pack("!HHH8sH", 0, 772, 6, b"", 0x0800) + V4_TCP),
               (276, struct.pack("!HHIHBB8s", 0x0800, 0, 1, 772, 0, 6, b"") + V4_TCP),
               (0, struct.pack("<I", 2) + V4_TCP), (0, struct.pack(">I", 2) + V4_TCP),
               (108, struct.pack(">I", 2) + V4_TCP), (101, V4_TCP), (228, V4_TCP)]


@pytest.mark.parametrize(("linktype", "frame"), IPV4_FRAMES)  # Ethernet pads short frames, or has VLANs
def test_ipv4_over_every_link_type(linktype: int, frame: bytes) -> None:
    assert parse_tcp(linktype, frame) == TcpSegment("192.0.2.1:1234", "192.0.2.2:9876", 42, 7, PSH | ACK, b"hello")


@pytest.mark.parametrize(("linktype", "frame"), [
    (1, ethernet(V6_TCP, 0x86DD)),
    (276, struct.pack("!HHIHBB8s", 0x86DD, 0, 1, 772, 0, 6, b"") + V6_TCP),
    (0, struct.pack("<I", 30) + V6_TCP),
    (0, struct.pack(">I", 24) + V6_TCP),
    (101, V6_TCP),
    (229, V6_TCP),
])
def test_ipv6_with_extension_headers(linktype: int, frame: bytes) -> None:
    expected = TcpSegment("[2001:db8::1]:40000", "[2001:db8::2]:9876", 42, 7, PSH | ACK, b"hello")
    assert parse_tcp(linktype, frame) == expected


@pytest.mark.parametrize(("linktype", "frame"), [
    (1, ethernet(ipv4("10.0.0.1", "10.0.0.2", b"\x00" * 8, protocol=17))),  # UDP
    (1, ethernet(b"\x00" * 28, 0x0806)),  # ARP
    (1, ethernet(ipv4("10.0.0.1", "10.0.0.2", tcp(CLIENT, SERVER, 1), fragment=0x2000 | 185))),  # later fragment
    (229, ipv6(CLIENT6[0], SERVER6[0], tcp(CLIENT6, SERVER6, 1), extensions=((44, b"\x00\x08\x00\x00\x00\x01"),))),
    (1, ethernet(V4_TCP)[:40]),  # TCP header cut short
    (1, b"\x00" * 5),
    (147, V4_TCP),  # a link type we do not decode
])
def test_non_tcp_and_damaged_frames_are_skipped(linktype: int, frame: bytes) -> None:
    assert parse_tcp(linktype, frame) is None


@pytest.mark.parametrize("port", [None, 9876, 1234, 80])
def test_columns_decode_what_parse_tcp_decodes(port: int | None) -> None:
    """segment_columns (IPv4 in bulk, the rest one by one) agrees with parse_tcp record by record,
    in capture order, whichever path each record takes."""
    frames = [
        *IPV4_FRAMES,
        (1, ethernet(V6_TCP, 0x86DD)), (229, V6_TCP),
        (1, ethernet(ipv4("10.0.0.1", "10.0.0.2", b"\x00" * 8, protocol=17))),
        (1, ethernet(ipv4("10.0.0.1", "10.0.0.2", tcp(CLIENT, SERVER, 1), fragment=0x2000 | 185))),
        (1, ethernet(V4_TCP)[:40]), (1, b"\x00" * 5), (147, V4_TCP), (0, struct.pack("<I", 2) + V4_TCP[:30]),
        (1, ethernet(ipv4(CLIENT[0], SERVER[0], tcp(CLIENT, SERVER, 99, SYN, b"x" * 3)))),
    ]
    data = b"".join(frame for _, frame in frames)
    starts = list(itertools.accumulate((len(frame) for _, frame in frames), initial=0))[:-1]
    lengths = np.array([len(frame) for _, frame in frames])
    index = RecordIndex(np.arange(len(frames), dtype=np.float64), np.array([lt for lt, _ in frames]),
                        np.array(starts), lengths, lengths)
    columns = segment_columns(data, index, port)
    found = [(ts, TcpSegment(columns.endpoints[src], columns.endpoints[dst], seq, ack, flags, data[start:end]))
             for ts, src, dst, seq, ack, flags, start, end in zip(
                 *(getattr(columns, name).tolist() for name in ("ts", "src", "dst", "seq", "ack", "flags", "start",
                                                                 "end")), strict=True)]
    expected = [(float(ts), segment) for ts, (linktype, frame) in enumerate(frames)
                if (segment := parse_tcp(linktype, frame)) is not None
                and (port is None or port in (_port(segment.src), _port(segment.dst)))]
    assert found == expected
    assert len(found) == {None: 12, 9876: 12, 1234: 9, 80: 0}[port]


def _port(endpoint: str) -> int:
    return int(endpoint.rpartition(":")[2])


def test_syn_flags_and_addresses_from_an_ethernet_frame() -> None:
    frame = ethernet(ipv4(CLIENT[0], SERVER[0], tcp(CLIENT, SERVER, 99, SYN, options=b"\x02\x04\x05\xb4")))
    assert parse_tcp(1, frame) == TcpSegment("10.0.0.1:40000", "10.0.0.2:9876", 99, 0, SYN, b"")


# --- reassembly -----------------------------------------------------------------------------------


def test_handshake_data_and_close() -> None:
    packets = handshake() + [
        (2.0, segment(CLIENT, SERVER, 1001, PSH | ACK, b"request")),
        (2.1, segment(SERVER, CLIENT, 5001, PSH | ACK, b"answer")),
        (3.0, segment(CLIENT, SERVER, 1008, FIN | ACK)),
        (3.1, segment(SERVER, CLIENT, 5007, FIN | ACK)),
    ]
    connection = only(reassemble(packets))
    assert (connection.conn_id, connection.client, connection.server) == (0, "10.0.0.1:40000", "10.0.0.2:9876")
    assert (connection.opened_ts, connection.closed_ts, connection.close_kind, connection.first_close_by) == (
        1.0, 3.0, "fin", "client")
    assert list(connection.to_server) == [Chunk(2.0, 0, b"request")]
    assert list(connection.to_client) == [Chunk(2.1, 0, b"answer")]


def test_out_of_order_segments_wait_for_the_hole() -> None:
    packets = handshake() + [
        (2.0, segment(CLIENT, SERVER, 1005, ACK, b"4567")),
        (2.1, segment(CLIENT, SERVER, 1009, ACK, b"89")),
        (2.2, segment(CLIENT, SERVER, 1001, ACK, b"0123")),
        (2.3, segment(CLIENT, SERVER, 1011, ACK, b"ab")),
    ]
    direction = only(reassemble(packets)).to_server
    assert list(direction) == [Chunk(2.2, 0, b"0123"), Chunk(2.2, 4, b"4567"), Chunk(2.2, 8, b"89"),
                               Chunk(2.3, 10, b"ab")]
    assert direction.gaps == []
    assert stream_bytes(direction) == [Chunk(2.2, 0, b"0123456789ab")]


def test_retransmissions_and_overlaps_keep_the_first_copy() -> None:
    packets = handshake() + [
        (2.0, segment(CLIENT, SERVER, 1001, ACK, b"abcd")),
        (2.1, segment(CLIENT, SERVER, 1001, ACK, b"abcd")),  # plain retransmission
        (2.2, segment(CLIENT, SERVER, 1003, ACK, b"XXef")),  # overlap with different bytes
        (2.3, segment(CLIENT, SERVER, 1000, SYN)),  # retransmitted SYN: same connection
    ]
    connections = reassemble(packets)
    assert joined(only(connections).to_server) == b"abcdef"
    assert list(connections[0].to_server)[-1] == Chunk(2.2, 4, b"ef")


def test_unfilled_hole_becomes_a_gap_and_the_stream_resumes() -> None:
    packets = handshake() + [
        (2.0, segment(CLIENT, SERVER, 1001, ACK, b"aaaa")),
        (2.1, segment(CLIENT, SERVER, 1009, ACK, b"cccc")),
        (2.2, segment(CLIENT, SERVER, 1013, ACK, b"dd")),
    ]
    direction = only(reassemble(packets)).to_server
    assert direction.gaps == [(4, 4)]
    assert list(direction) == [Chunk(2.0, 0, b"aaaa"), Chunk(2.1, 8, b"cccc"), Chunk(2.2, 12, b"dd")]
    assert stream_bytes(direction) == [Chunk(2.0, 0, b"aaaa"), Chunk(2.1, 8, b"ccccdd")]


def test_a_hole_the_receiver_acknowledged_is_a_gap_at_once() -> None:
    """The server acknowledging bytes past the hole got them where the capture did not: the hole
    is a gap from then on (a late copy of its bytes is a retransmission), and the bytes after it
    are delivered then, not held to the end of the connection."""
    packets = handshake() + [
        (2.0, segment(CLIENT, SERVER, 1001, ACK, b"aaaa")),
        (2.1, segment(CLIENT, SERVER, 1009, ACK, b"cccc")),
        (2.2, segment(SERVER, CLIENT, 5001, ACK, ack=1013)),
        (2.3, segment(CLIENT, SERVER, 1005, ACK, b"bbbb")),
        (2.4, segment(CLIENT, SERVER, 1013, ACK, b"dd")),
    ]
    direction = only(reassemble(packets)).to_server
    assert direction.gaps == [(4, 4)]
    assert list(direction) == [Chunk(2.0, 0, b"aaaa"), Chunk(2.1, 8, b"cccc"), Chunk(2.4, 12, b"dd")]


def test_capture_starting_mid_stream() -> None:
    packets = [
        (1.0, segment(SERVER, CLIENT, 777, PSH | ACK, b"late answer")),
        (1.1, segment(CLIENT, SERVER, 123456, PSH | ACK, b"next request")),
    ]
    connection = only(reassemble(packets))
    assert (connection.client, connection.server) == ("10.0.0.1:40000", "10.0.0.2:9876")
    assert list(connection.to_client) == [Chunk(1.0, 0, b"late answer")]
    assert list(connection.to_server) == [Chunk(1.1, 0, b"next request")]


def test_without_syn_or_server_port_the_first_sender_is_the_client() -> None:
    connection = only(reassemble([(1.0, segment(SERVER, CLIENT, 1, ACK, b"x"))], server_port=1))
    assert connection.client == "10.0.0.2:9876"


def test_syn_ack_identifies_the_server_when_the_syn_was_missed() -> None:
    connection = only(reassemble(handshake()[1:], server_port=1))
    assert (connection.client, connection.server) == ("10.0.0.1:40000", "10.0.0.2:9876")


def test_sequence_numbers_wrap_around() -> None:
    isn = 2**32 - 3
    packets = handshake(client_isn=isn) + [
        (2.0, segment(CLIENT, SERVER, isn + 1, ACK, b"abcd")),  # crosses 2**32
        (2.2, segment(CLIENT, SERVER, isn + 9, ACK, b"ij")),  # out of order, past the wrap
        (2.1, segment(CLIENT, SERVER, isn + 5, ACK, b"efgh")),
        (2.3, segment(CLIENT, SERVER, isn + 3, ACK, b"cd")),  # old bytes, before the wrap
    ]
    direction = only(reassemble(packets)).to_server
    assert joined(direction) == b"abcdefghij"
    assert direction[-1].offset == 8


def test_port_reuse_starts_a_new_connection() -> None:
    first = handshake() + [
        (2.0, segment(CLIENT, SERVER, 1001, PSH | ACK, b"one")),
        (3.0, segment(SERVER, CLIENT, 5001, RST | ACK)),
    ]
    second = handshake(client_isn=90000, server_isn=70000, ts=4.0) + [
        (5.0, segment(CLIENT, SERVER, 90001, PSH | ACK, b"two")),
    ]
    third = [(6.0, segment(CLIENT, SERVER, 123, SYN)), (6.1, segment(CLIENT, SERVER, 124, ACK, b"three"))]
    connections = reassemble(first + second + third)
    assert [c.conn_id for c in connections] == [0, 1, 2]
    assert [joined(c.to_server) for c in connections] == [b"one", b"two", b"three"]
    reset, reused, _ = connections
    assert (reset.closed_ts, reset.close_kind, reset.first_close_by) == (3.0, "rst", "server")
    assert reused.opened_ts == 4.0 and reused.closed_ts is None


def test_connections_are_listed_by_first_packet() -> None:
    other = ("10.0.0.3", 40001)
    packets = [
        (1.0, segment(CLIENT, SERVER, 1, ACK, b"a")),
        (1.1, segment(other, SERVER, 1, ACK, b"b")),
        (1.2, segment(CLIENT, SERVER, 2, ACK, b"c")),
    ]
    assert [(c.client, joined(c.to_server)) for c in reassemble(packets)] == [
        ("10.0.0.1:40000", b"ac"), ("10.0.0.3:40001", b"b")]


def test_ipv6_sll2_capture_end_to_end() -> None:
    def frame(src: tuple[str, int], dst: tuple[str, int], seq: int, flags: int, payload: bytes = b"") -> bytes:
        packet = ipv6(src[0], dst[0], tcp(src, dst, seq, flags, payload))
        return struct.pack("!HHIHBB8s", 0x86DD, 0, 1, 772, 0, 6, b"") + packet

    data = pcap([
        (1.0, frame(CLIENT6, SERVER6, 10, SYN)),
        (1.1, frame(SERVER6, CLIENT6, 20, SYN | ACK)),
        (1.2, frame(CLIENT6, SERVER6, 11, PSH | ACK, b"ping")),
        (1.3, frame(SERVER6, CLIENT6, 21, PSH | ACK, b"pong")),
        (1.4, frame(CLIENT6, SERVER6, 15, FIN | ACK)),  # cut short below: dropped
    ], linktype=276)[:-1]
    connection = only(reassemble(tcp_segments(iter_records(data))))
    assert (connection.client, connection.server) == ("[2001:db8::1]:40000", "[2001:db8::2]:9876")
    assert joined(connection.to_server) == b"ping" and joined(connection.to_client) == b"pong"
    assert connection.closed_ts is None


