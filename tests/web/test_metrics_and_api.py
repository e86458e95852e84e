"""/metrics and /api/... as the state changes: a NamesrvService on a task.Clock, fed over
in-memory transports, scraped and queried without a network."""

from __future__ import annotations

import json
import struct

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from twisted.internet import address, defer, task
from twisted.internet.testing import StringTransportWithDisconnection
from twisted.logger import capturedLogs, formatEvent

from tests.test_housekeeping import MASTER, OTHER, START, config, register, register_request
from twisted_namesrv import budget, departures
from twisted_namesrv.departures import DEPARTED_KEEP_SECONDS
from twisted_namesrv.escapes import CONTROLS
from twisted_namesrv.remoting import RemotingCommand, RequestCode
from twisted_namesrv.remoting.codes import V5_3_3
from twisted_namesrv.service import NamesrvService
from twisted_namesrv.web.api import StatusApi
from twisted_namesrv.web.collector import registry


class Served:
    """The service's own wiring (route events -> metrics) on a fake clock."""

    def __init__(self, tmp_path, **values) -> None:
        self.clock = task.Clock()
        self.clock.advance(START)
        values.setdefault("metricsPort", 9877)  # never listened on: the service is not started
        self.service = NamesrvService.from_config(config(tmp_path, **values), reactor=self.clock)
        self.service.housekeeping.startService()
        seen = self.service.seen
        self.registry = registry(self.service.state, self.service.factory, seen, seen.health)
        self.api = StatusApi(self.service.state, self.service.factory, seen, seen.health)
        self.ports = iter(range(40000, 41000))

    def connect(self, host: str = "127.0.0.1"):
        """A connection from ``host`` (loopback's count against no host's bounds)."""
        peer = address.IPv4Address("TCP", host, next(self.ports))
        proto = self.service.factory.buildProtocol(peer)
        transport = StringTransportWithDisconnection(peerAddress=peer)
        transport.protocol = proto
        proto.makeConnection(transport)
        return proto, transport

    def broker(self, *args, **kwargs):
        """A broker registered over its own connection (``register``'s arguments)."""
        proto, transport = self.connect()
        register(proto, transport, *args, **kwargs)
        return proto, transport

    def call(self, code: int, ext: dict[str, str] | None = None, opaque: int = 1) -> None:
        proto, transport = self.connect()
        proto.dataReceived(RemotingCommand.request(code, ext, opaque=opaque, version=V5_3_3).encode())
        transport.loseConnection()

    def scrape(self) -> dict[tuple[str, tuple], float]:
        text = generate_latest(self.registry).decode()
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict, metric: str, **labels: str) -> float:
    return samples.get((metric, tuple(sorted(labels.items()))), 0.0)


def test_metrics_follow_requests_brokers_rejections_and_expiry(tmp_path):
    served = Served(tmp_path)
    broker, broker_transport = served.connect()
    register(broker, broker_transport)
    lookups, lookup_transport = served.connect()
    for opaque in (1, 2, 3):  # the first is decoded, the others answered from memory
        lookups.dataReceived(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"},
                                                     opaque=opaque, version=V5_3_3).encode())
    served.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "missing"})
    served.call(RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": "v"})
    for unknown in (9999, 12345, -7):  # codes nobody handles share one series
        served.call(unknown)
    garbage, _ = served.connect()
    garbage.dataReceived(struct.pack(">i", -5))

    samples = served.scrape()
    route = {"code": "105", "name": "GET_ROUTEINFO_BY_TOPIC"}
    assert value(samples, "namesrv_requests_total", **route, response_code="0") == 3
    assert value(samples, "namesrv_requests_total", **route, response_code="17") == 1
    assert value(samples, "namesrv_requests_total", code="103", name="REGISTER_BROKER", response_code="0") == 1
    assert value(samples, "namesrv_requests_total", code="other", name="other", response_code="3") == 3
    assert not any(name == "namesrv_requests_total" and ("code", "9999") in labels for name, labels in samples)
    assert value(samples, "namesrv_request_duration_seconds_count", **route) == 4
    assert value(samples, "namesrv_request_duration_seconds_bucket", **route, le="+Inf") == 4
    assert value(samples, "namesrv_rejected_total", reason="frame_length") == 1
    assert value(samples, "namesrv_broker_events_total", event="registered") == 1
    assert value(samples, "namesrv_brokers_live") == 1 and value(samples, "namesrv_topics") == 2
    assert value(samples, "namesrv_topic_queue_entries") == 2
    assert value(samples, "namesrv_kv_entries") == 1
    assert value(samples, "namesrv_connections") == 2  # the broker and the lookups stay open
    assert value(samples, "namesrv_received_bytes_total") > 0 < value(samples, "namesrv_sent_bytes_total")

    served.clock.advance(130)  # past the broker's 120 s heartbeat timeout, one scan later
    samples = served.scrape()
    assert value(samples, "namesrv_broker_events_total", event="expired") == 1
    assert value(samples, "namesrv_brokers_live") == 0 and value(samples, "namesrv_topics") == 0
    assert value(samples, "namesrv_topic_queue_entries") == 0


def test_api_shows_brokers_topics_routes_kv_and_events(tmp_path):
    served = Served(tmp_path)
    broker, broker_transport = served.connect()
    register(broker, broker_transport)
    served.clock.advance(7)

    clusters = served.api.clusters()
    assert clusters["now_ms"] == (START + 7) * 1000
    (cluster,) = clusters["clusters"]
    (group,) = cluster["broker_groups"]
    (member,) = group["members"]
    assert (cluster["cluster"], group["broker_name"]) == ("c1", "broker-a")
    assert member["addr"] == MASTER and member["role"] == "master" and member["version"] == "V5_3_3"
    assert member["last_update_ms"] == START * 1000 and member["topics"] == 2 and member["confirmed"]
    assert group["queues"] == {"topics": 2, "writable": 2}

    served.call(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
    assert served.api.clusters()["clusters"][0]["broker_groups"][0]["queues"] == {"topics": 2, "writable": 0}

    assert [t["topic"] for t in served.api.topics("t").result["topics"]] == ["T1", "T2"]
    assert served.api.topics("t2").result == {"query": "t2", "matches": 1,
                                       "topics": [{"topic": "T2", "broker_names": ["broker-a"]}]}
    # searched apart (in a thread: apart.py), the first of them by name without sorting them all
    held: list = []
    state = served.service.state
    state.build_apart, at_once = (lambda key, begin: held.append(begin()) or defer.Deferred()), state.build_apart
    pending = served.api.topics("t", limit=1)
    assert not pending.called and held[0]() == (2, ["T1"])
    state.build_apart = at_once
    # at most TOPIC_SEARCH_MAX answered, whatever the limit: each is looked up and encoded in the
    # reactor's thread (limit=999999999999 at a million topics held every lookup for seconds)
    from twisted_namesrv.web import api as api_module

    api_module.TOPIC_SEARCH_MAX, before = 1, api_module.TOPIC_SEARCH_MAX
    try:
        found = served.api.topics("t", limit=999_999_999_999).result
    finally:
        api_module.TOPIC_SEARCH_MAX = before
    assert found["matches"] == 2 and [t["topic"] for t in found["topics"]] == ["T1"]
    route = served.api.route("T1")["route"]
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": MASTER}
    assert served.api.route("missing") is None

    served.call(RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": "v"})
    assert served.api.kv() == {"namespaces": {"ns": {"k": "v"}}}

    broker_transport.loseConnection()
    served.clock.advance(0)  # its brokers leave at the reactor's next turn
    events = served.api.events()["events"]
    assert [(e["seq"], e["kind"], e.get("addr"), e.get("operation")) for e in events] == [
        (1, "registered", MASTER, None), (2, "audit", None, "wipe_write_perm"), (3, "audit", None, "put_kv_config"),
        (4, "closed", MASTER, None)]  # route events and the audit trail, in one sequence
    assert events[1]["target"] == {"brokerName": "broker-a", "wipeTopicCount": "2"} and events[1]["result"] == "ok"
    assert served.api.events(since=1)["events"] == events[1:]
    assert served.api.overview()["brokers_live"] == 0


def test_without_a_metrics_port_requests_are_not_counted(tmp_path):
    served = Served(tmp_path, metricsPort=0)
    served.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "missing"})
    assert served.service.factory.metrics.requests_by_code()[0] == {}


def test_departed_brokers_stay_listed_with_why_and_when_then_go(tmp_path):
    served = Served(tmp_path)
    served.broker()
    _, second_transport = served.broker(OTHER, "broker-b")
    served.clock.advance(30)
    member = served.api.clusters()["clusters"][0]["broker_groups"][0]["members"][0]
    assert member["live"] and member["expires_in_ms"] == 90_000 and member["heartbeat_timeout_ms"] == 120_000

    second_transport.loseConnection()
    served.clock.advance(0)  # its brokers leave at the reactor's next turn
    (group_a, group_b) = served.api.clusters()["clusters"][0]["broker_groups"]
    assert group_a["members"][0]["live"] and "departed" not in group_a["members"][0]
    assert group_b["broker_name"] == "broker-b" and group_b["zone"] is None  # the group left brokerAddrTable
    assert group_b["members"] == [{"addr": OTHER, "id": 0, "role": "master", "live": False, "writes": False,
                                   "perm": "gone", "departed": {"kind": "closed", "crash": True,
                                                                "reason": "connection closed",
                                                                "ts_ms": (START + 30) * 1000}}]
    assert served.api.overview()["brokers_departed"] == 1

    served.clock.advance(DEPARTED_KEEP_SECONDS + 1)  # broker-b's departure is forgotten; broker-a expired meanwhile
    (group_a, group_b) = served.api.clusters()["clusters"][0]["broker_groups"]
    assert group_a["members"][0]["departed"]["reason"].startswith("expired: no heartbeat for ")
    assert served.api.overview()["brokers_departed"] == 1
    assert group_b["absent"]["how"] == "closed"  # the group is still expected (state/topology.py)
    assert [(m["addr"], m["perm"], m["expected"]) for m in group_b["members"]] == [(OTHER, "absent", True)]

    served.broker()  # back: listed live again, not as departed
    assert served.api.clusters()["clusters"][0]["broker_groups"][0]["members"][0]["live"]
    assert served.api.overview()["brokers_departed"] == 0


def test_departed_brokers_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(departures, "DEPARTED_LIMIT", 3)
    departed = departures.DepartedBrokers(task.Clock().seconds)
    for port in range(5):
        departed.route_event("closed", {"cluster": "c1", "broker": f"b{port}", "id": 0, "addr": f"h:{port}"})
    assert [e.info["broker"] for e in departed.brokers()] == ["b2", "b3", "b4"]


def test_a_brokers_changed_events_fold_into_one(tmp_path):
    served = Served(tmp_path)
    broker, transport = served.broker()
    other, other_transport = served.broker(OTHER, "broker-b")
    for counter in (2, 3, 4):
        served.clock.advance(30)
        register(broker, transport, version=(1, counter))
    register(other, other_transport, OTHER, "broker-b", version=(1, 2))
    events = served.api.events()["events"]
    assert [(e["kind"], e["broker"], e["count"]) for e in events] == [
        ("registered", "broker-a", 1), ("registered", "broker-b", 1), ("changed", "broker-a", 3),
        ("changed", "broker-b", 1)]
    folded = events[2]
    assert (folded["seq"], folded["first_ts_ms"], folded["ts_ms"]) == (5, (START + 30) * 1000, (START + 90) * 1000)
    assert served.api.events(since=4)["events"] == events[2:]  # a folded event is new again
    assert value(served.scrape(), "namesrv_broker_events_total", event="changed") == 4


def test_an_idle_close_is_reported_as_idle(tmp_path):
    served = Served(tmp_path)
    broker, transport = served.broker()
    served.clock.advance(60)
    register(broker, transport, version=(1, 2))  # the heartbeat keeps it live; then silence
    with capturedLogs() as logged:
        served.clock.advance(120)
    assert not transport.connected
    (event,) = [e for e in served.api.events()["events"] if e["kind"] not in ("registered", "changed")]
    assert (event["kind"], event["reason"]) == ("idle", "idle: no request for 120 s")
    samples = served.scrape()
    assert value(samples, "namesrv_broker_events_total", event="idle") == 1
    assert value(samples, "namesrv_broker_events_total", event="closed") == 0
    assert value(samples, "namesrv_rejected_total", reason="idle") == 1
    assert "broker idle: cluster=c1 broker=broker-a id=0 addr=10.0.0.1:10911 reason=idle: no request for 120 s" in [
        formatEvent(e) for e in logged]
    departed = served.api.clusters()["clusters"][0]["broker_groups"][0]["members"][0]["departed"]
    assert departed == {"kind": "idle", "crash": True, "reason": "idle: no request for 120 s",
                        "ts_ms": (START + 180) * 1000}


def raw_register(served: Served, cluster: str, name: str, addr: str) -> None:
    """A REGISTER_BROKER whose JSON header escapes what it holds (``\\ud800``: a lone surrogate, which
    no encoder of ours writes), as any peer may send it, unsigned without ACL."""
    request = register_request(addr, name)
    header = json.dumps({"code": int(RequestCode.REGISTER_BROKER), "extFields": {**request.ext, "clusterName": cluster},
                         "flag": 0, "language": "JAVA", "opaque": 9, "serializeTypeCurrentRPC": "JSON",
                         "version": V5_3_3}).encode()
    proto, transport = served.connect()
    proto.dataReceived(struct.pack(">ii", 4 + len(header) + len(request.body), len(header)) + header + request.body)
    assert b'"code":0' in transport.value()


def test_label_values_hold_no_control_character(tmp_path):
    """Cluster and broker names are labels, and any peer registers them: an ESC or CR in one reached the
    terminal of whoever ran ``curl /metrics`` raw (the text format escapes only \\, " and newlines), and a
    lone surrogate made every scrape fail (500) while that broker was registered. Now each is the
    visible escape the log and the terminal show (escapes.py)."""
    served = Served(tmp_path)
    raw_register(served, "c\x1b[2J\r\u2028", "b\u202e-a", MASTER)
    raw_register(served, "sur\ud800", "b-b", OTHER)
    text = generate_latest(served.registry).decode("utf-8")
    assert not CONTROLS.search(text.replace("\n", ""))
    samples = served.scrape()
    assert value(samples, "namesrv_broker_group_master_live", cluster="c\\x1b[2J\\r\\u2028", broker="b\\u202e-a") == 1
    assert value(samples, "namesrv_broker_group_master_live", cluster="sur\\ud800", broker="b-b") == 1


def test_series_per_broker_and_group_are_made_out_of_the_reactors_turn(tmp_path, monkeypatch):
    """/metrics is public and peers make most of its series (three a broker, two a broker group, one
    a cluster; labels up to maxNameLength): made (and searched for control characters) in the
    reactor's turn, a scrape at the limits' defaults (20,000 groups of 5 brokers: 360,178 series)
    held every request 2.1-2.8 s, 6.8 M Python calls.  Now the reactor's turn reads what they say
    (``read``) and a thread makes them (``made``): what the reactor does per scrape no longer
    counts series, and the text is what it was, ordered by broker name and id."""
    from prometheus_client import metrics_core

    from twisted_namesrv.web import collector
    from twisted_namesrv.web.site import MetricsPage

    made = {"series": 0, "label_searches": 0}

    def counted(what, real):
        def call(*args, **kwargs):
            made[what] += 1
            return real(*args, **kwargs)
        return call
    monkeypatch.setattr(metrics_core.GaugeMetricFamily, "add_metric",
                        counted("series", metrics_core.GaugeMetricFamily.add_metric))
    monkeypatch.setattr(collector, "has_controls", counted("label_searches", collector.has_controls))

    def reactor_part(brokers: int) -> dict[str, int]:
        served = Served(tmp_path / str(brokers))
        for i in reversed(range(brokers)):  # registered in no order
            served.clock.advance(0)  # a turn of its own: past 16 a turn, a registration is answered in the next
            raw_register(served, f"c{i % 3}\x1b", f"b-{i:02}", f"10.0.0.{i}:10911")
        seen = served.service.seen
        page = MetricsPage(served.service.state, served.service.factory, seen, seen.health)
        made.update(series=0, label_searches=0)
        make = page._begin()  # the reactor's turn
        counts = dict(made)
        text = "".join(f"{line}\n" for line in make().decode().splitlines()  # the thread's
                       if line.startswith("namesrv_broker_heartbeat_age_seconds"))
        assert [line.split('broker="')[1].split('"')[0] for line in text.splitlines()] == [
            f"b-{i:02}" for i in range(brokers)]
        assert 'cluster="c0\\\\x1b"' in text
        assert text == "".join(f"{line}\n" for line in generate_latest(served.registry).decode().splitlines()
                               if line.startswith("namesrv_broker_heartbeat_age_seconds"))
        return counts

    few, many = reactor_part(2), reactor_part(40)
    assert many == few, (few, many)  # before: 37 series made in the turn with 2 brokers, 228 with 40


def test_an_api_document_that_fails_to_be_made_is_answered_500_not_left_open():
    """/api/topics is made in a thread (apart.py): a build that raised was logged and the request
    left open, the page's fetch and the connection (one of the port's few) held until the peer
    gave up."""
    from twisted.web.test.requesthelper import DummyRequest

    from twisted_namesrv.web.site import ApiResource

    class Failing:
        def topics(self, query, limit):
            return defer.fail(MemoryError("a build that raised"))

    request = DummyRequest([b"topics"])
    with capturedLogs() as logged:
        ApiResource(Failing()).render_GET(request)
    assert request.finished and request.responseCode == 500
    assert json.loads(b"".join(request.written)) == {"error": "the document could not be made: MemoryError"}
    assert any("/api/topics failed" in formatEvent(event) for event in logged)


def test_an_api_document_the_memory_budget_has_no_room_to_wait_for_is_a_503_refusal():
    """An ask waiting for a build takes room in the memory budget (apart.py); one without room is
    answered 503 with Retry-After, logged and counted as a refusal (memory_budget), not a 500."""
    from twisted.web.test.requesthelper import DummyRequest

    from twisted_namesrv.apart import NoRoom
    from twisted_namesrv.refusals import Refusals
    from twisted_namesrv.web.site import ApiResource

    class Full:
        def topics(self, query, limit):
            return defer.fail(NoRoom("no room in receiveMemoryBudget"))

    request, refusals = DummyRequest([b"topics"]), Refusals()
    ApiResource(Full(), refusals=refusals).render_GET(request)
    assert request.finished and request.responseCode == 503
    assert request.responseHeaders.getRawHeaders(b"retry-after") == [b"1"]
    assert "receiveMemoryBudget" in json.loads(b"".join(request.written))["error"]
    assert refusals.counts["http", "memory_budget"] == 1


def test_costly_health_and_clusters_are_made_again_only_after_four_times_their_cost(tmp_path):
    """What walks every broker group in the reactor's turn (the groups' health behind /readyz, public
    on every bind, /metrics and the page; the /api/clusters document, which the page asks for every
    3 s) is made again only once four times what it cost has passed: at 20,000 groups (any peer
    registers them without ACL) a loop of /readyz left a lookup client 4 answers in 10 s, its longest
    wait 4.5 s, and two loops of /api/clusters 109 (6.3 s); now 211 (0.8 s) and 12,768 (p99 6 ms).
    What is cheap (a cluster of a few thousand groups) is made for every ask, as before."""
    served = Served(tmp_path)
    broker, broker_transport = served.connect()
    register(broker, broker_transport)
    now, cpu = [0.0], [0.0]

    def costing(kept, seconds: float):
        make = kept.make

        def made():
            now[0] += seconds
            cpu[0] += seconds
            return make()
        kept.make, kept.clock, kept.cost = made, lambda: now[0], lambda: cpu[0]

    health, clusters = served.service.seen.health.kept, served.api._clusters_json
    costing(health, 0.5)
    costing(clusters, 1.0)
    document = served.api.clusters_json()
    assert json.loads(document)["clusters"][0]["broker_groups"][0]["queues"] == {"topics": 2, "writable": 2}
    for _ in range(100):
        assert served.api.clusters_json() is document
        served.api.overview()
        served.service.readiness_details()
        now[0] += 0.01
    assert (health.made, clusters.made) == (1, 1)
    served.call(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
    now[0] += 4 * 1.5  # four times its cost, the health's making (0.5 s) within its own
    changed = json.loads(served.api.clusters_json())
    assert changed["clusters"][0]["broker_groups"][0]["queues"] == {"topics": 2, "writable": 0}
    assert (health.made, clusters.made) == (2, 2)


def test_the_memory_limit_is_served_so_an_oom_kill_can_be_seen_coming(tmp_path, monkeypatch):
    """In a 128 MiB container, 150k topics took the server from 43 MB to 122 MB of RSS and the kernel
    killed it: nothing it served said how near the limit it was (only process_resident_memory_bytes,
    with nothing to compare it with). The cgroup's memory.max is served, read at each scrape."""
    memory_max = tmp_path / "cgroup" / "memory.max"  # a container's own cgroup namespace: its limit at the top
    memory_max.parent.mkdir()
    memory_max.write_text("134217728\n")
    (tmp_path / "self-cgroup").write_text("0::/\n")
    monkeypatch.setattr(budget, "CGROUP_ROOT", memory_max.parent)
    monkeypatch.setattr(budget, "PROC_SELF_CGROUP", tmp_path / "self-cgroup")
    served = Served(tmp_path)
    assert value(served.scrape(), "namesrv_memory_limit_bytes") == min(134217728, budget.machine_limit() or 0)
    memory_max.write_text("max\n")  # no limit: the machine's memory, or an rlimit
    assert value(served.scrape(), "namesrv_memory_limit_bytes") == budget.machine_limit() > 134217728


def test_a_wipe_walked_over_many_turns_reads_as_lookups_do_at_every_scrape_in_between(tmp_path):
    """WIPE_WRITE_PERM_OF_BROKER on a group of 12k topics is written in over many reactor turns
    (settling.PermChanged): a scrape in between says what lookups read then. One group of two wiped: the
    cluster still writes (no false NamesrvClusterNothingWritable); the other wiped too: nothing writable
    from the commit on (the outage not missed until the walk ends); the page's topic counts exact."""
    from tests.state.test_routes import body, topic
    from twisted_namesrv.state.registration import SYNC_BROKER_MEMBER_GROUP_PREFIX
    from twisted_namesrv.state.routes import RegisterRequest

    served = Served(tmp_path)
    routes = served.service.state.routes
    routes.write_at_once = 0
    for name, addr in (("g0", "10.0.0.1:10911"), ("g1", "10.0.1.1:10911")):
        configs = [topic(f"{name}-T{i}") for i in range(3 * 4096)] + [topic(SYNC_BROKER_MEMBER_GROUP_PREFIX + name)]
        routes.register_broker(RegisterRequest("c1", addr, name, 0, None, body(*configs), channel=addr))
    while routes.settling:
        served.clock.advance(0.01)

    def read() -> tuple[float, float, dict[str, dict[str, int]]]:
        samples = served.scrape()
        (cluster,) = served.api.clusters()["clusters"]
        return (value(samples, "namesrv_cluster_writable_broker_groups", cluster="c1"),
                value(samples, "namesrv_clusters_without_writable_queues"),
                {g["broker_name"]: g["queues"] for g in cluster["broker_groups"]})

    assert read() == (2, 0, {"g0": {"topics": 12289, "writable": 12289}, "g1": {"topics": 12289, "writable": 12289}})
    routes.wipe_write_perm_of_broker("g0")
    steps = routes.settle_steps()  # the walk a step at a time (the fake clock's one turn would write it all)
    scrapes = 0
    while routes.settling:
        assert read() == (1, 0, {"g0": {"topics": 12288, "writable": 0}, "g1": {"topics": 12289, "writable": 12289}})
        next(steps, None)
        scrapes += 1
    assert scrapes > 2  # read between the walk's steps
    routes.wipe_write_perm_of_broker("g1")
    steps = routes.settle_steps()
    assert routes.settling
    while routes.settling:
        assert read() == (0, 1, {"g0": {"topics": 12288, "writable": 0}, "g1": {"topics": 12288, "writable": 0}})
        next(steps, None)
    routes.add_write_perm_of_broker("g0")
    steps = routes.settle_steps()
    while routes.settling:
        assert read() == (1, 0, {"g0": {"topics": 12289, "writable": 12289}, "g1": {"topics": 12288, "writable": 0}})
        next(steps, None)
