"""Without Spark: what the job's tasks do - resynchronising frames after capture gaps and mid-stream
starts, pairing calls, summarising registrations, reading byte ranges cut anywhere, planning
tasks - and the synthetic generator's truth against the single-process path."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable
from itertools import pairwise
from pathlib import Path

import pytest

from spark_analysis.analysis.liveness import broker_summary
from spark_analysis.capture.conversation import conversation_of
from spark_analysis.capture.inputs import OPEN_MAPPINGS, CaptureFile, Split, discover, mapped_file, plan_tasks
from spark_analysis.capture.packets import ACK, PSH, tcp_segments
from spark_analysis.capture.reassembly import reassemble
from spark_analysis.capture.records import (
    PCAP_HEADER_LEN,
    RECORD_HEADER_LEN,
    index_pcap_records,
    parse_pcap_header,
    read_records,
)
from spark_analysis.decode.rows import (
    CALL,
    CONNECTION,
    CONNECTION_CLOSED,
    EVENT,
    FRAME,
    REGISTRATION,
    connection_rows,
    conversation_rows,
    split_rows,
)
from spark_analysis.decode.schema import CALL_ROWS, EVENT_ROWS, REGISTRATION_ROWS
from spark_analysis.model.periods import ConnectionEnds, TimeBins, capture_periods, restarts_within
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
from twisted_namesrv.remoting.crc import crc32_masked

# --- calls and registrations -------------------------------------------------------------------------


def rows_of(packets: Iterable) -> dict[str, list[tuple]]:
    rows: dict[str, list[tuple]] = defaultdict(list)
    for kind, row in connection_rows(packets, 9876):
        rows[kind].append(row)
    return rows


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


def event(t: float, name: str | None, code: int, alive: bool, topics: int | None = None, **more) -> dict:
    """An EVENT row as brokers.broker_summary reads it."""
    return {**dict.fromkeys(EVENT_ROWS.names), "broker_addr": "10.0.0.1:10911", "broker_name": name, "t": t,
            "code": code, "alive": alive, "topic_count": topics, **more}


def test_a_brokers_liveness_is_measured_between_its_signs_of_life() -> None:
    """Intervals run between alive events (a refused registration is none); the broker's name and
    topic count are its last; it unregistered if that was its last word. Events come in any order."""
    register, unregister, query = (RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER,
                                   RequestCode.QUERY_DATA_VERSION)
    events = [event(100.0, "b", register, True, 5, broker_id=0), event(130.0, None, query, True),
              event(290.0, "b2", register, False, 7, response_code=1), event(300.0, "b2", register, True, 8),
              event(310.0, None, unregister, False)]
    row = broker_summary("10.0.0.1:10911", events[::-1], TimeBins.over([(100.0, 400.0)]))
    assert {key: row[key] for key in ("broker_name", "broker_id", "role", "first_seen", "last_seen", "registrations",
                                      "refused_registrations", "interval_p50_s", "max_gap_s", "near_expiry",
                                      "would_expire", "unregistered", "topic_count_first", "topic_count_last")} == {
        "broker_name": "b2", "broker_id": 0, "role": "MASTER", "first_seen": 100.0, "last_seen": 310.0,
        "registrations": 3, "refused_registrations": 1, "interval_p50_s": 100.0, "max_gap_s": 170.0,
        "near_expiry": 0, "would_expire": 1, "unregistered": True, "topic_count_first": 5, "topic_count_last": 8}
    assert row["gaps"] == [{"from": 130.0, "to": 300.0, "seconds": 170.0, "expired": True, "open": False}]
    assert row["refused"] == [{"t": 290.0, "response_code": 1, "crc_failure": False}]
    assert {bucket: n for bucket, n in enumerate(row["interval_buckets"]) if n} == {30: 1, 170: 1}
    # a refused registration adds nothing to what the server holds
    assert row["bins"] == {"bin": [0, 80, 506, 533, 560], "heartbeats": [1, 1, 0, 1, 0],
                           "topics": [5, None, None, 8, None]}
    assert (row["ended"], row["unregistered_at"], row["connection_closes"]) == ("unregistered", 310.0, 0)


def test_liveness_stays_within_capture_periods_and_notes_changes() -> None:
    """No interval spans the time between two capture periods; a broker last heard more than the
    expiry before its period ended was silent till then; topic counts are what the server held
    (a single-topic registration adds one, it does not replace the table), and a drop of those is
    noted; a data version counter going back (a restart) and a new brokerId (a role flip) are
    noted. The liveness tasks give each period (session) its own events: here one."""
    register = RequestCode.REGISTER_BROKER
    bins = TimeBins.over([(0.0, 100.0), (1000.0, 1300.0)])
    events = [event(10.0, "b", register, True, 9, broker_id=0, data_version_counter=5, topics_held=9),
              event(20.0, "b", register, True, 1, broker_id=0, data_version_counter=6, topics_held=10),  # created
              event(70.0, "b", register, True, 10, broker_id=0, data_version_counter=6, topics_held=10),
              event(80.0, "b", register, True, 7, broker_id=0, data_version_counter=1, topics_held=7),  # restart
              event(90.0, "b", register, True, 4, broker_id=1, data_version_counter=2)]  # a slave: as announced
    row = broker_summary("10.0.0.1:10911", events, bins)
    assert [row["topic_count_first"], row["topic_count_max"], row["topic_count_last"]] == [9, 10, 4]
    assert row["topic_drops"] == [{"t": 80.0, "from": 10, "to": 7}, {"t": 90.0, "from": 7, "to": 4}]
    assert row["version_backwards"] == [{"t": 80.0, "from": 6, "to": 1, "data_version_ts_from": None,
                                         "data_version_ts_to": None}]
    assert row["id_changes"] == [{"t": 90.0, "from": 0, "to": 1}] and row["role"] == "SLAVE"
    later = broker_summary("10.0.0.1:10911", [event(1010.0, "b", register, True, 9, broker_id=0, topics_held=9),
                                              event(1070.0, "b", register, True, 9, broker_id=0, topics_held=9)],
                           bins)
    assert later["gaps"] == [{"from": 1070.0, "to": 1300.0, "seconds": 230.0, "expired": True, "open": True}]
    assert (later["interval_p50_s"], later["max_gap_s"], later["would_expire"], later["ended"]) == (
        60.0, 230.0, 1, "expired")
    assert later["session"] != row["session"] and later["session"].endswith("@1970-01-01T00:16:40Z")
    assert bins.of(99.0) < bins.first_bin[1] <= bins.of(1000.0) and bins.of(1300.0) == bins.first_bin[2] - 1


def test_how_a_brokers_story_ends() -> None:
    """A connection closing while the broker is registered is a close (crash or kill), noted with
    when it came back; one after UNREGISTER_BROKER is a clean stop; the silence after the last
    heartbeat counts in max_gap_s, and says alive, near expiry or expired."""
    register, unregister = RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER
    bins = TimeBins.over([(0.0, 200.0)])
    closed = {"closed": "fin from client", "server": "10.0.0.9:9876"}
    killed = broker_summary("10.0.0.1:10911", [event(10.0, "b", register, True, 3, broker_id=0),
                                               event(40.0, "b", register, True, 3, broker_id=0),
                                               event(45.0, "b", CONNECTION_CLOSED, False, **closed),
                                               event(100.0, "b", register, True, 3, broker_id=0),
                                               event(130.0, "b", register, True, 3, broker_id=0),
                                               event(150.0, "b", CONNECTION_CLOSED, False, **closed)], bins)
    assert killed["ended"] == "connection_closed" and killed["connection_closes"] == 2
    assert [(c["t"], c["last_alive"], c["back"], c["how"]) for c in killed["closes"]] == [
        (45.0, 40.0, 100.0, "fin from client"), (150.0, 130.0, None, "fin from client")]
    assert killed["max_gap_s"] == 30.0 and killed["last_seen"] == 130.0  # no silence after a close
    stopped = broker_summary("10.0.0.1:10911", [event(10.0, "b", register, True, 3, broker_id=0),
                                                event(20.0, "b", unregister, False),
                                                event(20.5, "b", CONNECTION_CLOSED, False, **closed)], bins)
    assert (stopped["ended"], stopped["closes"], stopped["max_gap_s"]) == ("unregistered", [], None)
    for last, ended in ((170.0, "alive"), (120.0, "near_expiry"), (70.0, "expired")):
        row = broker_summary("10.0.0.1:10911", [event(10.0, "b", register, True, 3, broker_id=0),
                                                event(last, "b", register, True, 3, broker_id=0)], bins)
        assert (row["ended"], row["max_gap_s"]) == (ended, max(200.0 - last, last - 10.0)), last


def test_a_nameserver_restarted_within_a_file_starts_a_session() -> None:
    """Every open connection closed by the server within a second, then a new one: a restart, and
    the new session starts at its SYN. Not one where a connection goes on through the moment, nor
    where the last connection open was closed by its client (a broker or client stopping)."""
    server, broker, client, back = "10.0.0.9:9876", "10.0.0.1:40000", "10.0.0.2:50000", "10.0.0.1:40001"

    def ends(*connections: tuple[str, ConnectionEnds]) -> dict[str, dict[tuple[str, str], ConnectionEnds]]:
        return {"a.pcap": {tuple(sorted((peer, server))): found for peer, found in connections}}

    gone = (broker, ConnectionEnds(0.0, False, 100.0002, False, 100.0, True))
    client_gone = (client, ConnectionEnds(5.0, True, 100.3, False, 100.3, True))
    later = (back, ConnectionEnds(104.0, True, 300.0, False))
    assert restarts_within(ends(gone, client_gone, later), 9876) == {104.0: 100.3}
    # the client left long before (its own close): the broker's connection is what was open
    left = (client, ConnectionEnds(5.0, True, 50.0, False, 50.0, False))
    assert restarts_within(ends(gone, left, later), 9876) == {104.0: 100.0002}
    stopped = (broker, ConnectionEnds(0.0, False, 100.0002, False, 100.0, False))  # the broker closed it
    assert restarts_within(ends(stopped, client_gone, later), 9876) == {}
    stays = (client, ConnectionEnds(5.0, True, 250.0, False))  # goes on through the moment
    assert restarts_within(ends(gone, stays, later), 9876) == {}
    assert restarts_within(ends(gone, client_gone), 9876) == {}  # nothing new: the capture's end
    # the file's span is cut there, into two periods the first of which the restart ended
    periods = capture_periods([(0.0, 300.0)], cuts={104.0: 100.3})
    assert periods == [(0.0, 100.3), (104.0, 300.0)]
    bins = TimeBins.over(periods, frozenset({100.3}))
    assert bins.restarted == (True, False) and bins.ended_by_restart(100.0) and not bins.ended_by_restart(99.0)
    # the broker's connection closed by the server as it went away ends its story as alive, not
    # as a crash; the same close in a period that did not end with a restart is one
    register = RequestCode.REGISTER_BROKER
    events = [event(70.0, "b", register, True, 3, broker_id=0), event(95.0, "b", register, True, 3, broker_id=0),
              event(100.0, "b", CONNECTION_CLOSED, False, closed="fin from server", server=server)]
    row = broker_summary("10.0.0.1:10911", [dict(e) for e in events], bins)
    assert (row["ended"], row["closes"], row["max_gap_s"]) == ("alive", [], 25.0)
    row = broker_summary("10.0.0.1:10911", [dict(e) for e in events], TimeBins.over(periods))
    assert (row["ended"], row["connection_closes"]) == ("connection_closed", 1)


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


def test_tasks_cut_big_files_and_combine_small_ones(tmp_path: Path) -> None:
    files = [CaptureFile(f"f{i}", size, i) for i, size in enumerate([10, 250, 30, 40, 50])]
    tasks = plan_tasks(files, 100)
    assert [[(s.file.path, s.start, s.stop) for s in task] for task in tasks] == [
        [("f1", 0, 100)], [("f1", 100, 200)], [("f1", 200, 250)],
        [("f0", 0, 10), ("f2", 0, 30), ("f3", 0, 40), ("f4", 0, 50)]]


def test_inputs_expand_directories_and_globs(tmp_path: Path) -> None:
    for name in ("a/1.pcap", "a/.hidden.pcap", "a/_SUCCESS", "a/b/2.pcap", "c.pcap"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x" * len(name))
    found = discover([str(tmp_path / "a"), str(tmp_path / "*.pcap"), str(tmp_path / "c.pcap")], lambda uri: [])
    assert [(Path(f.path).relative_to(tmp_path).as_posix(), f.size, f.index) for f in found] == [
        ("a/1.pcap", 8, 0), ("a/b/2.pcap", 10, 1), ("c.pcap", 6, 2)]
    with pytest.raises(FileNotFoundError):
        discover([str(tmp_path / "missing*")], lambda uri: [])


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
