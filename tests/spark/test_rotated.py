"""A capture rotated into files (tcpdump -G or -C, with -z gzip) tells the story of the whole capture,
whatever the order the files are given in and whatever they are named: real captures of the corpus
(tests/data/captures/real/) cut at packet boundaries into gzipped parts, the report of the parts
against the report of the whole. A broker's stay, a silence and a connection go on across the cut;
nothing ends at a file boundary."""

from __future__ import annotations

import gzip
import struct
import time
from pathlib import Path

from spark_analysis.model.periods import ConnectionEnds, capture_periods, observed_spans, rotated_sets
from spark_analysis.model.sessions import Sessions
from tests.spark.conftest import Outputs, evidence_of, run_job, without_input
from tests.spark.test_truth import REAL, truth_of
from tests.spark.truth_check import judge, seconds

_PCAP_MAGICS = {b"\xd4\xc3\xb2\xa1": 1e-6, b"\x4d\x3c\xb2\xa1": 1e-9}  # little-endian, micro- or nanoseconds


def records(data: bytes) -> list[tuple[int, float]]:
    """(offset, time) of each record of a little-endian classic pcap."""
    scale = _PCAP_MAGICS[data[:4]]
    found, at = [], 24
    while at + 16 <= len(data):
        seconds, fraction, length = struct.unpack_from("<III", data, at)
        found.append((at, seconds + fraction * scale))
        at += 16 + length
    return found


def record_ends(data: bytes, found: list[tuple[int, float]]) -> list[int]:
    """Where each of ``found`` (records(data)) ends: where the next starts, the last at the data's end."""
    return [offset for offset, _ in found[1:]] + [len(data)]


def rotate(capture: Path, into: Path, names: list[str]) -> list[Path]:
    """The capture cut into len(names) gzipped parts at the records nearest equal shares of its
    time span, each part a whole pcap (the header repeated), named in time order by ``names``."""
    data = gzip.decompress(capture.read_bytes())
    found = records(data)
    first, last = found[0][1], found[-1][1]
    cuts = [next(offset for offset, t in found if t >= first + (last - first) * n / len(names))
            for n in range(1, len(names))]
    into.mkdir(parents=True, exist_ok=True)
    parts = []
    for name, start, end in zip(names, [24, *cuts], [*cuts, len(data)], strict=True):
        parts.append(into / name)
        parts[-1].write_bytes(gzip.compress(data[:24] + data[start:end]))
    return parts


def rotate_by_duration(capture: Path, into: Path, seconds: float) -> list[Path]:
    """The capture cut every ``seconds`` of its time, as dumpcap's ring buffer by duration (``-b
    duration:6``) and editcap -i cut: one gzipped file per interval named as dumpcap names them
    (cap_NNNNN_YYYYmmddHHMMSS), a file of an interval without packets its header only."""
    data = gzip.decompress(capture.read_bytes())
    found = records(data)
    first = found[0][1]
    into.mkdir(parents=True, exist_ok=True)
    by_interval: dict[int, list[int]] = {}
    for index, (_, t) in enumerate(found):
        by_interval.setdefault(int((t - first) // seconds), []).append(index)
    ends = record_ends(data, found)
    parts = []
    for interval in range(max(by_interval) + 1):
        start = first + interval * seconds
        name = f"cap_{interval:05d}_{time.strftime('%Y%m%d%H%M%S', time.gmtime(start))}.pcap.gz"
        body = b"".join(data[found[i][0]:ends[i]] for i in by_interval.get(interval, []))
        parts.append(into / name)
        parts[-1].write_bytes(gzip.compress(data[:24] + body))
    return parts


def same_story(parts: Outputs, whole: Outputs) -> None:
    """The parts' report tells the whole's: brokers.csv rows (but for the files named), findings,
    sessions, capture periods and counts (but for the bytes: each part repeats the pcap header)."""
    assert [without_input(b) for b in parts.brokers] == [without_input(b) for b in whole.brokers]
    assert evidence_of(parts.summary) == evidence_of(whole.summary)
    assert parts.summary["inputs"]["periods"] == whole.summary["inputs"]["periods"]
    assert parts.summary["inputs"]["gaps"] == whole.summary["inputs"]["gaps"] == []
    assert {k: v for k, v in parts.summary["counts"].items() if k != "bytes"} == {
        k: v for k, v in whole.summary["counts"].items() if k != "bytes"}
    assert parts.summary["endpoints"] == whole.summary["endpoints"]


def test_a_capture_rotated_into_gzipped_files_is_the_whole_capture(spark, tmp_path: Path) -> None:
    """v4-expiry (a broker frozen past the expiry, the NameServer's idle close) cut in three, the
    first cut inside the frozen broker's silence; named so that their names sort against time, and
    given in reverse time order, then as a directory: each gives the whole file's report, and the
    truth of the capture."""
    name = "v4-expiry"
    truth = truth_of(name)
    whole = run_job(spark, [str(REAL / name / truth["files"][0])], tmp_path / "whole", report=False)
    parts = rotate(REAL / name / truth["files"][0], tmp_path / "parts", ["c.pcap.gz", "b.pcap.gz", "a.pcap.gz"])
    frozen = next(s for s in truth["stays"] if s["end"] == "expired")
    assert seconds_of(frozen["ended_at"]) - frozen["silence_s"] < first_record(parts[1]) < seconds_of(
        frozen["ended_at"])  # the first cut is inside the silence the NameServer ended
    for given, out in (([str(p) for p in reversed(parts)], "reversed"), ([str(tmp_path / "parts")], "directory")):
        rotated = run_job(spark, given, tmp_path / out, report=False)
        same_story(rotated, whole)
        assert not judge(truth, rotated.summary)
        assert {b["input"] for b in rotated.brokers} >= {" ".join(str(p) for p in parts)}  # a stay over the files


def test_two_machines_rotated_sets_given_mixed_are_each_machine_s_capture(spark, tmp_path: Path) -> None:
    """v5-pair: two captures running at once (one per NameServer port, the second started later and
    stopped earlier), each rotated in two; the four files given mixed: the report of the two whole
    files, and the truth. The second server is not observed after its capture stopped."""
    name = "v5-pair"
    truth = truth_of(name)
    whole = run_job(spark, [str(REAL / name / f) for f in truth["files"]], tmp_path / "whole", report=False)
    a = rotate(REAL / name / truth["files"][0], tmp_path / "parts", ["a-2.pcap.gz", "a-1.pcap.gz"])
    b = rotate(REAL / name / truth["files"][1], tmp_path / "parts", ["b-2.pcap.gz", "b-1.pcap.gz"])
    mixed = run_job(spark, [str(p) for p in (b[1], a[0], b[0], a[1])], tmp_path / "mixed", report=False)
    same_story(mixed, whole)
    assert not judge(truth, mixed.summary)
    for broker in mixed.brokers:  # its input: the files that carried its server, not the other capture's
        mine = a if broker["server"].endswith(":9876") else b
        assert set(broker["input"].split()) <= {str(p) for p in mine}, broker
    assert len(whole.summary["inputs"]["periods"]) == 1  # two captures at once: one period, no gap


def test_a_ring_buffer_of_short_files_some_without_packets_is_the_whole_capture(spark, tmp_path: Path) -> None:
    """v4-expiry cut every 6 s, as dumpcap's ring buffer (``tshark -b duration:6``) or tcpdump -G 6
    rotate: a broker's connection, heard every 30 s, is in one file of five, and a file often holds
    only other connections (the launch script's polls, a client's lookup), or nothing. The files
    are one capture: the whole capture's report (no second capture point, no stay cut at a file),
    and each file without packets is one line of information, not a bad input."""
    name = "v4-expiry"
    truth = truth_of(name)
    whole = run_job(spark, [str(REAL / name / truth["files"][0])], tmp_path / "whole", report=False)
    parts = rotate_by_duration(REAL / name / truth["files"][0], tmp_path / "ring", 6.0)
    quiet = [p for p in parts if len(gzip.decompress(p.read_bytes())) == 24]
    assert len(parts) > 60 and quiet
    ring = run_job(spark, [str(tmp_path / "ring")], tmp_path / "out", report=False)
    same_story(ring, whole)
    [told] = [f for f in ring.summary["findings"] if f["kind"] == "bad_input"]
    assert not judge(truth, {**ring.summary, "findings": [f for f in ring.summary["findings"] if f is not told]})
    assert told["severity"] == "info" and {item["path"] for item in told["evidence"]} == {str(p) for p in quiet}
    assert "critical" not in ring.summary["attention"]
    assert f"\n      {told['message']}\n" in "\n".join(ring.progress)  # said after reading as the finding says it
    # one reading task for the small compressed files, not one each
    assert f"inputs: {len(parts)} files, " in ring.progress[0] and "; 1 tasks of up to" in ring.progress[0]


def test_a_ring_with_files_overwritten_between_two_tells_the_hole_first_and_nothing_across_it(
        spark, tmp_path: Path) -> None:
    """v5-expiry cut every 6 s, the files of 30 s while both brokers heartbeat taken out, as a ring
    that wrapped (tcpdump -C M -W N -z gzip) overwrites files between ones it keeps: the files after
    carry on the brokers' connections past bytes no file holds. Said first (a warning, the
    headline's first words), the gap between the two capture periods "nothing captured"; the
    report is that of the files before and of those after, each read alone (no broker silent
    across the hole: its silence, an expiry or an outage there would be invented), except that a
    broker alive where the files go missing is not "alive at the capture's end" (a real ring,
    tcpdump -C 1 -W 3 -z gzip, said both brokers were, beside their unregistering after the gap):
    broker_alive_before_missing, at the gap's start."""
    name = "v5-expiry"
    parts = rotate_by_duration(REAL / name / truth_of(name)["files"][0], tmp_path / "ring", 6.0)
    start = first_record(parts[0])
    timed = [(first_record(p), p) for p in parts if len(gzip.decompress(p.read_bytes())) > 24]
    before = [p for t, p in timed if t < start + 300.0]
    after = [p for t, p in timed if t >= start + 330.0]
    for p in parts:
        if p not in before and p not in after:
            p.unlink()
    ring = run_job(spark, [str(tmp_path / "ring")], tmp_path / "out", report=False)
    [missing] = [f for f in ring.summary["findings"] if f["kind"] == "files_missing"]
    [item] = missing["evidence"]
    assert (item["before"], item["after"]) == (str(before[-1]), str(after[0]))
    assert missing["severity"] == "warning" and ring.summary["findings"][0]["kind"] in ("files_missing", "bad_input")
    assert ring.summary["attention"].startswith(f"files missing from a rotated set: {item['seconds']:,.1f} s not "
                                                f"captured")
    [gap] = ring.summary["inputs"]["gaps"]
    assert gap["cause"] == "nothing captured" and (gap["start"], gap["end"]) == (item["from"], item["until"])
    assert any(line.endswith(item["message"]) for line in ring.progress)
    early = run_job(spark, [str(p) for p in before], tmp_path / "early", report=False)
    late = run_job(spark, [str(p) for p in after], tmp_path / "late", report=False)
    assert [without_input(b) for b in ring.brokers] == [without_input(b) for b in early.brokers + late.brokers]
    told = {e for e in evidence_of(ring.summary) if e[0] != "files_missing"}
    cut_short = {e for e in evidence_of(early.summary) if e[0] == "broker_alive_at_end"}
    assert len(cut_short) == 2 and all(item["from"] in e[2] for e in cut_short)  # both brokers, at the gap's start
    assert told == (set(evidence_of(early.summary)) - cut_short) | set(evidence_of(late.summary)) | {
        ("broker_alive_before_missing", "info", e[2].replace("alive when its capture ended at", "alive at").replace(
            " s before)", " s before): what became of it while nothing was captured is unknown").replace(
            " (last heartbeat", ", where files of the rotated set go missing (last heartbeat"))
        for e in cut_short}


def seconds_of(text: str) -> float:
    found = seconds(text)
    assert found is not None
    return found


def first_record(part: Path) -> float:
    return records(gzip.decompress(part.read_bytes()))[0][1]


# -- the rule alone (model/periods.py), without Spark -----------------------------------------------

BROKER = ("127.0.0.1:10911", "127.0.0.1:9876")


def _open(first: float, last: float, seq: int, *, opened: bool = False, closed: bool = False) -> ConnectionEnds:
    """A broker's connection within one file: its segments each way from ``seq`` on, 100 bytes."""
    return ConnectionEnds(first, opened, last, closed, first_seq=(seq, seq + 7), next_seq=(seq + 100, seq + 107))


def test_files_chain_by_the_connections_they_carry_on_not_by_name_or_order() -> None:
    """Two machines' rotated sets, interleaved in time and given in any order: each file continues
    the capture whose connection it carries on (sequence numbers going on); a file of the same
    4-tuple whose sequence numbers do not go on, or one that opens it anew, starts another."""
    files = (
        (0.0, 30.0, "m1-z"), (30.5, 60.0, "m1-a"),  # machine 1: 30.5 s, the next file 0.5 s after
        (0.2, 29.0, "m2-y"), (31.0, 59.0, "m2-b"),  # machine 2: the same 4-tuple, other sequence numbers
        (70.0, 90.0, "later"),  # 10 s after: the same 4-tuple anew (a SYN): another session
    )
    ends = {"m1-z": {BROKER: _open(0.0, 30.0, 1000)}, "m1-a": {BROKER: _open(30.5, 60.0, 1100)},
            "m2-y": {BROKER: _open(0.2, 29.0, 5_000_000_000 % 2**32)},
            "m2-b": {BROKER: _open(31.0, 59.0, 5_000_000_100 % 2**32)},
            "later": {BROKER: _open(70.0, 90.0, 1200, opened=True)}}
    for order in (files, tuple(reversed(files)), tuple(sorted(files, key=lambda f: f[2]))):
        captures = rotated_sets(order, ends)
        assert [c.paths for c in captures] == [("m1-z", "m1-a"), ("m2-y", "m2-b"), ("later",)]
        assert capture_periods(captures) == [(0.0, 60.0), (70.0, 90.0)]
    # 5 s after, the same 4-tuple with sequence numbers far from where it stopped: not this connection
    later = ((0.0, 30.0, "m1-z"), (35.0, 60.0, "m1-a"))
    assert [c.paths for c in rotated_sets(later, ends)] == [("m1-z", "m1-a")]
    ends["m1-a"] = {BROKER: _open(35.0, 60.0, 1000 + (1 << 30))}
    assert [c.paths for c in rotated_sets(later, ends)] == [("m1-z",), ("m1-a",)]


def test_a_file_going_on_past_bytes_no_file_holds_starts_a_capture_after_missing_files() -> None:
    """A ring (tcpdump -C 1 -W 3 -z gzip) that wrapped: files between r1 and r5 were overwritten.
    r5 carries on r1's connection 8.4 s after r1 ended, past 3,900 bytes neither holds: a time
    nothing was captured (not a silence of the broker's), so r5 starts a capture of its own that
    names r1 and its end; a connection last seen before the hole and heard again only in a later
    file goes on past the same hole. Files 0.5 s apart with bytes missed are one capture (a segment lost at a
    rotation), and so are files 8.4 s apart whose connections go on from where they stopped (the
    network was quiet)."""
    files = ((0.0, 30.0, "r0"), (30.0001, 60.0, "r1"), (68.4, 90.0, "r5"), (90.0001, 100.0, "r6"))
    ends = {"r0": {BROKER: _open(0.0, 30.0, 1000)}, "r1": {BROKER: _open(30.0001, 60.0, 1100)},
            "r5": {BROKER: _open(68.4, 90.0, 5000)}, "r6": {BROKER: _open(90.0001, 100.0, 5100)}}
    for order in (files, tuple(reversed(files))):
        captures = rotated_sets(order, ends)
        assert [(c.paths, c.after_missing) for c in captures] == [(("r0", "r1"), None),
                                                                  (("r5", "r6"), ("r1", 60.0))]
        assert capture_periods(captures) == [(0.0, 60.0), (68.4, 100.0)]
    # a connection heard again only in a later file (tcpdump -G on a quiet network): the same hole
    other = ("127.0.0.1:10921", "127.0.0.1:9876")
    quiet = ((0.0, 30.0, "r0"), (30.0001, 60.0, "r1"), (68.4, 70.0, "r5"), (80.0, 85.0, "r6"))
    heard = {"r0": ends["r0"], "r1": {BROKER: _open(30.0001, 60.0, 1100), other: _open(31.0, 59.0, 9000)},
             "r5": {BROKER: _open(68.4, 70.0, 5000)}, "r6": {other: _open(80.0, 85.0, 9900)}}
    assert [(c.paths, c.after_missing) for c in rotated_sets(quiet, heard)] == [(("r0", "r1"), None),
                                                                               (("r5", "r6"), ("r1", 60.0))]
    near = ((0.0, 30.0, "r0"), (30.0001, 60.0, "r1"), (60.5, 90.0, "r5"), (90.0001, 100.0, "r6"))
    assert [(c.paths, c.after_missing) for c in rotated_sets(near, ends)] == [(("r0", "r1", "r5", "r6"), None)]
    ends["r5"], ends["r6"] = {BROKER: _open(68.4, 90.0, 1200)}, {BROKER: _open(90.0001, 100.0, 1300)}
    assert [(c.paths, c.after_missing) for c in rotated_sets(files, ends)] == [(("r0", "r1", "r5", "r6"), None)]


def test_a_server_is_observed_while_a_capture_carrying_it_runs() -> None:
    """A capture of one port that stopped earlier than another's: its server is not observed after
    it (its brokers' silence is not measured to the other capture's end)."""
    ends = {"a": {BROKER: _open(0.0, 100.0, 1)}, "b": {("127.0.0.1:10911", "127.0.0.1:9877"): _open(20.0, 60.0, 1)}}
    captures = rotated_sets(((0.0, 100.0, "a"), (20.0, 60.0, "b")), ends)
    spans = observed_spans(captures, ends)
    assert spans["127.0.0.1:9876"] == ((0.0, 100.0),) and spans["127.0.0.1:9877"] == ((20.0, 60.0),)
    sessions = Sessions((0.0,), {}, spans, (100.0,))
    assert sessions.end_of("127.0.0.1:9877", 50.0) == 60.0 and sessions.end_of("127.0.0.1:9876", 50.0) == 100.0
    assert sessions.name("127.0.0.1:9877", 50.0) == "127.0.0.1:9877@1970-01-01T00:00:20Z"


def test_a_quiet_rotation_s_files_chain_though_the_next_holds_other_connections() -> None:
    """Short files of sparse traffic: the second file starts 5 s after the first ended and holds
    only a connection opened since; the third carries on the first file's connection. One capture
    (the rule chained only files carrying on the file just before, or within 1 s of it)."""
    other = ("127.0.0.1:40000", "127.0.0.1:9876")
    files = ((0.0, 4.0, "f1"), (9.0, 10.0, "f2"), (31.0, 32.0, "f3"))
    ends = {"f1": {BROKER: _open(0.0, 4.0, 1000, opened=True)}, "f2": {other: _open(9.0, 10.0, 7, opened=True)},
            "f3": {BROKER: _open(31.0, 32.0, 1100)}}
    assert [c.paths for c in rotated_sets(files, ends)] == [("f1", "f2", "f3")]
    # the same 4-tuple opened anew while the capture last saw it open: another capture
    ends["f2"] = {BROKER: _open(9.0, 10.0, 1000 + (1 << 30), opened=True)}
    assert [c.paths for c in rotated_sets(files, ends)] == [("f1", "f3"), ("f2",)]


def test_two_points_rotating_at_once_keep_their_files_though_one_holds_only_a_new_connection() -> None:
    """The NameServer's host (s) and a broker's (b) both captured, each in short files (tcpdump -G 6).
    s2 holds only a lookup opened since, nearer b1's end than s1's: nothing says which capture it is
    of. The quiet rule put it after b1; s3 and s4 followed it there, and the broker connection's two
    copies (s4's and b1's) were one capture's (read twice, never told a second point). It starts a
    capture of its own, as before the rule: each capture holds one host's files."""
    client, lookup = ("10.0.0.3:40000", "10.0.0.1:9876"), ("10.0.0.4:40001", "10.0.0.1:9876")
    files = ((0.0, 5.0, "s1"), (0.1, 5.5, "b1"), (7.0, 7.5, "s2"), (13.0, 18.0, "s3"), (30.0, 30.5, "s4"),
             (30.1, 30.4, "b2"))
    ends = {"s1": {BROKER: _open(0.0, 5.0, 1000, opened=True), client: _open(1.0, 5.0, 50, opened=True)},
            "b1": {BROKER: _open(0.1, 5.5, 1000, opened=True)},
            "s2": {lookup: _open(7.0, 7.5, 9000, opened=True)},
            "s3": {client: _open(13.0, 18.0, 150), lookup: _open(13.0, 18.0, 9100)},
            "s4": {BROKER: _open(30.0, 30.5, 1100), client: _open(30.0, 30.5, 250)},
            "b2": {BROKER: _open(30.1, 30.4, 1100)}}
    captures = [c.paths for c in rotated_sets(files, ends)]
    assert all(len({path[0] for path in paths}) == 1 for paths in captures), captures
    assert ("b1", "b2") in captures
    # one point alone: the same lookup-only file continues it (the quiet rule)
    alone = {path: found for path, found in ends.items() if path.startswith("s")}
    assert [c.paths for c in rotated_sets(tuple(f for f in files if f[2] in alone), alone)] == [
        ("s1", "s2", "s3", "s4")]


def test_a_summary_time_reads_back_as_the_seconds_it_was_written_from() -> None:
    """summary.json's times (iso_time) read back by its one inverse, which the findings (outages,
    deletions, lookups) and the controller's view (fail-overs) use: each had its own parser."""
    from spark_analysis.analysis import controller, findings
    from spark_analysis.model.sessions import iso_seconds, iso_time

    written = 1_800_000_123.456789
    assert abs(iso_seconds(iso_time(written)) - written) < 1e-6
    assert findings.seconds_between(iso_time(written), iso_time(written + 2.5)) == 2.5
    assert controller._seconds(iso_time(written)) == iso_seconds(iso_time(written))
    assert controller._seconds(None) != controller._seconds(None)  # nan: no time
