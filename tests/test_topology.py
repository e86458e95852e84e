"""Issue 46 items 1 and 2: a whole cluster stopped cleanly is an outage that names its cluster and
groups, for as long as it is down, across restarts, until an operator retires it; a restart
without a route snapshot says "N of M known broker groups back" and is not ready until they are
(or it waited); a route snapshot past routeSnapshotMaxAge is not served."""

from __future__ import annotations

import json
import os
import sys
import time
import tracemalloc

import pytest
from twisted.logger import capturedLogs, formatEvent

from tests.test_audit import ask
from tests.test_housekeeping import MASTER, OTHER, register
from tests.web.test_metrics_and_api import Served, value
from twisted_namesrv.departures import DEPARTED_KEEP_SECONDS
from twisted_namesrv.remoting import RequestCode, ResponseCode
from twisted_namesrv.state.hosts import KeptHosts
from twisted_namesrv.state.topology import GROUPS_PER_HOST, Topology, TopologyFileError, decode, encode

B1, B2 = "10.0.2.1:10911", "10.0.2.2:10911"


def clusters_ab(served: Served):
    """Cluster c1 (broker-a) and cluster cB (broker-b1, broker-b2), each broker on its own connection."""
    connections = {}
    for addr, name, cluster in ((MASTER, "broker-a", "c1"), (B1, "broker-b1", "cB"), (B2, "broker-b2", "cB")):
        proto, transport = served.connect()
        register(proto, transport, addr, name, extra={"clusterName": cluster})
        connections[name] = (proto, transport)
    return connections


def stop_cleanly(served: Served, addr: str, name: str, cluster: str) -> None:
    """mqshutdown broker: the broker unregisters, then closes its connection."""
    answer, _ = ask(served, RequestCode.UNREGISTER_BROKER, {"clusterName": cluster, "brokerAddr": addr,
                                                            "brokerName": name, "brokerId": "0"}, account=None)
    assert answer.code == ResponseCode.SUCCESS


def retire(served: Served, cluster: str, broker: str | None = None, broker_id: str | None = None):
    ext = {"clusterName": cluster, **({"brokerName": broker} if broker else {}),
           **({"brokerId": broker_id} if broker_id else {})}
    return ask(served, RequestCode.RETIRE_BROKER_GROUP, ext, account=None)


@pytest.mark.parametrize("profile", ["5.3.3", "4.9.8"])
def test_a_whole_cluster_stopped_cleanly_is_an_outage_naming_it_until_it_is_back(tmp_path, profile):
    """The issue's drill: every broker of cB unregistered, and after 10 minutes 0 alerts, no outage,
    clusters_without_writable_queues 0 and a green page.  Now the groups stay, absent, at 0."""
    served = Served(tmp_path, profile=profile)
    connections = clusters_ab(served)
    stop_cleanly(served, B1, "broker-b1", "cB")
    stop_cleanly(served, B2, "broker-b2", "cB")
    for name in ("broker-b1", "broker-b2"):
        connections[name][1].loseConnection()
    served.clock.advance(DEPARTED_KEEP_SECONDS + 60)  # past the departures' 10 minutes
    register(*connections["broker-a"], MASTER, "broker-a")  # broker-a heartbeats on

    samples = served.scrape()
    assert value(samples, "namesrv_clusters_without_writable_queues") == 0  # stopped cleanly: not an outage
    assert value(samples, "namesrv_cluster_writable_broker_groups", cluster="cB") == 0
    assert value(samples, "namesrv_cluster_writable_broker_groups", cluster="c1") == 1
    for name in ("broker-b1", "broker-b2"):
        assert ("namesrv_broker_group_master_live", (("broker", name), ("cluster", "cB"))) in samples
        assert value(samples, "namesrv_broker_group_master_live", cluster="cB", broker=name) == 0
        assert value(samples, "namesrv_broker_group_absent", cluster="cB", broker=name) == 1
    assert value(samples, "namesrv_broker_groups_without_master") == 0  # the outages: these stopped cleanly
    assert (value(samples, "namesrv_broker_groups_known"), value(samples, "namesrv_broker_groups_absent")) == (3, 2)
    # ... and say it was a clean stop, not a crash (the alert rules warn "stopped cleanly" rather than page)
    assert value(samples, "namesrv_cluster_stopped_cleanly", cluster="cB") == 1
    assert value(samples, "namesrv_cluster_stopped_cleanly", cluster="c1") == 0
    for name in ("broker-b1", "broker-b2"):
        assert value(samples, "namesrv_broker_group_stopped_cleanly", cluster="cB", broker=name) == 1
    assert value(samples, "namesrv_broker_group_stopped_cleanly", cluster="c1", broker="broker-a") == 0
    assert served.api.clusters()["outages"]["clusters_stopped_cleanly"] == ["cB"]

    outages = served.api.clusters()["outages"]
    assert [(g["cluster"], g["broker_name"], g["how"]) for g in outages["broker_groups_absent"]] == [
        ("cB", "broker-b1", "unregistered"), ("cB", "broker-b2", "unregistered")]
    assert outages["clusters_without_writable_queues"] == ["cB"]
    (cluster_b,) = [c for c in served.api.clusters()["clusters"] if c["cluster"] == "cB"]
    assert [(g["broker_name"], g["absent"]["how"], [m["addr"] for m in g["members"] if m["expected"]])
            for g in cluster_b["broker_groups"]] == [("broker-b1", "unregistered", [B1]),
                                                     ("broker-b2", "unregistered", [B2])]

    proto, transport = served.connect()  # broker-b1 comes back: no longer absent, its cluster writes again
    register(proto, transport, B1, "broker-b1", extra={"clusterName": "cB"})
    samples = served.scrape()
    assert value(samples, "namesrv_cluster_writable_broker_groups", cluster="cB") == 1
    assert value(samples, "namesrv_broker_group_absent", cluster="cB", broker="broker-b1") == 0
    assert value(samples, "namesrv_broker_group_absent", cluster="cB", broker="broker-b2") == 1


def test_the_memory_survives_a_clean_stop_and_a_kill(tmp_path):
    first = Served(tmp_path)
    first.service.topology.startService()
    clusters_ab(first)
    first.clock.advance(2)  # the store's check: written (a kill -9 from here on loses nothing of it)
    assert json.loads((tmp_path / "topology.json").read_bytes())["format"] == 1

    killed = Served(tmp_path)  # no stop: as after a kill -9, with no broker back yet
    samples = killed.scrape()
    assert value(samples, "namesrv_cluster_writable_broker_groups", cluster="cB") == 0
    assert value(samples, "namesrv_cluster_rejoining", cluster="cB") == 1  # expected back: not yet an outage
    assert value(samples, "namesrv_clusters_without_writable_queues") == 0
    assert value(samples, "namesrv_broker_group_absent", cluster="cB", broker="broker-b2") == 1
    assert killed.api.overview()["broker_groups_back"] == 0 and killed.api.overview()["broker_groups_known"] == 3

    killed.service.topology.startService()
    proto, transport = killed.connect()
    register(proto, transport, OTHER, "broker-new", extra={"clusterName": "c1"})
    killed.service.topology.stopService()  # a clean stop writes what changed
    again = Served(tmp_path)
    assert again.api.overview()["broker_groups_known"] == 4


def test_an_operator_retires_a_group_or_a_cluster_audited_and_only_once_it_has_left(tmp_path):
    served = Served(tmp_path)
    connections = clusters_ab(served)
    answer, events = retire(served, "cB", "broker-b1")
    assert answer.code == ResponseCode.INVALID_PARAMETER and "still registered: cB/broker-b1" in answer.remark
    assert events[0]["audit"]["result"] == "refused"  # not "failed": that pages as a save that could not be made

    stop_cleanly(served, B1, "broker-b1", "cB")
    answer, events = retire(served, "cB", "broker-b1")
    assert answer.code == ResponseCode.SUCCESS and answer.ext["retired"] == "cB/broker-b1"
    audit = events[0]["audit"]
    assert (audit["operation"], audit["result"], audit["target"]) == (
        "retire_broker_group", "ok", {"clusterName": "cB", "brokerName": "broker-b1", "retired": "cB/broker-b1"})
    samples = served.scrape()
    assert ("namesrv_broker_group_master_live", (("broker", "broker-b1"), ("cluster", "cB"))) not in samples
    assert value(samples, "namesrv_admin_requests_total", operation="retire_broker_group", result="ok") == 1
    assert json.loads((tmp_path / "topology.json").read_bytes())["groups"][1]["broker"] == "broker-b2"  # saved

    answer, _ = retire(served, "cB")  # broker-b2 still registered
    assert answer.code == ResponseCode.INVALID_PARAMETER and "cB/broker-b2" in answer.remark
    stop_cleanly(served, B2, "broker-b2", "cB")
    connections["broker-b2"][1].loseConnection()
    assert retire(served, "cB")[0].code == ResponseCode.SUCCESS
    assert value(served.scrape(), "namesrv_clusters_without_writable_queues") == 0
    assert retire(served, "cB")[0].code == ResponseCode.QUERY_NOT_FOUND  # nothing left to retire
    assert retire(served, "")[0].code == ResponseCode.INVALID_PARAMETER
    assert retire(served, "c1", "broker-a", "x")[0].code == ResponseCode.INVALID_PARAMETER  # never "the whole group"


def test_a_retirement_that_cannot_be_saved_is_undone(tmp_path):
    served = Served(tmp_path)
    clusters_ab(served)
    stop_cleanly(served, B1, "broker-b1", "cB")
    (tmp_path / "topology.json").mkdir()  # a directory where the file belongs: the rename fails
    answer, _ = retire(served, "cB", "broker-b1")
    assert answer.code == ResponseCode.SYSTEM_ERROR and "not retired" in answer.remark
    assert value(served.scrape(), "namesrv_admin_requests_total", operation="retire_broker_group", result="failed") == 1
    assert value(served.scrape(), "namesrv_broker_group_absent", cluster="cB", broker="broker-b1") == 1


def test_retirement_needs_an_admin_account_under_acl(tmp_path):
    from tests.test_audit import ACCOUNTS

    (tmp_path / "plain_acl.yml").write_text(ACCOUNTS)
    served = Served(tmp_path, aclEnable=True, aclAccountsFile=str(tmp_path / "plain_acl.yml"))
    answer, events = ask(served, RequestCode.RETIRE_BROKER_GROUP, {"clusterName": "c1"},
                         account=("reader", "reader-secret"))
    assert answer.code != ResponseCode.SUCCESS and events[0]["audit"]["result"] == "refused"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("plant", ["fifo", "symlink", "corrupt", "too_big"])
def test_a_planted_topology_file_is_refused_logged_and_counted_never_blocking(tmp_path, plant, monkeypatch):
    path = tmp_path / "topology.json"
    if plant == "fifo":
        os.mkfifo(path)  # open() without O_NONBLOCK would hold the reactor here for ever
    elif plant == "symlink":
        (tmp_path / "elsewhere.json").write_bytes(b'{"format":1,"groups":[]}')
        path.symlink_to(tmp_path / "elsewhere.json")
    elif plant == "corrupt":
        path.write_bytes(b'{"format": 1, "groups": [{"cluster": "c1"')  # no half file is ever written: not ours
    else:
        from twisted_namesrv import topology_store

        monkeypatch.setattr(topology_store, "FILE_LIMIT", 10)
        path.write_bytes(b'{"format":1,"groups":[]}')
    started = time.monotonic()
    with capturedLogs() as events:
        served = Served(tmp_path)
    assert time.monotonic() - started < 10
    reason = {"fifo": "not_regular", "symlink": "not_regular", "corrupt": "corrupt", "too_big": "too_big"}[plant]
    assert value(served.scrape(), "namesrv_store_load_refusals_total", store="topologyPath", reason=reason) == 1
    assert any("topology file" in formatEvent(e) and "refused" in formatEvent(e) for e in events)
    assert served.api.overview()["topology_problem"]
    if plant == "corrupt":
        assert (tmp_path / "topology.json.corrupt").exists()


def test_a_group_past_the_limit_is_logged_and_counted(tmp_path, monkeypatch):
    served = Served(tmp_path)
    monkeypatch.setattr(served.service.state.topology, "groups_limit", 1)
    served.service.topology.startService()
    clusters_ab(served)
    with capturedLogs() as events:
        served.clock.advance(2)
    assert value(served.scrape(), "namesrv_topology_refusals_total") == 2
    assert [formatEvent(e) for e in events if "not remembered" in formatEvent(e)] == [
        "2 new broker groups not remembered: the topology holds its limit of 1 groups (retire those removed on "
        "purpose)"]


def test_the_topology_is_bounded_and_its_file_round_trips():
    clock = [100.0]
    topology = Topology(lambda: clock[0], KeptHosts(), groups_limit=2, members_limit=2)
    topology.heard("registered", {"cluster": "c", "broker": "a", "id": 0, "addr": "h:1"})
    topology.heard("registered", {"cluster": "c", "broker": "b", "id": 0, "addr": "h:2"})
    topology.heard("registered", {"cluster": "c", "broker": "x", "id": 0, "addr": "h:3"})  # over the limit
    assert sorted(topology.groups) == [("c", "a"), ("c", "b")] and topology.refused == 1
    for broker_id, port in ((1, 4), (2, 5)):  # a third member id: the one seen longest ago goes
        clock[0] += 1
        topology.heard("registered", {"cluster": "c", "broker": "a", "id": broker_id, "addr": f"h:{port}"})
    assert sorted(m.broker_id for m in topology.groups["c", "a"].members) == [1, 2]
    topology.heard("changed", {"cluster": "c", "broker": "a", "id": 0, "addr": "h:5"})  # a slave became master
    assert {m.broker_id: m.addr for m in topology.groups["c", "a"].members} == {1: "h:4", 0: "h:5"}
    topology.heard("unregistered", {"cluster": "c", "broker": "b", "id": 0, "addr": "h:2"})
    assert (topology.groups["c", "b"].left, topology.groups["c", "b"].how) == (clock[0], "unregistered")
    version = topology.version
    topology.heard("changed", {"cluster": "c", "broker": "a", "id": 0, "addr": "h:5"})  # nothing new: no write
    assert topology.version == version

    again = decode(encode(topology))
    assert again == topology.groups
    with pytest.raises(TopologyFileError, match="over the limit"):
        decode(encode(topology), groups_limit=1)
    for bad in (b"[]", b'{"format":2,"groups":[]}', b'{"format":1,"groups":[{"cluster":1}]}', b"\xff"):
        with pytest.raises(TopologyFileError):
            decode(bad)


def test_a_write_encodes_only_the_groups_that_changed_since(monkeypatch):
    """Issue 47: the store writes every 2 s while brokers register; encoding all 5,000 groups in
    that reactor turn held lookups 20-80 ms.  Each group's entry is encoded when it changes, so a
    write after one change encodes one group (work counted), and the file is what encoding them
    all at once gives, through retirements, an undone one and a restart's load."""
    from twisted_namesrv.state import topology as module

    clock = [100.0]
    topology = Topology(lambda: clock[0], KeptHosts())
    for i in range(1_000):
        topology.heard("registered", {"cluster": f"c{i % 3}", "broker": f"g{i}", "id": 0, "addr": f"h:{i}"})
    encoded: list[int] = []
    dumps, encode_group = module.json.dumps, module.encode_group

    def counting(group):
        encoded.append(1)
        return encode_group(group)
    monkeypatch.setattr(module, "encode_group", counting)
    clock[0] += 1
    topology.heard("closed", {"cluster": "c1", "broker": "g7", "id": 0, "addr": "h:7"})
    encode(topology)
    assert sum(encoded) == 1  # the group that changed, once; before, all 1,000 at every write
    assert {type(entry) for entry in topology.encoded.values()} == {bytes}  # as the file holds them

    def whole(t: Topology) -> bytes:  # the file's format, encoded at once
        return dumps({"format": 1, "groups": [
            {"cluster": g.cluster, "broker": g.broker, "since": g.since, "left": g.left, "how": g.how,
             "members": [[m.broker_id, m.addr, m.since] for m in g.members], "up": sorted(g.up),
             **({"master_how": g.master_how} if g.master_how else {}),
             **({"master_left": g.master_left} if g.master_left is not None else {})}
            for g in t.groups.values()]}, separators=(",", ":")).encode()
    assert encode(topology) == whole(topology)
    before = topology.copy()
    assert topology.retire("c2")  # a cluster
    assert topology.retire("c0", "g3") and topology.retire("c1", "g4", 0)  # a group, a member
    assert encode(topology) == whole(topology) and decode(encode(topology)) == topology.groups
    topology.restore(before)  # undone
    assert encode(topology) == whole(topology)
    topology.load(decode(encode(topology)))
    assert encode(topology) == whole(topology)


@pytest.mark.parametrize("name", ["grüppe-\u2028", "lone\ud800", "esc\x1b"])
def test_a_groups_entry_reads_back_whatever_its_names_hold(name):
    """An entry is encoded at every registration that names a new member (msgspec, UTF-8); a name
    UTF-8 cannot carry (a lone surrogate) is escaped as json.dumps does: each reads back as it was."""
    topology = Topology(lambda: 100.0, KeptHosts())
    topology.heard("registered", {"cluster": name, "broker": name, "id": 0, "addr": f"{name}:1"})
    assert decode(encode(topology)) == topology.groups and (name, name) in topology.groups


# -- item 2: a restart without a route snapshot ---------------------------------------------------

def test_a_restart_without_a_snapshot_is_not_ready_until_the_known_groups_are_back(tmp_path):
    first = Served(tmp_path)
    clusters_ab(first)
    first.service.topology.stopService()

    second = Served(tmp_path, readinessBrokerWait=45_000)  # kill -9, restarted without --route-snapshot
    service = second.service
    assert not service.readiness()["broker_groups_back"]
    assert service.readiness_details()["broker_groups"]["summary"] == "0 of 3 known broker groups back"
    assert value(second.scrape(), "namesrv_broker_groups_back") == 0
    clusters_ab(second)
    assert service.readiness()["broker_groups_back"]
    assert service.readiness_details()["broker_groups"]["summary"] == "3 of 3 known broker groups back"
    assert value(second.scrape(), "namesrv_broker_groups_back") == 3

    third = Served(tmp_path, readinessBrokerWait=45_000)  # a cluster that stays down delays readiness only so long
    third.clock.advance(44)
    assert not third.service.readiness()["broker_groups_back"]
    third.clock.advance(1)
    assert third.service.readiness()["broker_groups_back"]
    assert third.service.readiness_details()["broker_groups"]["absent"] == ["c1/broker-a", "cB/broker-b1",
                                                                             "cB/broker-b2"]


def test_a_group_up_when_the_nameserver_went_down_is_absent_since_its_restart_not_since_an_old_departure(tmp_path):
    """Seen in the walk-through: after a kill -9 and a restart without a snapshot the page said a group
    'is absent: every member left (unregistered, 4 m 57 s ago)', a clean stop long since undone."""
    first = Served(tmp_path)
    clusters_ab(first)
    stop_cleanly(first, B1, "broker-b1", "cB")  # left and came back, long before the restart
    first.clock.advance(300)
    proto, transport = first.connect()
    register(proto, transport, B1, "broker-b1", extra={"clusterName": "cB"})
    first.service.topology.stopService()

    second = Served(tmp_path)
    second.clock.advance(5)
    answer = second.api.clusters()
    absent = {g["broker_name"]: g["absent"] for c in answer["clusters"] for g in c["broker_groups"]}
    assert absent["broker-b1"]["how"] == "not registered since the NameServer restarted"
    assert absent["broker-b1"]["crash"] is False
    assert second.clock.seconds() * 1000 - absent["broker-b1"]["since_ms"] == 5000


def test_a_group_that_was_down_before_the_restart_does_not_delay_readiness(tmp_path):
    first = Served(tmp_path)
    connections = clusters_ab(first)
    stop_cleanly(first, B1, "broker-b1", "cB")
    stop_cleanly(first, B2, "broker-b2", "cB")
    first.service.topology.stopService()
    for _, transport in connections.values():
        transport.loseConnection()

    second = Served(tmp_path)
    assert not second.service.readiness()["broker_groups_back"]  # broker-a was up: expected back
    assert second.service.readiness_details()["broker_groups"]["up_before_restart_not_back"] == ["c1/broker-a"]
    proto, transport = second.connect()
    register(proto, transport, MASTER, "broker-a")
    assert second.service.readiness()["broker_groups_back"]  # cB is an outage, not a reason to wait
    assert second.service.readiness_details()["broker_groups"]["summary"] == "1 of 3 known broker groups back"
    assert value(second.scrape(), "namesrv_broker_groups_absent") == 2


def test_right_after_a_restart_the_groups_expected_back_are_rejoining_not_outages(tmp_path):
    """SRE's first hour: a NameServer restarted without a snapshot fired NamesrvBrokerGroupAbsent and
    NamesrvClusterNothingWritable at its first scrape for every group, while its brokers were simply
    not due to register yet (every 30 s).  Now, for readinessBrokerWait, a group up when it went down
    with no live master yet is *rejoining* (its own series; the alert rules leave it out, and
    deploy/monitoring/namesrv-alerts.test.yaml checks them), and one still not back afterwards is the
    outage it was.  A group that was down before the restart is an outage from the first scrape."""
    first = Served(tmp_path)
    connections = clusters_ab(first)
    stop_cleanly(first, B2, "broker-b2", "cB")  # down before the restart: not expected back
    connections["broker-b2"][1].loseConnection()
    first.service.topology.stopService()

    second = Served(tmp_path, readinessBrokerWait=45_000)
    second.clock.advance(10)
    samples = second.scrape()
    rejoining = {name: value(samples, "namesrv_broker_group_rejoining", cluster=cluster, broker=name)
                 for cluster, name in (("c1", "broker-a"), ("cB", "broker-b1"), ("cB", "broker-b2"))}
    assert rejoining == {"broker-a": 1, "broker-b1": 1, "broker-b2": 0}
    assert value(samples, "namesrv_broker_group_absent", cluster="c1", broker="broker-a") == 1  # still the fact
    assert value(samples, "namesrv_cluster_rejoining", cluster="c1") == 1
    assert value(samples, "namesrv_cluster_rejoining", cluster="cB") == 1
    assert value(samples, "namesrv_rejoin_window_seconds_left") == 35
    outages = second.api.clusters()["outages"]
    assert outages["rejoining"] == {"seconds_left": 35, "clusters": ["c1", "cB"], "broker_groups": [
        {"cluster": "c1", "broker_name": "broker-a"}, {"cluster": "cB", "broker_name": "broker-b1"}]}
    assert [(g["broker_name"], g["rejoining"]) for g in outages["broker_groups_without_master"]] == [
        ("broker-a", True), ("broker-b1", True), ("broker-b2", False)]
    overview = second.api.overview()
    assert (overview["broker_groups_rejoining"], overview["rejoin_seconds_left"]) == (2, 35)

    proto, transport = second.connect()
    register(proto, transport, MASTER, "broker-a")  # back: neither rejoining nor absent
    samples = second.scrape()
    assert value(samples, "namesrv_broker_group_rejoining", cluster="c1", broker="broker-a") == 0
    assert value(samples, "namesrv_cluster_rejoining", cluster="c1") == 0

    second.clock.advance(35)  # the window is over: broker-b1, not back, is an outage like any other
    samples = second.scrape()
    assert value(samples, "namesrv_broker_group_rejoining", cluster="cB", broker="broker-b1") == 0
    assert value(samples, "namesrv_broker_group_absent", cluster="cB", broker="broker-b1") == 1
    assert value(samples, "namesrv_cluster_rejoining", cluster="cB") == 0
    assert value(samples, "namesrv_rejoin_window_seconds_left") == 0
    assert second.api.clusters()["outages"]["rejoining"] == {"seconds_left": 0, "broker_groups": [], "clusters": []}


def test_a_wall_clock_stepped_back_at_boot_does_not_stretch_the_restart_window(tmp_path):
    """NTP's first sync steps the wall clock back an hour seconds after the start: /readyz waited on
    the wall clock (now - started_at), so it stayed unready an hour and 45 s while a group that is
    really down stayed absent.  The window runs on the steady clock (clocks.py) now."""
    first = Served(tmp_path)
    clusters_ab(first)
    first.service.topology.stopService()

    second = Served(tmp_path, readinessBrokerWait=45_000)
    service = second.service
    service.state.clock = lambda: second.clock.seconds() - 3600  # the wall clock, stepped back an hour
    second.clock.advance(44)
    assert not service.readiness()["broker_groups_back"]
    second.clock.advance(1)
    assert service.readiness()["broker_groups_back"]
    assert value(second.scrape(), "namesrv_broker_group_rejoining", cluster="c1", broker="broker-a") == 0


def test_a_route_snapshot_past_its_maximum_age_is_not_served(tmp_path):
    snapshot = str(tmp_path / "routes.json")
    first = Served(tmp_path, routeSnapshotPath=snapshot)
    proto, transport = first.connect()
    register(proto, transport)
    first.service.snapshots.stopService()  # a clean stop writes the routes, stamped with the stop's time
    first.service.topology.stopService()  # ... and the groups seen
    stopped = first.clock.seconds()
    assert os.stat(snapshot).st_mtime == stopped

    second = Served(tmp_path, routeSnapshotPath=snapshot)  # soon after: served
    assert second.api.route("T1") is not None

    os.utime(snapshot, (stopped - 3600, stopped - 3600))  # a Java NameServer served for an hour meanwhile
    with capturedLogs() as events:
        third = Served(tmp_path, routeSnapshotPath=snapshot)
    assert third.api.route("T1") is None and third.service.state.routes.brokerLiveTable == {}
    assert value(third.scrape(), "namesrv_store_load_refusals_total", store="routeSnapshotPath", reason="too_old") == 1
    assert any("not served" in formatEvent(e) and "routeSnapshotMaxAge" in formatEvent(e) for e in events)
    assert not third.service.readiness()["broker_groups_back"]  # broker-a is known, not back

    fourth = Served(tmp_path, routeSnapshotPath=snapshot, routeSnapshotMaxAge=0)  # 0: any age
    assert fourth.api.route("T1") is not None

    # stamped an hour ahead of the clock: the clock stepped back an hour (or more) since, so the
    # snapshot may be minutes or hours old: its age is unknown, and it is not served either
    os.utime(snapshot, (stopped + 3600, stopped + 3600))
    with capturedLogs() as events:
        fifth = Served(tmp_path, routeSnapshotPath=snapshot)
    assert fifth.api.route("T1") is None and fifth.service.state.routes.brokerLiveTable == {}
    scrape = fifth.scrape()
    assert value(scrape, "namesrv_store_load_refusals_total", store="routeSnapshotPath", reason="ahead_of_clock") == 1
    assert value(scrape, "namesrv_store_load_refusals_total", store="routeSnapshotPath", reason="too_old") == 0
    assert any("not served" in formatEvent(e) and "3600 s ahead of this host's clock" in formatEvent(e)
               for e in events)
    os.utime(snapshot, (stopped + 0.5, stopped + 0.5))  # within a second: the same clock, served
    assert Served(tmp_path, routeSnapshotPath=snapshot).api.route("T1") is not None


def test_a_registration_of_a_new_member_encodes_its_entry_without_json_dumps(monkeypatch):
    """json.dumps of one entry was a twentieth of a 5,000-broker first registration's CPU."""
    from twisted_namesrv.state import topology as module

    monkeypatch.setattr(module.json, "dumps", None)
    topology = Topology(lambda: 100.0, KeptHosts())
    topology.heard("registered", {"cluster": "c", "broker": "g", "id": 0, "addr": "h:1"})
    assert decode(encode(topology)) == topology.groups


def test_groups_alike_share_one_up_set_even_after_more_than_alike_ids_sets_were_met(monkeypatch):
    """Every group's set of members up is the one set of its content (state/alike.py); once more
    distinct sets than ALIKE_IDS were met (ids churning over months), the groups registering from
    then on share theirs again (before, past the bound each kept a set of its own, for good)."""
    from twisted_namesrv.state import topology as topology_module

    monkeypatch.setattr(topology_module, "ALIKE_IDS", 4)
    topology = Topology(lambda: 0.0, KeptHosts())
    for broker_id in range(10):  # ten distinct sets {0}, {1}, ..., more than the pool keeps
        topology.heard("registered", {"cluster": "c", "broker": f"churn{broker_id}", "id": broker_id,
                                      "addr": f"h:{broker_id}"})
    for name in ("a", "b", "c"):
        topology.heard("registered", {"cluster": "c", "broker": name, "id": 7, "addr": f"{name}:1"})
    ups = [topology.groups["c", name].up for name in ("a", "b", "c")]
    assert ups[0] == frozenset({7}) and ups[0] is ups[1] is ups[2]


def test_a_group_whose_last_member_crashed_is_not_stopped_cleanly():
    """The clean-stop warning is for unregistrations only: expired, closed and idle stay outages."""
    from twisted_namesrv.outages import GroupHealth

    def gone(how: str) -> GroupHealth:
        return GroupHealth("c", "b", None, False, 0, 0, 0, 0, absent=True, absent_how=how)

    assert gone("unregistered").stopped_cleanly
    assert not any(gone(how).stopped_cleanly for how in ("expired", "closed", "idle",
                                                         "not registered since the NameServer restarted"))


def test_a_stop_on_a_full_disk_says_which_groups_the_restart_will_not_expect(tmp_path):
    """The data directory filled while running (a real 64 KiB tmpfs), then SIGTERM: the stop's write of
    topology.json fails, so the groups seen since its last write are not expected after the restart
    (it loads the file as last written, whole: written aside and renamed). Before, the failed write at
    the stop said nothing (the failing spell had been logged once, maybe hours before) and the restart
    could not know: nothing said which groups were lost. Now the stop names them."""
    from tests.hostile.faults import disk_full, tiny_tmpfs

    with tiny_tmpfs(tmp_path / "fs") as data:
        first = Served(data)
        first.service.topology.startService()
        first.service.events.startService()
        proto, transport = first.connect()
        register(proto, transport, MASTER, "broker-a", extra={"clusterName": "c1"})
        first.clock.advance(2)  # written: broker-a
        with disk_full(data):
            with capturedLogs() as logged:
                for addr, name in ((B1, "broker-b1"), (B2, "broker-b2")):
                    proto, transport = first.connect()
                    register(proto, transport, addr, name, extra={"clusterName": "cB"})
                first.clock.advance(2)  # the periodic write fails: logged once
                samples = first.scrape()  # failing: NamesrvStoreNotWritten holds until written again
                assert value(samples, "namesrv_store_failing", store="topologyPath", error="ENOSPC") == 1
                assert value(samples, "namesrv_store_failing", store="eventsPath", error="ENOSPC") == 1
                first.service.topology.stopService()  # SIGTERM, the disk still full
                first.service.events.stopService()
            lines = [formatEvent(e) for e in logged]
            assert sum("cannot write topology file" in line for line in lines) == 1, lines
            assert any("events file" in line and "not written at the stop" in line for line in lines), lines
            (stop,) = [line for line in lines if "topology file" in line and "not written at the stop" in line]
            assert "2 broker groups seen since its last write will not be expected after the restart: " \
                   "cB/broker-b1, cB/broker-b2" in stop and "No space left on device" in stop, stop
        with capturedLogs() as logged:
            again = Served(data)
        assert again.api.overview()["broker_groups_known"] == 1  # the file as last written, whole
        assert any("1 broker groups of 1 clusters expected" in formatEvent(e) for e in logged)


def test_a_controller_mode_group_stopped_cleanly_after_a_fail_over_stays_stopped_cleanly_across_a_restart(tmp_path):
    """Seen with real 5.3.3 controller-mode brokers: broker-c0 (master) stopped cleanly, the controller
    made broker-c1 (brokerId 2) master and it registered again as brokerId 0 on the same address, then it
    stopped cleanly too. The routes swap the id without a departure (as Java's do), but the remembered
    topology kept id 2 "up": after a restart of the NameServer the group was 'rejoining', then paged
    NamesrvBrokerGroupAbsent and NamesrvClusterNothingWritable (critical, 'not registered since the
    NameServer restarted') for a cluster stopped cleanly."""
    first = Served(tmp_path)
    first.service.topology.startService()
    for addr, broker_id in ((MASTER, "0"), (B1, "2")):
        proto, transport = first.connect()
        register(proto, transport, addr, "broker-ctl", extra={"clusterName": "cC", "brokerId": broker_id})
    answer, _ = ask(first, RequestCode.UNREGISTER_BROKER, {"clusterName": "cC", "brokerAddr": MASTER,
                                                           "brokerName": "broker-ctl", "brokerId": "0"}, account=None)
    assert answer.code == ResponseCode.SUCCESS
    register(proto, transport, B1, "broker-ctl", extra={"clusterName": "cC", "brokerId": "0"})  # elected master
    stop_cleanly(first, B1, "broker-ctl", "cC")  # as brokerId 0
    assert first.api.clusters()["outages"]["clusters_stopped_cleanly"] == ["cC"]
    first.service.topology.stopService()

    again = Served(tmp_path)
    outages = again.api.clusters()["outages"]
    assert outages["clusters_stopped_cleanly"] == ["cC"]
    assert outages["rejoining"]["broker_groups"] == []  # before: [cC/broker-ctl], then an outage
    samples = again.scrape()
    assert value(samples, "namesrv_cluster_stopped_cleanly", cluster="cC") == 1
    assert value(samples, "namesrv_broker_group_rejoining", cluster="cC", broker="broker-ctl") == 0


class _CountedEntries(dict):
    """Topology.encoded, counting the walks of every entry that are not the file's own join
    (``dict(entries)``: a copy walks the keys, then reads each entry)."""

    walks = 0

    def __iter__(self):
        type(self).walks += 1
        return super().__iter__()

    def keys(self):
        type(self).walks += 1
        return super().keys()


def test_a_save_keeps_no_copy_of_every_groups_entry(tmp_path):
    """Each save (every SAVE_SECONDS while the memory changes, at most 10,000 groups) copied every
    group's entry, only for a stop whose write might fail to tell what it lost: now that stop reads the
    file back, and a save walks the entries once, to write them (encode's join of the values)."""
    from collections import Counter

    from twisted.internet import task

    from twisted_namesrv.topology_store import TopologyStoreService

    clock = task.Clock()
    topology = Topology(clock.seconds, KeptHosts())
    store = TopologyStoreService(topology, tmp_path / "topology.json", clock, Counter())
    topology.encoded = _CountedEntries()
    store.startService()
    for n in range(3):
        topology.heard("registered", {"cluster": "c", "broker": f"b{n}", "id": 0, "addr": f"h:{n}"})
        clock.advance(2)
    store.save_now()
    store.stopService()
    assert _CountedEntries.walks == 0
    assert sorted(decode((tmp_path / "topology.json").read_bytes())) == [("c", "b0"), ("c", "b1"), ("c", "b2")]


def test_a_restart_logs_how_the_groups_it_expects_were_left(tmp_path):
    """A cluster stopped cleanly, then the NameServer restarted: its log said only "2 broker groups
    of 1 clusters expected, as last seen", while the page and the alerts said stopped cleanly."""
    from collections import Counter

    from twisted.internet import task

    from twisted_namesrv.topology_store import TopologyStoreService

    clock = task.Clock()
    topology = Topology(clock.seconds, KeptHosts())
    store = TopologyStoreService(topology, tmp_path / "topology.json", clock, Counter())
    for name, addr in (("a", "h:1"), ("b", "h:2"), ("c", "h:3")):
        topology.heard("registered", {"cluster": "cA", "broker": name, "id": 0, "addr": addr})
    topology.heard("unregistered", {"cluster": "cA", "broker": "a", "id": 0, "addr": "h:1"})
    topology.heard("expired", {"cluster": "cA", "broker": "b", "id": 0, "addr": "h:2"})
    store.save_now()
    again = TopologyStoreService(Topology(clock.seconds, KeptHosts()), tmp_path / "topology.json", clock, Counter())
    with capturedLogs() as events:
        again.load()
    (line,) = [formatEvent(e) for e in events if "expected, as last seen" in formatEvent(e)]
    assert line.endswith("3 broker groups of 1 clusters expected, as last seen: 1 up when it last stopped, expected "
                         "to register again; absent before it: 1 left (expired): cA/b; 1 stopped cleanly "
                         "(unregistered): cA/a"), line


def test_a_cluster_stopped_master_first_and_started_slave_first_is_a_clean_stop_throughout(tmp_path):
    """Seen with real 5.3.3 brokers (broker-a, its slave broker-a-s, broker-b): the cluster stopped in
    order, broker-b, then broker-a's master, then its slave, left broker-a with its slave alone for
    the seconds between, and started again with the NameServers last, its slave registered 6 s before
    its master. Both times the group had a member and no live master and the cluster nothing
    writable, not "stopped cleanly": NamesrvBrokerGroupWithoutMaster and NamesrvClusterNothingWritable
    paged (critical) for a shutdown and a start made on purpose. Now the master's own clean stop is
    remembered (across a restart too) until a master registers, and the cluster counts as stopped
    cleanly; a master that crashed while its slave runs is no clean stop."""
    first = Served(tmp_path)
    first.service.topology.startService()
    connections = {}
    for addr, name, broker_id in ((MASTER, "broker-a", "0"), (B1, "broker-a", "1"), (B2, "broker-b", "0")):
        proto, transport = first.connect()
        register(proto, transport, addr, name, extra={"clusterName": "cA", "brokerId": broker_id})
        connections[addr] = (proto, transport)

    def unregister(served: Served, addr: str, name: str, broker_id: str) -> None:
        answer, _ = ask(served, RequestCode.UNREGISTER_BROKER, {"clusterName": "cA", "brokerAddr": addr,
                                                                "brokerName": name, "brokerId": broker_id},
                        account=None)
        assert answer.code == ResponseCode.SUCCESS

    def seen(served: Served) -> tuple[float, float, float]:
        samples = served.scrape()
        return (value(samples, "namesrv_broker_group_master_stopped_cleanly", cluster="cA", broker="broker-a"),
                value(samples, "namesrv_broker_group_master_live", cluster="cA", broker="broker-a"),
                value(samples, "namesrv_cluster_stopped_cleanly", cluster="cA"))

    unregister(first, B2, "broker-b", "0")
    unregister(first, MASTER, "broker-a", "0")  # the master before its slave
    assert seen(first) == (1, 0, 1)
    outages = first.api.clusters()["outages"]
    assert outages["clusters_stopped_cleanly"] == ["cA"]
    assert [(g["broker_name"], g["master_stopped_cleanly"]) for g in outages["broker_groups_without_master"]
            if not g["absent"]] == [("broker-a", True)]  # the page says it in amber, not red
    unregister(first, B1, "broker-a", "1")
    assert seen(first) == (0, 0, 1)  # absent now, its last member unregistered: stopped_cleanly says it
    first.service.topology.stopService()

    again = Served(tmp_path)  # the NameServers started last: the slave registers first
    slave = again.connect()
    register(*slave, B1, "broker-a", extra={"clusterName": "cA", "brokerId": "1"})
    assert seen(again) == (1, 0, 1)
    proto, transport = again.connect()
    register(proto, transport, MASTER, "broker-a", extra={"clusterName": "cA", "brokerId": "0"})
    assert seen(again) == (0, 1, 0)

    transport.loseConnection()  # the master crashes, its slave up: an outage, no clean stop
    again.clock.advance(0)
    assert seen(again) == (0, 0, 0)
    proto, transport = again.connect()
    register(proto, transport, MASTER, "broker-a", extra={"clusterName": "cA", "brokerId": "0"})
    unregister(again, MASTER, "broker-a", "0")  # back, then stopped cleanly ...
    assert seen(again) == (1, 0, 1)
    slave[1].loseConnection()  # ... then its slave crashes: the group absent by a crash, the cluster too
    again.clock.advance(0)
    assert seen(again) == (0, 0, 0)


def test_a_group_stopped_cleanly_within_the_restarts_window_is_not_expected_back(tmp_path):
    """Seen with real 5.3.3 brokers: both NameServers restarted (a route snapshot restored broker-b), and
    broker-b stopped cleanly 40 s later, inside the restart's 45 s window: it was "rejoining" as if due
    back (NamesrvBrokersRejoining) and /readyz 503 (broker_groups_back) until the window ended. Stopped
    cleanly, it is not expected back: neither rejoining nor waited for; a group that left otherwise still is."""
    first = Served(tmp_path)
    clusters_ab(first)
    first.service.topology.stopService()  # every group up when it went down

    second = Served(tmp_path, readinessBrokerWait=45_000)
    second.clock.advance(5)
    connections = {}
    for addr, name in ((B1, "broker-b1"), (B2, "broker-b2")):
        proto, transport = second.connect()
        register(proto, transport, addr, name, extra={"clusterName": "cB"})
        connections[name] = transport
    stop_cleanly(second, B1, "broker-b1", "cB")
    connections["broker-b1"].loseConnection()
    connections["broker-b2"].loseConnection()  # broker-b2 crashed: still an outage once the window ends
    second.clock.advance(5)
    samples = second.scrape()
    assert value(samples, "namesrv_broker_group_rejoining", cluster="cB", broker="broker-b1") == 0
    assert value(samples, "namesrv_broker_group_stopped_cleanly", cluster="cB", broker="broker-b1") == 1
    assert value(samples, "namesrv_broker_group_rejoining", cluster="cB", broker="broker-b2") == 1
    assert value(samples, "namesrv_broker_group_rejoining", cluster="c1", broker="broker-a") == 1  # not back yet
    waiting = second.service.readiness_details()["broker_groups"]["up_before_restart_not_back"]
    assert waiting == ["c1/broker-a", "cB/broker-b2"], waiting
    assert not second.service.readiness()["broker_groups_back"]
    for addr, name, cluster in ((MASTER, "broker-a", "c1"), (B2, "broker-b2", "cB")):
        proto, transport = second.connect()
        register(proto, transport, addr, name, extra={"clusterName": cluster})
    assert second.service.readiness()["broker_groups_back"]  # before: 503 until the window ended (broker-b1)


def test_a_new_groups_entry_and_its_file_entry_share_one_key():
    """A group's key tuple is one for ``groups`` and ``encoded`` (a second was 64 bytes a group: 0.3
    MB at the curve's 5,000 brokers); the bytes a new single-member group keeps are bounded
    (tracemalloc: 521 a group on CPython 3.11; 697 with its members a dict, 753 with a key of its own)."""
    names = [(sys.intern("DefaultCluster"), f"broker-{i:05d}", f"10.0.{i // 250}.{i % 250}:10911") for i in range(2000)]
    topology = Topology(lambda: 1000.0, KeptHosts())
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for cluster, broker, addr in names:
            topology.present(cluster, broker, 0, addr)
        kept = (tracemalloc.get_traced_memory()[0] - before) / len(names)
    finally:
        tracemalloc.stop()
    assert all(a is b for a, b in zip(topology.groups, topology.encoded, strict=True))
    assert kept < 560


def test_one_host_s_registrations_bring_at_most_groups_per_host_into_the_memory(tmp_path):
    """The attack: one unauthenticated connection registers 100 groups, each a cluster of its own,
    and closes.  Before, all 100 were remembered for good (absent: critical alerts, series, the
    file), and the memory's limit then kept the operator's real groups out; now its host brings
    GROUPS_PER_HOST, the rest routed as ever but not remembered, counted and said in one line."""
    served = Served(tmp_path)
    served.service.topology.startService()
    topology = served.service.state.topology
    proto, transport = served.connect("10.9.0.1")
    for j in range(100):
        served.clock.advance(0)  # a turn of its own: past 16 a turn, a registration is answered in the next
        register(proto, transport, f"10.9.1.{j}:10911", f"fake-{j}", extra={"clusterName": f"fc-{j}"})
    assert len(served.service.state.routes.brokerAddrTable) == 100  # routed, as Java routes them
    assert len(topology.groups) == GROUPS_PER_HOST and topology.refused == 100 - GROUPS_PER_HOST
    with capturedLogs() as events:
        served.clock.advance(2)
    assert [formatEvent(e) for e in events if "not remembered" in formatEvent(e)] == [
        f"36 new broker groups not remembered: their hosts brought {GROUPS_PER_HOST} groups each since this start, "
        "the most one host may: 10.9.0.1 (36) (routed all the same; retire those removed on purpose)"]
    samples = served.scrape()
    assert value(samples, "namesrv_topology_refusals_total") == 36
    assert (tmp_path / "topology.json").read_text().count('"fake-') == GROUPS_PER_HOST  # the file: 64 entries
    transport.loseConnection()  # gone: the groups remembered are absent, the others forgotten as by Java
    served.clock.advance(0)
    samples = served.scrape()
    assert value(samples, "namesrv_broker_groups_absent") == value(samples, "namesrv_broker_groups_known") == 64

    # another host's groups, and a loopback peer's, are remembered; so is a real group once a
    # retirement gave the host its room back
    other, other_transport = served.connect("10.9.0.2")
    register(other, other_transport, B1, "broker-b1", extra={"clusterName": "cB"})
    local, local_transport = served.connect()
    register(local, local_transport, B2, "broker-b2", extra={"clusterName": "cB"})
    assert {("cB", "broker-b1"), ("cB", "broker-b2")} <= set(topology.groups)
    assert retire(served, "fc-0")[0].code == ResponseCode.SUCCESS
    again, again_transport = served.connect("10.9.0.1")
    register(again, again_transport, "10.9.2.1:10911", "broker-real", extra={"clusterName": "c-real"})
    register(again, again_transport, "10.9.2.2:10911", "broker-real2", extra={"clusterName": "c-real"})
    assert ("c-real", "broker-real") in topology.groups and ("c-real", "broker-real2") not in topology.groups
    served.clock.advance(2)
    assert (tmp_path / "topology.json").read_text().count('"fake-') == GROUPS_PER_HOST - 1


def test_a_host_s_bound_counts_an_ipv6_host_by_its_64_and_no_loopback_or_restored_group():
    topology = Topology(lambda: 1.0, KeptHosts(), groups_per_host=2)

    def seen(peer: str | None, name: str) -> None:
        topology.origin = peer
        topology.heard("registered", {"cluster": "c", "broker": name, "id": 0, "addr": "h:1"})
        topology.origin = None

    for j, peer in enumerate(("2001:db8::1:40000", "[2001:db8::2]:40001", "2001:db8::3:40002")):
        seen(peer, f"v6-{j}")  # one /64: the third not remembered
    for j in range(3):
        seen("127.0.0.1:5000", f"local-{j}")
        seen("[::1]:5000", f"local6-{j}")
        seen(None, f"restored-{j}")
    assert topology.refused == 1 and dict(topology.refused_hosts) == {"2001:db8::/64": 1}
    assert ("c", "v6-2") not in topology.groups and len(topology.groups) == 2 + 9


def clean_stop_said(logged) -> list[str]:
    return [formatEvent(e) for e in logged if "stopped cleanly" in formatEvent(e) or "no broker left" in
            formatEvent(e)]


def test_a_group_and_a_whole_cluster_stopped_cleanly_are_each_said_in_a_line(tmp_path):
    """Each broker's "broker unregistered" line was all: whether a group, or a whole cluster, was gone had
    to be worked out from them. Now the unregistration that empties a group says so, and the one that
    empties its cluster too, once each, as warnings; the members before it say nothing more."""
    served = Served(tmp_path)
    clusters_ab(served)
    slave = "10.0.2.3:10911"
    proto, transport = served.connect()
    register(proto, transport, slave, "broker-b1", extra={"clusterName": "cB", "brokerId": "1"})
    with capturedLogs() as logged:
        ask(served, RequestCode.UNREGISTER_BROKER, {"clusterName": "cB", "brokerAddr": slave,
                                                    "brokerName": "broker-b1", "brokerId": "1"}, account=None)
        assert clean_stop_said(logged) == []  # its master is up: not the group's last
        stop_cleanly(served, B1, "broker-b1", "cB")
        said = clean_stop_said(logged)
        assert said == [f"broker group cB/broker-b1 stopped cleanly: its last member ({B1}, id 0) unregistered; "
                        f"its queues are out of the routes until it starts again (removed on purpose: "
                        f"namesrv-admin retireBrokerGroup -c cB -b broker-b1)"]
        stop_cleanly(served, B2, "broker-b2", "cB")
    said = clean_stop_said(logged)[1:]
    assert said[0].startswith("broker group cB/broker-b2 stopped cleanly")
    assert said[1] == ("cluster cB stopped cleanly: the last member of each of its 2 broker group(s) unregistered; "
                       "nothing can be sent to its topics until its brokers start again, and nothing crashed")
    assert len(said) == 2
    assert {e["log_level"].name for e in logged if "stopped cleanly" in formatEvent(e)} == {"warn"}


def test_a_cluster_whose_other_groups_crashed_is_not_said_stopped_cleanly(tmp_path):
    served = Served(tmp_path)
    connections = clusters_ab(served)
    connections["broker-b2"][1].loseConnection()  # killed: its connection closed without unregistering
    served.clock.advance(1)
    with capturedLogs() as logged:
        stop_cleanly(served, B1, "broker-b1", "cB")
    said = clean_stop_said(logged)
    assert said[1] == ("cluster cB has no broker left: its last broker group stopped cleanly, but 1 of its groups "
                       "left without unregistering before: broker-b2 (closed)")


def test_a_member_killed_while_its_master_serves_on_is_counted_absent_until_back_or_retired(tmp_path):
    """A slave killed -9: its group keeps a live master, so neither the group alerts nor any gauge said a
    member was missing once its departure left the 10 minutes' list. namesrv_broker_group_members_absent
    counts the remembered members the routes do not hold, until it comes back or is retired."""
    served = Served(tmp_path)
    connections = clusters_ab(served)
    slave = "10.0.2.3:10911"
    proto, transport = served.connect()
    register(proto, transport, slave, "broker-b1", extra={"clusterName": "cB", "brokerId": "1"})
    assert value(served.scrape(), "namesrv_broker_group_members_absent", cluster="cB", broker="broker-b1") == 0
    transport.loseConnection()  # killed: no unregistration
    served.clock.advance(DEPARTED_KEEP_SECONDS + 60)
    for name, addr, cluster in (("broker-a", MASTER, "c1"), ("broker-b1", B1, "cB"), ("broker-b2", B2, "cB")):
        register(*connections[name], addr, name, extra={"clusterName": cluster})  # heartbeats on
    samples = served.scrape()
    assert value(samples, "namesrv_broker_group_members_absent", cluster="cB", broker="broker-b1") == 1
    assert value(samples, "namesrv_broker_group_members_absent", cluster="cB", broker="broker-b2") == 0
    assert value(samples, "namesrv_broker_group_master_live", cluster="cB", broker="broker-b1") == 1
    answer, _ = retire(served, "cB", "broker-b1", "1")
    assert answer.code == ResponseCode.SUCCESS
    assert value(served.scrape(), "namesrv_broker_group_members_absent", cluster="cB", broker="broker-b1") == 0
    stop_cleanly(served, B2, "broker-b2", "cB")  # an absent group: every member
    assert value(served.scrape(), "namesrv_broker_group_members_absent", cluster="cB", broker="broker-b2") == 1


def test_the_overview_counts_a_cluster_stopped_cleanly_as_that_not_as_groups_without_master(tmp_path):
    """/api/overview's outage counts took a whole cluster stopped cleanly for two groups without a
    master and a cluster with nothing writable, where the page and the alert rules say "stopped
    cleanly" as a warning. Now they count outages only, and say the clean stop apart. So do the
    gauges: namesrv_broker_groups_without_master stayed at 2 (and the documented "> 0" paged) for a
    whole cluster of real 4.9.8 brokers stopped with SIGTERM."""
    served = Served(tmp_path)
    clusters_ab(served)
    stop_cleanly(served, B1, "broker-b1", "cB")
    served.clock.advance(7)
    stop_cleanly(served, B2, "broker-b2", "cB")
    overview = served.api.overview()
    assert (overview["broker_groups_without_master"], overview["clusters_without_writable_queues"]) == (0, 0)
    assert (overview["broker_groups_stopped_cleanly"], overview["clusters_stopped_cleanly"]) == (2, 1)
    samples = served.scrape()
    assert value(samples, "namesrv_broker_groups_without_master") == 0
    assert value(samples, "namesrv_clusters_without_writable_queues") == 0
    # when each stopped, for the alert's "stopped cleanly at T": the cluster's is the latest of its groups'
    stopped_at = {broker: value(samples, "namesrv_broker_group_stopped_cleanly_timestamp_seconds", cluster="cB",
                                broker=broker) for broker in ("broker-b1", "broker-b2")}
    assert stopped_at == {"broker-b1": served.clock.seconds() - 7, "broker-b2": served.clock.seconds()}
    assert not [key for key in samples if key[0] == "namesrv_broker_group_stopped_cleanly_timestamp_seconds"
                and ("cluster", "cA") in key[1]]  # a series only for a group stopped cleanly


def test_the_gauges_count_a_crashed_master_but_not_a_restarted_ones_seconds_without_it(tmp_path):
    """A rolling restart of a master (SIGTERM, started again 30 s later) left
    namesrv_broker_groups_without_master and namesrv_clusters_without_writable_queues at 1 for its 49 s
    with real 4.9.8 brokers; a master killed while its slave runs is the outage they count."""
    served = Served(tmp_path)
    served.service.topology.startService()
    for addr, broker_id in ((MASTER, "0"), (B1, "1")):
        register(*served.connect(), addr, "broker-a", extra={"clusterName": "cA", "brokerId": broker_id})
    answer, _ = ask(served, RequestCode.UNREGISTER_BROKER, {"clusterName": "cA", "brokerAddr": MASTER,
                                                            "brokerName": "broker-a", "brokerId": "0"}, account=None)
    assert answer.code == ResponseCode.SUCCESS
    samples = served.scrape()
    assert (value(samples, "namesrv_broker_groups_without_master"),
            value(samples, "namesrv_clusters_without_writable_queues")) == (0, 0)
    assert value(samples, "namesrv_broker_group_stopped_cleanly_timestamp_seconds", cluster="cA",
                 broker="broker-a") == served.clock.seconds()  # the master's unregistration, its slave up
    # its cluster takes no writes on purpose, but not every broker unregistered: the page said "cluster cA
    # stopped cleanly: every broker unregistered" and the overview "1 cluster stopped cleanly", its slave up
    outages = served.api.clusters()["outages"]
    assert (outages["clusters_stopped_cleanly"], outages["clusters_unregistered"]) == (["cA"], [])
    assert served.api.overview()["clusters_stopped_cleanly"] == 0
    proto, transport = served.connect()
    register(proto, transport, MASTER, "broker-a", extra={"clusterName": "cA", "brokerId": "0"})
    transport.loseConnection()  # kill -9 now: the connection closes without an unregistration
    served.clock.advance(0)
    samples = served.scrape()
    assert (value(samples, "namesrv_broker_groups_without_master"),
            value(samples, "namesrv_clusters_without_writable_queues")) == (1, 1)
    assert not [key for key in samples if key[0] == "namesrv_broker_group_stopped_cleanly_timestamp_seconds"]
    served.service.topology.stopService()


def unregister(served: Served, addr: str, broker_id: str, name: str = "broker-a", cluster: str = "cA") -> None:
    answer, _ = ask(served, RequestCode.UNREGISTER_BROKER, {"clusterName": cluster, "brokerAddr": addr,
                                                            "brokerName": name, "brokerId": broker_id}, account=None)
    assert answer.code == ResponseCode.SUCCESS


def test_the_master_stopped_alerts_time_is_the_masters_own_whatever_its_slaves_did_since(tmp_path):
    """NamesrvBrokerGroupMasterStoppedCleanly says "stopped cleanly at T": T was the group's last departure
    (KnownGroup.left), so a slave restarted while its master was down moved it to the slave's stop."""
    served = Served(tmp_path)
    for addr, broker_id in ((MASTER, "0"), (B1, "1")):
        register(*served.connect(), addr, "broker-a", extra={"clusterName": "cA", "brokerId": broker_id})
    unregister(served, MASTER, "0")
    master_stopped = served.clock.seconds()
    served.clock.advance(40)
    unregister(served, B1, "1")  # the slave restarted meanwhile: stopped, then started again
    served.clock.advance(20)
    register(*served.connect(), B1, "broker-a", extra={"clusterName": "cA", "brokerId": "1"})
    samples = served.scrape()
    assert value(samples, "namesrv_broker_group_master_stopped_cleanly", cluster="cA", broker="broker-a") == 1
    assert value(samples, "namesrv_broker_group_stopped_cleanly_timestamp_seconds", cluster="cA",
                 broker="broker-a") == master_stopped  # not the slave's stop, 40 s later
    register(*served.connect(), MASTER, "broker-a", extra={"clusterName": "cA", "brokerId": "0"})
    assert not [key for key in served.scrape() if key[0] == "namesrv_broker_group_stopped_cleanly_timestamp_seconds"]


def test_a_cluster_stopped_master_first_and_started_slave_first_after_a_restart_shows_the_masters_time(tmp_path):
    """The reverse order across a restart of the NameServer: the master stopped, its slave 12 s later (the
    group's last departure), the NameServer restarted, the slave registered first: the time shown was the
    slave's stop; now the master's own, kept in topology.json."""
    first = Served(tmp_path)
    first.service.topology.startService()
    for addr, broker_id in ((MASTER, "0"), (B1, "1")):
        register(*first.connect(), addr, "broker-a", extra={"clusterName": "cA", "brokerId": broker_id})
    unregister(first, MASTER, "0")
    master_stopped = first.clock.seconds()
    first.clock.advance(12)
    unregister(first, B1, "1")
    assert value(first.scrape(), "namesrv_broker_group_stopped_cleanly_timestamp_seconds", cluster="cA",
                 broker="broker-a") == master_stopped + 12  # the whole group: its last member's
    first.service.topology.stopService()
    assert json.loads((tmp_path / "topology.json").read_bytes())["groups"][0]["master_left"] == master_stopped
    again = Served(tmp_path)
    again.clock.advance(60)
    register(*again.connect(), B1, "broker-a", extra={"clusterName": "cA", "brokerId": "1"})  # the slave first
    samples = again.scrape()
    assert value(samples, "namesrv_broker_group_master_stopped_cleanly", cluster="cA", broker="broker-a") == 1
    assert value(samples, "namesrv_broker_group_stopped_cleanly_timestamp_seconds", cluster="cA",
                 broker="broker-a") == master_stopped


def test_a_topology_file_without_the_masters_time_reads_as_before():
    """A file a version before master_left wrote: the group's last departure, as then."""
    data = (b'{"format":1,"groups":[{"cluster":"cA","broker":"broker-a","since":1.0,"left":30.0,'
            b'"how":"unregistered","members":[[0,"10.0.0.1:10911",1.0],[1,"10.0.2.1:10911",1.0]],"up":[1],'
            b'"master_how":"unregistered"}]}')
    (group,) = decode(data).values()
    assert (group.master_how, group.master_left, group.left) == ("unregistered", None, 30.0)
    topology = Topology(lambda: 100.0, KeptHosts())
    topology.restore(decode(data))
    assert b'"master_left"' not in encode(topology)  # written only when set
    topology.heard("unregistered", {"cluster": "cA", "broker": "broker-a", "addr": "10.0.2.1:10911", "id": 1})
    topology.heard("registered", {"cluster": "cA", "broker": "broker-a", "addr": "10.0.0.1:10911", "id": 0})
    assert topology.group("cA", "broker-a").master_left is None
    topology.heard("closed", {"cluster": "cA", "broker": "broker-a", "addr": "10.0.0.1:10911", "id": 0})
    assert topology.group("cA", "broker-a").master_left == 100.0
    assert decode(encode(topology))[("cA", "broker-a")].master_left == 100.0
