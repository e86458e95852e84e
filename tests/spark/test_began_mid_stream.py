"""A capture begun after the cluster was up (real capture v4-ops-late: tcpdump -s 0 started 40 s after
the brokers registered) holds connections to the NameServers with no SYN: what was said over them
before is not in it, and brokers.csv's first_seen is the first registration captured, not a start.
The report said nothing of it (its headline: 2 fail-overs, 1 unknown topic). Now an info finding
says so, counting the connections and the brokers that registered over them by who they are."""

from __future__ import annotations

import json
from pathlib import Path

from spark_analysis.analysis.findings import began_mid_stream
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
