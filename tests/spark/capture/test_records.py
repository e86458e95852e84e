"""Reading classic pcap and pcapng records: the shared captures cut anywhere, every byte order and
timestamp resolution, truncated and foreign files."""

from __future__ import annotations

import bisect
import struct
from itertools import pairwise
from pathlib import Path

import pytest

from spark_analysis.capture.packets import parse_tcp, tcp_segments
from spark_analysis.capture.records import (
    PCAP_HEADER_LEN,
    find_record_boundary,
    iter_pcap_records,
    iter_records,
    parse_pcap_header,
    read_records,
)
from tests.spark.capture.builders import (
    CLIENT,
    CLIENT6,
    SERVER,
    SERVER6,
    ethernet,
    ipv4,
    ipv6,
    pcap,
    pcapng_block,
    pcapng_epb,
    pcapng_idb,
    pcapng_shb,
    tcp,
)


def record_offsets(data: bytes) -> list[int]:
    """True record offsets of a little-endian classic pcap, end of file included."""
    offsets, offset = [], PCAP_HEADER_LEN
    while offset < len(data):
        offsets.append(offset)
        offset += 16 + struct.unpack_from("<I", data, offset + 8)[0]
    return offsets + [len(data)]


def test_every_capture_yields_tcp_records(capture: Path) -> None:
    records = read_records(capture)
    assert records
    assert all(record.linktype == 1 and len(record.data) == record.orig_len for record in records)
    assert len(list(tcp_segments(records))) == len(records)
    assert all(a.ts <= b.ts for a, b in pairwise(records))

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
