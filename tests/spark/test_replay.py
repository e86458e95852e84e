"""The NameServer's own state machine as the judge (analysis/replay.py), and each server endpoint's
evidence (model/endpoints.py): synthetic events and connection ends, one rule each. The real
captures in tests/data/captures/real/ check the same classes end to end (test_truth.py)."""

from __future__ import annotations

from spark_analysis.analysis.liveness import broker_summary
from spark_analysis.analysis.replay import replay_server, stories_of
from spark_analysis.decode.rows import CONNECTION_CLOSED
from spark_analysis.decode.schema import EVENT_ROWS
from spark_analysis.model.endpoints import endpoint_stories, server_sides
from spark_analysis.model.periods import ConnectionEnds, TimeBins
from spark_analysis.model.sessions import Sessions
from twisted_namesrv.remoting import RequestCode

SERVER = "10.0.0.9:9876"
REGISTER, UNREGISTER, QUERY = RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER, RequestCode.QUERY_DATA_VERSION


def event(t: float, code: int, alive: bool = True, addr: str = "10.0.0.1:10911", broker_id: int | None = 0,
          name: str = "b", **more) -> dict:
    """An EVENT row as the liveness tasks read it."""
    return {**dict.fromkeys(EVENT_ROWS.names), "broker_addr": addr, "broker_name": name, "cluster": "C", "t": t,
            "code": code, "alive": alive, "broker_id": broker_id, "server": SERVER, "version_name": "V4_9_8",
            **more}


def closed(t: float, by: str = "client", addr: str = "10.0.0.1:10911") -> dict:
    return event(t, CONNECTION_CLOSED, False, addr, closed=f"fin from {by}")


def replayed(events: list[dict], end: float = 1000.0, story=None):
    return replay_server(SERVER, events, Sessions((0.0,)), story, lambda t: end)


def ends_of(replay) -> list[tuple]:
    return [(s.broker_addr, s.broker_id, s.registered, s.end, s.ended_at) for s in replay.stays]


def test_a_stay_ends_as_the_nameserver_says() -> None:
    """Unregistered (a clean stop); a connection the broker closed (a crash or kill: the server
    removes it at once); alive at the end; its next registration is a new stay."""
    replay = replayed([event(10.0, REGISTER), event(40.0, REGISTER), closed(45.0), event(100.0, REGISTER),
                       event(130.0, QUERY), event(140.0, UNREGISTER, False), closed(140.5), event(300.0, REGISTER)],
                      end=320.0)
    assert ends_of(replay) == [("10.0.0.1:10911", 0, 10.0, "connection_closed", 45.0),
                               ("10.0.0.1:10911", 0, 100.0, "unregistered", 140.0),
                               ("10.0.0.1:10911", 0, 300.0, "alive", None)]


def test_a_server_close_of_a_broker_silent_past_the_expiry_is_an_expiry() -> None:
    """The NameServer's idle close after 120 s of silence is its expiry (a warning), with the real
    silence: not a crash; a broker silent past the expiry at the capture's end is expired by the
    scan; one silent 119 s is alive."""
    replay = replayed([event(10.0, REGISTER), event(40.0, REGISTER), closed(160.0, by="server"),
                       event(300.0, REGISTER)], end=600.0)
    assert ends_of(replay)[0] == ("10.0.0.1:10911", 0, 10.0, "expired", 160.0)
    assert replay.stays[0].silence_s == 120.0
    assert ends_of(replay)[1] == ("10.0.0.1:10911", 0, 300.0, "expired", 420.0)  # the scan, at the end
    assert replay.stays[1].silence_s == 120.0
    assert ends_of(replayed([event(10.0, REGISTER)], end=129.0))[0][3] == "alive"
    # a server's close of a broker heard 30 s before is no expiry: its connection closed
    assert ends_of(replayed([event(10.0, REGISTER), closed(40.0, by="server")]))[0][3] == "connection_closed"
    row = broker_summary(replay.stays[0], TimeBins.over([(0.0, 600.0)]))
    assert (row["ended"], row["max_gap_s"], row["would_expire"]) == ("expired", 120.0, 1)  # the real silence


def test_admin_requests_change_the_replayed_routes() -> None:
    """DELETE_TOPIC_IN_NAMESRV, WIPE_ and ADD_WRITE_PERM_OF_BROKER are applied when answered
    SUCCESS, each a story at its time; a refused one changes nothing."""
    admin = {"broker_addr": None, "broker_id": None, "alive": False}
    replay = replayed([event(10.0, REGISTER),
                       event(20.0, RequestCode.WIPE_WRITE_PERM_OF_BROKER, response_code=0, **admin),
                       event(25.0, RequestCode.ADD_WRITE_PERM_OF_BROKER, response_code=0, **admin),
                       event(30.0, RequestCode.DELETE_TOPIC_IN_NAMESRV, topic="T", response_code=0, **admin),
                       event(31.0, RequestCode.DELETE_TOPIC_IN_NAMESRV, topic="U", response_code=1, **admin)])
    assert [(s["kind"], s.get("topic") or s.get("broker_name")) for s in replay.stories] == [
        ("write_perm_wiped", "b"), ("write_perm_added", "b"), ("topic_deleted", "T")]
    # brokers are replayed without their bodies' topics: a count of who held a topic would be made up (it
    # said "0 broker group(s) held it" of a topic both brokers of a real capture held, v5-ours)
    assert not [s for s in replay.stories if {"brokers_held", "topics"} & set(s)]


def test_a_failover_is_one_story_and_a_move_and_a_renumbering_their_own() -> None:
    """Master lost, its slave made master, the old master back as slave: one fail-over with how
    long the group had no master, and no id change told for it; an address new to the group taking
    the id another left is a move; an address back with another id is re-numbered."""
    master, slave, new = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"
    replay = replayed([event(10.0, REGISTER, addr=master), event(12.0, REGISTER, addr=slave, broker_id=2),
                       closed(50.0, addr=master), event(50.2, REGISTER, addr=slave, broker_id=0),
                       event(80.0, REGISTER, addr=master, broker_id=1)])
    (failover,) = stories_of(replay.stays)
    assert (failover["kind"], failover["old_master"], failover["new_master"], failover["no_master_s"],
            failover["old_master_back_as_slave_at"]) == ("failover", master, slave, 0.2, "1970-01-01T00:01:20.000000Z")
    replay = replayed([event(10.0, REGISTER, addr=master), event(12.0, REGISTER, addr=slave, broker_id=1),
                       closed(50.0, addr=master), event(60.0, REGISTER, addr=new),
                       event(70.0, UNREGISTER, False, addr=slave, broker_id=1),
                       event(90.0, REGISTER, addr=slave, broker_id=2)])
    assert [(s["kind"], s.get("from"), s.get("to"), s.get("id_from"), s.get("id_to"))
            for s in stories_of(replay.stays)] == [("broker_address_change", master, new, None, None),
                                                  ("broker_id_change", None, None, 1, 2)]


def _ends(**connections: ConnectionEnds) -> dict[tuple[str, str], ConnectionEnds]:
    return {tuple(sorted((peer, SERVER))): found for peer, found in connections.items()}


def test_a_restart_needs_the_endpoints_own_evidence() -> None:
    """Its busy connections closed by the server together, none going on, then one accepted: a
    restart (when, how long down, attempts refused meanwhile). Refused attempts alone are never
    one: before it listened they are noise; idle connections closed by it are expiries; a broker
    closing its own connection is no restart."""
    # SERVER sorts after the 10.0.0.1 peers: the lower end is the client
    broker = ConnectionEnds(0.0, False, 100.0002, False, 100.0, False, None, None, (), 95.0)
    client = ConnectionEnds(5.0, True, 100.3, False, 100.3, False, True, 5.0, (), 90.0)
    probes = ConnectionEnds(1.0, True, 103.0, True, 1.0, False, True, None, (1.0, 101.0, 103.0))
    back = ConnectionEnds(104.0, True, 300.0, False, None, False, True, 104.0, (), 299.0)
    ends = _ends(**{"10.0.0.1:40000": broker, "10.0.0.2:50000": client, "10.0.0.3:1": probes,
                    "10.0.0.1:40001": back})
    assert set(server_sides(ends).values()) == {SERVER}
    story = endpoint_stories(ends)[SERVER]
    (outage,) = story.outages
    assert (outage.down, outage.up, outage.closed, outage.refused) == (100.0, 104.0, 2, 2)
    assert story.refused == [(1, 1.0, 1.0, "before_start")] and story.run_starts() == (104.0,)
    # refused attempts only: no restart, and nothing listening there
    lone = endpoint_stories({("10.0.0.3:1", "10.37.1.1:9876"): probes})["10.37.1.1:9876"]
    assert lone.outages == [] and lone.refused == [(3, 1.0, 103.0, "never_listening")]
    # the broker closed its connection itself: no restart
    stopped = broker._replace(close_by_lower=True)
    assert endpoint_stories(_ends(**{"10.0.0.1:40000": stopped, "10.0.0.1:40001": back}))[SERVER].outages == []
    # connections silent for minutes closed by the server: it expired them, it did not go away
    idle = broker._replace(last_payload=-100.0)
    assert endpoint_stories(_ends(**{"10.0.0.1:40000": idle, "10.0.0.1:40001": back}))[SERVER].outages == []
    # nothing accepted after it closed everything: it stopped
    (stop,) = endpoint_stories(_ends(**{"10.0.0.1:40000": broker}))[SERVER].outages
    assert (stop.down, stop.up) == (100.0, None)


def test_a_server_that_went_away_ends_its_brokers_stays_as_stopped() -> None:
    """The brokers' connections the server closed as it went away end their stays as
    server_stopped, not as crashes; the next session starts with nothing registered."""
    broker = ConnectionEnds(0.0, False, 100.0002, False, 100.0, False, None, None, (), 95.0)
    back = ConnectionEnds(104.0, True, 300.0, False, None, False, True, 104.0, (), 299.0)
    story = endpoint_stories(_ends(**{"10.0.0.1:40000": broker, "10.0.0.1:40001": back}))[SERVER]
    sessions = Sessions((0.0,), {SERVER: story.run_starts()})
    replay = replay_server(SERVER, [event(70.0, REGISTER), event(95.0, REGISTER), closed(100.0, by="server"),
                                    event(110.0, REGISTER)], sessions, story, lambda t: 200.0)
    assert [(s.session, s.end) for s in replay.stays] == [(f"{SERVER}@1970-01-01T00:00:00Z", "server_stopped"),
                                                          (f"{SERVER}@1970-01-01T00:01:44Z", "alive")]
