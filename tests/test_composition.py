"""The composition root (service.build): every owner constructed once, every subscription wired
there in a stated order, and nothing a second owner of anything."""

from __future__ import annotations

from itertools import count

from twisted.internet import task

from twisted_namesrv import budget
from twisted_namesrv import service as service_module
from twisted_namesrv.audit import Trail
from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig, encode_register_body
from twisted_namesrv.bodies.route import DataVersion
from twisted_namesrv.remoting import RequestCode
from twisted_namesrv.schema import SERVER_SCHEMA
from twisted_namesrv.service import NamesrvService, build
from twisted_namesrv.state.config import NamesrvConfig
from twisted_namesrv.state.costly import KeepTimers

from .test_answer_cache import connect, send


def config(tmp_path, **values) -> NamesrvConfig:
    return NamesrvConfig({"compatVersion": "4.9.8", "kvConfigPath": str(tmp_path / "kv.json"),
                          "configStorePath": str(tmp_path / "ns.properties"), **values}, schema=SERVER_SCHEMA)


def test_every_subscription_is_wired_by_the_root_in_its_stated_order(tmp_path) -> None:
    owners = build(config(tmp_path), task.Clock())
    state, seen = owners.state, owners.seen
    answers = state.answers
    assert state.routes.subscribers == [answers.changed]
    told, *others = state.routes._listeners
    # the log line and the page's event, unless the broker flaps (flapping.py)
    assert told.__qualname__ == "told_unless_flapping.<locals>.told"
    held = [cell.cell_contents for cell in told.__closure__]
    assert seen.flaps in held and seen.events in held and seen.flaps.now_flapping in held
    assert others == [seen.metrics.route_event, seen.departed.route_event, state.topology.heard]
    assert seen.health.topology is state.topology and seen.health.routes is state.routes
    assert state.routes._lost_listeners == [seen.lost.departed]
    assert state.kv._subscribers == [answers.kv_changed] and state.config._subscribers == [answers.config_changed]


def test_two_servers_share_no_owner(tmp_path) -> None:
    """Owners are the root's, not module globals or constructor defaults: two servers in one
    process (the differential tests run two) hold nothing in common."""
    one, two = build(config(tmp_path / "1"), task.Clock()), build(config(tmp_path / "2"), task.Clock())
    for name in ("routes", "kv", "answers", "refusals", "budget", "topology"):
        assert getattr(one.state, name) is not getattr(two.state, name), name
    for name in ("metrics", "events", "departed", "lost", "audit", "health", "flaps"):
        assert getattr(one.seen, name) is not getattr(two.seen, name), name


def test_the_page_s_events_and_the_topology_count_peers_by_one_table_of_hosts(tmp_path) -> None:
    """The host a peer counts under is worked out once for the server: the page's events and the
    remembered topology read the one table the root made (two copies could come to disagree), and
    a host one of them worked out is the other's without working it out again."""
    owners = build(config(tmp_path), task.Clock())
    topology, events = owners.state.topology, owners.seen.events
    assert topology.hosts is events.hosts
    assert events.feed_event("audit", {}, "2001:db8::7:40000")  # listed: its line written
    assert topology.hosts.peers == {"2001:db8::7": "2001:db8::/64"}
    topology.origin = "2001:db8::7:40001"
    topology.present("c1", "broker-a", 0, "10.0.0.1:10911")
    assert topology.brought == {"2001:db8::/64": 1} and len(topology.hosts.peers) == 1
    assert build(config(tmp_path / "2"), task.Clock()).state.topology.hosts is not topology.hosts


def test_a_subscriber_added_after_the_cache_leaves_the_cache_subscribed(tmp_path) -> None:
    """With one subscriber slot a second subscriber silently unsubscribed the answer cache, which
    then served a route that no longer existed; now both hear the change, the cache first."""
    service = NamesrvService.from_config(config(tmp_path), reactor=task.Clock())
    protocol, transport = connect(service.factory)
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, 1), {n: TopicConfig(n) for n in ("T0", "T1")}),
                                False, False)
    send(protocol, RequestCode.REGISTER_BROKER, {"brokerName": "a", "brokerAddr": "127.0.0.1:10911",
                                                 "clusterName": "c", "haServerAddr": "h", "brokerId": "0"}, body)
    send(protocol, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T0"})
    answers, routes = service.state.answers, service.state.routes
    assert "T0" in answers.routes
    heard = []
    routes.subscribe(lambda change: heard.append(sorted(change.topics)))
    routes.delete_topic("T0")
    assert "T0" not in answers.routes and heard == [["T0"]]


def test_the_descriptor_budget_and_the_audit_trail_are_the_roots(tmp_path, monkeypatch) -> None:
    """The descriptor limit is read once by ``load`` and the FdBudget constructed by ``build``: the
    service's constructor, documented as doing no I/O, read ``ulimit -n`` and made its own budget.
    The embedded controller's audit events go into the root's one AuditTrail, not counters of its own."""
    monkeypatch.setattr(service_module, "open_file_limit", lambda: 4096)
    rooms: list[int] = []
    monkeypatch.setattr(service_module, "make_table_room", rooms.append)
    loaded = service_module.load(config(tmp_path, controllerStorePath=str(tmp_path / "ctl"), maxConnections=3000),
                                 task.Clock())
    assert loaded.owners.fds.limit == 4096 and loaded.owners.fds.reserve == 64
    # the descriptor table holds every connection from the start, never grown by an accept (budget.py)
    assert rooms == [3000 + 64 + budget.ROOM_SLACK]

    def no_io() -> None:
        raise AssertionError("the service read the descriptor limit itself")

    monkeypatch.setattr(service_module, "open_file_limit", no_io)
    monkeypatch.setattr(budget, "open_file_limit", no_io)
    server = NamesrvService(loaded.state.config, loaded, task.Clock(), controller_port=0)
    assert server.fds is loaded.owners.fds and server.factory.fds is server.fds
    assert build(config(tmp_path / "t"), task.Clock()).fds.limit is None  # tests: no limit unless given
    (trail,) = server.controller.dispatcher.observers
    assert isinstance(trail, Trail) and trail.into is server.seen.audit


def test_the_timers_given_to_the_root_keep_the_costly_values(tmp_path) -> None:
    """``build``'s ``keep_timers`` are what the health behind /readyz and /metrics is kept by
    (state/costly.py has no clock of its own): each making costs a (fake) CPU second, so it is kept
    until the (fake) monotonic clock moves past four."""
    now = [0.0]
    cpu = count(step=1.0)
    owners = build(config(tmp_path), task.Clock(),
                   keep_timers=KeepTimers(clock=lambda: now[0], cost=lambda: float(next(cpu))))
    health = owners.seen.health
    first = health.health()
    now[0] += 3.9
    assert health.health() is first
    now[0] += 0.2
    assert health.health() is not first
