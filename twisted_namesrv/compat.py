"""Where Java 4.9.8's and 5.3.3's NameServers answer the same request differently.

Every generation-dependent behaviour in the server reads one of these flags; nothing else
compares version strings.  The default is 5.3.3; ``--compat 4.9.8`` selects the other.
"""

from __future__ import annotations

from dataclasses import dataclass

from .remoting.codes import V4_9_8, V5_0_0, V5_3_3


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    #: MQVersion ordinal written in every response header
    mq_version: int
    #: 5.x body shapes: BrokerData.enableActingMaster/zoneName, DataVersion.stateVersion,
    #: TopicRouteData.topicQueueMappingByBroker, TopicConfig.attributes (body shapes only: each
    #: other 5.x behaviour has its own flag below)
    v5_bodies: bool
    #: RouteInfoManager's tables are ConcurrentHashMaps (5.x), HashMaps in 4.9.8: the cluster info
    #: and the topic lists list their entries in that map's iteration order
    concurrent_tables: bool
    #: supportActingMaster rewrites a route answer: a master-less group whose queues are read-only
    #: answers its lowest-id slave as id 0 (5.3.3's pickupTopicRouteData)
    acting_master_routes: bool
    #: normal answers use the request's header type (4.9.8); 5.3.3 always answers in JSON
    reply_in_request_serialize_type: bool
    #: appended to "No topic route info ..." (FAQUrl.suggestTodo)
    faq_suffix: str
    #: 5.3.3 refuses a first registration carrying exactly one topic ("register broker failed")
    refuse_first_single_topic_registration: bool
    #: brokerLiveTable/filterServerTable keyed by (clusterName, brokerAddr), not brokerAddr alone
    live_key_includes_cluster: bool
    #: DataVersion equality includes stateVersion
    data_version_includes_state: bool
    #: QUERY_DATA_VERSION refreshes liveness always (5.3.3) or only when unchanged (4.9.8)
    query_data_version_always_refreshes: bool
    #: UNREGISTER_BROKER removes brokerAddrs by address (5.3.3) or by brokerId (4.9.8)
    unregister_by_address: bool
    #: a new-version slave with the lowest id also applies topics ("prime slave", 5.3.3)
    prime_slave_applies_topics: bool
    #: 5.3.3 state-version conflict check, min-broker-id notifications, enableActingMaster
    acting_master_rules: bool
    #: GET_NAMESRV_CONFIG lists keys sorted (5.3.3) or in Hashtable order (4.9.8)
    sorted_config_text: bool
    #: 5.3.3 config switches enableAllTopicList/enableTopicList gate list requests
    topic_list_gates: bool
    #: brokers may set their own heartbeatTimeoutMillis (5.3.3); 4.9.8 expires all after 120 s
    per_broker_heartbeat_timeout: bool
    #: REGISTER_TOPIC_IN_NAMESRV, GET_BROKER_MEMBER_GROUP, BROKER_HEARTBEAT exist (5.x); in 4.9.8
    #: they are unknown codes
    v5_request_codes: bool
    #: scanNotActiveBrokerInterval sets the broker scan's period (5.3.3); 4.9.8 scans every 10 s
    configurable_scan_interval: bool
    #: returnOrderTopicConfigToBroker decides whether a registration's answer carries the order
    #: topic table (5.3.3); 4.9.8 always sends it
    order_topic_reply_switch: bool
    #: a route lookup with __ZONE_MODE=true is filtered to the brokers of __ZONE_NAME (5.3.3)
    zone_filtered_routes: bool
    #: needWaitForService/waitSecondsForService hold lookups after a start (5.3.3)
    wait_for_service: bool


JAVA_4_9_8 = Profile(
    name="4.9.8",
    mq_version=V4_9_8,
    v5_bodies=False,
    concurrent_tables=False,
    acting_master_routes=False,
    reply_in_request_serialize_type=True,
    faq_suffix="\nSee http://rocketmq.apache.org/docs/faq/ for further details.",
    refuse_first_single_topic_registration=False,
    live_key_includes_cluster=False,
    data_version_includes_state=False,
    query_data_version_always_refreshes=False,
    unregister_by_address=False,
    prime_slave_applies_topics=False,
    acting_master_rules=False,
    sorted_config_text=False,
    topic_list_gates=False,
    per_broker_heartbeat_timeout=False,
    v5_request_codes=False,
    configurable_scan_interval=False,
    order_topic_reply_switch=False,
    zone_filtered_routes=False,
    wait_for_service=False,
)

JAVA_5_3_3 = Profile(
    name="5.3.3",
    mq_version=V5_3_3,
    v5_bodies=True,
    concurrent_tables=True,
    acting_master_routes=True,
    reply_in_request_serialize_type=False,
    faq_suffix="\nSee https://rocketmq.apache.org/docs/bestPractice/06FAQ for further details.",
    refuse_first_single_topic_registration=True,
    live_key_includes_cluster=True,
    data_version_includes_state=True,
    query_data_version_always_refreshes=True,
    unregister_by_address=True,
    prime_slave_applies_topics=True,
    acting_master_rules=True,
    sorted_config_text=True,
    topic_list_gates=True,
    per_broker_heartbeat_timeout=True,
    v5_request_codes=True,
    configurable_scan_interval=True,
    order_topic_reply_switch=True,
    zone_filtered_routes=True,
    wait_for_service=True,
)

PROFILES = {p.name: p for p in (JAVA_4_9_8, JAVA_5_3_3)}


def profile_named(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"compatVersion must be one of {', '.join(PROFILES)}, not {name!r}") from None


def profile_for_version(ordinal: int) -> Profile:
    """The generation whose NameServer a peer speaking this MQVersion ordinal expects: 5.3.3's rules
    from V5_0_0 on, 4.9.8's before (what a capture's reader assumes of a NameServer it cannot ask)."""
    return JAVA_5_3_3 if ordinal >= V5_0_0 else JAVA_4_9_8
