"""The outage an operator must see first (issue 40): broker-a's master killed, broker-b stopped.
/metrics names the masterless group and the cluster nothing can be written to from the first
scrape, /api/clusters shows the slave read-only and never counts it writable, a crash ranks
above a clean stop, and the broker- and cluster-named topics are no "lost topics"."""

from __future__ import annotations

import itertools

from tests.web.test_metrics_and_api import Served, value
from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig, encode_register_body
from twisted_namesrv.bodies.route import DataVersion
from twisted_namesrv.remoting import RemotingCommand, RequestCode
from twisted_namesrv.remoting.codes import V5_3_3
from twisted_namesrv.state.registration import write_off_by_design
from twisted_namesrv.system_topics import is_system_topic, system_topic_kind

A_MASTER, A_SLAVE, B_MASTER = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.1.1:10911"
_opaques = itertools.count(1000)


def join(served: Served, addr: str, name: str, broker_id: int, topics: tuple[str, ...]):
    """A broker of cluster c1 registering ``topics`` over its own connection, as a Java broker
    does: its own broker-named and cluster-named topics, TBW102 and a retry topic among them."""
    proto, transport = served.connect()
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, 1), {t: TopicConfig(t) for t in topics}),
                                False, True)
    ext = {"clusterName": "c1", "brokerAddr": addr, "brokerName": name, "brokerId": str(broker_id),
           "haServerAddr": addr}
    proto.dataReceived(RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body, opaque=next(_opaques),
                                               version=V5_3_3).encode())
    assert b'"code":0' in transport.value()
    return proto, transport


def unregister(served: Served, addr: str, name: str, broker_id: int) -> None:
    served.call(RequestCode.UNREGISTER_BROKER, {"clusterName": "c1", "brokerAddr": addr, "brokerName": name,
                                                "brokerId": str(broker_id)}, opaque=next(_opaques))


def two_groups(served: Served):
    common = ("c1", "TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRACE_TOPIC", "%RETRY%group1", "%DLQ%group1")
    a_master = join(served, A_MASTER, "broker-a", 0, ("broker-a", "OrdersA", *common))
    join(served, A_SLAVE, "broker-a", 1, ("broker-a", "OrdersA", *common))
    b_master = join(served, B_MASTER, "broker-b", 0, ("broker-b", "OrdersB", *common))
    return a_master, b_master


def test_the_outage_gauges_are_served_at_zero_from_the_first_scrape(tmp_path):
    samples = Served(tmp_path).scrape()
    for family in ("namesrv_broker_groups_without_master", "namesrv_clusters_without_writable_queues",
                   "namesrv_lost_topics", "namesrv_lost_topics_stopped_cleanly"):
        assert (family, ()) in samples and samples[family, ()] == 0
    for kind in ("closed", "expired", "idle", "unregistered"):
        assert samples["namesrv_brokers_departed", (("kind", kind),)] == 0


def test_a_killed_master_and_a_stopped_group_are_named_within_one_scrape(tmp_path):
    served = Served(tmp_path)
    (_, a_master), _ = two_groups(served)
    samples = served.scrape()
    assert value(samples, "namesrv_broker_groups_without_master") == 0
    assert value(samples, "namesrv_cluster_writable_broker_groups", cluster="c1") == 2
    assert value(samples, "namesrv_broker_group_master_live", cluster="c1", broker="broker-a") == 1

    a_master.loseConnection()  # kill -9: the connection closes without an unregistration
    unregister(served, B_MASTER, "broker-b", 0)  # a clean stop
    served.clock.advance(0)
    samples = served.scrape()
    assert value(samples, "namesrv_broker_groups_without_master") == 1  # broker-a; broker-b stopped cleanly
    assert value(samples, "namesrv_broker_group_master_live", cluster="c1", broker="broker-a") == 0
    assert value(samples, "namesrv_broker_group_master_live", cluster="c1", broker="broker-b") == 0
    assert value(samples, "namesrv_broker_group_absent", cluster="c1", broker="broker-b") == 1
    assert value(samples, "namesrv_cluster_writable_broker_groups", cluster="c1") == 0
    assert value(samples, "namesrv_clusters_without_writable_queues") == 1
    assert value(samples, "namesrv_brokers_departed", kind="closed") == 1
    assert value(samples, "namesrv_brokers_departed", kind="unregistered") == 1
    assert value(samples, "namesrv_lost_topics") == 1  # OrdersB; broker-b's own and the system topics are not
    assert value(samples, "namesrv_lost_topics_stopped_cleanly") == 1  # OrdersB's last broker unregistered

    overview = served.api.overview()  # broker-b stopped cleanly: said apart, not an outage of its own
    assert (overview["broker_groups_without_master"], overview["clusters_without_writable_queues"]) == (1, 1)
    assert (overview["broker_groups_stopped_cleanly"], overview["clusters_stopped_cleanly"]) == (1, 0)
    clusters = served.api.clusters()
    absent = {"since_ms": int(served.clock.seconds() * 1000), "how": "unregistered", "crash": False,
              "stopped_cleanly": True, "rejoining": False}
    assert clusters["outages"] == {
        "broker_groups_without_master": [{"cluster": "c1", "broker_name": "broker-a", "live_members": 1,
                                          "master_addr": None, "absent": None, "rejoining": False,
                                          "master_stopped_cleanly": False},  # killed
                                         {"cluster": "c1", "broker_name": "broker-b", "live_members": 0,
                                          "master_addr": B_MASTER, "absent": absent, "rejoining": False,
                                          "master_stopped_cleanly": False}],  # absent: stopped_cleanly says it
        "clusters_without_writable_queues": ["c1"],
        "clusters_stopped_cleanly": [],  # broker-a did not stop: c1 is an outage
        "clusters_unregistered": [],
        "broker_groups_absent": [{"cluster": "c1", "broker_name": "broker-b", **absent}],
        "rejoining": {"seconds_left": 0.0, "broker_groups": [], "clusters": []},
        "brokers_flapping": [], "brokers_restarting_cleanly": []}
    (cluster,) = clusters["clusters"]
    assert cluster["writable_broker_groups"] == 0
    group_a = cluster["broker_groups"][0]
    assert group_a["broker_name"] == "broker-a" and not group_a["master_live"] and not group_a["takes_writes"]
    assert group_a["queues"]["writable"] == 0  # the slave's queues still carry the write bit: not counted
    slave = next(m for m in group_a["members"] if m["live"])
    assert (slave["role"], slave["writes"], slave["perm"]) == ("slave", False, "read-only")
    master = next(m for m in group_a["members"] if not m["live"])
    assert master["departed"]["kind"] == "closed" and master["departed"]["crash"]
    (stopped,) = cluster["broker_groups"][1]["members"]
    assert stopped["departed"]["kind"] == "unregistered" and not stopped["departed"]["crash"]
    assert [t["topic"] for t in clusters["lost_topics"]] == ["OrdersB"]


def test_a_topic_lost_to_a_crash_is_not_counted_as_stopped_cleanly(tmp_path):
    """NamesrvTopicsLost pages for namesrv_lost_topics less those stopped cleanly: a kill -9 of
    broker-b's only member loses OrdersB to a crash."""
    served = Served(tmp_path)
    _, (_, b_master) = two_groups(served)
    b_master.loseConnection()
    served.clock.advance(0)
    samples = served.scrape()
    assert value(samples, "namesrv_lost_topics") == 1
    assert value(samples, "namesrv_lost_topics_stopped_cleanly") == 0


def test_a_live_master_is_read_write_and_its_slave_read_only(tmp_path):
    served = Served(tmp_path)
    two_groups(served)
    group_a = served.api.clusters()["clusters"][0]["broker_groups"][0]
    assert group_a["master_live"] and group_a["takes_writes"]
    assert [(m["role"], m["perm"]) for m in group_a["members"]] == [("master", "read-write"), ("slave", "read-only")]

    served.call(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})  # the master stays, read-only
    samples = served.scrape()
    assert value(samples, "namesrv_broker_groups_without_master") == 0
    assert value(samples, "namesrv_cluster_writable_broker_groups", cluster="c1") == 1  # broker-b only
    group_a = served.api.clusters()["clusters"][0]["broker_groups"][0]
    assert not group_a["takes_writes"] and group_a["members"][0]["perm"] == "read-only"


def test_system_topics_as_javas_topic_validator_and_mixall_name_them():
    clusters, brokers = {"DefaultCluster"}, {"broker-a"}
    assert system_topic_kind("broker-a", clusters, brokers) == "broker-named"
    assert system_topic_kind("DefaultCluster", clusters, brokers) == "cluster-named"
    assert system_topic_kind("DefaultCluster_REPLY_TOPIC", clusters, brokers) == "cluster-named"  # 4.9.8 brokers
    assert system_topic_kind("Other_REPLY_TOPIC", clusters, brokers) is None
    for topic in ("TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "rmq_sys_SYNC_BROKER_MEMBER_x",
                  "OFFSET_MOVED_EVENT", "BenchmarkTest", "SELF_TEST_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC"):
        assert system_topic_kind(topic) == "system", topic
    assert system_topic_kind("%RETRY%group") == "retry" and system_topic_kind("%DLQ%group") == "dead-letter"
    for topic in ("TopicTest", "broker-b", "orders", "TBW1020"):
        assert not is_system_topic(topic, clusters, brokers), topic


def test_a_system_topic_read_only_by_design_is_no_missing_write_permission(tmp_path):
    """Every 5.3.3 broker registers rmq_sys_SYNC_BROKER_MEMBER_<its name> with perm 1 (Java's
    TopicConfigManager: PERM_INHERIT alone), and with brokerTopicEnable/clusterTopicEnable off its
    broker- and cluster-named topics too: the group was shown "2/5" writable, in red, while healthy."""
    served = Served(tmp_path)
    proto, transport = served.connect()
    table = {t: TopicConfig(t) for t in ("OrdersA", "TBW102")}
    table |= {t: TopicConfig(t, perm=1) for t in ("rmq_sys_SYNC_BROKER_MEMBER_broker-a", "broker-a", "c1")}
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, 1), table), False, True)
    ext = {"clusterName": "c1", "brokerAddr": A_MASTER, "brokerName": "broker-a", "brokerId": "0",
           "haServerAddr": A_MASTER}
    proto.dataReceived(RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body, opaque=next(_opaques),
                                               version=V5_3_3).encode())
    assert b'"code":0' in transport.value()
    group = served.api.clusters()["clusters"][0]["broker_groups"][0]
    assert group["queues"] == {"topics": 2, "writable": 2} and group["takes_writes"]

    served.call(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})  # a real loss still shows
    group = served.api.clusters()["clusters"][0]["broker_groups"][0]
    assert group["queues"] == {"topics": 2, "writable": 0} and not group["takes_writes"]


def test_which_system_topics_take_no_writes_by_design():
    assert write_off_by_design("rmq_sys_SYNC_BROKER_MEMBER_broker-a")
    assert write_off_by_design("broker-a", "c1", "broker-a") and write_off_by_design("c1", "c1")
    for topic in ("TBW102", "c1_REPLY_TOPIC", "OrdersA", "rmq_sys_REVIVE_LOG_c1", "broker-b"):
        assert not write_off_by_design(topic, "c1", "broker-a"), topic


def test_topics_lost_before_a_restart_are_still_lost_after_it(tmp_path):
    """A NameServer restarted after a broker took topics away still names them, for the rest of
    their ten minutes: kept in events.json with the page's events (so a kill -9 of the NameServer
    keeps what the timer wrote). Before, a restart forgot them: namesrv_lost_topics 0 and NamesrvTopicsLost
    resolved while the topics were as lost as before, and the page no longer said which."""
    from twisted_namesrv.event_log import EVENTS_SAVE_SECONDS
    from twisted_namesrv.lost_topics import KEEP_SECONDS

    served = Served(tmp_path)
    served.service.events.startService()
    _, (_, b_master) = two_groups(served)
    b_master.loseConnection()  # broker-b crashed: OrdersB lost
    served.clock.advance(0)
    lost_at = served.clock.seconds()
    unregister(served, A_SLAVE, "broker-a", 1)
    unregister(served, A_MASTER, "broker-a", 0)  # broker-a stopped cleanly: OrdersA lost too
    served.clock.advance(EVENTS_SAVE_SECONDS)  # written by the timer: what a kill -9 of the NameServer leaves

    restarted = Served(tmp_path)  # no stopService: as after kill -9
    restarted.clock.advance(EVENTS_SAVE_SECONDS + 60)
    samples = restarted.scrape()
    assert value(samples, "namesrv_lost_topics") == 2
    assert value(samples, "namesrv_lost_topics_stopped_cleanly") == 1
    lost = {t["topic"]: t for t in restarted.api.clusters()["lost_topics"]}
    assert (lost["OrdersB"]["broker"], lost["OrdersB"]["kind"]) == ("broker-b", "closed")
    assert (lost["OrdersA"]["broker"], lost["OrdersA"]["kind"]) == ("broker-a", "unregistered")
    assert lost["OrdersB"]["ts_ms"] == int(lost_at * 1000)  # when it was lost, not when the restart read it

    join(restarted, A_MASTER, "broker-a", 0, ("broker-a", "OrdersA"))  # broker-a back: OrdersA served again
    assert [t["topic"] for t in restarted.api.clusters()["lost_topics"]] == ["OrdersB"]
    restarted.clock.advance(KEEP_SECONDS - 60)  # ten minutes after the loss, as without a restart
    assert "OrdersB" not in [t["topic"] for t in restarted.api.clusters()["lost_topics"]]


def test_a_topic_served_again_before_a_restart_is_not_lost_after_it(tmp_path):
    """Only topics still lost are kept: OrdersB, lost and then served again before the restart, must
    not count as lost while broker-b re-registers after it (NamesrvTopicsLost would page for the
    window)."""
    from twisted_namesrv.event_log import EVENTS_SAVE_SECONDS

    served = Served(tmp_path)
    served.service.events.startService()
    _, (_, b_master) = two_groups(served)
    b_master.loseConnection()
    served.clock.advance(0)
    join(served, B_MASTER, "broker-b", 0, ("broker-b", "OrdersB"))  # broker-b back
    served.clock.advance(EVENTS_SAVE_SECONDS)
    restarted = Served(tmp_path)
    assert value(restarted.scrape(), "namesrv_lost_topics") == 0
