"""Decode link-layer frames down to TCP segments, standard library only.

Captures come from many tools (tcpdump on Linux ``any`` gives SLL/SLL2, macOS loopback gives
NULL, some exporters write raw IP), so every common link type is accepted. Malformed or
truncated frames return None rather than raising: one bad packet must not kill a Spark task.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from spark_analysis.pcapio import Buffer, Record

FIN, SYN, RST, PSH, ACK, URG = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20

LINKTYPE_NULL = 0
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_LOOP = 108
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_LINUX_SLL2 = 276

_ETHERTYPE_IPV4, _ETHERTYPE_IPV6 = 0x0800, 0x86DD
_VLAN_ETHERTYPES = frozenset({0x8100, 0x88A8, 0x9100})
_AF_INET = 2
_AF_INET6 = frozenset({10, 24, 28, 30})  # Linux, NetBSD/OpenBSD, FreeBSD, macOS
_IPPROTO_TCP = 6

_IPV6_EXT_8_OCTETS = frozenset({0, 43, 60, 135, 139, 140})  # length counts 8-octet units
_IPV6_FRAGMENT, _IPV6_AH = 44, 51

_U16 = struct.Struct("!H")
_U32 = struct.Struct("!I")
_NULL_FAMILY = (struct.Struct("<I"), struct.Struct(">I"))
_IPV4 = struct.Struct("!BxHxxHxBxxII")  # version/ihl, total length, flags/fragment, protocol, addresses
_IPV6 = struct.Struct("!HB")  # payload length, next header (from offset 4)
_TCP = struct.Struct("!HHIIBB")  # ports, seq, ack, data offset, flags
_ENDPOINTS: dict[tuple[int | bytes, int], str] = {}
_MAX_ENDPOINTS = 1 << 16


class TcpSegment(NamedTuple):
    """A TCP segment; addresses are "ip:port", IPv6 as "[addr]:port"."""

    src: str
    dst: str
    seq: int
    ack: int
    flags: int
    payload: bytes


def tcp_segments(records: Iterable[Record]) -> Iterator[tuple[float, TcpSegment]]:
    """Yield (timestamp, segment) for every TCP record, in capture order: input for reassembly."""
    for record in records:
        segment = parse_tcp(record.linktype, record.data)
        if segment is not None:
            yield record.ts, segment


def parse_tcp(linktype: int, data: Buffer) -> TcpSegment | None:
    """Decode one captured frame into a TCP segment; None if it is anything else."""
    view = memoryview(data)
    located = _network_layer(linktype, view)
    if located is None:
        return None
    version, offset = located
    if version == 4:
        return _parse_ipv4(view, offset)
    return _parse_ipv6(view, offset)


def _network_layer(linktype: int, view: memoryview) -> tuple[int, int] | None:
    """Return (IP version, offset of the IP header), or None if the frame does not carry IP."""
    if linktype == LINKTYPE_ETHERNET:
        return _ethernet(view)
    if linktype == LINKTYPE_LINUX_SLL and len(view) >= 16:
        return _from_ethertype(_U16.unpack_from(view, 14)[0], 16)
    if linktype == LINKTYPE_LINUX_SLL2 and len(view) >= 20:
        return _from_ethertype(_U16.unpack_from(view, 0)[0], 20)
    if linktype in (LINKTYPE_NULL, LINKTYPE_LOOP) and len(view) >= 4:
        return _from_family(view, big_endian_only=linktype == LINKTYPE_LOOP)
    if linktype == LINKTYPE_RAW and len(view) >= 1 and view[0] >> 4 in (4, 6):
        return view[0] >> 4, 0
    if linktype == LINKTYPE_IPV4:
        return 4, 0
    if linktype == LINKTYPE_IPV6:
        return 6, 0
    return None


def _ethernet(view: memoryview) -> tuple[int, int] | None:
    offset = 12
    while offset + 2 <= len(view):
        (ethertype,) = _U16.unpack_from(view, offset)
        if ethertype not in _VLAN_ETHERTYPES:
            return _from_ethertype(ethertype, offset + 2)
        offset += 4
    return None


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


def _parse_ipv4(view: memoryview, offset: int) -> TcpSegment | None:
    if offset + 20 > len(view):
        return None
    version_ihl, total_len, fragment, protocol, src, dst = _IPV4.unpack_from(view, offset)
    header_len = (version_ihl & 0x0F) * 4
    if version_ihl >> 4 != 4 or header_len < 20 or protocol != _IPPROTO_TCP:
        return None
    if fragment & 0x1FFF:  # a later fragment: no TCP header in it
        return None
    # Total length 0 happens with TSO/GSO captures; trust the captured length then.
    end = min(offset + total_len, len(view)) if total_len else len(view)
    return _parse_tcp_header(view, offset + header_len, end, src, dst)


def _parse_ipv6(view: memoryview, offset: int) -> TcpSegment | None:
    if offset + 40 > len(view) or view[offset] >> 4 != 6:
        return None
    payload_len, next_header = _IPV6.unpack_from(view, offset + 4)
    src = bytes(view[offset + 8 : offset + 24])
    dst = bytes(view[offset + 24 : offset + 40])
    end = min(offset + 40 + payload_len, len(view)) if payload_len else len(view)  # 0: jumbogram or GSO
    offset += 40
    while next_header != _IPPROTO_TCP:
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
    return _parse_tcp_header(view, offset, end, src, dst)


def _parse_tcp_header(view: memoryview, start: int, end: int, src_ip: int | bytes, dst_ip: int | bytes
                      ) -> TcpSegment | None:
    """The TCP header at ``start``; its segment ends at ``end``. IPs as int (v4) or 16 bytes (v6)."""
    if end - start < 20:
        return None
    src_port, dst_port, seq, ack, data_offset, flags = _TCP.unpack_from(view, start)
    header_len = (data_offset >> 4) * 4
    if header_len < 20 or start + header_len > end:
        return None
    return TcpSegment(
        _endpoint(src_ip, src_port),
        _endpoint(dst_ip, dst_port),
        seq,
        ack,
        flags | (data_offset & 1) << 8,  # the NS bit sits in the data-offset byte
        bytes(view[start + header_len : end]),
    )


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
