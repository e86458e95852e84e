"""What the tasks compute themselves: the tables' part files (tables.py), the report's latency
buckets (latency.py), the tallies the driver adds up (model/tally.py), gzip captures
inflated (inputs.inflate, inputs.inflate_to). Pure Python: no Spark session."""

from __future__ import annotations

import bz2
import errno
import gzip
import lzma
import math
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_analysis.analysis import findings, latency
from spark_analysis.capture import inputs
from spark_analysis.decode.rows import CALL, FRAME
from spark_analysis.model.tally import Tally, add
from spark_analysis.output import tables
from tests.support import capture


def calls(rows: list[tuple[str, float | None]]) -> pa.StructArray:
    """CALL rows with only what latency.py reads filled in."""
    full = [(1.0, "c", "client", 105, name, 1, None if ms is None else 0, ms, False, None, None, "s", None, False,
             None, None) for name, ms in rows]
    return pa.array(full, type=tables.row_type(CALL))


def test_latency_is_counted_per_nameserver_too() -> None:
    rows = pa.array([{"code_name": "GET_ROUTEINFO_BY_TOPIC", "latency_ms": ms, "server": server}
                     for server, ms in (("10.0.0.1:9876", 1.0), ("10.0.0.1:9876", 1.0), ("10.0.0.2:9876", 50.0))],
                    type=tables.row_type(CALL))
    tally = latency.count_calls(rows)
    [both] = latency.code_stats(tally)
    assert (both.server, both.requests, both.answered) == (None, 3, 3)
    one, two = latency.code_stats(tally, by_server=True)
    assert (one.server, one.requests, two.server, two.requests) == ("10.0.0.1:9876", 2, "10.0.0.2:9876", 1)
    assert one.p[2] == pytest.approx(1.0, rel=0.01) and two.p[0] == pytest.approx(50.0, rel=0.01)


def test_calls_whose_answer_a_snap_length_left_unknown_are_counted_apart() -> None:
    """tcpdump -s 128 of a 5.3.3 NameServer (tests/data/captures/real/v5-midsplit): every
    GET_BROKER_CLUSTER_INFO's answer was captured, cut before its opaque, so none pairs. report.html
    said "40 (0 answered)" beside a summary counting 0 unanswered; now the calls no one can tell of
    are counted (``cut``) and said."""
    from spark_analysis.output.report import request_mix

    rows = pa.array([{"code_name": "GET_BROKER_CLUSTER_INFO", "latency_ms": ms, "cut": cut, "server": "s"}
                     for ms, cut in ((None, True), (None, True), (None, False), (2.0, False), (3.0, True))],
                    type=tables.row_type(CALL))
    [stats] = latency.code_stats(latency.count_calls(rows))
    assert (stats.requests, stats.answered, stats.cut) == (5, 2, 2)
    assert request_mix([stats])["data"][0]["text"] == ["5 (2 answered, 2 cut: answer not known)"]
    assert request_mix([stats._replace(cut=0)])["data"][0]["text"] == ["5 (2 answered)"]


def test_latency_percentiles_are_within_one_percent_of_the_exact_ones() -> None:
    random = np.random.default_rng(7)
    latencies = {"GET_ROUTEINFO_BY_TOPIC": random.lognormal(-1, 1.5, 5000),
                 "REGISTER_BROKER": random.uniform(0.2, 40, 300), "QUERY_DATA_VERSION": np.array([0.0, 0.5])}
    rows = [(name, float(ms)) for name, values in latencies.items() for ms in values] + [("UNREGISTER_BROKER", None)]
    tally: Counter = Counter()
    for start in range(0, len(rows), 1000):  # as tasks' batches, added up
        tally.update(latency.count_calls(calls(rows[start:start + 1000])))
    stats = {s.code_name: s for s in latency.code_stats(tally)}
    assert stats["UNREGISTER_BROKER"] == latency.CodeStats("UNREGISTER_BROKER", 1, 0, None)
    for name, values in latencies.items():
        assert (stats[name].requests, stats[name].answered) == (len(values), len(values))
        for percentile, found in zip(latency.PERCENTILES, stats[name].p, strict=True):
            exact = max(np.percentile(values, percentile * 100, method="inverted_cdf"), latency.MIN_LATENCY_MS)
            assert exact <= found <= exact * 1.01 + 1e-12, (name, percentile)


def test_latency_buckets_edges() -> None:
    edges = np.array([latency.upper_edge(b) for b in range(5)])
    assert latency.bucket_of(edges).tolist() == [0, 1, 2, 3, 4]
    assert latency.bucket_of(np.array([0.0, -3.0, edges[2] * 1.0001])).tolist() == [0, 0, 3]


def frames(count: int, first_ts: float) -> pa.StructArray:
    rows = [(first_ts + i * 0.5, "c", "a:1", "b:9876", "request", 105, "GET_ROUTEINFO_BY_TOPIC", i, 0, False,
             401, "V4_9_8", "JAVA", "JSON", None, {"topic": "T"}, 0, 0, "in.pcap", "b:9876@x") for i in range(count)]
    return pa.array(rows, type=tables.row_type(FRAME))


def test_a_task_run_again_replaces_its_part_files(tmp_path: Path) -> None:
    tables.prepare(str(tmp_path))
    for first_ts in (1.0, 100.0):  # the same partition twice, as a task re-run
        writer = tables.PartWriter(str(tmp_path), 3)
        writer.write(FRAME, frames(4, first_ts))
        writer.close()
    assert sorted(p.name for p in (tmp_path / "frames").iterdir()) == ["part-00003.parquet"]
    assert not list((tmp_path / "calls").iterdir())  # only partition 0 writes empty tables
    table = pq.read_table(tmp_path / "frames")
    assert table.num_rows == 4
    assert table.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert table.column("ts").to_pylist()[0].timestamp() == 100.0


def test_partition_zero_gives_every_table_its_schema(tmp_path: Path) -> None:
    tables.prepare(str(tmp_path))
    tables.PartWriter(str(tmp_path), 0).close()
    tables.commit(str(tmp_path))
    for _, name, rows in tables.TABLES:
        assert pq.read_table(tmp_path / name).column_names == rows.names
        assert (tmp_path / name / "_SUCCESS").exists()


@pytest.mark.parametrize("seconds", [1764032000.123456, 1764032000.9999995, 0.000001, 1.5])
def test_seconds_become_microseconds_as_spark_truncates_them(seconds: float) -> None:
    batch = tables.to_file_batch(FRAME, frames(1, seconds))
    micros = batch.column(0).cast(pa.int64()).to_pylist()[0]
    assert micros == math.trunc(seconds * 1e6)


def test_tallies_add_counts_and_merge_what_tasks_found_of_a_file() -> None:
    """Two tasks read byte ranges of one file: its records add up, its span widens, the problem
    one of them found (the last record cut short) is kept; a decoding task's counts, groups and
    latencies add to them; summary.json's counts are the COUNT fields, in order."""
    task_a, task_b = inputs.ReadTally(segments=3), inputs.ReadTally(segments=4, records=9)
    task_a.note_file("f.pcap", records=5, first=10.0, last=20.0, link_type=1)
    task_b.note_file("f.pcap", records=4, first=20.5, last=30.0, link_type=1, problem=inputs.TRUNCATED,
                     trailing_bytes=7)
    decoding = Tally(frame=3, request=2, response=1, latencies=Counter({("s", "A", 1): 2}))
    add(decoding.groups, "slow", ("A",), 1, 5.0, 5.0, (1500.0, 5.0, "c"))
    merged = Tally().merge(task_a).merge(task_b).merge(decoding).merge(decoding)
    assert (merged.segments, merged.records, merged.frame, merged.request) == (7, 9, 6, 4)
    assert merged.files == {"f.pcap": inputs.FileFacts(9, 10.0, 30.0, 1, inputs.TRUNCATED, 7)}
    assert merged.groups == {"slow": {("A",): [2, 5.0, 5.0, (1500.0, 5.0, "c")]}}
    assert merged.latencies == Counter({("s", "A", 1): 4})
    assert list(merged.counts()) == ["records", "bytes", "segments", "connection", "frame", "request", "response",
                                     "call", "unanswered", "registration", "crc_failures", "gaps", "lost_bytes",
                                     "undecodable", "controller", "cut_frames", "uncaptured_bytes", "unplaced_bytes",
                                     "mid_frame_bytes", "unseen_bytes"]


def test_gzip_members_are_inflated_and_a_cut_one_is_truncated() -> None:
    """tcpdump -z gzip, rotated files joined with cat, one copied in part, one that is no gzip."""
    tally = inputs.ReadTally()
    assert inputs.inflate(gzip.compress(b"pcap ") + gzip.compress(b"records"), "two.gz", tally) == b"pcap records"
    assert "two.gz" not in tally.files
    data = os.urandom(50_000)  # incompressible: a cut in the middle of the stream
    cut = inputs.inflate(gzip.compress(data)[:30_000], "cut.gz", tally)
    assert 0 < len(cut) < len(data) and data.startswith(cut)
    assert tally.files["cut.gz"].problem == inputs.TRUNCATED
    assert inputs.inflate(b"not a capture\n", "notes.gz", tally) == b""
    assert tally.files["notes.gz"].problem == inputs.NOT_A_CAPTURE


def test_gzip_is_inflated_as_a_stream_into_a_file(tmp_path: Path) -> None:
    """The same as inflate, a chunk at a time (small chunks here: members and a cut across them),
    into a file: never the whole capture in memory."""
    data = os.urandom(50_000)
    cases = {"two.gz": (gzip.compress(b"pcap ") + gzip.compress(b"records"), b"pcap records", None),
             "cut.gz": (gzip.compress(data)[:30_000], None, inputs.TRUNCATED),
             "notes.gz": (b"not a capture\n", b"", inputs.NOT_A_CAPTURE)}
    for name, (compressed, inflated, problem) in cases.items():
        (tmp_path / name).write_bytes(compressed)
        tally = inputs.ReadTally()
        inputs.inflate_to(str(tmp_path / name), str(tmp_path / f"{name}.pcap"), name, tally, chunk=1000)
        got = (tmp_path / f"{name}.pcap").read_bytes()
        assert got == (inputs.inflate(compressed, name, inputs.ReadTally()) if inflated is None else inflated), name
        assert (tally.files[name].problem if name in tally.files else None) == problem, name
    assert 0 < len((tmp_path / "cut.gz.pcap").read_bytes()) < len(data)


@pytest.mark.parametrize("suffix, compress", [(".bz2", lambda data: bz2.compress(data, 1)), (".xz", lzma.compress)])
def test_bzip2_and_xz_captures_are_inflated_as_gzip_ones(tmp_path: Path, suffix: str, compress) -> None:
    """tcpdump -z bzip2 (its manual's other example) and xz left captures "not a capture"; now every
    stream of them is read as gzip's members are, one cut short is TRUNCATED, one of another format
    is NOT_A_CAPTURE naming what it is. (bzip2 inflates by whole blocks, 100 kB at level 1: a cut
    one gives the blocks before the cut.)"""
    data = os.urandom(300_000)
    cases = {f"two{suffix}": (compress(b"pcap ") + compress(b"records"), b"pcap records", None),
             f"cut{suffix}": (compress(data)[:200_000], None, inputs.TRUNCATED),
             f"zstd{suffix}": (b"\x28\xb5\x2f\xfd" + b"\0" * 20, b"", inputs.NOT_A_CAPTURE)}
    for name, (compressed, inflated, problem) in cases.items():
        assert inputs.compressed(name)
        (tmp_path / name).write_bytes(compressed)
        tally = inputs.ReadTally()
        inputs.inflate_to(str(tmp_path / name), str(tmp_path / f"{name}.pcap"), name, tally, chunk=1000)
        whole = inputs.inflate(compressed, name, inputs.ReadTally())
        assert (tmp_path / f"{name}.pcap").read_bytes() == whole, name
        assert inflated is None or whole == inflated, name
        assert (tally.files[name].problem if name in tally.files else None) == problem, name
    assert 0 < len((tmp_path / f"cut{suffix}.pcap").read_bytes()) < len(data)
    assert tally.files[f"zstd{suffix}"].compression == "zstd"


def _bomb(suffix: str, size: int) -> bytes:
    """``size`` zero bytes compressed in a format read: bzip2 keeps 64 MiB in about 100 bytes."""
    if suffix == ".gz":
        return gzip.compress(bytes(size), 9)
    return bz2.compress(bytes(size), 9) if suffix == ".bz2" else lzma.compress(bytes(size))


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".xz"])
def test_a_zip_bomb_is_inflated_a_piece_at_a_time(tmp_path: Path, suffix: str, monkeypatch) -> None:
    """A compressed capture of 64 MiB of zeros, in one read of its file (a MiB of bzip2 is a terabyte):
    each inflater gave the whole of it in one call, all in the task's memory at once; it gives
    INFLATE_PIECE at a time now, into the spool file or the in-memory inflation alike."""
    size = 64 << 20
    path = tmp_path / f"bomb{suffix}"
    path.write_bytes(_bomb(suffix, size))
    calls: list[int] = []
    for ending, make in inputs.READ_FORMATS.values():
        def counted(make=make):
            inner = make()

            class Counted:
                eof = property(lambda self: inner.eof)
                unused_data = property(lambda self: inner.unused_data)
                unconsumed_tail = property(lambda self: inner.unconsumed_tail)

                def __getattr__(self, name: str):
                    return getattr(inner, name)

                def decompress(self, data: bytes, *max_length: int) -> bytes:
                    out = inner.decompress(data, *max_length)
                    calls.append(len(out))
                    return out
            return Counted()
        monkeypatch.setitem(inputs.INFLATERS, ending, counted)
    tally = inputs.ReadTally()
    inputs.inflate_to(str(path), str(tmp_path / "bomb.pcap"), path.name, tally)
    assert (tmp_path / "bomb.pcap").stat().st_size == size and path.name not in tally.files
    assert max(calls) <= 1 << 20, max(calls)  # inputs.INFLATE_PIECE
    calls.clear()
    assert len(inputs.inflate(path.read_bytes(), path.name, tally)) == size
    assert max(calls) <= 1 << 20, max(calls)


def test_a_zip_bomb_read_in_memory_stops_at_its_bound(monkeypatch) -> None:
    """Read whole in memory (a remote file, or through the JVM on a cluster), a bzip2 file of a few
    KB inflated to whatever it held: a terabyte for a MiB. It stops at INFLATE_IN_MEMORY_MAX, the
    file NOT_INFLATED with the reason; what came before is read."""
    monkeypatch.setattr(inputs, "INFLATE_IN_MEMORY_MAX", 8 << 20, raising=False)
    tally = inputs.ReadTally()
    data = inputs.inflate(_bomb(".bz2", 64 << 20), "bomb.pcap.bz2", tally)
    assert len(data) == 8 << 20
    facts = tally.files["bomb.pcap.bz2"]
    assert facts.problem == inputs.NOT_INFLATED and facts.reason.startswith("it inflates past")
    assert "inflates past" in findings.problem_text({"problem": facts.problem, "reason": facts.reason, "size": 1})


def test_a_compressed_capture_that_fills_the_spool_is_named_and_leaves_nothing_there(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    """A full temporary directory made the reading task raise ENOSPC: the job died with a 110-line
    traceback and left the partial file. Now that capture is NOT_INFLATED with the reason, its
    partial file removed, and the task goes on with the other inputs."""
    (tmp_path / "big.pcap.gz").write_bytes(gzip.compress(os.urandom(1000)))
    spool = tmp_path / "spool"
    spool.mkdir()

    def full(path: str, part: str, *args) -> None:
        Path(part).write_bytes(b"half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(inputs, "_inflate_into", full)
    tally = inputs.ReadTally()
    file = inputs.CaptureFile(str(tmp_path / "big.pcap.gz"), 1000, 0)
    assert list(inputs.read_task([inputs.Split(file, 0, file.size)], (), tally, str(spool))) == []
    assert list(spool.iterdir()) == []
    row = findings.input_files([file], tally)[0]
    assert row["problem"] == inputs.NOT_INFLATED
    assert findings.problem_text(row) == (f"not inflated: No space left on device in {spool}, where it is inflated "
                                          "(point TMPDIR at a directory with room for the inflated capture)")


def test_a_zip_bomb_inflated_into_the_spool_stops_short_of_filling_it(tmp_path: Path, monkeypatch) -> None:
    """Inflated into the spool directory (a local compressed capture on a local master), a bomb
    took all of its file system (TMPDIR: a shared /tmp), whatever else wrote there then failing,
    and was named only when the disk said ENOSPC. Now it stops where the file system would keep
    less than a tenth of its size (at most SPOOL_KEEP_FREE) free: the file NOT_INFLATED with the
    reason, what came before read. Here a spool file system of 40 MiB, a bomb of 64 MiB of zeros."""
    spool = tmp_path / "spool"
    spool.mkdir()
    size = 40 << 20
    real = os.statvfs

    def statvfs(path):  # a file system of ``size`` bytes, holding what the spool holds
        if Path(path) != spool:
            return real(path)
        used = sum(f.stat().st_size for f in spool.iterdir())
        return os.statvfs_result((4096, 1, size, size - used, size - used, 0, 0, 0, 0, 255))

    monkeypatch.setattr(os, "statvfs", statvfs)
    path = tmp_path / "bomb.pcap.bz2"
    path.write_bytes(_bomb(".bz2", 64 << 20))
    tally = inputs.ReadTally()
    target = inputs.inflated_copy(inputs.CaptureFile(str(path), path.stat().st_size, 0), tally, str(spool))
    assert target is not None and Path(target).exists()  # what came before is read
    inflated = Path(target).stat().st_size
    assert size - (5 << 20) <= inflated <= size - (4 << 20)  # 4 MiB kept free, a piece (1 MiB) short of it
    facts = tally.files[str(path)]
    assert facts.problem == inputs.NOT_INFLATED
    assert facts.reason.startswith(f"inflating it further would leave under 4 MiB free in {spool}, where it is "
                                   f"inflated (a zip bomb's kind; TMPDIR): read as far as that, {inflated >> 20} MiB")
    assert "not inflated: inflating it further" in findings.problem_text(
        {"problem": facts.problem, "reason": facts.reason, "size": 1})


def test_an_input_that_is_not_a_capture_says_when_it_is_compressed_and_what_to_do(tmp_path: Path) -> None:
    """A zstd capture, or a gzip one without its suffix, was only "not a capture": now the reading
    task names the format and the finding what makes it readable."""
    pcap = b"\xd4\xc3\xb2\xa1\x02\x00\x04\x00" + bytes(8) + b"\xff\xff\x00\x00\x01\x00\x00\x00"  # a pcap header
    files = {"a.pcap.zst": b"\x28\xb5\x2f\xfd" + bytes(100), "b.pcap": gzip.compress(pcap), "c.pcap": b"plain text\n"}
    tally = inputs.ReadTally()
    given = [inputs.CaptureFile(name, len(data), index) for index, (name, data) in enumerate(files.items())]
    for file in given:
        inputs._split_records(files[file.path], inputs.Split(file, 0, file.size), tally)
    rows = findings.input_files(given, tally)
    texts = {row["path"]: findings.problem_text(row) for row in rows}
    assert texts == {"a.pcap.zst": "not a capture: zstd-compressed, a format not read (decompress it first)",
                     "b.pcap": "not a capture: gzip-compressed, read when its name ends in .gz",
                     "c.pcap": "not a capture"}


def test_a_pcapng_cut_inside_a_block_is_named_truncated(tmp_path: Path) -> None:
    """Its whole blocks are read; the bytes of the block cut short are counted, as for a pcap."""
    whole = capture("v5_controller_failover.pcapng").read_bytes()
    found = {}
    for name, data in (("whole.pcapng", whole), ("cut.pcapng", whole[:len(whole) // 2])):
        path = tmp_path / name
        path.write_bytes(data)
        file = inputs.CaptureFile(str(path), len(data), 0)
        tally = inputs.ReadTally()
        list(inputs.read_task([inputs.Split(file, 0, len(data))], 9876, tally))
        found[name] = tally.files[str(path)]
    assert (found["whole.pcapng"].problem, found["whole.pcapng"].trailing_bytes) == (None, 0)
    cut = found["cut.pcapng"]
    assert cut.problem == inputs.TRUNCATED and 0 < cut.trailing_bytes < len(whole) // 2
    assert 0 < cut.records < found["whole.pcapng"].records


def test_a_quiet_file_is_a_whole_capture_header_without_packets() -> None:
    """A rotation's file of a quiet time (its capture header, no packet) is information; a
    compressed file inflating to no byte has no header at all and stays a critical empty input
    (the quiet rule read only the file's size: a gzip of nothing, 20 bytes, was 'its header only')."""
    header = capture("json_lifecycle.pcap").read_bytes()[:24]
    cases = {"quiet.pcap": header, "quiet.pcap.gz": gzip.compress(header), "nothing.pcap.gz": gzip.compress(b""),
             "zero.pcap": b"", "half.pcap": header[:10]}
    rows = {}
    for name, data in cases.items():
        file, tally = inputs.CaptureFile(name, len(data), 0), inputs.ReadTally()
        assert list(inputs.read_whole(data, file, (), tally)) == []
        rows[name] = findings.input_files([file], tally)[0]
    said = {name: (row["problem"], findings.quiet_file(row), findings._input_severity(row))
            for name, row in rows.items()}
    assert said == {"quiet.pcap": ("empty", True, "info"), "quiet.pcap.gz": ("empty", True, "info"),
                    "nothing.pcap.gz": ("empty", False, "critical"), "zero.pcap": ("empty", False, "critical"),
                    "half.pcap": ("truncated", False, "critical")}
    assert findings.problem_text(rows["nothing.pcap.gz"]) == f"empty: {inputs.NOTHING_INFLATED}"
