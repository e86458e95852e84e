"""TCP reassembly: the shared captures' connections carry whole frames; loss, reordering,
retransmission, wraparound and port reuse built here (clean loopback captures never show them)."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import numpy as np
import pytest

from spark_analysis.capture import reassembly
from spark_analysis.capture.packets import ACK, FIN, PSH, RST, SYN, TcpSegment, tcp_segments
from spark_analysis.capture.reassembly import Chunk, reassemble, stream_bytes
from spark_analysis.capture.records import iter_records, read_records
from tests.spark.capture.builders import (
    CLIENT,
    CLIENT6,
    SERVER,
    SERVER6,
    handshake,
    ipv6,
    joined,
    only,
    pcap,
    segment,
    tcp,
)

# Connections on port 9876 in each shared capture (see its README for the scenarios).
EXPECTED_CONNECTIONS = {
    "binary_lifecycle.pcap": 29,
    "compressed_bulk.pcap": 29,
    "json_lifecycle.pcap": 29,
    "v5_probe.pcap": 6,
}
MAX_FRAME = 16 * 1024 * 1024  # Java's default remoting frame limit: larger length words are refused


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


def _sacked(packet: tuple[float, TcpSegment], left: int, right: int) -> tuple[float, TcpSegment]:
    ts, sent = packet
    return ts, sent._replace(sack=(left, right))


def test_bytes_the_receiver_sacked_before_the_capture_are_unseen_not_a_gap() -> None:
    """Captured on the broker's host, begun mid-connection: bytes 1001-1100 were lost on the way,
    1101-1300 arrived out of order before tcpdump started. The NameServer's duplicate ACK says so
    (ack 1001, SACK 1101-1301), the broker sends 1001-1100 again and goes on at 1301, and the
    NameServer acknowledges all of it: 1101-1300 were received, just not in the capture."""
    packets = [
        _sacked((1.0, segment(SERVER, CLIENT, 5001, ACK, ack=1001)), 1101, 1301),
        (1.1, segment(CLIENT, SERVER, 1001, ACK, b"a" * 100, ack=5001)),
        (1.2, segment(CLIENT, SERVER, 1301, ACK, b"d" * 50, ack=5001)),
        (1.3, segment(SERVER, CLIENT, 5001, ACK, ack=1351)),
    ]
    direction = only(reassemble(packets)).to_server
    assert (direction.gaps, direction.unseen) == ([], [(100, 200)])
    assert list(direction) == [Chunk(1.1, 0, b"a" * 100), Chunk(1.2, 300, b"d" * 50)]


def test_a_segment_captured_before_an_earlier_one_starts_no_stream_of_its_own() -> None:
    """Captured on the NameServer's host as segments arrive out of order: 1101-1200 came before the
    capture began, 1201-1300 is the first captured, then the NameServer's ACK (1001, SACK 1101-1301)
    and the late 1001-1100. The stream starts at 1001 (what the receiver lacked), not at 1201: the
    late segment is the stream's, not a retransmission dropped, and 1101-1200 are unseen."""
    packets = [
        (1.0, segment(CLIENT, SERVER, 1201, ACK, b"c" * 100, ack=5001)),
        _sacked((1.1, segment(SERVER, CLIENT, 5001, ACK, ack=1001)), 1101, 1301),
        (1.2, segment(CLIENT, SERVER, 1001, ACK, b"a" * 100, ack=5001)),
        (1.3, segment(SERVER, CLIENT, 5001, ACK, ack=1301)),
    ]
    direction = only(reassemble(packets)).to_server
    assert (direction.gaps, direction.unseen) == ([], [(100, 100)])
    assert list(direction) == [Chunk(1.2, 0, b"a" * 100), Chunk(1.0, 200, b"c" * 100)]


def test_bytes_sacked_before_the_late_segment_are_unseen_when_nothing_follows_at_once() -> None:
    """v5-reorder's from-6: the duplicate ACK (1001, SACK 1101-1301) is captured first, then the late
    1001-1100 and the ACK of all of it; the broker's next bytes come 10 s later. The hole is told when
    it is acknowledged, not left to become a gap when those bytes come."""
    packets = [
        _sacked((1.0, segment(SERVER, CLIENT, 5001, ACK, ack=1001)), 1101, 1301),
        (1.1, segment(CLIENT, SERVER, 1001, ACK, b"a" * 100, ack=5001)),
        (1.2, segment(SERVER, CLIENT, 5001, ACK, ack=1301)),
        (11.0, segment(CLIENT, SERVER, 1301, ACK, b"d" * 50, ack=5001)),
        (11.1, segment(SERVER, CLIENT, 5001, ACK, ack=1351)),
    ]
    direction = only(reassemble(packets)).to_server
    assert (direction.gaps, direction.unseen) == ([], [(100, 200)])


def test_bytes_the_receivers_first_acknowledgment_covers_are_unseen() -> None:
    """A capture begun as the late segment arrived (v5-reorder's from-7: 1101-1300 came before it, no
    duplicate ACK captured): the first ACK the capture holds, right after 1001-1100, acknowledges up to
    1301. What the receiver had when the capture first heard from it came before the capture."""
    packets = [
        (1.0, segment(CLIENT, SERVER, 1001, ACK, b"a" * 100, ack=5001)),
        (1.1, segment(SERVER, CLIENT, 5001, ACK, ack=1301)),
        (11.0, segment(CLIENT, SERVER, 1301, ACK, b"d" * 50, ack=5001)),
        (11.1, segment(SERVER, CLIENT, 5001, ACK, ack=1351)),
    ]
    direction = only(reassemble(packets)).to_server
    assert (direction.gaps, direction.unseen) == ([], [(100, 200)])
    assert list(direction) == [Chunk(1.0, 0, b"a" * 100), Chunk(11.0, 300, b"d" * 50)]


def test_without_a_sack_block_a_hole_at_the_start_is_still_a_gap() -> None:
    """The same capture with no SACK block (a peer without SACK): the receiver's first ACK, before any
    segment, said it had nothing past 1001, so 1101-1300 came while the capture ran: a gap."""
    packets = [
        (1.0, segment(SERVER, CLIENT, 5001, ACK, ack=1001)),
        (1.1, segment(CLIENT, SERVER, 1001, ACK, b"a" * 100, ack=5001)),
        (1.2, segment(CLIENT, SERVER, 1301, ACK, b"d" * 50, ack=5001)),
        (1.3, segment(SERVER, CLIENT, 5001, ACK, ack=1351)),
    ]
    direction = only(reassemble(packets)).to_server
    assert (direction.gaps, direction.unseen) == ([(100, 200)], [])


def test_bytes_sacked_after_the_start_settled_are_a_gap() -> None:
    """A SACK block about bytes sent while the capture ran (it dropped them) says nothing of what
    came before it: a gap, as any hole the capture missed."""
    packets = [
        (1.0, segment(CLIENT, SERVER, 1001, ACK, b"a" * 100, ack=5001)),
        (1.1, segment(SERVER, CLIENT, 5001, ACK, ack=1101)),
        (1.2, segment(CLIENT, SERVER, 1201, ACK, b"c" * 100, ack=5001)),
        _sacked((1.3, segment(SERVER, CLIENT, 5001, ACK, ack=1101)), 1201, 1301),
        (1.4, segment(SERVER, CLIENT, 5001, ACK, ack=1301)),
    ]
    direction = only(reassemble(packets)).to_server
    assert (direction.gaps, direction.unseen) == ([(100, 100)], [])


def test_a_stale_acknowledgment_makes_no_hole_before_the_captured_start() -> None:
    """An ACK from before the capture's first segment (a delayed one, or a peer's old number) puts
    the start before bytes never captured: the captured part starts at its first byte, no gap."""
    packets = [
        (1.0, segment(CLIENT, SERVER, 2001, ACK, b"x" * 10, ack=5001)),
        (1.1, segment(SERVER, CLIENT, 5001, ACK, ack=1001)),
        (1.2, segment(CLIENT, SERVER, 2011, ACK, b"y" * 10, ack=5001)),
    ]
    direction = only(reassemble(packets)).to_server
    assert (direction.gaps, direction.unseen) == ([], [])
    assert stream_bytes(direction) == [Chunk(1.0, 0, b"x" * 10 + b"y" * 10)]


def test_of_a_packet_captured_twice_the_copy_that_kept_more_is_read() -> None:
    """dumpcap -i any -s 96 -i lo -s 256: every packet twice, the cooked copy first (a microsecond
    earlier) and cut shorter. The bytes are the same, so the fuller copy's are read: a frame's header
    that only the loopback's copy kept is not lost to the first copy's cut."""
    request = b"R" * 300
    short = segment(CLIENT, SERVER, 1001, PSH | ACK, request[:8], ack=5001)._replace(missing=292)
    full = segment(CLIENT, SERVER, 1001, PSH | ACK, request[:170], ack=5001)._replace(missing=130)
    packets = handshake() + [(2.0, short), (2.000001, full)]
    direction = only(reassemble(packets)).to_server
    assert list(direction) == [Chunk(2.0, 0, request[:170])]
    assert direction.uncaptured == [(170, 130)]


def test_without_syn_or_server_port_the_first_sender_is_the_client() -> None:
    connection = only(reassemble([(1.0, segment(SERVER, CLIENT, 1, ACK, b"x"))], servers=frozenset({1})))
    assert connection.client == "10.0.0.2:9876"


def test_syn_ack_identifies_the_server_when_the_syn_was_missed() -> None:
    connection = only(reassemble(handshake()[1:], servers=frozenset({1})))
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


# Stretches of plain in-order segments are delivered a direction at a time (reassembly._deliver_stretch):
# the same chunks, gaps and cuts as the walk segment by segment, whatever comes in or around them.

def _conversation(rng: random.Random, isn: int, wrap: bool) -> list[tuple[float, TcpSegment]]:
    """A long request/answer exchange with bare ACKs, then some of: a reordered, retransmitted,
    overlapping or lost segment, an ACK past a hole, a segment a snap length cut, a FIN, a reuse."""
    client_isn = 2**32 - 200 if wrap else isn
    packets = handshake(client_isn=client_isn, server_isn=isn + 7)
    sent = {True: client_isn + 1, False: isn + 8}
    ts = 2.0
    for _ in range(rng.randrange(20, 80)):
        from_client = rng.random() < 0.6
        payload = bytes([rng.randrange(256)]) * rng.randrange(1, 40)
        src, dst = (CLIENT, SERVER) if from_client else (SERVER, CLIENT)
        packets.append((ts, segment(src, dst, sent[from_client], PSH | ACK, payload, ack=sent[not from_client])))
        sent[from_client] += len(payload)
        if rng.random() < 0.3:
            packets.append((ts + 0.0005, segment(dst, src, sent[not from_client], ACK, ack=sent[from_client])))
        ts += 0.01
    for _ in range(rng.randrange(0, 4)):
        at = rng.randrange(4, len(packets))
        _, chosen = packets[at]
        trouble = rng.choice(("reorder", "retransmit", "overlap", "lose", "ack_past", "cut", "fin", "syn"))
        if trouble == "reorder" and at + 1 < len(packets):
            packets[at], packets[at + 1] = (packets[at][0], packets[at + 1][1]), (packets[at + 1][0], chosen)
        elif trouble == "retransmit":
            packets.insert(rng.randrange(at, len(packets) + 1), (packets[at][0], chosen))
        elif trouble == "overlap" and len(chosen.payload) > 2:
            packets.insert(at + 1, (packets[at][0], chosen._replace(seq=(chosen.seq + 1) % 2**32,
                                                                     payload=b"X" * len(chosen.payload))))
        elif trouble == "lose":
            del packets[at]
        elif trouble == "ack_past":
            past = (chosen.seq + 10**4) % 2**32
            packets.insert(at, (packets[at][0], TcpSegment(chosen.dst, chosen.src, chosen.ack, past, ACK, b"")))
        elif trouble == "cut" and chosen.payload:
            packets[at] = (packets[at][0], chosen._replace(payload=chosen.payload[:1],
                                                           missing=len(chosen.payload) - 1))
        elif trouble == "fin":
            packets.insert(at, (packets[at][0], chosen._replace(flags=FIN | ACK, payload=b"")))
        elif trouble == "syn":
            packets[at:at] = handshake(client_isn=isn + 10**6, server_isn=isn + 2 * 10**6, ts=packets[at][0])
    return packets


def _story(packets: list[tuple[float, TcpSegment]]) -> list[tuple]:
    return [(c.client, c.server, c.opened_ts, c.closed_ts, c.close_kind, c.first_close_by,
             *((list(d), d.gaps, d.uncaptured, d.from_syn) for d in (c.to_server, c.to_client)))
            for c in reassemble(packets)]


@pytest.mark.parametrize("seed", range(60))
def test_stretches_reassemble_as_the_walk_does(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    rng = random.Random(seed)
    packets = _conversation(rng, rng.randrange(2**32), wrap=seed % 5 == 0)
    by_stretch = _story(packets)
    monkeypatch.setattr(reassembly, "_STRETCH_ROWS", 10**9)
    assert by_stretch == _story(packets)


def _clean_exchange(segments: int, payload: bytes, bare_acks: bool = False) -> list:
    """A handshake, ``segments`` data segments taking turns (with ``bare_acks``, a bare ACK after
    every fourth) and the client's FIN: a connection with nothing to reorder."""
    packets = handshake()
    sent = {True: 1001, False: 5001}
    for n in range(segments):
        src, dst = (CLIENT, SERVER) if n % 2 == 0 else (SERVER, CLIENT)
        packets.append((2.0 + n / 100, segment(src, dst, sent[n % 2 == 0], PSH | ACK, payload)))
        sent[n % 2 == 0] += len(payload)
        if bare_acks and n % 4 == 0:
            packets.append((2.0 + n / 100, segment(dst, src, sent[n % 2 != 0], ACK)))
    packets.append((9.0, segment(CLIENT, SERVER, sent[True], FIN | ACK)))
    return packets


def test_an_in_order_exchange_is_not_walked_segment_by_segment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A clean connection of 200 data segments and 100 bare ACKs: the walk takes its handshake and
    close one by one, its data a stretch at a time (not an _Reassembler.add per segment)."""
    packets = _clean_exchange(200, b"x" * 30, bare_acks=True)
    added = []
    real_add = reassembly._Reassembler.add
    monkeypatch.setattr(reassembly._Reassembler, "add", lambda self, *args, **kw: (added.append(args),
                                                                                   real_add(self, *args, **kw))[1])
    connection = only(reassemble(packets))
    assert joined(connection.to_server) == b"x" * 3000 and joined(connection.to_client) == b"x" * 3000
    assert len(added) < 10


class _CountingRows(np.ndarray):
    """SEGMENT rows that count the values their columns turn into Python objects (tolist)."""

    converted = 0

    def tolist(self):  # type: ignore[no-untyped-def]
        _CountingRows.converted += self.size
        return super().tolist()


def test_the_rows_a_stretch_delivers_are_not_turned_into_python_values() -> None:
    """The walk turns the rows it takes one by one into Python values, not every row's nine columns:
    in a clean exchange of 300 data segments, the handshake and close (converted values counted)."""
    packets = _clean_exchange(300, b"y" * 20)
    (table,) = reassembly.segment_tables(packets)
    _CountingRows.converted = 0
    (connection,) = reassembly.reassemble_table(table._replace(rows=table.rows.view(_CountingRows)))
    assert joined(connection.to_server) == joined(connection.to_client) == b"y" * 3000
    # a chunk each data segment takes four (its time, stream offset, payload start and end); the nine
    # walked columns, only the handshake's and the close's rows (4,236 values when every row's were)
    assert _CountingRows.converted < 4 * 300 + 9 * 20


def test_one_table_in_capture_order_is_kept_as_is_and_any_other_sorted() -> None:
    """merge_tables sorts by (ts, file, order): a table already so (one file's piece, mostly) is
    returned without a copy; a clock that stepped back, or pieces of two files, are sorted."""
    table = reassembly.segment_tables(handshake() + [(2.0, segment(CLIENT, SERVER, 1001, ACK, b"ab"))])[0]
    assert reassembly.merge_tables([table]).rows is table.rows
    stepped_back = table._replace(rows=table.rows.copy())
    stepped_back.rows["ts"][1] = 0.5
    assert reassembly.merge_tables([stepped_back]).rows["order"].tolist() == [1, 0, 2, 3]
    other_file = table._replace(rows=table.rows.copy())
    other_file.rows["file"] = 1
    merged = reassembly.merge_tables([other_file, table]).rows
    assert list(zip(merged["file"].tolist(), merged["order"].tolist(), strict=True)) == [
        (0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2), (0, 3), (1, 3)]


def _registrations_across_a_step_back(step_back: float) -> list[tuple[float, TcpSegment]]:
    """A broker's ten 30 s registrations, each acknowledged by the server, the clock stepped back by
    ``step_back`` seconds before the sixth: the last five stamped among the first five."""
    packets = handshake()
    for n in range(10):
        ts = 2.0 + 30 * n - (step_back if n >= 5 else 0.0)
        packets += [(ts, segment(CLIENT, SERVER, 1001 + 10 * n, PSH | ACK, bytes([65 + n]) * 10)),
                    (ts + 0.001, segment(SERVER, CLIENT, 5001, ACK, ack=1011 + 10 * n))]
    return packets


@pytest.mark.parametrize("pieces", [1, 2, 3])
def test_a_file_whose_clock_stepped_back_is_read_in_its_own_order(pieces: int) -> None:
    """v5-pause-stepped: its clock stepped back 85 s, a connection's segments after the step stamped
    among those before it. Sorted by time, a later registration (and the server's ACK of it) came
    before earlier ones, whose bytes were then taken for retransmissions of a hole: 8 of broker-b's
    11 registrations read. The file's own order keeps every byte, each once, and its stamps, however
    its byte ranges cut it."""
    packets = _registrations_across_a_step_back(89.995)
    (table,) = reassembly.segment_tables(packets)
    parts = np.array_split(table.rows, pieces)
    merged = reassembly.merge_tables([table._replace(rows=rows) for rows in reversed(parts)])
    (connection,) = reassembly.reassemble_table(merged)
    assert joined(connection.to_server) == b"".join(bytes([65 + n]) * 10 for n in range(10))
    assert not connection.to_server.gaps
    assert merged.rows["order"].tolist() == sorted(table.rows["order"].tolist())
    assert [chunk.ts for chunk in connection.to_server] == [ts for ts, s in packets if s.payload]


def test_a_step_back_within_the_tolerance_is_still_sorted_by_time() -> None:
    """Stamps a few seconds out of order (packets captured on several CPUs or interfaces) are
    ordered by time, as they always were: only a step back beyond STEP_BACK_TOLERANCE_S keeps the
    file's order."""
    packets = _registrations_across_a_step_back(reassembly.STEP_BACK_TOLERANCE_S - 1)
    (table,) = reassembly.segment_tables(packets)
    merged = reassembly.merge_tables([table]).rows
    assert merged["ts"].tolist() == sorted(merged["ts"].tolist())
