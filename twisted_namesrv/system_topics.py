"""Which topics are RocketMQ's own rather than an application's: pure, no state.

Java's TopicValidator (4.9.8 and 5.3.3) lists the system topics by name (TBW102, SCHEDULE_TOPIC_XXXX,
RMQ_SYS_TRANS_HALF_TOPIC, ...) and by the ``rmq_sys_`` prefix; MixAll names a consumer group's retry
and dead-letter topics ``%RETRY%group`` and ``%DLQ%group``; and every broker registers a topic named
after itself and one named after its cluster (brokerTopicEnable / clusterTopicEnable), and
``CLUSTER_REPLY_TOPIC``.  A 5.x proxy has a topic of its own, ``DefaultHeartBeatSyncerTopic``
(ProxyConfig.heartbeatSyncerTopicName), which it makes on its cluster's brokers as it starts
(AbstractSystemMessageSyncer.createSysTopic: createTopicOnTopicBrokerIfNotExist).  When a broker
goes, those go with it by design: an operator asked "which topics did the outage take?" wants the
application's topics, so the status page and ``namesrv_lost_topics`` leave these out.

Some of them take no writes by design (state/registration.py's ``write_off_by_design``, where the
routes count by it as the tables change): Java's TopicConfigManager.init
creates each 5.x broker's ``rmq_sys_SYNC_BROKER_MEMBER_<brokerName>`` with PERM_INHERIT alone (perm
1: neither read nor write), and the broker- and cluster-named topics so when brokerTopicEnable /
clusterTopicEnable are off.  A group's count of writable topics (outages.py) leaves them out, so a
healthy group is never shown as "13/14 writable".
"""

from __future__ import annotations

from collections.abc import Container

#: TopicValidator.SYSTEM_TOPIC_SET (5.3.3 adds CHECKPOINT_TOPIC)
SYSTEM_TOPICS = frozenset({
    "TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRACE_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT",
    "CHECKPOINT_TOPIC",
})
#: TopicValidator.SYSTEM_TOPIC_PREFIX, and the upper-case RMQ_SYS_ names brokers add beside the set
SYSTEM_PREFIXES = ("rmq_sys_", "RMQ_SYS_")
#: ProxyConfig.heartbeatSyncerTopicName's default (5.3.3): the topic a 5.x proxy syncs its clients'
#: heartbeats on, made by the proxy itself as it starts (AbstractSystemMessageSyncer.createSysTopic),
#: after its first lookup of the route was answered TOPIC_NOT_EXIST
PROXY_HEARTBEAT_SYNCER_TOPIC = "DefaultHeartBeatSyncerTopic"
#: MixAll.RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX
RETRY_PREFIX, DLQ_PREFIX = "%RETRY%", "%DLQ%"
#: MixAll.REPLY_TOPIC_POSTFIX: every broker registers CLUSTER_REPLY_TOPIC (request-reply messages)
REPLY_TOPIC_POSTFIX = "_REPLY_TOPIC"


def system_topic_kind(topic: str, cluster_names: Container[str] = (),
                      broker_names: Container[str] = ()) -> str | None:
    """Why ``topic`` is RocketMQ's own (a short phrase), or None for an application's topic.
    ``cluster_names``/``broker_names``: the clusters and broker groups whose named topics these are."""
    if topic in broker_names:
        return "broker-named"
    if topic in cluster_names or (topic.endswith(REPLY_TOPIC_POSTFIX)
                                  and topic[:-len(REPLY_TOPIC_POSTFIX)] in cluster_names):
        return "cluster-named"
    if topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_PREFIXES):
        return "system"
    if topic == PROXY_HEARTBEAT_SYNCER_TOPIC:
        return "proxy's"
    if topic.startswith(RETRY_PREFIX):
        return "retry"
    if topic.startswith(DLQ_PREFIX):
        return "dead-letter"
    return None


def is_system_topic(topic: str, cluster_names: Container[str] = (), broker_names: Container[str] = ()) -> bool:
    return system_topic_kind(topic, cluster_names, broker_names) is not None
