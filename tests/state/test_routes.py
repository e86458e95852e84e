"""RouteInfoManager: the route tables, registration rules and expiry, for both Java generations.

Pure state, an injected clock (twisted.internet.task.Clock.seconds), no reactor."""

from __future__ import annotations

import pytest
from twisted.internet import task

from twisted_namesrv import compat
from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig
from twisted_namesrv.bodies.route import BrokerData, DataVersion, QueueData
from twisted_namesrv.state import settling
from twisted_namesrv.state.config import NamesrvConfig
from twisted_namesrv.state.queue_table import TopicQueueTable
from twisted_namesrv.state.routes import (
    DEFAULT_BROKER_CHANNEL_EXPIRED_TIME,
    TOPIC,
    RegisterRequest,
    RouteInfoManager,
    has_unit_flag,
    has_unit_sub_flag,
)

V4, V5 = compat.JAVA_4_9_8, compat.JAVA_5_3_3
BOTH = pytest.mark.parametrize("profile", [V4, V5], ids=["4.9.8", "5.3.3"])

MASTER_A, SLAVE_A, SLAVE_A2 = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"
MASTER_B, MASTER_C = "10.0.1.1:10911", "10.0.2.1:10911"
START = 1_000.0  # seconds on the fake clock when a test begins


def topic(name: str, perm: int = 6, sysflag: int = 0, queues: int = 8) -> TopicConfig:
    return TopicConfig(name, queues, queues, perm, topicSysFlag=sysflag)


def body(*topics: str | TopicConfig, version: tuple[int, ...] = (1, 1), filters: list[str] | None = None,
         mappings: dict | None = None) -> RegisterBrokerBody:
    configs = [t if isinstance(t, TopicConfig) else topic(t) for t in topics]
    return RegisterBrokerBody(DataVersion(*version), {c.topicName: c for c in configs}, list(filters or []),
                              dict(mappings or {}))


def manager(profile: compat.Profile, notifier=None, **switches) -> tuple[RouteInfoManager, task.Clock]:
    """A manager on a fake clock; ``switches`` are config keys (supportActingMaster=True)."""
    clock = task.Clock()
    clock.advance(START)
    config = NamesrvConfig({"compatVersion": profile.name, **switches})
    return RouteInfoManager(config, clock.seconds, notifier=notifier), clock


def register(routes: RouteInfoManager, *, cluster: str = "c1", addr: str = MASTER_A, name: str = "broker-a",
             broker_id: int = 0, topics: tuple = ("T1", "T2"), version: tuple[int, ...] = (1, 1),
             ha: str | None = None, channel: object = None, acting: bool | None = None,
             timeout: int | None = None, filters: list[str] | None = None, mappings: dict | None = None):
    return routes.register_broker(RegisterRequest(
        cluster, addr, name, broker_id, ha, body(*topics, version=version, filters=filters, mappings=mappings),
        channel=channel, heartbeatTimeoutMillis=timeout, enableActingMaster=acting))


def perms(routes: RouteInfoManager, broker: str = "broker-a") -> dict[str, int]:
    return {t: q[broker].perm for t, q in routes.topicQueueTable.items() if broker in q}


# -- registration -----------------------------------------------------------------------------

@BOTH
def test_the_tables_keep_no_string_of_the_decoded_body(profile):
    """A topic new to topicQueueTable is named by a string of its own, not the decoded body's:
    those lie in the heap between the body's TopicConfigs, and a table keeping them once the
    body is freed kept half of every pool they filled from being reused (8 MB at 100k topics).
    A second group's registration of the same topics keeps none of its strings either."""
    routes, _ = manager(profile)
    first, second = body(*(f"T{i}" for i in range(100))), body(*(f"T{i}" for i in range(100)))
    for name, addr, sent in (("broker-a", MASTER_A, first), ("broker-b", MASTER_B, second)):
        assert routes.register_broker(RegisterRequest("c1", addr, name, 0, None, sent)) is not None
    decoded = {id(text) for sent in (first, second) for topic, config in sent.topicConfigTable.items()
               for text in (topic, config.topicName)}
    assert len(routes.topicQueueTable) == 100 and all(len(queues) == 2 for queues in routes.topicQueueTable.values())
    assert [topic for topic in routes.topicQueueTable if id(topic) in decoded] == []


@BOTH
def test_topics_given_the_same_queues_share_one_queue_data(profile):
    """A registration gives its topics with the same queue numbers and perm one QueueData, not
    one each (3 groups of 100k alike topics held 300k of them, 19 MB).  Shared, it is frozen: a
    change of perm replaces a group's, with replacements shared the same way, and no other
    group's or topic's changes with it."""
    routes, _ = manager(profile)
    register(routes, topics=(*(f"T{i}" for i in range(50)), topic("R", perm=4)))
    register(routes, addr=MASTER_B, name="broker-b", topics=("T0", "T1"))

    def held(broker: str) -> set[int]:
        return {id(queues[broker]) for queues in routes.topicQueueTable.values() if broker in queues}
    assert len(held("broker-a")) == 2 and len(held("broker-b")) == 1
    assert routes.wipe_write_perm_of_broker("broker-a") == 51
    assert set(perms(routes).values()) == {4} and set(perms(routes, "broker-b").values()) == {6}
    assert len(held("broker-a")) == 2
    register(routes, topics=(*(f"T{i}" for i in range(50)), topic("R", perm=4)), version=(1, 2))
    assert perms(routes)["R"] == 4 and {perms(routes)[f"T{i}"] for i in range(50)} == {6}


@BOTH
def test_register_master_fills_every_table(profile):
    routes, _ = manager(profile)
    result = register(routes, topics=(topic("T1"), topic("T2", perm=4, sysflag=1, queues=4)), ha="10.0.0.1:10912",
                      channel="ch-a", filters=["10.0.0.1:20000"])
    assert result is not None and result.masterAddr is None and result.haServerAddr is None
    assert routes.topicQueueTable == {
        "T1": {"broker-a": QueueData("broker-a", 8, 8, 6, 0)},
        "T2": {"broker-a": QueueData("broker-a", 4, 4, 4, 1)},
    }
    assert routes.brokerAddrTable["broker-a"].brokerAddrs == {0: MASTER_A}
    assert routes.brokerAddrTable["broker-a"].cluster == "c1"
    assert dict(routes.clusterAddrTable) == {"c1": {"broker-a": None}}
    key = routes.live_key("c1", MASTER_A)
    live = routes.brokerLiveTable[key]
    assert (live.lastUpdateTimestamp, live.channel, live.haServerAddr) == (int(START * 1000), "ch-a", "10.0.0.1:10912")
    assert live.dataVersion == DataVersion(1, 1)
    assert routes.filterServerTable == {key: ["10.0.0.1:20000"]}
    route = routes.pickup_topic_route_data("T1")
    assert [b.brokerAddrs for b in route.brokerDatas] == [{0: MASTER_A}]
    assert route.filterServerTable == {MASTER_A: ["10.0.0.1:20000"]}
    assert routes.pickup_topic_route_data("nope") is None


def test_live_table_keyed_by_address_in_4_9_8():
    routes, _ = manager(V4)
    register(routes, cluster="c1", name="broker-a")
    register(routes, cluster="c2", name="broker-x")  # the same address in another cluster
    assert list(routes.brokerLiveTable) == [MASTER_A]
    assert routes.query_broker_topic_config("anything", MASTER_A) == DataVersion(1, 1)


def test_live_table_keyed_by_cluster_and_address_in_5_3_3():
    routes, _ = manager(V5)
    register(routes, cluster="c1", name="broker-a")
    register(routes, cluster="c2", name="broker-x", version=(2, 2))
    assert set(routes.brokerLiveTable) == {("c1", MASTER_A), ("c2", MASTER_A)}
    assert routes.query_broker_topic_config("c1", MASTER_A) == DataVersion(1, 1)
    assert routes.query_broker_topic_config("c2", MASTER_A) == DataVersion(2, 2)
    assert routes.query_broker_topic_config("c3", MASTER_A) is None


@BOTH
def test_slave_registration_returns_the_live_masters_addresses(profile):
    routes, _ = manager(profile)
    early = register(routes, addr=SLAVE_A, broker_id=1, ha="10.0.0.2:10912")
    assert (early.masterAddr, early.haServerAddr) == (None, None)  # no master yet
    register(routes, addr=MASTER_A, broker_id=0, ha="10.0.0.1:10912")
    result = register(routes, addr=SLAVE_A, broker_id=1, ha="10.0.0.2:10912")
    assert (result.masterAddr, result.haServerAddr) == (MASTER_A, "10.0.0.1:10912")
    assert routes.brokerAddrTable["broker-a"].brokerAddrs == {0: MASTER_A, 1: SLAVE_A}
    master = register(routes, addr=MASTER_A, broker_id=0, ha="10.0.0.1:10912")
    assert (master.masterAddr, master.haServerAddr) == (None, None)


@BOTH
def test_slave_without_a_live_master_entry_gets_no_master(profile):
    routes, _ = manager(profile)
    register(routes, addr=MASTER_A, ha="10.0.0.1:10912")
    routes.brokerLiveTable.pop(routes.live_key("c1", MASTER_A))
    result = register(routes, addr=SLAVE_A, broker_id=1)
    assert (result.masterAddr, result.haServerAddr) == (None, None)


@BOTH
def test_slave_does_not_change_queue_data(profile):
    routes, _ = manager(profile)
    register(routes, topics=(topic("T1", perm=6), "T2"))
    # an old-version slave (enableActingMaster not sent) with other perms and an extra topic
    register(routes, addr=SLAVE_A, broker_id=1, topics=(topic("T1", perm=4, queues=2), "T2", "T3"), version=(9, 9))
    assert routes.topicQueueTable["T1"]["broker-a"] == QueueData("broker-a", 8, 8, 6, 0)
    assert "T3" not in routes.topicQueueTable


def test_4_9_8_slave_never_applies_topics_even_when_alone():
    routes, _ = manager(V4)
    register(routes, addr=SLAVE_A, broker_id=1, topics=("T1", "T2"), acting=True)
    assert routes.topicQueueTable == {}
    assert routes.brokerAddrTable["broker-a"].brokerAddrs == {1: SLAVE_A}
    assert routes.brokerAddrTable["broker-a"].enableActingMaster is False  # no 5.x attributes in 4.9.8


def test_5_3_3_prime_slave_with_acting_master_applies_topics_without_write_perm():
    routes, _ = manager(V5)
    register(routes, addr=SLAVE_A, broker_id=1, topics=(topic("T1", perm=6), topic("T2", perm=7)), acting=True)
    assert perms(routes) == {"T1": 4, "T2": 5}
    assert routes.brokerAddrTable["broker-a"].enableActingMaster is True


def test_5_3_3_prime_slave_without_acting_master_keeps_perm():
    routes, _ = manager(V5)
    register(routes, addr=SLAVE_A, broker_id=1, topics=(topic("T1", perm=6), "T2"), acting=False)
    assert perms(routes) == {"T1": 6, "T2": 6}


def test_5_3_3_only_the_lowest_slave_is_prime():
    routes, _ = manager(V5)
    register(routes, addr=SLAVE_A, broker_id=1, topics=("T1", "T2"), acting=True)
    register(routes, addr=SLAVE_A2, broker_id=2, topics=("T1", "T2", "T3"), acting=True, version=(5, 5))
    assert "T3" not in routes.topicQueueTable
    # with a master present, the slave with id 1 is no longer prime
    register(routes, addr=MASTER_A, broker_id=0, topics=("T1", "T2"), acting=True)
    register(routes, addr=SLAVE_A, broker_id=1, topics=("T1", "T2", "T4"), acting=True, version=(6, 6))
    assert "T4" not in routes.topicQueueTable
    assert perms(routes) == {"T1": 6, "T2": 6}  # the master's registration wrote full perms


def test_5_3_3_old_version_slave_is_never_prime():
    routes, _ = manager(V5)
    register(routes, addr=SLAVE_A, broker_id=1, topics=("T1", "T2"), acting=None)
    assert routes.topicQueueTable == {}


@BOTH
def test_reregistration_with_unchanged_version_does_not_reapply(profile):
    routes, clock = manager(profile)
    register(routes, topics=("T1", "T2"), version=(1, 1))
    assert routes.wipe_write_perm_of_broker("broker-a") == 2
    clock.advance(30)
    register(routes, topics=("T1", "T2"), version=(1, 1))
    assert perms(routes) == {"T1": 4, "T2": 4}
    live = routes.brokerLiveTable[routes.live_key("c1", MASTER_A)]
    assert live.lastUpdateTimestamp == int((START + 30) * 1000)  # but it counts as a heartbeat
    register(routes, topics=("T1", "T2"), version=(1, 2))
    assert perms(routes) == {"T1": 6, "T2": 6}


def test_4_9_8_unchanged_version_skips_new_topics_too():
    routes, _ = manager(V4)
    register(routes, topics=("T1", "T2"), version=(1, 1))
    register(routes, topics=("T1", "T2", "T3"), version=(1, 1))
    assert "T3" not in routes.topicQueueTable


def test_5_3_3_unchanged_version_still_adds_a_topic_missing_for_the_broker():
    routes, _ = manager(V5)
    register(routes, topics=("T1", "T2"), version=(1, 1))
    routes.wipe_write_perm_of_broker("broker-a")
    register(routes, topics=("T1", "T2", "T3"), version=(1, 1))
    assert perms(routes) == {"T1": 4, "T2": 4, "T3": 6}


def test_5_3_3_state_version_is_part_of_the_data_version():
    routes, _ = manager(V5)
    register(routes, topics=("T1", "T2"), version=(1, 1, 0))
    routes.wipe_write_perm_of_broker("broker-a")
    register(routes, topics=("T1", "T2"), version=(1, 1, 1))
    assert perms(routes) == {"T1": 6, "T2": 6}


def test_4_9_8_state_version_is_ignored():
    routes, _ = manager(V4)
    register(routes, topics=("T1", "T2"), version=(1, 1, 0))
    routes.wipe_write_perm_of_broker("broker-a")
    register(routes, topics=("T1", "T2"), version=(1, 1, 1))
    assert perms(routes) == {"T1": 4, "T2": 4}


@BOTH
def test_changed_version_does_not_remove_missing_topics(profile):
    routes, _ = manager(profile)
    register(routes, topics=("T1", "T2", "T3"), version=(1, 1))
    register(routes, topics=("T1", "T2"), version=(2, 2))
    assert set(routes.topicQueueTable) == {"T1", "T2", "T3"}


def test_5_3_3_delete_topic_with_broker_registration_removes_missing_topics():
    routes, _ = manager(V5, deleteTopicWithBrokerRegistration=True)
    register(routes, topics=("T1", "T2", "T3"))
    register(routes, name="broker-b", addr=MASTER_B, topics=("T3", "T9"))
    register(routes, topics=("T1", "T2"), version=(2, 2))
    assert set(routes.topicQueueTable) == {"T1", "T2", "T3", "T9"}
    assert set(routes.topicQueueTable["T3"]) == {"broker-b"}
    register(routes, name="broker-b", addr=MASTER_B, topics=("T9", "T8"), version=(2, 2))
    assert "T3" not in routes.topicQueueTable  # its last broker dropped it


def test_5_3_3_delete_topic_with_registration_skipped_with_static_topic_mappings():
    routes, _ = manager(V5, deleteTopicWithBrokerRegistration=True)
    register(routes, topics=("T1", "T2", "T3"))
    mapping = {"T1": {"bname": "broker-a", "topic": "T1", "totalQueues": 8, "epoch": 1}}
    register(routes, topics=("T1", "T2"), version=(2, 2), mappings=mapping)
    assert set(routes.topicQueueTable) == {"T1", "T2", "T3"}
    assert routes.topicQueueMappingInfoTable["T1"]["broker-a"]["totalQueues"] == 8


def test_4_9_8_ignores_delete_topic_with_registration():
    routes, _ = manager(V4, deleteTopicWithBrokerRegistration=True)
    register(routes, topics=("T1", "T2", "T3"))
    register(routes, topics=("T1", "T2"), version=(2, 2))
    assert set(routes.topicQueueTable) == {"T1", "T2", "T3"}


@BOTH
def test_same_address_switching_id_keeps_one_entry(profile):
    routes, _ = manager(profile)
    register(routes, addr=MASTER_A, broker_id=0)
    register(routes, addr=SLAVE_A, broker_id=1)
    # failover: the slave's address comes back as master, the old master's address as slave
    register(routes, addr=SLAVE_A, broker_id=0, version=(3, 3))
    assert routes.brokerAddrTable["broker-a"].brokerAddrs == {0: SLAVE_A}
    register(routes, addr=MASTER_A, broker_id=1, version=(3, 3))
    assert routes.brokerAddrTable["broker-a"].brokerAddrs == {0: SLAVE_A, 1: MASTER_A}


def test_5_3_3_refuses_a_first_registration_with_exactly_one_topic():
    routes, _ = manager(V5)
    assert register(routes, topics=("T1",)) is None
    assert routes.brokerAddrTable == {"broker-a": BrokerData("c1", "broker-a", {})}
    assert dict(routes.clusterAddrTable) == {"c1": {"broker-a": None}}
    assert routes.brokerLiveTable == {} and routes.topicQueueTable == {}
    assert register(routes, topics=("T1", "T2")) is not None
    # once registered, a single-topic (incremental) registration is fine
    assert register(routes, topics=("T3",), version=(2, 2)) is not None
    assert set(routes.topicQueueTable) == {"T1", "T2", "T3"}


def test_5_3_3_refusal_is_per_broker_id():
    routes, _ = manager(V5)
    register(routes, topics=("T1", "T2"))
    assert register(routes, addr=SLAVE_A, broker_id=1, topics=("T1",)) is None
    assert register(routes, addr=SLAVE_A, broker_id=1, topics=()) is not None  # zero topics is not one


def test_4_9_8_accepts_a_first_registration_with_one_topic():
    routes, _ = manager(V4)
    assert register(routes, topics=("T1",)) is not None
    assert set(routes.topicQueueTable) == {"T1"}


def test_5_3_3_older_state_version_on_another_address_is_ignored():
    routes, _ = manager(V5)
    register(routes, addr=MASTER_A, version=(1, 1, 5))
    result = register(routes, addr=MASTER_B, version=(1, 1, 3), topics=("T1", "T2", "T3"))
    assert (result.masterAddr, result.haServerAddr) == (None, None)
    assert routes.brokerAddrTable["broker-a"].brokerAddrs == {0: MASTER_A}
    assert ("c1", MASTER_B) not in routes.brokerLiveTable
    assert "T3" not in routes.topicQueueTable
    register(routes, addr=MASTER_B, version=(1, 1, 6), topics=("T1", "T2", "T3"))
    assert routes.brokerAddrTable["broker-a"].brokerAddrs == {0: MASTER_B}


def test_5_3_3_registering_a_lower_id_notifies_the_group():
    sent = []
    routes, _ = manager(V5, notifyMinBrokerIdChanged=True,
                        notifier=lambda addr, header: sent.append((addr, header)))
    register(routes, addr=SLAVE_A, broker_id=1, acting=True)
    register(routes, addr=SLAVE_A2, broker_id=2, acting=True)
    assert sent == []
    register(routes, addr=MASTER_A, broker_id=0, ha="10.0.0.1:10912", acting=True)
    header = {"minBrokerId": "0", "minBrokerAddr": MASTER_A, "haBrokerAddr": "10.0.0.1:10912"}
    assert sorted(sent, key=lambda s: s[0]) == [(SLAVE_A, header), (SLAVE_A2, header)]


# -- liveness -----------------------------------------------------------------------------------

@BOTH
def test_scan_expires_a_broker_only_past_its_timeout(profile):
    routes, clock = manager(profile)
    register(routes, topics=("T1", "T2"), channel="ch-a")
    register(routes, name="broker-b", addr=MASTER_B, topics=("T2", "T3"), channel=None)
    clock.advance(DEFAULT_BROKER_CHANNEL_EXPIRED_TIME / 1000)  # exactly the timeout: still alive
    assert routes.scan_not_active_broker() == []
    assert len(routes.brokerLiveTable) == 2
    clock.advance(0.001)
    assert routes.scan_not_active_broker() == ["ch-a"]  # broker-b expired too, but had no channel
    assert routes.brokerLiveTable == {} and routes.brokerAddrTable == {}
    assert routes.topicQueueTable == {} and dict(routes.clusterAddrTable) == {}
    assert routes.scan_not_active_broker() == []


@BOTH
def test_scan_keeps_a_broker_whose_heartbeat_is_refreshed(profile):
    routes, clock = manager(profile)
    register(routes, channel="ch-a")
    clock.advance(100)
    routes.update_broker_info_update_timestamp("c1", MASTER_A)
    clock.advance(100)
    assert routes.scan_not_active_broker() == []
    clock.advance(21)
    assert routes.scan_not_active_broker() == ["ch-a"]


def test_5_3_3_heartbeat_timeout_is_per_broker():
    routes, clock = manager(V5)
    register(routes, channel="short", timeout=10_000)
    register(routes, name="broker-b", addr=MASTER_B, channel="default")
    clock.advance(10)
    assert routes.scan_not_active_broker() == []
    clock.advance(0.001)
    assert routes.scan_not_active_broker() == ["short"]
    assert set(routes.brokerAddrTable) == {"broker-b"}
    clock.advance(110)
    assert routes.scan_not_active_broker() == ["default"]


def test_5_3_3_heartbeat_timeout_zero_is_taken_literally():
    routes, clock = manager(V5)
    register(routes, channel="zero", timeout=0)
    clock.advance(0.001)
    assert routes.scan_not_active_broker() == ["zero"]


@BOTH
def test_channel_destroy_removes_every_broker_of_that_channel(profile):
    routes, _ = manager(profile)
    register(routes, name="broker-a", addr=MASTER_A, topics=("T1", "T2"), channel=7)
    register(routes, name="broker-a", addr=SLAVE_A, broker_id=1, topics=("T1", "T2"), channel=7)
    register(routes, name="broker-b", addr=MASTER_B, topics=("T2", "T3"), channel=7)
    register(routes, name="broker-c", addr=MASTER_C, topics=("T3", "T4"), channel=8)
    routes.on_channel_destroy(7)
    assert set(routes.brokerAddrTable) == {"broker-c"}
    assert [k[1] if isinstance(k, tuple) else k for k in routes.brokerLiveTable] == [MASTER_C]
    assert routes.topicQueueTable == {"T3": {"broker-c": routes.topicQueueTable["T3"]["broker-c"]},
                                      "T4": {"broker-c": routes.topicQueueTable["T4"]["broker-c"]}}
    assert dict(routes.clusterAddrTable) == {"c1": {"broker-c": None}}
    routes.on_channel_destroy(99)  # an unknown channel changes nothing
    assert set(routes.brokerAddrTable) == {"broker-c"}


@BOTH
def test_channels_destroyed_together_leave_what_one_by_one_leaves(profile):
    """on_channels_destroy (a rack's connections lost in one reactor turn) removes groups' queue
    data in one scan: same tables, events in closing order; one publication naming what changed."""
    def scene():
        clock = task.Clock()
        events, changed = [], []
        config = NamesrvConfig({"compatVersion": profile.name})
        routes = RouteInfoManager(config, clock.seconds)
        routes.listen(lambda kind, info: events.append((kind, info)))
        routes.subscribe(changed.append)
        register(routes, name="broker-a", addr=MASTER_A, topics=("T1", "T2"), channel=1, acting=True)
        register(routes, name="broker-a", addr=SLAVE_A, broker_id=1, topics=("T1", "T2"), channel=2, acting=True)
        register(routes, name="broker-b", addr=MASTER_B, topics=("T2", "T3"), channel=3)
        register(routes, name="broker-c", addr=MASTER_C, topics=("T3", "T4"), channel=4)
        register(routes, name="broker-d", addr="10.0.3.1:10911", topics=("T3", "T5"), channel=5)
        events.clear()
        changed.clear()
        return routes, events, changed
    one_by_one, together = scene(), scene()
    closed = {5: "connection closed", 1: "idle: no request for 120 s", 3: "connection closed", 99: "unknown"}
    for channel, reason in closed.items():
        one_by_one[0].on_channel_destroy(channel, reason)
    together[0].on_channels_destroy(closed)
    for routes, _, changed in (one_by_one, together):
        assert set(routes.brokerAddrTable) == {"broker-a", "broker-c"}
        assert {t: sorted(q) for t, q in routes.topicQueueTable.items()} == {
            "T1": ["broker-a"], "T2": ["broker-a"], "T3": ["broker-c"], "T4": ["broker-c"]}
        assert {"broker-b", "broker-d"} == {b for change in changed for b in change.left}  # T2, T3, T5 with them
        assert {"broker-a", "broker-b", "broker-d"} <= {b for change in changed for b in change.brokers}
        assert not any(change.everything for change in changed)
    assert together[1] == one_by_one[1]
    assert [e[1]["broker"] for e in together[1]] == ["broker-d", "broker-a", "broker-b"]
    assert len(together[2]) == 1 and len(one_by_one[2]) == 3  # one change instead of one per channel
    assert perms(together[0]) == perms(one_by_one[0])


@BOTH
def test_channel_destroy_of_a_slave_keeps_the_group_and_its_topics(profile):
    routes, _ = manager(profile)
    register(routes, addr=MASTER_A, channel=1)
    register(routes, addr=SLAVE_A, broker_id=1, channel=2)
    routes.on_channel_destroy(2)
    assert routes.brokerAddrTable["broker-a"].brokerAddrs == {0: MASTER_A}
    assert perms(routes) == {"T1": 6, "T2": 6}


def test_5_3_3_master_loss_wipes_write_perm_of_an_acting_master_group():
    routes, _ = manager(V5)
    register(routes, addr=MASTER_A, channel=1, acting=True)
    register(routes, addr=SLAVE_A, broker_id=1, channel=2, acting=True)
    routes.on_channel_destroy(1)
    assert routes.brokerAddrTable["broker-a"].brokerAddrs == {1: SLAVE_A}
    assert perms(routes) == {"T1": 4, "T2": 4}


def test_5_3_3_master_loss_keeps_write_perm_without_acting_master():
    routes, _ = manager(V5)
    register(routes, addr=MASTER_A, channel=1, acting=False)
    register(routes, addr=SLAVE_A, broker_id=1, channel=2, acting=False)
    routes.on_channel_destroy(1)
    assert perms(routes) == {"T1": 6, "T2": 6}


def test_4_9_8_master_loss_keeps_write_perm():
    routes, _ = manager(V4)
    register(routes, addr=MASTER_A, channel=1, acting=True)
    register(routes, addr=SLAVE_A, broker_id=1, channel=2, acting=True)
    routes.on_channel_destroy(1)
    assert perms(routes) == {"T1": 6, "T2": 6}


@BOTH
def test_query_data_version_helpers(profile):
    routes, _ = manager(profile)
    assert routes.is_broker_topic_config_changed("c1", MASTER_A, DataVersion(1, 1))  # unknown broker
    register(routes, version=(1, 1))
    assert not routes.is_broker_topic_config_changed("c1", MASTER_A, DataVersion(1, 1))
    assert routes.is_broker_topic_config_changed("c1", MASTER_A, DataVersion(1, 2))
    assert routes.is_broker_topic_config_changed("c1", MASTER_A, None)


# -- unregistration -------------------------------------------------------------------------------

def test_4_9_8_unregister_removes_by_broker_id():
    routes, _ = manager(V4)
    register(routes, addr=MASTER_A)
    register(routes, addr=SLAVE_A, broker_id=1)
    routes.unregister_broker("c1", MASTER_A, "broker-a", 1)  # id and address disagree: the id wins
    assert routes.brokerAddrTable["broker-a"].brokerAddrs == {0: MASTER_A}
    assert list(routes.brokerLiveTable) == [SLAVE_A]  # the live entry goes by address


def test_5_3_3_unregister_removes_by_address():
    routes, _ = manager(V5)
    register(routes, addr=MASTER_A)
    register(routes, addr=SLAVE_A, broker_id=1)
    routes.unregister_broker("c1", MASTER_A, "broker-a", 1)  # id and address disagree: the address wins
    assert routes.brokerAddrTable["broker-a"].brokerAddrs == {1: SLAVE_A}
    assert list(routes.brokerLiveTable) == [("c1", SLAVE_A)]
    routes.unregister_broker("c1", SLAVE_A, "broker-a", None)  # brokerId is not needed
    assert routes.brokerAddrTable == {}


@BOTH
def test_unregistering_a_whole_group_strips_its_topics_and_empties_the_cluster(profile):
    routes, _ = manager(profile)
    register(routes, name="broker-a", addr=MASTER_A, topics=("T1", "T2"))
    register(routes, name="broker-a", addr=SLAVE_A, broker_id=1, topics=("T1", "T2"))
    register(routes, name="broker-b", addr=MASTER_B, topics=("T2", "T3"))
    register(routes, name="broker-c", addr=MASTER_C, cluster="c2", topics=("T3", "T4"))
    routes.unregister_broker("c1", MASTER_A, "broker-a", 0)
    assert set(routes.topicQueueTable) == {"T1", "T2", "T3", "T4"}  # the slave still serves broker-a
    routes.unregister_broker("c1", SLAVE_A, "broker-a", 1)
    assert "broker-a" not in routes.brokerAddrTable
    assert set(routes.topicQueueTable) == {"T2", "T3", "T4"}
    assert set(routes.topicQueueTable["T2"]) == {"broker-b"}
    assert dict(routes.clusterAddrTable) == {"c1": {"broker-b": None}, "c2": {"broker-c": None}}
    routes.unregister_broker("c1", MASTER_B, "broker-b", 0)
    assert dict(routes.clusterAddrTable) == {"c2": {"broker-c": None}}
    assert set(routes.topicQueueTable) == {"T3", "T4"} and set(routes.topicQueueTable["T3"]) == {"broker-c"}


@BOTH
def test_unregister_of_an_unknown_broker_changes_nothing(profile):
    routes, _ = manager(profile)
    register(routes)
    routes.unregister_broker("c1", MASTER_B, "broker-zzz", 0)
    assert routes.brokerAddrTable["broker-a"].brokerAddrs == {0: MASTER_A}
    assert len(routes.brokerLiveTable) == 1


def test_5_3_3_unregister_of_a_broker_whose_first_registration_was_refused_is_no_departure():
    """5.3.3 refuses a first registration of a single topic after making its group and cluster entries
    (as Java's registerBroker does); the broker's unregistration then removes them, as Java's, but no
    broker left: there was no "unregistered" event for the status page's "stopped cleanly" to show."""
    routes, _ = manager(V5)
    events = []
    routes.listen(lambda kind, info: events.append(kind))
    assert register(routes, topics=("T1",)) is None  # refused
    assert routes.brokerAddrTable["broker-a"].brokerAddrs == {} and "c1" in routes.clusterAddrTable
    routes.unregister_broker("c1", MASTER_A, "broker-a", 0)
    assert routes.brokerAddrTable == {} and dict(routes.clusterAddrTable) == {}
    assert "unregistered" not in events


def test_5_3_3_unregister_in_a_masterless_acting_group_wipes_write_perm():
    routes, _ = manager(V5)
    register(routes, addr=SLAVE_A, broker_id=1, acting=True)
    register(routes, addr=SLAVE_A2, broker_id=2, acting=True)
    assert routes.add_write_perm_of_broker("broker-a") == 2
    routes.unregister_broker("c1", SLAVE_A2, "broker-a", 2)
    assert perms(routes) == {"T1": 4, "T2": 4}


# -- administration ---------------------------------------------------------------------------------

@BOTH
def test_wipe_and_add_write_perm_counts_and_values(profile):
    routes, _ = manager(profile)
    register(routes, topics=(topic("T1", perm=6), topic("T2", perm=7), topic("T3", perm=4)))
    register(routes, name="broker-b", addr=MASTER_B, topics=(topic("T1", perm=6), topic("T9", perm=6)))
    assert routes.wipe_write_perm_of_broker("broker-a") == 3
    assert perms(routes) == {"T1": 4, "T2": 5, "T3": 4}
    assert perms(routes, "broker-b") == {"T1": 6, "T9": 6}
    assert routes.add_write_perm_of_broker("broker-a") == 3
    assert perms(routes) == {"T1": 6, "T2": 6, "T3": 6}  # set to 6: the inherit bit of T2 is lost
    assert routes.wipe_write_perm_of_broker("nobody") == 0
    assert routes.add_write_perm_of_broker(None) == 0


@BOTH
def test_delete_topic_without_cluster_removes_it_everywhere(profile):
    routes, _ = manager(profile)
    register(routes, topics=("T1", "T2"))
    register(routes, name="broker-c", addr=MASTER_C, cluster="c2", topics=("T1", "T3"))
    routes.delete_topic("T1")
    assert set(routes.topicQueueTable) == {"T2", "T3"}
    routes.delete_topic("T1", "")  # an empty cluster name means every cluster
    routes.delete_topic("nope")
    assert set(routes.topicQueueTable) == {"T2", "T3"}


@BOTH
def test_delete_topic_in_one_cluster(profile):
    routes, _ = manager(profile)
    register(routes, topics=("T1", "T2"))
    register(routes, name="broker-b", addr=MASTER_B, topics=("T1", "T2"))
    register(routes, name="broker-c", addr=MASTER_C, cluster="c2", topics=("T1", "T3"))
    routes.delete_topic("T1", "c1")
    assert set(routes.topicQueueTable["T1"]) == {"broker-c"}
    routes.delete_topic("T2", "c1")
    assert "T2" not in routes.topicQueueTable  # no broker left: the topic goes
    routes.delete_topic("T3", "unknown-cluster")
    assert set(routes.topicQueueTable) == {"T1", "T3"}


@BOTH
def test_register_topic_stops_at_the_first_unknown_broker(profile):
    routes, _ = manager(profile)
    register(routes, name="broker-a", addr=MASTER_A, topics=("T1", "T2"))
    register(routes, name="broker-b", addr=MASTER_B, topics=("T2", "T3"))
    register(routes, name="broker-c", addr=MASTER_C, topics=("T3", "T4"))
    queues = [QueueData("broker-b", 4, 4, 6), QueueData("ghost", 4, 4, 6), QueueData("broker-c", 4, 4, 6)]
    routes.register_topic("T1", queues)  # existing topic: partial update
    assert set(routes.topicQueueTable["T1"]) == {"broker-a", "broker-b"}
    assert routes.topicQueueTable["T1"]["broker-b"] == QueueData("broker-b", 4, 4, 6)
    routes.register_topic("NEW", queues)  # new topic: nothing at all
    assert "NEW" not in routes.topicQueueTable
    routes.register_topic("NEW", [QueueData("broker-c", 2, 2, 4)])
    assert routes.topicQueueTable["NEW"] == {"broker-c": QueueData("broker-c", 2, 2, 4)}
    routes.register_topic("EMPTY", [])
    assert "EMPTY" not in routes.topicQueueTable


# -- queries ------------------------------------------------------------------------------------------

@BOTH
def test_system_topic_list_is_cluster_and_broker_names(profile):
    routes, _ = manager(profile)
    assert routes.system_topic_list() == ([], None)
    register(routes, name="broker-a", addr=MASTER_A, cluster="c1")
    register(routes, name="broker-b", addr=MASTER_B, cluster="c1")
    register(routes, name="broker-c", addr=MASTER_C, cluster="c2")
    topics, addr = routes.system_topic_list()
    assert sorted(topics) == ["broker-a", "broker-b", "broker-c", "c1", "c2"]
    assert addr in {MASTER_A, MASTER_B, MASTER_C}


def test_system_topic_list_address_skips_an_empty_broker_group():
    routes, _ = manager(V5)
    register(routes, name="broker-a", topics=("T1",))  # refused: an empty BrokerData stays
    topics, addr = routes.system_topic_list()
    assert sorted(topics) == ["broker-a", "c1"] and addr is None


@BOTH
def test_unit_topic_lists_by_topic_sys_flag(profile):
    routes, _ = manager(profile)
    register(routes, topics=(topic("PLAIN", sysflag=0), topic("UNIT", sysflag=1), topic("SUB", sysflag=2),
                             topic("BOTH", sysflag=3)))
    assert sorted(routes.unit_topics(has_unit_flag)) == ["BOTH", "UNIT"]
    assert sorted(routes.unit_topics(has_unit_sub_flag)) == ["BOTH", "SUB"]
    assert routes.unit_topics(lambda f: not has_unit_flag(f) and has_unit_sub_flag(f)) == ["SUB"]


@BOTH
def test_topics_by_cluster(profile):
    routes, _ = manager(profile)
    register(routes, name="broker-a", addr=MASTER_A, cluster="c1", topics=("T1", "T2"))
    register(routes, name="broker-b", addr=MASTER_B, cluster="c1", topics=("T2", "T3"))
    register(routes, name="broker-c", addr=MASTER_C, cluster="c2", topics=("T3", "T4"))
    assert sorted(routes.topics_by_cluster("c1")) == ["T1", "T2", "T3"]
    assert sorted(routes.topics_by_cluster("c2")) == ["T3", "T4"]
    assert routes.topics_by_cluster("unknown") == []
    assert routes.topics_by_cluster(None) == []
    assert sorted(routes.all_topics()) == ["T1", "T2", "T3", "T4"]


def test_5_3_3_route_with_support_acting_master_names_the_lowest_slave_master():
    routes, _ = manager(V5, supportActingMaster=True)
    register(routes, addr=SLAVE_A, broker_id=1, acting=True)
    register(routes, addr=SLAVE_A2, broker_id=2, acting=True)
    route = routes.pickup_topic_route_data("T1")
    assert route.brokerDatas[0].brokerAddrs == {2: SLAVE_A2, 0: SLAVE_A}
    assert routes.brokerAddrTable["broker-a"].brokerAddrs == {1: SLAVE_A, 2: SLAVE_A2}  # a clone was changed
    routes.config.apply({"supportActingMaster": "false"})
    assert routes.pickup_topic_route_data("T1").brokerDatas[0].brokerAddrs == {1: SLAVE_A, 2: SLAVE_A2}


# -- re-registration as a diff ----------------------------------------------------------------

@BOTH
@pytest.mark.parametrize("field", ["perm", "readQueueNums", "writeQueueNums", "topicSysFlag"])
def test_a_re_registration_touches_only_the_topics_it_changes(profile, field):
    """Each changed field of one topic reaches its queue data and is published as that topic's
    change (what drops its cached answer); the unchanged topics are not; an added topic appears."""
    routes, _ = manager(profile)
    register(routes, topics=("T1", "T2", "T3"))
    published: list[tuple[str, str | None]] = []
    routes.subscribe(lambda change: published.extend((TOPIC, t) for t in change.topics))
    changed = topic("T2")
    setattr(changed, field, 3)
    register(routes, topics=("T1", changed, "T3", "T4"), version=(1, 2))
    assert getattr(routes.topicQueueTable["T2"]["broker-a"], field) == 3
    assert "T4" in routes.topicQueueTable
    assert sorted(name for kind, name in published if kind == TOPIC) == ["T2", "T4"]



# -- who hears a change ---------------------------------------------------------------------------

@BOTH
def test_a_second_subscriber_is_heard_after_the_first_and_replaces_nothing(profile):
    """RouteInfoManager had one subscriber slot: a second subscribe silently replaced the first
    (the answer cache would then keep answers nobody drops).  Each subscriber hears each complete
    change, in the order they subscribed; the same one twice is heard once; an unsubscribed one no more."""
    routes, _ = manager(profile)
    heard: list[tuple[str, list[str]]] = []

    def first(change) -> None:
        heard.append(("first", list(change.topics)))

    def second(change) -> None:
        heard.append(("second", list(change.topics)))
    routes.subscribe(first)
    routes.subscribe(second)
    routes.subscribe(first)
    assert routes.subscribers == [first, second]
    register(routes, topics=("T1", "T2"))
    assert heard == [("first", ["T1", "T2"]), ("second", ["T1", "T2"])]
    routes.unsubscribe(first)
    routes.delete_topic("T1")
    assert heard[2:] == [("second", ["T1"])]


@BOTH
def test_listeners_hear_each_event_in_the_order_they_listened_the_lost_topics_first(profile):
    routes, _ = manager(profile)
    heard: list[tuple] = []
    routes.listen(lambda kind, info: heard.append(("log", kind)))
    routes.listen(lambda kind, info: heard.append(("count", kind)))
    routes.listen_lost(lambda kind, info, topics: heard.append(("lost", kind, tuple(sorted(topics)))))
    register(routes, topics=("T1", "T2"), channel="ch")
    routes.on_channel_destroy("ch")
    assert heard == [("log", "registered"), ("count", "registered"),
                     ("lost", "closed", ("T1", "T2")), ("log", "closed"), ("count", "closed")]


@BOTH
def test_a_restore_is_one_change_of_everything_made_by_the_owner(profile):
    """state/snapshot.py hands the tables to ``restore``; it no longer assigns them from outside."""
    source, _ = manager(profile)
    register(source, topics=("T1", "T2"))
    routes, _ = manager(profile)
    changes = []
    routes.subscribe(changes.append)
    routes.restore((source.topicQueueTable, source.brokerAddrTable, source.clusterAddrTable, source.brokerLiveTable,
                    source.filterServerTable, source.topicQueueMappingInfoTable))
    assert sorted(routes.topicQueueTable) == ["T1", "T2"] and routes.generation == 1
    assert [change.everything for change in changes] == [True]


class _Walked(TopicQueueTable):
    """topicQueueTable counting the entries its walks visit."""

    visited = 0

    def items(self):  # type: ignore[override]
        for entry in super().items():
            self.visited += 1
            yield entry


@BOTH
def test_a_write_perm_change_is_seen_whole_at_once_and_written_a_slice_a_step(profile, monkeypatch):
    """WIPE_/ADD_WRITE_PERM_OF_BROKER take no ACL: the walk of every topic in the request's turn
    held the reactor (a million topics, for a group no topic holds as well).  The answer is Java's
    count at once; lookups see the new permission at once; the table is written a slice a step."""
    monkeypatch.setattr(settling, "WALK_PER_STEP", 100)
    routes, _ = manager(profile)
    register(routes, topics=tuple(f"T{i}" for i in range(1000)))
    register(routes, addr=MASTER_B, name="broker-b", topics=("T0", "B1"))
    routes.on_settle = lambda: None  # the service runs steps
    routes.write_at_once = 0
    table = routes.topicQueueTable = _Walked(routes.topicQueueTable)
    assert routes.wipe_write_perm_of_broker("broker-a") == 1000
    assert routes.wipe_write_perm_of_broker("nobody") == 0
    assert table.visited == 0
    queues = routes.queues_of("T7")
    assert queues is not None and queues["broker-a"].perm == 4 and routes.writableOfGroup.get("broker-a") is None
    assert routes.queues_of("T0")["broker-b"].perm == 6  # type: ignore[index]
    walks = []
    for _ in routes.settle_steps():
        walks.append(table.visited)
        table.visited = 0
    assert walks and max(walks) <= 100 and sum(walks) == 1001  # one walk of the table
    assert set(perms(routes).values()) == {4} and set(perms(routes, "broker-b").values()) == {6}
    assert routes.add_write_perm_of_broker("broker-a") == 1000 and routes.writableOfGroup["broker-a"] == 1000
    assert set(perms(routes).values()) == {6}


def test_an_acting_master_groups_master_loss_wipes_write_perm_without_a_walk_in_its_turn(monkeypatch):
    """5.3.3 takes the write bit off a masterless acting-master group on every topic: any peer
    registers such a group and unregisters its master (no ACL), so that walk too is a layer,
    seen whole at once and written a slice a step."""
    monkeypatch.setattr(settling, "WALK_PER_STEP", 100)
    routes, _ = manager(V5)
    names = tuple(f"T{i}" for i in range(500))
    register(routes, addr=MASTER_A, channel=1, acting=True, topics=names)
    register(routes, addr=SLAVE_A, broker_id=1, channel=2, acting=True, topics=names)
    routes.on_settle = lambda: None
    routes.write_at_once = 0
    table = routes.topicQueueTable = _Walked(routes.topicQueueTable)
    routes.on_channel_destroy(1)
    assert table.visited == 0
    assert routes.queues_of("T9")["broker-a"].perm == 4  # type: ignore[index]
    assert routes.writableOfGroup.get("broker-a") is None
    walks = []
    for _ in routes.settle_steps():
        walks.append(table.visited)
        table.visited = 0
    assert max(walks) <= 100 and sum(walks) == 500
    assert set(perms(routes).values()) == {4}
