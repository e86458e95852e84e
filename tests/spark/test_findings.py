"""What the report says first: the findings on a synthetic capture are exactly what its generator
injected; the same outputs when the first attempt of tasks fails (no counts added twice); bad
inputs named, exit codes and refusals before Spark starts; the page in headless Chromium.

Two small jobs on the shared session (CI has two cores); the rest reuses the synthetic job."""

from __future__ import annotations

import base64
import html
import json
import os
import re
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pyarrow as pa
import pytest

from spark_analysis import __main__ as cli
from spark_analysis.analysis import findings as findings_module
from spark_analysis.capture import inputs
from spark_analysis.decode.rows import CALL
from spark_analysis.decode.schema import BROKER_COLUMNS
from spark_analysis.model.periods import EXPIRY_SECONDS, PERIOD_GAP_S, TimeBins
from spark_analysis.model.sessions import iso_time
from spark_analysis.model.tally import Tally
from spark_analysis.output import report, tables
from spark_analysis.spark import session
from spark_analysis.spark.worker import FAIL_FIRST_ATTEMPT
from tests.spark.conftest import SYNTH, Outputs, evidence_of, run_job, without_input
from tests.spark.test_report import same_rows
from tests.support import capture
from tests.web.test_status_page import ARTIFACTS, chromium


def kinds(summary: dict, kind: str) -> list[dict]:
    """The evidence of one kind of finding."""
    return [item for f in summary["findings"] if f["kind"] == kind for item in f["evidence"]]


def test_findings_are_what_the_generator_injected(synthetic, synthetic_outputs: Outputs) -> None:
    _, truth = synthetic
    summary = synthetic_outputs.summary
    assert summary["schema_version"] == 2
    assert truth["injected"]["heartbeat_silences"] and truth["injected"]["near_silences"]
    # a silence past the expiry ends the stay where the NameServer's scan drops the broker: 120 s in; one with
    # requests the capture lost in it is not told as an expiry (held_gaps): what the server heard is unknown
    gaps = {(addr, iso_time(a), iso_time(min(b, a + EXPIRY_SECONDS)), b - a > EXPIRY_SECONDS)
            for addr, broker in truth["brokers"].items() for a, b in broker["gaps"] if [a, b] not in
            broker["held_gaps"]} | {(addr, iso_time(a), iso_time(b), False) for addr, broker in truth["brokers"].items()
                                    for a, b in broker["held_gaps"]}
    found = {(f["broker_addr"], f["from"], f["to"], f["kind"] == "heartbeat_expired")
             for f in kinds(summary, "heartbeat_expired") + kinds(summary, "heartbeat_near_expiry")}
    assert found == gaps and any(expired for *_, expired in gaps) and not all(expired for *_, expired in gaps)
    # a silence around registrations the capture lost is the capture's: information, not a silent broker
    missed = {(f["broker_addr"], f["from"], f["to"], f["severity"]) for f in kinds(summary, "silence_not_captured")}
    assert missed == {(addr, iso_time(a), iso_time(b), "info") for addr, broker in truth["brokers"].items()
                      for a, b in broker["capture_gaps"]} != set()
    assert {f["broker_addr"]: f["count"] for f in kinds(summary, "crc_failure")} == {
        addr: b["crc_failures"] for addr, b in truth["brokers"].items() if b["crc_failures"]} != {}
    assert {f["broker_addr"]: f["count"] for f in kinds(summary, "registration_refused")} == {
        addr: b["refused_other"] for addr, b in truth["brokers"].items() if b["refused_other"]} != {}
    answers: Counter = Counter()
    for row in summary["response_codes"]:
        answers[f"{row['code_name']} {row['response_code']}"] += row["count"]
    assert answers == truth["response_codes"]
    assert {f"{f['topic']} {f['client']}": f["count"] for f in kinds(summary, "topic_not_exist")} == truth[
        "topic_not_exist"] != {}
    unanswered: Counter = Counter()
    for f in kinds(summary, "unanswered"):
        unanswered[f["code_name"]] += f["count"]
    assert unanswered == truth["unanswered_expected"]
    # the generator stopped the capture while writing its last packet: the file is named for it
    assert [(f["kind"], f["problem"], f["severity"]) for f in kinds(summary, "bad_input")] == [
        ("bad_input", "truncated", "warning")]
    # each answer said once: unknown topics and refused registrations are not also response_code
    assert not kinds(summary, "response_code")
    assert sum(f["count"] for f in kinds(summary, "topic_not_exist")) == truth["response_codes"][
        "GET_ROUTEINFO_BY_TOPIC 17"]
    assert sum(f["count"] for f in kinds(summary, "crc_failure") + kinds(summary, "registration_refused")) == sum(
        n for key, n in truth["response_codes"].items() if key.startswith("REGISTER_BROKER "))
    # one finding per problem, most severe first, counted in the line at the top
    problems = [(f["kind"], f["subject"]) for f in summary["findings"]]
    unanswered_codes = sorted(truth["unanswered_expected"])
    assert [kind for kind, _ in problems] == [
        "broker_connection_closed", "crc_failure", "registration_refused", "bad_input", "heartbeat_expired",
        "heartbeat_near_expiry", "topic_not_exist", *["unanswered"] * len(unanswered_codes),
        "began_mid_stream", "unpaired_error_answer", "silence_not_captured", "broker_unregistered",
        "broker_alive_at_end"]
    # the generator's broker 0 registers over a connection begun before the capture (no SYN)
    [begun] = kinds(summary, "began_mid_stream")
    assert (begun["broker_connections"], begun["brokers"]) == (1, 1)
    # the TOPIC_NOT_EXIST answers captured whose lookups the capture lost: said, not as unknown topics
    captured = sum(1 for f in synthetic_outputs.frames if f["code"] == 17 and f["flag"] & 1)
    assert [(f["response_code"], f["count"]) for f in kinds(summary, "unpaired_error_answer")] == [
        (17, captured - truth["response_codes"]["GET_ROUTEINFO_BY_TOPIC 17"])] != [(17, 0)]
    assert sorted(subject for kind, subject in problems if kind == "unanswered") == unanswered_codes
    expired = len({a for a, b in truth["brokers"].items() for start, end in b["gaps"] if end - start > EXPIRY_SECONDS})
    assert summary["attention"].startswith(
        "3 critical: 2 brokers whose connection closed without unregistering, 2 brokers failing the body CRC, "
        "1 broker refused registration · ")
    assert f"1 bad input file, {expired} brokers expired by the NameServer ({EXPIRY_SECONDS} s of silence), " in (
        summary["attention"])
    [unknown] = [f for f in summary["findings"] if f["kind"] == "topic_not_exist"]
    asked = {key.split()[1] for key in truth["topic_not_exist"]}
    assert unknown["message"] == (f"TOPIC_NOT_EXIST for 1 topic from {len(asked)} clients: NoSuchTopic "
                                  f"({sum(truth['topic_not_exist'].values())}x, {len(asked)} clients)")
    # how each broker's story ended: killed ones (critical, with the time its connection closed
    # and when it came back), clean stops, the others alive at the end; a restart within the
    # capture is one; 5.x single-topic registrations lose no topics
    assert {f["broker_addr"]: (f["t"], f["registered_again"]) for f in kinds(summary, "broker_connection_closed")} == {
        addr: (iso_time(b["closes"][0]), None if b["ended"] == "connection_closed" else
               next(f["registered_again"] for f in kinds(summary, "broker_connection_closed")
                    if f["broker_addr"] == addr))
        for addr, b in truth["brokers"].items() if b["closes"]}
    assert all(f["registered_again"] is not None for f in kinds(summary, "broker_connection_closed")
               if truth["brokers"][f["broker_addr"]]["restarted"])
    # a broker killed and back is two stays (its counter starts over in the second): no version compared across
    assert not kinds(summary, "data_version_backwards") and {
        b["broker_addr"] for b in synthetic_outputs.brokers if b["ended"] == "connection_closed"} >= {
        addr for addr, b in truth["brokers"].items() if b["restarted"]} != set()
    assert {f["broker_addr"] for f in kinds(summary, "broker_unregistered")} == {
        addr for addr, b in truth["brokers"].items() if b["ended"] == "unregistered"}
    assert {f["broker_addr"] for f in kinds(summary, "broker_alive_at_end")} == {
        addr for addr, b in truth["brokers"].items() if b["ended"] == "alive"}
    assert not kinds(summary, "topic_count_drop") and truth["injected"]["single_topic_registrations"] > 0
    [closed] = [f for f in summary["findings"] if f["kind"] == "broker_connection_closed"]
    assert closed["severity"] == "critical" and "without UNREGISTER_BROKER" in closed["evidence"][0]["message"]
    [period] = summary["inputs"]["periods"]
    assert summary["inputs"]["gaps"] == [] and period["seconds"] > 0


def test_outputs_are_exact_when_first_attempts_fail(spark, synthetic, synthetic_outputs: Outputs, tmp_path) -> None:
    """Half the reading, decoding and liveness tasks fail once after sending output; Spark runs them
    again. Accumulators updated in those tasks would count the failed attempts too."""
    path, _ = synthetic
    spark.sparkContext.setLocalProperty(FAIL_FIRST_ATTEMPT, "read,decode,liveness")
    try:
        retried = run_job(spark, [str(path)], tmp_path, report=False)
    finally:
        spark.sparkContext.setLocalProperty(FAIL_FIRST_ATTEMPT, None)
    assert same_rows(retried, synthetic_outputs)
    assert retried.brokers == synthetic_outputs.brokers  # the same input: the same rows, input included
    assert retried.counts == synthetic_outputs.counts
    assert retried.summary == synthetic_outputs.summary


def test_clients_decoded_beside_the_replay_change_nothing_even_when_attempts_fail(
        spark, synthetic, synthetic_outputs: Outputs, tmp_path) -> None:
    """Every 4-tuple counted (``counted_cost=0``), so that those the bytes say are clients' are
    decoded beside the replay, in the liveness stage, their failed lookups judged on the driver by
    the replay's routes; half of each stage's first attempts fail once after sending output: the
    same tables (the clients' part files numbered after the others'), brokers, counts and summary."""
    path, _ = synthetic
    spark.sparkContext.setLocalProperty(FAIL_FIRST_ATTEMPT, "read,decode,liveness")
    try:
        split = run_job(spark, [str(path)], tmp_path, report=False, counted_cost=0)
    finally:
        spark.sparkContext.setLocalProperty(FAIL_FIRST_ATTEMPT, None)
    assert any("4-tuples guessed clients' decoded beside the replay" in line for line in split.progress)
    assert not any("replaying again" in line for line in split.progress)
    assert any(f["kind"] == "topic_not_exist" for f in synthetic_outputs.summary["findings"])  # lookups judged
    assert same_rows(split, synthetic_outputs)
    assert split.brokers == synthetic_outputs.brokers
    assert split.counts == synthetic_outputs.counts
    assert split.summary == synthetic_outputs.summary


def test_with_one_core_every_4_tuple_is_decoded_before_the_replay(
        spark, synthetic, synthetic_outputs: Outputs, tmp_path, monkeypatch) -> None:
    """With one core no core waits for the replay, so the guessed clients' 4-tuples are not split
    off to be decoded beside it (that costs a second scan of the pieces, its tasks and a union):
    every 4-tuple is decoded first, as counted (``counted_cost=0``), and the report is the same."""
    from pyspark import SparkContext

    monkeypatch.setattr(SparkContext, "defaultParallelism", property(lambda self: 1))
    path, _ = synthetic
    one = run_job(spark, [str(path)], tmp_path, report=False, counted_cost=0)
    assert not any("decoded beside the replay" in line for line in one.progress)
    assert same_rows(one, synthetic_outputs)
    assert (one.brokers, one.counts, one.summary) == (synthetic_outputs.brokers, synthetic_outputs.counts,
                                                      synthetic_outputs.summary)


def test_sessions_analysed_together_say_what_each_says_alone(spark, synthetic, synthetic_outputs: Outputs,
                                                             tmp_path: Path) -> None:
    """Another cluster captured 30 s after the synthetic capture, at the same addresses (other names,
    fewer topics, its own processes): one capture period, two sessions (no connection goes on).
    Together they give each session's brokers and findings as each capture alone does: no restart,
    moved address or lost topics from comparing the two."""
    path, truth = synthetic
    other = tmp_path / "other.pcap"
    subprocess.run([sys.executable, str(SYNTH), str(other), "--brokers", "4", "--clients", "2", "--topics", "5",
                    "--hours", "0.05", "--seed", "5", "--start", str(truth["capture"]["last_record"] + 30),
                    "--cluster", "OtherCluster", "--names", "other", "--ports", "7000"],
                   check=True, capture_output=True)
    alone = run_job(spark, [str(other)], tmp_path / "alone", report=False)
    both = run_job(spark, [str(path), str(other)], tmp_path / "both", report=False)
    assert len(both.summary["inputs"]["periods"]) == 2  # a new session, though within PERIOD_GAP_S
    assert both.summary["inputs"]["gaps"][0]["seconds"] < PERIOD_GAP_S
    assert both.summary["inputs"]["gaps"][0]["cause"] == "another session"
    sessions = {b["session"] for b in both.brokers}
    assert len(sessions) == 2 and {b["broker_addr"] for b in alone.brokers} < {
        b["broker_addr"] for b in synthetic_outputs.brokers}  # the same addresses
    for one in (synthetic_outputs, alone):
        mine = {b["session"] for b in one.brokers}
        assert [without_input(b) for b in both.brokers if b["session"] in mine] == [
            without_input(b) for b in one.brokers]
        assert evidence_of(both.summary, mine) == evidence_of(one.summary, mine)
    # nothing combined that neither says alone, but a neutral note on the addresses they share
    noted = {f["kind"] for f in both.summary["findings"]} - {
        f["kind"] for one in (synthetic_outputs, alone) for f in one.summary["findings"]}
    assert noted == {"address_in_sessions"}
    [note] = [f for f in both.summary["findings"] if f["kind"] == "address_in_sessions"]
    assert note["severity"] == "info" and {item["broker_addr"] for item in note["evidence"]} == {
        b["broker_addr"] for b in alone.brokers}
    assert "other sessions: not compared" in note["evidence"][0]["message"]


def test_rotated_files_give_the_whole_capture_s_story(spark, synthetic, synthetic_outputs: Outputs,
                                                      tmp_path: Path) -> None:
    """The synthetic capture rotated into three files, cut between records mid-connection: one
    session, the same brokers and the same findings (but for naming the files)."""
    path, _ = synthetic
    data = path.read_bytes()
    offsets, at = [], 24
    while at + 16 <= len(data):
        offsets.append(at)
        at += 16 + int.from_bytes(data[at + 8:at + 12], "little")
    cuts = [offsets[len(offsets) // 3], offsets[2 * len(offsets) // 3]]
    rotated = tmp_path / "rotated"
    rotated.mkdir()
    for index, (start, end) in enumerate(zip([24, *cuts], [*cuts, len(data)], strict=True)):
        (rotated / f"part{index}.pcap").write_bytes(data[:24] + data[start:end])
    parts = run_job(spark, [str(rotated)], tmp_path / "out", report=False)
    assert len(parts.summary["inputs"]["periods"]) == 1
    assert [without_input(b) for b in parts.brokers] == [without_input(b) for b in synthetic_outputs.brokers]
    assert {b["session"] for b in parts.brokers} == {b["session"] for b in synthetic_outputs.brokers}
    assert evidence_of(parts.summary) == evidence_of(synthetic_outputs.summary)


def test_a_nameserver_restarted_within_a_file_starts_a_new_session(spark, tmp_path: Path) -> None:
    """The NameServer restarts 40% into one capture: it closes every connection at once, and the
    brokers and clients come back on new connections. Two sessions, as the generator's truth says;
    a broker seen in both has a row in each, its story in the first ends alive (the server went
    away, the broker did not crash); the findings are each session's own (kills, silences, clean
    stops), with nothing compared across the restart."""
    path = tmp_path / "restart.pcap"
    subprocess.run([sys.executable, str(SYNTH), str(path), "--brokers", "5", "--clients", "2", "--topics", "5",
                    "--hours", "0.1", "--seed", "7", "--server_restart", "0.4"], check=True, capture_output=True)
    truth = json.loads(path.with_name("restart.truth.json").read_text())
    out = run_job(spark, [str(path)], tmp_path / "out", report=False)
    # the capture is one period; the restart is its endpoint's finding, and cuts its sessions
    assert len(out.summary["inputs"]["periods"]) == 1 and out.summary["inputs"]["gaps"] == []
    [restart] = kinds(out.summary, "server_restart")
    assert restart["server"] == truth["sessions"][1]["session"].split("@")[0] and restart["came_back"]
    expected = {(s["session"], addr): b for s in truth["sessions"] for addr, b in s["brokers"].items()}
    rows = {(b["session"], b["broker_addr"]): b for b in out.brokers}
    assert rows.keys() == expected.keys() and len({addr for _, addr in rows}) < len(rows)
    for key, broker in expected.items():
        row = rows[key]
        # alive when the server went away: its stay ends with the server (the replay's server_stopped)
        ended = "server_stopped" if key[0] == truth["sessions"][0]["session"] and broker["ended"] == "alive" else (
            broker["ended"])
        assert (row["ended"], int(row["registrations"]), row["first_seen"], row["last_seen"]) == (
            ended, broker["registrations"], iso_time(broker["first_seen"]),
            iso_time(broker["last_seen"])), key
        if ended == "server_stopped":  # its silence ends where the server went away, not at the period's end
            assert float(row["max_gap_s"]) <= broker["max_gap_s"] + 1e-3, key
        elif row["ended"] == "expired":  # the NameServer drops it after 120 s of that silence
            assert float(row["max_gap_s"]) == pytest.approx(min(broker["max_gap_s"], EXPIRY_SECONDS), abs=1e-3), key
        else:
            assert float(row["max_gap_s"]) == pytest.approx(broker["max_gap_s"], abs=1e-3), key
    found = {(f["session"], f["broker_addr"]) for f in kinds(out.summary, "broker_connection_closed")}
    assert found == {key for key, b in expected.items() if b["closes"]} != set()
    gaps = {(key, iso_time(a), iso_time(min(b, a + EXPIRY_SECONDS))) for key, broker in expected.items()
            for a, b in broker["gaps"]}
    assert {((f["session"], f["broker_addr"]), f["from"], f["to"]) for f in kinds(
        out.summary, "heartbeat_expired") + kinds(out.summary, "heartbeat_near_expiry")} == gaps != set()
    assert {(f["session"], f["broker_addr"]) for f in kinds(out.summary, "broker_alive_at_end")} == {
        key for key, b in expected.items() if b["ended"] == "alive" and key[0] != truth["sessions"][0]["session"]}
    assert {(f["session"], f["broker_addr"]) for f in kinds(out.summary, "broker_unregistered")} == {
        key for key, b in expected.items() if b["ended"] == "unregistered"} != set()
    changes = ("data_version_backwards", "broker_id_change", "broker_address_change", "topic_count_drop",
               "address_in_sessions")
    assert not [f for f in out.summary["findings"] if f["kind"] in changes]
    # rotated into files, one of them cut while the server was down: the whole file's story
    data = path.read_bytes()
    offsets, at = [], 24
    while at + 16 <= len(data):
        offsets.append((at, int.from_bytes(data[at:at + 4], "little") + int.from_bytes(data[at + 4:at + 8],
                                                                                         "little") / 1e6))
        at += 16 + int.from_bytes(data[at + 8:at + 12], "little")
    down = next(offset for offset, ts in offsets if ts >= truth["sessions"][1]["start"])
    cuts = [down, offsets[2 * len(offsets) // 3][0]]
    rotated = tmp_path / "rotated"
    rotated.mkdir()
    for index, (start, end) in enumerate(zip([24, *cuts], [*cuts, len(data)], strict=True)):
        (rotated / f"part{index}.pcap").write_bytes(data[:24] + data[start:end])
    parts = run_job(spark, [str(rotated)], tmp_path / "parts", report=False)
    assert [without_input(b) for b in parts.brokers] == [without_input(b) for b in out.brokers]
    assert evidence_of(parts.summary) == evidence_of(out.summary)


def test_remote_paths_fail_in_one_line_and_leave_no_output(spark, tmp_path, monkeypatch, capsys) -> None:
    """s3a:// without the hadoop-aws connector: one line naming it and how to add it, exit status
    REMOTE_FAILED, no --out left behind; --driver-memory and --conf reach the session."""
    given: dict = {}

    def build_session(*args, **kwargs):
        given.update(kwargs)
        return spark

    monkeypatch.setattr(session, "build_session", build_session)
    monkeypatch.setattr(session, "stop", lambda spark: None)
    out = tmp_path / "out"
    assert cli.main(["report", "s3a://captures/today/", "--out", str(out), "--driver-memory", "2g",
                     "--conf", "spark.sql.shuffle.partitions=2"]) == cli.REMOTE_FAILED
    [line] = capsys.readouterr().err.strip().splitlines()
    assert re.fullmatch(r"python -m spark_analysis: error: s3a:// needs the hadoop-aws connector on Spark's class "
                        r"path: add --conf spark\.jars\.packages=org\.apache\.hadoop:hadoop-aws:[\d.]+ "
                        r"\(spark-submit: --packages org\.apache\.hadoop:hadoop-aws:[\d.]+\), or its jar with --jars",
                        line), line
    assert not out.exists()
    assert given["conf"] == {"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "2g"}


def test_bad_inputs_are_named_and_no_capture_fails(spark, tmp_path, monkeypatch, capsys) -> None:
    """A text file named .pcap, an empty file and a pcap cut inside its first record: each named on
    the console and in summary.json; with no capture among them the command fails."""
    bad = tmp_path / "in"
    bad.mkdir()
    (bad / "notes.pcap").write_text("not a capture\n" * 10)
    (bad / "empty.pcap").write_bytes(b"")
    (bad / "cut.pcap").write_bytes(capture("json_lifecycle.pcap").read_bytes()[:24 + 30])
    (bad / "README.md").write_text("# what these captures are\n")  # notes beside captures: information only
    (bad / "namesrv.out").write_text("The Name Server boot success.\n")  # a server's console output kept beside
    (bad / "rotated.pcap.zst").write_bytes(b"\x28\xb5\x2f\xfd" + bytes(40))  # tcpdump -z zstd: named, with what to do
    json_pcap = capture("json_lifecycle.pcap").read_bytes()  # its link type made one the reading does not decode
    (bad / "usb.pcap").write_bytes(json_pcap[:20] + struct.pack("<I", 147) + json_pcap[24:])

    monkeypatch.setattr(session, "build_session", lambda *args, **kwargs: spark)
    monkeypatch.setattr(session, "stop", lambda spark: None)  # the shared session goes on
    assert cli.main(["report", str(bad), "--out", str(tmp_path / "out")]) == cli.NO_CAPTURE
    console = capsys.readouterr()
    for name, problem in (("notes.pcap", "not a capture"), ("empty.pcap", "empty"), ("cut.pcap", "truncated"),
                          ("rotated.pcap.zst", "not a capture: zstd-compressed, a format not read (decompress it"),
                          ("usb.pcap", "its link type, 147, is not read (Ethernet, Linux cooked")):
        assert f"{bad / name}: {problem}" in console.out, console.out
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert {(Path(f["path"]).name, f["problem"], f["severity"]) for f in kinds(summary, "bad_input")} == {
        ("notes.pcap", "not a capture", "critical"), ("empty.pcap", "empty", "critical"),
        ("cut.pcap", "truncated", "critical"), ("README.md", "not a capture", "info"),
        ("rotated.pcap.zst", "not a capture", "critical"), ("usb.pcap", "link type not read", "critical"),
        ("namesrv.out", "not a capture", "info")}
    # the notes are a finding of their own: a critical line names only what could not be read
    assert {(f["severity"], f["subject"]): sorted(Path(item["path"]).name for item in f["evidence"])
            for f in summary["findings"] if f["kind"] == "bad_input"} == {
        ("critical", None): ["cut.pcap", "empty.pcap", "notes.pcap", "rotated.pcap.zst", "usb.pcap"],
        ("info", "notes"): ["README.md", "namesrv.out"]}
    assert [f["compression"] for f in summary["inputs"]["files"] if f["path"].endswith(".zst")] == ["zstd"]
    assert "no input is a capture" in console.err
    assert "cut.pcap" in (tmp_path / "out" / "report.html").read_text()


def test_arguments_are_checked_before_spark_starts(tmp_path, tmp_path_factory, capsys) -> None:
    fifo = tmp_path_factory.mktemp("fifo") / "capture.pcap"  # report <(zcat x.gz) is a pipe: "no files in" it said
    os.mkfifo(fifo)
    for argv, said in ((["report", str(tmp_path / "missing.pcap"), "--out", str(tmp_path / "o")],
                        "no such file or directory"),
                       (["report", str(tmp_path / "*.pcapng"), "--out", str(tmp_path / "o")], "no such file"),
                       (["report", str(tmp_path), "--out", str(tmp_path / "o")], "no files in"),
                       (["report", str(fifo), "--out", str(tmp_path / "o")], "is a pipe (FIFO), not a file"),
                       (["report", str(capture("v5_probe.pcap")), "--out", str(Path(__file__).parent)],
                        "exists and is not empty (--overwrite"),
                       (["report", str(capture("v5_probe.pcap")), "--out", str(Path(__file__) / "out"), "--overwrite"],
                        "cannot make the output directory")):
        with pytest.raises(SystemExit) as exited:
            cli.main(argv)
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1, err
    with pytest.raises(SystemExit) as exited:  # a master Spark refuses: no JVM started for a stack trace
        cli.main(["report", str(capture("v5_probe.pcap")), "--out", str(tmp_path / "o"), "--master", "lcoal[2]"])
    assert exited.value.code == 2 and "--master: not a Spark master: 'lcoal[2]'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        cli.main(["report", str(capture("v5_probe.pcap")), "--out", str(tmp_path / "o"), "--spark-log", "LOUD"])
    assert exited.value.code == 2 and "--spark-log: invalid choice: 'LOUD'" in capsys.readouterr().err
    for option, value, said in (("--port", "70000", "out of range (1 to 65535)"), ("--port", "x", "not a number: 'x'"),
                                ("--split-mib", "-1", "out of range")):
        with pytest.raises(SystemExit) as exited:
            cli.main(["report", str(capture("v5_probe.pcap")), "--out", str(tmp_path / "o"), option, value])
        assert exited.value.code == 2 and f"{option}: {said}" in capsys.readouterr().err.replace(f"{value} is ", "")
    assert all(cli.spark_master(master) == master for master in ("local", "local[2]", "local[*]", "local[2,3]",
                                                                  "spark://127.0.0.1:7077", "yarn", "k8s://h:443"))
    assert cli.check_arguments([str(capture("v5_probe.pcap"))], str(Path(__file__).parent), overwrite=True) is None
    assert cli.check_arguments([str(capture("v5_probe.pcap"))], str(tmp_path), overwrite=False) is None  # empty


def test_report_in_headless_chromium(synthetic_outputs: Outputs, tmp_path) -> None:
    """The page opens offline with the findings first, its tables, and every plot drawn by plotly.js
    (an SVG inside each plot div); the screenshot is kept as a build artifact."""
    page = Path(synthetic_outputs.out, "report.html").as_uri()
    flags = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1400,2400",
             "--virtual-time-budget=10000", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*flags, "--dump-dom", page], capture_output=True, text=True, timeout=120, check=True).stdout
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report.png"
    subprocess.run([*flags, f"--screenshot={shot}", page], capture_output=True, timeout=120, check=True)
    body = dom[dom.index("<body"):]
    sections = [body.index(f"<section id=\"{name}\"") for name in ("findings", "inputs", "timeline", "intervals",
                                                                    "topics", "requests", "latency", "response-codes",
                                                                    "brokers", "clients")]
    assert sections == sorted(sections) and body.index("<h1") < sections[0]
    assert "heartbeat_expired" in body and "crc_failure" in body and "synthetic.pcap" in body
    # one row per problem under the line counting them; each broker's gap a click away
    findings_table = body[body.index('<section id="findings"'):sections[1]]
    assert findings_table.count("<tr class=") == len(synthetic_outputs.summary["findings"])
    assert html.escape(synthetic_outputs.summary["attention"], quote=False) in body[:sections[0]]
    expired = next(f for f in synthetic_outputs.summary["findings"] if f["kind"] == "heartbeat_expired")
    after = findings_table[findings_table.index("<td>heartbeat_expired</td>"):]
    opened = after[after.index("<details>"):]
    assert all(f"<li>{html.escape(item['message'], quote=False)}</li>" in opened[:opened.index("</details>")]
               for item in expired["evidence"]) and len(expired["evidence"]) > 1
    for plot in ("timeline", "intervals", "topics", "requests", "latency"):
        div = body[body.index(f'id="plot-{plot}"'):]
        assert 'class="main-svg"' in div[:div.index("</svg>")], f"{plot} not drawn"
    assert "broker-002" in body and "SynthCluster / broker-002 / 0 (MASTER) / 10.1.0.3:10911" in body
    # a killed broker: the first row, critical, its closed connection a click away
    killed = synthetic_outputs.summary["findings"][0]
    assert (killed["kind"], killed["severity"]) == ("broker_connection_closed", "critical")
    assert findings_table.index("<td>broker_connection_closed</td>") < findings_table.index(
        "<td>heartbeat_expired</td>")
    assert all(html.escape(item["message"], quote=False) in findings_table for item in killed["evidence"])
    assert shot.stat().st_size > 50_000


def test_the_figures_the_page_hands_plotly_unchecked_pass_its_checks(synthetic_outputs: Outputs) -> None:
    """The report writes its figures as plain dicts, unchecked (Plotly's checks cost most of its
    time): each figure in the page, data and layout, is one Plotly's own checks accept, with its
    times on date axes."""
    text = Path(synthetic_outputs.out, "report.html").read_text()
    decoder = json.JSONDecoder()
    checked = []
    for match in re.finditer(r'Plotly\.newPlot\(\s*"plot-(\w+)",\s*', text):
        data, end = decoder.raw_decode(text, match.end())
        layout, _ = decoder.raw_decode(text, text.index("{", end))
        figure = go.Figure({"data": data, "layout": layout})  # raises on a property or value Plotly refuses
        if match.group(1) in ("timeline", "topics"):
            assert {axis.type for axis in figure.select_xaxes()} == {"date"}
        if match.group(1) == "timeline":  # a row per broker: its ticks on its row, its label in their hover
            labels = figure.layout.yaxis.ticktext
            rows = {trace.hovertemplate: set(np.frombuffer(base64.b64decode(trace.y["bdata"]), trace.y["dtype"]))
                    for trace in figure.data if trace.name == "heartbeats"}
            assert sorted(tuple(row) for row in rows.values()) == [(row,) for row in range(len(labels))]
            assert all(hover.startswith(labels[row] + "<br>") for hover, (row,) in rows.items())  # report.plot_text
        checked.append(match.group(1))
    assert checked == ["timeline", "intervals", "topics", "requests", "latency"]


def test_the_documentation_names_every_finding_column_and_field(synthetic_outputs: Outputs) -> None:
    """docs/capture-report.md stays true: every finding kind and evidence field, every brokers.csv
    column and every top-level summary.json key is described there."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "capture-report.md").read_text()
    documented = set(re.findall(r"`([a-z_0-9]+)`", text))
    summary = synthetic_outputs.summary
    evidence = [item for f in summary["findings"] for item in f["evidence"]]
    fields = {key for f in summary["findings"] + evidence for key in f} | {f["kind"] for f in evidence}
    assert fields | set(BROKER_COLUMNS) | set(summary) | set(summary["counts"]) <= documented | set(
        re.findall(r'"([a-z_0-9]+)":', text))
    assert set(findings_module.KINDS) <= documented


def test_calls_are_noted_for_the_findings_without_spark() -> None:
    """Slow answers by code (the slowest as evidence), answers with a non-zero code, and requests
    never answered unless they were oneway."""
    rows = [(1.0, "c", "10.0.0.7:1", 105, "GET_ROUTEINFO_BY_TOPIC", 1, 0, 5.0, False, "T", None),
            (2.0, "c", "10.0.0.7:1", 105, "GET_ROUTEINFO_BY_TOPIC", 2, 0, 1500.0, False, "T", None),
            (3.0, "c", "10.0.0.8:1", 105, "GET_ROUTEINFO_BY_TOPIC", 3, 17, 2500.0, False, "X", "no route"),
            (4.0, "c", "10.0.0.8:1", 105, "GET_ROUTEINFO_BY_TOPIC", 4, None, None, True, "T", None),
            (5.0, "c", "10.0.0.8:1", 106, "GET_BROKER_CLUSTER_INFO", 5, None, None, False, None, None),
            (6.0, "c", "10.0.0.9:1", 105, "GET_ROUTEINFO_BY_TOPIC", 6, 17, 1.0, False, "%RETRY%cgA", "no route")]
    rows = [(*row, "s:9876", None, False, "in.pcap", "s:9876@x") for row in rows]
    groups: findings_module.Groups = {}
    for start in (0, 2):  # two batches, as a task sends them
        findings_module.note_calls(groups, pa.array(rows[start:start + 4] if start else rows[:2],
                                                    type=tables.row_type(CALL)))
    assert groups[findings_module.SLOW] == {
        ("GET_ROUTEINFO_BY_TOPIC", "s:9876"): [2, 2.0, 3.0, (2500.0, 3.0, "10.0.0.8:1")]}
    assert groups[findings_module.ANSWER_CODES] == {
        ("GET_ROUTEINFO_BY_TOPIC", 17, "no route", "10.0.0.8:1", "X", "s:9876"): [1, 3.0, 3.0, None],
        ("GET_ROUTEINFO_BY_TOPIC", 17, "no route", "10.0.0.9:1", "%RETRY%cgA", "s:9876"): [1, 6.0, 6.0, None]}
    assert groups[findings_module.UNANSWERED] == {
        ("GET_BROKER_CLUSTER_INFO", "10.0.0.8:1", "s:9876"): [1, 5.0, 5.0, None]}
    findings_module.calls_at(groups, {"s:9876"})  # the server known as a NameServer: the keys without it
    assert groups[findings_module.UNANSWERED] == {("GET_BROKER_CLUSTER_INFO", "10.0.0.8:1"): [1, 5.0, 5.0, None]}
    said = findings_module.evidence([], groups, [], findings_module.response_groups(groups))
    # 17 said once; a consumer's %RETRY% lookup at start-up is information, an unknown user topic a warning
    assert [(f["kind"], f["severity"]) for f in said] == [
        ("topic_not_exist", "warning"), ("unanswered", "warning"), ("slow_answer", "warning"),
        ("retry_topic_lookup", "info")]
    assert said[2]["max_ms"] == 2500.0 and said[2]["max_client"] == "10.0.0.8:1"
    assert findings_module.attention(said)["attention"] == (
        "3 warnings: 1 unknown topic, 1 request code never answered, 1 slow request code")


def test_traffic_the_report_cannot_read_because_it_is_encrypted_leads_the_headline() -> None:
    """A NameServer with tls.server.mode enforcing, its admin clients with TLS on (a real capture of ours:
    two TLS connections and one plain client the server refused): the headline opens with how many of its
    connections are encrypted and cannot be read, not with 'undecodable connections'; another service's TLS
    (information) is not counted, and an endpoint nothing of which can be read counts its connections."""
    tls = "TLS (encrypted: a NameServer with tls.server.mode enforcing or permissive and clients with TLS on)"
    said = [findings_module._finding("undecodable_connection", findings_module.WARNING, f"{conn}: 724 bytes: {tls}",
                                     connection=conn, bytes=724, server="127.0.0.1:9876", protocol="TLS")
            for conn in ("127.0.0.1:38796>127.0.0.1:9876@1", "127.0.0.1:38812>127.0.0.1:9876@2")]
    said.append(findings_module._finding("undecodable_connection", findings_module.INFO, "another service's",
                                         connection="10.0.0.1:5>10.0.0.2:443@3", bytes=9, server="10.0.0.2:443",
                                         protocol="TLS"))
    said.append(findings_module._finding("server_unread", findings_module.WARNING, "all TLS", endpoint="10.0.0.3:9876",
                                         accepted=3, why="speaks TLS", protocol="TLS"))
    said.append(findings_module._finding("undecodable_connection", findings_module.WARNING, "one of its 3",
                                         connection="10.0.0.9:7>10.0.0.3:9876@4", bytes=9, server="10.0.0.3:9876",
                                         protocol="TLS"))  # one of the 3 it accepted, not a fourth
    assert findings_module.attention(said)["attention"] == (
        "encrypted (TLS): 3 connections to 10.0.0.3:9876, 2 connections to 127.0.0.1:9876 cannot be read · "
        "2 warnings: 1 server whose traffic cannot be read, 3 undecodable connections")
    assert not findings_module.attention(said[2:3])["attention"].startswith("encrypted")


def test_a_short_capture_period_gets_a_readable_panel() -> None:
    """An hour and 1.5 s captured: the short period's panel spans its own 1.5 s, a quarter of the
    width at least, titled with its start and length, with fewer ticks than the long one."""
    hour, short = (1_800_000_000.0, 1_800_003_600.0), (1_800_005_000.0, 1_800_005_001.5)
    layout = report._period_panels(TimeBins.over([hour, short]), 4)
    wide, narrow = layout["xaxis"], layout["xaxis2"]
    assert narrow["domain"][1] - narrow["domain"][0] >= 0.2 and narrow["nticks"] < wide["nticks"]
    assert wide["domain"][1] < narrow["domain"][0] and narrow["domain"][1] == 1.0
    assert narrow["range"] == [report._time(short[0]), report._time(short[1])]
    assert [a["text"] for a in layout["annotations"]] == ["period 1: 08:00:00 UTC, 1 h 0 min",
                                                          "period 2: 09:23:20 UTC, 1.5 s"]


def test_a_topic_looked_up_before_it_was_made_is_information_not_a_warning() -> None:
    """A producer's first lookup of a topic the broker makes on first send (autoCreateTopicEnable)
    answers TOPIC_NOT_EXIST, then the route is served: normal. Unknown again after it was served,
    or never served, it is a warning (a misconfigured client, or NameServers that disagree)."""
    def lookup(t: float, client: str, topic: str, code: int) -> tuple:
        return (t, "c", client, 105, "GET_ROUTEINFO_BY_TOPIC", int(t), code, 1.0, False, topic, None)

    rows = [lookup(1.0, "10.0.0.7:1", "Made", 17), lookup(2.0, "10.0.0.7:1", "Made", 17),
            lookup(3.0, "10.0.0.7:1", "Made", 0), lookup(4.0, "10.0.0.8:1", "Made", 0),
            lookup(1.0, "10.0.0.7:1", "Gone", 0), lookup(5.0, "10.0.0.7:1", "Gone", 17),
            lookup(6.0, "10.0.0.9:1", "Never", 17)]
    rows = [(*row, "s:9876", None, False, "in.pcap", "s:9876@x") for row in rows]
    groups: findings_module.Groups = {}
    tallies = []
    for start in (0, 3):  # in two batches: the first answer found in one task, the rest in another
        batch = pa.array(rows[start:start + 3] if start == 0 else rows[3:], type=tables.row_type(CALL))
        findings_module.note_calls(groups, batch)
        tallies.append(Tally())
        findings_module.note_routes_found(tallies[-1].routes_found, batch)
    findings_module.calls_at(groups, {"s:9876"})
    routes_found = Tally().merge(tallies[1]).merge(tallies[0]).routes_found  # the later task's first
    assert routes_found == {"Made": 3.0, "Gone": 1.0}
    said = findings_module.evidence([], groups, [], findings_module.response_groups(groups),
                                    routes_found=routes_found)
    assert sorted((f["kind"], f["severity"], f["topic"]) for f in said) == [
        ("topic_made_on_first_use", "info", "Made"), ("topic_not_exist", "warning", "Gone"),
        ("topic_not_exist", "warning", "Never")]
    made = next(f for f in said if f["topic"] == "Made")
    assert made["count"] == 2 and made["found_from"] == findings_module._iso(3.0)
    assert findings_module.attention(said)["attention"].startswith("1 warning: 2 unknown topics")


def test_the_proxy_s_heartbeat_syncer_topic_is_said_to_be_the_proxy_s_own() -> None:
    """v5-proxygrpc: the 5.3.3 proxy looks up DefaultHeartBeatSyncerTopic as it starts (TOPIC_NOT_EXIST)
    and then makes it on its cluster's brokers (AbstractSystemMessageSyncer.createSysTopic). The line
    put it down to "e.g. the broker's autoCreateTopicEnable"; it is the proxy's own topic, which the
    server's list of RocketMQ's own topics knows too. A user's topic keeps the broker's words."""
    from twisted_namesrv.system_topics import PROXY_HEARTBEAT_SYNCER_TOPIC, system_topic_kind

    assert system_topic_kind(PROXY_HEARTBEAT_SYNCER_TOPIC) == "proxy's"
    proxy = findings_module._unknown_topic("10.0.0.5:1", PROXY_HEARTBEAT_SYNCER_TOPIC, 1, 1.0, 1.0, 2.0)
    assert proxy["kind"] == "topic_made_on_first_use"
    assert "a 5.x proxy's own topic" in proxy["message"] and "autoCreateTopicEnable" not in proxy["message"]
    user = findings_module._unknown_topic("10.0.0.5:1", "TopicTest", 1, 1.0, 1.0, 2.0)
    assert "the broker's autoCreateTopicEnable" in user["message"] and "proxy" not in user["message"]


def test_a_topic_a_broker_registered_after_its_lookups_failed_is_information() -> None:
    """A producer's lookups answered TOPIC_NOT_EXIST, then it sent by the default topic and its
    broker made the topic and registered it (the replay's cause ``made_later``), the producer done
    before a lookup of it was served (v4-ops-late's TopicBusy): made on first use, not unknown. At
    two NameServers, the later of their registrations; where one of them never held it, a warning."""
    def lookup(t: float, client: str, topic: str) -> tuple:
        return (t, "c", client, 105, "GET_ROUTEINFO_BY_TOPIC", int(t * 10), 17, 1.0, False, topic, None,
                "s:9876", None, False, "in.pcap", "s:9876@x")

    rows = [lookup(1.0, "10.0.0.7:1", "Busy"), lookup(1.1, "10.0.0.7:1", "Busy"), lookup(2.0, "10.0.0.8:1", "Half")]
    groups: findings_module.Groups = {}
    findings_module.note_calls(groups, pa.array(rows, type=tables.row_type(CALL)))
    findings_module.calls_at(groups, {"s:9876"})

    def failed(server: str, client: str, topic: str, count: int, first: float, last: float,
               made: float | None) -> dict:
        return {"kind": "lookup_failed", "server": server, "topic": topic, "client": client, "count": count,
                "first": findings_module._iso(first), "last": findings_module._iso(last),
                "cause": None if made is None else {"kind": "made_later", "t": findings_module._iso(made)}}

    stories = [failed("s:9876", "10.0.0.7:1", "Busy", 1, 1.0, 1.0, 1.3),
               failed("s:9877", "10.0.0.7:1", "Busy", 1, 1.1, 1.1, 1.4),
               failed("s:9876", "10.0.0.8:1", "Half", 1, 2.0, 2.0, 2.5),
               failed("s:9877", "10.0.0.8:1", "Half", 0, 2.0, 2.0, None)]
    said = findings_module.evidence([], groups, [], findings_module.response_groups(groups), stories=stories)
    assert sorted((f["kind"], f["severity"], f["topic"]) for f in said) == [
        ("topic_made_on_first_use", "info", "Busy"), ("topic_not_exist", "warning", "Half")]
    busy = next(f for f in said if f["topic"] == "Busy")
    assert (busy["count"], busy["found_from"], busy["registered_at"]) == (2, None, findings_module._iso(1.4))
    assert findings_module.attention(said)["attention"] == "1 warning: 1 unknown topic"


def test_a_retry_topic_unknown_after_its_client_had_its_route_is_a_warning() -> None:
    """A consumer's lookups of its group's retry topic answered TOPIC_NOT_EXIST before the topic
    exists are start-up (information). Once that client was served the route, a TOPIC_NOT_EXIST is
    the route gone (its broker stopped: in a cut capture the replay sees no cause): a warning. A
    later consumer of the same group asking before it has the route is start-up again, so the time
    is the client's own, not the capture's first route of the topic."""
    def lookup(t: float, client: str, code: int) -> tuple:
        return (t, "c", client, 105, "GET_ROUTEINFO_BY_TOPIC", int(t), code, 1.0, False, "%RETRY%G", None,
                "s:9876", None, False, "in.pcap", "s:9876@x")

    rows = [lookup(1.0, "10.0.0.7:1", 17), lookup(3.0, "10.0.0.7:1", 0), lookup(5.0, "10.0.0.7:1", 17),
            lookup(6.0, "10.0.0.8:1", 17), lookup(8.0, "10.0.0.8:1", 0), lookup(2.0, "10.0.0.9:1", 17)]
    groups: findings_module.Groups = {}
    batch = pa.array(rows, type=tables.row_type(CALL))
    findings_module.note_calls(groups, batch)
    routes_found: dict = {}
    findings_module.note_routes_found(routes_found, batch)
    findings_module.calls_at(groups, {"s:9876"})
    said = findings_module.evidence([], groups, [], findings_module.response_groups(groups),
                                    routes_found=routes_found)
    assert sorted((f["kind"], f["severity"], f["client"], f["count"]) for f in said) == [
        ("retry_topic_lookup", "info", "10.0.0.8:1", 1), ("retry_topic_lookup", "info", "10.0.0.9:1", 1),
        ("topic_not_exist", "warning", "10.0.0.7:1", 2)]
    gone = next(f for f in said if f["kind"] == "topic_not_exist")
    assert gone["served_to_client"] == findings_module._iso(3.0) and "after this client had been served" in gone[
        "message"]


def test_the_headline_counts_what_happened() -> None:
    """Two restarts of one NameServer are "2 NameServer restarts" (not "1 NameServer restart" with
    "(2x)" inside); nouns naming things still count the things: one broker closing twice is 1 broker."""
    said = [findings_module._finding("server_restart", "warning", f"restart {n}", server="10.0.0.1:9876", t=n)
            for n in range(2)]
    said += [findings_module._finding("broker_connection_closed", "critical", f"close {n}", broker="b", t=n)
             for n in range(2)]
    said += [findings_module._finding("failover", "warning", f"fail-over {n}", broker_name="broker-a", t=n)
             for n in range(3)]
    found = findings_module.attention(said)
    assert found["attention"] == ("1 critical: 1 broker whose connection closed without unregistering · "
                                  "2 warnings: 2 NameServer restarts, 3 fail-overs")
    assert next(f for f in found["findings"] if f["kind"] == "server_restart")["message"].startswith(
        "2 NameServer restarts: ")


def test_a_cause_the_capture_shows_explains_a_drop_and_ranks_the_lookups_it_failed() -> None:
    """A group's topics going down by a captured DELETE_TOPIC_IN_NAMESRV is information naming the
    deletion (who, when), not "losing topics"; lookups answered TOPIC_NOT_EXIST because the topic's
    only broker expired are that expiry's evidence and said in its line, not an unknown topic of a
    client; a lookup the capture shows no cause for stays the client's warning."""
    from spark_analysis.analysis.liveness import broker_summary
    from spark_analysis.analysis.replay import lookup_stories
    from tests.spark.test_replay import SERVER, event, registration, replayed
    from twisted_namesrv.remoting import RequestCode

    admin = {"broker_addr": None, "broker_id": None, "alive": False, "response_code": 0, "client": "10.0.0.7:1"}
    lookup = {"broker_addr": None, "broker_id": None, "alive": False, "client": "10.0.0.5:40000",
              "response_code": 17}
    replay = replayed([registration(10.0, topics=("T", "D")), registration(12.0, "10.0.0.2:10911", name="c",
                                                                            topics=("K",)),
                       event(20.0, RequestCode.DELETE_TOPIC_IN_NAMESRV, topic="D", cluster="C", **admin),
                       registration(42.0, "10.0.0.2:10911", name="c", topics=("K",)),
                       registration(72.0, "10.0.0.2:10911", name="c", topics=("K",)),
                       event(200.0, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="T", **lookup),
                       event(201.0, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="Never", **lookup)], end=210.0)
    bins = TimeBins.over([(0.0, 210.0)])
    brokers = [broker_summary(stay, bins) for stay in replay.stays]
    stories = replay.stories + lookup_stories(replay.lookups, SERVER)
    rows = [(t, "c", "10.0.0.5:40000", 105, "GET_ROUTEINFO_BY_TOPIC", int(t), 17, 1.0, False, topic, "no route",
             SERVER, None, False, "in.pcap", f"{SERVER}@x") for t, topic in ((200.0, "T"), (201.0, "Never"))]
    groups: findings_module.Groups = {}
    findings_module.note_calls(groups, pa.array(rows, type=tables.row_type(CALL)))
    findings_module.calls_at(groups, {SERVER})
    said = findings_module.evidence([], groups, brokers, findings_module.response_groups(groups), [], stories)
    by_kind = {(f["kind"], f.get("topic") or f.get("broker_addr")): f for f in said}

    deleted = by_kind[("topics_deleted_from_broker", "10.0.0.1:10911")]
    assert deleted["severity"] == "info" and deleted["removed"] == ["D"]
    assert deleted["deleted"] == [{"topic": "D", "t": iso_time(20.0), "client": "10.0.0.7:1", "server": SERVER}]
    assert "10.0.0.7:1" in deleted["message"] and not [f for f in said if f["kind"] == "topic_count_drop"]

    expired = by_kind[("heartbeat_expired", "10.0.0.1:10911")]
    assert [(f["topic"], f["count"]) for f in expired["failed_lookups"]] == [("T", 1)]
    assert "route lookup(s) answered TOPIC_NOT_EXIST for T" in expired["message"]
    assert [f["topic"] for f in said if f["kind"] == "topic_not_exist"] == ["Never"]
    attention = findings_module.attention(said)
    assert attention["attention"] == (
        "2 warnings: 2 brokers expired by the NameServer (120 s of silence), 1 unknown topic")
    (both,) = [f for f in attention["findings"] if f["kind"] == "heartbeat_expired"]  # two expiries in one line
    assert both["message"].endswith("then 1 route lookup(s) answered TOPIC_NOT_EXIST for T")


def test_a_drop_is_tied_to_the_deletion_at_its_own_nameserver_whatever_the_stories_order() -> None:
    """mqadmin deletes a topic at every NameServer; a broker's drop seen at one was tied to the first
    deletion in the stories' order, which is the liveness stage's tasks' (moving with the cores): on
    three NameServers every broker's drop named the same one. Its own server's deletion, else the
    earliest, whatever the order."""
    drop = {"from": 15, "to": 14, "t": 30.2, "had_at": 10.0, "removed": ["D"]}
    broker = {"broker_addr": "10.0.0.1:10911", "session": "10.0.0.9:9877@x", "server": "10.0.0.9:9877",
              "registrations": 0, "gaps": [], "crc_failure_times": [], "refused": [], "topic_drops": [drop],
              "version_backwards": [], "cluster": "C", "broker_name": "a", "broker_id": 0, "role": "MASTER"}
    at = [{"kind": "topic_deleted", "topic": "D", "t": iso_time(t), "client": f"10.0.0.7:{port}", "server": server}
          for t, port, server in ((30.0, 1, "10.0.0.9:9876"), (30.1, 2, "10.0.0.9:9877"), (29.9, 3, "10.0.0.9:9878"))]
    for deletions in (at, at[::-1]):
        (told,) = list(findings_module._broker_findings(broker, deletions))
        assert told["kind"] == "topics_deleted_from_broker"
        assert [d["server"] for d in told["deleted"]] == ["10.0.0.9:9877"]
    elsewhere = {**broker, "server": "10.0.0.9:9879"}
    for deletions in (at, at[::-1]):
        (told,) = list(findings_module._broker_findings(elsewhere, deletions))
        assert [d["server"] for d in told["deleted"]] == ["10.0.0.9:9878"]  # the earliest


def test_a_deletion_and_a_wipe_whose_names_a_snap_length_cut_say_so() -> None:
    """``tcpdump -s 96`` keeps a DELETE_TOPIC_IN_NAMESRV's and a WIPE_WRITE_PERM_OF_BROKER's frame but
    not their topic or broker name: the findings said "topic None deleted" and "write permission of
    None wiped ... (0 topics of it held)"."""
    at = {"t": "2026-11-29T06:47:57.707544Z", "server": "127.0.0.1:29876", "client": "127.0.0.1:46666",
          "session": "s", "cluster": None}
    stories = [{"kind": "topic_deleted", "topic": None, **at},
               {"kind": "write_perm_wiped", "broker_name": None, "topics": 0, "topics_answered": None, **at}]
    deleted, wiped = (item["message"] for item in findings_module._story_findings(stories))
    assert deleted.startswith("a topic whose name was not captured deleted at 127.0.0.1:29876 at ")
    assert wiped.startswith("write permission of a broker whose name was not captured wiped at 127.0.0.1:29876")
    assert wiped.endswith("by 127.0.0.1:46666") and "None" not in deleted + wiped


def test_names_a_snap_length_cut_are_said_so_in_a_findings_list() -> None:
    """Two deletions of a topic whose name was cut (mqadmin deleteTopic at two NameServers, -s 128): the
    line said "1 topic deleted: (none) (2x)", as if no topic; they may be one topic or two."""
    at = {"server": "127.0.0.1:9876", "client": "127.0.0.1:46666", "session": "s", "cluster": None}
    stories = [{"kind": "topic_deleted", "topic": None, "t": "2026-11-30T05:24:45.033167Z", **at},
               {"kind": "topic_deleted", "topic": None, "t": "2026-11-30T05:24:45.041875Z", **at},
               {"kind": "topic_deleted", "topic": "T", "t": "2026-11-30T05:24:46Z", **at}]
    said = findings_module.attention(list(findings_module._story_findings(stories)))["findings"]
    (deleted,) = [f for f in said if f["kind"] == "topic_deleted"]
    assert deleted["message"] == "at least 2 topics deleted: (name not captured) (2x), T"


def test_a_write_perm_change_says_the_nameservers_count_before_the_captures() -> None:
    """A wipe the NameServer answered 13 for, of a broker whose registrations' bodies were cut (or sent
    before the capture): the line began "(0 topics of it held; ...", a count Java's log contradicts."""
    story = {"kind": "write_perm_wiped", "broker_name": "broker-b", "topics": 0, "topics_answered": 13,
             "t": "2026-11-30T05:24:39.173273Z", "server": "127.0.0.1:9876", "client": "127.0.0.1:43458",
             "session": "s", "cluster": None}
    (wiped,) = findings_module._story_findings([story])
    assert wiped["message"].endswith("by 127.0.0.1:43458 (13 topics of it held, the NameServer answered; the "
                                     "capture holds 0 of them: it misses some of what the NameServer held)")
    (same,) = findings_module._story_findings([dict(story, topics=13)])
    assert same["message"].endswith("(13 topics of it held)")


def test_an_endpoint_only_port_checked_is_information_not_an_unreadable_server() -> None:
    """tcpdump -i any -s 96 on a NameServer's host (v5-bothcut): its launch script's one accepted poll
    of 127.0.0.1:9876, no byte either way, was a warning "nothing it was asked can be read: its packets
    were cut at 96 bytes, before any frame's header", in the headline as a server whose traffic
    cannot be read. Nothing was asked: it is said as a port check, information."""
    files = [{"path": "ns.pcap", "problem": None, "cut_records": 72, "cut_at": 96, "records": 402,
              "uncaptured_bytes": 35593}]
    endpoints = [{"endpoint": "10.79.0.1:9876", "kind": "nameserver", "accepted": 5, "empty": 0, "outages": [],
                  "refused": []},
                 {"endpoint": "127.0.0.1:9876", "kind": "unknown", "accepted": 1, "empty": 1, "outages": [],
                  "refused": []}]
    found = findings_module.evidence(files, {}, [], {}, endpoints, counts={"cut_frames": 72})
    (checked,) = [item for item in found if item.get("endpoint") == "127.0.0.1:9876"]
    assert (checked["kind"], checked["severity"], checked["accepted"]) == ("port_checked", "info", 1)
    assert "carried nothing either way" in checked["message"]
    assert "cannot be read" not in findings_module.attention(found)["attention"]
    unread = dict(endpoints[1], empty=0)  # a byte was sent, and none of it read: still a warning
    found = findings_module.evidence(files, {}, [], {}, [endpoints[0], unread], counts={"cut_frames": 72})
    assert [item["severity"] for item in found if item.get("endpoint") == "127.0.0.1:9876"] == ["warning"]


def test_a_lookup_of_a_topic_whose_name_was_cut_says_so() -> None:
    """tcpdump -s 96: a GET_ROUTEINFO_BY_TOPIC answered TOPIC_NOT_EXIST keeps no topic: "asked 1x for the
    route of None"."""
    item = findings_module._unknown_topic("10.79.0.2:48400", None, 1, 1.0, 1.0, None)
    assert item["message"] == ("10.79.0.2:48400 asked 1x for the route of a topic whose name was not captured: "
                               "TOPIC_NOT_EXIST")


def test_a_nameserver_speaking_tls_or_http_is_named_not_unknown() -> None:
    """A capture of a NameServer with tls.server.mode enforcing: every connection's bytes are TLS
    records. It said "no frame of it decodes; what it is stays unknown"."""
    from twisted_namesrv.remoting.foreign import foreign_protocol

    client_hello = bytes.fromhex("160301020001") + b"\x00" * 40
    assert foreign_protocol(client_hello) == "TLS"
    assert foreign_protocol(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n") == "HTTP"
    assert foreign_protocol(b"HTTP/1.0 200 OK\r\n") == "HTTP"
    assert foreign_protocol(b"\x00\x00\x00\x10\x00\x00\x00\x0cnot json") is None
    server = "127.0.0.1:29876"
    groups = {findings_module.UNDECODABLE: {(f"127.0.0.1:53036>{server}@1.0", server, "TLS"): [3779, 0.0, 0.0, None],
                                            (f"127.0.0.1:39232>{server}@2.0", server, "TLS"): [790, 0.0, 0.0, None]}}
    endpoint = {"endpoint": server, "kind": "unknown", "accepted": 2, "outages": [], "refused": []}
    found = findings_module.evidence([], groups, [], {}, [endpoint])
    unread = [item for item in found if item["kind"] == "server_unread"]
    assert [item["protocol"] for item in unread] == ["TLS"]
    assert "its connections speak TLS (encrypted" in unread[0]["message"]
    assert "stays unknown" not in unread[0]["message"]
    problem = findings_module.attention(found)["findings"]
    undecodable = next(item for item in problem if item["kind"] == "undecodable_connection")
    assert "not decoded): TLS (encrypted" in undecodable["message"]


def test_a_proxy_s_grpc_port_captured_beside_its_nameserver_is_named_grpc() -> None:
    """The 5.3.3 proxy's host captured with its NameServer (v5-proxygrpc's steps: tcpdump on the
    NameServer's port and the proxy's): the gRPC port's connections were "another protocol ...; not
    read" and "bytes that are no remoting frame", with no word of what they were. HTTP/2's preface
    names them gRPC: a proxy's clients, not the NameServer's, whose own talk is read at its port."""
    from twisted_namesrv.remoting.foreign import foreign_protocol

    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x12\x04\x00\x00\x00\x00\x00"
    assert foreign_protocol(preface) == "HTTP/2" and foreign_protocol(preface[:16]) == "HTTP/2"
    assert foreign_protocol(b"PRI * HTTP/1.1\r\n") is None
    grpc = "127.0.0.1:38081"
    groups = {findings_module.UNDECODABLE: {(f"127.0.0.1:40690>{grpc}@1.0", grpc, "HTTP/2"): [6806, 0.0, 0.0, None]}}
    endpoints = [{"endpoint": "127.0.0.1:38876", "kind": "nameserver", "accepted": 9, "outages": [], "refused": []},
                 {"endpoint": grpc, "kind": "unknown", "accepted": 4, "outages": [], "refused": []}]
    found = findings_module.evidence([], groups, [], {}, endpoints)
    (unread,) = [item for item in found if item["kind"] == "server_unread"]
    assert unread["severity"] == "info" and unread["protocol"] == "HTTP/2"
    assert "not read): HTTP/2 (gRPC: a 5.x proxy's gRPC port" in unread["message"]
    (undecodable,) = [item for item in found if item["kind"] == "undecodable_connection"]
    assert undecodable["protocol"] == "HTTP/2" and "HTTP/2 (gRPC" in undecodable["message"]


def test_an_undecodable_connection_is_named_with_its_opening_time_as_every_line_says_times() -> None:
    """The connection's id is its rows' key, ``client>server@opened`` with opened in epoch seconds;
    put into the lines as it was, an operator read "127.0.0.1:47788>127.0.0.1:9876@1796113649.190110"
    (v5-javatls). The lines say it in ISO UTC, as every other time; the field keeps the key."""
    server = "127.0.0.1:9876"
    conn = f"127.0.0.1:47788>{server}@1796113649.19011"
    other = f"127.0.0.1:60522>{server}@1796113688.800492"
    groups = {findings_module.UNDECODABLE: {(conn, server, "TLS"): [11044, 0.0, 0.0, None],
                                            (other, server, "TLS"): [493, 0.0, 0.0, None]}}
    endpoint = {"endpoint": server, "kind": "nameserver", "accepted": 2, "outages": [], "refused": []}
    found_items = findings_module.evidence([], groups, [], {}, [endpoint])
    items = [i for i in found_items if i["kind"] == "undecodable_connection"]
    (item,) = [i for i in items if i["connection"] == conn]
    assert item["connection"] == conn
    assert item["message"].startswith(f"127.0.0.1:47788>{server}@2026-12-01T08:27:29.190110Z: 11,044 bytes")
    (found,) = [f for f in findings_module.attention(items)["findings"] if f["kind"] == "undecodable_connection"]
    assert "@2026-12-01T08:27:29.190110Z (11,044 bytes)" in found["message"] and "@1796113649" not in found["message"]


def test_a_capture_that_shrank_while_read_is_one_line_and_exit_8(spark, tmp_path, monkeypatch, capsys) -> None:
    """A capture truncated while its task read it (a tcpdump -W ring writing its oldest file anew)
    killed the task by SIGBUS: Spark said "Python worker exited unexpectedly (crashed)" in 250 lines
    and the run ended with status 1. Here the run fails as then, just after the file shrank (the
    kill itself is no test's to time: checked by hand, a 400 MiB capture truncated 16 s into its
    reading stage); it names the file and both sizes, exit 8. A failure with every capture whole is
    raised as it was."""
    path = tmp_path / "ring0.pcap"
    path.write_bytes(capture("v5_probe.pcap").read_bytes())
    listed = path.stat().st_size
    planned = inputs.plan_tasks

    def truncated_then_crashed(*args, **kwargs):
        planned(*args, **kwargs)
        os.truncate(path, 100)
        raise RuntimeError("Python worker exited unexpectedly (crashed)")

    monkeypatch.setattr(inputs, "plan_tasks", truncated_then_crashed)
    monkeypatch.setattr(session, "build_session", lambda *args, **kwargs: spark)
    monkeypatch.setattr(session, "stop", lambda spark: None)
    out = tmp_path / "out"
    assert cli.main(["report", str(path), "--out", str(out)]) == cli.INPUT_SHRANK
    err = capsys.readouterr().err
    assert err.endswith(f"error: {path} shrank from {listed:,} to 100 bytes while it was read (a capture written "
                        "again in place: tcpdump -W reuses its oldest file's name, a capture restarted with the same "
                        "-w name; or a truncation): a task reading it lost the pages past its new end and was killed "
                        "(SIGBUS); copy the captures somewhere first, or read the files tcpdump is done with (the "
                        f"report in {out} is incomplete: no summary.json)\n") and "Traceback" not in err
    assert not out.exists()
    path.write_bytes(capture("v5_probe.pcap").read_bytes())
    monkeypatch.setattr(inputs, "plan_tasks", lambda *args, **kwargs: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        cli.main(["report", str(path), "--out", str(out)])

    def truncated_then_unwritable(*args, **kwargs):  # an output that cannot be written says so itself
        os.truncate(path, 100)
        raise tables.OutputError(f"cannot write {out}/calls: No space left on device")

    monkeypatch.setattr(inputs, "plan_tasks", truncated_then_unwritable)
    assert cli.main(["report", str(path), "--out", str(out)]) == cli.OUTPUT_FAILED
    assert "No space left on device" in capsys.readouterr().err


def test_an_output_that_cannot_be_written_is_one_line_and_exit_7(spark, tmp_path, monkeypatch, capsys) -> None:
    """A full disk under --out gave a 40-line traceback, exit 1, a 0-byte clients.csv and, with
    --overwrite, the earlier run's summary.json beside the new tables. Now: one line naming the file,
    exit 7, and no summary.json that is not this run's (here summary.json cannot be replaced: it is a
    directory); a task's OSError arrives as its text and says the same."""
    out = tmp_path / "out"
    (out / "summary.json").mkdir(parents=True)
    (out / "report.html").write_text("an earlier run's page")
    monkeypatch.setattr(session, "build_session", lambda *args, **kwargs: spark)
    monkeypatch.setattr(session, "stop", lambda spark: None)
    assert cli.main(["report", str(capture("v5_probe.pcap")), "--out", str(out), "--overwrite"]) == cli.OUTPUT_FAILED
    err = capsys.readouterr().err
    assert err.endswith(f"error: cannot write {out / 'summary.json'}: Is a directory (the report in {out} is "
                        "incomplete: no summary.json)\n") and "Traceback" not in err
    assert not (out / "report.html").exists()
    from spark_analysis.output.tables import OutputError
    from spark_analysis.spark.job import output_problem

    worker_said = RuntimeError("An exception was thrown from the Python worker:\nTraceback ...\n"
                               "spark_analysis.output.tables.OutputError: cannot write /o/calls/part-00001.parquet: "
                               "No space left on device\n\n\tat org.apache.spark...")
    assert output_problem(worker_said) == "cannot write /o/calls/part-00001.parquet: No space left on device"
    quota = "cannot write /o/x: Disk quota exceeded"
    assert output_problem(OutputError(quota)) == quota
    assert output_problem(RuntimeError("OSError: [Errno 5] Input/output error")) is None


def test_a_brokers_port_captured_too_is_named_and_its_calls_not_judged() -> None:
    """tcpdump -i any without a port filter on a host with a NameServer and a broker: a consumer's
    PULL_MESSAGEs, held by the broker's long polling when the capture ended, were "5 PULL_MESSAGE
    request(s) never answered" and its first GET_CONSUMER_LIST_BY_GROUP's SYSTEM_ERROR a warning."""
    broker, namesrv = "127.0.0.1:10911", "127.0.0.1:9876"
    rows = [(1.0, "c", "127.0.0.1:35884", 11, "PULL_MESSAGE", 1, None, None, False, "T", None, broker),
            (2.0, "c", "127.0.0.1:35884", 38, "GET_CONSUMER_LIST_BY_GROUP", 2, 1, 1.0, False, None, "no consumer",
             broker),
            (3.0, "c", "127.0.0.1:35886", 106, "GET_BROKER_CLUSTER_INFO", 3, None, None, False, None, None, namesrv)]
    rows = [(*row[:11], row[11], None, False, "in.pcap", f"{namesrv}@x") for row in rows]
    groups: findings_module.Groups = {}
    findings_module.note_calls(groups, pa.array(rows, type=tables.row_type(CALL)))
    findings_module.calls_at(groups, {namesrv})
    endpoints = [{"endpoint": broker, "kind": "other", "requests": 2, "outages": [], "refused": []},
                 {"endpoint": namesrv, "kind": "nameserver", "requests": 1, "outages": [], "refused": []}]
    said = findings_module.evidence([], groups, [], findings_module.response_groups(groups), endpoints)
    assert [(f["kind"], f["severity"], f.get("code_name")) for f in said] == [
        ("unanswered", "warning", "GET_BROKER_CLUSTER_INFO"), ("other_server", "info", None)]
    assert said[1]["message"] == (f"{broker} was asked 2 request(s) no NameServer serves: a broker's port, or another "
                                  "RocketMQ server's, captured with the NameServer's; its answers are not judged here")


def test_a_capture_without_a_nameserver_does_not_read_as_a_healthy_one() -> None:
    """A capture of a broker's port alone (or of anything but a NameServer): summary.json's and
    report.html's headline said "nothing needs attention" while the command exited 6."""
    broker = "10.0.0.3:10911"
    other = {"endpoint": broker, "kind": "other", "accepted": 0, "requests": 9, "outages": [], "refused": []}
    found = findings_module.evidence([], {}, [], {}, [other])
    assert findings_module.attention(found, nameservers=0)["attention"] == findings_module.NO_NAMESERVER_FOUND
    assert findings_module.attention(found, nameservers=1)["attention"] == "nothing needs attention"
    cut = [{"kind": "capture_cut", "severity": "warning", "message": "m", "path": "a.pcap", "cut_at": 200,
            "cut_frames": 3}]
    assert findings_module.attention(cut, nameservers=0)["attention"] == (
        f"{findings_module.NO_NAMESERVER_FOUND} · packets cut at 200 bytes: 3 frames partly read · "
        "1 warning: 1 capture file cut by a snap length")


def test_a_web_server_on_the_nameserver_port_is_no_nameserver_found_not_one_unread() -> None:
    """python -m http.server on 9876, 20 GETs captured (real, by hand): the report led with "no
    NameServer traffic read (what servers were asked cannot be read: below)", while the command
    said "no NameServer traffic found", and told its HTTP "an HTTP port captured with the
    NameServer's" with no NameServer in the capture. HTTP is read as HTTP: a web server's port."""
    server = {"endpoint": "127.0.0.1:9876", "kind": "unknown", "accepted": 20, "requests": 0, "outages": [],
              "refused": []}
    groups: findings_module.Groups = {findings_module.UNDECODABLE: {
        ("127.0.0.1:55904>127.0.0.1:9876@1.0", "127.0.0.1:9876", "HTTP"): [118, 1.0, 1.0, None]}}
    found = findings_module.evidence([], groups, [], {}, [server])
    unread = next(f for f in found if f["kind"] == "server_unread")
    assert "speak HTTP (a web server's port, not RocketMQ remoting)" in unread["message"]
    assert "NameServer's" not in unread["message"]
    assert findings_module.attention(found, nameservers=0)["attention"].startswith(
        findings_module.NO_NAMESERVER_FOUND + " · 2 warnings")
    groups[findings_module.UNDECODABLE] = {("c>127.0.0.1:9876@1.0", "127.0.0.1:9876", "TLS"): [700, 1.0, 1.0, None]}
    tls = findings_module.evidence([], groups, [], {}, [server])  # a TLS NameServer may be behind it: unread
    assert findings_module.attention(tls, nameservers=0)["attention"].startswith(findings_module.NO_NAMESERVER_READ)


def test_other_services_beside_the_nameservers_are_information() -> None:
    """A capture with no port filter on a NameServer's host holds ssh, a database, a web server:
    each connection was a warning ("bytes that are no remoting frame") and each server one
    ("nothing it was asked can be read"), burying the cluster's own problems. Beside NameServers read
    on their port they are information; on a NameServer's port, or with no NameServer read, they
    stay warnings (a TLS NameServer may be what was wanted)."""
    ssh, tls_ns, broker = "127.0.0.1:22", "127.0.0.2:9876", "127.0.0.1:10911"
    groups = {findings_module.UNDECODABLE: {(f"127.0.0.1:5000>{ssh}@1.0", ssh, None): [900, 0.0, 0.0, None],
                                            (f"127.0.0.1:5001>{tls_ns}@1.0", tls_ns, "TLS"): [700, 0.0, 0.0, None]}}
    endpoints = [{"endpoint": "127.0.0.1:9876", "kind": "nameserver", "accepted": 3, "outages": [], "refused": []},
                 {"endpoint": broker, "kind": "other", "accepted": 1, "requests": 9, "outages": [], "refused": []},
                 {"endpoint": ssh, "kind": "unknown", "accepted": 1, "outages": [], "refused": []},
                 {"endpoint": tls_ns, "kind": "unknown", "accepted": 1, "outages": [], "refused": []}]
    found = findings_module.evidence([], groups, [], {}, endpoints)
    severity = {(item["kind"], item.get("endpoint") or item.get("server")): item["severity"] for item in found}
    assert severity[("server_unread", ssh)] == severity[("undecodable_connection", ssh)] == "info"
    assert severity[("server_unread", tls_ns)] == severity[("undecodable_connection", tls_ns)] == "warning"
    assert findings_module.attention(found)["attention"] == (
        "encrypted (TLS): 1 connection to 127.0.0.2:9876 cannot be read · "
        "2 warnings: 1 server whose traffic cannot be read, 1 undecodable connection")
    alone = findings_module.evidence([], groups, [], {}, endpoints[2:])
    assert {item["severity"] for item in alone if item["kind"] != "other_server"} == {"warning"}


def test_notes_beside_the_captures_are_not_called_bad_input() -> None:
    """A corpus folder given whole (steps.txt, namesrv.log, TRUTH.json beside the capture): the
    report said "info: 4 bad input files: ..." of files it rightly left out."""
    rows = [{"path": f"d/{name}", "problem": "not a capture", "size": 10, "trailing_bytes": 0, "compression": None,
             "records": 0} for name in ("steps.txt", "namesrv.log")]
    problems = findings_module.attention(findings_module.evidence(rows, {}, [], {}, []))["findings"]
    assert [(p["severity"], p["message"]) for p in problems] == [
        ("info", "2 files beside the captures that are not captures (notes, logs), left out: d/namesrv.log, "
                 "d/steps.txt")]


def _drawn(dom: str, plot: str) -> str:
    """The SVG plotly.js drew for one plot of the report."""
    div = dom[dom.index(f'id="plot-{plot}"'):]
    return div[:div.index("</svg>", div.index('class="infolayer"'))]


def test_a_time_plot_s_legend_is_drawn_below_its_axis_title_with_one_broker(spark, tmp_path) -> None:
    """With one broker (a real 5.3.3 capture: the proxy's cluster) the heartbeat plot is short: its
    legend, placed by the plot area's height, was drawn over the axis title "time (UTC)". Now it is
    placed from the figure's bottom, below the title, in the page as Chromium draws it."""
    from tests.spark.test_truth import REAL, truth_of

    truth = truth_of("v5-proxy")
    out = run_job(spark, [str(REAL / "v5-proxy" / f) for f in truth["files"]], tmp_path / "out")
    assert len(out.brokers) == 1
    flags = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1400,2400",
             "--virtual-time-budget=10000", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*flags, "--dump-dom", Path(out.out, "report.html").as_uri()], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    for plot in ("timeline", "topics"):
        drawn = _drawn(dom, plot)
        legend_top = float(re.search(r'class="legend"[^>]*transform="translate\([\d.]+,\s*([\d.]+)\)', drawn)[1])
        title = re.search(r'<text class="xtitle"[^>]*>', drawn)
        assert title, plot
        title_baseline = float(re.search(r'\sy="([\d.]+)"', title[0])[1])
        assert legend_top > title_baseline + 2, (plot, legend_top, title_baseline)


def test_with_several_nameservers_a_broker_s_findings_name_the_nameserver_and_when_its_capture_ended(
        spark, tmp_path) -> None:
    """v4-multi's first and fifth files read together (three NameServers, brokers registered with
    each; 100 s not captured between the files): broker-a is alive at each NameServer in each
    file's period. Each item names its NameServer and the time its capture ended (the first
    period's end, not the capture's), never a bare 'broker-a ... (5x)'."""
    from tests.spark.test_truth import REAL

    folder = REAL / "v4-multi"
    out = run_job(spark, [str(folder / "v4-multi-054532.pcap.gz"), str(folder / "v4-multi-054738.pcap.gz")],
                  tmp_path / "out", report=False)
    alive = kinds(out.summary, "broker_alive_at_end")
    servers = {item["session"].split("@")[0] for item in alive}
    assert len(alive) == 5 and servers == {"127.0.0.1:9876", "127.0.0.1:9877", "127.0.0.1:9878"}
    for item in alive:
        server = item["session"].split("@")[0]
        assert item["message"].startswith(f"DefaultCluster / broker-a / 0 (MASTER) / 127.0.0.1:10911 @ {server}: ")
        ended = iso_time(cli_seconds(item["last_alive"]) + item["seconds"])
        assert f"alive when its capture ended at {ended}" in item["message"], item["message"]
    periods = out.summary["inputs"]["periods"]
    assert len(periods) == 2
    assert {item["message"].split(" at ")[1].split(" ")[0] for item in alive} == {
        iso_time(cli_seconds(p["end"])) for p in periods}


def cli_seconds(text: str) -> float:
    """An ISO 8601 UTC time of the summary, as seconds."""
    from tests.spark.truth_check import seconds

    return seconds(text)


def test_a_page_over_many_input_files_lists_those_with_a_problem_and_the_rest_a_click_away() -> None:
    """A day of one-minute rotation: the page counts the files, lists the ones with a problem open
    and every file inside <details>, so the pictures are not 1,440 table rows down the page."""
    def row(n: int, problem: str | None = None) -> dict:
        return {"path": f"cap_{n:04}.pcap", "size": 24 if problem else 9_000, "link_type": "ETHERNET",
                "records": 0 if problem else 10, "first": None, "last": None, "problem": problem}

    rows = [row(n, "empty" if n in (7, 700) else None) for n in range(1440)]
    section = report._inputs({"files": rows, "periods": [], "gaps": []})
    shown, every = section.split("<details>")
    assert "1,440 files, 14,380 records, 2 with a problem:" in shown
    assert shown.count("<tr class='problem'>") == 2 and "cap_0001.pcap" not in shown
    assert every.count("<tr class=") == 1440
    few = report._inputs({"files": rows[:report.FILES_SHOWN], "periods": [], "gaps": []})
    assert "<details>" not in few and few.count("<tr class=") == report.FILES_SHOWN


def test_a_peer_s_control_characters_are_shown_escaped_in_the_findings_lines() -> None:
    """A broker registered as ``b\\x1b[2J\\x1b[31mRED\\r`` in a cluster ``C\\x1b]0;pwned\\x07``: the
    console printed the findings' lines raw, and the data engineer's terminal cleared, recoloured
    and retitled itself. The lines show each control character escaped, as the server's log does;
    the evidence's own fields keep the names exact."""
    cluster, name = "C\x1b]0;pwned\x07", "b\x1b[2J\x1b[31mRED\r"
    said = [{"kind": "crc_failure", "severity": "critical", "broker": f"{cluster} / {name} / 0", "count": n,
             "cluster": cluster, "broker_name": name,
             "message": f"{cluster} / {name}-{n} / 0 (MASTER): 1 registration(s) failed the body CRC"}
            for n in (1, 2)]
    (problem,) = findings_module.attention(said)["findings"]
    lines = [problem["message"], *(item["message"] for item in problem["evidence"])]
    assert all(line.isprintable() for line in lines), lines
    assert "C\\x1b]0;pwned\\x07 / b\\x1b[2J\\x1b[31mRED\\r-1" in problem["evidence"][0]["message"]
    assert {item["broker_name"] for item in problem["evidence"]} == {name}


def test_answers_a_snap_length_left_unpaired_are_not_told_as_none() -> None:
    """At -s 96 (v5-opsrot) the opaque pairing an answer with its request is cut: the TOPIC_NOT_EXIST
    answers to a consumer's lookups were in the capture but no request's, and the page's table of
    non-zero answers said "none" (no error). It says how many answers are unknown, by code, and a
    capture whose answers were all paired shows the plain "none" as before."""
    codes = [{"code_name": "GET_ROUTEINFO_BY_TOPIC", "requests": 18, "answered": 2, "cut": 16},
             {"code_name": "REGISTER_BROKER", "requests": 34, "answered": 0, "cut": 34},
             {"code_name": "GET_BROKER_CLUSTER_INFO", "requests": 1, "answered": 1, "cut": 0}]
    unpaired = report._response_codes([], codes)
    assert "<p>none</p>" not in unpaired
    assert "none known: the answers to 50 request(s) are unknown" in unpaired
    assert "GET_ROUTEINFO_BY_TOPIC 16, REGISTER_BROKER 34</p>" in unpaired
    row = {"code_name": "GET_ROUTEINFO_BY_TOPIC", "response_code": 17, "response_name": "TOPIC_NOT_EXIST",
           "remark": "none", "count": 1, "requesters": {"10.0.0.1:4": 1}}
    assert "besides these: the answers to 50 request(s)" in report._response_codes([row], codes)
    paired = [{**code, "cut": 0} for code in codes]
    assert report._response_codes([], paired) == report._response_codes([]) == (
        "<section id='response-codes'><h2>Answers with a non-zero code</h2><p>none</p></section>")


def test_unpaired_answers_counted_are_the_nameservers_only() -> None:
    """Captured without a port filter (v4-ring), a broker's port's 20,010 SEND_MESSAGE_V2 answers cut by the
    snap length are not the NameServer's: the response-code table never holds them, nor its line."""
    summary = {"endpoints": [{"endpoint": "ns:9886", "kind": "nameserver"}, {"endpoint": "b:10911", "kind": "other"},
                             {"endpoint": "c:9878", "kind": "controller"}],
               "calls_by_server": [{"server": "ns:9886", "code_name": "REGISTER_BROKER", "cut": 19},
                                   {"server": "b:10911", "code_name": "SEND_MESSAGE_V2", "cut": 10004},
                                   {"server": "c:9878", "code_name": "REGISTER_BROKER", "cut": 2},
                                   {"server": "ns:9886", "code_name": "GET_ROUTEINFO_BY_TOPIC", "cut": 10}]}
    assert report._judged_calls(summary) == [{"code_name": "GET_ROUTEINFO_BY_TOPIC", "cut": 10},
                                             {"code_name": "REGISTER_BROKER", "cut": 21}]


def test_brokers_named_by_their_connections_are_counted_as_such() -> None:
    """At -s 96 (v5-opsrot) no broker's name or address survives: each is named by the connection it
    registers over, so broker-a-s, killed while registered with two NameServers, was "2 brokers whose
    connection closed" in the headline (the whole capture: 1 broker, 2x). The count says how many of its
    names are connections; brokers named by their address are counted as before."""
    from spark_analysis.decode.rows import cut_broker_addr

    def closed(addr: str, label: str) -> dict:
        return findings_module._finding("broker_connection_closed", "critical", f"{label} closed", broker=label,
                                        broker_addr=addr, t=1.0)

    cut = [closed(cut_broker_addr(client), f"? / ? / ? / {cut_broker_addr(client)}")
           for client in ("127.0.0.1:44406", "127.0.0.1:54060")]
    found = findings_module.attention(cut)
    assert found["attention"] == ("1 critical: 2 brokers (2 counted by connection) whose connection closed "
                                  "without unregistering")
    assert found["findings"][0]["message"].startswith("2 brokers (2 counted by connection) whose connection")
    assert found["findings"][0]["by_connection"] == 2
    named = findings_module.attention([closed("127.0.0.1:11921", "C / broker-a / 1 (SLAVE) / 127.0.0.1:11921")] * 2)
    assert named["attention"] == "1 critical: 1 broker whose connection closed without unregistering"
    assert "by_connection" not in named["findings"][0]
    alone = findings_module.attention(cut[:1])  # one broker is one, whatever names it
    assert alone["attention"] == "1 critical: 1 broker whose connection closed without unregistering"
    assert "by_connection" not in alone["findings"][0]


def test_a_broker_whose_name_was_read_is_one_broker_over_its_reconnections() -> None:
    """A snap length that keeps a registration's brokerName but cuts its brokerAddr names the broker's
    stay by the connection it registers over; a broker that reconnected (a new connection each time)
    was as many brokers as connections, "2 brokers (2 counted by connection)". Its name read, it is
    counted by that name, once, and the line says so; brokers whose name was cut too stay counted
    by connection, and summary.json's finding says how many were counted each way."""
    from spark_analysis.decode.rows import cut_broker_addr

    def closed_stay(client: str, name: str | None) -> dict:
        broker = {"broker_addr": cut_broker_addr(client), "session": "10.0.0.9:9876@x", "server": "10.0.0.9:9876",
                  "registrations": 3, "gaps": [], "crc_failure_times": [], "refused": [], "topic_drops": [],
                  "version_backwards": [], "cluster": "C", "broker_name": name, "broker_id": 0, "role": "MASTER"}
        return findings_module._finding("broker_connection_closed", "critical", f"{broker['broker_addr']} closed",
                                        **findings_module.stay_fields(broker), t=1.0)

    reconnected = [closed_stay(client, "broker-a") for client in ("10.0.0.1:40001", "10.0.0.1:40002")]
    assert {item["identity"] for item in reconnected} == {"C / broker-a / 0"}
    found = findings_module.attention(reconnected)
    assert found["attention"] == ("1 critical: 1 broker (1 counted by name, its address not captured) whose "
                                  "connection closed without unregistering")
    assert found["findings"][0]["units"] == 1 and found["findings"][0]["by_name"] == 1
    assert "by_connection" not in found["findings"][0]
    nameless = closed_stay("10.0.0.2:40003", None)
    assert "identity" not in nameless
    found = findings_module.attention([*reconnected, nameless])
    assert found["attention"] == ("1 critical: 2 brokers (1 counted by connection; 1 counted by name, its address "
                                  "not captured) whose connection closed without unregistering")
    assert (found["findings"][0]["by_connection"], found["findings"][0]["by_name"]) == (1, 1)


def test_error_answers_no_request_pairs_with_are_told() -> None:
    """At -s 96 (v5-opsrot) the lookups' opaques are cut: the consumers' 8 TOPIC_NOT_EXIST answers pair
    with no request, so no call held them and no finding said them. Told by response code and
    client, less those a call pairs with (counted once); a broker's port's own answers are not."""
    import pyarrow as pa

    from spark_analysis.decode.schema import CALL_ROWS, FRAME_ROWS

    NAMESRV = "10.0.0.9:9876"

    def answer(client: str, code: int, server: str = NAMESRV) -> dict:
        return {"ts": 5.0, "client": client, "server": server, "direction": "response", "code": code, "flag": 1}

    frames = [answer("10.0.0.7:1", 17)] * 5 + [answer("10.0.0.8:2", 17)] * 2 + [answer("10.0.0.8:2", 0)] + [
        answer("10.0.0.7:1", 17, "10.0.0.1:10911")]
    paired = [{"ts": 4.0, "client": "10.0.0.8:2", "server": NAMESRV, "code": 105, "code_name": "GET_ROUTEINFO_BY_TOPIC",
               "response_code": 17, "topic": "T"}]
    groups: dict = {}
    findings_module.note_error_answers(groups, pa.array(frames, pa.struct(FRAME_ROWS)))
    findings_module.note_calls(groups, pa.array(paired, pa.struct(CALL_ROWS)))
    findings_module.calls_at(groups, {NAMESRV})
    (told,) = findings_module._unpaired_error_answers(groups)
    assert told["kind"] == "unpaired_error_answer" and told["severity"] == "info"
    assert told["count"] == 6 and told["requesters"] == {"10.0.0.7:1": 5, "10.0.0.8:2": 1}
    assert told["message"].startswith("6 answer(s) TOPIC_NOT_EXIST (17) paired with no request")


def test_an_error_code_the_report_does_not_know_is_said_as_its_number_and_unknown() -> None:
    """An answer's code that neither the NameServer's codes nor a controller's name (a newer
    server's, a proxy's, a buggy client's) was shown as its bare number in the name column: said as
    "unknown" beside its number, in the findings' words, the response-code table and the page; a
    controller's code (CONTROLLER_NOT_LEADER, 2007) by its name."""
    from spark_analysis.decode.schema import CALL_ROWS, FRAME_ROWS
    from spark_analysis.output import summary as summary_module
    NAMESRV = "10.0.0.9:9876"

    def call(code: int, client: str = "10.0.0.8:2") -> dict:
        return {"ts": 4.0, "client": client, "server": NAMESRV, "code": 100, "code_name": "PUT_KV_CONFIG",
                "response_code": code, "response_remark": None, "topic": None}

    answers = [{"ts": 5.0, "client": "10.0.0.7:1", "server": NAMESRV, "direction": "response", "code": 2099,
                "flag": 1}] * 3
    groups: dict = {}
    findings_module.note_error_answers(groups, pa.array(answers, pa.struct(FRAME_ROWS)))
    findings_module.note_calls(groups, pa.array([call(2099), call(2007)], pa.struct(CALL_ROWS)))
    findings_module.calls_at(groups, {NAMESRV})
    responses = findings_module.response_groups(groups)
    said = {(f["kind"], f["response_code"]): f for f in findings_module.evidence([], groups, [], responses)}
    unknown, controller = said[("response_code", 2099)], said[("response_code", 2007)]
    assert unknown["response_name"] == "unknown" and "answered 2099 (unknown) 1x" in unknown["message"]
    assert controller["response_name"] == "CONTROLLER_NOT_LEADER"
    unpaired = said[("unpaired_error_answer", 2099)]
    assert unpaired["response_name"] == "unknown"
    assert unpaired["message"].startswith("3 answer(s) 2099 (unknown) paired with no request")
    rows = summary_module._response_codes(responses)
    assert {(row["response_code"], row["response_name"]) for row in rows} == {(2099, "unknown"),
                                                                              (2007, "CONTROLLER_NOT_LEADER")}
    page = report._response_codes([{**row, "requesters": {"10.0.0.8:2": 1}} for row in rows])
    assert "<td>2,099</td><td>unknown</td>" in page


def test_an_expiry_another_connection_may_have_renewed_is_said_so_not_as_an_expiry() -> None:
    """replay._may_be_back's stays: the finding names the connections that may be the broker back,
    and says no expiry; without them, an expiry."""
    label = "? / ? / ? / ? (address not captured; registers from 10.93.0.2:39660)"
    broker = {"ended": "expired", "ended_at": 220.0, "silence_s": 120.0, "closed": "fin from server",
              "last_alive": 100.0, "server": "10.93.0.1:9876", "registered_again": None,
              "maybe_back_as": [{"broker": "? (address not captured; registers from 10.93.0.3:46660)", "t": 160.0}]}
    (said,) = findings_module._story(broker, label, {"broker": label})
    assert said["kind"] == "expired_or_reconnected"
    assert said["maybe_back_as"] == [{"broker": broker["maybe_back_as"][0]["broker"], "t": iso_time(160.0)}]
    assert "registers from 10.93.0.3:46660) at" in said["message"] and "expired, unless" in said["message"]
    (plain,) = findings_module._story(dict(broker, maybe_back_as=[]), label, {"broker": label})
    assert plain["kind"] == "heartbeat_expired"
