"""How long a restarted NameServer was down, as the packets bound it. A restart no connection saw (a
cluster stopped cleanly, brokers first: nothing open for the server to close) was told "down at least
N s" with N from its first refused attempt to the connection it took again: no bound at all (it may
have listened again a moment after its last refused attempt), while the capture holds both sides, its
last packet before and its last refused attempt, the first connection after. Now it is a range: at
least while its attempts were refused, at most from its last packet before (or its closes) to the
connection it took again."""

from __future__ import annotations

from collections import Counter

from spark_analysis.analysis import findings
from spark_analysis.model.endpoints import endpoint_stories
from spark_analysis.model.periods import ConnectionEnds

NS = "127.0.0.1:9876"
#: a broker's connection, closed by it (a clean stop) at 50.0 before the NameServer went
STOPPED = ConnectionEnds(0.0, True, 50.0, True, 50.0, True, True, 0.0, (), 49.0)
#: the launch script's polls, refused from 60.0 to 74.9: nothing listened
POLLS = ConnectionEnds(60.0, True, 74.9, True, None, False, True, None, (60.0, 70.0, 74.9))
BACK = ConnectionEnds(75.0, True, 300.0, False, None, False, True, 75.0, (), 299.0)
#: a busy connection the server itself closed as it went (a SIGTERM with a broker connected)
CLOSED = ConnectionEnds(0.0, True, 55.0, True, 55.0, False, True, 0.0, (), 54.9)


def _restart(ends: dict) -> dict:
    rows = findings.endpoint_rows(endpoint_stories(ends), {NS}, Counter())
    (said,) = [f for f in findings.evidence([], {}, [], {}, rows) if f["kind"] == "server_restart"]
    return said


def test_a_restart_no_connection_saw_is_down_between_its_refused_attempts_and_its_last_packet_before() -> None:
    said = _restart({("127.0.0.1:40000", NS): STOPPED, ("127.0.0.1:1", NS): POLLS, ("127.0.0.1:40001", NS): BACK})
    assert said["down_s"] == 15.0  # first refused to the connection after, as before
    assert said["down_s_range"] == [14.9, 25.0]  # refused 60.0-74.9; last packet 50.0, back 75.0
    assert "down 14.9-25.0 s" in said["message"] and "at least" not in said["message"]


def test_a_restart_told_by_its_closes_is_down_at_most_until_the_connection_after() -> None:
    said = _restart({("127.0.0.1:40000", NS): CLOSED, ("127.0.0.1:1", NS): POLLS, ("127.0.0.1:40001", NS): BACK})
    assert said["down_s_range"] == [19.9, 20.0]  # closed 55.0; refused until 74.9; back 75.0
    assert "down 19.9-20.0 s" in said["message"]


def test_a_restart_with_no_attempt_refused_is_down_at_most_until_the_connection_after() -> None:
    """Nothing refused: nothing says it was not listening a moment after it went."""
    said = _restart({("127.0.0.1:40000", NS): CLOSED, ("127.0.0.1:40001", NS): BACK})
    assert "down_s_range" not in said
    assert "down at most 20.0 s" in said["message"]


def test_the_brokers_back_after_a_restart_are_those_of_its_run_not_a_later_one_s() -> None:
    """Restarted twice (gone at 60, back at 75; gone at 200, back at 210): each restart names the
    brokers first seen in the run it began, a broker stay at each (one address, two stays)."""
    again = ConnectionEnds(200.5, True, 209.9, True, None, False, True, None, (200.5, 209.9))
    last = ConnectionEnds(210.0, True, 300.0, False, None, False, True, 210.0, (), 299.0)
    closed_back = BACK._replace(last=200.0, closed=True, first_close=200.0, close_by_lower=False, last_payload=199.9)
    ends = {("127.0.0.1:40000", NS): CLOSED, ("127.0.0.1:1", NS): POLLS, ("127.0.0.1:40001", NS): closed_back,
            ("127.0.0.1:2", NS): again, ("127.0.0.1:40002", NS): last}
    rows = findings.endpoint_rows(endpoint_stories(ends), {NS}, Counter())
    brokers = [{"server": NS, "broker_addr": addr, "first_seen": first}
               for addr, first in (("10.0.0.1:10911", 1.0), ("10.0.0.1:10911", 76.0), ("? (registers from A)", 77.0),
                                   ("10.0.0.1:10911", 211.0), ("? (registers from B)", 212.0))]
    said = [f for f in findings._endpoint_findings(rows, brokers) if f["kind"] == "server_restart"]
    assert [f["came_back"] for f in said] == [["10.0.0.1:10911", "? (registers from A)"],
                                              ["10.0.0.1:10911", "? (registers from B)"]]
