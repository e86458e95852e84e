"""A capture begun after the cluster was up (real capture v4-ops-late: tcpdump -s 0 started 40 s after
the brokers registered) holds connections to the NameServers with no SYN: what was said over them
before is not in it, and brokers.csv's first_seen is the first registration captured, not a start.
The report said nothing of it (its headline: 2 fail-overs, 1 unknown topic). Now an info finding
says so, counting the connections and the brokers that registered over them by who they are."""

from __future__ import annotations

import json
from pathlib import Path

from spark_analysis.analysis.findings import began_mid_stream
from spark_analysis.model.endpoints import endpoint_stories
from spark_analysis.model.periods import Capture, ConnectionEnds
from tests.spark.conftest import run_job

REAL = Path(__file__).resolve().parents[1] / "data" / "captures" / "real"
FIRST = 1796079660.188881  # 2026-11-30T23:01:00.188881Z


def test_a_capture_begun_after_the_cluster_says_its_connections_were_already_open(spark, tmp_path: Path) -> None:
    files = json.loads((REAL / "v4-ops-late" / "TRUTH.json").read_text())["files"]
    out = run_job(spark, [str(REAL / "v4-ops-late" / f) for f in files], tmp_path / "out", report=False)
    [found] = [f for f in out.summary["findings"] if f["kind"] == "began_mid_stream"]
    [item] = found["evidence"]
    assert found["severity"] == "info"
    # broker-a and broker-a-s at both NameServers, broker-b at :9876 only: five connections, three brokers
    assert (item["connections"], item["broker_connections"], item["brokers"], item["brokers_by_connection"],
            item["servers"], item["before"]) == (5, 5, 3, 0, ["127.0.0.1:9876", "127.0.0.1:9877"],
                                                 "2026-11-30T23:01:00.188881Z")
    infos = [f["kind"] for f in out.summary["findings"] if f["severity"] == "info"]
    assert infos[0] == "began_mid_stream"  # said first of what the capture cannot show
    # information only: the headline counts what needs attention, and what the connections carried
    # before is nothing the report judges (every stay's end and the fail-overs are in the capture).
    # TopicBusy, looked up 2x before its producer sent by TBW102 and broker-a made it (its next
    # registration, at once), was made later, not unknown: the producer was done before a lookup
    # of it was served
    assert out.summary["attention"] == "1 warning: 2 fail-overs"
    [busy] = [i for f in out.summary["findings"] if f["kind"] == "topic_made_on_first_use" for i in f["evidence"]]
    assert (busy["topic"], busy["count"], busy["found_from"]) == ("TopicBusy", 2, None)
    assert busy["last"] < busy["registered_at"] < "2026-11-30T23:01:17"


def _ends(opened: bool) -> ConnectionEnds:
    return ConnectionEnds(FIRST, opened, FIRST + 10.0, False)


def test_only_connections_to_nameservers_open_before_the_first_file_are_counted() -> None:
    nameserver, broker = "127.0.0.1:9876", "127.0.0.1:10911"
    ends = {"first.pcap": {(f"127.0.0.1:4000{i}", nameserver): _ends(opened=i < 2) for i in range(4)}
            | {("127.0.0.1:50000", broker): _ends(opened=False)},  # a broker's port: no NameServer
            "second.pcap": {("127.0.0.1:40009", nameserver): _ends(opened=False)}}
    sides = {key: key[1] for found in ends.values() for key in found}
    registered = {("127.0.0.1:40002", nameserver): ("broker-a", "127.0.0.1:10911"),
                  ("127.0.0.1:40003", nameserver): (None, "? (address not captured; registers from 127.0.0.1:40003)")}
    first = Capture(FIRST, FIRST + 10.0, ("first.pcap",))
    [item] = began_mid_stream([first], ends, sides, {nameserver}, registered)
    assert (item["path"], item["connections"], item["broker_connections"], item["brokers"],
            item["brokers_by_connection"]) == ("first.pcap", 2, 2, 1, 1)
    # a capture whose first file saw every NameServer connection open says nothing; nor one going on
    # past files missing (no capture's start)
    assert began_mid_stream([Capture(FIRST, FIRST + 10.0, ("other.pcap",))], ends | {
        "other.pcap": {("127.0.0.1:40001", nameserver): _ends(opened=True)}}, sides, {nameserver}) == []
    assert began_mid_stream([Capture(FIRST, FIRST + 10.0, ("second.pcap",), ("first.pcap", FIRST))], ends,
                            sides, {nameserver}) == []


def test_a_connection_first_heard_in_a_later_file_of_the_capture_was_open_before_it_too() -> None:
    """tcpdump -G 10: a broker registering every 30 s may say nothing in the first file (v5-midsplit's
    broker-a at :9877, first heard in the third): its connection, with no SYN where the capture first
    saw it, was as open before the capture as those the first file holds. One a later file opens
    (its SYN there) is no such."""
    nameserver = "127.0.0.1:9876"
    ends = {"a.pcap": {("127.0.0.1:40000", nameserver): _ends(opened=False)},
            "b.pcap": {("127.0.0.1:40000", nameserver): _ends(opened=False)},
            "c.pcap": {("127.0.0.1:40000", nameserver): _ends(opened=False),
                       ("127.0.0.1:40001", nameserver): _ends(opened=False),
                       ("127.0.0.1:40002", nameserver): _ends(opened=True)}}
    sides = {key: key[1] for found in ends.values() for key in found}
    registered = {("127.0.0.1:40001", nameserver): (None, "? (address not captured; registers from 127.0.0.1:40001)")}
    [item] = began_mid_stream([Capture(FIRST, FIRST + 30.0, ("a.pcap", "b.pcap", "c.pcap"))], ends, sides,
                              {nameserver}, registered)
    assert (item["path"], item["connections"], item["broker_connections"], item["brokers_by_connection"]) == (
        "a.pcap", 2, 1, 1)


def test_a_connection_first_seen_after_its_nameserver_was_not_running_was_opened_since() -> None:
    """v5-gaps: the capture began before the NameServer did (its launch script's polls refused), and
    a client's connection opened while the capture was paused shows no SYN, only its close: it was
    not open when the capture began. A connection seen before the server's first refusal was."""
    nameserver = "127.0.0.1:9876"
    polls = ConnectionEnds(FIRST, False, FIRST, False, refused_at=(FIRST,), syn_by_lower=True)
    ends = {"gaps.pcapng": {("127.0.0.1:30000", nameserver): polls,
                            ("127.0.0.1:40000", nameserver): ConnectionEnds(FIRST + 300.0, False, FIRST + 300.0, True)}}
    sides = {key: key[1] for key in ends["gaps.pcapng"]}
    stories = endpoint_stories(ends["gaps.pcapng"], sides)
    assert stories[nameserver].refused  # nothing listened at the capture's start
    capture = Capture(FIRST, FIRST + 400.0, ("gaps.pcapng",))
    assert began_mid_stream([capture], ends, sides, {nameserver}, {}, stories) == []
    ends["gaps.pcapng"][("127.0.0.1:40001", nameserver)] = ConnectionEnds(FIRST - 0.5, False, FIRST + 300.0, True)
    sides[("127.0.0.1:40001", nameserver)] = nameserver
    [item] = began_mid_stream([capture], ends, sides, {nameserver}, {}, stories)
    assert item["connections"] == 1


def test_the_real_captures_count_every_connection_open_before_them_and_none_opened_since(spark, tmp_path: Path) -> None:
    """v5-midsplit: four stays over four connections open before the capture (broker-b's two in the
    first file, broker-a's two from the first and third), each named by its connection (-s 128),
    and two more, opened at 05:22:57 and 05:23:03 (the logs), seen only as their clients close them
    two minutes later (their FINs, in the sixth and seventh files).
    v5-gaps: its only connection with no SYN was opened in a pause of the capture, after the
    NameServer it talks to started within the capture: it did not begin mid-stream."""
    truth = json.loads((REAL / "v5-midsplit" / "TRUTH.json").read_text())
    out = run_job(spark, [str(REAL / "v5-midsplit" / f) for f in truth["files"]], tmp_path / "midsplit", report=False)
    [item] = [i for f in out.summary["findings"] if f["kind"] == "began_mid_stream" for i in f["evidence"]]
    stays = truth["stays"]
    assert all(stay["registered_before_capture"] for stay in stays) and len(stays) == 4
    assert (item["connections"], item["broker_connections"], item["brokers"], item["brokers_by_connection"]) == (
        6, 4, 0, 4)
    truth = json.loads((REAL / "v5-gaps" / "TRUTH.json").read_text())
    out = run_job(spark, [str(REAL / "v5-gaps" / f) for f in truth["files"]], tmp_path / "gaps", report=False)
    assert "began_mid_stream" not in {f["kind"] for f in out.summary["findings"]}


def test_a_connection_open_before_the_capture_that_closed_with_nothing_captured_is_a_warning() -> None:
    """Information only, never in the headline, while what the report judges is in the capture. v4-wrap:
    broker-b's connection, open before the capture, closed by its kill before one request of it was
    captured: who it was (a broker killed, a client gone) and how it ended the report cannot judge,
    so the finding says so and is a warning. One with a request captured over it (a client's lookup),
    or registered over, or still open at the end, leaves it information."""
    nameserver = "127.0.0.1:9876"
    def closed(at: float) -> ConnectionEnds:
        return ConnectionEnds(FIRST, False, at, True, at)

    ends = {"wrap.pcap0": {("127.0.0.1:40000", nameserver): _ends(opened=False),
                           ("127.0.0.1:40001", nameserver): closed(FIRST + 5.0),
                           ("127.0.0.1:40002", nameserver): closed(FIRST + 6.0)}}
    sides = {key: key[1] for key in ends["wrap.pcap0"]}
    registered = {("127.0.0.1:40000", nameserver): ("broker-a", "127.0.0.1:10911")}
    clients = [{"client": "127.0.0.1:40002", "server": nameserver, "requests": 3}]
    capture = Capture(FIRST, FIRST + 30.0, ("wrap.pcap0",))
    [item] = began_mid_stream([capture], ends, sides, {nameserver}, registered, None, clients)
    assert (item["severity"], item["connections"], item["closed_unjudged"]) == ("warning", 3, ["127.0.0.1:40001"])
    assert "1 connection of them closed within the capture with no request of its captured (127.0.0.1:40001)" in \
        item["message"]
    clients.append({"client": "127.0.0.1:40001", "server": nameserver, "requests": 1})
    [item] = began_mid_stream([capture], ends, sides, {nameserver}, registered, None, clients)
    assert (item["severity"], item["closed_unjudged"]) == ("info", [])
