"""Link layers and IP down to TCP segments: every link type, IPv6 extension headers, damaged frames,
and the columnar decoder against the one-frame decoder."""

from __future__ import annotations

import itertools
import struct

import numpy as np
import pytest

from spark_analysis.capture.packets import ACK, PSH, SYN, TcpSegment, parse_tcp, segment_columns
from spark_analysis.capture.records import RecordIndex
from tests.spark.capture.builders import CLIENT, CLIENT6, SERVER, SERVER6, ethernet, ipv4, ipv6, tcp

V4_TCP = ipv4("192.0.2.1", "192.0.2.2", tcp(("", 1234), ("", 9876), 42, PSH | ACK, b"hello", ack=7),
              options=b"\x01\x01\x01\x00")
V6_TCP = ipv6(CLIENT6[0], SERVER6[0], tcp(CLIENT6, SERVER6, 42, PSH | ACK, b"hello", ack=7),
              extensions=((0, b"\x01\x00"), (60, b"\x01\x02\x00\x00"), (44, b"\x00\x00\x00\x00\x00\x01")))


IPV4_FRAMES = [(1, ethernet(V4_TCP) + bytes(6)), (1, ethernet(V4_TCP, vlans=2)),
               (113, struct.pack("!HHH8sH", 0, 772, 6, b"", 0x0800) + V4_TCP),
               (276, struct.pack("!HHIHBB8s", 0x0800, 0, 1, 772, 0, 6, b"") + V4_TCP),
               # Linux cooked v1 and v2 of a VLAN-tagged frame (a mirror port's or a trunk's, captured with
               # -i any): the protocol field says 802.1Q, the tag's 4 bytes follow the header (v5-bridge)
               (113, struct.pack("!HHH8sHHH", 0, 1, 6, b"", 0x8100, 42, 0x0800) + V4_TCP),
               (113, struct.pack("!HHH8sHHHHH", 0, 1, 6, b"", 0x88A8, 7, 0x8100, 42, 0x0800) + V4_TCP),
               (276, struct.pack("!HHIHBB8sHH", 0x8100, 0, 1, 1, 0, 6, b"", 42, 0x0800) + V4_TCP),
               (0, struct.pack("<I", 2) + V4_TCP), (0, struct.pack(">I", 2) + V4_TCP),
               (108, struct.pack(">I", 2) + V4_TCP), (101, V4_TCP), (228, V4_TCP),
               # Apple's PKTAP (macOS tcpdump -i any): its header's length, a packet record, the DLT after it
               (258, struct.pack("<III", 108, 1, 1) + bytes(96) + ethernet(V4_TCP)),
               (258, struct.pack("<III", 108, 1, 12) + bytes(96) + V4_TCP)]


def udp(port: int, payload: bytes) -> bytes:
    return struct.pack("!HHHH", 50000, port, 8 + len(payload), 0) + payload


def gre(carried: int, payload: bytes, flags: int = 0) -> bytes:
    fields = sum(bool(flags & bit) for bit in (0x8000, 0x2000, 0x1000))
    return struct.pack("!HH", flags, carried) + bytes(4 * fields) + payload


def tunnel(protocol: int, payload: bytes) -> bytes:
    """Mirrored traffic as a collector receives it: an outer Ethernet and IPv4 around the tunnel."""
    return ethernet(ipv4("10.9.0.1", "10.9.0.2", payload, protocol=protocol))


# traffic mirrored to a collector (AWS VPC Traffic Mirroring: VXLAN; a gateway load balancer: Geneve;
# a switch's ERSPAN II/III over GRE; plain GRE, with and without its optional fields; GRE in IPv6)
TUNNELLED = [(1, tunnel(17, udp(4789, bytes(8) + ethernet(V4_TCP)))),
             (1, tunnel(17, udp(6081, struct.pack("!BBHI", 1, 0, 0x6558, 0) + bytes(4) + ethernet(V4_TCP)))),
             (1, tunnel(47, gre(0x0800, V4_TCP))),
             (1, tunnel(47, gre(0x6558, ethernet(V4_TCP), flags=0xA000))),
             (1, tunnel(47, gre(0x88BE, bytes(8) + ethernet(V4_TCP), flags=0x1000))),
             (1, tunnel(47, gre(0x22EB, bytes(11) + b"\x01" + bytes(8) + ethernet(V4_TCP), flags=0x1000))),
             (1, ethernet(struct.pack("!IHBB", 6 << 28, len(gre(0x0800, V4_TCP)), 47, 64) + bytes(32)
                          + gre(0x0800, V4_TCP), 0x86DD)),
             (1, tunnel(47, gre(0x0800, ipv4("10.9.0.3", "10.9.0.4", gre(0x0800, V4_TCP), protocol=47))))]  # 2 deep
IPV4_FRAMES += TUNNELLED


@pytest.mark.parametrize(("linktype", "frame"), IPV4_FRAMES)  # Ethernet pads short frames, or has VLANs
def test_ipv4_over_every_link_type(linktype: int, frame: bytes) -> None:
    assert parse_tcp(linktype, frame) == TcpSegment("192.0.2.1:1234", "192.0.2.2:9876", 42, 7, PSH | ACK, b"hello")


@pytest.mark.parametrize(("linktype", "frame"), [
    (1, ethernet(V6_TCP, 0x86DD)),
    (276, struct.pack("!HHIHBB8s", 0x86DD, 0, 1, 772, 0, 6, b"") + V6_TCP),
    (276, struct.pack("!HHIHBB8sHH", 0x8100, 0, 1, 1, 0, 6, b"", 42, 0x86DD) + V6_TCP),
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
    (258, struct.pack("<III", 108, 2, 1) + bytes(96) + ethernet(V4_TCP)),  # a PKTAP record that is no packet
    (258, struct.pack("<III", 4000, 1, 1) + bytes(96) + ethernet(V4_TCP)),  # a PKTAP header longer than the frame
    (1, tunnel(17, udp(4790, bytes(8) + ethernet(V4_TCP)))),  # UDP to another port: no tunnel read
    (1, tunnel(47, gre(0x0800, tunnel(47, gre(0x0800, V4_TCP))[14:]))[:-len(V4_TCP)] + b"x"),  # cut short
    (1, tunnel(47, gre(0x0800, ipv4("10.9.0.3", "10.9.0.4", gre(0x0800, ipv4("10.9.0.5", "10.9.0.6", gre(
        0x0800, V4_TCP), protocol=47)), protocol=47)))),  # tunnels three deep are not read
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
    columns = segment_columns(data, index, (port,) if port else ())
    found = [(ts, TcpSegment(columns.endpoints[src], columns.endpoints[dst], seq, ack, flags, data[start:end]))
             for ts, src, dst, seq, ack, flags, start, end in zip(
                 *(getattr(columns, name).tolist() for name in ("ts", "src", "dst", "seq", "ack", "flags", "start",
                                                                 "end")), strict=True)]
    expected = [(float(ts), segment) for ts, (linktype, frame) in enumerate(frames)
                if (segment := parse_tcp(linktype, frame)) is not None
                and (port is None or port in (_port(segment.src), _port(segment.dst)))]
    assert found == expected
    assert len(found) == {None: 25, 9876: 25, 1234: 22, 80: 0}[port]


def _port(endpoint: str) -> int:
    return int(endpoint.rpartition(":")[2])


def test_syn_flags_and_addresses_from_an_ethernet_frame() -> None:
    frame = ethernet(ipv4(CLIENT[0], SERVER[0], tcp(CLIENT, SERVER, 99, SYN, options=b"\x02\x04\x05\xb4")))
    assert parse_tcp(1, frame) == TcpSegment("10.0.0.1:40000", "10.0.0.2:9876", 99, 0, SYN, b"")


def test_endpoint_ids_are_given_in_the_order_of_their_codes_as_a_sort_would() -> None:
    """Endpoints hashed (no sort of every packet) are numbered as np.unique's sorted codes number
    them, after those already known; each packet gets its endpoint's id."""
    import numpy as np

    from spark_analysis.capture.packets import _endpoint, _endpoint_ids

    rng = np.random.default_rng(7)
    ips = rng.integers(0x0A000001, 0x0A000040, 5000).astype(np.int64)
    ports = rng.integers(9870, 9880, 5000).astype(np.int64)
    known = {"10.0.0.99:1": 0}
    got = _endpoint_ids(ips, ports, known)
    codes, inverse = np.unique(ips << 16 | ports, return_inverse=True)
    expected = {"10.0.0.99:1": 0}
    for code in codes:
        expected.setdefault(_endpoint(int(code) >> 16, int(code) & 0xFFFF), len(expected))
    assert list(known.items()) == list(expected.items())
    ids = np.array([expected[_endpoint(int(c) >> 16, int(c) & 0xFFFF)] for c in codes])
    assert got.tolist() == ids[inverse].tolist()


#: Linux's options on a duplicate ACK: NOP, NOP, timestamps, NOP, NOP, two SACK blocks (the newest first)
SACK_OPTIONS = (b"\x01\x01\x08\x0a" + bytes(8) + b"\x01\x01\x05\x12"
                + struct.pack("!IIII", 3001, 3501, 2001, 2501))


@pytest.mark.parametrize("options, span", [
    (SACK_OPTIONS, (2001, 3501)),
    (b"\x01\x01\x08\x0a" + bytes(8), (0, 0)),  # the usual timestamps alone
    (b"\x01\x01\x05\x0a" + struct.pack("!II", 2**32 - 100, 50), (2**32 - 100, 50)),  # a block across the wrap
    (b"\x01\x01\x05\x12" + struct.pack("!I", 7), (0, 0)),  # its blocks cut by a snap length
])
def test_sack_blocks_are_read_by_both_decoders(options: bytes, span: tuple[int, int]) -> None:
    """A receiver's SACK blocks (the bytes it had out of order) as the span they cover, from IPv4 in
    bulk and from IPv6 one by one; a block cut off is not read."""
    v4 = ethernet(ipv4(SERVER[0], CLIENT[0], tcp(SERVER, CLIENT, 5001, ACK, ack=1001, options=options)))
    v6 = ethernet(ipv6(SERVER6[0], CLIENT6[0], tcp(SERVER6, CLIENT6, 5001, ACK, ack=1001, options=options)), 0x86DD)
    if len(options) % 4:  # a cut: the header says its options are whole, the capture holds less
        v4 = ethernet(ipv4(SERVER[0], CLIENT[0], tcp(SERVER, CLIENT, 5001, ACK, ack=1001,
                                                       options=options + bytes(-len(options) % 4))))[:-3]
        v6 = v4
    assert parse_tcp(1, v4).sack == parse_tcp(1, v6).sack == span
    lengths = np.array([len(v4), len(v6)])
    index = RecordIndex(np.arange(2, dtype=np.float64), np.array([1, 1]), np.array([0, len(v4)]), lengths,
                        lengths + (3 if len(options) % 4 else 0))
    columns = segment_columns(v4 + v6, index)
    assert list(zip(columns.sack_left.tolist(), columns.sack_right.tolist(), strict=True)) == [span, span]
