"""Input captures: paths expanded to files, files planned as byte-range splits, and a split read
into TCP segments batched by connection.

The driver plans from file names and sizes only; every byte is read in a task. A classic pcap
larger than the split size is cut into ranges at arbitrary offsets, each task finding its first
record with find_record_boundary; small files are combined into one task. A pcapng file is read
whole by one task (through mmap, so it need not fit in memory). Files on other filesystems
(hdfs://, s3a://) are listed by the job through Hadoop and read whole with ``binaryFiles``.
"""

from __future__ import annotations

import glob
import mmap
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple
from urllib.parse import urlparse

from spark_analysis.packets import parse_tcp
from spark_analysis.pcapio import (
    MAX_ORIG_LEN,
    MAX_SNAPLEN,
    PCAP_HEADER_LEN,
    RECORD_HEADER_LEN,
    Buffer,
    Record,
    find_record_boundary,
    iter_pcap_records,
    iter_records,
    parse_pcap_header,
)

DEFAULT_SPLIT_BYTES = 64 << 20
MIN_SPLIT_BYTES = 1 << 20
_PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"
# A task reads this many whole records past its range: the last record starting in the range,
# and the chain that find_record_boundary validates when the next range starts near its end.
_RECORDS_PAST_STOP = 4

#: (lower endpoint, higher endpoint) as "ip:port": both directions of a connection share it
ConnectionKey = tuple[str, str]
#: (ts, file index, split start, record number, src, dst, seq, ack, flags, payload); the first
#: four fields order segments in capture order across splits and files
SegmentRow = tuple


class CaptureFile(NamedTuple):
    path: str
    size: int
    index: int  # position among all inputs, which orders records of equal timestamps


class Split(NamedTuple):
    """The records whose headers start in [start, stop) of a file."""

    file: CaptureFile
    start: int
    stop: int


def is_local(path: str) -> bool:
    return urlparse(path).scheme in ("", "file")


def local_path(path: str) -> str:
    return urlparse(path).path if path.startswith("file:") else path


def discover(inputs: Iterable[str], list_remote: Callable[[str], list[tuple[str, int]]]) -> list[CaptureFile]:
    """Expand files, directories (recursively, skipping hidden entries) and globs, in argument
    order without duplicates; ``list_remote`` does the same for a non-local path, as (uri, size)."""
    seen: dict[str, int] = {}
    for given in inputs:
        found = _expand_local(local_path(given)) if is_local(given) else list_remote(given)
        if not found:
            raise FileNotFoundError(f"no capture files at {given}")
        for path, size in found:
            seen.setdefault(path, size)
    return [CaptureFile(path, size, index) for index, (path, size) in enumerate(seen.items())]


def _expand_local(pattern: str) -> list[tuple[str, int]]:
    matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
    found = []
    for match in matches:
        if os.path.isdir(match):
            for root, dirs, names in os.walk(match):
                dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
                found += [os.path.join(root, n) for n in sorted(names) if not n.startswith((".", "_"))]
        elif os.path.isfile(match):
            found.append(match)
    return [(path, os.path.getsize(path)) for path in found]


def split_bytes(total: int, parallelism: int) -> int:
    """About three ranges per core, so a slow range does not leave cores idle, within bounds."""
    return max(MIN_SPLIT_BYTES, min(DEFAULT_SPLIT_BYTES, total // (3 * max(parallelism, 1)) + 1))


def plan_tasks(files: Iterable[CaptureFile], size: int) -> list[list[Split]]:
    """Local files as tasks of about ``size`` bytes: big files cut into ranges, small ones combined."""
    tasks: list[list[Split]] = []
    small: list[Split] = []
    small_bytes = 0
    for file in files:
        if file.size > size:
            tasks += [[Split(file, start, min(start + size, file.size))] for start in range(0, file.size, size)]
            continue
        small.append(Split(file, 0, file.size))
        small_bytes += file.size
        if small_bytes >= size:
            tasks.append(small)
            small, small_bytes = [], 0
    if small:
        tasks.append(small)
    return tasks


def read_task(splits: Iterable[Split], server_port: int, tally: Counter) -> Iterator[tuple[ConnectionKey, list]]:
    """Segments to or from ``server_port`` in local splits, one batch per connection and split."""
    for split in splits:
        tally["bytes"] += split.stop - split.start
        yield from batch_by_connection(_local_records(split, tally), split.file.index, split.start, server_port, tally)


def read_whole(data: Buffer, file_index: int, server_port: int, tally: Counter) -> Iterator[tuple[ConnectionKey, list]]:
    """The same for a file's whole content (files that tasks cannot read by range)."""
    tally["bytes"] += len(data)
    yield from batch_by_connection(_records(data, tally), file_index, 0, server_port, tally)


def batch_by_connection(records: Iterable[Record], file_index: int, split_start: int, server_port: int,
                        tally: Counter) -> Iterator[tuple[ConnectionKey, list[SegmentRow]]]:
    port = f":{server_port}"
    batches: dict[ConnectionKey, list[SegmentRow]] = {}
    number = -1
    for number, record in enumerate(records):
        segment = parse_tcp(record.linktype, record.data)
        if segment is None:
            continue
        src, dst = segment.src, segment.dst
        if not (dst.endswith(port) or src.endswith(port)):
            continue
        key = (src, dst) if src < dst else (dst, src)
        batch = batches.get(key)
        if batch is None:
            batch = batches[key] = []
        batch.append((record.ts, file_index, split_start, number, *segment))
    tally["records"] += number + 1
    tally["segments"] += sum(len(batch) for batch in batches.values())
    return iter(batches.items())


def _records(data: Buffer, tally: Counter) -> Iterator[Record]:
    try:
        yield from iter_records(data)
    except ValueError:
        tally["not_captures"] += 1


def _local_records(split: Split, tally: Counter) -> Iterator[Record]:
    with open(local_path(split.file.path), "rb") as f:
        head = os.pread(f.fileno(), PCAP_HEADER_LEN, 0)
        if head[:4] == _PCAPNG_MAGIC:
            if split.start == 0 and split.file.size:  # pcapng has no record boundaries to find
                yield from iter_records(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
            return
        try:
            header = parse_pcap_header(head)
        except ValueError:
            tally["not_captures"] += split.start == 0
            return
        if header is None:
            return
        begin = max(split.start, PCAP_HEADER_LEN)
        if begin >= split.stop:
            return
        record_bytes = min(header.snaplen or MAX_SNAPLEN, MAX_ORIG_LEN) + RECORD_HEADER_LEN
        data = os.pread(f.fileno(), split.stop - begin + _RECORDS_PAST_STOP * record_bytes, begin)
    first = 0
    if begin > PCAP_HEADER_LEN:
        first = find_record_boundary(data, 0, header, at_eof=begin + len(data) >= split.file.size)
        if first is None:
            return
    yield from iter_pcap_records(data, header, first, split.stop - begin)
