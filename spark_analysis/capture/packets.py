"""Decode link-layer frames down to TCP segments.

Captures come from many tools (tcpdump on Linux ``any`` gives SLL/SLL2, macOS loopback gives
NULL, some exporters write raw IP), so every common link type is accepted. Malformed or
truncated frames are skipped rather than raising: one bad packet must not kill a Spark task.

Two entry points over one decoder: parse_tcp for a single frame, and segment_columns for the
millions of records of a Spark task, which decodes IPv4 over the common link types with numpy
and hands every other record (VLAN tags, on Ethernet or cooked, IPv6, odd link types) to parse_tcp's code.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_analysis.capture.captured import Buffer, Record
from spark_analysis.capture.records import RecordIndex, read_uint, read_words

FIN, SYN, RST, PSH, ACK, URG = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20

LINKTYPE_NULL = 0
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_LOOP = 108
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_LINUX_SLL2 = 276
#: Apple's PKTAP (macOS `tcpdump -i any`): a header of its own length (little-endian, as macOS writes
#: it), then the packet in the link type the header names (libpcap's pcap/pktap.h)
LINKTYPE_PKTAP = 258
_PKTAP_PACKET = 1  # pkt_rectype of a packet record
#: the link types read (others: the file is named, its link type not read)
LINK_TYPES_READ = frozenset({LINKTYPE_NULL, LINKTYPE_ETHERNET, LINKTYPE_RAW, LINKTYPE_LOOP, LINKTYPE_LINUX_SLL,
                             LINKTYPE_IPV4, LINKTYPE_IPV6, LINKTYPE_LINUX_SLL2, LINKTYPE_PKTAP})

_ETHERTYPE_IPV4, _ETHERTYPE_IPV6 = 0x0800, 0x86DD
_VLAN_ETHERTYPES = frozenset({0x8100, 0x88A8, 0x9100})
_AF_INET = 2
_AF_INET6 = frozenset({10, 24, 28, 30})  # Linux, NetBSD/OpenBSD, FreeBSD, macOS
_IPPROTO_TCP = 6
#: tunnels read through (traffic mirrored to a collector: AWS VPC Traffic Mirroring's VXLAN, a
#: gateway load balancer's Geneve, a switch's ERSPAN over GRE, plain GRE), at most this deep
_IPPROTO_UDP, _IPPROTO_GRE = 17, 47
_VXLAN_PORT, _GENEVE_PORT = 4789, 6081
_ETHERTYPE_BRIDGED, _ETHERTYPE_ERSPAN_2, _ETHERTYPE_ERSPAN_3 = 0x6558, 0x88BE, 0x22EB
_TUNNEL_DEPTH = 2

_IPV6_EXT_8_OCTETS = frozenset({0, 43, 60, 135, 139, 140})  # length counts 8-octet units
_IPV6_FRAGMENT, _IPV6_AH = 44, 51

_U16 = struct.Struct("!H")
_U32 = struct.Struct("!I")
_NULL_FAMILY = (struct.Struct("<I"), struct.Struct(">I"))
_IPV4 = struct.Struct("!BxHxxHxBxxII")  # version/ihl, total length, flags/fragment, protocol, addresses
_IPV6 = struct.Struct("!HB")  # payload length, next header (from offset 4)
_TCP = struct.Struct("!HHIIBB")  # ports, seq, ack, data offset, flags
_PKTAP = struct.Struct("<III")  # header length, record type, the packet's DLT
_BSD_RAW_DLTS = (12, 14)  # DLT_RAW as BSDs number it (a PKTAP header names DLTs, not LINKTYPEs)
#: the TCP header bytes that hold ports, seq, ack, data offset and flags: a segment whose options a
#: snap length cut still has them (its payload then wholly not captured)
_TCP_FIELDS = _TCP.size
_TCP_OPTION_END, _TCP_OPTION_NOP, _TCP_OPTION_SACK = 0, 1, 5
_SACK_BLOCK = struct.Struct("!II")
_SEQ_SPACE = 1 << 32
#: the options Linux sends on every segment: NOP, NOP, then the 10 bytes of timestamps (kind 8)
_USUAL_OPTIONS = b"\x01\x01\x08\x0a"
_ENDPOINTS: dict[tuple[int | bytes, int], str] = {}
_MAX_ENDPOINTS = 1 << 16


class TcpSegment(NamedTuple):
    """A TCP segment; addresses are "ip:port", IPv6 as "[addr]:port". ``missing``: the bytes of its
    payload after ``payload`` that the capture did not keep (a snap length cut the packet).
    ``sack``: the span its SACK blocks cover (the lowest left edge, the highest right edge: bytes
    its sender had received past ``ack``), (0, 0) when it carries none."""

    src: str
    dst: str
    seq: int
    ack: int
    flags: int
    payload: bytes
    missing: int = 0
    sack: tuple[int, int] = (0, 0)


#: (server port, client endpoint) -> [segments, segments starting like a remoting frame]: the TCP
#: traffic a reading on some ports left out (what --port did not ask for)
OtherTraffic = dict[tuple[int, str], list[int]]


class SegmentColumns(NamedTuple):
    """The TCP segments of some records as columns, in capture order. Endpoints are indexes into
    ``endpoints`` ("ip:port" texts); the payload of segment i is ``buffer[start[i] : end[i]]``."""

    endpoints: list[str]
    ts: np.ndarray  # float64
    src: np.ndarray  # int64
    dst: np.ndarray  # int64
    seq: np.ndarray  # int64
    ack: np.ndarray  # int64
    flags: np.ndarray  # int64
    start: np.ndarray  # int64
    end: np.ndarray  # int64
    missing: np.ndarray  # int64: payload bytes after ``end`` that were sent but not captured
    sack_left: np.ndarray  # int64: the span of a segment's SACK blocks (TcpSegment.sack), 0 and 0: none
    sack_right: np.ndarray  # int64
    #: with ports: the IPv4 segments on other ports (OtherTraffic), else empty
    others: OtherTraffic | None = None


#: what _tcp_fields finds: source and destination (ip, port), seq, ack, flags, captured payload
#: bounds, the payload bytes after them that the capture cut off, and the span of its SACK blocks
_Fields = tuple[int | bytes, int, int | bytes, int, int, int, int, int, int, int, int, int]


def tcp_segments(records: Iterable[Record]) -> Iterator[tuple[float, TcpSegment]]:
    """Yield (timestamp, segment) for every TCP record, in capture order: input for reassembly."""
    for record in records:
        segment = parse_tcp(record.linktype, record.data, record.orig_len)
        if segment is not None:
            yield record.ts, segment


def parse_tcp(linktype: int, data: Buffer, orig_len: int | None = None) -> TcpSegment | None:
    """Decode one captured frame into a TCP segment; None if it is anything else. ``orig_len``: the
    frame's length as sent, when a snap length cut what ``data`` holds of it."""
    view = memoryview(data)
    fields = _tcp_fields(linktype, view, orig_len)
    if fields is None:
        return None
    src_ip, src_port, dst_ip, dst_port, seq, ack, flags, start, end, missing, sack_left, sack_right = fields
    return TcpSegment(_endpoint(src_ip, src_port), _endpoint(dst_ip, dst_port), seq, ack, flags,
                      bytes(view[start:end]), missing, (sack_left, sack_right))


#: the server ports a reading keeps segments of (to or from one of them); empty: every TCP segment
Ports = tuple[int, ...]


def segment_columns(data: Buffer, records: RecordIndex, ports: Ports = ()) -> SegmentColumns:
    """The TCP segments among ``records`` of ``data`` (to or from one of ``ports`` if any)."""
    u8 = np.frombuffer(data, np.uint8)
    fast, ip = _ipv4_records(u8, records)
    ts, start, length = records.ts[fast], records.start[fast], records.length[fast]
    columns = _tcp_columns(u8, ip, start + length, start + records.orig_len[fast])
    tcp, src_ip, dst_ip, src_port, dst_port, seq, ack, flags, payload, end, missing, sack_left, sack_right = columns
    kept = np.ones(len(src_port), bool) if not ports else np.isin(src_port, ports) | np.isin(dst_port, ports)
    others = _other_traffic(u8, ~kept, src_ip, src_port, dst_ip, dst_port, payload, end) if ports else None
    endpoints: dict[str, int] = {}
    src = _endpoint_ids(src_ip[kept], src_port[kept], endpoints)
    dst = _endpoint_ids(dst_ip[kept], dst_port[kept], endpoints)
    order = fast.nonzero()[0][tcp][kept]
    found = [ts[tcp][kept], src, dst, seq[kept], ack[kept], flags[kept], payload[kept], end[kept], missing[kept],
             sack_left[kept], sack_right[kept]]
    not_tcp = fast.nonzero()[0][~tcp]  # IPv4 but no TCP: a tunnel read one by one, if it is one
    slow = _slow_segments(data, records, np.union1d(np.flatnonzero(~fast), not_tcp[_tunnels(u8, ip[~tcp])]),
                          ports, endpoints)
    if slow:
        order = np.concatenate([order, np.array([row[0] for row in slow], np.int64)])
        found = [np.concatenate([column, np.array([row[i] for row in slow], column.dtype)])
                 for i, column in enumerate(found, start=1)]
        by_record = np.argsort(order, kind="stable")
        found = [column[by_record] for column in found]
    return SegmentColumns(list(endpoints), *found)._replace(others=others)


def _tunnels(u8: np.ndarray, ip: np.ndarray) -> np.ndarray:
    """Which IPv4 packets at ``ip`` may be tunnels read (_tunnelled): GRE, or UDP to VXLAN's or
    Geneve's port; they are decoded one by one (rare: mirrored traffic)."""
    protocol = u8[np.minimum(ip + 9, len(u8) - 1)]
    udp_port = np.minimum(ip + (u8[ip] & 0x0F).astype(np.int64) * 4 + 2, len(u8) - 2)
    port = u8[udp_port].astype(np.int64) << 8 | u8[udp_port + 1]
    tunnels: np.ndarray = (protocol == _IPPROTO_GRE) | ((protocol == _IPPROTO_UDP)
                                                       & np.isin(port, (_VXLAN_PORT, _GENEVE_PORT)))
    return tunnels


def _other_traffic(u8: np.ndarray, left: np.ndarray, src_ip: np.ndarray, src_port: np.ndarray, dst_ip: np.ndarray,
                   dst_port: np.ndarray, payload: np.ndarray, end: np.ndarray) -> OtherTraffic:
    """The segments a reading on some ports leaves out, by (server port, client endpoint): the
    server taken as the side on the lower port (clients' ports are ephemeral, high); a segment counts
    as carrying a remoting frame when its payload starts as one does (a length under 16 MiB, serialize
    type JSON with '{' or ROCKETMQ)."""
    which = np.flatnonzero(left)
    if not len(which):
        return {}
    start, stop = payload[which], end[which]
    room = stop - start >= 9
    at = np.where(room, start, 0)
    kind = u8[at + 4]
    framed = room & (u8[at] == 0) & (((kind == 0) & (u8[at + 8] == ord("{"))) | (kind == 1))
    server_low = src_port[which] < dst_port[which]
    server_port = np.where(server_low, src_port[which], dst_port[which])
    client_ip = np.where(server_low, dst_ip[which], src_ip[which])
    client_port = np.where(server_low, dst_port[which], src_port[which])
    keys, inverse = np.unique(np.stack([server_port, client_ip, client_port]), axis=1, return_inverse=True)
    inverse = inverse.reshape(-1)
    segments = np.bincount(inverse, minlength=keys.shape[1])
    frames = np.bincount(inverse, weights=framed, minlength=keys.shape[1]).astype(np.int64)
    return {(int(port), _endpoint(int(ip), int(client))): [int(n), int(f)] for (port, ip, client), n, f in
            zip(keys.T.tolist(), segments.tolist(), frames.tolist(), strict=True)}


_LINK_HEADER = {LINKTYPE_ETHERNET: (14, 12), LINKTYPE_LINUX_SLL: (16, 14), LINKTYPE_LINUX_SLL2: (20, 0)}


def _ipv4_records(u8: np.ndarray, records: RecordIndex) -> tuple[np.ndarray, np.ndarray]:
    """Which records carry IPv4 right after a plain link header (a mask), and where (for those)."""
    linktype, start, length = records.linktype, records.start, records.length
    ip = np.full(len(start), -1, np.int64)
    for kind, (header, ethertype_at) in _LINK_HEADER.items():
        candidates = np.flatnonzero((linktype == kind) & (length >= header))
        ethertype = read_uint(u8, start[candidates] + ethertype_at, 2, True)
        chosen = candidates[ethertype == _ETHERTYPE_IPV4]
        ip[chosen] = start[chosen] + header
    for kind in (LINKTYPE_NULL, LINKTYPE_LOOP):
        candidates = np.flatnonzero((linktype == kind) & (length >= 4))
        family = read_uint(u8, start[candidates], 4, True)
        is_inet = family == _AF_INET
        if kind == LINKTYPE_NULL:
            is_inet |= read_uint(u8, start[candidates], 4, False) == _AF_INET
        chosen = candidates[is_inet]
        ip[chosen] = start[chosen] + 4
    raw = np.flatnonzero(np.isin(linktype, (LINKTYPE_RAW, LINKTYPE_IPV4)) & (length >= 1))
    raw = raw[u8[start[raw]] >> 4 == 4]
    ip[raw] = start[raw]
    fast = ip >= 0
    return fast, ip[fast]


def _tcp_columns(u8: np.ndarray, ip: np.ndarray, frame_end: np.ndarray, wire_end: np.ndarray
                 ) -> tuple[np.ndarray, ...]:
    """_parse_ipv4 and _parse_tcp_header over columns: the first item says which of the IPv4
    packets at ``ip`` hold a TCP header, the others are that header's fields for those.
    ``frame_end``: where each record's captured bytes end; ``wire_end``: where the frame ended as
    sent (its original length), past ``frame_end`` when a snap length cut it."""
    room = ip + 20 <= frame_end
    at = np.where(room, ip, 0)
    # the IPv4 header's five words: version/ihl .. total length, id/fragment, ttl/protocol, addresses
    first, fragment, protocol, src_ip, dst_ip = read_words(u8, at, ">u4", 5).astype(np.int64).T
    version_ihl = first >> 24
    header_len = (version_ihl & 0x0F) * 4
    tcp = room & (version_ihl >> 4 == 4) & (header_len >= 20) & ((protocol >> 16) & 0xFF == _IPPROTO_TCP) & (
        fragment & 0x1FFF == 0)
    total_len = first & 0xFFFF
    end = np.where(total_len > 0, np.minimum(ip + total_len, frame_end), frame_end)
    sent = np.where(total_len > 0, np.minimum(ip + total_len, np.maximum(wire_end, frame_end)), frame_end)
    header = ip + header_len
    tcp &= end - header >= _TCP_FIELDS
    header = np.where(tcp, header, 0)
    data_offset = u8[header + 12].astype(np.int64)
    payload = header + (data_offset >> 4) * 4
    tcp &= (data_offset >> 4 >= 5) & (payload <= sent)
    header, payload, end, sent = header[tcp], payload[tcp], end[tcp], sent[tcp]
    flags = u8[header + 13].astype(np.int64) | (data_offset[tcp] & 1) << 8  # the NS bit
    missing = np.maximum(sent - np.maximum(end, payload), 0)  # options cut too: no payload byte captured
    ports, seq, ack = read_words(u8, header, ">u4", 3).astype(np.int64).T  # ports, seq, ack
    sack_left, sack_right = _sack_columns(u8, header, np.minimum(payload, end))
    return (tcp, src_ip[tcp], dst_ip[tcp], ports >> 16, ports & 0xFFFF, seq, ack, flags, np.minimum(payload, end), end,
            missing, sack_left, sack_right)


def _sack_columns(u8: np.ndarray, header: np.ndarray, options_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The span of each TCP header's SACK blocks (_sack_span), as two columns. Only headers whose
    options are not just Linux's usual NOP, NOP, timestamps are looked through one by one: those
    carrying SACK blocks (segments a receiver acknowledged out of order) are few."""
    left, right = np.zeros(len(header), np.int64), np.zeros(len(header), np.int64)
    options = options_end - header - 20
    usual = options == len(_USUAL_OPTIONS) + 8
    usual[usual] = read_words(u8, header[usual] + 20, ">u4", 1)[:, 0] == _U32.unpack(_USUAL_OPTIONS)[0]
    looked = np.flatnonzero((options > 0) & ~usual)
    if len(looked):
        view = memoryview(u8.data)
        for row, start, stop in zip(looked.tolist(), (header[looked] + 20).tolist(), options_end[looked].tolist(),
                                    strict=True):
            left[row], right[row] = _sack_span(view, start, stop)
    return left, right


def _endpoint_ids(ips: np.ndarray, ports: np.ndarray, endpoints: dict[str, int]) -> np.ndarray:
    """Ids in ``endpoints`` (added as met, in the order of their codes) of IPv4 endpoints; few
    distinct ones, many packets: Arrow's dictionary encoding hashes them (np.unique sorted every
    packet: the same codes and order, 15 times the time), and only the few distinct codes are
    sorted. (pandas' factorize did the same, but importing pandas cost every Python worker about
    0.3 s of CPU before its first task.)"""
    encoded = pc.dictionary_encode(pa.array(ips << 16 | ports))
    codes = encoded.dictionary.to_numpy()
    order = np.argsort(codes, kind="stable")
    ids = np.empty(len(codes), np.int64)
    ids[order] = [endpoints.setdefault(_endpoint(int(code) >> 16, int(code) & 0xFFFF), len(endpoints))
                  for code in codes[order]]
    by_packet: np.ndarray = ids[encoded.indices.to_numpy()]
    return by_packet


def _slow_segments(data: Buffer, records: RecordIndex, which: np.ndarray, ports: Ports,
                   endpoints: dict[str, int]) -> list[tuple[Any, ...]]:
    """Rows (record, ts, src, dst, seq, ack, flags, payload start, end, missing, SACK span) decoded one by one."""
    view = memoryview(data)
    rows = []
    for index in which.tolist():
        start = int(records.start[index])
        fields = _tcp_fields(int(records.linktype[index]), view[start:start + int(records.length[index])],
                             int(records.orig_len[index]))
        if fields is None or ports and fields[1] not in ports and fields[3] not in ports:
            continue
        src_ip, src_port, dst_ip, dst_port, seq, ack, flags, payload, end, missing, sack_left, sack_right = fields
        src = endpoints.setdefault(_endpoint(src_ip, src_port), len(endpoints))
        dst = endpoints.setdefault(_endpoint(dst_ip, dst_port), len(endpoints))
        rows.append((index, float(records.ts[index]), src, dst, seq, ack, flags, start + payload, start + end,
                     missing, sack_left, sack_right))
    return rows


def _tcp_fields(linktype: int, view: memoryview, orig_len: int | None = None) -> _Fields | None:
    """The TCP fields of a captured frame; ``orig_len`` (its length as sent) bounds the payload
    bytes a snap length cut off (the IP header's length says how many)."""
    located = _network_layer(linktype, view)
    if located is None:
        return None
    version, offset = located
    sent = max(len(view), orig_len or 0)
    if version == 4:
        return _parse_ipv4(view, offset, sent)
    return _parse_ipv6(view, offset, sent)


def _network_layer(linktype: int, view: memoryview) -> tuple[int, int] | None:
    """Return (IP version, offset of the IP header), or None if the frame does not carry IP."""
    if linktype == LINKTYPE_ETHERNET:
        return _ethernet(view)
    if linktype == LINKTYPE_LINUX_SLL and len(view) >= 16:
        return _untagged(view, _U16.unpack_from(view, 14)[0], 16)
    if linktype == LINKTYPE_LINUX_SLL2 and len(view) >= 20:
        return _untagged(view, _U16.unpack_from(view, 0)[0], 20)
    if linktype in (LINKTYPE_NULL, LINKTYPE_LOOP) and len(view) >= 4:
        return _from_family(view, big_endian_only=linktype == LINKTYPE_LOOP)
    if linktype == LINKTYPE_RAW and len(view) >= 1 and view[0] >> 4 in (4, 6):
        return view[0] >> 4, 0
    if linktype == LINKTYPE_IPV4:
        return 4, 0
    if linktype == LINKTYPE_IPV6:
        return 6, 0
    if linktype == LINKTYPE_PKTAP and len(view) >= 12:
        header_len, record_type, inner = _PKTAP.unpack_from(view, 0)
        if record_type == _PKTAP_PACKET and inner != LINKTYPE_PKTAP and 12 <= header_len <= len(view):
            located = _network_layer(LINKTYPE_RAW if inner in _BSD_RAW_DLTS else inner, view[header_len:])
            return None if located is None else (located[0], located[1] + header_len)
    return None


def _ethernet(view: memoryview) -> tuple[int, int] | None:
    if len(view) < 14:
        return None
    return _untagged(view, _U16.unpack_from(view, 12)[0], 14)


def _untagged(view: memoryview, ethertype: int, offset: int) -> tuple[int, int] | None:
    """The packet after a link header whose ethertype (or cooked protocol) is ``ethertype`` and whose
    payload starts at ``offset``, past any VLAN tags there (each: 2 bytes of tag, then the next
    ethertype). Cooked captures keep the tags as Ethernet does: libpcap puts back the tag the kernel
    took off, and a mirror port's tagged frames reach `-i any` as they came."""
    while ethertype in _VLAN_ETHERTYPES:
        if offset + 4 > len(view):
            return None
        ethertype = _U16.unpack_from(view, offset + 2)[0]
        offset += 4
    return _from_ethertype(ethertype, offset)


def _from_ethertype(ethertype: int, offset: int) -> tuple[int, int] | None:
    if ethertype == _ETHERTYPE_IPV4:
        return 4, offset
    if ethertype == _ETHERTYPE_IPV6:
        return 6, offset
    return None


def _from_family(view: memoryview, big_endian_only: bool) -> tuple[int, int] | None:
    """NULL's family word is in the capturing host's byte order, so try both; LOOP's is big-endian."""
    for unpacker in _NULL_FAMILY[1:] if big_endian_only else _NULL_FAMILY:
        (family,) = unpacker.unpack_from(view, 0)
        if family == _AF_INET:
            return 4, 4
        if family in _AF_INET6:
            return 6, 4
    return None


def _parse_ipv4(view: memoryview, offset: int, sent: int, depth: int = 0) -> _Fields | None:
    if offset + 20 > len(view):
        return None
    version_ihl, total_len, fragment, protocol, src, dst = _IPV4.unpack_from(view, offset)
    header_len = (version_ihl & 0x0F) * 4
    if version_ihl >> 4 != 4 or header_len < 20 or fragment & 0x1FFF:  # a later fragment: no header in it
        return None
    # Total length 0 happens with TSO/GSO captures; trust the captured length then.
    end = min(offset + total_len, len(view)) if total_len else len(view)
    if protocol != _IPPROTO_TCP:
        return _through_tunnel(view, protocol, offset + header_len, end, sent, depth)
    wire_end = min(offset + total_len, sent) if total_len else end
    return _parse_tcp_header(view, offset + header_len, end, wire_end, src, dst)


def _parse_ipv6(view: memoryview, offset: int, sent: int, depth: int = 0) -> _Fields | None:
    if offset + 40 > len(view) or view[offset] >> 4 != 6:
        return None
    payload_len, next_header = _IPV6.unpack_from(view, offset + 4)
    src = bytes(view[offset + 8 : offset + 24])
    dst = bytes(view[offset + 24 : offset + 40])
    end = min(offset + 40 + payload_len, len(view)) if payload_len else len(view)  # 0: jumbogram or GSO
    wire_end = min(offset + 40 + payload_len, sent) if payload_len else end
    offset += 40
    while next_header != _IPPROTO_TCP:
        if next_header in (_IPPROTO_UDP, _IPPROTO_GRE):
            return _through_tunnel(view, next_header, offset, end, sent, depth)
        if offset + 8 > len(view):
            return None
        if next_header in _IPV6_EXT_8_OCTETS:
            length = (view[offset + 1] + 1) * 8
        elif next_header == _IPV6_AH:
            length = (view[offset + 1] + 2) * 4
        elif next_header == _IPV6_FRAGMENT:
            if _U16.unpack_from(view, offset + 2)[0] & 0xFFF8:  # non-zero fragment offset
                return None
            length = 8
        else:  # no next header, ESP, or an upper layer other than TCP
            return None
        next_header = view[offset]
        offset += length
    return _parse_tcp_header(view, offset, end, wire_end, src, dst)


def _through_tunnel(view: memoryview, protocol: int, start: int, end: int, sent: int, depth: int) -> _Fields | None:
    """The TCP fields of the packet a tunnel at ``start`` carries (the IP payload of ``protocol``,
    captured up to ``end``), if it is a tunnel read (VXLAN, Geneve, GRE, ERSPAN II/III over GRE)."""
    if depth >= _TUNNEL_DEPTH:
        return None
    located = _tunnelled(view, protocol, start, end)
    if located is None:
        return None
    version, inner = located
    parse = _parse_ipv4 if version == 4 else _parse_ipv6
    return parse(view[:end], inner, min(sent, end) if end < len(view) else sent, depth + 1)


def _tunnelled(view: memoryview, protocol: int, start: int, end: int) -> tuple[int, int] | None:
    """(IP version, offset) of the packet a tunnel header at ``start`` carries, else None."""
    if protocol == _IPPROTO_UDP and start + 16 <= end:
        port = _U16.unpack_from(view, start + 2)[0]
        if port == _VXLAN_PORT:  # UDP, then VXLAN's 8 bytes, then Ethernet
            return _carried(view, _ETHERTYPE_BRIDGED, start + 16, end)
        if port == _GENEVE_PORT:  # UDP, then Geneve's 8 bytes and its options, then its protocol
            return _carried(view, _U16.unpack_from(view, start + 10)[0], start + 16 + (view[start + 8] & 0x3F) * 4,
                            end)
        return None
    if protocol == _IPPROTO_GRE and start + 4 <= end:
        flags, carried = _U16.unpack_from(view, start)[0], _U16.unpack_from(view, start + 2)[0]
        inner = start + 4 + 4 * sum(bool(flags & bit) for bit in (0x8000, 0x2000, 0x1000))  # checksum, key, sequence
        if carried == _ETHERTYPE_ERSPAN_2:
            return _carried(view, _ETHERTYPE_BRIDGED, inner + 8, end)
        if carried == _ETHERTYPE_ERSPAN_3 and inner + 12 <= end:
            return _carried(view, _ETHERTYPE_BRIDGED, inner + 12 + 8 * (view[inner + 11] & 1), end)
        return _carried(view, carried, inner, end)
    return None


def _carried(view: memoryview, ethertype: int, inner: int, end: int) -> tuple[int, int] | None:
    if ethertype == _ETHERTYPE_BRIDGED:
        located = _ethernet(view[inner:end]) if inner < end else None
        return None if located is None else (located[0], inner + located[1])
    return _from_ethertype(ethertype, inner)


def _parse_tcp_header(view: memoryview, start: int, end: int, wire_end: int, src_ip: int | bytes,
                      dst_ip: int | bytes) -> _Fields | None:
    """The TCP header at ``start``; its captured bytes end at ``end``, the segment as sent at
    ``wire_end`` (further when a snap length cut it). IPs as int (v4) or 16 bytes (v6)."""
    if end - start < _TCP_FIELDS:
        return None
    src_port, dst_port, seq, ack, data_offset, flags = _TCP.unpack_from(view, start)
    header_len = (data_offset >> 4) * 4
    payload = start + header_len
    if header_len < 20 or payload > max(end, wire_end):
        return None
    flags |= (data_offset & 1) << 8  # the NS bit sits in the data-offset byte
    sack = _sack_span(view, start + 20, min(payload, end)) if header_len > 20 else (0, 0)
    if payload > end:  # a snap length cut the options: no payload byte captured
        return src_ip, src_port, dst_ip, dst_port, seq, ack, flags, end, end, max(wire_end - payload, 0), *sack
    return src_ip, src_port, dst_ip, dst_port, seq, ack, flags, payload, end, max(wire_end - end, 0), *sack


def _sack_span(view: memoryview, start: int, end: int) -> tuple[int, int]:
    """The span of the SACK blocks (RFC 2018) among the TCP options at ``view[start:end]``: the
    lowest left edge and the highest right edge, as sequence numbers, (0, 0) when there is none.
    The receiver had those bytes (and may lack some between two blocks). Options a snap length cut
    are read as far as they were captured."""
    blocks: list[tuple[int, int]] = []
    at = start
    while at < end and view[at] != _TCP_OPTION_END:
        if view[at] == _TCP_OPTION_NOP:
            at += 1
            continue
        length = view[at + 1] if at + 1 < end else 0
        if length < 2 or at + length > end:
            break
        if view[at] == _TCP_OPTION_SACK:
            blocks += [_SACK_BLOCK.unpack_from(view, block) for block in range(at + 2, at + length - 7, 8)]
        at += length
    if not blocks:
        return 0, 0
    first = blocks[0][0]
    # edges compared as signed distances from the first block's left edge (sequence numbers wrap around)
    lowest = min(_signed(left - first) for left, _ in blocks)
    highest = max(_signed(right - first) for _, right in blocks)
    return (first + lowest) % _SEQ_SPACE, (first + highest) % _SEQ_SPACE


def _signed(distance: int) -> int:
    distance %= _SEQ_SPACE
    return distance - _SEQ_SPACE if distance >= _SEQ_SPACE >> 1 else distance


def _endpoint(ip: int | bytes, port: int) -> str:
    """"ip:port" text, cached: a capture has few endpoints and millions of packets."""
    key = (ip, port)
    text = _ENDPOINTS.get(key)
    if text is None:
        if len(_ENDPOINTS) >= _MAX_ENDPOINTS:
            _ENDPOINTS.clear()
        if isinstance(ip, int):
            text = f"{socket.inet_ntoa(_U32.pack(ip))}:{port}"
        else:
            text = f"[{socket.inet_ntop(socket.AF_INET6, ip)}]:{port}"
        _ENDPOINTS[key] = text
    return text
