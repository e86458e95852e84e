"""The truth reader (tests/spark/truth_reader/) that wrote every TRUTH.json of the real-capture corpus: it
rebuilds each of them from the folder's own files, reads both servers' logs (Java's and ours), and says
so when the log or our events file does not back what the packets show."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.spark.truth_reader import build, corpus, packets, server_logs

REAL = Path(__file__).resolve().parents[1] / "data" / "captures" / "real"
FOLDERS = sorted(p.parent.name for p in REAL.glob("*/TRUTH.json"))


def rebuilt(folder: Path) -> tuple[dict, list[str]]:
    truth, problems = build.build(build.parser().parse_args(corpus.argv(folder)))
    return json.loads(json.dumps(truth)), problems


def test_every_folder_says_how_its_truth_was_built() -> None:
    assert sorted(corpus.ARGS) == FOLDERS


@pytest.mark.parametrize("name", FOLDERS)
def test_the_reader_rebuilds_the_committed_truth(name: str) -> None:
    """Each TRUTH.json is what the reader makes of its folder (keys added by hand aside), and the
    NameServer's log backs every event of it."""
    truth, problems = rebuilt(REAL / name)
    committed = json.loads((REAL / name / "TRUTH.json").read_text())
    assert problems == []
    for key, value in truth.items():
        assert committed.get(key) == value, key


def test_our_servers_text_and_json_lines() -> None:
    text = ("2026-11-28T09:02:15+0000 [twisted_namesrv.service#info] The Name Server boot success. "
            "serializeType=JSON, address 127.0.0.1:9876, compat 5.3.3, twisted-namesrv 0.1.0\n"
            "2026-11-28T09:05:05+0000 [twisted_namesrv.housekeeping#info] broker expired: cluster=DefaultCluster "
            "broker=broker-b id=0 addr=127.0.0.1:11931 reason=expired: no heartbeat for 121.207 s (timeout 120 s)\n")
    assert server_logs.flavor_of(text) == "ours"
    log = server_logs.ServerLog("ours", server_logs.parse_lines(text, "ours"))
    expired_at = 1795856705.0  # 2026-11-28T09:05:05Z
    assert [t for t, _ in log.find("expired", expired_at, addr="127.0.0.1:11931")] == [expired_at]
    assert log.find("expired", expired_at, addr="127.0.0.1:1193") == []  # an address is never a prefix
    assert log.find("expired", expired_at + 60, addr="127.0.0.1:11931") == []
    assert log.message(log.lines[1][1]).startswith("broker expired: cluster=DefaultCluster")
    assert not log.knows("closed by magic") and log.knows("delete_topic")

    record = {"time": "2026-11-28T09:05:05+0000", "level": "info", "namespace": "twisted_namesrv.housekeeping",
              "message": "broker unregistered: cluster=DefaultCluster broker=broker-b id=0 addr=127.0.0.1:11931"}
    as_json = server_logs.parse_lines(json.dumps(record) + "\n", "ours")
    assert as_json[0][0] == expired_at
    assert server_logs.ServerLog("ours", as_json).find("unregister", expired_at, addr="127.0.0.1:11931")


def test_javas_lines_are_read_in_its_zone() -> None:
    text = "2026-11-28 13:28:20 INFO main - The Name Server boot success. serializeType=JSON\n"
    assert server_logs.flavor_of(text) == "java"
    log = server_logs.ServerLog("java", server_logs.parse_lines(text, "java"))
    assert log.find("start", 1795843700.0)  # 05:28:20Z: the rig's JVMs logged at UTC+08:00
    assert not log.knows("delete_topic")  # Java logs no topic deletion: nothing to check it against
    with pytest.raises(ValueError):
        server_logs.flavor_of("no time here\n")


OURS = [name for name in FOLDERS if json.loads((REAL / name / "TRUTH.json").read_text())
        .get("nameserver_software") == "twisted-namesrv" and (REAL / name / "events.json").is_file()]


def test_a_refusal_our_log_does_not_back_is_a_problem(tmp_path: Path) -> None:
    """v5-tls: the plain client our TLS-enforcing server closed without a byte is a refusal its log
    backs (the host's first refusal, a plain peer); with that line gone, the reader says so."""
    folder = tmp_path / "v5-tls"
    shutil.copytree(REAL / "v5-tls", folder)
    assert rebuilt(folder)[1] == []
    log = folder / "namesrv.log"
    log.write_text("".join(line for line in log.read_text().splitlines(keepends=True) if "plain (non-TLS)" not in line))
    assert any(p.startswith("no refusal log line for 127.0.0.1") for p in rebuilt(folder)[1])


def test_the_corpus_holds_a_capture_of_our_own_server() -> None:
    assert OURS


@pytest.mark.parametrize("name", OURS)
def test_a_log_or_events_file_that_does_not_back_the_packets_is_a_problem(tmp_path: Path, name: str) -> None:
    """Take one broker's end out of our server's log and of its events file: the reader says so."""
    folder = tmp_path / name
    shutil.copytree(REAL / name, folder)
    truth = json.loads((folder / "TRUTH.json").read_text())
    ended = next(s for s in truth["stays"] if s["end"] in build.END_EVENTS)
    words = tuple(f"broker {kind}:" for kind in build.END_EVENTS[ended["end"]])
    log = folder / "namesrv.log"
    log.write_text("".join(line for line in log.read_text().splitlines(keepends=True)
                           if not (any(w in line for w in words) and f"addr={ended['broker_addr']}" in line)))
    problems = rebuilt(folder)[1]
    assert any("log line" in p and ended["broker_addr"] in p for p in problems), problems

    events = json.loads((folder / "events.json").read_text())
    events["events"] = [e for e in events["events"]
                        if not (e["kind"] in build.END_EVENTS[ended["end"]] and e["info"].get("addr") ==
                                ended["broker_addr"])]
    (folder / "events.json").write_text(json.dumps(events))
    problems = rebuilt(folder)[1]
    assert any(p.startswith("events file") and ended["broker_addr"] in p for p in problems), problems


def test_a_connection_captured_under_two_address_pairs_is_one() -> None:
    """v5-nat: tcpdump -i any on a container host holds each connection through the published port
    twice (outside to 192.168.77.1:9876, inside to 10.88.0.2:9876, the same sequence numbers) and each
    packet crossing the bridge twice under one pair: one connection each, named as the NameServer saw
    it, which its log backs channel by channel."""
    folder = REAL / "v5-nat"
    conns = packets.connections(packets.read_pcap(folder / "v5-nat.pcap.gz"), {9876})
    assert len(conns) == 9  # 5 connections, 4 of them also outside; a SYN captured again opens none
    kept, copies = packets.translated_copies(conns)
    assert {(copy.server, counted.server, copy.client) for copy, counted in copies} == {
        ("192.168.77.1:9876", "10.88.0.2:9876", counted.client) for _copy, counted in copies}
    assert len(copies) == 4 and {c.server for c in kept} == {"10.88.0.2:9876"}
    log = server_logs.load([folder / "namesrv.log"])
    assert build.copies_disagree(kept, log) == []
    assert any("the NameServer logged 5 channels" in p for p in build.copies_disagree(conns, log))


def test_a_connection_captured_on_two_hosts_is_one_read_from_the_nameservers_host() -> None:
    """v5-twohosts: tcpdump on the NameServer's host and on the brokers' host, the latter's clock 0.35 s
    ahead: every connection is in both files (the same 4-tuple and sequence numbers); each is one,
    with the NameServer's host's stamps, whichever way the other clock is off, and the log backs the
    count channel by channel."""
    folder = REAL / "v5-twohosts"
    ns_host = packets.read_pcap(folder / "v5-twohosts-nshost.pcap.gz")
    broker_host = packets.read_pcap(folder / "v5-twohosts-brokerhost.pcap.gz")
    first = packets.connections(ns_host, {9876})
    assert len(first) == 5
    for ahead in (0.35, -0.7):  # as committed, and a clock 0.7 s behind the NameServer host's
        shifted = [(t + ahead - 0.35, *rest) for t, *rest in broker_host]
        kept, pairs = packets.second_point_copies(first, packets.connections(shifted, {9876}))
        assert kept == first and len(pairs) == 5
        assert {round(copy.syn - counted.syn, 2) for copy, counted in pairs} == {round(ahead, 2)}
    log = server_logs.load([folder / "namesrv.log"])
    assert build.copies_disagree(kept, log) == []
    doubled = kept + [copy for copy, _counted in pairs]
    assert any("the NameServer logged 5 channels" in p for p in build.copies_disagree(doubled, log))


def test_the_reader_takes_each_byte_once_in_order_as_the_receiver_reads_it() -> None:
    """A lossy, reordering link (v4-lossy): a segment captured ahead of a hole waits for it, then is
    readable when the hole is filled; a duplicate, and a retransmission overlapping what was taken, add
    only what is new."""
    SYN, ACK = packets.SYN, packets.ACK
    c, s = "10.66.0.2:40000", "10.66.0.1:9876"
    pkts = [(1.0, c, s, SYN, 99, b"", 0), (1.001, s, c, SYN | ACK, 499, b"", 0),
            (2.0, c, s, ACK, 100, b"abc", 0),
            (2.1, c, s, ACK, 106, b"ghi", 0),  # ahead of the hole at 103
            (2.2, c, s, ACK, 106, b"ghi", 0),  # a duplicate of it
            (2.5, c, s, ACK, 101, b"bcdef", 0),  # the retransmission, overlapping "bc"
            (2.6, c, s, ACK, 109, b"j", 0)]
    (conn,) = packets.connections(pkts, {9876})
    assert bytes(conn.data["c"]) == b"abcdefghij"
    assert conn.stamps["c"] == [(0, 2.0), (3, 2.5), (6, 2.5), (9, 2.6)]
