"""One server listening on all addresses of its host (Java's bindAddress 0.0.0.0, as it ships), captured
on that host: the brokers beside it reach it as 127.0.0.1:9877, an operator's box and its own
scanAvailableNameSrv probe as 10.38.1.1:9877. The whole cluster stopped cleanly and started again: at
127.0.0.1:9877 its launch script's refused polls tell the restart, at 10.38.1.1:9877 nothing was open
and nothing refused. The report told 127.0.0.1:9877 restarted and 10.38.1.1:9877 up throughout (its
clients' sessions one across the restart): the corpus's v5-coldstart, whose truth has both restarted."""

from __future__ import annotations

from collections import Counter

from spark_analysis.analysis import findings
from spark_analysis.model.endpoints import OtherAddressDown, Outage, endpoint_stories, own_addresses
from spark_analysis.model.periods import ConnectionEnds
from spark_analysis.model.sessions import iso_time
from tests.spark.test_truth import _told, truth_of
from tests.spark.truth_check import judge

LOOP, HOST = "127.0.0.1:9877", "10.38.1.1:9877"
#: the brokers' connections, closed by them (clean stops) before the NameServer went
STOPPED = ConnectionEnds(0.0, True, 50.0, True, 50.0, True, True, 0.0, (), 49.0)
POLLS = ConnectionEnds(60.0, True, 75.0, True, None, False, True, None, (60.0, 70.0, 75.0))  # refused: down
BACK = ConnectionEnds(75.5, True, 300.0, False, None, False, True, 75.5, (), 299.0)
#: the server's own probe of its host's address (no byte, closed by its client side after 120 s idle),
#: and an operator's mqadmin from another box
PROBE = ConnectionEnds(5.0, True, 45.0, True, 45.0, True, True, 5.0)
ADMIN = ConnectionEnds(20.0, True, 21.0, True, 21.0, True, True, 20.0, (), 20.9)
PROBE_AGAIN = ConnectionEnds(76.0, True, 300.0, False, None, False, True, 76.0)


def _capture(host: str = HOST, probe_from: str = "10.38.1.1") -> dict[tuple[str, str], ConnectionEnds]:
    """Each connection keyed as the reading tasks key it: its two ends in order (the client first here)."""
    return {("127.0.0.1:40000", LOOP): STOPPED, ("127.0.0.1:1", LOOP): POLLS, ("127.0.0.1:40001", LOOP): BACK,
            (f"{probe_from}:50000", host): PROBE, ("10.38.1.2:45906", host): ADMIN,
            (f"{probe_from}:50001", host): PROBE_AGAIN}


def test_the_host_s_own_addresses_are_its_loopback_and_those_a_connection_joins_to_themselves() -> None:
    assert own_addresses(_capture()) == {"127.0.0.1", "10.38.1.1"}


def test_a_restart_told_at_one_address_of_a_listener_holds_at_its_others() -> None:
    stories = endpoint_stories(_capture())
    (own,) = stories[LOOP].outages
    assert (own.down, own.up, own.refused, own.seen_as) == (60.0, 75.5, 3, None)
    assert stories[HOST].outages == [Outage(60.0, 75.5, 0, unseen=True, seen_as=LOOP)]
    assert stories[HOST].run_starts() == (75.5,)  # its clients' sessions end at the restart


def test_another_host_s_server_on_the_same_port_is_not_the_same_listener() -> None:
    """10.38.1.3:9877 probed by another address: nothing says it is this host's."""
    stories = endpoint_stories(_capture(host="10.38.1.3:9877", probe_from="10.38.1.2"))
    assert stories["10.38.1.3:9877"].outages == []


def test_an_address_that_refused_while_the_other_took_connections_is_another_listener() -> None:
    """The 127.0.0.1-bound NameServer's own probe of 10.38.1.1:9877 refused while it served: a listener
    on one address only, whatever else 10.38.1.1:9877 took later."""
    ends = _capture()
    ends[("10.38.1.1:50002", HOST)] = ConnectionEnds(30.0, True, 30.0, True, None, False, True, None, (30.0,))
    assert endpoint_stories(ends)[HOST].outages == []


def test_one_restart_of_one_listener_is_one_finding_naming_its_addresses() -> None:
    rows = findings.endpoint_rows(endpoint_stories(_capture()), {LOOP, HOST}, Counter())
    assert [o.get("seen_as") for row in rows for o in row["outages"]] == [LOOP, None]
    said = [f for f in findings.evidence([], {}, [], {}, rows) if f["kind"] == "server_restart"]
    assert [(f["server"], f.get("also_as")) for f in said] == [(LOOP, [HOST])]
    assert f"also reached as {HOST}" in said[0]["message"]


def test_the_checker_takes_one_restart_naming_its_addresses_for_each() -> None:
    """v5-coldstart's truth: 127.0.0.1:9877 and 10.38.1.1:9877 both restarted (one server). One finding
    for 127.0.0.1:9877 naming 10.38.1.1:9877 in ``also_as`` tells both; without it one is missed."""
    truth = truth_of("v5-coldstart")
    summary = _told(truth)
    restarts = [f for f in summary["findings"] if f["kind"] == "server_restart"]
    at_host = next(f for f in restarts if f["evidence"][0]["server"] == HOST)
    at_loop = next(f for f in restarts if f["evidence"][0]["server"] == LOOP)
    summary["findings"].remove(at_host)
    assert judge(truth, summary) == [f"missed: {HOST} restarted (down {run['down']}, up {back['up']})"
                                     for ns in truth["nameservers"] if ns["endpoint"] == HOST
                                     for run, back in [ns["runs"]]]
    at_loop["evidence"][0]["also_as"] = [HOST]
    assert judge(truth, summary) == []


#: v5-v6restart's shape: the NameServer listening on every address, its brokers at [::1]:9876 (it closed
#: their connections as it went, their retries refused), its launch script polling 127.0.0.1:9876 (each
#: poll accepted carries nothing; refused while it came back)
V6, POLLED = "[::1]:9876", "127.0.0.1:9876"


def _dual_stack() -> dict[tuple[str, str], ConnectionEnds]:
    return {("[::1]:50000", V6): ConnectionEnds(0.0, True, 50.0, True, 50.0, False, True, 0.0, (), 49.0),
            ("[::1]:50001", V6): ConnectionEnds(55.0, True, 70.0, True, None, False, True, None, (55.0, 70.0)),
            ("[::1]:50002", V6): ConnectionEnds(76.0, True, 300.0, False, None, False, True, 76.0, (), 299.0),
            ("127.0.0.1:40000", POLLED): ConnectionEnds(5.0, True, 5.1, True, 5.1, True, True, 5.0),
            ("127.0.0.1:40001", POLLED): ConnectionEnds(60.0, True, 75.0, True, None, False, True, None,
                                                        (60.0, 65.0, 75.0)),
            ("127.0.0.1:40002", POLLED): ConnectionEnds(75.5, True, 75.6, True, 75.6, True, True, 75.5)}


def test_a_restart_holds_what_another_address_of_its_listener_told_of_it_by_its_own_packets() -> None:
    (outage,) = endpoint_stories(_dual_stack())[V6].outages
    assert (outage.down, outage.up, outage.refused) == (50.0, 76.0, 2)
    assert outage.also_down_as == [OtherAddressDown(POLLED, 60.0, True, 3, 75.0, 75.5)]


def test_a_restart_tells_the_polls_another_address_of_its_listener_refused_while_it_came_back() -> None:
    """v5-v6restart: 137 polls of 127.0.0.1:9876 refused while the NameServer its brokers reach as
    [::1]:9876 came back, told by no finding (that address asked nothing: no restart of its own)."""
    rows = findings.endpoint_rows(endpoint_stories(_dual_stack()), {V6}, Counter())
    (said,) = [f for f in findings.evidence([], {}, [], {}, rows) if f["kind"] == "server_restart"]
    assert said["polled_as"] == [{"endpoint": POLLED, "refused": 3, "first": iso_time(60.0), "last": iso_time(75.0),
                                  "up": iso_time(75.5)}]
    assert (f"2 attempt(s) refused meanwhile, and 3 at {POLLED} (connections that carried nothing: polls, as a "
            f"launch script's or a health check's) from {iso_time(60.0)} to {iso_time(75.0)}, which took one "
            f"again at {iso_time(75.5)}") in said["message"]


def test_another_nameserver_address_s_own_restart_is_its_own_finding_not_polls() -> None:
    rows = findings.endpoint_rows(endpoint_stories(_dual_stack()), {V6, POLLED}, Counter())
    said = [f for f in findings.evidence([], {}, [], {}, rows) if f["kind"] == "server_restart"]
    assert [f["server"] for f in said] == [POLLED, V6]
    assert not any("polled_as" in f for f in said)


def test_polls_of_an_address_refused_while_the_other_served_are_another_listener_s() -> None:
    ends = _dual_stack()
    ends[("127.0.0.1:40003", POLLED)] = ConnectionEnds(30.0, True, 30.0, True, None, False, True, None, (30.0,))
    (outage,) = endpoint_stories(ends)[V6].outages
    assert outage.also_down_as == []
