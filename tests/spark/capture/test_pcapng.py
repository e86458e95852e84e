"""The pcapng block structure (capture/pcapng.py): both byte orders, options, blocks skipped, and
hostile files (cut short, lengths that lie, an unknown byte order) read up to the bad block with a
reason, never an exception or a loop.  The packet blocks' struct reading is held to construct's
declaration of them, block by block, on the real capture and on synthetic ones."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_analysis.capture.pcapng import (
    EPB_TYPE,
    IDB_TYPE,
    ISB_TYPE,
    OPT_TSOFFSET,
    SHB_TYPE,
    SPB_TYPE,
    PcapngEnd,
    declarations,
)
from spark_analysis.capture.records import iter_records
from tests.spark.capture.builders import (
    CLIENT,
    SERVER,
    ethernet,
    ipv4,
    pcapng_block,
    pcapng_epb,
    pcapng_idb,
    pcapng_shb,
    tcp,
)
from tests.support import CAPTURES

REAL = CAPTURES / "v5_controller_failover.pcapng"
FRAME = ethernet(ipv4("10.0.0.1", "10.0.0.2", tcp(CLIENT, SERVER, 1, payload=b"hello")))
ENDIANS = pytest.mark.parametrize("endian", ["<", ">"])


def walk(data: bytes) -> tuple[list[tuple[float, int, bytes]], PcapngEnd]:
    end = PcapngEnd()
    records = [(r.ts, r.linktype, bytes(r.data)) for r in iter_records(data, end)]
    return records, end


def three_packets(endian: str) -> bytes:
    return b"".join([pcapng_shb(endian), pcapng_idb(endian, 1)]
                    + [pcapng_epb(endian, 0, (i + 1) * 1_000_000, FRAME) for i in range(3)])


def blocks(data: bytes, endian: str) -> list[tuple[int, int]]:
    """(offset, length) of each block of a well-formed file."""
    found, offset = [], 0
    while offset < len(data):
        length = struct.unpack_from(endian + "I", data, offset + 4)[0]
        found.append((offset, length))
        offset += length
    return found


def by_declaration(data: bytes) -> list[tuple[float, int, bytes]]:
    """The records as construct's declaration reads every block (the slow, declared way)."""
    records, interfaces, offset, little, last_ts = [], [], 0, True, 0.0
    while offset < len(data):
        if data[offset:offset + 4] == b"\x0a\x0d\x0d\x0a":
            little = data[offset + 8:offset + 12] == b"\x4d\x3c\x2b\x1a"
        block = declarations(little).parse(data[offset:])
        body = block.body
        if block.type == SHB_TYPE:
            interfaces = []
        elif block.type == IDB_TYPE:
            resolution = next((o.value[0] for o in body.options if o.code == 9), 6)
            interfaces.append((body.linktype, 10 ** resolution, body.snaplen))
        elif block.type == EPB_TYPE:
            linktype, ticks, _ = interfaces[body.interface_id]
            last_ts = ((body.ts_high << 32) | body.ts_low) / ticks
            records.append((last_ts, linktype, body.data))
        elif block.type == SPB_TYPE:
            linktype, _, snaplen = interfaces[0]
            records.append((last_ts, linktype, body.data[:min(body.original, snaplen or body.original)]))
        offset += block.length
    return records


def test_the_real_capture_reads_as_declared() -> None:
    data = REAL.read_bytes()
    records, end = walk(data)
    assert len(records) == 756 and (end.trailing, end.reason) == (0, None)
    assert end.statistics == {(0, 0): (756, 0)}  # dumpcap's: 756 received, none dropped
    assert records == by_declaration(data)


@ENDIANS
def test_both_byte_orders_read_as_declared(endian: str) -> None:
    data = b"".join([
        three_packets(endian),
        pcapng_block(endian, SPB_TYPE, struct.pack(endian + "I", len(FRAME)) + FRAME),
        pcapng_shb(endian), pcapng_idb(endian, 101, tsresol=9), pcapng_epb(endian, 0, 5_000_000_000, FRAME)])
    records, end = walk(data)
    assert [(ts, linktype) for ts, linktype, _ in records] == [(1.0, 1), (2.0, 1), (3.0, 1), (3.0, 1), (5.0, 101)]
    assert all(frame == FRAME for *_, frame in records) and end == PcapngEnd(0, None)
    assert records == by_declaration(data)


@ENDIANS
def test_a_file_of_both_byte_orders(endian: str) -> None:
    other = ">" if endian == "<" else "<"
    records, end = walk(three_packets(endian) + three_packets(other))
    assert [ts for ts, *_ in records] == [1.0, 2.0, 3.0] * 2 and end.reason is None


@ENDIANS
def test_options_of_section_and_interface(endian: str) -> None:
    def option(code: int, value: bytes) -> bytes:
        return struct.pack(endian + "HH", code, len(value)) + value + bytes(-len(value) % 4)
    shb = pcapng_block(endian, SHB_TYPE, struct.pack(endian + "IHHq", 0x1A2B3C4D, 1, 0, -1)
                       + option(2, b"a hardware name, 31 bytes long!") + option(0, b""))
    idb_options = (option(2, b"eth0") + option(9, bytes([3])) + option(14, struct.pack(endian + "q", 1_000))
                   + option(0x8001, b"a custom option: skipped"))  # and no opt_endofopt: the body's end ends them
    idb = pcapng_block(endian, IDB_TYPE, struct.pack(endian + "HHI", 1, 0, 0) + idb_options)
    records, end = walk(shb + idb + pcapng_epb(endian, 0, 2_500, FRAME))
    assert records == [(1_002.5, 1, FRAME)] and end.reason is None


def test_an_option_cut_inside_its_block_ends_the_options() -> None:
    idb = pcapng_block("<", IDB_TYPE, struct.pack("<HHI", 1, 0, 0) + struct.pack("<HH", 9, 40) + bytes([3, 0, 0, 0]))
    records, end = walk(pcapng_shb("<") + idb + pcapng_epb("<", 0, 2_000_000, FRAME))
    assert records == [(2.0, 1, FRAME)] and end.reason is None  # the cut option was not taken: microseconds


@ENDIANS
def test_unknown_block_types_are_skipped(endian: str) -> None:
    data = three_packets(endian)
    first_packet = blocks(data, endian)[2][0]
    unknown = pcapng_block(endian, 0x40000BAD, b"a custom block") + pcapng_block(endian, 5, bytes(20))
    records, end = walk(data[:first_packet] + unknown + data[first_packet:])
    assert [ts for ts, *_ in records] == [1.0, 2.0, 3.0] and end == PcapngEnd(0, None)


@ENDIANS
@pytest.mark.parametrize("cut", [1, 4, 11, 12, 20, 40])
def test_a_block_cut_short_ends_the_walk_with_the_bytes_left(endian: str, cut: int) -> None:
    data = three_packets(endian)
    last = blocks(data, endian)[-1][0]
    records, end = walk(data[:last + cut])
    assert [ts for ts, *_ in records] == [1.0, 2.0]
    assert end.trailing == cut and "cut short" in (end.reason or "")


def isb(endian: str, interface: int, **counters: int) -> bytes:
    """An interface statistics block as dumpcap writes one when it stops: a comment, then 64-bit
    counters (ifrecv 4, ifdrop 5, osdrop 7), opt_endofopt."""
    codes = {"ifrecv": 4, "ifdrop": 5, "osdrop": 7}
    comment = b"Counters provided by dumpcap"
    options = struct.pack(endian + "HH", 1, len(comment)) + comment + b"".join(
        struct.pack(endian + "HHQ", codes[name], 8, value) for name, value in counters.items())
    return pcapng_block(endian, ISB_TYPE, struct.pack(endian + "III", interface, 0, 0) + options
                        + struct.pack(endian + "HH", 0, 0))


#: the last block of a real capture: ``dumpcap -i lo -B 1 -w x.pcapng`` on a loopback flooded with
#: 200-byte segments, which said "Packets received/dropped on interface 'Loopback: lo': 79970/12142
#: (pcap:12142/dumpcap:0/flushed:0/ps_ifdrop:0)" as it stopped
DUMPCAP_ISB = bytes.fromhex(
    "050000006c0000000000000077610600985679c201001c00436f756e746572732070726f76696465642062792064756d7063"
    "617002000800776106006c4603c203000800776106005b5679c2040008006238010000000000050008006e2f00000000000000"
    "0000006c000000")


@ENDIANS
def test_the_packets_a_capture_dropped_are_read_from_its_interface_statistics(endian: str) -> None:
    """dumpcap (and tshark -w) end a pcapng with an ISB per interface: its counters run from the
    start, so the last of an interface counts; drops for want of room and by the OS add up over the
    interfaces and sections; an ISB that says no counter, or cannot be read, is skipped as before."""
    data = b"".join([three_packets(endian), isb(endian, 0, ifrecv=10, ifdrop=1), isb(endian, 0, ifrecv=90, ifdrop=12),
                     pcapng_idb(endian, 1), isb(endian, 1, ifrecv=5, osdrop=2), isb(endian, 0),
                     pcapng_block(endian, ISB_TYPE, bytes(4)), pcapng_epb(endian, 1, 4_000_000, FRAME)])
    records, end = walk(data)
    assert [ts for ts, *_ in records] == [1.0, 2.0, 3.0, 4.0] and (end.trailing, end.reason) == (0, None)
    assert end.statistics == {(0, 0): (90, 12), (0, 1): (5, 2)} and end.dropped() == (14, 95)
    _, both = walk(data + three_packets(endian) + isb(endian, 0, ifdrop=3))  # a second section (mergecap)
    assert both.dropped() == (17, None)  # an interface that dropped some did not say what it received
    _, none = walk(three_packets(endian) + isb(endian, 0, ifrecv=3, ifdrop=0))
    assert none.dropped()[0] == 0


def test_a_real_dumpcap_statistics_block() -> None:
    records, end = walk(three_packets("<") + DUMPCAP_ISB)
    assert len(records) == 3 and end.dropped() == (12142, 79970)


#: (what lies, the third packet block's bytes changed, what the reason says)
LIES = [
    ("length 0 (would never move on)", lambda e, b: struct.pack(e + "II", EPB_TYPE, 0) + b[8:], "total length 0"),
    ("length 13, not a multiple of 4", lambda e, b: struct.pack(e + "II", EPB_TYPE, 13) + b[8:], "total length 13"),
    ("length 8, below a block's 12", lambda e, b: struct.pack(e + "II", EPB_TYPE, 8) + b[8:], "total length 8"),
    ("trailing length differs", lambda e, b: b[:-4] + struct.pack(e + "I", len(b) + 4), "at its end"),
    ("length past the end of the file", lambda e, b: struct.pack(e + "II", EPB_TYPE, len(b) + 400) + b[8:],
     "past the end"),
    ("captured length longer than the block", lambda e, b: b[:20] + struct.pack(e + "I", 4000) + b[24:],
     "captured length 4000"),
    ("an enhanced packet block too short for its fields",
     lambda e, b: pcapng_block(e, EPB_TYPE, bytes(8)), "body of 8 bytes"),
]


@ENDIANS
@pytest.mark.parametrize(("lie", "change", "reason"), LIES, ids=[lie[0] for lie in LIES])
def test_a_block_whose_lengths_lie_ends_the_walk_with_a_reason(endian: str, lie: str, change, reason: str) -> None:
    data = three_packets(endian)
    last = blocks(data, endian)[-1][0]
    bad = change(endian, data[last:])
    records, end = walk(data[:last] + bad)
    assert [ts for ts, *_ in records] == [1.0, 2.0]
    assert end.trailing == len(bad) and reason in (end.reason or ""), end.reason
    assert f"at {last}" in (end.reason or "")


def test_an_unknown_byte_order_or_version_ends_the_walk() -> None:
    data = three_packets("<")
    records, end = walk(data[:8] + b"\x01\x02\x03\x04" + data[12:])
    assert records == [] and "unknown byte-order magic 01020304" in (end.reason or "")
    records, end = walk(data[:12] + struct.pack("<H", 2) + data[14:])
    assert records == [] and "pcapng version 2.0" in (end.reason or "")


def test_a_lying_interface_block_ends_the_walk() -> None:
    """A cold block is parsed whole by the declaration: what it cannot parse is a reason, not an error."""
    data = three_packets("<")
    idb_at, idb_len = blocks(data, "<")[1]
    records, end = walk(data[:idb_at] + pcapng_block("<", IDB_TYPE, b"\x01\x00") + data[idb_at + idb_len:])
    assert records == [] and end.reason and f"block at {idb_at}" in end.reason


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_damage_is_read_up_to_the_damage_never_raised_or_looped(data: st.DataObject) -> None:
    capture = bytearray(three_packets(data.draw(st.sampled_from("<>"))) + REAL.read_bytes()[:600])
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(4, len(capture) - 1))
        capture[at] = data.draw(st.integers(0, 255))
    capture = capture[:data.draw(st.integers(0, len(capture)))]
    records, end = walk(bytes(capture)) if capture[:4] == b"\x0a\x0d\x0d\x0a" else ([], PcapngEnd())
    assert 0 <= end.trailing <= len(capture) and len(records) <= 10
    assert (end.reason is None) == (end.trailing == 0)


def test_the_records_of_a_file_point_into_it(tmp_path: Path) -> None:
    data = REAL.read_bytes()
    for record in iter_records(data):
        assert data[record.offset:record.offset + len(record.data)] == bytes(record.data)


def test_construct_ships_to_executors_in_the_jobs_zip(tmp_path: Path) -> None:
    """Executors get the project as the zip (spark/ship.py): construct, which reads pcapng there, goes in it."""
    from spark_analysis.spark.ship import build_zip

    zipped = build_zip(tmp_path / "job.zip")
    found = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(zipped)!r}); "
                            "import construct, spark_analysis.capture.pcapng as p; p.declarations(False); "
                            "print(construct.__file__)"], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert found.stdout.startswith(str(zipped))


@ENDIANS
def test_a_record_dated_where_no_date_is_is_counted_not_read(endian: str) -> None:
    """A packet block's time is its timestamp (64 bits of ticks) plus its interface's if_tsoffset (a
    signed 64-bit count of seconds): a file can date a packet in the year 586,524, or 2^62 seconds
    on, where no date (Python's, Spark's timestamps) is. Such a record is counted, not read, and the
    walk goes on; before, one of them stopped the whole report with a traceback (ValueError: year
    586524 is out of range; OSError: Value too large for defined data type)."""
    far = [pcapng_epb(endian, 0, ticks, FRAME) for ticks in (1_000_000, (1 << 64) - 1, 3_000_000)]
    records, end = walk(b"".join([pcapng_shb(endian), pcapng_idb(endian, 1), *far]))
    assert [ts for ts, *_ in records] == [1.0, 3.0] and (end.undated, end.reason, end.trailing) == (1, None, 0)
    offset = struct.pack(endian + "HH", OPT_TSOFFSET, 8) + struct.pack(endian + "q", 1 << 62) + bytes(4)
    shifted = pcapng_block(endian, IDB_TYPE, struct.pack(endian + "HHI", 1, 0, 0) + offset)
    records, end = walk(b"".join([pcapng_shb(endian), shifted, *far[:1]]) + three_packets(endian))
    assert [ts for ts, *_ in records] == [1.0, 2.0, 3.0] and end.undated == 1
    before = struct.pack(endian + "HH", OPT_TSOFFSET, 8) + struct.pack(endian + "q", -5) + bytes(4)
    records, end = walk(b"".join([pcapng_shb(endian), pcapng_block(
        endian, IDB_TYPE, struct.pack(endian + "HHI", 1, 0, 0) + before), *far[:1]]))
    assert records == [] and end.undated == 1  # 1969: no capture was made then


def test_a_section_of_more_interfaces_than_any_capture_has_ends_the_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every interface description is kept for the packets naming it by index, and one takes 20 bytes
    of a file: a file of them (1,000,000 in 19 MiB) took a task 66 MB and 27 s of CPU, and a GiB of
    them would take 3.5 GB. Past MAX_INTERFACES in one section (65,536; a capture has a few, a busy
    Kubernetes node's every veth some hundreds) the walk ends there, with the reason, the records
    before it kept."""
    from spark_analysis.capture import pcapng

    monkeypatch.setattr(pcapng, "MAX_INTERFACES", 4)
    head = pcapng_shb("<") + pcapng_idb("<", 1) * 4 + pcapng_epb("<", 3, 1_000_000, FRAME)
    rest = pcapng_idb("<", 1) + pcapng_epb("<", 4, 2_000_000, FRAME)
    records, end = walk(head + rest)
    assert [ts for ts, *_ in records] == [1.0] and end.trailing == len(rest)
    assert end.reason == f"interface description at {len(head)}: more than 4 interfaces in one section"
    records, end = walk(head + three_packets("<"))  # a new section starts its own table
    assert [ts for ts, *_ in records] == [1.0, 1.0, 2.0, 3.0] and end.reason is None
