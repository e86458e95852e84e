"""The pcapng block structure, declared with construct, and the walk that reads records with it.

pcapng (draft-ietf-opsawg-pcapng) is a chain of blocks, each ``type, total length, body, total
length again``, all in the byte order its section header block (SHB) says with its byte-order
magic.  ``declarations`` declares them with construct: the section header, the interface
description (IDB, with its options: if_tsresol, if_tsoffset), the enhanced and simple packet
blocks (EPB, SPB) and the interface statistics (ISB: the packets the capture itself dropped, as
dumpcap and tshark -w write them when they stop); any other block type is skipped by its length.

Who parses what, measured (docs/benchmarks.md, "Figures behind design choices", pcapng):
the declarations parse the cold blocks, section headers and interface descriptions (a handful a
file), and every block's lengths are checked.  The hot blocks, one per packet, are read with
``struct`` by the same layout: construct's compiled parser costs ~45 us a packet block against
~2 us, which made the Python work of reading and decoding a capture 2.4-3.3 times slower.
tests/spark/capture/test_pcapng.py holds the struct reading to the declarations, block by block.

Packet bytes are never copied: a record is a memoryview of the caller's buffer.

A block that cannot be read ends the walk, the records before it kept: one cut short (a capture
cut while written) or one whose lengths lie (too short, not a multiple of 4, the trailing copy
disagreeing, a packet longer than its block), a section header with an unknown byte-order magic or
version.  The walk says how many bytes it left and why (PcapngEnd); it never raises on such input
nor loops (every step moves forward by a checked length of at least 12 bytes).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Any, NamedTuple

from spark_analysis.capture.captured import Record

SHB_TYPE, IDB_TYPE, SPB_TYPE, ISB_TYPE, EPB_TYPE = 0x0A0D0D0A, 1, 3, 5, 6
#: the byte-order magic as written, at +8 of a section header -> little-endian?
_BYTE_ORDER = {b"\x4d\x3c\x2b\x1a": True, b"\x1a\x2b\x3c\x4d": False}
OPT_END, OPT_TSRESOL, OPT_TSOFFSET = 0, 9, 14
#: an ISB's counters (64-bit): packets the interface received, dropped for want of room (dumpcap
#: writes libpcap's ps_drop here: the kernel's buffer was full), dropped by the OS
ISB_IFRECV, ISB_IFDROP, ISB_OSDROP = 4, 5, 7
#: type, total length, total length again: the smallest block there is
MIN_BLOCK = 12
#: interface descriptions one section may hold (a capture has a few, a busy Kubernetes node's every
#: veth some hundreds): each is kept for the packets naming it, from 20 bytes of a file, so a file of
#: them was 3.5 times its size in a task's memory; past it the walk ends
MAX_INTERFACES = 1 << 16
#: the seconds a packet may be dated at: from 1970 (no capture is older) to the end of the year 9999,
#: the last a date holds (Python's datetime, Spark's timestamps). A packet block's time is 64 bits of
#: ticks plus its interface's if_tsoffset (64 bits of seconds, signed): one dated outside is counted
#: (PcapngEnd.undated), not read
DATED = (0.0, 253402300800.0)
_HEAD = 8
_EPB_FIXED = 20  # interface, timestamp high and low, captured and original length
# the hot path: the same layouts as the declarations (tests hold them to it), read with struct
_HEAD_STRUCT = {True: struct.Struct("<II"), False: struct.Struct(">II")}
_U32 = {True: struct.Struct("<I"), False: struct.Struct(">I")}
_EPB_STRUCT = {True: struct.Struct("<IIIII"), False: struct.Struct(">IIIII")}


class PcapngBlockError(ValueError):
    """A pcapng block that cannot be read: says where and why."""


class Interface(NamedTuple):
    """What an IDB says about the packets of its interface."""

    linktype: int
    snaplen: int
    ticks_per_second: int
    ts_offset: int


@dataclass
class PcapngEnd:
    """Where a walk stopped: bytes left after the last whole block, and why (None: the end); and
    the interface statistics it met, the last of each interface (their counters run from the
    capture's start): (section, interface) -> (received, dropped) packets, None where not said."""

    trailing: int = 0
    reason: str | None = None
    statistics: dict[tuple[int, int], tuple[int | None, int | None]] = field(default_factory=dict)
    #: packet blocks dated outside DATED, not read
    undated: int = 0

    def dropped(self) -> tuple[int, int | None]:
        """The packets the capture says it dropped (isb_ifdrop and isb_osdrop, every interface),
        and those it received (isb_ifrecv; None where an interface dropped some and did not say)."""
        dropped = sum(d or 0 for _, d in self.statistics.values())
        received = [r for r, d in self.statistics.values() if d]
        return dropped, None if any(r is None for r in received) else sum(r or 0 for r in received)


@cache
def declarations(little: bool) -> Any:  # a compiled construct Struct (construct is untyped)
    """A pcapng block declared in one byte order, compiled once on first use: its lengths checked
    (at least 12, a multiple of 4, the same at both ends), its body by its type.  construct is
    imported here: a job over classic pcap files never loads it (~80 ms a Python worker)."""
    import construct as c

    u16, u32, i64 = (c.Int16ul, c.Int32ul, c.Int64sl) if little else (c.Int16ub, c.Int32ub, c.Int64sb)
    option = c.Struct(
        "code" / u16,
        "length" / u16,
        # if_tsoffset's value as the signed 64-bit number it is; any other value as its bytes
        "ts_offset" / c.If((c.this.code == OPT_TSOFFSET) & (c.this.length >= 8), c.Peek(i64)),
        "value" / c.Bytes(c.this.length),
        c.Padding(-c.this.length % 4),
    )
    options = c.GreedyRange(option)  # to the body's end; a body cut inside an option just ends them
    section = c.Struct("byte_order_magic" / u32, "major" / u16, "minor" / u16, "section_length" / i64,
                       "options" / options)
    interface = c.Struct("linktype" / u16, c.Padding(2), "snaplen" / u32, "options" / options)
    statistics = c.Struct("interface_id" / u32, "ts_high" / u32, "ts_low" / u32, "options" / options)
    enhanced = c.Struct(
        "interface_id" / u32,
        "ts_high" / u32,
        "ts_low" / u32,
        "captured" / u32,
        "original" / u32,
        c.Check(c.this.captured <= c.this._.length - MIN_BLOCK - _EPB_FIXED),
        "data" / c.Bytes(c.this.captured),
        c.Padding(-c.this.captured % 4),
        "options" / options,
    )
    simple = c.Struct("original" / u32, "data" / c.GreedyBytes)
    block = c.Struct(
        "type" / u32,
        "length" / u32,
        c.Check((c.this.length >= MIN_BLOCK) & (c.this.length % 4 == 0)),
        "body" / c.FixedSized(c.this.length - MIN_BLOCK, c.Switch(c.this.type, {
            SHB_TYPE: section, IDB_TYPE: interface, EPB_TYPE: enhanced, SPB_TYPE: simple, ISB_TYPE: statistics},
            c.GreedyBytes)),
        "length_again" / u32,
        c.Check(c.this.length_again == c.this.length),
    )
    return block.compile()


def interface_of(idb: Any) -> Interface:
    """An IDB as declared, read: link type, snap length and the options that set the time scale."""
    ticks_per_second, ts_offset = 1_000_000, 0
    for option in idb.options:
        if option.code == OPT_END:
            break
        if option.code == OPT_TSRESOL and option.value:
            exponent = option.value[0] & 0x7F
            ticks_per_second = 2**exponent if option.value[0] & 0x80 else 10**exponent
        elif option.ts_offset is not None:
            ts_offset = option.ts_offset
    return Interface(idb.linktype, idb.snaplen, ticks_per_second, ts_offset)


def counters_of(isb: Any, little: bool) -> tuple[int | None, int | None]:
    """An ISB as declared, read: (received, dropped) packets of its interface (dropped: for want of
    room, isb_ifdrop, and by the OS, isb_osdrop, added), None where it says neither."""
    found: dict[int, int] = {}
    for option in isb.options:
        if option.code == OPT_END:
            break
        if option.code in (ISB_IFRECV, ISB_IFDROP, ISB_OSDROP) and len(option.value) == 8:
            found[option.code] = int.from_bytes(option.value, "little" if little else "big")
    drops = [found[code] for code in (ISB_IFDROP, ISB_OSDROP) if code in found]
    return found.get(ISB_IFRECV), sum(drops) if drops else None


def iter_pcapng(view: memoryview, end_of_walk: PcapngEnd | None = None) -> Iterator[Record]:
    """Yield the packet records of pcapng blocks in ``view``; each section header resets the byte
    order and the interface table.  ``end_of_walk`` is filled with where and why the walk ended."""
    end_of_walk = end_of_walk if end_of_walk is not None else PcapngEnd()
    end = len(view)
    offset = 0
    little = True
    interfaces: list[Interface] = []
    last_ts = 0.0
    section = -1
    try:
        while offset < end:
            if offset + MIN_BLOCK > end:
                raise PcapngBlockError(f"block at {offset}: cut short ({end - offset} bytes left)")
            if _U32[little].unpack_from(view, offset)[0] == SHB_TYPE:  # reads alike in both byte orders
                order = bytes(view[offset + 8:offset + 12])
                if order not in _BYTE_ORDER:
                    raise PcapngBlockError(f"section header at {offset}: unknown byte-order magic {order.hex()}")
                little, interfaces, section = _BYTE_ORDER[order], [], section + 1
            block_type, body, following = _block(view, offset, little)
            body_at = offset + _HEAD
            record = None
            if block_type in (SHB_TYPE, IDB_TYPE):  # cold: parsed whole by the declaration
                declared = _declared(view[offset:following], offset, little)
                if block_type == SHB_TYPE and declared.body.major != 1:
                    raise PcapngBlockError(f"section header at {offset}: pcapng version "
                                           f"{declared.body.major}.{declared.body.minor}")
                if block_type == IDB_TYPE:
                    if len(interfaces) >= MAX_INTERFACES:
                        raise PcapngBlockError(f"interface description at {offset}: more than {MAX_INTERFACES} "
                                               f"interfaces in one section")
                    interfaces.append(interface_of(declared.body))
            elif block_type == EPB_TYPE:
                record = _enhanced(body, body_at, little, interfaces)
            elif block_type == SPB_TYPE:
                record = _simple(body, body_at, little, interfaces, last_ts)
            elif block_type == ISB_TYPE:  # cold, after the packets' tests
                _note_statistics(end_of_walk, section, view[offset:following], offset, little)
            offset = following  # the block is read: what is left starts after it
            if record is not None:
                if not DATED[0] <= record.ts < DATED[1]:
                    end_of_walk.undated += 1
                    continue
                last_ts = record.ts
                yield record
    except PcapngBlockError as stopped:
        end_of_walk.reason = str(stopped)
    finally:
        end_of_walk.trailing = end - offset


def _note_statistics(end_of_walk: PcapngEnd, section: int, block: memoryview, offset: int, little: bool) -> None:
    """An ISB's counters noted as its interface's last (they run from the capture's start); one
    that says none, or cannot be read, is skipped as before: statistics, not packets."""
    try:
        isb = _declared(block, offset, little).body
    except PcapngBlockError:
        return
    counters = counters_of(isb, little)
    if counters != (None, None):
        end_of_walk.statistics[(section, isb.interface_id)] = counters


def _declared(block: memoryview, offset: int, little: bool) -> Any:
    """A cold block parsed whole by its declaration; what construct cannot parse, a PcapngBlockError
    (a compiled parser reads with struct and raises struct.error where a field runs past the end)."""
    from construct import ConstructError

    try:
        return declarations(little).parse(bytes(block))
    except (ConstructError, struct.error) as error:
        raise PcapngBlockError(f"block at {offset}: {error}") from None


def _block(view: memoryview, offset: int, little: bool) -> tuple[int, memoryview, int]:
    """(type, body, offset of the next block) of the block at ``offset``, its lengths checked."""
    block_type, length = _HEAD_STRUCT[little].unpack_from(view, offset)
    if length < MIN_BLOCK or length % 4:
        raise PcapngBlockError(f"block at {offset} (type {block_type:#x}): total length {length} is not a "
                               f"multiple of 4 of at least {MIN_BLOCK}")
    following = offset + length
    if following > len(view):
        raise PcapngBlockError(f"block at {offset} (type {block_type:#x}): total length {length} runs "
                               f"{following - len(view)} bytes past the end (cut short)")
    (again,) = _U32[little].unpack_from(view, following - 4)
    if again != length:
        raise PcapngBlockError(f"block at {offset} (type {block_type:#x}): total length {length}, "
                               f"but {again} at its end")
    return block_type, view[offset + _HEAD:following - 4], following


def _enhanced(body: memoryview, body_at: int, little: bool, interfaces: list[Interface]) -> Record | None:
    if len(body) < _EPB_FIXED:
        raise PcapngBlockError(f"enhanced packet block at {body_at - _HEAD}: body of {len(body)} bytes")
    interface_id, ts_high, ts_low, captured, original = _EPB_STRUCT[little].unpack_from(body, 0)
    if captured > len(body) - _EPB_FIXED:
        raise PcapngBlockError(f"enhanced packet block at {body_at - _HEAD}: captured length {captured} "
                               f"longer than its block")
    if interface_id >= len(interfaces):  # no such interface in this section: its time scale unknown
        return None
    iface = interfaces[interface_id]
    ts = ((ts_high << 32) | ts_low) / iface.ticks_per_second + iface.ts_offset
    return Record(ts, iface.linktype, body[_EPB_FIXED:_EPB_FIXED + captured], original, body_at + _EPB_FIXED)


def _simple(body: memoryview, body_at: int, little: bool, interfaces: list[Interface],
            last_ts: float) -> Record | None:
    """Simple packet blocks have no timestamp: give them the previous record's, keeping order."""
    if len(body) < 4:
        raise PcapngBlockError(f"simple packet block at {body_at - _HEAD}: body of {len(body)} bytes")
    if not interfaces:
        return None
    (original,) = _U32[little].unpack_from(body, 0)
    iface = interfaces[0]
    captured = min(original, iface.snaplen or original, len(body) - 4)
    return Record(last_ts, iface.linktype, body[4:4 + captured], original, body_at + 4)
