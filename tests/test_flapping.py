"""A broker that keeps leaving and coming back (flapping.py): one warning, its lines summarised,
one line when it settles; the counter, the gauge and the page's list say it meanwhile.  On a fake
clock: the windows are counted, never waited for."""

from __future__ import annotations

from twisted.internet import task
from twisted.logger import capturedLogs

from tests import built
from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig
from twisted_namesrv.bodies.route import DataVersion
from twisted_namesrv.flapping import FLAP_DEPARTURES, FLAP_SETTLE_SECONDS, FLAP_WINDOW_SECONDS, FlapWatch
from twisted_namesrv.logs import message_of
from twisted_namesrv.schema import SERVER_SCHEMA
from twisted_namesrv.state.config import NamesrvConfig
from twisted_namesrv.state.routes import RegisterRequest

A = MASTER = "10.0.0.1:10911"
B = "10.0.0.2:10911"


class World:
    """The owners the composition root builds, on one fake clock, with the timer's tick by hand."""

    def __init__(self, tmp_path) -> None:
        self.clock = task.Clock()
        self.clock.advance(1_000_000)
        config = NamesrvConfig({"kvConfigPath": str(tmp_path / "kv.json"),
                                "configStorePath": str(tmp_path / "ns.properties")}, schema=SERVER_SCHEMA)
        self.owners = built.owners(config, self.clock)
        self.routes, self.seen = self.owners.state.routes, self.owners.seen
        self.version = 0

    def register(self, addr: str = A, name: str = "broker-a") -> None:
        self.version += 1
        topics = {t: TopicConfig(t) for t in ("T1", "T2")}  # 5.3.3 refuses a first registration of one topic
        body = RegisterBrokerBody(DataVersion(self.version, self.version), topics, [], {})
        self.routes.register_broker(RegisterRequest("c1", addr, name, 0, None, body, channel=addr))

    def advance(self, seconds: float) -> None:
        """Second by second, ticking every 5 s as the server's timer does."""
        for _ in range(int(seconds)):
            self.clock.advance(1)
            if int(self.clock.seconds()) % 5 == 0:
                self.seen.flaps.tick()


def lines(events) -> list[str]:
    return [message_of(e) for e in events if e.get("log_namespace") == "twisted_namesrv.housekeeping"]


def flap(world: World, minutes: float, every: float = 5.0, kill: bool = True) -> None:
    """The broker registers, then leaves ``every`` seconds later (closed, or a clean stop), again and again."""
    for _ in range(int(minutes * 60 / every / 2)):
        world.register()
        world.advance(every)
        if kill:
            world.routes.on_channel_destroy(A, "connection closed")
        else:
            world.routes.unregister_broker("c1", A, "broker-a", 0)
        world.advance(every)


def test_a_broker_flapping_for_ten_minutes_is_one_warning_summaries_and_one_settled_line(tmp_path):
    """Before: every registration and departure one info line, 24 a minute (240 in the 10 minutes),
    and the page's last 200 events all this broker's."""
    world = World(tmp_path)
    with capturedLogs() as events:
        world.register(B, "broker-b")  # a steady neighbour, told once
        flap(world, 10)
        world.register()  # it stays up
        world.advance(FLAP_SETTLE_SECONDS + 5)
    told = lines(events)
    route_lines = [line for line in told if line.startswith(("broker registered", "broker closed"))]
    # the broker-b line, then broker-a's lines until its third departure
    assert len(route_lines) == 1 + 2 * FLAP_DEPARTURES, told
    (started,) = [line for line in told if line.startswith("broker flapping: ")]
    assert started.startswith("broker flapping: cluster=c1 broker=broker-a id=0 addr=10.0.0.1:10911: 3 departures in ")
    assert told[told.index(started) - 1].startswith("broker closed: cluster=c1 broker=broker-a")  # its line first
    still = [line for line in told if line.startswith("broker still flapping: ")]
    assert len(still) == 2  # every 5 minutes while it flaps: the 10 minutes' two
    assert "registered" in still[0] and "closed" in still[0]
    (settled,) = [line for line in told if line.startswith("broker settled: ")]
    assert "broker=broker-a" in settled and ": registered (the last registered" in settled
    # the 10 minutes' 60 cycles less the 3 told, and the last registration
    assert "58 registered, 57 closed summarised" in settled
    assert len(told) <= 12, told
    levels = {message_of(e): e["log_level"].name for e in events if e.get("log_namespace", "").endswith("housekeeping")}
    assert levels[started] == "warn" and levels[settled] == "info"
    # every event counted all the same
    metrics = world.seen.metrics
    assert metrics.route_events["closed"] == 60 and metrics.route_events["registered"] == 62
    # the page: this broker's start and end of flapping, not its 121 route events
    kinds = [e.kind for e in world.seen.events.recent]
    assert kinds.count("flapping") == 1 and kinds.count("settled") == 1 and len(kinds) <= 12
    assert world.seen.flaps.flapping() == [] and world.seen.flaps.started == 1


def test_a_clean_stop_restart_loop_is_restarting_cleanly_not_flapping(tmp_path):
    """A broker stopped with mqshutdown (it unregisters) and started again, again and again: an
    operator's or a supervisor's restarts.  It warned "broker flapping" and NamesrvBrokerFlapping, the
    warning of a crash loop.  Now its lines are summarised the same way, at info, no warning: the
    gauge of flapping brokers stays empty, the one of brokers restarting cleanly names it."""
    world = World(tmp_path)
    with capturedLogs() as events:
        flap(world, 2, every=10, kill=False)  # stops cleanly each time
        assert world.seen.flaps.flapping() == [] and world.seen.flaps.started == 0
        assert [(f.info["broker"], f.info["addr"]) for f in world.seen.flaps.restarting()] == [("broker-a", A)]
        assert world.seen.flaps.started_clean == 1
        world.advance(FLAP_SETTLE_SECONDS + 5)  # and stays stopped
    told = lines(events)
    levels = {message_of(e): e["log_level"].name for e in events if e.get("log_namespace", "").endswith("housekeeping")}
    (started,) = [line for line in told if line.startswith("broker restarting cleanly: ")]
    assert started.startswith("broker restarting cleanly: cluster=c1 broker=broker-a id=0 addr=10.0.0.1:10911: 3 "
                              "departures in "), started
    assert "3 of them clean stops (unregistered" in started and levels[started] == "info"
    assert not [line for line in told if line.startswith(("broker flapping", "broker still flapping"))], told
    assert [line for line, level in levels.items() if level == "warn" and "broker-a" in line
            and not line.startswith("broker group ")] == []  # (the group's own clean-stop line aside)
    (settled,) = [line for line in told if line.startswith("broker settled: ")]
    assert ": gone (the last unregistered" in settled and "after restarting cleanly" in settled
    kinds = [e.kind for e in world.seen.events.recent]
    assert kinds.count("restarting") == 1 and kinds.count("settled") == 1 and "flapping" not in kinds


def test_a_broker_restarting_cleanly_that_then_crashes_three_times_is_flapping_once(tmp_path):
    """Summarised as restarting cleanly, its crashes are not told one by one: three within the window
    make it flapping, one warning then, the gauges moved from one to the other."""
    world = World(tmp_path)
    with capturedLogs() as events:
        flap(world, 0.5, every=5, kill=False)  # three clean stops: restarting cleanly
        assert len(world.seen.flaps.restarting()) == 1
        for _ in range(FLAP_DEPARTURES - 1):
            world.register()
            world.advance(5)
            world.routes.on_channel_destroy(A, "connection closed")
            world.advance(5)
        assert len(world.seen.flaps.restarting()) == 1 and world.seen.flaps.flapping() == []  # two crashes
        world.register()
        world.advance(5)
        world.routes.on_channel_destroy(A, "connection closed")  # the third
        world.advance(5)
    assert world.seen.flaps.restarting() == [] and len(world.seen.flaps.flapping()) == 1
    assert world.seen.flaps.started == 1 and world.seen.flaps.started_clean == 1
    told = lines(events)
    (warned,) = [line for line in told if line.startswith("broker flapping: ")]
    assert ("3 departures without unregistering in 0.3 min (the last closed), summarised as restarting cleanly for "
            "the 0.5 min before") in warned
    assert not [line for line in told if line.startswith("broker closed: ")]  # summarised meanwhile
    kinds = [e.kind for e in world.seen.events.recent]
    assert kinds.count("restarting") == 1 and kinds.count("flapping") == 1


def test_two_clean_stops_and_a_kill_are_restarting_cleanly(tmp_path):
    """Two rolling restarts of a master then a kill -9 (the drills' "one warning an on-call engineer
    may not agree with"): restarting cleanly, the kill told by its own line (NamesrvBrokerCrashed)."""
    world = World(tmp_path)
    with capturedLogs() as events:
        for kill in (False, False, True):
            world.register()
            world.advance(30)
            if kill:
                world.routes.on_channel_destroy(A, "connection closed")
            else:
                world.routes.unregister_broker("c1", A, "broker-a", 0)
            world.advance(30)
    assert world.seen.flaps.flapping() == [] and len(world.seen.flaps.restarting()) == 1
    (line,) = [line for line in lines(events) if line.startswith("broker restarting cleanly: ")]
    assert "3 departures in 2.0 min (the last closed), 2 of them clean stops" in line
    assert [line for line in lines(events) if line.startswith("broker closed: ")]  # the kill's own line


def test_a_rolling_restart_is_no_flap(tmp_path):
    """Each broker restarted once or twice within the window, two groups: nothing summarised."""
    world = World(tmp_path)
    with capturedLogs() as events:
        for addr, name in ((A, "broker-a"), (B, "broker-b")) * (FLAP_DEPARTURES - 1):
            world.register(addr, name)
            world.advance(30)
            world.routes.on_channel_destroy(addr, "connection closed")
            world.advance(30)
    assert world.seen.flaps.flapping() == [] and world.seen.flaps.started == 0
    assert not [line for line in lines(events) if "flapping" in line]


def test_departures_further_apart_than_the_window_are_no_flap():
    now = [0.0]
    told: list[tuple[str, str]] = []
    watch = FlapWatch(lambda: now[0], lambda: now[0], lambda level, text, fields: told.append((level, text)))
    info = {"cluster": "c1", "broker": "broker-a", "id": 0, "addr": A}
    for _ in range(10):
        assert watch.heard("registered", info) and watch.heard("expired", info)
        now[0] += FLAP_WINDOW_SECONDS / (FLAP_DEPARTURES - 1) + 1
        watch.tick()
    assert told == [] and watch.started == 0


def test_a_slaves_new_data_version_at_each_heartbeat_does_not_keep_it_flapping():
    """A "changed" event is summarised while the broker flaps, but is no flap: it settles."""
    now = [0.0]
    told: list[tuple[str, str]] = []
    watch = FlapWatch(lambda: now[0], lambda: now[0], lambda level, text, fields: told.append((level, text)))
    info = {"cluster": "c1", "broker": "broker-a", "id": 1, "addr": A}
    for _ in range(FLAP_DEPARTURES):
        watch.heard("registered", info)
        watch.heard("closed", info)
        now[0] += 5
    watch.heard("registered", info)
    for _ in range(int(FLAP_SETTLE_SECONDS / 30) + 2):
        now[0] += 30
        assert not watch.heard("changed", info) or watch.flap_of(info) is None
        watch.tick()
    assert watch.flap_of(info) is None
    assert told[-1][1].startswith("broker settled: ") and "registered" in told[-1][1]


def test_metrics_and_the_page_say_flapping_while_it_lasts(tmp_path):
    """The served wiring (NamesrvService on a fake clock): the gauge names the group while a member
    flaps, the counter counts it, /api/clusters lists it; gone once it settles."""
    from tests.web.test_metrics_and_api import Served, value

    served = Served(tmp_path)
    assert value(served.scrape(), "namesrv_broker_flapping_started_total") == 0  # served from the start
    for _ in range(FLAP_DEPARTURES):
        _, transport = served.broker()
        served.clock.advance(5)
        transport.loseConnection()
        served.clock.advance(5)
    served.broker()
    samples = served.scrape()
    assert value(samples, "namesrv_brokers_flapping", cluster="c1", broker="broker-a") == 1
    assert value(samples, "namesrv_broker_flapping_started_total") == 1
    (flapping,) = served.api.clusters()["outages"]["brokers_flapping"]
    assert (flapping["cluster"], flapping["broker_name"], flapping["addr"]) == ("c1", "broker-a", MASTER)
    assert flapping["departures"] == 0 and flapping["registrations"] == 1  # summarised since it started
    assert [e.kind for e in served.service.seen.events.recent].count("flapping") == 1
    served.clock.advance(125)  # the scan expires it (summarised): no heartbeat here
    served.clock.advance(FLAP_SETTLE_SECONDS)
    served.service.seen.flaps.tick()
    samples = served.scrape()
    assert ("namesrv_brokers_flapping", (("broker", "broker-a"), ("cluster", "c1"))) not in samples
    assert value(samples, "namesrv_broker_flapping_started_total") == 1
    assert served.api.clusters()["outages"]["brokers_flapping"] == []


def test_metrics_and_the_page_say_restarting_cleanly_apart_from_flapping(tmp_path):
    """A clean-stop restart loop through the served wiring: namesrv_brokers_restarting_cleanly names the
    group (NamesrvBrokerRestartingCleanly, info), namesrv_brokers_flapping does not (NamesrvBrokerFlapping,
    a warning), and /api/clusters lists it under brokers_restarting_cleanly."""
    from tests.web.test_metrics_and_api import Served, value

    served = Served(tmp_path)
    samples = served.scrape()
    assert value(samples, "namesrv_broker_restarting_cleanly_started_total") == 0  # served from the start
    for _ in range(FLAP_DEPARTURES):
        served.broker()
        served.clock.advance(5)
        served.service.state.routes.unregister_broker("c1", MASTER, "broker-a", 0)
        served.clock.advance(5)
    served.broker()
    samples = served.scrape()
    assert value(samples, "namesrv_brokers_restarting_cleanly", cluster="c1", broker="broker-a") == 1
    assert ("namesrv_brokers_flapping", (("broker", "broker-a"), ("cluster", "c1"))) not in samples
    assert value(samples, "namesrv_broker_flapping_started_total") == 0
    assert value(samples, "namesrv_broker_restarting_cleanly_started_total") == 1
    outages = served.api.clusters()["outages"]
    assert outages["brokers_flapping"] == []
    (restarting,) = outages["brokers_restarting_cleanly"]
    assert (restarting["cluster"], restarting["broker_name"], restarting["addr"]) == ("c1", "broker-a", MASTER)
    assert restarting["registrations"] == 1


def test_a_broker_flapping_before_a_restart_flaps_on_after_it(tmp_path, monkeypatch):
    """FlapWatch lived in memory: after a restart (here a kill -9, the events written by their
    timer) the broker started again at zero, the gauge and NamesrvBrokerFlapping gone, its next two
    departures told one by one, then a second "flapping" warning and event, its "since" the
    restart's.  Its flap is the broker's doing: restored from the page's events, it flaps on."""
    from tests.web import test_metrics_and_api as web
    from twisted_namesrv.event_log import EVENTS_SAVE_SECONDS

    first = web.Served(tmp_path)
    first.service.events.startService()
    for _ in range(FLAP_DEPARTURES):
        _, transport = first.broker()
        first.clock.advance(5)
        transport.loseConnection()
        first.clock.advance(5)
    (before,) = first.api.clusters()["outages"]["brokers_flapping"]
    first.clock.advance(EVENTS_SAVE_SECONDS)  # written: what a kill -9 now leaves
    monkeypatch.setattr(web, "START", first.clock.seconds() + 30)  # started again 30 s later
    with capturedLogs() as logged:
        again = web.Served(tmp_path)
    samples = again.scrape()
    assert web.value(samples, "namesrv_brokers_flapping", cluster="c1", broker="broker-a") == 1
    assert web.value(samples, "namesrv_broker_flapping_started_total") == 0  # none started in this run
    (after,) = again.api.clusters()["outages"]["brokers_flapping"]
    assert (after["addr"], after["since_ms"]) == (before["addr"], before["since_ms"]), (before, after)
    (line,) = [message_of(e) for e in logged if "flapping" in message_of(e)]
    assert line.startswith("broker still flapping: cluster=c1 broker=broker-a id=0 addr=" + MASTER), line
    assert "since before this restart (0.5 min)" in line, line
    restart = len(again.service.seen.events.recent)
    _, transport = again.broker()  # it goes on: summarised
    again.clock.advance(5)
    transport.loseConnection()
    again.clock.advance(5)
    assert [e.kind for e in list(again.service.seen.events.recent)[restart:]] == []
    assert dict(again.service.seen.flaps.flapping()[0].kinds) == {"registered": 1, "closed": 1}
    again.clock.advance(FLAP_SETTLE_SECONDS + 5)
    again.service.seen.flaps.tick()
    assert [e.kind for e in list(again.service.seen.events.recent)[restart:]] == ["settled"]
    assert again.api.clusters()["outages"]["brokers_flapping"] == []


def test_departures_before_a_restart_count_with_those_after_it_and_none_from_ahead_of_the_clock():
    """Two departures before the restart and one after, within the window: flapping.  Departures
    stamped after the wall clock's now (it stepped back since) count for nothing, and a flap that
    settled before the restart stays settled."""
    from twisted_namesrv.events import RouteEvent

    now = [10_000.0]
    told: list[tuple[str, str]] = []
    watch = FlapWatch(lambda: now[0], lambda: now[0] - 9_000, lambda level, text, fields: told.append((level, text)))
    info = {"cluster": "c1", "broker": "broker-a", "id": 0, "addr": A}
    other = {**info, "broker": "broker-b", "addr": B}
    before = [RouteEvent(1, 9_800.0, "closed", info, 1, 9_800.0),
              RouteEvent(2, 9_900.0, "expired", info, 1, 9_900.0),
              RouteEvent(3, 10_050.0, "closed", other, 1, 10_050.0),
              RouteEvent(4, 10_060.0, "closed", other, 1, 10_060.0),
              RouteEvent(5, 9_000.0, "flapping", {**other, "reason": "..."}, 1, 9_000.0),
              RouteEvent(6, 9_100.0, "settled", {**other, "reason": "..."}, 1, 9_100.0)]
    watch.restore(before)
    assert watch.flapping() == [] and told == []
    assert watch.heard("closed", other)  # its two "departures" from ahead of the clock not counted
    assert watch.flap_of(other) is None
    assert watch.heard("closed", info)  # the third in 10 minutes
    assert [f.info["broker"] for f in watch.flapping()] == ["broker-a"] and watch.started == 1
    assert told[-1][1].startswith("broker flapping: cluster=c1 broker=broker-a")
    assert "3 departures in 3.3 min" in told[-1][1]


def test_a_restored_flap_whose_broker_never_comes_back_settles_saying_so():
    from twisted_namesrv.events import RouteEvent

    now = [10_000.0]
    told: list[tuple[str, str]] = []
    watch = FlapWatch(lambda: now[0], lambda: now[0], lambda level, text, fields: told.append((level, text)))
    info = {"cluster": "c1", "broker": "broker-a", "id": 0, "addr": A, "reason": "3 departures in 0.4 min"}
    watch.restore([RouteEvent(1, 9_950.0, "flapping", info, 1, 9_950.0)])
    assert [f.since for f in watch.flapping()] == [9_950.0] and "reason" not in watch.flapping()[0].info
    now[0] += FLAP_SETTLE_SECONDS
    watch.tick()
    assert watch.flapping() == []
    assert told[-1][1].startswith("broker settled: cluster=c1 broker=broker-a id=0 addr=10.0.0.1:10911: not back "
                                  "since the restart (the last restart 5.0 min ago)"), told


def test_a_broker_restarting_cleanly_before_a_restart_restarts_on_and_one_that_began_so_flaps_since_then():
    from twisted_namesrv.events import RouteEvent

    now = [10_000.0]
    told: list[tuple[str, str]] = []
    watch = FlapWatch(lambda: now[0], lambda: now[0], lambda level, text, fields: told.append((level, text)))
    info = {"cluster": "c1", "broker": "broker-a", "id": 0, "addr": A, "reason": "..."}
    other = {**info, "broker": "broker-b", "addr": B}
    watch.restore([RouteEvent(1, 9_900.0, "restarting", info, 1, 9_900.0),
                   RouteEvent(2, 9_800.0, "restarting", other, 1, 9_800.0),
                   RouteEvent(3, 9_950.0, "flapping", other, 1, 9_950.0)])
    assert [f.info["broker"] for f in watch.restarting()] == ["broker-a"]
    assert [(f.info["broker"], f.since) for f in watch.flapping()] == [("broker-b", 9_800.0)]
    assert sorted(told) == sorted([
        ("info", "broker still restarting cleanly: cluster=c1 broker=broker-a id=0 addr=10.0.0.1:10911: restarting "
                 "cleanly since before this restart (1.7 min): its registrations and departures are summarised here "
                 "until it settles (5 min without one)"),
        ("warn", "broker still flapping: cluster=c1 broker=broker-b id=0 addr=10.0.0.2:10911: flapping since before "
                 "this restart (3.3 min): its registrations and departures are summarised here until it settles "
                 "(5 min without one)")])
