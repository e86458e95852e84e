"""The NameServer's own state machine as the judge (analysis/replay.py), and each server endpoint's
evidence (model/endpoints.py): synthetic events and connection ends, one rule each. The real
captures in tests/data/captures/real/ check the same classes end to end (test_truth.py)."""

from __future__ import annotations

import hashlib

import pytest

from spark_analysis.analysis.liveness import broker_summary
from spark_analysis.analysis.replay import judge_lookups, lookup_stories, replay_server, stories_of
from spark_analysis.decode.rows import CAPTURE_MISSED, CONNECTION_CLOSED, cut_broker_addr
from spark_analysis.decode.schema import EVENT_ROWS
from spark_analysis.model.endpoints import endpoint_stories, server_sides
from spark_analysis.model.periods import ConnectionEnds, TimeBins
from spark_analysis.model.sessions import LISTED_FILES, Sessions, files_within, iso_time
from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig, encode_register_body
from twisted_namesrv.bodies.route import DataVersion
from twisted_namesrv.remoting import RequestCode
from twisted_namesrv.remoting.codes import V4_9_8, V5_3_3

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


def missed(since: float, t: float, count: int = 7_300, addr: str = "10.0.0.1:10911") -> dict:
    """A CAPTURE_MISSED row: ``count`` bytes of the broker's connection sent between ``since`` and ``t``."""
    return event(t, CAPTURE_MISSED, False, addr, missed=count, missed_since=since)


def test_no_expiry_is_told_over_bytes_of_the_brokers_connection_the_capture_missed() -> None:
    """A capture that dropped 190 s of a broker's connection (its registrations among the bytes missed, its
    connection going on after them): whether the server heard a heartbeat then is unknown, so no expiry is
    told at 40 + 120 s and no second stay after it: one stay, alive, its 190 s the capture's silence. A
    broker silent 150 s before the bytes missed began expired before them; one whose server closed its
    connection after the stretch missed expired there (the server's close is the evidence); one heard
    last in the stretch expires 120 s after its end, if nothing else comes."""
    held = replayed([event(10.0, REGISTER), event(40.0, REGISTER), missed(40.5, 230.0), event(230.0, REGISTER),
                     event(260.0, REGISTER)], end=300.0)
    assert ends_of(held) == [("10.0.0.1:10911", 0, 10.0, "alive", None)]
    row = broker_summary(held.stays[0], TimeBins.over([(0.0, 300.0)]))
    assert (row["ended"], row["near_expiry"], row["would_expire"]) == ("alive", 0, 0)
    [gap] = row["gaps"]
    assert (gap["seconds"], gap["expired"], gap["missed"]) == (190.0, False, 7_300)

    before = replayed([event(10.0, REGISTER), event(40.0, REGISTER), missed(190.0, 230.0), event(230.0, REGISTER)],
                      end=300.0)
    assert ends_of(before) == [("10.0.0.1:10911", 0, 10.0, "expired", 160.0),
                               ("10.0.0.1:10911", 0, 230.0, "alive", None)]
    closed_after = replayed([event(10.0, REGISTER), event(40.0, REGISTER), missed(40.5, 230.0),
                             closed(240.0, by="server")], end=300.0)
    assert ends_of(closed_after) == [("10.0.0.1:10911", 0, 10.0, "expired", 240.0)]
    assert closed_after.stays[0].silence_s == 200.0
    quiet_after = replayed([event(10.0, REGISTER), event(40.0, REGISTER), missed(40.5, 230.0)], end=400.0)
    assert ends_of(quiet_after) == [("10.0.0.1:10911", 0, 10.0, "expired", 350.0)]


def test_admin_requests_change_the_replayed_routes() -> None:
    """DELETE_TOPIC_IN_NAMESRV, WIPE_ and ADD_WRITE_PERM_OF_BROKER are applied when answered
    SUCCESS, each a story at its time; a refused one changes nothing."""
    admin = {"broker_addr": None, "broker_id": None, "alive": False}
    replay = replayed([registration(10.0, topics=("T", "K")),
                       event(20.0, RequestCode.WIPE_WRITE_PERM_OF_BROKER, response_code=0, topic_count=2, **admin),
                       event(25.0, RequestCode.ADD_WRITE_PERM_OF_BROKER, response_code=0, **admin),
                       event(30.0, RequestCode.DELETE_TOPIC_IN_NAMESRV, topic="T", response_code=0, **admin),
                       event(31.0, RequestCode.DELETE_TOPIC_IN_NAMESRV, topic="K", response_code=1, **admin)])
    assert [(s["kind"], s.get("topic") or s.get("broker_name"), s.get("topics"), s.get("topics_answered"))
            for s in replay.stories] == [("write_perm_wiped", "b", 2, 2), ("write_perm_added", "b", 2, None),
                                         ("topic_deleted", "T", None, None)]
    assert replay.stays[0].topics == [(10.0, 2), (30.0, 1)]


def registration(t: float, addr: str = "10.0.0.1:10911", broker_id: int = 0, name: str = "b",
                 topics: tuple[str, ...] = ("T", "K"), counter: int = 1, version: int = V5_3_3, **more) -> dict:
    """A REGISTER_BROKER event as the decoder makes it: header fields, the body and its digest."""
    body = encode_register_body(RegisterBrokerBody(DataVersion(1000, counter), {topic: TopicConfig(topic, 8, 8, 6)
                                                                                 for topic in topics}),
                                False, version >= V5_3_3)
    ext = {"clusterName": "C", "brokerAddr": addr, "brokerName": name, "brokerId": str(broker_id)}
    return event(t, REGISTER, addr=addr, broker_id=broker_id, name=name, version=version, ext=ext,
                 body=body, body_key=hashlib.blake2b(body, digest_size=16).digest(), **more)


@pytest.mark.parametrize(("version", "at_70"), [(V4_9_8, []), (V5_3_3, [(70.0, 3)])])
def test_topic_counts_are_what_the_server_held_after_a_delete_and_later_registrations(version: int, at_70) -> None:
    """The replay applies each broker's table with the server's own rules: a master's count is its
    group's topics in the server's tables: a deletion takes one away; its next registration of the
    same dataVersion, still listing it, does not bring it back in 4.9.8 (all or nothing by
    dataVersion) and does in 5.3.3 (a topic the tables lack is applied again), where a new table
    without it does not take it away (deleteTopicWithBrokerRegistration is off). A slave's count is
    its group's (the routes through it; the server does not apply its own table): it drops with the
    deletion too, naming the topic it lost and since when the group had held it."""
    master, slave = "10.0.0.1:10911", "10.0.0.2:10911"
    admin = {"broker_addr": None, "broker_id": None, "alive": False, "client": "10.0.0.7:50000"}
    replay = replayed([registration(10.0, master, topics=("T", "K", "L"), version=version),
                       registration(11.0, slave, 1, topics=("T", "K", "L"), version=version),
                       registration(40.0, master, topics=("T", "K", "L"), version=version),
                       registration(41.0, slave, 1, topics=("T", "K", "L"), version=version),
                       event(50.0, RequestCode.DELETE_TOPIC_IN_NAMESRV, topic="T", cluster="C", response_code=0,
                             **admin),
                       registration(70.0, master, topics=("T", "K", "L"), version=version),
                       registration(71.0, slave, 1, topics=("K", "L"), counter=2, version=version),
                       registration(100.0, master, topics=("K", "L"), counter=2, version=version),
                       event(105.0, RequestCode.WIPE_WRITE_PERM_OF_BROKER, response_code=0, **admin)])
    by_addr = {stay.broker_addr: stay for stay in replay.stays}
    assert by_addr[master].topics == [(10.0, 3), (50.0, 2), *at_70]
    assert by_addr[master].topic_drops[0] == {"t": 50.0, "from": 3, "to": 2, "removed": ["T"], "had_at": 10.0}
    assert by_addr[slave].topics == [(11.0, 3), (50.0, 2), *at_70]
    assert by_addr[slave].topic_drops[0] == {"t": 50.0, "from": 3, "to": 2, "removed": ["T"], "had_at": 11.0}
    assert replay.stories[-1]["topics"] == 2 + len(at_70)  # what the server's wipe touched (Java logs it)
    row = broker_summary(by_addr[master], TimeBins.over([(0.0, 200.0)]))
    assert (row["topic_count_first"], row["topic_count_last"], row["topic_count_max"]) == (3, 2 + len(at_70), 3)


def test_a_split_registration_is_one_table() -> None:
    """A 5.x broker with enableSplitRegistration sends its table in several bodies of one
    dataVersion: the server holds their union for the group (master and slave alike), and nothing
    drops when the next round of splits begins."""
    master, slave = "10.0.0.1:10911", "10.0.0.2:10911"
    halves = (("A", "B"), ("C",))
    events = []
    for t in (10.0, 40.0, 70.0):
        for index, half in enumerate(halves):
            events += [registration(t + index, master, topics=half), registration(t + index + 0.5, slave, 1,
                                                                                   topics=half)]
    replay = replayed(events)
    by_addr = {stay.broker_addr: stay for stay in replay.stays}
    assert by_addr[master].topics == [(10.0, 2), (11.0, 3)] and not by_addr[master].topic_drops
    assert by_addr[slave].topics == [(10.5, 2), (11.0, 3)] and not by_addr[slave].topic_drops


def test_a_failed_lookup_is_tied_to_the_cause_the_replay_saw() -> None:
    """TOPIC_NOT_EXIST for a topic whose only broker expired is that expiry's; for a deleted topic
    the deletion's; after a restart, for a topic the server held before it, the restart's (with when
    its route came back); for a topic the capture never showed held, none: a client's problem."""
    lookup = {"broker_addr": None, "broker_id": None, "alive": False, "client": "10.0.0.5:40000",
              "response_code": 17}
    admin = {"broker_addr": None, "broker_id": None, "alive": False, "response_code": 0, "client": "10.0.0.7:1"}
    replay = replayed([registration(10.0, topics=("T", "K")), registration(12.0, "10.0.0.2:10911", name="c",
                                                                            topics=("K", "D")),
                       event(20.0, RequestCode.DELETE_TOPIC_IN_NAMESRV, topic="D", cluster="C", **admin),
                       event(25.0, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="D", **lookup),
                       event(200.0, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="T", **lookup),
                       event(201.0, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="T", **lookup),
                       event(202.0, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="K", **lookup),
                       event(203.0, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="Never", **lookup)], end=300.0)
    told = {(s["topic"], s["count"]): s["cause"] for s in lookup_stories(replay.lookups, SERVER)}
    expired = next(stay for stay in replay.stays if stay.broker_addr == "10.0.0.1:10911")
    assert expired.end == "expired"
    assert told[("T", 2)] == {"kind": "departed", "end": "expired", "broker_addr": "10.0.0.1:10911",
                              "broker_name": "b", "t": iso_time(expired.ended_at)}
    assert told[("D", 1)] == {"kind": "deleted", "t": iso_time(20.0), "client": "10.0.0.7:1", "topic": "D"}
    assert told[("K", 1)]["kind"] == "departed"  # both its brokers left: the last to leave took its route
    assert told[("Never", 1)] is None

    broker = ConnectionEnds(0.0, False, 100.0002, False, 100.0, False, None, None, (), 95.0)
    back = ConnectionEnds(104.0, True, 300.0, False, None, False, True, 104.0, (), 299.0)
    story = endpoint_stories(_ends(**{"10.0.0.1:40000": broker, "10.0.0.1:40001": back}))[SERVER]
    (outage,) = story.outages
    sessions = Sessions((0.0,), {SERVER: story.run_starts()})
    replay = replay_server(SERVER, [registration(70.0, topics=("T", "K")), registration(95.0, topics=("T", "K")),
                                    closed(100.0, by="server"),
                                    event(105.0, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="T", **lookup),
                                    event(106.0, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="New", **lookup),
                                    registration(120.0, topics=("T", "K", "New"))],
                           sessions, story, lambda t: 300.0)
    told = {s["topic"]: s["cause"] for s in lookup_stories(replay.lookups, SERVER)}
    assert told["T"] == {"kind": "restarted", "t": iso_time(outage.down), "up": iso_time(outage.up),
                         "route_back": iso_time(120.0)}
    # not held before the restart: made later, not lost in it (its first registration after the lookup)
    assert told["New"] == {"kind": "made_later", "t": iso_time(120.0)}


def test_a_topic_a_broker_registers_after_a_failed_lookup_was_made_later() -> None:
    """A producer's lookup answered TOPIC_NOT_EXIST, then it sends by the default topic and its
    broker makes the topic (autoCreateTopicEnable) and registers it at once: the topic was made
    later, when the registration brought it (v4-ops-late's TopicBusy), whether or not a lookup of
    it is captured since. A topic no registration ever brings stays without a cause; one held
    before the lookup and gone keeps the cause of its going."""
    lookup = {"broker_addr": None, "broker_id": None, "alive": False, "client": "10.0.0.5:40000",
              "response_code": 17}
    replay = replayed([registration(10.0, topics=("T",)),
                       event(15.0, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="Busy", **lookup),
                       event(15.1, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="Busy", **lookup),
                       event(15.2, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="Never", **lookup),
                       registration(15.4, topics=("T", "Busy")), registration(40.0, topics=("T", "Busy"))],
                      end=60.0)
    told = {s["topic"]: (s["count"], s["cause"]) for s in lookup_stories(replay.lookups, SERVER)}
    assert told == {"Busy": (2, {"kind": "made_later", "t": iso_time(15.4)}), "Never": (1, None)}


def test_lookups_judged_from_the_routes_of_a_replay_without_them_are_judged_alike() -> None:
    """The lookups of clients decoded beside the replay (spark/liveness_stage.py) are judged from
    the routes of a replay that never saw them: the same causes (a departure, a deletion, the
    restart a later session came back from, none) and counts as a replay given them says."""
    lookup = {"broker_addr": None, "broker_id": None, "alive": False, "client": "10.0.0.5:40000",
              "response_code": 17}
    admin = {"broker_addr": None, "broker_id": None, "alive": False, "response_code": 0, "client": "10.0.0.7:1"}
    broker = ConnectionEnds(0.0, False, 100.0002, False, 100.0, False, None, None, (), 95.0)
    back = ConnectionEnds(104.0, True, 300.0, False, None, False, True, 104.0, (), 299.0)
    story = endpoint_stories(_ends(**{"10.0.0.1:40000": broker, "10.0.0.1:40001": back}))[SERVER]
    sessions = Sessions((0.0,), {SERVER: story.run_starts()})
    asked = [event(t, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=topic, **lookup)
             for t, topic in ((25.0, "D"), (26.0, "D"), (90.0, "K"), (105.0, "T"), (106.0, "New"), (107.0, "K"))]
    events = [registration(10.0, topics=("T", "D")), registration(12.0, "10.0.0.2:10911", name="c", topics=("K", "D")),
              event(20.0, RequestCode.DELETE_TOPIC_IN_NAMESRV, topic="D", cluster="C", **admin),
              registration(40.0, topics=("T", "D")), closed(50.0, addr="10.0.0.2:10911"),
              registration(70.0, topics=("T", "D")),
              registration(95.0, topics=("T", "D")),
              closed(100.0, by="server"), registration(120.0, topics=("T", "K", "New"))]

    def run(given: list[dict]):
        return replay_server(SERVER, [dict(e) for e in given], sessions, story, lambda t: 300.0)

    whole = lookup_stories(run(events + asked).lookups, SERVER)
    apart = lookup_stories(judge_lookups(SERVER, asked, run(events).routes, sessions, story), SERVER)
    assert apart == whole
    assert [(s["topic"], s["count"], s["cause"] and s["cause"]["kind"]) for s in whole] == [
        ("D", 2, "deleted"), ("K", 1, "departed"), ("T", 1, "restarted"), ("New", 1, "made_later"),
        ("K", 1, "restarted")]


class _EndsAsked(Sessions):
    """Sessions that note each end_of asked of them."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.asked: list[float] = []

    def end_of(self, server: str | None, t: float) -> float:
        self.asked.append(t)
        return super().end_of(server, t)


def test_lookups_decoded_beside_the_replay_look_at_each_session_s_end_once() -> None:
    """The driver judges lookups decoded beside the replay (liveness_stage._judged) only where each
    fell within where its session's replay ran: a lookup past it (after the session's observed span
    ended and its replay's last event) would have moved that end, and the caller replays again.
    Each session's end is looked at once, at its last lookup, as the replay closes each session once
    (a capture of one client failing lookups all day is tens of thousands), whatever came before it
    in the session; a session that ended with its server going away is not looked at (its end is
    the server's). Within the ends, they are judged as the replay given them judges them."""
    from spark_analysis.spark.liveness_stage import _judged

    def sessions(kind=Sessions):
        return kind((0.0, 400.0), period_ends=(350.0, 900.0))

    lookup = {"broker_addr": None, "broker_id": None, "alive": False, "client": "10.0.0.5:40000",
              "response_code": 17}

    def asked(*times: float) -> list[dict]:
        return [event(t, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="X", **lookup) for t in times]

    events = [registration(10.0), registration(340.0), registration(410.0)]

    def replay(given: list[dict]):
        plain = sessions()
        return replay_server(SERVER, [dict(e) for e in given], plain, None, lambda t: plain.end_of(SERVER, t))

    routes = replay(events).routes
    assert [(r.start, r.end, r.stopped) for r in routes] == [(0.0, 350.0, False), (400.0, 900.0, False)]

    def judged(lookups: list[dict], given=routes):
        counting = sessions(_EndsAsked)
        found = _judged(SERVER, [(e["t"], e["topic"], e["client"]) for e in reversed(lookups)], given, counting,
                        None)
        return found, counting.asked

    within = asked(20.0, 30.0, 349.0, 410.0, 420.0, 899.0)
    found, ends_asked = judged(within)
    assert ends_asked == [349.0, 899.0]
    assert found == lookup_stories(replay(events + within).lookups, SERVER)
    assert [(s["first"], s["count"]) for s in found] == [(iso_time(20.0), 3), (iso_time(410.0), 3)]

    found, ends_asked = judged(asked(20.0, 30.0, 370.0, 410.0))  # 370: after the span ended, before 400
    assert found is None
    assert ends_asked == [370.0]

    routes[0].stopped = True
    found, ends_asked = judged(asked(20.0, 370.0, 410.0))
    assert ends_asked == [410.0]
    assert [(s["first"], s["count"]) for s in found] == [(iso_time(20.0), 2), (iso_time(410.0), 1)]


def test_a_lookup_is_judged_at_its_time_and_moves_nothing_in_the_replay() -> None:
    """A failed lookup changes nothing in the server's tables, so the replay no longer runs its
    housekeeping at one: a 5.x broker with its own 30 s heartbeat timeout, then silent, is the
    scan's at the tick after 30 s (not the idle close's at 120 s, the scans and idle closes taken
    in time order) whether or not a client looked a route up meanwhile; each lookup is judged
    against what the tables held at its time, the events of that very time included (a close
    then is already its departure)."""
    lookup = {"broker_addr": None, "broker_id": None, "alive": False, "client": "10.0.0.5:40000",
              "response_code": 17}
    short = registration(10.0)
    short["ext"] = {**short["ext"], "heartbeatTimeoutMillis": "30000"}
    asked = event(50.0, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="T", **lookup)
    for events in ([dict(short)], [dict(short), asked]):
        replay = replayed(events, end=300.0)
        assert ends_of(replay) == [("10.0.0.1:10911", 0, 10.0, "expired", 40.0)]
        assert replay.stays[0].silence_s == 30.0
    assert [s["cause"]["t"] for s in lookup_stories(replay.lookups, SERVER)] == [iso_time(40.0)]

    same_time = replayed([asked, registration(20.0), closed(50.0)], end=300.0)
    assert [(s["cause"]["kind"], s["cause"]["end"]) for s in lookup_stories(same_time.lookups, SERVER)] == [
        ("departed", "connection_closed")]


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


def test_brokers_a_snap_length_cut_the_names_of_tell_no_move() -> None:
    """tcpdump -s 96 keeps no broker's name, id or address: each stay is named by its connection.
    Two brokers stopped cleanly and back on new connections are four stays of unknown brokers, not
    a broker that moved (from whom to whom is not in the capture); nor is one whose name survived the
    cut but whose address did not (each reconnection is another connection, not another address)."""
    first, second = cut_broker_addr("127.0.0.1:49928"), cut_broker_addr("127.0.0.1:45002")
    for name, broker_id in ((None, None), ("broker-a", 0)):
        replay = replayed([event(10.0, REGISTER, addr=first, name=name, broker_id=broker_id, cluster=None),
                           event(70.0, UNREGISTER, False, addr=first, name=name, broker_id=broker_id, cluster=None),
                           event(90.0, REGISTER, addr=second, name=name, broker_id=broker_id, cluster=None)],
                          end=150.0)
        assert [s.end for s in replay.stays] == ["unregistered", "alive"]
        assert stories_of(replay.stays) == [], name


def test_a_slave_promoted_on_its_connection_is_told_when_a_snap_length_cut_its_name() -> None:
    """tcpdump -s 128 keeps a 4.9.8 broker's brokerId but not its name or address: an operator's
    updateBrokerConfig making a slave id 0 on the same connection is that connection's brokerId
    change (1 -> 0), told though it belongs to no group; an id the cut left out is no change."""
    conn = cut_broker_addr("127.0.0.1:40380")
    replay = replayed([event(10.0, REGISTER, addr=conn, name=None, broker_id=1, cluster=None),
                       event(40.0, REGISTER, addr=conn, name=None, broker_id=1, cluster=None),
                       event(70.0, REGISTER, addr=conn, name=None, broker_id=0, cluster=None)], end=150.0)
    assert [(s["kind"], s["broker_addr"], s["broker_name"], s["id_from"], s["id_to"], s["t"])
            for s in stories_of(replay.stays)] == [("broker_id_change", conn, None, 1, 0, iso_time(70.0))]
    unknown = replayed([event(10.0, REGISTER, addr=conn, name=None, broker_id=None, cluster=None),
                        event(70.0, REGISTER, addr=conn, name=None, broker_id=0, cluster=None)], end=150.0)
    assert stories_of(unknown.stays) == []


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


def test_a_restart_no_connection_saw_is_told_by_the_attempts_it_refused_between_two_runs() -> None:
    """The brokers stopped cleanly (their connections closed by them), then the NameServer, then all
    started again: no connection was open to close as it went, but its launch script's attempts were
    refused between connections it accepted before and after. Nothing listened then and it listened
    again: a restart, from its first refused attempt (no connection closed), not attempts refused
    "while up". Refused attempts while a connection goes on through them tell nothing of the kind."""
    before = ConnectionEnds(0.0, False, 50.0, True, 50.0, True, None, None, (), 49.0)  # the broker closed it
    polls = ConnectionEnds(60.0, True, 75.0, True, None, False, True, None, (60.0, 70.0, 75.0))
    back = ConnectionEnds(75.5, True, 300.0, False, None, False, True, 75.5, (), 299.0)
    ends = _ends(**{"10.0.0.1:40000": before, "10.0.0.3:1": polls, "10.0.0.1:40001": back})
    story = endpoint_stories(ends)[SERVER]
    (outage,) = story.outages
    assert (outage.down, outage.up, outage.closed, outage.refused) == (60.0, 75.5, 0, 3)
    assert story.refused == [] and story.run_starts() == (75.5,)
    going_on = ConnectionEnds(0.0, False, 200.0, False, None, False, None, None, (), 199.0)
    ends = _ends(**{"10.0.0.1:40000": before, "10.0.0.2:50000": going_on, "10.0.0.3:1": polls,
                    "10.0.0.1:40001": back})
    story = endpoint_stories(ends)[SERVER]
    assert story.outages == [] and [n for n, *_ in story.refused] == [3]


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


def test_the_replays_work_follows_what_changed(monkeypatch) -> None:
    """Counted in work, never time: a broker of 2,000 topics registering every 30 s beside one that
    adds a topic each time costs the topic counts the changed topics, not a walk of every topic
    held per change; a header sent again is read once (a broker sends the same every 30 s)."""
    from spark_analysis.analysis import replay as replay_module
    from spark_analysis.decode import rows
    from tests.test_change_cost import Walked
    from twisted_namesrv.bodies.register_header import RegisterBrokerHeader

    managers = []

    class Counted(replay_module.RouteInfoManager):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.topicQueueTable = Walked()
            managers.append(self)

    read = []
    from_ext = RegisterBrokerHeader.from_ext
    rows._broker_header.cache_clear()  # read once per process: count this test's reads
    monkeypatch.setattr(replay_module, "RouteInfoManager", Counted)
    monkeypatch.setattr(RegisterBrokerHeader, "from_ext", classmethod(lambda cls, ext: read.append(1) or from_ext(ext)))
    big = tuple(f"Big{i}" for i in range(2000))
    events = []
    for n in range(20):
        events.append(registration(10.0 + 30 * n, "10.0.0.1:10911", name="big", topics=big))
        events.append(registration(11.0 + 30 * n, "10.0.0.2:10911", name="grows", counter=n + 1,
                                   topics=tuple(f"G{i}" for i in range(n + 1))))
    replay = replayed(events, end=700.0)
    assert [stay.topics[-1] for stay in replay.stays] == [(10.0, 2000), (581.0, 20)]
    # one walk, at the session's end (what it held then); the old replay walked 2,000+ at each of 20 changes
    assert managers[0].topicQueueTable.visited == 2020
    assert len(read) == 2  # one per distinct header: each broker sent the same one 20 times


def test_a_group_that_left_counts_nothing_when_its_broker_comes_back() -> None:
    """A broker expired takes its group's topics out of the tables (the routes tell it as the group
    leaving, not topic by topic); back, its first registration of a single topic refused (5.x), its
    stay counts from the table it then registers, not the topics it held before."""
    replay = replayed([registration(10.0, topics=("T", "K")), registration(200.0, topics=("L",), counter=2),
                       registration(200.5, topics=("T", "K", "L"), counter=2)], end=300.0)
    assert [(stay.end, stay.topics) for stay in replay.stays] == [("expired", [(10.0, 2)]),
                                                                  ("alive", [(200.5, 3)])]


def test_a_registration_sent_again_unchanged_is_a_renewal(monkeypatch) -> None:
    """Counted in calls: the replay takes the server's own renewal (RouteInfoManager.renew) for a
    registration the same as the one its broker had applied in full last, as the server's handler
    does; a new table, and the first registration after the broker's connection closed, are
    applied in full. The stay and its counts are what applying every one in full gave."""
    from spark_analysis.analysis import replay as replay_module

    applied, renewed = [], []

    class Counted(replay_module.RouteInfoManager):
        def register_broker(self, req):
            applied.append(req.brokerAddr)
            return super().register_broker(req)

        def renew(self, *args, **kwargs):
            found = super().renew(*args, **kwargs)
            renewed.append(found is not None)
            return found

    monkeypatch.setattr(replay_module, "RouteInfoManager", Counted)
    events = [registration(10.0 + 30 * n) for n in range(10)]
    events += [registration(310.0, topics=("T", "K", "L"), counter=2), registration(340.0, topics=("T", "K", "L"),
                                                                                     counter=2), closed(345.0)]
    events += [registration(350.0, topics=("T", "K", "L"), counter=2), registration(380.0, topics=("T", "K", "L"),
                                                                                     counter=2)]
    replay = replayed(events, end=400.0)
    assert len(applied) == 3  # the first, the new table, the first after the close; 14 before
    assert renewed.count(True) == 11
    assert [(stay.registered, stay.end, stay.topics, stay.last_alive) for stay in replay.stays] == [
        (10.0, "connection_closed", [(10.0, 2), (310.0, 3)], 340.0), (350.0, "alive", [(350.0, 3)], 380.0)]


def test_the_liveness_task_replays_without_the_cycle_collector(monkeypatch) -> None:
    """The liveness task (one per NameServer, which the other cores wait for) replays its events
    and makes its stays and rows with the cycle collector off, as the decoding tasks decode (it
    spent a quarter of its time walking them again and again); on again after it."""
    import gc
    import pickle

    import pyarrow as pa

    from spark_analysis.spark import liveness_stage, worker

    monkeypatch.setattr(worker, "settle", lambda: None)  # gc.freeze: for reused workers, not this process
    monkeypatch.setattr(worker, "drill", lambda stage: None)  # reads the Spark task's context
    collecting = []

    def replay(*args, **kwargs):
        collecting.append(gc.isenabled())
        return replay_server(*args, **kwargs)

    monkeypatch.setattr(liveness_stage, "replay_server", replay)
    rows = [tuple(e[name] for name in EVENT_ROWS.names) for e in (registration(10.0 + 30 * n) for n in range(30))]
    batch = pa.RecordBatch.from_arrays([pa.array([pickle.dumps(rows)], pa.binary()), pa.array([SERVER]),
                                        pa.array([None], pa.binary())], names=["event", "event_server", "tally"])
    bins = TimeBins.over([(0.0, 10_000.0)])
    out = list(liveness_stage._liveness_batches(iter([batch]), bins, (), Sessions(bins.starts, period_ends=bins.ends),
                                                {}))
    assert [count for count in out[0].column("registrations").to_pylist() if count is not None] == [30]
    assert collecting == [False]
    assert gc.isenabled()


def test_one_nameserver_s_replay_is_one_task(spark) -> None:
    """The liveness stage runs a task per core, but none that could only be empty: with the events
    of one NameServer, one (each Python task costs the JVM ~10 ms of CPU, in the stage the job ends
    with; a second core takes the clients' decoding beside it). Its rows are the same."""
    import pickle

    from spark_analysis.spark.liveness_stage import broker_liveness

    rows = [tuple(e[name] for name in EVENT_ROWS.names) for e in (registration(10.0 + 30 * n) for n in range(30))]
    events = spark.createDataFrame([(pickle.dumps(rows), SERVER, None)], "event binary, event_server string, "
                                                                         "tally binary")
    bins = TimeBins.over([(0.0, 10_000.0)])
    tracker = spark.sparkContext.statusTracker()
    found = []
    for servers in (None, 1):
        spark.sparkContext.setJobGroup(f"liveness-{servers}", "the liveness stage's tasks")
        liveness, whole = broker_liveness(events, bins, servers=servers)
        stages = [tracker.getStageInfo(stage) for job in tracker.getJobIdsForGroup(f"liveness-{servers}")
                  for stage in tracker.getJobInfo(job).stageIds]
        found.append((max(stages, key=lambda stage: stage.stageId).numTasks, liveness.brokers, whole))
    spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert [tasks for tasks, _, _ in found] == [2, 1]
    assert found[0][1:] == found[1][1:] and found[1][1][0]["registrations"] == 30


def test_events_go_to_the_sessions_start_of_names_cut_by_one_search_a_session() -> None:
    """The replay cuts its time-ordered events into sessions with Sessions.runs_of: the session
    start_of gives each event, times before the first start and on a start's own time included,
    and, with no start known at all, start_of's own answer (each time its own)."""
    sessions = Sessions((100.0,), {SERVER: (100.0, 400.0, 700.0)})
    times = [50.0, 100.0, 100.0, 250.0, 399.999, 400.0, 400.0, 900.0]
    runs = sessions.runs_of(SERVER, times)
    assert [(start, times[first:after]) for start, first, after in runs] == [
        (100.0, [50.0, 100.0, 100.0, 250.0, 399.999]), (400.0, [400.0, 400.0]), (700.0, [900.0])]
    assert all(sessions.start_of(SERVER, t) == start for start, first, after in runs for t in times[first:after])
    assert sessions.runs_of(SERVER, []) == []
    nothing = Sessions(())
    assert [(start, first, after) for start, first, after in nothing.runs_of(SERVER, [5.0, 6.0])] == [
        (nothing.start_of(SERVER, 5.0), 0, 1), (nothing.start_of(SERVER, 6.0), 1, 2)]


def test_a_row_over_many_rotated_files_names_their_ends_and_count() -> None:
    """A broker's input over a day of one-minute rotation: the first and last file and how many,
    not 1,440 paths in one cell; up to LISTED_FILES are each named."""
    files = tuple((60.0 * n, 60.0 * n + 59, f"cap_{n:04}.pcap") for n in range(1440))
    listed = " ".join(f"cap_{n:04}.pcap" for n in range(LISTED_FILES))
    assert files_within(files, 0, 60.0 * (LISTED_FILES - 1)) == listed
    assert files_within(files, 100.0, 86_000.0) == "cap_0001.pcap ... cap_1433.pcap (1433 files)"
    assert files_within(files, 90_000.0, 95_000.0) == ""


def test_an_accepted_connection_that_carried_nothing_is_counted_as_a_port_check() -> None:
    """A launch script's poll (bash's /dev/tcp: connect, close) of an address the NameServer also
    listens on, captured with -i any: accepted, no byte either way. It was told as a server whose
    traffic "cannot be read: cut before any frame's header" (v5-bothcut)."""
    poll = ConnectionEnds(10.0, True, 10.001, True, 10.001, False, True, 10.0005, (), None)
    broker = ConnectionEnds(11.0, True, 40.0, False, None, False, True, 11.0, (), 39.0)
    story = endpoint_stories(_ends(**{"10.0.0.1:40000": poll, "10.0.0.1:40001": broker}))[SERVER]
    assert (story.accepted, story.empty) == (2, 1)


def test_an_expired_broker_that_came_back_is_said_back() -> None:
    """A broker paused 170 s (kill -STOP, then -CONT; real capture v5-pause): the NameServer closed
    its connection 120 s after its last byte and logged its removal; the broker registered again
    55 s later ("new broker registered"). Two stays, as the log has them; the expiry's finding said
    nothing of the return, which only brokers.csv's second row showed."""
    from spark_analysis.analysis.findings import _broker_findings

    replay = replayed([event(10.0, REGISTER), event(40.0, REGISTER), closed(160.0, by="server"),
                       event(215.0, REGISTER), event(245.0, UNREGISTER, False)], end=600.0)
    assert ends_of(replay) == [("10.0.0.1:10911", 0, 10.0, "expired", 160.0),
                               ("10.0.0.1:10911", 0, 215.0, "unregistered", 245.0)]
    rows = [broker_summary(stay, TimeBins.over([(0.0, 600.0)])) for stay in replay.stays]
    expired = next(f for f in _broker_findings(rows[0]) if f["kind"] == "heartbeat_expired")
    assert "after 120.0 s of silence" in expired["message"]
    assert "; back 55.0 s later: registered again at 1970-01-01T00:03:35.000000Z" in expired["message"]
    assert (expired["back_after_s"], expired["registered_again"]) == (55.0, iso_time(215.0))
    assert all(f["kind"] != "heartbeat_expired" for f in _broker_findings(rows[1]))


def test_a_close_across_a_clock_step_back_is_neither_a_crash_nor_an_expiry() -> None:
    """v5-pause's capture with its clock stepped back 85 s while broker-a was paused (editcap -t -90
    on its packets after 14:17:40, joined with mergecap -a): the NameServer's idle close, 120 s after
    the last heartbeat, was stamped 31 s after it, and the report said critical "connection closed
    without UNREGISTER_BROKER ... a crash or a kill". A close whose silence reaches into times the
    clock stamped twice is told as such, its silence unknown."""
    from spark_analysis.analysis.findings import _broker_findings

    replay = replayed([event(10.0, REGISTER), event(40.0, REGISTER), closed(71.0, by="server")], end=600.0)
    assert ends_of(replay)[0][3] == "connection_closed"
    row = broker_summary(replay.stays[0], TimeBins.over([(0.0, 600.0)]))
    kinds = [f["kind"] for f in _broker_findings(row, stepped=[(46.0, 131.0)])]
    assert kinds == ["end_across_clock_step"]
    assert [f["kind"] for f in _broker_findings(row, stepped=[(80.0, 131.0)])] == ["broker_connection_closed"]
    assert [f["kind"] for f in _broker_findings(row)] == ["broker_connection_closed"]


def test_a_long_silence_costs_the_scans_that_can_expire_something(monkeypatch) -> None:
    """The server's housekeeping scan runs every 5-10 s; the replay ran it at every tick of a
    silence, however long: a capture whose clock was stepped years forward (a host that booted at
    its RTC's 2000 and was set right by NTP), or one packet dated in the year 9000, held a liveness
    task for hours, for ever (6.3 M scans a year of silence). A scan with no broker whose timeout can
    pass by its tick removes nothing, so the replay goes to the last tick before one can (counted:
    a day of silence was 17,280 scans); what the stays say is the same."""
    from spark_analysis.analysis import replay as replay_module

    scans = []
    scan = replay_module.RouteInfoManager.scan_not_active_broker
    monkeypatch.setattr(replay_module.RouteInfoManager, "scan_not_active_broker",
                        lambda self: scans.append(self.now_ms()) or scan(self))
    day = 86_400.0
    replay = replayed([event(10.0, REGISTER), event(40.0, REGISTER), event(day, REGISTER, addr="10.0.0.2:10911"),
                       event(day + 30.0, REGISTER, addr="10.0.0.2:10911")], end=2 * day)
    assert ends_of(replay) == [("10.0.0.1:10911", 0, 10.0, "expired", 160.0),
                               ("10.0.0.2:10911", 0, day, "expired", day + 150.0)]
    assert len(scans) < 100


def test_a_registration_past_our_limits_that_the_server_took_is_a_stay_with_its_id() -> None:
    """Any peer registers under any name, and a capture keeps what the server refused too. A Java
    NameServer has no maxNameLength (our server's guard): it took a broker named in 3,000 characters
    (answered SUCCESS, logged "new broker registered"), and the replay, holding its tables to our
    limits, told a refused stay with no broker id, the broker's lookups and unregister judged against
    tables without it. The server's answers say what it refused: a registration it answered SUCCESS
    (or whose answer the capture lacks) is a stay with its id; one it answered with an error is a
    refused stay, the tables as they were, and the brokers after it replay as before."""
    long = "b" * 3000
    replay = replayed([registration(10.0, name=long), registration(20.0, addr="10.0.0.2:10911"),
                       registration(40.0, name=long), event(50.0, UNREGISTER, False, name=long)], end=60.0)
    assert ends_of(replay) == [("10.0.0.1:10911", 0, 10.0, "unregistered", 50.0),
                               ("10.0.0.2:10911", 0, 20.0, "alive", None)]
    assert replay.stays[0].broker_name == long
    answered = replayed([registration(10.0, name=long, alive=False), registration(40.0, alive=False)], end=60.0)
    assert [(stay.end, stay.broker_id) for stay in answered.stays] == [("refused", None), ("refused", None)]


def test_an_expiry_of_a_nameless_broker_another_connection_may_have_renewed_is_not_claimed() -> None:
    """4.9.8 at -s 96, a broker whose host changed its IP: its connection silent from 100 s, a broker
    named by another connection (its new address) registered at 160 s, the old connection closed by
    the NameServer idle at 220 s. With the addresses cut, whether the NameServer renewed the first by
    the second's registration (the same brokerAddr: its log has no expiry) cannot be told: the
    expiry comes with the brokers that may be it back. One that registered before the silence (heard
    throughout), or with another brokerId kept by the cut, cannot be."""
    old, new, other = (cut_broker_addr(client) for client in ("10.93.0.2:39660", "10.93.0.3:46660", "10.0.0.7:1"))
    events = [*(event(t, REGISTER, addr=other, name=None, broker_id=None, cluster=None) for t in range(10, 300, 30)),
              event(40.0, REGISTER, addr=old, name=None, broker_id=None, cluster=None),
              event(100.0, REGISTER, addr=old, name=None, broker_id=None, cluster=None),
              event(160.0, REGISTER, addr=new, name=None, broker_id=None, cluster=None),
              closed(220.0, by="server", addr=old)]
    stays = {s.broker_addr: s for s in replayed(events, end=300.0).stays}
    assert (stays[old].end, stays[old].maybe_back_as) == ("expired", [(new, 160.0)])
    assert stays[new].maybe_back_as == stays[other].maybe_back_as == []
    renumbered = [dict(e, broker_id=1) if e["broker_addr"] == new else dict(e, broker_id=0) for e in events]
    assert {s.broker_addr: s for s in replayed(renumbered, end=300.0).stays}[old].maybe_back_as == []
    named = [dict(e, broker_addr=e["broker_addr"].replace(old, "10.93.0.2:10931")) for e in events]
    assert all(s.maybe_back_as == [] for s in replayed(named, end=300.0).stays)
