"""The Spark job end to end: exact counts on the shared captures of real Java traffic and on a
synthetic capture whose truth is known, the same result however a file is cut into byte ranges,
and the path for files on other filesystems (Hadoop listing, whole-file reads, Spark's writer).

Kept to four small jobs on one shared session: CI has two cores."""

from __future__ import annotations

import gzip
import os
import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

from spark_analysis.capture import inputs
from spark_analysis.capture.conversation import read_conversations
from spark_analysis.capture.records import read_records
from spark_analysis.model.periods import EXPIRY_SECONDS
from tests.spark.conftest import Outputs, evidence_of, run_job, without_input
from tests.support import capture
from twisted_namesrv.remoting import RequestCode
from twisted_namesrv.remoting.codes import code_name

# The output contract of issue 3, written out here independently of spark_analysis/schema.py.
FRAME_COLUMNS = ["ts", "conn_id", "client", "server", "direction", "code", "code_name", "opaque", "flag", "oneway",
                 "version", "version_name", "language", "serialize_type", "remark", "ext", "body_len", "missing",
                 "input", "session"]
CALL_COLUMNS = ["ts", "conn_id", "client", "code", "code_name", "opaque", "response_code", "latency_ms", "oneway",
                "topic", "response_remark", "server", "broker_addr", "cut", "input", "session"]
REGISTRATION_COLUMNS = ["ts", "conn_id", "cluster", "broker_name", "broker_addr", "broker_id", "ha_server_addr",
                        "compressed", "body_len", "crc_declared", "crc_ok", "topic_count", "data_version_counter",
                        "data_version_ts", "filter_servers", "response_code", "version_name", "server",
                        "input", "session"]
BROKER_COLUMNS = ["session", "server", "input",
                  "cluster", "broker_name", "broker_id", "role", "broker_addr", "version", "first_seen", "last_seen",
                  "registrations", "refused_registrations", "crc_failures", "interval_p50_s", "interval_p90_s",
                  "interval_p99_s", "max_gap_s", "near_expiry", "would_expire", "body_len_min", "body_len_median",
                  "body_len_max", "compressed", "topic_count_first", "topic_count_last", "topic_count_max",
                  "unregistered", "ended", "ended_at", "connection_closes", "across_clock_step"]


@dataclass(frozen=True)
class Expected:
    registrations: dict[str, int]  # REGISTER_BROKER requests per brokerAddr
    unregisters: dict[str, int]  # UNREGISTER_BROKER requests per brokerAddr
    crc_ok: dict[bool | None, int]  # registrations/ crc_ok values
    unanswered: dict[str, int]  # requests without an answer, by code name
    still_registered: set[str]  # brokers whose last word was not UNREGISTER_BROKER



# From each file's README and steps: the probe registers broker-probe master 127.0.0.1:20911
# three times - bodyCrc32 the unmasked CRC (> 2**31: Java's Integer parse fails, no check, so
# crc_ok is None), then 12345 (refused: crc_ok False), then 0 (no check: None) - and its slave
# 20921 once (True); every Java broker's CRC is right. Unregistered: the probe's two brokers,
# broker-b (clean stop) and broker-a (stop); the slave 10931 is killed. Unanswered (4.9.8): code
# 9999, the probe's oneway route query and the brokers' oneway registrations after auto-created
# topics. How often the Java brokers registered depends on timing; those counts come from the
# captures and are checked against the single-process path below.
_PROBE_498 = {"127.0.0.1:20911": 3, "127.0.0.1:20921": 1}
_UNREGISTERS_498 = {"127.0.0.1:10911": 1, "127.0.0.1:10921": 1, "127.0.0.1:20911": 1, "127.0.0.1:20921": 1}
_STILL_498 = {"127.0.0.1:10931"}
_LIFECYCLE = Expected(
    {"127.0.0.1:10911": 11, "127.0.0.1:10921": 9, "127.0.0.1:10931": 6, **_PROBE_498}, _UNREGISTERS_498,
    {True: 27, False: 1, None: 2}, {"REGISTER_BROKER": 5, "GET_ROUTEINFO_BY_TOPIC": 1, "9999": 1}, _STILL_498)
EXPECTED = {
    "json_lifecycle.pcap": _LIFECYCLE,
    "binary_lifecycle.pcap": _LIFECYCLE,
    "compressed_bulk.pcap": Expected(
        {"127.0.0.1:10911": 7, "127.0.0.1:10921": 5, "127.0.0.1:10931": 5, **_PROBE_498}, _UNREGISTERS_498,
        {True: 18, False: 1, None: 2}, {"REGISTER_BROKER": 5, "GET_ROUTEINFO_BY_TOPIC": 1, "9999": 1}, _STILL_498),
    # 5.3.3: broker-5a registers twice, its slave, 5b, 5c and the refused 4.9.8-style broker once; the
    # slave unregisters; the oneway BROKER_HEARTBEAT is the only request without an answer; 127.0.0.1:1
    # is the unknown broker of a QUERY_DATA_VERSION.
    "v5_probe.pcap": Expected(
        {"127.0.0.1:50911": 2, "127.0.0.1:50921": 1, "127.0.0.1:51911": 1, "127.0.0.1:52911": 1,
         "127.0.0.1:53911": 1}, {"127.0.0.1:50921": 1}, {True: 6}, {"BROKER_HEARTBEAT": 1},
        {"127.0.0.1:50911", "127.0.0.1:51911", "127.0.0.1:52911", "127.0.0.1:53911", "127.0.0.1:1"}),
}


def single_process_counts(path: Path) -> dict[str, Counter]:
    """The same facts from the replay test's path (read_conversations), without Spark: CRC failures
    as the NameServer answered them, unanswered requests by opaque."""
    counts: dict[str, Counter] = {name: Counter() for name in ("registrations", "unregisters", "unanswered")}
    counts["totals"] = Counter()
    for conversation in read_conversations(path):
        answers = conversation.responses_by_opaque()
        counts["totals"]["frames"] += len(conversation.commands)
        for captured in conversation.requests():
            command = captured.command
            answer = answers.get(command.opaque)
            if answer is None:
                counts["unanswered"][code_name(command.code)] += 1
            if command.code == RequestCode.REGISTER_BROKER:
                counts["registrations"][command.ext["brokerAddr"]] += 1
                counts["totals"]["crc_refused"] += answer is not None and answer.command.remark == "crc32 not match"
            elif command.code == RequestCode.UNREGISTER_BROKER:
                counts["unregisters"][command.ext["brokerAddr"]] += 1
    return counts


def test_counts_on_shared_captures(spark, tmp_path: Path) -> None:
    """One job over the four captures (their times do not overlap, which attributes every row to
    its capture); each capture's counts as expected and as the single-process path finds them."""
    paths = {name: capture(name) for name in sorted(EXPECTED)}
    out = run_job(spark, [str(path) for path in paths.values()], tmp_path, report=False)
    spans = {name: (records[0].ts, records[-1].ts) for name, records in
             ((name, read_records(path)) for name, path in paths.items())}

    def of(name: str, rows: list[dict]) -> list[dict]:
        first, last = spans[name]
        return [row for row in rows if first <= row["ts"] <= last]

    for name, expected in EXPECTED.items():
        single = single_process_counts(paths[name])
        frames, calls, registrations = of(name, out.frames), of(name, out.calls), of(name, out.registrations)
        registered = Counter(r["broker_addr"] for r in registrations)
        assert registered == expected.registrations == single["registrations"], name
        unregisters = Counter(f["ext"]["brokerAddr"] for f in frames
                              if f["direction"] == "request" and f["code"] == RequestCode.UNREGISTER_BROKER)
        assert unregisters == expected.unregisters == single["unregisters"], name
        assert Counter(r["crc_ok"] for r in registrations) == expected.crc_ok, name
        assert sum(r["crc_ok"] is False for r in registrations) == single["totals"]["crc_refused"], name
        assert Counter(c["code_name"] for c in calls if c["response_code"] is None) == expected.unanswered, name
        assert Counter(c["code_name"] for c in calls if c["latency_ms"] is None) == single["unanswered"], name
        assert len(frames) == single["totals"]["frames"], name
    assert sum(len(of(name, out.frames)) for name in EXPECTED) == len(out.frames)

    # Broker addresses recur across the 4.9.8 captures, of clusters that are not the same: each
    # capture is a session of its own (no connection goes on from one file to the next), brokers.csv
    # has a row per broker and session; an address only named by a QUERY_DATA_VERSION
    # (127.0.0.1:1) never registered and has no row.
    sessions = {b["session"] for b in out.brokers}
    assert len(sessions) == len(EXPECTED) and all(s.startswith("127.0.0.1:9876@") for s in sessions)
    for name, expected in EXPECTED.items():
        brokers = {b["broker_addr"]: b for b in out.brokers if b["input"] == str(paths[name])}
        assert {a: int(b["registrations"]) for a, b in brokers.items()} == expected.registrations, name
        assert {a for a, b in brokers.items() if b["unregistered"] == "false"} == (
            expected.still_registered - {"127.0.0.1:1"}), name
        assert len({b["session"] for b in brokers.values()}) == 1, name
    assert out.summary["addresses_never_registered"] == ["127.0.0.1:1"]
    lifecycle = {b["broker_addr"]: b for b in out.brokers if b["input"] == str(paths["json_lifecycle.pcap"])}
    assert (lifecycle["127.0.0.1:10911"]["role"], lifecycle["127.0.0.1:10931"]["role"]) == ("MASTER", "SLAVE")
    bulk = {b["broker_addr"]: b for b in out.brokers if b["input"] == str(paths["compressed_bulk.pcap"])}
    assert (bulk["127.0.0.1:10911"]["body_len_max"], bulk["127.0.0.1:10921"]["body_len_min"]) == ("8534", "84")
    # what the NameServer held for broker-a at the end: TopicDel, made and then deleted (steps: deleteTopic), is
    # not held any more (the replay applies the deletion; its next table, without TopicDel, does not bring it back)
    assert bulk["127.0.0.1:10911"]["topic_count_last"] == "3012"
    # how each broker's story ended (the steps files): broker-b stops cleanly, broker-a's slave is
    # killed (kill9), broker-a stops, the probe unregisters its two; in 5.3.3 the slave unregisters,
    # the other brokers' connections close, the 4.9.8-style broker was refused
    assert {(b["broker_addr"], b["ended"]) for b in out.brokers if b["input"] != str(paths["v5_probe.pcap"])} == {
        ("127.0.0.1:10911", "unregistered"), ("127.0.0.1:10921", "unregistered"),
        ("127.0.0.1:10931", "connection_closed"), ("127.0.0.1:20911", "unregistered"),
        ("127.0.0.1:20921", "unregistered")}
    assert {b["broker_addr"]: b["ended"] for b in out.brokers if b["input"] == str(paths["v5_probe.pcap"])} == {
        "127.0.0.1:50911": "connection_closed", "127.0.0.1:50921": "unregistered",
        "127.0.0.1:51911": "connection_closed", "127.0.0.1:52911": "connection_closed",
        "127.0.0.1:53911": "refused"}

    # What the findings say of these captures (their README): the killed slave in each 4.9.8
    # capture and the 5.3.3 brokers whose connections closed, every non-zero answer by code, the
    # probe's three CRC failures (one a capture), 5.3.3's refusal of a 4.9.8-style broker, the
    # 4.9.8 NameServer never answering code 9999, the two connections per 4.9.8 capture Java closed
    # for bytes that are no frame; no broker came near the expiry; no restart, role flip, move or
    # topic loss (those would compare captures of other clusters). One finding per problem, each
    # answer said once (TOPIC_NOT_EXIST and refused registrations not again as response_code); the
    # consumer's %RETRY% lookup at start-up is information.
    answers = Counter()
    for row in out.summary["response_codes"]:
        answers[row["response_code"]] += row["count"]
    assert answers == {17: 25, 22: 9, 16: 5, 1: 4, 3: 1}
    # the probes' lookups of a topic they had just deleted (ProbeTopicB, SharedTopic5), or whose only broker had
    # just closed its connection (ZoneTopic5), are told under that deletion or close, not as unknown topics
    assert out.summary["attention"] == (
        "3 critical: 4 brokers whose connection closed without unregistering, 1 broker failing the body CRC, "
        "1 broker refused registration · 7 warnings: 4 unknown topics, 4 kinds of error answer, 1 request code never "
        "answered, 6 undecodable connections")
    tied = {(item["kind"], lookup["topic"]) for f in out.summary["findings"] for item in f["evidence"]
            for lookup in item.get("failed_lookups", ())}
    assert tied == {("topic_deleted", "ProbeTopicB"), ("topic_deleted", "SharedTopic5"),
                    ("broker_connection_closed", "ZoneTopic5")}
    told_by_the_replay = ("topic_deleted", "topics_deleted_from_broker", "write_perm_wiped", "write_perm_added",
                          "refused_connections")
    assert [(f["kind"], f["subject"], len(f["evidence"])) for f in out.summary["findings"]
            if f["kind"] not in told_by_the_replay] == [
        ("broker_connection_closed", None, 6), ("crc_failure", None, 3), ("registration_refused", None, 1),
        ("topic_not_exist", None, 11), ("response_code", "GET_KV_CONFIG QUERY_NOT_FOUND", 2),
        ("response_code", "UPDATE_NAMESRV_CONFIG NO_PERMISSION", 1),
        ("response_code", "GET_KVLIST_BY_NAMESPACE QUERY_NOT_FOUND", 1),
        ("response_code", "9999 REQUEST_CODE_NOT_SUPPORTED", 1), ("unanswered", "9999", 3),
        ("undecodable_connection", None, 6), ("retry_topic_lookup", None, 3), ("broker_unregistered", None, 13)]
    found = [item for f in out.summary["findings"] for item in f["evidence"]]
    kill = STEPS_KILL9
    killed = sorted((f["broker_addr"], f["t"][:19]) for f in found if f["kind"] == "broker_connection_closed"
                    and f["broker_addr"] == "127.0.0.1:10931")
    assert killed == sorted(("127.0.0.1:10931", t) for t in kill.values())
    assert [(f["broker_addr"], f["count"]) for f in found if f["kind"] == "crc_failure"] == [
        ("127.0.0.1:20911", 1)] * 3
    assert [(f["broker_addr"], f["count"]) for f in found if f["kind"] == "registration_refused"] == [
        ("127.0.0.1:53911", 1)]
    assert Counter((f["code_name"], f["count"]) for f in found if f["kind"] == "unanswered") == {("9999", 1): 3}
    # every TOPIC_NOT_EXIST said once: as a client's, or under the cause the replay saw
    assert sum(f["count"] for f in found if f["kind"] in ("topic_not_exist", "retry_topic_lookup")) + sum(
        lookup["count"] for f in found for lookup in f.get("failed_lookups", ())) == answers[17]
    nosuch = Counter(f["topic"] for f in found if f["kind"] in ("topic_not_exist", "retry_topic_lookup"))
    assert nosuch["NoSuchTopic"] == 6 and nosuch["%RETRY%cgA"] == 3

    # the clients table: every connection's client, its language and version, lookups and errors
    talkers = out.summary["clients"]
    assert {(c["language"], c["version"]) for c in talkers} >= {("CPP", "V3_1_8"), ("JAVA", "V4_9_8"),
                                                                 ("JAVA", "V5_3_3")}
    assert sum(c["lookups"] for c in talkers) == sum(c["code_name"] == "GET_ROUTEINFO_BY_TOPIC" for c in out.calls)
    assert sum(c["errors"] for c in talkers) == sum(row["count"] for row in out.summary["response_codes"])
    assert {c["client"] for c in talkers if c["role"] == "broker"} == {
        r["conn_id"].partition(">")[0] for r in out.registrations}
    assert (Path(out.out) / "clients.csv").read_text().count("\n") == len(talkers) + 1

    # each capture alone says what it says among the others
    for name in ("json_lifecycle.pcap", "v5_probe.pcap"):
        alone = run_job(spark, [str(paths[name])], tmp_path / f"alone-{name}", report=False)
        mine = {b["session"] for b in out.brokers if b["input"] == str(paths[name])}
        assert [b for b in out.brokers if b["session"] in mine] == alone.brokers, name
        assert evidence_of(out.summary, mine) == evidence_of(alone.summary, mine), name


#: when broker-a's slave was killed (SIGKILL) in each 4.9.8 capture: its connection's FIN, as the
#: steps files order it (after broker-b's stop, before clusterList), to the second
STEPS_KILL9 = {"json_lifecycle.pcap": "2026-11-22T06:19:47", "binary_lifecycle.pcap": "2026-11-22T06:22:17",
               "compressed_bulk.pcap": "2026-11-22T06:24:45"}


def test_output_columns_follow_the_contract(synthetic_outputs: Outputs) -> None:
    assert list(synthetic_outputs.frames[0]) == FRAME_COLUMNS
    assert list(synthetic_outputs.calls[0]) == CALL_COLUMNS
    assert list(synthetic_outputs.registrations[0]) == REGISTRATION_COLUMNS
    assert list(synthetic_outputs.brokers[0]) == BROKER_COLUMNS


def test_synthetic_capture_matches_its_truth(synthetic, synthetic_outputs: Outputs) -> None:
    path, truth = synthetic
    out = synthetic_outputs
    assert all(truth["injected"][kind] > 0 for kind in
               ("capture_losses", "reorderings", "retransmissions", "heartbeat_silences")), truth["injected"]
    assert out.counts["gaps"] > 0 and out.counts["lost_bytes"] > 0
    requests = [f for f in out.frames if f["direction"] == "request"]
    assert (len(out.frames), len(requests), out.counts["connection"]) == (
        truth["frames"], truth["requests"], truth["connections"])
    assert Counter(f["code_name"] for f in requests) == truth["requests_by_code"]
    assert sum(c["response_code"] is None for c in out.calls) == truth["unanswered"]
    assert sum(r["crc_ok"] is False for r in out.registrations) == truth["crc_failures"]

    # brokers.csv has a row per stay (the replay ends one at a close, an unregistration or an
    # expiry): what the generator says of an address is what its stays say together
    stays: dict[str, list[dict]] = {}
    for row in out.brokers:
        stays.setdefault(row["broker_addr"], []).append(row)
    assert set(stays) == set(truth["brokers"])
    for addr, known in truth["brokers"].items():
        rows = sorted(stays[addr], key=lambda r: r["first_seen"])
        last = rows[-1]
        assert sum(int(r["registrations"]) for r in rows) == known["registrations"], addr
        assert int(last["topic_count_last"]) == known["last_topic_count"], addr
        assert any(r["ended"] == "expired" for r in rows) == known["would_expire"], addr
        assert last["unregistered"] == str(known["unregistered"]).lower(), addr
        ended = "expired" if known["ended"] == "expired" else known["ended"]
        assert (last["ended"], sum(int(r["connection_closes"]) for r in rows)) == (ended, len(known["closes"])), addr
        # a silence past the expiry is the 120 s after which the NameServer drops the broker
        expected_gap = min(known["max_gap_s"], EXPIRY_SECONDS) if known["would_expire"] else known["max_gap_s"]
        assert max(float(r["max_gap_s"] or 0) for r in rows) == pytest.approx(expected_gap, abs=1e-3), addr
        if len(rows) == 1:
            assert float(last["interval_p50_s"]) == pytest.approx(known["median_interval_s"], abs=1e-3), addr
        assert seconds(rows[0]["first_seen"]) == pytest.approx(known["first_seen"], abs=1e-6), addr
        assert max(seconds(r["last_seen"]) for r in rows) == pytest.approx(known["last_seen"], abs=1e-6), addr

    report = Path(out.out, "report.html").read_text()
    assert len(re.findall(r'<div id="plot-[a-z]+" class="plotly-graph-div"', report)) == 5
    assert report.count("plotly.js v") == 1  # inlined once: no CDN
    assert "<script src=" not in report


def test_byte_ranges_cut_anywhere_give_the_unsplit_result(spark, synthetic, synthetic_outputs: Outputs,
                                                          tmp_path: Path) -> None:
    path, _ = synthetic
    split_size = path.stat().st_size // 40 + 17  # 41 ranges, cut at arbitrary offsets inside records
    split = run_job(spark, [str(path)], tmp_path, split_size=split_size, report=False)
    assert split.counts["records"] == synthetic_outputs.counts["records"]
    assert same_rows(split, synthetic_outputs)
    # the ranges together find the file's span and its last record cut short, as one task does
    assert split.summary["inputs"] == synthetic_outputs.summary["inputs"]
    assert synthetic_outputs.summary["inputs"]["files"][0]["problem"] == "truncated"


def test_other_filesystems_are_listed_read_and_written_through_hadoop(spark, synthetic, synthetic_outputs: Outputs,
                                                                     tmp_path: Path, monkeypatch) -> None:
    local = inputs.is_local
    monkeypatch.setattr(inputs, "is_local", lambda path: not path.startswith("file:") and local(path))
    path, _ = synthetic
    remote = run_job(spark, [f"file://{path.parent}"], f"file://{tmp_path}", report=False)
    # there Spark writes the tables; for a local output the decoding tasks did: the same files
    assert same_rows(remote, synthetic_outputs)
    assert same_brokers(remote, synthetic_outputs)
    # the directory also holds the truth, named for what it is; the capture is found as by ranges
    truth, read_whole = sorted(remote.summary["inputs"]["files"], key=lambda f: f["path"], reverse=True)
    assert (truth["path"].endswith("synthetic.truth.json"), truth["problem"]) == (True, "not a capture")
    [read_by_range] = synthetic_outputs.summary["inputs"]["files"]
    assert {**read_whole, "path": None} == {**read_by_range, "path": None}
    for name in ("frames", "calls", "registrations"):
        assert spark.read.parquet(f"{remote.out}/{name}").schema == spark.read.parquet(
            f"{synthetic_outputs.out}/{name}").schema, name


def test_gzip_captures_are_read_whole_and_inflated(spark, synthetic, synthetic_outputs: Outputs,
                                                   tmp_path: Path) -> None:
    """A capture as tcpdump -z gzip leaves it gives the rows of the capture itself; a .gz that is no
    gzip is named for what it is."""
    path, _ = synthetic
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "synthetic.pcap.gz").write_bytes(gzip.compress(path.read_bytes()))
    (tmp_path / "in" / "notes.pcap.gz").write_text("not gzip\n")
    inflated = run_job(spark, [str(tmp_path / "in")], tmp_path / "out", report=False)
    assert same_rows(inflated, synthetic_outputs)
    assert same_brokers(inflated, synthetic_outputs)
    notes, capture = sorted(inflated.summary["inputs"]["files"], key=lambda f: f["path"])
    assert (Path(notes["path"]).name, notes["problem"]) == ("notes.pcap.gz", "not a capture")
    [plain] = synthetic_outputs.summary["inputs"]["files"]
    assert capture["path"] == str(tmp_path / "in" / "synthetic.pcap.gz")
    assert {**capture, "path": None, "size": None} == {**plain, "path": None, "size": None}


def test_names_not_utf8_with_controls_or_long_are_read_and_named(spark, synthetic, synthetic_outputs: Outputs,
                                                                 tmp_path: Path) -> None:
    """``ns-\\xff.pcap`` (a name of bytes that are no UTF-8, as Linux allows) stopped the run: Arrow's
    text is UTF-8 (UnicodeEncodeError in the reading task, then in the tables' ``input``). A gzip
    capture with a name of 248 bytes was not inflated: its spool copy's name, the input's with a
    prefix and a suffix, was past the 255 bytes a name may have. Both are read now; summary.json names
    each exactly (``os.fsencode`` of its path gives the bytes back), the tables, brokers.csv and the
    page with its bytes and controls escaped."""
    path, _ = synthetic
    folder = os.fsencode(tmp_path / "in")
    os.mkdir(folder)
    plain = os.path.join(folder, b"ns-\xff\n\x1b[31m.pcap")
    long = os.path.join(folder, b"L" * 240 + b"\xfe.pcap.gz")
    with open(plain, "wb") as f:
        f.write(path.read_bytes())
    with open(long, "wb") as f:
        f.write(gzip.compress(capture("v5_probe.pcap").read_bytes()))
    odd = run_job(spark, [str(tmp_path / "in")], tmp_path / "out")
    files = {os.fsencode(f["path"]): f for f in odd.summary["inputs"]["files"]}
    [synthetic_file] = synthetic_outputs.summary["inputs"]["files"]
    assert set(files) == {plain, long} and files[long]["problem"] is None and files[long]["records"]
    assert {**files[plain], "path": None} == {**synthetic_file, "path": None}
    shown = inputs.shown_name(os.fsdecode(plain))
    assert shown.endswith("/ns-\\udcff\\n\\x1b[31m.pcap")
    assert {row["input"] for row in odd.frames} == {shown, inputs.shown_name(os.fsdecode(long))}
    assert sum(row["input"] == shown for row in odd.frames) == len(synthetic_outputs.frames)
    assert {row["input"] for row in odd.brokers} >= {shown}
    page = Path(odd.out, "report.html").read_text()
    assert "\x1b" not in page and "ns-\\udcff\\n\\x1b[31m.pcap" in page


def same_rows(a: Outputs, b: Outputs) -> bool:
    """The same tables, read from input files of any name."""
    def table(rows: list[dict]) -> list[str]:
        return sorted(repr(sorted(without_input(row).items())) for row in rows)

    return all(table(x) == table(y) for x, y in ((a.frames, b.frames), (a.calls, b.calls),
                                                 (a.registrations, b.registrations)))


def same_brokers(a: Outputs, b: Outputs) -> bool:
    return [without_input(row) for row in a.brokers] == [without_input(row) for row in b.brokers]


def seconds(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def test_a_failover_in_controller_mode_is_one_story_with_its_times(spark, tmp_path: Path) -> None:
    """v5_controller_failover: broker-c0 (127.0.0.1:28911), master, killed -9 at 16:45:23.171 (its
    steps file); the NameServer sees its connection close, the survivor takes brokerId 0, the
    killed broker comes back as slave: one fail-over (the master lost at the kill's time, how long
    the group had no master, the old master back as slave), no role flips told apart from it, no
    restart or topic loss invented. The NameServer (28876) and the controller (28878) are found
    from their traffic, without --port."""
    out = run_job(spark, [str(capture("v5_controller_failover.pcapng"))], tmp_path, report=False)
    assert [e["endpoint"] for e in out.summary["nameservers"]] == ["127.0.0.1:28876"]
    assert [e["endpoint"] for e in out.summary["controllers"]] == ["127.0.0.1:28878"]
    found = [item for f in out.summary["findings"] for item in f["evidence"]]
    [failover] = [item for item in found if item["kind"] == "failover"]
    assert (failover["old_master"], failover["new_master"], failover["how_lost"]) == (
        "127.0.0.1:28911", "127.0.0.1:28921", "connection_closed")
    assert 0 <= seconds(failover["t"]) - seconds("2026-11-26T16:45:23.171Z") < 1.0
    assert 0 <= failover["no_master_s"] < 5.0 and failover["old_master_back_as_slave_at"] is not None
    assert not {item["kind"] for item in found} & {"data_version_backwards", "topic_count_drop", "broker_id_change",
                                                   "broker_address_change", "server_restart", "heartbeat_expired"}
