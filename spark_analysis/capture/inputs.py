"""Input captures: paths expanded to files, files planned as byte-range splits, and a split read
into TCP segments batched by connection (Pieces).

The driver plans from file names and sizes only; every byte is read in a task. A classic pcap
larger than the split size is cut into ranges at arbitrary offsets, each task finding its first
record with find_record_boundary; small files are combined into one task. A pcapng file is read
whole by one task (through mmap, so it need not fit in memory). Files on other filesystems
(hdfs://, s3a://) are listed by the job through Hadoop and read whole by Spark (``binaryFile``),
as are compressed captures anywhere (``.gz``, ``.bz2``, ``.xz``), which their task inflates.

A Piece of a local file carries no payload bytes, only where they are in the file: the task that
reassembles the connection maps the file and reads them there (copies them out of a small file),
so the shuffle moves ~30 bytes per segment instead of the capture. Pieces of files read whole
carry their payloads.
"""

from __future__ import annotations

import bz2
import contextlib
import errno
import glob
import hashlib
import lzma
import mmap
import os
import stat
import zlib
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, NamedTuple, Protocol
from urllib.parse import urlparse

import numpy as np

from spark_analysis.capture.captured import Buffer
from spark_analysis.capture.packets import LINK_TYPES_READ, Ports, segment_columns
from spark_analysis.capture.pcapng import PcapngEnd
from spark_analysis.capture.reassembly import SEGMENT, STEP_BACK_TOLERANCE_S, SegmentTable, merge_tables
from spark_analysis.capture.records import (
    MAX_ORIG_LEN,
    MAX_SNAPLEN,
    PCAP_HEADER_LEN,
    PCAPNG_MAGIC,
    RECORD_HEADER_LEN,
    RecordIndex,
    find_record_boundary,
    index_pcap_records,
    index_records,
    iter_records,
    parse_pcap_header,
)
from twisted_namesrv.escapes import escaped

#: of remote files read whole, what a decoding task holds at most (their payloads are in its pieces)
MAX_SPLIT_BYTES = 256 << 20
#: a reading task's range of a local file at most (split_bytes); its records are made pieces a
#: CHUNK_BYTES at a time whatever its size
MAX_RANGE_BYTES = 2 << 30


class Inflater(Protocol):
    """A stream decompressor of the standard library (zlib's, bz2's, lzma's): one stream (a gzip
    member, a bzip2 or xz stream) at a time, what follows it in ``unused_data``."""

    @property
    def eof(self) -> bool: ...

    @property
    def unused_data(self) -> bytes: ...

    def decompress(self, data: bytes, /, max_length: int = ...) -> bytes: ...


#: the compression formats read, as ``tcpdump -z gzip`` or ``-z bzip2`` (its manual's two) or a
#: rotation's xz leave captures: the suffix that has a file read so (whole by one task, inflated
#: there) and the format's stream decompressor
READ_FORMATS: dict[str, tuple[str, Callable[[], Inflater]]] = {
    "gzip": (".gz", lambda: zlib.decompressobj(wbits=zlib.MAX_WBITS | 16)),  # | 16: the gzip header and trailer
    "bzip2": (".bz2", bz2.BZ2Decompressor),
    "xz": (".xz", lzma.LZMADecompressor),
}
INFLATERS = dict(READ_FORMATS.values())
#: what each raises on bytes that are not its format (bz2's is an OSError)
_INFLATE_ERRORS = (zlib.error, OSError, lzma.LZMAError)
#: what one call of an inflater gives at most: a MiB of bzip2 inflates to a terabyte (208 bytes of it
#: are 256 MiB of zeros), of xz to gigabytes, of gzip to a GiB, and one call gave all of it at once
INFLATE_PIECE = 1 << 20
#: what a compressed file read whole in memory (read_whole: remote, or through Spark's JVM on a
#: cluster) inflates to at most, as much as a task reads of a local file (MAX_RANGE_BYTES, defined
#: below); past it the rest is left, the file NOT_INFLATED with INFLATED_PAST_MAX as its reason
INFLATE_IN_MEMORY_MAX = 2 << 30
INFLATED_PAST_MAX = (f"it inflates past {INFLATE_IN_MEMORY_MAX >> 30} GiB, what a task inflates in memory (a "
                     "compressed file read whole, remote or on a cluster; a zip bomb's kind): read as far as that; "
                     "decompress it first, or read it from a local disk with a local master")
#: what inflating into the spool directory (TMPDIR) leaves free on its file system: the lesser of
#: SPOOL_KEEP_FREE and SPOOL_KEEP_FREE_SHARE of its size (a small tmpfs keeps a tenth).  Past it the
#: rest of the file is left, the file NOT_INFLATED with the reason and what came before read, as in
#: memory.  A bomb filled the directory before, and whatever else wrote there (a shared /tmp) failed
SPOOL_KEEP_FREE = 1 << 30
SPOOL_KEEP_FREE_SHARE = 0.1
#: the first bytes of compressed files, to say what an input that is not a capture is (a capture
#: compressed in a format not read, or in one read but not named by its suffix)
COMPRESSION_MAGICS = ((b"\x1f\x8b", "gzip"), (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zstd"),
                      (b"\x04\x22\x4d\x18", "lz4"), (b"PK\x03\x04", "zip"), (b"7z\xbc\xaf\x27\x1c", "7z"))
MIN_SPLIT_BYTES = 1 << 20
# A task reads this many whole records past its range: the last record starting in the range,
# and the chain that find_record_boundary validates when the next range starts near its end.
_RECORDS_PAST_STOP = 4

#: what is wrong with an input file, if anything (FileFacts.problem)
NOT_A_CAPTURE, EMPTY, TRUNCATED = "not a capture", "empty", "truncated"
#: an EMPTY compressed file's reason: it inflates to nothing (gzip of no bytes), no capture header
NOTHING_INFLATED = "it inflates to no byte, not even a capture header"
#: an EMPTY file's reason where it has no byte at all: what a capture stopped before its first write leaves
NO_BYTE = ("no byte, not even a capture header: its capture had written nothing to it when it stopped (tcpdump -w "
           "writes 4 KiB at a time: one killed loses what it had not written) or is writing it still")
#: a compressed capture its task could not inflate into the spool directory (FileFacts.reason says why)
NOT_INFLATED = "not inflated"
#: a pcapng whose packets some are dated where no date is (pcapng.DATED): FileFacts.reason says how many
UNDATED = "packets dated where no date is"
#: the problems of a file whose other records are read: a capture all the same (a warning, not critical)
READ_ANYWAY = (TRUNCATED, UNDATED)

#: (lower endpoint, higher endpoint) as "ip:port": both directions of a connection share it
ConnectionKey = tuple[str, str]


class CaptureFile(NamedTuple):
    path: str
    size: int
    index: int  # type: ignore[assignment]  # position among all inputs: orders records of equal timestamps


class Split(NamedTuple):
    """The records whose headers start in [start, stop) of a file."""

    file: CaptureFile
    start: int
    stop: int


class Piece(NamedTuple):
    """One 4-tuple's segments found in one file by one task: what the shuffle moves."""

    ends: ConnectionKey
    path: str
    rows: bytes  # SEGMENT records
    payload: bytes | None  # None: the offsets are into the file at ``path``
    #: where its stretch of the file starts (the offset of the first record of its byte range, or
    #: of the first after a silence in it: TimeSpan.silences); not shuffled: the reading task notes
    #: the piece's ends under it, and the driver joins the stretches into the file's parts
    #: (model/periods.file_parts)
    part: int = 0

    @property
    def input_index(self) -> int:
        """The input it was read from, by its index among the inputs (the driver names it): not
        ``path``, which for a gzip capture is the file it was inflated into."""
        return int(np.frombuffer(self.rows, SEGMENT, count=1)["file"][0])


def connection_table(pieces: Iterable[Piece]) -> SegmentTable:
    """One 4-tuple's pieces as one table in capture order. The payloads of a local file smaller
    than MAPPED_FILE_BYTES are copied out of it: a connection may span thousands of small files
    (captures rotated every minute), and a mapping held per file would hold a file descriptor each."""
    tables: list[SegmentTable] = []
    local: dict[str, tuple[ConnectionKey, list[np.ndarray]]] = {}
    for piece in pieces:
        rows = np.frombuffer(piece.rows, SEGMENT)
        if piece.payload is not None:
            tables.append(_table(piece.ends, rows, piece.payload))
        else:  # the pieces of one file (from its byte ranges) locate payloads in one source
            local.setdefault(piece.path, (piece.ends, []))[1].append(rows)
    for path, (ends, parts) in local.items():
        source = mapped_file(path)
        if len(source) >= MAPPED_FILE_BYTES:
            tables += [_table(ends, rows, source) for rows in parts]
            continue
        rows = np.concatenate(parts)
        payload = gather(source, rows)
        tables.append(_table(ends, rows, payload))
    return merge_tables(tables)


def _table(ends: ConnectionKey, rows: np.ndarray, source: Buffer) -> SegmentTable:
    return SegmentTable(ends, rows, {int(rows["file"][0]): source})


#: a local file this large stays mapped while connections with segments in it are decoded
MAPPED_FILE_BYTES = 16 << 20
#: files a process keeps mapped at most, the most recently used (a mapping holds a file descriptor)
OPEN_MAPPINGS = 64
_MAPPINGS: OrderedDict[str, tuple[tuple[int, ...], Buffer]] = OrderedDict()


def mapped_file(path: str) -> Buffer:
    """A local file's content, mapped into memory: what reading tasks scan and where decoding tasks
    read pieces' payloads (the page cache, not a copy per task).

    The mapping is kept, while the file is the same (device, inode, size and modification time),
    for the tasks PySpark runs next in this worker: a decoding task's connections have segments
    all over the file, and mapping it anew in every task cost the kernel ~0.1 s per GB and task to
    map every page again (and so did the reading task before it over its range). Spark ends a
    worker left idle for a minute, and with it its mappings (and its hold on files deleted since)."""
    with open(local_path(path), "rb") as f:
        status = os.fstat(f.fileno())
        identity = (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)
        kept = _MAPPINGS.get(path)
        if kept is not None and kept[0] == identity:
            _MAPPINGS.move_to_end(path)
            return kept[1]
        empty = status.st_size == 0  # mmap refuses empty files
        mapped = b"" if empty else mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    _MAPPINGS[path] = (identity, mapped)
    _MAPPINGS.move_to_end(path)
    while len(_MAPPINGS) > OPEN_MAPPINGS:  # closed once no piece's table refers to it
        _MAPPINGS.popitem(last=False)
    return mapped


def gather(data: Buffer, rows: np.ndarray) -> bytes:
    """The payloads that SEGMENT ``rows`` locate in ``data``, back to back; ``rows`` (a writable
    array of them) then locate them there."""
    view = memoryview(data)
    payload = b"".join(view[start:start + length] for start, length in
                       zip(rows["offset"].tolist(), rows["length"].tolist(), strict=True))
    rows["offset"] = np.cumsum(rows["length"], dtype=np.int64) - rows["length"]
    return payload


def is_local(path: str) -> bool:
    return urlparse(path).scheme in ("", "file")


def local_path(path: str) -> str:
    return urlparse(path).path if path.startswith("file:") else path


def shown_name(path: str) -> str:
    """An input's name as the tables, brokers.csv and the page show it: every control character and
    every byte of the name that is not UTF-8 as an escape (escapes.py: ``ns-\\xff.pcap``, whose byte
    Python holds as the lone surrogate U+DCFF, shows as ``ns-\\udcff.pcap``; a newline as ``\\n``,
    ESC as ``\\x1b``). Linux names are bytes, and Arrow's and Parquet's text is UTF-8: such a name
    stopped the run (UnicodeEncodeError). summary.json keeps the name exact (json.dumps writes the
    surrogate as ``\\udcff``: ``os.fsencode(json.load(...)["inputs"]["files"][n]["path"])`` gives the
    name's bytes back)."""
    return escaped(path)


#: what a report writes at its output's top (spark/job.py): a directory holding both, met while a
#: directory is walked, is an earlier report's output, skipped (its Parquet and CSV files are not
#: captures: a report written next to its captures, then run again, said "34 bad input files")
SUMMARY_FILE, BROKERS_FILE = "summary.json", "brokers.csv"
REPORT_FILES = (SUMMARY_FILE, BROKERS_FILE)
CLIENTS_FILE, PAGE_FILE = "clients.csv", "report.html"
#: every file a report writes at its output's top, removed as a run starts (a run that fails then
#: leaves no earlier run's summary.json beside its own tables)
WRITTEN_FILES = (*REPORT_FILES, CLIENTS_FILE, PAGE_FILE)


#: a file given again (the same name twice, or met again under a directory or glob given too): read
#: once, and said, since read twice it would be two capture points holding the same traffic
GIVEN_AGAIN = "(given again: read once)"


def discover(inputs: Iterable[str], list_remote: Callable[[str], list[tuple[str, int]]],
             skipped: list[str] | None = None) -> list[CaptureFile]:
    """Expand files, directories (recursively, skipping hidden entries and earlier reports' outputs,
    added to ``skipped``) and globs, in argument order without duplicates; ``list_remote`` does the
    same for a non-local path, as (uri, size). A local file met under two names (a symbolic link
    to it, ``current.pcap -> ns-20261128.pcap``, or a hard link) is read once, under the name that
    is no symbolic link, the other added to ``skipped``: read twice, it was two capture points. A
    name given again is read once and added to ``skipped`` too (GIVEN_AGAIN). A local file holding
    the same bytes as one listed before it (``cp ns.pcap ns-copy.pcap``, or a file sent again under
    another name) is read once as well, the copy added to ``skipped`` (_copies): read twice, it was
    two capture points, told "captured at two points" with the clocks +0.000 s apart."""
    seen: dict[str, int] = {}
    named: dict[tuple[int, int], str] = {}  # a local file by device and inode -> the name it is read under
    for given in inputs:
        found = expand_local(local_path(given), skipped) if is_local(given) else list_remote(given)
        if not found:
            raise FileNotFoundError(f"no capture files at {given}")
        for path, size in found:
            identity = _identity(path) if is_local(given) else None
            first = named.get(identity) if identity else None
            if identity is None or first is None or first == path:
                if path in seen and skipped is not None and f"{path} {GIVEN_AGAIN}" not in skipped:
                    skipped.append(f"{path} {GIVEN_AGAIN}")
                seen.setdefault(path, size)
                if identity:
                    named[identity] = path
                continue
            kept, other = (path, first) if os.path.islink(first) and not os.path.islink(path) else (first, path)
            if kept == path:  # in the place of the link met first
                seen = {(path if name == first else name): found_size for name, found_size in seen.items()}
                named[identity] = path
            if skipped is not None:
                skipped.append(f"{other} (the same file as {kept})")
    for copy, original in _copies(seen).items():
        del seen[copy]
        if skipped is not None:
            skipped.append(f"{copy} (the same bytes as {original}: a copy, read once)")
    return [CaptureFile(path, size, index) for index, (path, size) in enumerate(seen.items())]


#: the shortest file compared with others as a copy. A ring's files that caught no packet are its
#: header alone (24 bytes, some 50 gzipped, a pcapng's a few hundred) and byte for byte alike: no
#: copies, each is the ring's quiet span and told so. A copy of a capture under a KiB (a few packets)
#: is read twice (said to be captured at two points)
COPY_MIN_BYTES = 1024


def _copies(sized: Mapping[str, int]) -> dict[str, str]:
    """Each local file whose bytes are those of a file listed before it -> that file. Only files
    of one size are read to compare them (SHA-256, a MiB at a time): captures of one size are
    rare but for copies, so a run of distinct captures reads nothing more. A file shorter than a
    KiB (COPY_MIN_BYTES: empty, a note, a ring's file of no packet), or one that cannot be read now, is no copy of
    anything: each is read and its task says what it is."""
    by_size: dict[int, list[str]] = {}
    for path, size in sized.items():
        if size >= COPY_MIN_BYTES and is_local(path):
            by_size.setdefault(size, []).append(path)
    copies: dict[str, str] = {}
    for paths in by_size.values():
        if len(paths) < 2:
            continue
        first: dict[bytes, str] = {}
        for path in paths:
            digest = _digest(local_path(path))
            if digest is None:
                continue
            if digest in first:
                copies[path] = first[digest]
            else:
                first[digest] = path
    return copies


def _digest(path: str) -> bytes | None:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as file:
            while chunk := file.read(1 << 20):
                digest.update(chunk)
    except OSError:
        return None
    return digest.digest()


#: a capture cut inside a record, modified this soon before the run, is taken to be still written
STILL_WRITTEN_S = 60.0


def still_written(file: CaptureFile, listed_at: float) -> str | None:
    """Why a local, uncompressed capture cut inside a record (TRUNCATED), or of no byte (EMPTY),
    looks still written, if it does: it grew after it was listed at ``listed_at`` (epoch seconds),
    or was modified less than STILL_WRITTEN_S before. A capture running writes whole blocks
    (tcpdump -w buffers 4 KiB, -U writes each packet): its end is cut inside a record until the
    next block, not a capture "stopped while writing one", and one just started has no byte yet,
    not even its header (tcpdump's file stays empty until its first block)."""
    if not is_local(file.path) or compressed(file.path):
        return None
    try:
        found = os.stat(local_path(file.path))
    except OSError:
        return None
    what = ("nothing written yet: a capture just started writes even its header with its first block "
            "(tcpdump -w: 4 KiB at a time, -U each packet)" if not file.size else
            "a capture running writes whole blocks (tcpdump -w 4 KiB at a time, -U each packet), so its end is cut "
            "inside a record until the next; read as far as its last whole record")
    if found.st_size > file.size:
        return f"still being written: it grew by {found.st_size - file.size:,} bytes while read; {what}"
    age = listed_at - found.st_mtime
    if age < STILL_WRITTEN_S:
        return f"still being written, it seems: modified {max(age, 0.0):,.0f} s before this run; {what}"
    return None


class InputShrank(Exception):
    """A local capture that shrank while the run read it (``str``: which, by how much, what to do)."""


def shrank_while_read(files: Iterable[CaptureFile]) -> str | None:
    """What to say when a run failed and a local capture is now shorter than it was listed, else
    None. Tasks read local captures through a mapping (mapped_file): pages past a file's new end
    are gone, and a task touching one is killed by SIGBUS, which Spark reports as "Python worker
    exited unexpectedly (crashed)" in 250 lines of traceback. tcpdump -W (a ring of files) truncates
    the oldest file and writes it anew; so does a capture restarted with the same -w name. A file
    removed or replaced by another (a rename over it) leaves the mapped one whole: nothing to say."""
    for file in files:
        if not is_local(file.path):
            continue
        try:
            size = os.stat(local_path(file.path)).st_size
        except OSError:
            continue
        if size < file.size:
            return (f"{file.path} shrank from {file.size:,} to {size:,} bytes while it was read (a capture written "
                    "again in place: tcpdump -W reuses its oldest file's name, a capture restarted with the same -w "
                    "name; or a truncation): a task reading it lost the pages past its new end and was killed "
                    "(SIGBUS); copy the captures somewhere first, or read the files tcpdump is done with")
    return None


def _identity(path: str) -> tuple[int, int] | None:
    """A local file's device and inode: the same for every name of it."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def expand_local(pattern: str, skipped: list[str] | None = None) -> list[tuple[str, int]]:
    """A local file, directory or glob as the (path, size) of its files. What a directory holds that
    is no capture to read is left out and added to ``skipped`` as "PATH (why)": an earlier report's
    output (REPORT_FILES), and a pipe, socket or device (reading a FIFO would wait for ever)."""
    def skip(path: str, why: str) -> None:
        if skipped is not None:
            skipped.append(f"{path} ({why})")

    matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
    found = []
    for match in matches:
        if os.path.isdir(match):
            def unlisted(error: OSError) -> None:  # a directory under it not readable: named, not passed over
                skip(str(error.filename), f"cannot be listed: {error.strerror}")

            for root, dirs, names in os.walk(match, onerror=unlisted):
                if root != match and all(name in names for name in REPORT_FILES):
                    dirs[:] = []
                    skip(root, "an earlier report's output")
                    continue
                dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
                for name in sorted(n for n in names if not n.startswith((".", "_"))):
                    path = os.path.join(root, name)
                    kind = special_kind(path)
                    if kind:
                        skip(path, kind)
                    elif os.path.isfile(path):
                        found.append(path)
                    elif os.path.islink(path) and not os.path.exists(path):
                        skip(path, f"a symbolic link to {os.readlink(path)}, which does not exist")
        elif os.path.isfile(match):
            found.append(match)
    sized = []
    for path in found:
        size = readable_size(path)
        if isinstance(size, int):
            sized.append((path, size))
        else:
            skip(path, size)
    return sized


def readable_size(path: str) -> int | str:
    """A local file's size, opening it as a task will, or why it cannot be read ("cannot be read:
    Permission denied"; a file removed since it was listed). A file not readable failed its task,
    and Spark stopped the whole run after four tries with a Java stack trace; now it is skipped and
    named, the others read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as error:
        return f"cannot be read: {error.strerror}"
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def special_kind(path: str) -> str | None:
    """What a path that is neither a file nor a directory is (``<(zcat x.gz)`` gives a pipe)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    kinds = ((stat.S_ISFIFO, "a pipe (FIFO)"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), None)


def split_bytes(total: int, parallelism: int) -> int:
    """As few ranges as keep each within MAX_RANGE_BYTES, in a multiple of the cores: a task costs
    tens of milliseconds whatever its size, and equal tasks leave no core idle. (Ranges of 256 MiB
    made the 10 h benchmark capture five reading tasks on one core, and as many tasks to shuffle
    their pieces: the JVM spent 0.2-0.3 s of CPU a run more than on one.)"""
    cores = max(parallelism, 1)
    rounds = max(1, -(-total // (cores * MAX_RANGE_BYTES)))
    return max(MIN_SPLIT_BYTES, -(-total // (cores * rounds)))


#: what a compressed capture's size is taken times: its share of a reading task, and the decoding
#: tasks' memory (text-like: 5-10x)
INFLATED = 8


def planned_bytes(file: CaptureFile) -> int:
    """What a file weighs in a task's plan: its size, INFLATED times it when compressed (read whole)."""
    return file.size * (INFLATED if compressed(file.path) else 1)


def plan_tasks(files: Iterable[CaptureFile], size: int) -> list[list[Split]]:
    """Local files as tasks of about ``size`` bytes: big files cut into ranges, small ones combined
    (a ring buffer of a file a second is thousands: a task each cost ~10 ms apiece), a compressed
    one whole, taken for INFLATED times its size."""
    tasks: list[list[Split]] = []
    small: list[Split] = []
    small_bytes = 0
    for file in files:
        whole = compressed(file.path)
        if file.size > size and not whole:
            tasks += [[Split(file, start, min(start + size, file.size))] for start in range(0, file.size, size)]
            continue
        small.append(Split(file, 0, file.size))
        small_bytes += planned_bytes(file)
        if small_bytes >= size:
            tasks.append(small)
            small, small_bytes = [], 0
    if small:
        tasks.append(small)
    return tasks


#: a local file this small, read whole by a task, is read with the others of its task (read_task)
GROUPED_FILE_BYTES = 1 << 20


def read_task(splits: Iterable[Split], ports: Ports, tally: ReadTally, spool: str | None = None
              ) -> Iterator[Piece]:
    """Segments to or from ``ports`` (every TCP segment if none) in local splits, one piece per 4-tuple and chunk; a
    local compressed capture (a whole-file split) is inflated into ``spool`` first (inflated_copy) and read there.
    Small files read whole (GROUPED_FILE_BYTES, inflated ones by their inflated size: a rotation's by the
    thousand, many holding a packet or none) are read as one: their records side by side, their segments
    found in one pass (a pass costs ~0.5 ms whatever it holds, a ring buffer's 1,800 files' ~1 s), pieces
    per file."""
    group: list[_Grouped] = []
    grouped = 0
    for split in splits:
        source = None  # where the pieces' offsets point when not into the file itself: its inflated copy
        if compressed(split.file.path) and spool is not None:
            source = inflated_copy(split.file, tally, spool)
            if source is None:
                continue
            split = Split(split.file, 0, os.path.getsize(source))
        tally.bytes += split.stop - split.start
        whole = source is not None or (split.start == 0 and split.stop >= split.file.size)
        if whole and split.stop <= GROUPED_FILE_BYTES:
            with open(source or local_path(split.file.path), "rb") as f:
                small = f.read()
            records = _split_records(small, split, tally)
            if len(records.ts):  # a rotation's file of a quiet time holds none: nothing more to read
                group.append(_Grouped(split.file, small, records, source or split.file.path))
                grouped += len(small)
            if grouped >= MAPPED_FILE_BYTES:
                yield from _grouped_pieces(group, ports, tally)
                group, grouped = [], 0
            continue
        content = mapped_file(source or split.file.path)
        yield from pieces(content, _split_records(content, split, tally), split.file, ports, tally, inline=False,
                          source=source)
    if group:
        yield from _grouped_pieces(group, ports, tally)


class _Grouped(NamedTuple):
    """A small file read whole, to be read with the others of its task: ``path`` is where its pieces'
    offsets point (the file, or its inflated copy)."""

    file: CaptureFile
    content: bytes
    records: RecordIndex
    path: str


def _grouped_pieces(group: list[_Grouped], ports: Ports, tally: ReadTally) -> Iterator[Piece]:
    """The pieces of small files' records (each file's, located in its content), read as one."""
    bases = np.cumsum([0, *(len(small.content) for small in group[:-1])])
    columns = [np.concatenate([small.records[n] + (base if n == _START else 0) for small, base
                               in zip(group, bases.tolist(), strict=True)]) for n in range(len(RecordIndex._fields))]
    data = group[0].content if len(group) == 1 else b"".join(small.content for small in group)
    yield from _pieces(data, RecordIndex(*columns), [(small.file, int(base), len(small.records.ts), small.path)
                                                     for small, base in zip(group, bases, strict=True)],
                       ports, tally, inline=False)


_START = RecordIndex._fields.index("start")


def spool_target(file: CaptureFile, spool: str) -> str:
    """Where inflated_copy inflates a local compressed capture: the path its pieces carry."""
    return os.path.join(spool, f"{file.index}.pcap")  # not the file's name: one of 255 bytes was one too long


def inflated_copy(file: CaptureFile, tally: ReadTally, spool: str) -> str | None:
    """A local compressed capture inflated as a stream (a MiB at a time) into a file in ``spool``, to be
    read in place as any local capture: its pieces locate their payloads in that file, so neither
    the compressed nor the inflated bytes pass through Spark's JVM (a whole 1 GB capture in a
    task's row overflowed the driver's default heap). Facts are noted under the compressed file's
    name; None (noted NOT_INFLATED) when it could not be written."""
    target = spool_target(file, spool)
    try:
        inflate_to(local_path(file.path), target, file.path, tally)
    except OSError as exc:  # a full temporary directory, above all: this capture is named, the others read
        tally.note_file(file.path, problem=NOT_INFLATED, reason=_not_inflated_reason(exc, spool))
        return None
    return target


def _not_inflated_reason(exc: OSError, spool: str) -> str:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return (f"{exc.strerror} in {spool}, where it is inflated (point TMPDIR at a directory with room "
                "for the inflated capture)")
    return str(exc.strerror or exc)


def inflate_to(path: str, target: str, name: str, tally: ReadTally, chunk: int = 1 << 20) -> None:
    """Inflate every member (stream) of a compressed file into ``target`` (written under a temporary
    name and renamed: a task run again replaces it). One cut short gives what it holds and is
    TRUNCATED; one that is not of its suffix's format at all gives nothing and is NOT_A_CAPTURE (as
    inflate)."""
    part = f"{target}.part"
    try:
        _inflate_into(path, part, name, tally, chunk)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(part)  # a spool left full helps no one
        raise
    os.replace(part, target)


def spool_room(directory: str) -> tuple[int, int]:
    """(bytes that may still be written in ``directory``, what its file system keeps free): its free
    space (what an unprivileged user may take) less the lesser of SPOOL_KEEP_FREE and
    SPOOL_KEEP_FREE_SHARE of its size.  Asked again before each piece written, as other tasks and
    programs write there too."""
    seen = os.statvfs(directory)
    keep = min(SPOOL_KEEP_FREE, int(seen.f_blocks * seen.f_frsize * SPOOL_KEEP_FREE_SHARE))
    return seen.f_bavail * seen.f_frsize - keep, keep


def _spool_full_reason(directory: str, keep: int, wrote: int) -> str:
    return (f"inflating it further would leave under {keep >> 20} MiB free in {directory}, where it is inflated "
            f"(a zip bomb's kind; TMPDIR): read as far as that, {wrote >> 20} MiB; point TMPDIR at a directory "
            "with room for the inflated capture, or decompress it first")


def _inflate_into(path: str, part: str, name: str, tally: ReadTally, chunk: int) -> None:
    wrote = 0
    new_inflater = INFLATERS[_suffix(name)]
    spool = os.path.dirname(part) or "."
    with open(path, "rb") as source, open(part, "wb") as out:
        inflater = new_inflater()
        started = False  # the current member has had input
        head = b""
        while data := source.read(chunk):
            head = head or data
            while data:
                started = True
                try:
                    for inflated in inflated_pieces(inflater, data):
                        room, keep = spool_room(spool)
                        if len(inflated) > room:
                            tally.note_file(name, problem=NOT_INFLATED, reason=_spool_full_reason(spool, keep, wrote))
                            return
                        out.write(inflated)
                        wrote += len(inflated)
                except _INFLATE_ERRORS:
                    _note_not_inflated(tally, name, wrote, head)
                    started = False
                    data = b""
                    source.seek(0, os.SEEK_END)
                    break
                data = b""
                if inflater.eof:  # the next member, if any, starts in what is left
                    data = inflater.unused_data
                    inflater = new_inflater()
                    started = False
        if started and not inflater.eof:
            tally.note_file(name, problem=TRUNCATED)


def read_whole(data: Buffer, file: CaptureFile, ports: Ports, tally: ReadTally) -> Iterator[Piece]:
    """The same for a file's whole content (files that tasks cannot read by range), a compressed
    one's inflated."""
    if compressed(file.path):
        data = inflate(data, file.path, tally)
    tally.bytes += len(data)
    records = _split_records(data, Split(file, 0, len(data)), tally)
    yield from pieces(data, records, file, ports, tally, inline=True)


def inflate(data: Buffer, path: str, tally: ReadTally) -> bytearray:
    """A compressed file's content (by its suffix: INFLATERS), every member of it. One cut short
    (compressed while it was written, or copied in part) gives what it holds and is TRUNCATED; one
    that is not of its suffix's format at all gives nothing and is NOT_A_CAPTURE."""
    inflated = bytearray()  # grown in place: pieces joined at the end held the whole twice
    rest = bytes(data)
    new_inflater = INFLATERS[_suffix(path)]
    while rest:
        inflater = new_inflater()
        try:
            for piece in inflated_pieces(inflater, rest):
                inflated += piece
                if len(inflated) >= INFLATE_IN_MEMORY_MAX:
                    del inflated[INFLATE_IN_MEMORY_MAX:]
                    tally.note_file(path, problem=NOT_INFLATED, reason=INFLATED_PAST_MAX)
                    return inflated
        except _INFLATE_ERRORS:
            _note_not_inflated(tally, path, len(inflated), data)
            break
        if not inflater.eof:
            tally.note_file(path, problem=TRUNCATED)
            break
        rest = inflater.unused_data
    return inflated


def inflated_pieces(inflater: Inflater, data: bytes, most: int = INFLATE_PIECE) -> Iterator[bytes]:
    """What ``data`` inflates to, up to the end of its stream (``inflater.eof``; what follows is
    ``unused_data``), ``most`` bytes at a time: never the whole of a zip bomb at once. Raises what
    the inflater raises (_INFLATE_ERRORS) on bytes not of its format."""
    while True:
        piece = inflater.decompress(data, most)
        if piece:
            yield piece
        if inflater.eof:
            return
        if hasattr(inflater, "needs_input"):  # bz2's and lzma's keep what they were not asked for
            data = b""
            if inflater.needs_input:
                return
        else:  # zlib's leaves it in unconsumed_tail, and may hold output when a piece came out full
            data = inflater.unconsumed_tail  # type: ignore[attr-defined]
            if not data and len(piece) < most:
                return


def _note_not_inflated(tally: ReadTally, path: str, inflated: int, head: Buffer) -> None:
    """Bytes that do not inflate: TRUNCATED after some that did (a member cut short), else
    NOT_A_CAPTURE, and in which format the file is if another's magic says so (a zstd file named .gz)."""
    if inflated:
        tally.note_file(path, problem=TRUNCATED)
    else:
        tally.note_file(path, problem=NOT_A_CAPTURE, compression=compression(head))


def read_by_range(file: CaptureFile) -> bool:
    """Whether tasks read a file by byte ranges, in place (local, not compressed); else one task
    reads it whole: a local compressed one inflated into a spool file (inflated_copy, on a local
    master), others through Spark's binaryFile."""
    return is_local(file.path) and not compressed(file.path)


def compressed(path: str) -> bool:
    """Whether a capture is compressed in a format read (INFLATERS), by its name: the driver plans
    from names and sizes."""
    return _suffix(path) in INFLATERS


def _suffix(path: str) -> str:
    return os.path.splitext(path)[1].lower()


def compression(head: Buffer) -> str | None:
    """The compression format whose magic bytes ``head`` (a file's first bytes) starts with, if any."""
    start = bytes(memoryview(head)[:8])
    return next((name for magic, name in COMPRESSION_MAGICS if start.startswith(magic)), None)


def pieces(data: Buffer, records: RecordIndex, file: CaptureFile, ports: Ports, tally: ReadTally,
           inline: bool, source: str | None = None) -> Iterator[Piece]:
    """The segments of ``records`` on ``ports`` (all if none), one piece per 4-tuple and chunk of
    the file (_chunks); ``inline``: with their payloads (else the offsets say where they are in the
    file: ``source``, if not the file's own)."""
    for chunk in _chunks(records, CHUNK_BYTES):
        yield from _pieces(data, chunk, [(file, 0, len(chunk.ts), source or file.path)], ports, tally, inline)


#: of a file, what a reading task makes pieces of at a time (_chunks)
CHUNK_BYTES = 64 << 20


def _chunks(records: RecordIndex, size: int) -> list[RecordIndex]:
    """``records`` cut where ``size`` bytes of the file have passed, each part read as a range
    of its own (as a task's would be, at a record boundary): the columns made of a range's records
    and segments then stay a few MB whatever the task's range (a reading task over a 1.1 GB range
    in one part took 1.3 s of CPU, in parts of 64 MiB 0.9 s, as five tasks of 221 MB did: arrays of
    a million rows each outgrow the caches and fault their pages in anew)."""
    if not len(records.ts) or int(records.start[-1] - records.start[0]) < size:
        return [records]
    cuts = np.searchsorted(records.start, np.arange(int(records.start[0]) + size, int(records.start[-1]) + 1, size))
    bounds = [0, *cuts.tolist(), len(records.ts)]
    return [RecordIndex(*(column[first:stop] for column in records)) for first, stop in pairwise(bounds)
            if stop > first]


def _pieces(data: Buffer, records: RecordIndex, files: list[tuple[CaptureFile, int, int, str]], ports: Ports,
            tally: ReadTally, inline: bool) -> Iterator[Piece]:
    """``pieces`` of the records of one file or several side by side in ``data``: ``files`` says,
    in order, each one's file, where its bytes start in ``data``, how many records it has and the
    path its pieces' offsets point into (the file's own, or its inflated copy's).
    One piece per 4-tuple and file, its rows located in its own file (``inline``: one file only)."""
    if not len(records.ts):
        return
    found = segment_columns(data, records, ports)
    for key, (segments, frames) in (found.others or {}).items():
        tally.others[key + ("segments",)] += segments
        tally.others[key + ("frames",)] += frames
    tally.records += len(records.ts)
    tally.segments += len(found.ts)
    stretches = []  # each file's: the offsets in it where its stretches start (TimeSpan.silences)
    first = 0
    for file, base, count, _ in files:
        mine = RecordIndex(*(column[first:first + count] - base if n == _START and base else
                             column[first:first + count] for n, column in enumerate(records)))
        first += count
        stretches.append(_note_span(tally, file, mine))
    names = found.endpoints
    rank = np.empty(len(names), np.int64)
    rank[sorted(range(len(names)), key=names.__getitem__)] = np.arange(len(names))
    forward = rank[found.src] < rank[found.dst]
    lower, higher = np.where(forward, found.src, found.dst), np.where(forward, found.dst, found.src)
    bases = np.array([base for _, base, _, _ in files], np.int64)
    # a segment's file: the last to start before its payload (which starts past the record's headers,
    # and, empty, where the record ends: where the next file starts)
    where = (np.searchsorted(bases, found.start - 1, "right") - 1 if len(files) > 1
             else np.zeros(len(found.ts), np.int64))
    keys, which = np.unique((lower * len(names) + higher) * len(files) + where, return_inverse=True)
    offsets = found.start - bases[where]
    rows = np.empty(len(found.ts), SEGMENT)
    rows["ts"], rows["file"] = found.ts, np.array([file.index for file, _, _, _ in files], np.int64)[where]
    rows["order"], rows["offset"] = offsets, offsets
    rows["length"], rows["seq"], rows["ack"], rows["flags"] = found.end - found.start, found.seq, found.ack, found.flags
    rows["forward"], rows["missing"] = forward, found.missing
    rows["sack_left"], rows["sack_right"] = found.sack_left, found.sack_right
    by_key = np.argsort(which.reshape(-1), kind="stable")
    bounds = np.searchsorted(which.reshape(-1)[by_key], np.arange(len(keys) + 1))
    for index, key in enumerate(keys.tolist()):
        pair, n = divmod(key, len(files))
        chosen = rows[by_key[bounds[index]:bounds[index + 1]]]
        for part, rows_there in _by_stretch(chosen, stretches[n]):
            payload = None
            if inline:
                payload = gather(data, rows_there)
            yield Piece((names[pair // len(names)], names[pair % len(names)]), files[n][3],
                        rows_there.tobytes(), payload, part)


def _note_span(tally: ReadTally, file: CaptureFile, records: RecordIndex) -> np.ndarray:
    """Note what a file's records (located in it) say of it; returns the offsets in it where
    its stretches start (its first record's, then each silence's: TimeSpan.silences)."""
    if not len(records.ts):
        return np.zeros(1, np.int64)
    cut = records.length < records.orig_len
    span = time_span(records)
    link_type, unread, unread_type = _link_types(records)
    tally.note_file(file.path, records=len(records.ts), first=float(records.ts.min()),
                    last=float(records.ts.max()), link_type=link_type, unread_records=unread,
                    unread_link_type=unread_type, cut_records=int(cut.sum()),
                    uncaptured_bytes=int((records.orig_len[cut] - records.length[cut]).sum()),
                    cut_at=int(records.length[cut].max()) if cut.any() else 0, spans=(span,),
                    cut_shortest=int(records.length[cut].min()) if cut.any() else 0)
    return np.array([int(records.start[0]), *(silence.offset for silence in span.silences)], np.int64)


def _link_types(records: RecordIndex) -> tuple[int, int, int | None]:
    """A byte range's link type (its first record's of a link type read, else its first record's),
    how many of its records are of a link type not read, and the first of those. A pcapng holds one
    link type per interface: dumpcap -i nflog -i lo writes NFLOG and Ethernet records in one file,
    and a file whose first record was an NFLOG one was named "link type not read", its Ethernet
    records (the NameServer's traffic) never told; one whose first was Ethernet dropped the NFLOG
    ones unsaid."""
    read = np.isin(records.linktype, list(LINK_TYPES_READ))
    first_read = int(np.argmax(read)) if read.any() else 0
    unread = np.flatnonzero(~read)
    return (int(records.linktype[first_read]), len(unread),
            int(records.linktype[unread[0]]) if len(unread) else None)


def _by_stretch(rows: np.ndarray, stretches: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """SEGMENT ``rows`` (capture order) by the stretch of the byte range they are in: ``stretches``,
    the offsets where each starts (a silence ends), the first the range's first record's."""
    if len(stretches) == 1:  # no silence in the range: the common case, nothing to cut
        yield int(stretches[0]), rows
        return
    where = np.searchsorted(stretches, rows["order"], "right") - 1
    cuts = np.flatnonzero(np.diff(where)) + 1
    for chunk, first in zip(np.split(rows, cuts), [0, *cuts.tolist()], strict=True):
        yield int(stretches[max(int(where[first]), 0)]), chunk


#: records further apart than this (no packet at all between them) are a silence: between files,
#: separate capture periods; within a file, one where no connection carries on over it
#: (model/periods.rotated_sets and file_parts)
PERIOD_GAP_S = 60.0


class Silence(NamedTuple):
    """A stretch of more than PERIOD_GAP_S without a record, within a file: where the first record
    after it starts (its offset in the file), the latest time before it and that record's time."""

    offset: int
    before: float
    after: float


class TimeSpan(NamedTuple):
    """One byte range's records in time: where its first record starts in the file, its first and
    latest timestamps, its largest step back (how far, and the time it stepped back to) and its
    silences (in capture order; each measured from the latest time before it in the range)."""

    offset: int
    first: float
    latest: float
    back: float
    back_to: float
    silences: tuple[Silence, ...] = ()


def time_span(records: RecordIndex) -> TimeSpan:
    latest = np.maximum.accumulate(records.ts)
    back = latest - records.ts
    at = int(back.argmax())
    quiet = np.flatnonzero(records.ts[1:] - latest[:-1] > PERIOD_GAP_S) + 1
    return TimeSpan(int(records.start[0]), float(records.ts[0]), float(latest[-1]), float(back[at]),
                    float(records.ts[at]), tuple(Silence(int(records.start[i]), float(latest[i - 1]),
                                                         float(records.ts[i])) for i in quiet.tolist()))


def clock_step_back(spans: Iterable[TimeSpan]) -> tuple[float, float, float] | None:
    """A file's largest step back in time, in capture order across its byte ranges: (seconds, the
    latest time before it, the time it stepped back to), or None within STEP_BACK_TOLERANCE_S."""
    found, latest = None, -np.inf
    for span in sorted(spans):
        for back, to in ((latest - span.first, span.first), (span.back, span.back_to)):
            if back > STEP_BACK_TOLERANCE_S and (found is None or back > found[0]):
                found = (float(back), float(to + back), float(to))
        latest = max(latest, span.latest)
    return found


def silences(spans: Iterable[TimeSpan]) -> list[Silence]:
    """A file's silences in capture order across its byte ranges: those within a range and those
    between two (a range's first record more than PERIOD_GAP_S after the latest before it), each
    measured from the latest time before it in the whole file."""
    found: list[Silence] = []
    latest = None
    for span in sorted(spans):
        if latest is not None and span.first - latest > PERIOD_GAP_S:
            found.append(Silence(span.offset, latest, span.first))
        for silence in span.silences:
            before = silence.before if latest is None else max(latest, silence.before)
            if silence.after - before > PERIOD_GAP_S:
                found.append(Silence(silence.offset, before, silence.after))
        latest = span.latest if latest is None else max(latest, span.latest)
    return found


class FileFacts(NamedTuple):
    """What the reading tasks found in one input file (its byte ranges' findings merged)."""

    records: int = 0
    first: float | None = None
    last: float | None = None
    link_type: int | None = None
    problem: str | None = None  # NOT_A_CAPTURE, EMPTY, TRUNCATED or UNDATED
    trailing_bytes: int = 0  # after the last whole record (TRUNCATED)
    #: records a snap length cut (captured shorter than sent), the bytes they lost so, and the
    #: longest of them as captured (the snap length, link header included)
    cut_records: int = 0
    uncaptured_bytes: int = 0
    cut_at: int = 0
    #: a file NOT_A_CAPTURE whose bytes are compressed: in which format (COMPRESSION_MAGICS)
    compression: str | None = None
    #: why a file is NOT_INFLATED (the error and where); of an EMPTY one, NOTHING_INFLATED (a
    #: compressed file holding no byte: not even a capture header, so no rotation's quiet file)
    reason: str | None = None
    #: each byte range's records in time (clock_step_back reads them)
    spans: tuple[TimeSpan, ...] = ()
    #: packets the capture itself says it dropped (a pcapng's interface statistics: the kernel's
    #: buffer full, isb_ifdrop; the OS, isb_osdrop) and those it says it received (None: not said)
    dropped: int = 0
    received: int | None = None
    #: records of a link type not read in a file that holds others (a pcapng's interfaces), and
    #: that link type (the first of them met)
    unread_records: int = 0
    unread_link_type: int | None = None
    #: the shortest of the records a snap length cut, as captured: below ``cut_at`` where a pcapng's
    #: interfaces had different snap lengths (dumpcap -i lo -s 256 -i any -s 96)
    cut_shortest: int = 0


#: the metadata of a tally field that summary.json counts (model/tally.py: Tally.counts)
COUNT = {"count": True}


@dataclass
class ReadTally:
    """What the reading tasks count and learn of each file, returned as data (spark/job.py). Each
    count is one field (with COUNT metadata: summary.json lists it); model/tally.py adds the
    decoding tasks' and merges them all."""

    records: int = field(default=0, metadata=COUNT)
    bytes: int = field(default=0, metadata=COUNT)
    segments: int = field(default=0, metadata=COUNT)
    files: dict[str, FileFacts] = field(default_factory=dict)
    #: with --port: the TCP traffic on other ports, (server port, client endpoint) -> [segments,
    #: segments starting with a remoting frame] (packets.OtherTraffic), added up over tasks
    others: Counter[Any] = field(default_factory=Counter)

    def note_file(self, path: str, records: int = 0, first: float | None = None, last: float | None = None,
                  link_type: int | None = None, problem: str | None = None, trailing_bytes: int = 0,
                  cut_records: int = 0, uncaptured_bytes: int = 0, cut_at: int = 0,
                  compression: str | None = None, reason: str | None = None, spans: tuple[TimeSpan, ...] = (),
                  dropped: int = 0, received: int | None = None, unread_records: int = 0,
                  unread_link_type: int | None = None, cut_shortest: int = 0) -> None:
        """Merge facts about a file (several tasks read ranges of one file); its first problem stays,
        and its first link type that is read (a range whose records are all of another interface's
        does not make the file unread)."""
        old = self.files.get(path) or FileFacts()
        kept_type = old.link_type is not None and (old.link_type in LINK_TYPES_READ or link_type is None
                                                   or link_type not in LINK_TYPES_READ)
        self.files[path] = FileFacts(
            old.records + records, min((t for t in (old.first, first) if t is not None), default=None),
            max((t for t in (old.last, last) if t is not None), default=None),
            old.link_type if kept_type else link_type, old.problem or problem,
            old.trailing_bytes + trailing_bytes, old.cut_records + cut_records,
            old.uncaptured_bytes + uncaptured_bytes, max(old.cut_at, cut_at), old.compression or compression,
            old.reason or reason, old.spans + spans, old.dropped + dropped,
            received if old.received is None else old.received + (received or 0),
            old.unread_records + unread_records,
            old.unread_link_type if old.unread_link_type is not None else unread_link_type,
            min((n for n in (old.cut_shortest, cut_shortest) if n), default=0))


def _note_records(tally: ReadTally, path: str, data: Buffer, records: RecordIndex, start: int, stop: int) -> None:
    """A classic pcap whose records, read from the record boundary ``start`` up to ``stop``, leave
    bytes before it that are no whole record is TRUNCATED (the capture was cut while writing one)."""
    if memoryview(data)[:4] != PCAPNG_MAGIC:
        following = int(records.start[-1] + records.length[-1]) if len(records.ts) else start
        if following < min(stop, len(data)):
            tally.note_file(path, problem=TRUNCATED, trailing_bytes=len(data) - following)


def _split_records(content: Buffer, split: Split, tally: ReadTally) -> RecordIndex:
    """The records of ``content`` (a whole file) whose headers start in the split."""
    view = memoryview(content)
    if view[:4] == PCAPNG_MAGIC:  # pcapng has no record boundaries to find: one task reads it
        if split.start:
            return _NO_RECORDS
        walk = PcapngEnd()
        records = index_records(iter_records(view, walk))
        if walk.trailing:  # cut while a block was written, or a block that lies: the whole blocks before it are read
            tally.note_file(split.file.path, problem=TRUNCATED, trailing_bytes=walk.trailing)
        if walk.undated:
            tally.note_file(split.file.path, problem=UNDATED, reason=(
                f"{walk.undated:,} packet{'s' if walk.undated > 1 else ''} dated before 1970 or past 9999 (its "
                f"timestamp or its interface's if_tsoffset lies): not read"))
        dropped, received = walk.dropped()
        if dropped:
            tally.note_file(split.file.path, dropped=dropped, received=received)
        return records
    try:
        header = parse_pcap_header(view[:PCAP_HEADER_LEN])
    except ValueError:
        if split.start == 0:
            tally.note_file(split.file.path, problem=NOT_A_CAPTURE, compression=compression(view))
        return _NO_RECORDS
    if header is None:
        tally.note_file(split.file.path, problem=TRUNCATED if len(view) else EMPTY, trailing_bytes=len(view),
                        reason=None if len(view) or not split.file.size else NOTHING_INFLATED)
        return _NO_RECORDS
    begin = max(split.start, PCAP_HEADER_LEN)
    if begin >= split.stop:
        return _NO_RECORDS
    first = begin
    if begin > PCAP_HEADER_LEN:
        record_bytes = min(header.snaplen or MAX_SNAPLEN, MAX_ORIG_LEN) + RECORD_HEADER_LEN
        window = view[begin:split.stop + _RECORDS_PAST_STOP * record_bytes]
        found = find_record_boundary(window, 0, header, at_eof=begin + len(window) >= len(view))
        if found is None:
            return _NO_RECORDS
        first = begin + found
    records = index_pcap_records(view, header, first, split.stop)
    _note_records(tally, split.file.path, view, records, first, split.stop)
    return records


_NO_RECORDS = RecordIndex(np.empty(0, np.float64), *(np.empty(0, np.int64) for _ in range(4)))
