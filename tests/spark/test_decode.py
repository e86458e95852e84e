"""Without Spark: what the job's tasks do - resynchronising frames after capture gaps and mid-stream
starts, pairing calls, summarising registrations, reading byte ranges cut anywhere, planning
tasks - and the synthetic generator's truth against the single-process path."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import resource
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from itertools import pairwise
from pathlib import Path

import pyarrow as pa
import pytest

from spark_analysis.__main__ import check_arguments
from spark_analysis.analysis import findings
from spark_analysis.capture import conversation, inputs
from spark_analysis.capture.conversation import Conversation, conversation_of
from spark_analysis.capture.inputs import (
    OPEN_MAPPINGS,
    CaptureFile,
    Split,
    discover,
    mapped_file,
    plan_tasks,
    read_task,
    shown_name,
    split_bytes,
)
from spark_analysis.capture.packets import ACK, PSH, segment_columns, tcp_segments
from spark_analysis.capture.reassembly import as_servers, reassemble, server_ports
from spark_analysis.capture.records import (
    PCAP_HEADER_LEN,
    RECORD_HEADER_LEN,
    index_pcap_records,
    parse_pcap_header,
    read_records,
)
from spark_analysis.decode.rows import (
    CALL,
    CALLS,
    CONNECTION,
    EVENT,
    FRAME,
    FRAMES,
    REGISTRATION,
    call_array,
    connection_rows,
    conversation_rows,
    frame_array,
    piece_rows,
    split_rows,
)
from spark_analysis.decode.schema import CALL_ROWS, EVENT_ROWS, FRAME_ROWS, REGISTRATION_ROWS
from tests.spark.capture.builders import (
    BODY,
    CLIENT,
    SERVER,
    answer,
    client_stream,
    handshake,
    only,
    registration,
    route_query,
    segment,
)
from tests.spark.conftest import SYNTH
from tests.support import capture
from twisted_namesrv.remoting import RemotingCommand, RequestCode, ResponseCode, SerializeType
from twisted_namesrv.remoting.codes import V4_9_8
from twisted_namesrv.remoting.crc import crc32_masked

# --- calls and registrations -------------------------------------------------------------------------


def rows_of(packets: Iterable) -> dict[str, list[tuple]]:
    rows: dict[str, list[tuple]] = defaultdict(list)
    for kind, row in connection_rows(packets, 9876):
        rows[kind].append(row)
    return rows


def _lookups(count: int) -> list:
    """A client's ``count`` route lookups, each answered (with a body and without)."""
    to_client = [(3.0 + i * 0.01, segment(SERVER, CLIENT, 5001 + sum(map(len, answers[:i])), PSH | ACK, frame))
                 for answers in [[answer(i, b"{}" * (i % 3)) for i in range(count)]]
                 for i, frame in enumerate(answers)]
    return handshake() + client_stream(*(route_query(i, oneway=i == 5) for i in range(count))) + to_client


def test_frames_alike_are_read_once_and_make_no_command_of_their_own(monkeypatch) -> None:
    """A capture is mostly frames alike (a client's lookups and their answers, a broker's heartbeats):
    their header's fields are read once for all, and a frame's RemotingCommand is made only where
    its rows need more than its kind and opaque say (a registration's body, a broker's name)."""
    made = []
    real = conversation.RemotingCommand

    class Counted(real):  # type: ignore[misc,valid-type]
        __slots__ = ()

        def __init__(self, *args, **kwargs) -> None:
            made.append(1)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(conversation, "RemotingCommand", Counted)
    rows = defaultdict(list)
    for kind, row in conversation_rows(conversation_of(reassemble(_lookups(40), 9876)[0])):
        rows[kind].append(row)
    assert len(rows[FRAME]) == 80 and len(rows[CALL]) == 40 and not made
    assert {row[7] for row in rows[FRAME]} == set(range(40))  # each its own opaque
    assert [row[9] for row in rows[FRAME] if row[4] == "request"].count(True) == 1  # the oneway one


def _lookups_and_a_registration(snap: int | None) -> list[Conversation]:
    """12 route lookups (one oneway) and a registration, each packet cut at ``snap`` bytes if given."""
    packets = _lookups(12) + client_stream(registration("right"), ts=4.0, start=1001 + sum(
        len(route_query(i, oneway=i == 5)) for i in range(12)))
    if snap is not None:
        packets = [(ts, seg._replace(payload=seg.payload[:snap], missing=max(0, len(seg.payload) - snap)))
                   for ts, seg in packets]
    conversations = [conversation_of(c) for c in reassemble(packets, 9876)]
    assert (snap is not None) == any(c.cut for c in conversations)
    return conversations


@pytest.mark.parametrize("snap", [None, 60])
def test_frame_rows_as_columns_are_the_rows(snap: int | None) -> None:
    """What the decoding tasks write (frame_array over each connection's FrameBlock) is pa.array of the
    FRAME rows, for frames decoded whole and frames a snap length cut."""
    conversations = _lookups_and_a_registration(snap)
    rows = [row for c in conversations for kind, row in conversation_rows(c) if kind == FRAME]
    blocks = [block for c in conversations for kind, block in conversation_rows(c, blocks=True) if kind == FRAMES]
    assert len(rows) > 10
    assert frame_array(blocks).equals(pa.array(rows, pa.struct(list(FRAME_ROWS))))
    assert frame_array([]).equals(pa.array([], pa.struct(list(FRAME_ROWS))))


@pytest.mark.parametrize("snap", [None, 60])
def test_call_rows_as_columns_are_the_rows(snap: int | None) -> None:
    """What the decoding tasks write of the calls (call_array over each connection's CallBlock) is
    pa.array of the CALL rows, answered or not, for frames decoded whole and frames a snap length cut."""
    conversations = _lookups_and_a_registration(snap)
    rows = [row for c in conversations for kind, row in conversation_rows(c) if kind == CALL]
    blocks = [block for c in conversations for kind, block in conversation_rows(c, blocks=True) if kind == CALLS]
    if snap is None:
        assert len(rows) == 13 and {row[6] for row in rows} > {None} and any(row[8] for row in rows)
    else:  # requests whose opaque was cut: no answer known, not unanswered
        assert len(rows) == 2 and all(row[13] for row in rows)
    assert call_array(blocks).equals(pa.array(rows, pa.struct(list(CALL_ROWS))))
    assert call_array([]).equals(pa.array([], pa.struct(list(CALL_ROWS))))


def test_requests_naming_a_broker_are_its_events() -> None:
    unregister = RemotingCommand.request(RequestCode.UNREGISTER_BROKER, {
        "brokerAddr": "10.0.0.9:10911", "brokerName": "b", "clusterName": "C", "brokerId": "0"}, opaque=8).encode()
    refused = RemotingCommand.response_to(RemotingCommand.request(RequestCode.REGISTER_BROKER, opaque=7),
                                          code=ResponseCode.SYSTEM_ERROR).encode()
    to_client = [(3.0, segment(SERVER, CLIENT, 5001, PSH | ACK, refused))]
    events = rows_of(handshake() + client_stream(registration("right"), route_query(9), unregister) + to_client)[EVENT]
    assert [(e[0], e[1], e[3], e[4], e[5]) for e in events] == [
        ("10.0.0.9:10911", "b", RequestCode.REGISTER_BROKER, False, 1),  # refused: no sign of life
        ("10.0.0.9:10911", "b", RequestCode.UNREGISTER_BROKER, False, None)]


def test_a_broker_s_header_too_big_to_keep_is_read_not_kept() -> None:
    """A broker's fields are read once per distinct header and kept for the worker's later tasks;
    a header is any peer's choice up to a frame's length, so one over KEPT_HEADER_MAX (kept by no
    table of headers) is read for its own frames and never kept. Before, 40 registrations whose
    headers held 2 MB of padding each stayed in a Python worker after their task, 78 MiB (4,096 of
    them could: a frame is up to 16 MiB)."""
    from spark_analysis.decode import rows
    from twisted_namesrv.remoting.header import KEPT_HEADER_MAX

    ext = {"brokerAddr": "10.0.0.9:10911", "brokerName": "b", "clusterName": "C", "brokerId": "0",
           "compressed": "false"}
    rows._broker_header.cache_clear()
    big = RemotingCommand.request(RequestCode.REGISTER_BROKER, ext | {"pad": "x" * KEPT_HEADER_MAX}, BODY,
                                  opaque=7).encode()
    events = rows_of(handshake() + client_stream(big))[EVENT]
    assert [(e[0], e[1], e[3]) for e in events] == [("10.0.0.9:10911", "b", RequestCode.REGISTER_BROKER)]
    assert rows._broker_header.cache_info().currsize == 0
    small = RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, BODY, opaque=8).encode()
    assert [(e[0], e[1]) for e in rows_of(handshake() + client_stream(small))[EVENT]] == [("10.0.0.9:10911", "b")]
    assert rows._broker_header.cache_info().currsize == 1


def event(t: float, name: str | None, code: int, alive: bool, topics: int | None = None, **more) -> dict:
    """An EVENT row as brokers.broker_summary reads it."""
    return {**dict.fromkeys(EVENT_ROWS.names), "broker_addr": "10.0.0.1:10911", "broker_name": name, "t": t,
            "code": code, "alive": alive, "topic_count": topics, **more}


def test_calls_pair_answers_by_opaque_and_keep_unanswered_requests() -> None:
    to_server = client_stream(route_query(1), route_query(2, oneway=True), route_query(3), route_query(1))
    answers = answer(3) + answer(1) + answer(1)
    to_client = [(3.0, segment(SERVER, CLIENT, 5001, PSH | ACK, answers))]
    calls = rows_of(handshake() + to_server + to_client)[CALL]
    response_code, latency = CALL_ROWS.names.index("response_code"), CALL_ROWS.names.index("latency_ms")
    assert [(c[5], c[response_code], c[latency] is None) for c in calls] == [
        (1, 0, False), (2, None, True), (3, 0, False), (1, 0, False)]


@pytest.mark.parametrize(("declared", "crc_ok"), [
    ("right", True),
    ("12345", False),  # the NameServer answers "crc32 not match"
    ("0", None),  # no check
    (None, None),  # no check
    ("2835376080", None),  # above 2**31 - 1: Java's Integer parse fails, so no check
])
def test_crc_ok_says_what_the_nameserver_checked(declared: str | None, crc_ok: bool | None) -> None:
    registrations = rows_of(handshake() + client_stream(registration(declared)))[REGISTRATION]
    (row,) = registrations
    names = REGISTRATION_ROWS.names
    assert row[names.index("crc_ok")] is crc_ok
    sent = {None: None, "right": crc32_masked(BODY)}.get(declared, declared)
    assert row[names.index("crc_declared")] == (None if sent is None else int(sent))
    assert (row[names.index("topic_count")], row[names.index("broker_addr")]) == (1, "10.0.0.9:10911")


def test_a_brokers_repeated_header_is_read_by_the_servers_rules_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broker registers with the same fields (bodyCrc32 included) until its topics change, and
    heartbeats with them: the capture reads them by RegisterBrokerHeader's rules once (calls counted)."""
    from spark_analysis.decode import rows as decode_rows
    from twisted_namesrv.bodies import register_header

    if hasattr(decode_rows, "_broker_header"):
        decode_rows._broker_header.cache_clear()  # as a new worker starts
    conversation.forget_kinds()  # and the kinds of frames, which keep what they named
    read = []
    from_ext = register_header.RegisterBrokerHeader.from_ext
    monkeypatch.setattr(register_header.RegisterBrokerHeader, "from_ext",
                        classmethod(lambda cls, ext: read.append(dict(ext)) or from_ext(ext)))
    ext = {"brokerAddr": "10.0.0.7:10911", "brokerName": "b7", "clusterName": "C", "brokerId": "0"}
    beat = RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, ext, opaque=8).encode()
    rows = rows_of(handshake() + client_stream(*[registration("right")] * 3, beat, beat))
    assert [row[REGISTRATION_ROWS.names.index("crc_ok")] for row in rows[REGISTRATION]] == [True] * 3
    assert [event[0] for event in rows[EVENT]] == ["10.0.0.9:10911"] * 3 + ["10.0.0.7:10911"] * 2
    assert [r["brokerAddr"] for r in read] == ["10.0.0.9:10911", "10.0.0.7:10911"]


def test_a_brokers_repeated_fields_travel_once_to_the_replay() -> None:
    """A broker registers with the same fields every 30 s: its events share one dict of them, so a
    task's pickled events carry them once (a reference after) and the liveness task, which replays
    a server's events alone, loads them once (counted in the bytes shipped, never in time)."""
    import pickle

    rows = rows_of(handshake() + client_stream(*[registration("right")] * 3))
    ext = EVENT_ROWS.names.index("ext")
    events = rows[EVENT]
    assert [event[ext]["brokerAddr"] for event in events] == ["10.0.0.9:10911"] * 3
    assert len({id(event[ext]) for event in events}) == 1
    assert pickle.dumps(events).count(b"clusterName") == 1


def test_a_body_sent_again_is_compared_in_place_not_copied() -> None:
    """A broker re-sends the body of its last registration every 30 s (most of a capture's bytes):
    the decoder compares the reassembled stream's view with the body it kept, in place; it copies
    a body only to keep a new one (counted in bytes allocated, never in time). A body differing in
    its last byte alone is a new one."""
    import tracemalloc

    from spark_analysis.decode.rows import _BodyCache

    size = 1 << 20
    stream = bytearray(b"x" * 16 + BODY + b" " * size)  # a body of 1 MiB (JSON's trailing blanks are nothing)
    first = memoryview(bytes(stream))[16:]
    again = memoryview(bytes(stream))[16:]  # the same bytes, elsewhere in the stream
    stream[-1:] = b"\n"
    changed = memoryview(bytes(stream))[16:]
    bodies = _BodyCache()
    summary = bodies.summary(first, False, V4_9_8)
    tracemalloc.start()
    try:
        assert bodies.summary(again, False, V4_9_8) is summary
        assert tracemalloc.get_traced_memory()[1] < size // 16
    finally:
        tracemalloc.stop()
    assert summary.topic_count == 1 and bodies.last_body == bytes(first)
    renewed = bodies.summary(changed, False, V4_9_8)
    assert renewed is not summary and renewed.crc == crc32_masked(bytes(changed)) and bodies.last_body == changed


@pytest.mark.parametrize(("serialize_type", "compressed"), [(SerializeType.ROCKETMQ, False),
                                                           (SerializeType.JSON, True)])
def test_registrations_in_binary_headers_and_compressed_bodies(serialize_type: int, compressed: bool) -> None:
    packets = handshake() + client_stream(registration("right", serialize_type, compressed))
    (row,) = rows_of(packets)[REGISTRATION]
    names = REGISTRATION_ROWS.names
    assert (row[names.index("compressed")], row[names.index("crc_ok")], row[names.index("topic_count")]) == (
        compressed, True, 1)


def test_every_row_of_a_conversation_has_its_connection_id() -> None:
    connection = only(reassemble(handshake() + client_stream(route_query(1))))
    conn_ids = {row[1] for kind, row in conversation_rows(conversation_of(connection)) if kind != CONNECTION}
    assert conn_ids == {"10.0.0.1:40000>10.0.0.2:9876@1.000000"}


# --- byte ranges and tasks ---------------------------------------------------------------------------


def decoded(splits: list[Split]) -> Counter:
    """Decoded rows, as the job gets them from these splits (one task per split)."""
    return Counter(repr(row) for row in split_rows(splits, 9876))


@pytest.mark.parametrize("range_size", [97, 1000, 4099, 65536])
def test_byte_ranges_cut_anywhere_decode_as_the_whole_file(range_size: int) -> None:
    path = capture("compressed_bulk.pcap")
    file = CaptureFile(str(path), path.stat().st_size, 0)
    whole = decoded([Split(file, 0, file.size)])
    cuts = [*range(0, file.size, range_size), file.size]
    assert decoded([Split(file, start, stop) for start, stop in pairwise(cuts)]) == whole


@pytest.mark.parametrize("chunk", [97, 4099, 65536])
def test_a_range_made_pieces_a_chunk_at_a_time_decodes_as_in_one(chunk: int, monkeypatch) -> None:
    """A reading task makes pieces of its range's records CHUNK_BYTES of the file at a time (its
    columns then stay small whatever the range's size): the rows and counts are those of one pass."""
    path = capture("compressed_bulk.pcap")
    file = CaptureFile(str(path), path.stat().st_size, 0)
    # a range of it, as a task reads a big file (one read whole is read with its task's other small files),
    # that ends in its last record: every record
    task = [Split(file, 0, file.size - 1)]
    whole, at_once = decoded(task), inputs.ReadTally()
    list(read_task(task, (), at_once))
    passes: list[tuple[int, int, int]] = []  # (first record's offset, last one's, records) of each
    monkeypatch.setattr(inputs, "CHUNK_BYTES", chunk)
    monkeypatch.setattr(inputs, "segment_columns", lambda data, records, ports: passes.append(
        (int(records.start[0]), int(records.start[-1]), len(records.start))) or segment_columns(data, records, ports))
    chunked = inputs.ReadTally()
    list(read_task(task, (), chunked))
    assert len(passes) > 1 and all(last - first < chunk for first, last, _ in passes)
    assert sum(count for _, _, count in passes) == at_once.records
    assert (chunked.records, chunked.segments, chunked.bytes) == (at_once.records, at_once.segments, at_once.bytes)
    assert inputs.silences(chunked.files[str(path)].spans) == inputs.silences(at_once.files[str(path)].spans)
    assert decoded(task) == whole == decoded([Split(file, 0, file.size)])


def test_a_compressed_capture_past_a_small_file_is_made_pieces_a_chunk_at_a_time_in_its_copy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A gzipped capture too big to be read with its task's small files (here every one:
    GROUPED_FILE_BYTES 0) is inflated into the spool and mapped there, its records made pieces
    CHUNK_BYTES at a time: every chunk's pieces point into the inflated copy, not the compressed
    file, and its rows are the plain file's."""
    path = capture("compressed_bulk.pcap")
    plain = CaptureFile(str(path), path.stat().st_size, 0)
    (tmp_path / "bulk.pcap.gz").write_bytes(gzip.compress(path.read_bytes()))
    packed = CaptureFile(str(tmp_path / "bulk.pcap.gz"), (tmp_path / "bulk.pcap.gz").stat().st_size, 0)
    (tmp_path / "spool").mkdir()
    spool, servers = str(tmp_path / "spool"), as_servers(9876)
    monkeypatch.setattr(inputs, "GROUPED_FILE_BYTES", 0)
    monkeypatch.setattr(inputs, "CHUNK_BYTES", 4099)
    passes: list[int] = []
    monkeypatch.setattr(inputs, "segment_columns", lambda *args: passes.append(1) or segment_columns(*args))
    found = list(read_task([Split(packed, 0, packed.size)], server_ports(servers), inputs.ReadTally(), spool))
    assert len(passes) > 1 and {piece.path for piece in found} == {inputs.spool_target(packed, spool)}
    by_ends: dict[tuple, list] = defaultdict(list)
    for piece in found:
        by_ends[piece.ends].append(piece)
    rows = Counter(repr(row) for parts in by_ends.values() for row in piece_rows(parts, servers))
    assert rows == decoded([Split(plain, 0, plain.size)])


def test_a_gigabyte_capture_is_a_reading_task_a_core() -> None:
    """Each reading task costs the JVM its task, its cached pieces and a task to shuffle them: a
    capture of 1.1 GB is one task on one core, one each on two, and ranges stay within MAX_RANGE_BYTES."""
    size = 1_158_104_178  # the 10 h benchmark capture
    assert [len(plan_tasks([CaptureFile("f", size, 0)], split_bytes(size, cores))) for cores in (1, 2)] == [1, 2]
    assert len(plan_tasks([CaptureFile("f", 3 * size, 0)], split_bytes(3 * size, 1))) == 2
    assert split_bytes(3 * size, 1) <= inputs.MAX_RANGE_BYTES


def test_tasks_cut_big_files_and_combine_small_ones(tmp_path: Path) -> None:
    files = [CaptureFile(f"f{i}", size, i) for i, size in enumerate([10, 250, 30, 40, 50])]
    tasks = plan_tasks(files, 100)
    assert [[(s.file.path, s.start, s.stop) for s in task] for task in tasks] == [
        [("f1", 0, 100)], [("f1", 100, 200)], [("f1", 200, 250)],
        [("f0", 0, 10), ("f2", 0, 30), ("f3", 0, 40), ("f4", 0, 50)]]


def test_a_ring_buffer_s_small_files_are_read_in_one_pass_per_task(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A ring buffer of a file a second (dumpcap -b duration:1, tcpdump -G 1): dozens of tiny files,
    a few packets each, some none (a quiet second: the header only). The task planned over them
    finds their segments in one pass, not a pass a file (~0.5 ms each whatever it held: 1,801
    files' reading took 1 s of CPU, 0.07 s so), and gives each file's pieces and facts as that file
    read alone does; compressed ones are tasks by their inflated size, not a task each."""
    from tests.spark.test_rotated import record_ends, records

    data = capture("json_lifecycle.pcap").read_bytes()
    found = records(data)
    ends = record_ends(data, found)
    (tmp_path / "gz").mkdir()
    files, packed = [], []
    for n, first in enumerate(range(0, len(found), 5)):
        body = data[:24] + b"".join(data[found[i][0]:ends[i]] for i in range(first, min(first + 5, len(found))))
        for quiet, content in ((False, body), (True, data[:24])) if n % 3 == 0 else ((False, body),):
            path = tmp_path / f"cap_{len(files):05d}{'q' if quiet else ''}.pcap"
            path.write_bytes(content)
            files.append(CaptureFile(str(path), len(content), len(files)))
            (tmp_path / "gz" / f"{path.name}.gz").write_bytes(gzip.compress(content))
            packed.append(CaptureFile(str(tmp_path / "gz" / f"{path.name}.gz"), len(gzip.compress(content)),
                                      files[-1].index))
    assert len(files) > 40
    [task] = plan_tasks(files, split_bytes(sum(f.size for f in files), 2))
    assert len(plan_tasks(packed, split_bytes(sum(f.size for f in files), 2))) == 1
    passes = []
    monkeypatch.setattr(inputs, "segment_columns", lambda *args: passes.append(1) or segment_columns(*args))
    together, alone = inputs.ReadTally(), inputs.ReadTally()
    pieces = sorted(read_task(task, (), together))
    assert len(passes) == 1
    assert pieces == sorted(piece for split in task for piece in read_task([split], (), alone))
    with_packets = -(-len(found) // 5)
    assert len(passes) == 1 + with_packets  # alone: one a file with packets
    assert together == alone and len({piece.path for piece in pieces}) == with_packets
    # gzipped (tcpdump -z gzip): each inflated into the spool, then read with the others in one pass
    # too (a pass each before), its pieces pointing into its inflated copy
    [task] = plan_tasks(packed, split_bytes(sum(f.size for f in files), 2))
    passes.clear()
    (tmp_path / "spool").mkdir()
    spool, inflated = str(tmp_path / "spool"), inputs.ReadTally()
    from_gzip = sorted(read_task(task, (), inflated, spool))
    assert len(passes) == 1
    assert sorted(p._replace(path=os.path.basename(p.path)) for p in from_gzip) == sorted(
        p._replace(path=f"{p.input_index}.pcap") for p in pieces)
    assert {p.path for p in from_gzip} <= {inputs.spool_target(f, spool) for f in packed}
    assert inflated.records == together.records and inflated.segments == together.segments


def test_inputs_expand_directories_and_globs(tmp_path: Path) -> None:
    for name in ("a/1.pcap", "a/.hidden.pcap", "a/_SUCCESS", "a/b/2.pcap", "c.pcap"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x" * len(name))
    found = discover([str(tmp_path / "a"), str(tmp_path / "*.pcap"), str(tmp_path / "c.pcap")], lambda uri: [])
    assert [(Path(f.path).relative_to(tmp_path).as_posix(), f.size, f.index) for f in found] == [
        ("a/1.pcap", 8, 0), ("a/b/2.pcap", 10, 1), ("c.pcap", 6, 2)]
    with pytest.raises(FileNotFoundError):
        discover([str(tmp_path / "missing*")], lambda uri: [])


def test_an_earlier_report_written_among_the_captures_is_skipped_and_named(tmp_path: Path) -> None:
    """`report caps/ --out caps/report` then `report caps/ --out caps/again`: the first report's
    Parquet, CSV and HTML files were 34 "bad input files", critical; a directory with only one of
    its names is still read."""
    for name in ("1.pcap", "report/summary.json", "report/brokers.csv", "report/calls/part-00000.parquet",
                 "notes/summary.json", "notes/2.pcap"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    skipped: list[str] = []
    found = discover([str(tmp_path)], lambda uri: [], skipped)
    assert [Path(f.path).relative_to(tmp_path).as_posix() for f in found] == [
        "1.pcap", "notes/2.pcap", "notes/summary.json"]
    assert skipped == [f"{tmp_path / 'report'} (an earlier report's output)"]
    assert [Path(f.path).name for f in discover([str(tmp_path / "report")], lambda uri: [])] == [
        "brokers.csv", "summary.json", "part-00000.parquet"]  # named itself: read (and said not a capture)


def test_a_pipe_in_a_captures_directory_is_skipped_and_named(tmp_path: Path) -> None:
    """A FIFO among the captures (a capture being streamed into it) was read as a file: the task
    reading it waited for ever."""
    (tmp_path / "1.pcap").write_bytes(b"x")
    os.mkfifo(tmp_path / "live.pcap")
    skipped: list[str] = []
    assert [Path(f.path).name for f in discover([str(tmp_path)], lambda uri: [], skipped)] == ["1.pcap"]
    assert skipped == [f"{tmp_path / 'live.pcap'} (a pipe (FIFO))"]


def test_one_file_under_two_names_is_read_once_under_its_own(tmp_path: Path) -> None:
    """A directory of captures with ``current.pcap -> ns-20261128.pcap`` (a link to the newest, as
    scripts keep one), or a hard link, or the link and the file both given: the file was read twice
    and told as two capture points ("59 connections ... are also in ..."). Read once, under the name
    that is no symbolic link, the other named as skipped."""
    captures = tmp_path / "captures"
    captures.mkdir()
    (captures / "ns-20261128.pcap").write_bytes(b"x" * 10)
    (captures / "current.pcap").symlink_to("ns-20261128.pcap")
    (captures / "other.pcap").write_bytes(b"y" * 7)
    os.link(captures / "other.pcap", tmp_path / "hard.pcap")
    skipped: list[str] = []
    found = discover([str(captures), str(tmp_path / "hard.pcap")], lambda uri: [], skipped)
    assert [(Path(f.path).name, f.size, f.index) for f in found] == [("ns-20261128.pcap", 10, 0), ("other.pcap", 7, 1)]
    assert skipped == [f"{captures / 'current.pcap'} (the same file as {captures / 'ns-20261128.pcap'})",
                       f"{tmp_path / 'hard.pcap'} (the same file as {captures / 'other.pcap'})"]
    alone = discover([str(captures / "current.pcap")], lambda uri: [])  # a link given alone: read under it
    assert [Path(f.path).name for f in alone] == ["current.pcap"]


def test_a_copy_given_with_its_original_is_read_once(tmp_path: Path) -> None:
    """A byte-identical copy given beside its original (``cp ns.pcap ns-copy.pcap``, a file sent
    twice under two names) was read twice and told "captured at two points", the clocks +0.000 s
    apart. The same bytes are one capture: read once, under the name listed first, the copy named
    as skipped. A file of the same size but other bytes, and files under COPY_MIN_BYTES (empty, a
    one-byte note, a ring's files that caught no packet: alike, each its own span) are read as before."""
    (tmp_path / "a.pcap").write_bytes(b"x" * 1040)
    (tmp_path / "b-copy.pcap").write_bytes(b"x" * 1040)
    (tmp_path / "c.pcap").write_bytes(b"y" * 1040)
    (tmp_path / "d.pcap").write_bytes(b"z")
    (tmp_path / "e.pcap").write_bytes(b"z")
    skipped: list[str] = []
    found = discover([str(tmp_path)], lambda uri: [], skipped)
    assert [(Path(f.path).name, f.index) for f in found] == [("a.pcap", 0), ("c.pcap", 1), ("d.pcap", 2),
                                                             ("e.pcap", 3)]
    assert skipped == [f"{tmp_path / 'b-copy.pcap'} (the same bytes as {tmp_path / 'a.pcap'}: a copy, read once)"]


def test_a_capture_cut_inside_a_record_while_still_written_says_so(tmp_path: Path) -> None:
    """tcpdump -w still running writes 4 KiB blocks: a report then read "truncated (63 bytes after
    the last whole record)", which docs called a capture stopped while writing one. Modified less
    than a minute before the run, or grown while read, the console says it seems still written
    (not the report's files: they stay the same whenever the capture is read); an older one, a
    compressed one or a remote one says nothing more."""
    path = tmp_path / "ns.pcap"
    path.write_bytes(b"x" * 100)
    listed = CaptureFile(str(path), 100, 0)
    now = path.stat().st_mtime
    assert "modified 5 s before this run; a capture running writes whole blocks" in (
        inputs.still_written(listed, now + 5.0) or "")
    assert inputs.still_written(listed, now + inputs.STILL_WRITTEN_S + 1) is None
    path.write_bytes(b"x" * 4196)
    assert "it grew by 4,096 bytes while read" in (inputs.still_written(listed, now + 3600.0) or "")
    zipped = tmp_path / "ns.pcap.gz"
    zipped.write_bytes(b"x")
    assert inputs.still_written(CaptureFile(str(zipped), 1, 1), now) is None
    assert inputs.still_written(CaptureFile("hdfs://nn/ns.pcap", 1, 2), now) is None
    started = tmp_path / "started.pcap"  # tcpdump -w just started: not even its header written yet
    started.write_bytes(b"")
    nothing = CaptureFile(str(started), 0, 3)
    assert "nothing written yet" in (inputs.still_written(nothing, now + 2.0) or "")
    read = inputs.ReadTally()  # which inputs' problems a capture still written has
    read.note_file(str(path), records=3, problem=inputs.TRUNCATED, trailing_bytes=63)
    read.note_file(str(zipped), records=3)
    rows = findings.input_files([listed, nothing, CaptureFile(str(zipped), 1, 1)], read)
    assert [findings.may_be_still_written(row) for row in rows] == [True, True, False]
    # in summary.json and the page too, not only on the console: why a file of no byte holds nothing (the
    # last file of a tcpdump -G rotation killed before its first 4 KiB were written said only "empty")
    assert findings.problem_text(rows[1]) == f"empty: {inputs.NO_BYTE}"
    assert [row["reason"] for row in rows] == [None, inputs.NO_BYTE, None]


def test_a_capture_dating_a_packet_where_no_date_is_says_so_and_is_read(tmp_path: Path) -> None:
    """A pcapng whose packet block is dated in the year 586,524 (its timestamp 2^64 - 1 ticks): the
    file's row said its first and last times, and the report stopped there with a traceback
    (ValueError: year 586524 is out of range). The packet is not read, the others are, and the
    file's problem says how many were dated so and why: a warning, as a file cut short is."""
    from tests.spark.capture.builders import ethernet, ipv4, pcapng_epb, pcapng_idb, pcapng_shb, tcp

    blocks = [pcapng_epb("<", 0, ticks, ethernet(ipv4(CLIENT[0], SERVER[0], tcp(CLIENT, SERVER, 1001 + n, PSH | ACK,
                                                                                  b"x"))))
              for n, ticks in enumerate((1_000_000, (1 << 64) - 1, 3_000_000))]
    path = tmp_path / "lies.pcapng"
    path.write_bytes(b"".join([pcapng_shb("<"), pcapng_idb("<", 1), *blocks]))
    listed, read = CaptureFile(str(path), path.stat().st_size, 0), inputs.ReadTally()
    assert list(read_task([Split(listed, 0, listed.size)], server_ports(as_servers(9876)), read))
    assert (read.records, read.segments) == (2, 2)
    (row,) = findings.input_files([listed], read)
    assert (row["records"], row["first"], row["last"]) == (
        2, "1970-01-01T00:00:01.000000Z", "1970-01-01T00:00:03.000000Z")
    assert row["problem"] == inputs.UNDATED and findings.problem_text(row) == (
        "1 packet dated before 1970 or past 9999 (its timestamp or its interface's if_tsoffset lies): not read")
    (item,) = findings.evidence([row], {}, [], {})
    assert (item["kind"], item["severity"]) == ("bad_input", findings.WARNING)


def test_a_link_to_nothing_is_said_so(tmp_path: Path) -> None:
    (tmp_path / "current.pcap").symlink_to("ns-gone.pcap")
    assert check_arguments([str(tmp_path / "current.pcap")], None, False) == (
        f"{tmp_path / 'current.pcap'} is a symbolic link to ns-gone.pcap, which does not exist")


def test_a_worker_keeps_a_files_mapping_for_its_next_tasks_while_the_file_is_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "a.pcap"
    path.write_bytes(b"a" * 4096)
    first = mapped_file(str(path))  # one task
    assert mapped_file(str(path)) is first  # the next
    path.write_bytes(b"b" * 8192)
    changed = mapped_file(str(path))
    assert changed is not first and changed[:] == b"b" * 8192


def test_a_worker_lets_go_of_the_mappings_used_longest_ago(tmp_path: Path) -> None:
    paths = [tmp_path / f"{index}.pcap" for index in range(OPEN_MAPPINGS + 1)]
    for path in paths:
        path.write_bytes(path.name.encode())
    mappings = [mapped_file(str(path)) for path in paths]
    assert mapped_file(str(paths[-1])) is mappings[-1]
    assert mapped_file(str(paths[0])) is not mappings[0]


def test_thousands_of_small_files_decode_within_a_few_file_descriptors(tmp_path: Path) -> None:
    """Captures rotated into small files: a reading task combines many, a connection spans many,
    yet neither holds a file open per file; here a file per record, and room for fewer open
    files than a connection's segments (94) over what a worker keeps mapped."""
    path = capture("json_lifecycle.pcap")
    file = CaptureFile(str(path), path.stat().st_size, 0)
    data = path.read_bytes()
    records = index_pcap_records(data, parse_pcap_header(data))
    room = OPEN_MAPPINGS + 16
    assert len(records.start) > room
    files = []
    for index, (start, length) in enumerate(zip(records.start.tolist(), records.length.tolist(), strict=True)):
        part = tmp_path / f"part{index:05}.pcap"  # a file per record
        part.write_bytes(data[:PCAP_HEADER_LEN] + data[start - RECORD_HEADER_LEN:start + length])
        files.append(CaptureFile(str(part), part.stat().st_size, index))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # new descriptors take the lowest free numbers, below the limit (those open above it stay usable)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(len(os.listdir("/proc/self/fd")) + room, hard), hard))
    try:
        rows = Counter(repr(row) for row in split_rows([Split(f, 0, f.size) for f in files], 9876))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert rows == decoded([Split(file, 0, file.size)])


# --- the synthetic generator -------------------------------------------------------------------------


def test_synthetic_truth_holds_in_a_single_process(tmp_path: Path) -> None:
    path = tmp_path / "s.pcap"
    subprocess.run([sys.executable, str(SYNTH), str(path), "--brokers", "6", "--clients", "4", "--hours", "0.2",
                    "--seed", "11", "--loss", "0.05", "--reorder", "0.3", "--retransmit", "0.3"], check=True,
                   capture_output=True)
    truth = json.loads((tmp_path / "s.truth.json").read_text())
    rows = rows_of(tcp_segments(read_records(path)))
    assert (len(rows[FRAME]), len(rows[CALL]), len(rows[REGISTRATION]), len(rows[CONNECTION])) == (
        truth["frames"], truth["requests"], truth["registrations"], truth["connections"])
    response_code = CALL_ROWS.names.index("response_code")
    assert sum(call[response_code] is None for call in rows[CALL]) == truth["unanswered"]
    assert sum(c.gaps for c in rows[CONNECTION]) > 0


def test_a_file_given_twice_is_read_once_and_said(tmp_path: Path) -> None:
    """`report v5-pause.pcap v5-pause.pcap` (a shell history edited, two globs matching one file):
    read once, as it should be, but nothing said so: step [1] said "1 files" for two arguments."""
    (tmp_path / "v5-pause.pcap").write_bytes(b"x" * 10)
    skipped: list[str] = []
    given = str(tmp_path / "v5-pause.pcap")
    found = discover([given, given, str(tmp_path / "*.pcap")], lambda uri: [], skipped)
    assert [f.path for f in found] == [given]
    assert skipped == [f"{given} (given again: read once)"]


def _as_nobody(work: Callable[[], object]) -> object:
    """``work()`` in a child process whose user is nobody when this one is root (root reads a file
    of mode 000), or here; its result, pickled back."""
    if os.geteuid() != 0:
        return work()
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        try:
            os.setgid(65534)
            os.setuid(65534)
            os.write(write_end, pickle.dumps(work()))
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    os.waitpid(child, 0)
    return pickle.loads(data)


def test_names_not_utf8_or_odd_are_read_and_unreadable_files_skipped_and_named() -> None:
    """A name of bytes that are no UTF-8 (``ns-\\xff.pcap``), one holding a newline or ESC, one starting
    with '-' or holding a space, one of 255 bytes: each a file like any other. A file that cannot
    be read (mode 000) failed its reading task and Spark stopped the run; a symbolic link to nothing
    was passed over in silence, and so was a directory that cannot be listed: each is skipped and
    named now, the others read."""
    with tempfile.TemporaryDirectory() as where:  # not tmp_path: nobody may not pass pytest's 0700 directory
        os.chmod(where, 0o755)
        _odd_names_read(Path(where))


def _odd_names_read(tmp_path: Path) -> None:
    names = [b"ns-\xff.pcap", b"ns-\nline.pcap", b"ns-\x1b[31mred.pcap", b"-leading.pcap", b"with space.pcap",
             b"L" * 250 + b".pcap"]
    for n, name in enumerate(names):
        with open(os.path.join(os.fsencode(tmp_path), name), "wb") as f:
            f.write(b"x" * (n + 1))
    locked = tmp_path / "locked.pcap"
    locked.write_bytes(b"secret")
    locked.chmod(0)
    (tmp_path / "dangling.pcap").symlink_to("gone.pcap")
    (tmp_path / "shut").mkdir()
    (tmp_path / "shut" / "inside.pcap").write_bytes(b"x")
    (tmp_path / "shut").chmod(0)

    def listed() -> tuple[list[tuple[str, int]], list[str]]:
        skipped: list[str] = []
        found = discover([str(tmp_path)], lambda uri: [], skipped)
        return [(f.path, f.size) for f in found], skipped

    found, skipped = _as_nobody(listed)
    assert sorted((os.fsencode(Path(path).name), size) for path, size in found) == sorted(
        (name, n + 1) for n, name in enumerate(names))
    assert skipped == [f"{tmp_path / 'dangling.pcap'} (a symbolic link to gone.pcap, which does not exist)",
                       f"{tmp_path / 'shut'} (cannot be listed: Permission denied)",
                       f"{locked} (cannot be read: Permission denied)"]
    (tmp_path / "shut").chmod(0o755)  # (for the temporary directory's removal)
    given_alone = _as_nobody(lambda: check_arguments([str(locked)], None, False))
    assert given_alone == f"{locked} (cannot be read: Permission denied)"
    odd = os.fsdecode(os.path.join(os.fsencode(tmp_path), b"ns-\x1b[31m\xff"))
    assert check_arguments([odd], None, False) == f"no such file or directory: {tmp_path}/ns-\\x1b[31m\\udcff"


def test_a_name_shown_holds_no_control_and_is_utf8() -> None:
    """What the tables, brokers.csv, the page and the console show of a name: text UTF-8 holds,
    nothing a terminal obeys; summary.json keeps the name itself (json.dumps escapes the byte)."""
    name = os.fsdecode(b"/caps/ns-\xff\n\x1b[2J.pcap")
    assert shown_name(name) == "/caps/ns-\\udcff\\n\\x1b[2J.pcap"
    shown_name(name).encode("utf-8")
    assert os.fsencode(json.loads(json.dumps({"path": name}))["path"]) == b"/caps/ns-\xff\n\x1b[2J.pcap"


def test_a_pcapng_whose_interfaces_cut_at_different_lengths_says_both() -> None:
    """dumpcap -i lo -s 256 -i any -s 96: the file's packets cut at 96 on one interface, at 256 on the
    other; its finding said only "cut at 256 bytes (the snap length)", as if every packet kept 256."""
    import struct as st

    from tests.spark.capture.builders import ethernet, ipv4, pcapng_block, pcapng_idb, pcapng_shb, tcp

    frame = ethernet(ipv4(CLIENT[0], SERVER[0], tcp(CLIENT, SERVER, 1001, PSH | ACK, b"x" * 400)))

    def epb(interface: int, ticks: int, kept: int) -> bytes:
        header = st.pack("<IIIII", interface, 0, ticks, kept, len(frame))
        return pcapng_block("<", 6, header + frame[:kept])

    data = b"".join([pcapng_shb("<"), pcapng_idb("<", 1), pcapng_idb("<", 1),
                     epb(0, 1_000_000, 256), epb(1, 1_000_001, 96), epb(0, 2_000_000, 256)])
    tally = inputs.ReadTally()
    listed = CaptureFile("two.pcapng", len(data), 0)
    list(inputs.read_whole(data, listed, (), tally))
    facts = tally.files["two.pcapng"]
    assert (facts.cut_records, facts.cut_at, facts.cut_shortest) == (3, 256, 96)
    (row,) = findings.input_files([listed], tally)
    (cut,) = [f for f in findings._cut_findings([row], {"cut_frames": 1}, [], {}) if f["kind"] == "capture_cut"]
    assert cut["message"].startswith("two.pcapng: packets cut at 96 to 256 bytes (its interfaces' snap lengths; ")
    assert (cut["cut_at"], cut["cut_shortest"]) == (256, 96)
