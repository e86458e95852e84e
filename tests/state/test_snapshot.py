"""Route snapshots: what a warm-restarted NameServer answers, and how restored brokers end."""

from __future__ import annotations

import json

import pytest

from tests.state.test_routes import BOTH, MASTER_A, MASTER_B, SLAVE_A, V5, manager, register
from twisted_namesrv.bodies.register import RegistrationRefused
from twisted_namesrv.bodies.route import cluster_info_bean, queue_mapping_info, topic_list_body, topic_route_bean
from twisted_namesrv.remoting import fastjson
from twisted_namesrv.state.routes import FILTER_SERVERS_MAX, RouteInfoManager
from twisted_namesrv.state.snapshot import SnapshotError, export_routes, import_routes

# as decode_register_body stores it: in bean order, currIdMap keyed by int
MAPPING = {"T1": queue_mapping_info({"bname": "broker-a", "epoch": 1, "scope": "c1", "totalQueues": 8,
                                     "currIdMap": {"0": 0, "1": 1}})}


def answers(routes: RouteInfoManager) -> list[bytes]:
    """Every route, the cluster info and the topic list, as a client would receive them."""
    v5, concurrent = routes.profile.v5_bodies, routes.profile.concurrent_tables
    bodies = [fastjson.dumps_bytes(cluster_info_bean(routes.brokerAddrTable, routes.clusterAddrTable, v5, concurrent)),
              topic_list_body(routes.all_topics(), None, concurrent)]
    for topic in routes.all_topics():
        route = routes.pickup_topic_route_data(topic)
        bodies.append(fastjson.dumps_bytes(topic_route_bean(route.queueDatas, route.brokerDatas,
                                                            route.filterServerTable, None,
                                                            route.topicQueueMappingByBroker, v5)))
    return bodies


def populated(profile):
    routes, clock = manager(profile)
    register(routes, addr=MASTER_A, topics=("T1", "T2", "%RETRY%g"), filters=["10.0.0.9:1"], channel=1,
             mappings=MAPPING if profile is V5 else None, timeout=60_000 if profile is V5 else None)
    register(routes, addr=SLAVE_A, broker_id=1, topics=("T1", "T2", "%RETRY%g"), channel=2)
    register(routes, cluster="c2", addr=MASTER_B, name="broker-b", topics=("T2", "T3"), channel=3)
    return routes, clock


def restored(profile, snapshot: dict):
    routes, clock = manager(profile)
    assert import_routes(routes, json.loads(json.dumps(snapshot))) == 3  # through JSON, as on disk
    return routes, clock


@BOTH
def test_a_restored_server_answers_exactly_what_it_answered(profile):
    before, _ = populated(profile)
    after, _ = restored(profile, export_routes(before))
    assert answers(after) == answers(before)
    assert all(live.channel is None and live.restored for live in after.brokerLiveTable.values())


@BOTH
def test_a_restored_table_shares_its_alike_queue_data(profile):
    """Entries alike are one QueueData once restored, as a registration leaves them (a snapshot
    of a million topics made a million of them), and answer as before."""
    before, _ = populated(profile)
    after, _ = restored(profile, export_routes(before))
    held = [queues["broker-a"] for queues in after.topicQueueTable.values() if "broker-a" in queues]
    assert len(held) == 3 and len({id(queue) for queue in held}) == 1
    assert answers(after) == answers(before)


@BOTH
def test_restored_brokers_expire_after_their_timeout_unless_they_register_again(profile):
    routes, clock = restored(profile, export_routes(populated(profile)[0]))
    clock.advance(30)
    register(routes, addr=MASTER_A, topics=("T1", "T2", "%RETRY%g"), channel=7)  # broker-a's master is back
    clock.advance(95)  # past 120 s since the restart (and past 60 s for 5.3.3's own timeout)
    routes.scan_not_active_broker()
    assert list(routes.brokerAddrTable) == ["broker-a"] and routes.brokerAddrTable["broker-a"].brokerAddrs == {
        0: MASTER_A}
    assert sorted(routes.topicQueueTable) == ["%RETRY%g", "T1", "T2"]
    assert not routes.brokerLiveTable[routes.live_key("c1", MASTER_A)].restored


@BOTH
def test_first_registration_after_a_restore_applies_the_whole_table(profile):
    events = []
    routes, _ = manager(profile)
    routes.listen(lambda kind, info: events.append((kind, info["addr"])))
    import_routes(routes, export_routes(populated(profile)[0]))
    register(routes, addr=MASTER_B, name="broker-b", cluster="c2", topics=("T2", "T3", "T4"), channel=9)
    assert "broker-b" in routes.topicQueueTable["T4"]  # same data version, yet applied
    assert events == [("confirmed", MASTER_B)]


@pytest.mark.parametrize("damage", [
    lambda s: s.update(format=99),
    lambda s: s.update(profile="1.0"),
    lambda s: s["brokerLiveTable"][0].update(dataVersion="x"),
    lambda s: s.pop("topicQueueTable"),
    lambda s: s["brokerAddrTable"]["broker-a"].update(brokerAddrs=[["zero", "addr"]]),
])
def test_a_damaged_snapshot_changes_nothing(damage):
    snapshot = export_routes(populated(V5)[0])
    damage(snapshot)
    routes, _ = manager(V5)
    with pytest.raises(SnapshotError):
        import_routes(routes, snapshot)
    assert (routes.topicQueueTable, routes.brokerAddrTable, routes.brokerLiveTable) == ({}, {}, {})


#: populated(V5): broker groups 2, brokers 3, broker-a's members 2 and topics 3, topic-queue entries 8
#: (5 queue entries and static topic T1's mapping of 2 queues); each limit one under what it holds
UNDER_THE_LIMITS = [({"maxBrokerGroups": 1}, "max_broker_groups"), ({"maxBrokers": 2}, "max_brokers"),
                    ({"maxBrokersPerGroup": 1}, "max_brokers_per_group"),
                    ({"maxTopicsPerBroker": 2}, "max_topics_per_broker"),
                    ({"maxTopicQueueEntries": 7}, "max_topic_queue_entries")]
LONG = "x" * 17  # maxNameLength 16 below


@pytest.mark.parametrize("limits,reason", UNDER_THE_LIMITS)
def test_a_snapshot_past_a_limit_of_the_tables_is_refused_and_changes_nothing(limits, reason):
    """A snapshot holds no more than registrations could have put in the tables under this server's
    limits: one written under larger limits (or crafted) is refused as the registration would be."""
    snapshot = json.loads(json.dumps(export_routes(populated(V5)[0])))
    routes, _ = manager(V5, **limits)
    with pytest.raises(RegistrationRefused) as refused:
        import_routes(routes, snapshot)
    assert refused.value.reason == reason
    assert (routes.topicQueueTable, routes.brokerAddrTable, routes.brokerLiveTable) == ({}, {}, {})
    assert (routes.queueEntries, routes.mappingEntries, routes.topicsOfGroup, routes.generation) == (0, 0, {}, 0)


def test_a_snapshot_at_the_limits_loads():
    """The same rule as a registration's: holding exactly a limit is within it."""
    snapshot = json.loads(json.dumps(export_routes(populated(V5)[0])))
    routes, _ = manager(V5, maxBrokerGroups=2, maxBrokers=3, maxBrokersPerGroup=2, maxTopicsPerBroker=3,
                        maxTopicQueueEntries=8, maxNameLength=16)
    assert import_routes(routes, snapshot) == 3


@pytest.mark.parametrize("craft", [
    lambda s: s["topicQueueTable"].update({LONG: [["broker-b", 4, 4, 6, 0]]}),
    lambda s: s["brokerAddrTable"]["broker-b"].update(zoneName=LONG),
    lambda s: s["brokerAddrTable"]["broker-b"].update(brokerAddrs=[[0, LONG]]),
    lambda s: s["clusterAddrTable"].update({LONG: ["broker-b"]}),
    lambda s: s["brokerLiveTable"][0].update(haServerAddr=LONG),
    lambda s: s["filterServerTable"][0].__setitem__(2, [LONG]),
    lambda s: s["topicQueueMappingInfoTable"]["T1"]["broker-a"].update(scope=LONG),
    lambda s: s["topicQueueTable"]["T3"][0].__setitem__(0, LONG),  # a queue of a group nobody lists
], ids=["topic", "zone", "addr", "cluster", "ha", "filter server", "mapping", "queue group"])
def test_a_snapshot_with_a_name_past_max_name_length_is_refused(craft):
    snapshot = json.loads(json.dumps(export_routes(populated(V5)[0])))
    craft(snapshot)
    routes, _ = manager(V5, maxNameLength=16)
    with pytest.raises(RegistrationRefused) as refused:
        import_routes(routes, snapshot)
    assert refused.value.reason == "max_name_length" and routes.brokerAddrTable == {}


def test_a_snapshot_with_more_filter_servers_than_a_registration_may_list_is_refused():
    snapshot = json.loads(json.dumps(export_routes(populated(V5)[0])))
    snapshot["filterServerTable"][0][2] = [f"10.0.0.{i}:1" for i in range(FILTER_SERVERS_MAX + 1)]
    routes, _ = manager(V5)
    with pytest.raises(RegistrationRefused) as refused:
        import_routes(routes, snapshot)
    assert refused.value.reason == "filter_servers" and routes.brokerAddrTable == {}
