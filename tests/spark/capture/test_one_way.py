"""A capture of one direction (``tcpdump ... dst port 9876``, ``tcpdump -Q in``, a one-way mirror):
every request read and not one answer. It was "4 request codes never answered" against a NameServer
that answered each of them; now those connections are said as captured one way, their calls not
judged unanswered, while a peer that went silent (a partition: the other side's ACKs stand still)
is never taken for one."""

from __future__ import annotations

import gzip

from spark_analysis.analysis import counting, findings
from spark_analysis.capture.packets import tcp_segments
from spark_analysis.capture.records import iter_records
from spark_analysis.decode.rows import CALL, CONNECTION, connection_rows
from spark_analysis.model.tally import Tally
from tests.spark.capture.test_snap_cut import REAL

SERVER = "127.0.0.1:9876"


def _segments(scenario: str):
    raw = gzip.decompress((REAL / scenario / f"{scenario}.pcap.gz").read_bytes())
    return list(tcp_segments(iter_records(raw)))


def _findings(rows: list) -> list[dict]:
    tally = Tally()
    counting.count_connections(tally, [row for kind, row in rows if kind == CONNECTION])
    return findings.evidence([], tally.groups, [], {}, [])


def test_the_requests_of_a_capture_of_one_direction_are_not_unanswered() -> None:
    to_server = [(ts, s) for ts, s in _segments("v5-launch") if s.dst == SERVER]
    rows = list(connection_rows(to_server, frozenset({9876})))
    calls = [row for kind, row in rows if kind == CALL]
    assert len(calls) == 35 and all(row[6] is None for row in calls)  # not one answer in the capture
    assert all(row[13] for row in calls)  # ``cut``: not known unanswered
    one_way = [item for item in _findings(rows) if item["kind"] == "one_way_capture"]
    assert [(item["server"], item["side"], item["severity"]) for item in one_way] == [(SERVER, "server", "warning")]
    assert one_way[0]["connections"] == 5  # the brokers' and clients'; the launch script's refused SYNs are not


def test_answers_alone_name_the_side_not_captured() -> None:
    from_server = [(ts, s) for ts, s in _segments("v5-launch") if s.src == SERVER]
    rows = list(connection_rows(from_server, frozenset({9876})))
    assert not [row for kind, row in rows if kind == CALL]
    one_way = [item for item in _findings(rows) if item["kind"] == "one_way_capture"]
    assert [(item["server"], item["side"]) for item in one_way] == [(SERVER, "client")]


def test_a_whole_capture_and_a_partition_are_not_one_way() -> None:
    for scenario in ("v5-launch", "v5-partition"):
        rows = list(connection_rows(_segments(scenario), frozenset({9876})))
        assert not [row for kind, row in rows if kind == CONNECTION and row.unheard], scenario
        assert not [item for item in _findings(rows) if item["kind"] == "one_way_capture"], scenario
