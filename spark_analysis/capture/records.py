"""Read classic pcap and pcapng captures from bytes (pcapng's blocks: pcapng.py).

Everything here is a pure function over a buffer so that Spark tasks can call it on byte ranges
of big files. Records carry zero-copy ``memoryview`` slices of the input buffer; call
``bytes(record.data)`` to keep one beyond the buffer's life or to pickle it. Truncated input
(a capture cut short while being written or copied) ends iteration quietly instead of raising.

The Spark job reads millions of records, so it takes them as columns (RecordIndex, numpy arrays):
only the walk from one classic-pcap record header to the next is a Python loop.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np

from spark_analysis.capture.captured import Buffer, Record
from spark_analysis.capture.pcapng import PcapngEnd, iter_pcapng

PCAP_HEADER_LEN = 24
RECORD_HEADER_LEN = 16
MAX_SNAPLEN = 0x40000  # libpcap's ceiling, used when a header says snaplen 0
MAX_ORIG_LEN = 1 << 22  # far above any real frame, even with GSO/BIG TCP; must stay < 2**24

_PCAP_MAGICS = {
    # magic as read little-endian -> (byte order, fractional units per second)
    0xA1B2C3D4: ("<", 1_000_000),
    0xD4C3B2A1: (">", 1_000_000),
    0xA1B23C4D: ("<", 1_000_000_000),
    0x4D3CB2A1: (">", 1_000_000_000),
}
_MAGIC = struct.Struct("<I")
_FILE_HEADER = {e: struct.Struct(e + "HHiIII") for e in "<>"}
_RECORD_HEADER = {e: struct.Struct(e + "IIII") for e in "<>"}
#: a pcapng file starts with a section header block, whose type reads alike in both byte orders
PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"

# Cheap prefilter for find_record_boundary: orig_len <= MAX_ORIG_LEN < 2**24 and
# incl_len <= orig_len, so the most significant byte of both length words must be zero.
_CANDIDATE = {
    "<": re.compile(rb"(?=.{11}\x00.{3}\x00)", re.DOTALL),
    ">": re.compile(rb"(?=.{8}\x00.{3}\x00)", re.DOTALL),
}

#: a record header's incl_len, read at the header's start (8 bytes in)
_INCL_LEN = {e: struct.Struct(e + "8xI") for e in "<>"}


class RecordIndex(NamedTuple):
    """Records as columns, in capture order: the captured bytes of record i are
    ``buffer[start[i] : start[i] + length[i]]``."""

    ts: np.ndarray  # float64 seconds
    linktype: np.ndarray  # int64
    start: np.ndarray  # int64
    length: np.ndarray  # int64
    orig_len: np.ndarray  # int64, the length on the wire


class PcapHeader(NamedTuple):
    """What a classic pcap global header says about every record that follows it."""

    endian: str  # struct byte-order prefix, "<" or ">"
    ts_units: int  # fractional timestamp units per second (10**6 or 10**9)
    snaplen: int
    linktype: int


def read_records(path: str | Path) -> list[Record]:
    """Read a whole capture file (pcap or pcapng) into records."""
    return list(iter_records(Path(path).read_bytes()))


def iter_records(data: Buffer, end_of_walk: PcapngEnd | None = None) -> Iterator[Record]:
    """Yield the records of a pcap or pcapng capture held in ``data``; for pcapng, ``end_of_walk``
    is told the bytes after the last whole block and why the walk stopped there (a capture cut
    while writing one, a block whose lengths lie: capture/pcapng.py).

    Raises ValueError if the data starts with neither format's magic number.
    """
    view = memoryview(data)
    if view[:4] == PCAPNG_MAGIC:
        yield from iter_pcapng(view, end_of_walk)
        return
    header = parse_pcap_header(view)
    if header is not None:
        yield from iter_pcap_records(view, header)


def parse_pcap_header(data: Buffer) -> PcapHeader | None:
    """Decode a classic pcap global header; None if the data is too short to hold one."""
    if len(data) < 4:
        return None
    (magic,) = _MAGIC.unpack_from(data, 0)
    if magic not in _PCAP_MAGICS:
        raise ValueError(f"not a pcap or pcapng capture (magic {magic:#010x})")
    if len(data) < PCAP_HEADER_LEN:
        return None
    endian, ts_units = _PCAP_MAGICS[magic]
    *_, snaplen, network = _FILE_HEADER[endian].unpack_from(data, 4)
    # The upper bits of the link-type word carry FCS information, not the link type.
    return PcapHeader(endian, ts_units, snaplen, network & 0xFFFF)


def iter_pcap_records(
    data: Buffer, header: PcapHeader, start: int = PCAP_HEADER_LEN, stop: int | None = None
) -> Iterator[Record]:
    """Yield the classic-pcap records whose headers start in ``[start, stop)``.

    ``start`` must be a record boundary (see find_record_boundary). A record that starts before
    ``stop`` is read whole even if it runs past it, so byte ranges split at any offsets and read
    this way together yield every record exactly once.
    """
    index = index_pcap_records(data, header, start, stop)
    view = memoryview(data)
    for ts, linktype, at, length, orig_len in zip(*(column.tolist() for column in index), strict=True):
        yield Record(ts, linktype, view[at:at + length], orig_len, at)


def index_pcap_records(data: Buffer, header: PcapHeader, start: int = PCAP_HEADER_LEN,
                       stop: int | None = None) -> RecordIndex:
    """iter_pcap_records as columns: the same records, without an object per record."""
    view = memoryview(data)
    end = len(view)
    stop = end if stop is None else min(stop, end)
    unpack, step = _INCL_LEN[header.endian].unpack_from, RECORD_HEADER_LEN
    # a record header starting before ``last`` lies whole in the buffer; whether the record's data does
    # too is told once, of the last one (the walk ends past ``end`` only when that one runs beyond it:
    # a capture cut while writing it)
    last = min(stop, end - RECORD_HEADER_LEN + 1)

    def walk(offset: int) -> Iterator[int]:
        """The record headers' offsets: one read and one comparison a record, each header depending
        on the one before (a generator numpy takes from: no list or array grown a record at a time)."""
        while offset < last:
            yield offset
            offset += step + unpack(view, offset)[0]

    at = np.fromiter(walk(start), np.int64)
    words = read_words(np.frombuffer(view, np.uint8), at, f"{header.endian}u4", 4).astype(np.int64)
    if len(at) and int(at[-1]) + RECORD_HEADER_LEN + int(words[-1, 2]) > end:
        at, words = at[:-1], words[:-1]
    seconds, fraction, length, orig_len = words.T
    return RecordIndex(seconds + fraction / header.ts_units, np.full(len(at), header.linktype, np.int64),
                       at + RECORD_HEADER_LEN, length, orig_len)


def index_records(records: Iterable[Record]) -> RecordIndex:
    """Columns of records read one by one (pcapng): their ``offset`` must index the same buffer."""
    rows = [(r.ts, r.linktype, r.offset, len(r.data), r.orig_len) for r in records]
    ts, *integers = zip(*rows, strict=True) if rows else ((),) * 5
    return RecordIndex(np.array(ts, np.float64), *(np.array(column, np.int64) for column in integers))


def read_uint(u8: np.ndarray, at: np.ndarray, width: int, big_endian: bool) -> np.ndarray:
    """The unsigned ``width``-byte integers at positions ``at`` of a byte array, as int64."""
    value = np.zeros(len(at), np.int64)
    for byte in range(width):
        shift = 8 * (width - 1 - byte if big_endian else byte)
        value |= u8[at + byte].astype(np.int64) << shift
    return value


def read_words(u8: np.ndarray, at: np.ndarray, kind: str, count: int) -> np.ndarray:
    """The ``count`` consecutive words of dtype ``kind`` (e.g. ">u4") at each position ``at`` of a
    byte array, as an array of ``len(at)`` rows: one gather of their bytes (a window per position
    over the same memory), where read_uint gathers each byte of each word on its own. Every
    position must have its ``count`` words within ``u8``."""
    size = np.dtype(kind).itemsize * count
    if len(u8) < size:
        return np.zeros((len(at), count), kind)
    # a window per position as one item of ``size`` bytes: gathering an item each copies it whole,
    # where a window of ``size`` one-byte items was copied a byte at a time (2-3x the time)
    windows = np.ndarray((len(u8) - size + 1,), np.dtype((np.void, size)), u8, 0, (1,))
    words: np.ndarray = windows[at].view(kind).reshape(len(at), count)
    return words


def find_record_boundary(
    data: Buffer,
    start: int,
    header: PcapHeader,
    *,
    chain: int = 3,
    max_ts_step: float = 3600.0,
    at_eof: bool = True,
) -> int | None:
    """Find the first offset >= ``start`` in a classic pcap where a record header really starts.

    Classic pcap has no sync marker, so a Spark task handed an arbitrary byte range must find the
    first record it owns by heuristics: a candidate is accepted when it and the records following
    it form a chain of ``chain`` plausible headers (fractional timestamp below one second,
    0 < orig_len <= MAX_ORIG_LEN, incl_len <= snaplen and <= orig_len, each timestamp within
    ``max_ts_step`` seconds of the previous one), or when a shorter plausible chain ends exactly
    at the end of ``data`` and ``at_eof`` says that is the end of the file. Offsets are indexes
    into ``data``, which should be the whole file or a window reaching far enough past ``start``
    to hold ``chain`` records; pass ``at_eof=False`` when the window stops short of the file's
    end. Returns ``len(data)`` when ``start`` is the end of the file, None if no boundary is found.
    """
    view = memoryview(data)
    for candidate in _CANDIDATE[header.endian].finditer(view, start):
        offset = candidate.start()
        if _chain_is_plausible(view, offset, header, chain, max_ts_step, at_eof):
            return offset
    return len(view) if at_eof and start <= len(view) else None


def _chain_is_plausible(
    view: memoryview, offset: int, header: PcapHeader, chain: int, max_ts_step: float, at_eof: bool
) -> bool:
    end = len(view)
    unpack = _RECORD_HEADER[header.endian].unpack_from
    snaplen = header.snaplen or MAX_SNAPLEN
    units = header.ts_units
    previous_ts = None
    for _ in range(chain):
        if offset == end:
            return at_eof
        if offset + RECORD_HEADER_LEN > end:
            return False
        sec, frac, incl_len, orig_len = unpack(view, offset)
        if frac >= units or not 0 < orig_len <= MAX_ORIG_LEN or incl_len > min(snaplen, orig_len):
            return False
        ts = sec + frac / units
        if previous_ts is not None and abs(ts - previous_ts) > max_ts_step:
            return False
        previous_ts = ts
        offset += RECORD_HEADER_LEN + incl_len
    return True
