"""Every request code's answer (the handlers, dispatched by Dispatcher), for both Java
generations, without sockets.

Requests and answers go through the wire codec (encode, then decode) so what is checked is what
a peer would read."""

from __future__ import annotations

import itertools
import json

import pytest
from twisted.internet import task
from twisted.logger import LogLevel, capturedLogs, formatEvent

from tests import built
from twisted_namesrv import compat, properties
from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig, encode_register_body
from twisted_namesrv.bodies.route import DataVersion
from twisted_namesrv.context import NamesrvState, Peer
from twisted_namesrv.processor import CODES
from twisted_namesrv.remoting import RemotingCommand, RequestCode, ResponseCode, SerializeType, fastjson
from twisted_namesrv.remoting.codes import V4_9_4, V4_9_8, V5_3_3
from twisted_namesrv.remoting.crc import crc32_masked
from twisted_namesrv.schema import SERVER_SCHEMA
from twisted_namesrv.state.config import OURS, ConfigError, ConfigKey, NamesrvConfig
from twisted_namesrv.state.kv import NAMESPACE_ORDER_TOPIC_CONFIG

BOTH = pytest.mark.parametrize("profile", ["4.9.8", "5.3.3"])
START = 1_000.0
MASTER, SLAVE, OTHER = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.1.1:10911"
_opaques = itertools.count(1)


class Namesrv:
    """A NamesrvState wired as the service wires it, on a fake clock, and a way to ask it."""

    def __init__(self, tmp_path, profile: str = "5.3.3", *, started: float = START, schema=SERVER_SCHEMA,
                 **values) -> None:
        base = {"compatVersion": profile, "kvConfigPath": str(tmp_path / "kvConfig.json"),
                "configStorePath": str(tmp_path / "namesrv.properties")}
        base.update(values)
        self.config = NamesrvConfig(base, schema=schema)
        self.config_path = tmp_path / "namesrv.properties"
        self.clock = task.Clock()
        self.clock.advance(started)
        self.dispatcher = built.dispatcher(self.config, self.clock)
        self.state: NamesrvState = self.dispatcher.state
        self.routes = self.state.routes
        self.profile = self.config.profile

    @property
    def client_version(self) -> int:
        return V4_9_8 if self.profile is compat.JAVA_4_9_8 else V5_3_3

    def call(self, code: int, ext: dict | None = None, body: bytes | None = None, *, version: int | None = None,
             serialize_type: int = SerializeType.JSON, oneway: bool = False, channel: object = 1):
        request = RemotingCommand.request(code, ext, body, opaque=next(_opaques),
                                          version=self.client_version if version is None else version,
                                          oneway=oneway, serialize_type=serialize_type)
        wire_request = RemotingCommand.decode(request.encode()[4:])
        response = self.dispatcher.dispatch(wire_request, Peer(channel, "127.0.0.1:40000"))
        if response is None:
            return None
        answer = RemotingCommand.decode(response.encode()[4:])
        assert answer.opaque == request.opaque and answer.is_response
        assert answer.version == self.profile.mq_version
        return answer

    def register(self, *, cluster: str = "c1", addr: str = MASTER, name: str = "broker-a", broker_id: int = 0,
                 topics=("T1", "T2"), version=(1, 1), ha: str | None = None, crc: int | None = None,
                 compressed: bool = False, channel: object = 1, extra: dict | None = None,
                 filters: list[str] | None = None):
        configs = {}
        for t in topics:
            config = t if isinstance(t, TopicConfig) else TopicConfig(t, 8, 8, 6)
            configs[config.topicName] = config
        payload = encode_register_body(RegisterBrokerBody(DataVersion(*version), configs, list(filters or [])),
                                       compressed, self.profile.v5_bodies)
        ext = {"clusterName": cluster, "brokerAddr": addr, "brokerName": name, "brokerId": str(broker_id),
               "haServerAddr": ha, "compressed": "true" if compressed else "false",
               "bodyCrc32": str(crc32_masked(payload) if crc is None else crc)}
        ext.update(extra or {})
        return self.call(RequestCode.REGISTER_BROKER, ext, payload, channel=channel)

    def live(self, addr: str = MASTER, cluster: str = "c1"):
        return self.routes.brokerLiveTable.get(self.routes.live_key(cluster, addr))


@pytest.fixture(params=["4.9.8", "5.3.3"])
def ns(request, tmp_path) -> Namesrv:
    return Namesrv(tmp_path, request.param)


def body_json(answer: RemotingCommand):
    return fastjson.loads(answer.body)


def version_body(version: tuple[int, ...], v5: bool) -> bytes:
    return fastjson.dumps_bytes(DataVersion(*version).bean(v5))


# -- dispatch ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_unknown_code_is_not_supported_in_both_modes(ns, serialize_type):
    answer = ns.call(9999, {"a": "b"}, serialize_type=serialize_type)
    assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert answer.remark == " request type 9999 not supported"
    assert answer.serialize_type == SerializeType.JSON  # an error reply is JSON in both


@pytest.mark.parametrize("code", sorted(CODES) + [9999])
@BOTH
def test_oneway_request_gets_no_answer(tmp_path, profile, code):
    ns = Namesrv(tmp_path, profile)
    assert ns.call(code, {}, oneway=True) is None
    assert ns.call(code, None, b"{garbage", oneway=True) is None


def test_oneway_request_still_takes_effect(tmp_path):
    ns = Namesrv(tmp_path, "5.3.3")
    ns.register()
    ns.clock.advance(60)
    assert ns.call(RequestCode.BROKER_HEARTBEAT, {"clusterName": "c1", "brokerAddr": MASTER, "brokerName": "broker-a"},
                   oneway=True) is None
    assert ns.live().lastUpdateTimestamp == int((START + 60) * 1000)


def test_handler_exception_costs_one_answer(ns, monkeypatch):
    ns.register()
    # a body that is not JSON makes Java's decode throw: SYSTEM_ERROR, the connection stays usable
    bad = ns.call(RequestCode.QUERY_DATA_VERSION, {"clusterName": "c1", "brokerAddr": MASTER}, b"{not json",
                  serialize_type=SerializeType.ROCKETMQ)
    assert bad.code == ResponseCode.SYSTEM_ERROR and bad.remark
    assert bad.serialize_type == SerializeType.JSON
    monkeypatch.setattr(ns.routes, "all_topics", lambda: (_ for _ in ()).throw(RuntimeError("boom")))
    boom = ns.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    assert boom.code == ResponseCode.SYSTEM_ERROR and "boom" in boom.remark
    monkeypatch.undo()
    after = ns.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    assert after.code == ResponseCode.SUCCESS
    assert sorted(body_json(after)["topicList"]) == ["T1", "T2"]


def test_missing_long_header_field_is_a_system_error(ns):
    answer = ns.call(RequestCode.REGISTER_BROKER, {"clusterName": "c1", "brokerAddr": MASTER, "brokerName": "b"})
    assert answer.code == ResponseCode.SYSTEM_ERROR and "brokerId" in answer.remark
    assert ns.routes.brokerAddrTable == {}


# -- serialize type of answers ---------------------------------------------------------------------------

@pytest.mark.parametrize("profile,expected", [("4.9.8", SerializeType.ROCKETMQ), ("5.3.3", SerializeType.JSON)])
def test_normal_answer_to_a_binary_request(tmp_path, profile, expected):
    ns = Namesrv(tmp_path, profile)
    ns.register()
    route = ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}, serialize_type=SerializeType.ROCKETMQ)
    assert route.code == ResponseCode.SUCCESS and route.serialize_type == expected
    missing = ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "nope"}, serialize_type=SerializeType.ROCKETMQ)
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST and missing.serialize_type == expected
    json_request = ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"})
    assert json_request.serialize_type == SerializeType.JSON


# -- REGISTER_BROKER ---------------------------------------------------------------------------------------

def test_register_broker_fills_the_route(ns):
    answer = ns.register(ha="10.0.0.1:10912")
    assert answer.code == ResponseCode.SUCCESS and answer.body is None
    assert not answer.ext.get("masterAddr")
    slave = ns.register(addr=SLAVE, broker_id=1, ha="10.0.0.2:10912")
    assert (slave.ext["masterAddr"], slave.ext["haServerAddr"]) == (MASTER, "10.0.0.1:10912")
    route = body_json(ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}))
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": MASTER, "1": SLAVE}
    assert route["queueDatas"] == [{"brokerName": "broker-a", "perm": 6, "readQueueNums": 8, "topicSysFlag": 0,
                                    "writeQueueNums": 8}]


def test_register_broker_compressed_body(ns):
    assert ns.register(compressed=True, topics=("T1", "T2", "T3")).code == ResponseCode.SUCCESS
    assert sorted(ns.routes.topicQueueTable) == ["T1", "T2", "T3"]


def test_register_broker_crc_mismatch_is_refused_and_changes_nothing(ns):
    answer = ns.register(crc=12345)
    assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")
    assert ns.routes.brokerAddrTable == {} and ns.routes.clusterAddrTable == {}
    assert ns.routes.brokerLiveTable == {} and ns.routes.topicQueueTable == {}


def test_register_broker_crc_mismatches_in_a_loop_are_one_warning_and_every_one_counted(ns):
    """Any peer may send registrations whose bodyCrc32 lies, in a loop: Java warns at each one, and
    so did this server, 500 of them 500 warning lines (128 bytes each, a few thousand a second from
    one connection).  A refusal now: one warning a host, every one counted."""
    with capturedLogs() as events:
        for _ in range(500):
            answer = ns.register(crc=12345)
            assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")
    lines = [formatEvent(e) for e in events if e["log_level"] >= LogLevel.warn]
    assert len(lines) == 1 and lines[0].startswith(
        "refused on remoting from 127.0.0.1:40000: receive registerBroker request, crc32 not match (bodyCrc32 12345")
    assert ns.state.refusals.counts["remoting", "crc32"] == 500
    assert ns.routes.brokerAddrTable == {} and ns.routes.brokerLiveTable == {}


def test_bad_requests_in_a_loop_are_one_warning_and_every_one_counted(ns):
    """A request whose header or body makes Java fail (SYSTEM_ERROR) was a warning line each: 100
    QUERY_DATA_VERSION whose body is not JSON, 100 lines, though BadRequest said a peer sending
    garbage must not flood the log.  A refusal now, ``bad_request``: one warning a host, all counted."""
    ext = {"brokerName": "b", "brokerAddr": "10.0.0.1:10911", "clusterName": "c", "brokerId": "0"}
    with capturedLogs() as events:
        for _ in range(100):
            answer = ns.call(RequestCode.QUERY_DATA_VERSION, ext, b"not json")
            assert answer.code == ResponseCode.SYSTEM_ERROR and answer.remark.startswith("body is not a DataVersion")
    lines = [formatEvent(e) for e in events if e["log_level"] >= LogLevel.warn]
    assert len(lines) == 1 and lines[0].startswith(
        "refused on remoting from 127.0.0.1:40000: request 322 refused: body is not a DataVersion"), lines
    assert ns.state.refusals.counts["remoting", "bad_request"] == 100


def test_a_master_shut_out_of_its_id_by_a_newer_state_version_is_told_not_only_ignored(tmp_path):
    """5.3.3 keeps an id for the live broker whose stateVersion is newer and ignores the other's
    registration (Java warns).  Any peer may register the real master's group and id first with a
    bigger stateVersion: the route then names its address, and the real master's registrations
    are answered an empty result and dropped from the live table, which this server did without a
    word.  Now each is a route event "refused" (a log line, the page's events, a count); the
    answers and the tables are Java's as before."""
    ns = Namesrv(tmp_path, "5.3.3")
    heard = []
    ns.routes.listen(lambda kind, info: heard.append((kind, info)))
    assert ns.register(addr=MASTER, version=(1, 1, 0), channel=1).code == ResponseCode.SUCCESS
    assert ns.register(addr="10.6.6.6:10911", version=(1, 1, 9), channel=2).code == ResponseCode.SUCCESS
    del heard[:]
    answer = ns.register(addr=MASTER, version=(2, 2, 0), channel=1)  # the real master, 30 s later
    assert answer.code == ResponseCode.SUCCESS  # as Java answers it
    assert ns.routes.brokerAddrTable["broker-a"].brokerAddrs == {0: "10.6.6.6:10911"} and ns.live(MASTER) is None
    assert heard == [("refused", {"cluster": "c1", "broker": "broker-a", "id": 0, "addr": MASTER,
                                  "reason": "its id is held by 10.6.6.6:10911, whose stateVersion 9 is newer than "
                                            "its 0: ignored, as Java ignores it"})]


def test_register_broker_crc_zero_or_absent_skips_the_check(ns):
    assert ns.register(crc=0).code == ResponseCode.SUCCESS
    assert ns.routes.brokerAddrTable["broker-a"].brokerAddrs == {0: MASTER}
    answer = ns.register(name="broker-b", addr=OTHER, extra={"bodyCrc32": None})
    assert answer.code == ResponseCode.SUCCESS
    assert set(ns.routes.brokerAddrTable) == {"broker-a", "broker-b"}


def test_register_broker_answers_the_order_topic_config(ns):
    assert ns.register().body is None  # no ORDER_TOPIC_CONFIG namespace: no body
    put = ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": NAMESPACE_ORDER_TOPIC_CONFIG, "key": "OrderTopic",
                                              "value": "broker-a:4"})
    assert put.code == ResponseCode.SUCCESS
    answer = ns.register(version=(2, 2))
    assert answer.code == ResponseCode.SUCCESS
    assert body_json(answer) == {"table": {"OrderTopic": "broker-a:4"}}


def test_5_3_3_return_order_topic_config_to_broker_off(tmp_path):
    ns = Namesrv(tmp_path, "5.3.3", returnOrderTopicConfigToBroker=False)
    ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": NAMESPACE_ORDER_TOPIC_CONFIG, "key": "T", "value": "a:1"})
    assert ns.register().body is None


def test_4_9_8_always_returns_the_order_topic_config(tmp_path):
    ns = Namesrv(tmp_path, "4.9.8", returnOrderTopicConfigToBroker=False)
    ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": NAMESPACE_ORDER_TOPIC_CONFIG, "key": "T", "value": "a:1"})
    assert body_json(ns.register()) == {"table": {"T": "a:1"}}


def test_5_3_3_first_single_topic_registration_fails(tmp_path):
    ns = Namesrv(tmp_path, "5.3.3")
    answer = ns.register(topics=("T1",))
    assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR, "register broker failed")
    assert ns.routes.brokerAddrTable["broker-a"].brokerAddrs == {}
    assert ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}).code == ResponseCode.TOPIC_NOT_EXIST


def test_4_9_8_first_single_topic_registration_succeeds(tmp_path):
    ns = Namesrv(tmp_path, "4.9.8")
    assert ns.register(topics=("T1",)).code == ResponseCode.SUCCESS


def test_5_3_3_heartbeat_timeout_header_is_honoured(tmp_path):
    ns = Namesrv(tmp_path, "5.3.3")
    ns.register(extra={"heartbeatTimeoutMillis": "10000"})
    ns.clock.advance(10.001)
    assert ns.routes.scan_not_active_broker() == [1]


def test_4_9_8_ignores_the_heartbeat_timeout_header(tmp_path):
    ns = Namesrv(tmp_path, "4.9.8")
    ns.register(extra={"heartbeatTimeoutMillis": "10000"})
    ns.clock.advance(60)
    assert ns.routes.scan_not_active_broker() == []
    assert "broker-a" in ns.routes.brokerAddrTable


# -- QUERY_DATA_VERSION (322) and BROKER_HEARTBEAT (904) ---------------------------------------------------------

def query_version(ns: Namesrv, version: tuple[int, ...] | None):
    body = None if version is None else version_body(version, ns.profile.v5_bodies)
    return ns.call(RequestCode.QUERY_DATA_VERSION, {"clusterName": "c1", "brokerAddr": MASTER,
                                                    "brokerName": "broker-a", "brokerId": "0"}, body)


@pytest.mark.parametrize("obj", [
    None, {}, {"timestamp": 1733000000000, "counter": 5}, {"timestamp": 1, "counter": 2, "stateVersion": 3},
    {"timestamp": (1 << 63) - 1, "counter": -(1 << 63)}, {"timestamp": True, "counter": False},
    {"timestamp": "12", "counter": 7.9}, {"timestamp": 1 << 63}, {"counter": -(1 << 63) - 1}, {"stateVersion": "x"},
], ids=repr)
def test_a_data_version_reads_its_numbers_as_fastjson_does(obj):
    """DataVersion.from_json takes ints in a long's range as they are and the rest through
    fastjson.java_numbers (a bool, a numeric string or a float read as fastjson reads them; past a
    long's range, or not a number, refused): the same values or the same refusal either way."""
    fields = (obj or {}).get("timestamp", 0), (obj or {}).get("counter", 0), (obj or {}).get("stateVersion", 0)
    try:
        expected = DataVersion(*fastjson.java_numbers(fields, fastjson.JAVA_LONG))
    except ValueError:
        with pytest.raises(ValueError):
            DataVersion.from_json(obj)
        return
    read = DataVersion.from_json(obj)
    assert read == expected and all(type(value) is int for value in (read.timestamp, read.counter, read.stateVersion))


def test_query_data_version_changed_and_unchanged(ns):
    unknown = query_version(ns, (1, 1))
    assert unknown.code == ResponseCode.SUCCESS and unknown.ext["changed"] == "true" and unknown.body is None
    ns.register(version=(1, 1))
    same = query_version(ns, (1, 1))
    assert same.ext["changed"] == "false"
    expected = {"counter": 1, "timestamp": 1} | ({"stateVersion": 0} if ns.profile.v5_bodies else {})
    assert body_json(same) == expected
    changed = query_version(ns, (1, 2))
    assert changed.ext["changed"] == "true"
    assert body_json(changed) == expected  # the stored version, not the queried one


def test_query_data_version_refresh_rules(ns):
    ns.register(version=(1, 1))
    ns.clock.advance(100)
    query_version(ns, (1, 2))  # changed
    refreshed_when_changed = ns.live().lastUpdateTimestamp == int((START + 100) * 1000)
    assert refreshed_when_changed is ns.profile.query_data_version_always_refreshes
    ns.clock.advance(10)
    query_version(ns, (1, 1))  # unchanged: a heartbeat in both
    assert ns.live().lastUpdateTimestamp == int((START + 110) * 1000)


def test_4_9_8_query_data_version_without_body_is_an_error(tmp_path):
    ns = Namesrv(tmp_path, "4.9.8")
    ns.register()
    assert query_version(ns, None).code == ResponseCode.SYSTEM_ERROR


def test_5_3_3_query_data_version_without_body_is_changed_and_refreshes(tmp_path):
    ns = Namesrv(tmp_path, "5.3.3")
    ns.register()
    ns.clock.advance(50)
    answer = query_version(ns, None)
    assert answer.code == ResponseCode.SUCCESS and answer.ext["changed"] == "true"
    assert ns.live().lastUpdateTimestamp == int((START + 50) * 1000)


def test_5_3_3_query_data_version_is_per_cluster(tmp_path):
    ns = Namesrv(tmp_path, "5.3.3")
    ns.register(cluster="c1")
    other = ns.call(RequestCode.QUERY_DATA_VERSION, {"clusterName": "c2", "brokerAddr": MASTER},
                    version_body((1, 1), True))
    assert other.ext["changed"] == "true" and other.body is None


def test_5_3_3_broker_heartbeat_refreshes(tmp_path):
    ns = Namesrv(tmp_path, "5.3.3")
    ns.register()
    ns.clock.advance(119)
    answer = ns.call(RequestCode.BROKER_HEARTBEAT,
                     {"clusterName": "c1", "brokerAddr": MASTER, "brokerName": "broker-a"})
    assert answer.code == ResponseCode.SUCCESS
    ns.clock.advance(119)
    assert ns.routes.scan_not_active_broker() == []
    ns.call(RequestCode.BROKER_HEARTBEAT, {"clusterName": "other", "brokerAddr": MASTER, "brokerName": "broker-a"})
    ns.clock.advance(1.001)
    assert ns.routes.scan_not_active_broker() == [1]  # the wrong cluster refreshed nothing


@pytest.mark.parametrize("code", [RequestCode.QUERY_DATA_VERSION, RequestCode.BROKER_HEARTBEAT])
@pytest.mark.parametrize("missing", ["clusterName", "brokerAddr"])
def test_5_3_3_a_heartbeat_without_its_cluster_or_address_is_java_s_npe(tmp_path, code, missing):
    """Java 5.3.3 keys its live table by (clusterName, brokerAddr), a BrokerAddrInfo whose hashCode
    reads both: either missing is a NullPointerException, SYSTEM_ERROR (seen on the reference rig's
    5.3.3), and nothing is refreshed.  4.9.8 keys by the address, and a null finds nothing: 0."""
    ns = Namesrv(tmp_path, "5.3.3")
    ns.register()
    ns.clock.advance(100)
    ext = {"clusterName": "c1", "brokerAddr": MASTER, "brokerName": "broker-a"}
    del ext[missing]
    answer = ns.call(code, ext, version_body((1, 1), True))
    assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR,
                                            f"java.lang.NullPointerException: header field {missing} is missing")
    assert ns.live().lastUpdateTimestamp == int(START * 1000)
    if code == RequestCode.QUERY_DATA_VERSION:  # (4.9.8 has no BROKER_HEARTBEAT)
        (tmp_path / "4.9.8").mkdir()
        answer = Namesrv(tmp_path / "4.9.8", "4.9.8").call(code, ext, version_body((1, 1), False))
        assert answer.code == ResponseCode.SUCCESS and answer.ext["changed"] == "true"


@pytest.mark.parametrize("code", [RequestCode.BROKER_HEARTBEAT, RequestCode.GET_BROKER_MEMBER_GROUP,
                                  RequestCode.REGISTER_TOPIC_IN_NAMESRV])
def test_4_9_8_does_not_know_5_x_only_codes(tmp_path, code):
    ns = Namesrv(tmp_path, "4.9.8")
    ns.register()
    ns.clock.advance(100)
    answer = ns.call(code, {"clusterName": "c1", "brokerAddr": MASTER, "brokerName": "broker-a", "topic": "T1"})
    assert (answer.code, answer.remark) == (ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                            f" request type {int(code)} not supported")
    assert ns.live().lastUpdateTimestamp == int(START * 1000)


# -- UNREGISTER_BROKER (104) ------------------------------------------------------------------------------------

def test_unregister_broker(ns):
    ns.register()
    ns.register(addr=SLAVE, broker_id=1)
    answer = ns.call(RequestCode.UNREGISTER_BROKER, {"clusterName": "c1", "brokerAddr": SLAVE,
                                                     "brokerName": "broker-a", "brokerId": "1"})
    assert answer.code == ResponseCode.SUCCESS
    assert ns.routes.brokerAddrTable["broker-a"].brokerAddrs == {0: MASTER}
    ns.call(RequestCode.UNREGISTER_BROKER, {"clusterName": "c1", "brokerAddr": MASTER, "brokerName": "broker-a",
                                            "brokerId": "0"})
    assert ns.routes.brokerAddrTable == {} and ns.routes.topicQueueTable == {}
    cluster = body_json(ns.call(RequestCode.GET_BROKER_CLUSTER_INFO))
    assert cluster == {"brokerAddrTable": {}, "clusterAddrTable": {}}


# -- GET_ROUTEINFO_BY_TOPIC (105) ------------------------------------------------------------------------------

def test_route_of_an_unknown_topic(ns):
    answer = ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "NoSuchTopic"})
    assert answer.code == ResponseCode.TOPIC_NOT_EXIST and answer.body is None
    assert answer.remark == "No topic route info in name server for the topic: NoSuchTopic" + ns.profile.faq_suffix
    assert ("rocketmq.apache.org/docs/faq/" in answer.remark) is (ns.profile is compat.JAVA_4_9_8)


@pytest.mark.parametrize("version,flag,quoted", [
    (V4_9_4, None, True), (V4_9_4 - 1, None, False), (63, "true", True), (63, "TRUE", True),
    (63, "false", False), (V5_3_3, "false", True), (0, None, False)])
def test_route_answer_key_style(ns, version, flag, quoted):
    ns.register()
    ext = {"topic": "T1"} if flag is None else {"topic": "T1", "acceptStandardJsonOnly": flag}
    answer = ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext, version=version)
    assert answer.code == ResponseCode.SUCCESS
    assert (b'"brokerAddrs":{"0":"' in answer.body) is quoted
    assert (b'"brokerAddrs":{0:"' in answer.body) is not quoted
    assert body_json(answer)["brokerDatas"][0]["brokerAddrs"] == {"0": MASTER}


def test_cluster_info_and_member_group_keys_are_always_bare(tmp_path):
    for profile in ("4.9.8", "5.3.3"):
        ns = Namesrv(tmp_path / profile, profile)
        ns.register()
        cluster = ns.call(RequestCode.GET_BROKER_CLUSTER_INFO, version=V5_3_3)
        assert b'"brokerAddrs":{0:"10.0.0.1:10911"}' in cluster.body
        assert body_json(cluster)["clusterAddrTable"] == {"c1": ["broker-a"]}
    group = ns.call(RequestCode.GET_BROKER_MEMBER_GROUP, {"clusterName": "c1", "brokerName": "broker-a"},
                    version=V5_3_3, serialize_type=SerializeType.ROCKETMQ)
    assert group.code == ResponseCode.SUCCESS and group.remark == "not set any response code"
    assert b'"brokerAddrs":{0:"10.0.0.1:10911"}' in group.body
    assert body_json(group) == {"brokerMemberGroup": {"brokerAddrs": {"0": MASTER}, "brokerName": "broker-a",
                                                      "cluster": "c1"}}
    unknown = ns.call(RequestCode.GET_BROKER_MEMBER_GROUP, {"clusterName": "c9", "brokerName": "nobody"})
    assert body_json(unknown)["brokerMemberGroup"]["brokerAddrs"] == {}
    assert unknown.remark == "not set any response code"


@pytest.mark.parametrize("enabled,stored,present", [(True, True, True), (True, False, False), (False, True, False)])
def test_order_topic_conf_in_route_answers(tmp_path, enabled, stored, present):
    for profile in ("4.9.8", "5.3.3"):
        ns = Namesrv(tmp_path / profile, profile, orderMessageEnable=enabled)
        ns.register()
        if stored:
            ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": NAMESPACE_ORDER_TOPIC_CONFIG, "key": "T1",
                                                "value": "broker-a:8"})
            ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": NAMESPACE_ORDER_TOPIC_CONFIG, "key": "T2",
                                                "value": "broker-a:2"})
        route = body_json(ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}))
        assert route.get("orderTopicConf") == ("broker-a:8" if present else None)


def test_order_message_enable_switched_on_at_runtime(ns):
    ns.register()
    ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": NAMESPACE_ORDER_TOPIC_CONFIG, "key": "T1", "value": "a:1"})
    assert "orderTopicConf" not in body_json(ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}))
    update = ns.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=true\n")
    assert update.code == ResponseCode.SUCCESS
    assert body_json(ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}))["orderTopicConf"] == "a:1"


def test_5_3_3_need_wait_for_service(tmp_path):
    ns = Namesrv(tmp_path, "5.3.3", needWaitForService=True, waitSecondsForService=45)
    ns.register()
    ns.clock.advance(44.9)
    early = ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"})
    assert (early.code, early.remark) == (ResponseCode.SYSTEM_ERROR, "name server not ready")
    assert ns.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).code == ResponseCode.SUCCESS  # only 105 waits
    ns.clock.advance(0.1)
    assert ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}).code == ResponseCode.SUCCESS


def test_a_wall_clock_stepped_back_does_not_stretch_the_wait_for_service(tmp_path):
    """waitSecondsForService counted on the wall clock (now - started_at): NTP's first sync stepping
    it back an hour after the start made every route lookup "name server not ready" for the hour.
    It runs on the steady clock (NamesrvState.uptime), as readinessBrokerWait does."""
    ns = Namesrv(tmp_path, "5.3.3", needWaitForService=True, waitSecondsForService=45)
    ns.register()
    ns.state.clock = lambda: ns.clock.seconds() - 3600  # the wall clock, stepped back an hour
    ns.clock.advance(45)
    assert ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}).code == ResponseCode.SUCCESS


def test_4_9_8_never_waits_for_service(tmp_path):
    ns = Namesrv(tmp_path, "4.9.8", needWaitForService=True, waitSecondsForService=45)
    ns.register()
    assert ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}).code == ResponseCode.SUCCESS


def test_5_3_3_without_need_wait_answers_at_once(tmp_path):
    ns = Namesrv(tmp_path, "5.3.3", waitSecondsForService=45)
    ns.register()
    assert ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}).code == ResponseCode.SUCCESS


# -- permissions, topics ---------------------------------------------------------------------------------------

def test_wipe_and_add_write_perm(ns):
    ns.register(topics=(TopicConfig("T1", 8, 8, 6), TopicConfig("T2", 8, 8, 7), TopicConfig("T3", 8, 8, 4)))
    ns.register(name="broker-b", addr=OTHER, topics=("T1", "T9"))
    wipe = ns.call(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
    assert wipe.code == ResponseCode.SUCCESS and wipe.ext["wipeTopicCount"] == "3"
    route = body_json(ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}))
    assert {q["brokerName"]: q["perm"] for q in route["queueDatas"]} == {"broker-a": 4, "broker-b": 6}
    add = ns.call(RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
    assert add.code == ResponseCode.SUCCESS and add.ext["addTopicCount"] == "3"
    route = body_json(ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T2"}))
    assert route["queueDatas"][0]["perm"] == 6
    none = ns.call(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "nobody"})
    assert none.ext["wipeTopicCount"] == "0"


def test_delete_topic_with_and_without_cluster(ns):
    ns.register(topics=("T1", "T2"))
    ns.register(name="broker-c", addr=OTHER, cluster="c2", topics=("T1", "T2"))
    answer = ns.call(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "T1", "clusterName": "c1"})
    assert answer.code == ResponseCode.SUCCESS
    route = body_json(ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}))
    assert [b["brokerName"] for b in route["brokerDatas"]] == ["broker-c"]
    ns.call(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "T2"})
    assert ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T2"}).code == ResponseCode.TOPIC_NOT_EXIST
    assert ns.call(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "absent"}).code == ResponseCode.SUCCESS


def test_register_topic_partial_update(tmp_path):
    ns = Namesrv(tmp_path, "5.3.3")
    ns.register(name="broker-a", addr=MASTER, topics=("T1", "T2"))
    ns.register(name="broker-b", addr=OTHER, topics=("T2", "T3"))
    queue = {"perm": 6, "readQueueNums": 2, "writeQueueNums": 2, "topicSysFlag": 0}
    route = {"queueDatas": [{"brokerName": "broker-b", **queue}, {"brokerName": "ghost", **queue},
                            {"brokerName": "broker-a", **queue}]}
    answer = ns.call(RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "T3"}, fastjson.dumps_bytes(route))
    assert answer.code == ResponseCode.SUCCESS
    assert set(ns.routes.topicQueueTable["T3"]) == {"broker-b"}
    assert ns.routes.topicQueueTable["T3"]["broker-b"].readQueueNums == 2
    new = ns.call(RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "NEW"}, fastjson.dumps_bytes(route))
    assert new.code == ResponseCode.SUCCESS and "NEW" not in ns.routes.topicQueueTable
    ok = {"queueDatas": [{"brokerName": "broker-a", **queue}]}
    ns.call(RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "NEW"}, fastjson.dumps_bytes(ok))
    assert ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "NEW"}).code == ResponseCode.SUCCESS
    assert ns.call(RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "X"}).code == ResponseCode.SUCCESS  # no body


# -- topic lists -------------------------------------------------------------------------------------------------

def topic_list(ns: Namesrv, code: int, ext: dict | None = None) -> list[str]:
    answer = ns.call(code, ext)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return sorted(body_json(answer)["topicList"])


def test_topic_lists(ns):
    ns.register(name="broker-a", addr=MASTER, cluster="c1",
                topics=(TopicConfig("PLAIN", 8, 8, 6, topicSysFlag=0), TopicConfig("UNIT", 8, 8, 6, topicSysFlag=1),
                        TopicConfig("SUB", 8, 8, 6, topicSysFlag=2), TopicConfig("BOTH", 8, 8, 6, topicSysFlag=3)))
    ns.register(name="broker-c", addr=OTHER, cluster="c2", topics=("OTHER", "PLAIN"))
    assert topic_list(ns, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER) == ["BOTH", "OTHER", "PLAIN", "SUB", "UNIT"]
    assert topic_list(ns, RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "c2"}) == ["OTHER", "PLAIN"]
    assert topic_list(ns, RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "unknown"}) == []
    assert topic_list(ns, RequestCode.GET_TOPICS_BY_CLUSTER) == []
    assert topic_list(ns, RequestCode.GET_UNIT_TOPIC_LIST) == ["BOTH", "UNIT"]
    assert topic_list(ns, RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST) == ["BOTH", "SUB"]
    assert topic_list(ns, RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST) == ["SUB"]
    system = ns.call(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS)
    assert sorted(body_json(system)["topicList"]) == ["broker-a", "broker-c", "c1", "c2"]
    assert body_json(system)["brokerAddr"] in {MASTER, OTHER}


def test_empty_topic_lists(ns):
    empty = ns.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    assert body_json(empty) == {"topicList": []}
    assert body_json(ns.call(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS)) == {"topicList": []}


def test_system_topic_list_has_no_duplicates(ns):
    ns.register(cluster="DefaultCluster", name="DefaultCluster", topics=("T1", "T2"))
    ns.register(cluster="c2", name="broker-x", addr=OTHER)
    ns.register(cluster="c3", name="broker-x", addr=SLAVE, broker_id=1)
    topics = body_json(ns.call(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS))["topicList"]
    assert sorted(topics) == ["DefaultCluster", "broker-x", "c2", "c3"]  # a Set in Java


@pytest.mark.parametrize("switch,codes", [
    ("enableAllTopicList", [RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER]),
    ("enableTopicList", [RequestCode.GET_TOPICS_BY_CLUSTER, RequestCode.GET_UNIT_TOPIC_LIST,
                         RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST, RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST])])
@BOTH
def test_topic_list_gates(tmp_path, profile, switch, codes):
    ns = Namesrv(tmp_path, profile, **{switch: False})
    ns.register()
    for code in codes:
        answer = ns.call(code, {"cluster": "c1"})
        if profile == "5.3.3":
            assert (answer.code, answer.remark, answer.body) == (ResponseCode.SYSTEM_ERROR, "disable", None)
        else:
            assert answer.code == ResponseCode.SUCCESS
    assert ns.call(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS).code == ResponseCode.SUCCESS  # never gated
    other = "enableTopicList" if switch == "enableAllTopicList" else "enableAllTopicList"
    assert ns.config[other] is True


# -- KV (100, 101, 102, 219) ------------------------------------------------------------------------------------

def test_kv_requests(ns):
    put = ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "k1", "value": "v1"})
    assert put.code == ResponseCode.SUCCESS
    get = ns.call(RequestCode.GET_KV_CONFIG, {"namespace": "NS", "key": "k1"})
    assert (get.code, get.ext["value"]) == (ResponseCode.SUCCESS, "v1")
    miss = ns.call(RequestCode.GET_KV_CONFIG, {"namespace": "NS", "key": "zz"})
    assert (miss.code, miss.remark) == (ResponseCode.QUERY_NOT_FOUND, "No config item, Namespace: NS Key: zz")
    null = ns.call(RequestCode.GET_KV_CONFIG, {})
    assert null.remark == "No config item, Namespace: null Key: null"
    listing = ns.call(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "NS"})
    assert body_json(listing) == {"table": {"k1": "v1"}}
    absent = ns.call(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "NOPE"})
    assert (absent.code, absent.remark) == (ResponseCode.QUERY_NOT_FOUND, "No config item, Namespace: NOPE")
    assert ns.call(RequestCode.DELETE_KV_CONFIG, {"namespace": "NS", "key": "k1"}).code == ResponseCode.SUCCESS
    assert ns.call(RequestCode.DELETE_KV_CONFIG, {"namespace": "NS", "key": "k1"}).code == ResponseCode.SUCCESS
    assert body_json(ns.call(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "NS"})) == {"table": {}}
    bad = ns.call(RequestCode.PUT_KV_CONFIG, {"key": "k", "value": "v"})
    assert (bad.code, bad.remark) == (ResponseCode.SYSTEM_ERROR, "namespace or key is null")
    on_disk = json.loads((ns.config_path.parent / "kvConfig.json").read_text())
    assert on_disk == {"configTable": {"NS": {}}}


# -- configuration (318, 319) -------------------------------------------------------------------------------------

def config_keys(ns: Namesrv) -> dict[str, str]:
    answer = ns.call(RequestCode.GET_NAMESRV_CONFIG)
    assert answer.code == ResponseCode.SUCCESS
    return dict(line.split("=", 1) for line in answer.body.decode().splitlines())


@pytest.mark.parametrize("line", ["kvConfigPath=/tmp/evil", "configStorePath=/tmp/evil", "configBlackList=",
                                  "rocketmqHome=/x", "listenPort=1", "serverChannelMaxIdleTimeSeconds=1",
                                  "compatVersion=4.9.8", "aclEnable=false", "tls.server.mode=disabled",
                                  "headerMaxLength=99999999", "controllerStorePath=/tmp/evil",
                                  "controllerDLegerPeers=n0-127.0.0.1:1", "controllerType=etcd",
                                  "needWaitForService=true", "waitSecondsForService=2147483647",
                                  "readinessBrokerWait=9223372036854775807"])
def test_update_config_refuses_blocked_keys_and_logs_who_tried(ns, line):
    before = dict(ns.config.values)
    with capturedLogs() as events:
        answer = ns.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=f"enableTopicList=false\n{line}\n".encode())
    assert (answer.code, answer.remark) == (ResponseCode.NO_PERMISSION, "Can not update config in black list.")
    assert ns.config.values == before
    assert not ns.config_path.exists()
    key = line.split("=")[0]
    assert any("127.0.0.1:40000" in formatEvent(e) and key in formatEvent(e) and e["log_level"] == LogLevel.warn
               for e in events)
    assert ns.state.refusals.counts["remoting", "config_key"] == 1  # namesrv_refusals_total{reason="config_key"}


def test_update_config_cannot_hold_route_lookups(tmp_path):
    """needWaitForService and waitSecondsForService hold route lookups for a while after the start (a
    deployment's choice, in its file). Java takes them from any peer at runtime, and so did this server:
    an unsigned ``needWaitForService=true`` with ``waitSecondsForService=2147483647`` answered every
    GET_ROUTEINFO_BY_TOPIC ``name server not ready`` at once, and, saved in configStorePath, after
    every restart too. Now they are refused as the other keys that change what the server serves."""
    ns = Namesrv(tmp_path, "5.3.3")
    ns.register()
    ns.clock.advance(60)
    attack = b"needWaitForService=true\nwaitSecondsForService=2147483647\n"
    answer = ns.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=attack)
    assert (answer.code, answer.remark) == (ResponseCode.NO_PERMISSION, "Can not update config in black list.")
    assert ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}).code == ResponseCode.SUCCESS
    assert ns.config["needWaitForService"] is False and not ns.config_path.exists()
    assert ns.state.refusals.counts["remoting", "config_key"] == 1


@pytest.mark.parametrize("value", ["x\u2028aclEnable=false", "x\\u2028aclEnable\\=false", "x\x85y", "x\x0by",
                                   "x\x1cy", "x\x1dy", "x\x1ey", "x\\u000ay", "x\\u000dy", "\x1b]0;t\x07", "x\\ud800",
                                   "\u202ex", "x\x00"])
def test_update_config_refuses_control_characters_and_changes_nothing(ns, value):
    """Java takes them (and writes \\n raw into its file); here a key or value holding one is a
    refusal: answered 16, one log line, counted as config_value, nothing changed in memory or on disk."""
    before = dict(ns.config.values)
    with capturedLogs() as events:
        answer = ns.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=f"orderMessageEnable=true\nproductEnvName={value}\n"
                         .encode())
    assert answer.code == ResponseCode.NO_PERMISSION
    assert answer.remark.startswith("Can not update config: productEnvName holds a control character (U+")
    assert ns.config.values == before and not ns.config_path.exists()
    (line,) = [formatEvent(e) for e in events if e.get("refused") == "config_value"]
    assert "127.0.0.1:40000" in line and "productEnvName" in line
    assert ns.state.refusals.counts["remoting", "config_value"] == 1


def test_update_config_reads_a_body_that_is_not_utf8_as_java_does(ns):
    """Java reads the body as ``new String(body, UTF_8)``: each malformed sequence one U+FFFD (a
    surrogate's three-byte form one, not one a byte), and the update goes on.  This server refused the
    whole body (``string2Properties error``), where Java took it; now it reads what Java reads, and the
    properties read go through the same checks: a control character beside the bad bytes is still
    refused (config_value), and what is taken is saved and read back as itself."""
    body = b"productEnvName=a\xffb\xed\xa0\x80c\xc0\xafd\xe2\x82\n"
    answer = ns.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=body)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    taken = "a\ufffdb\ufffdc\ufffd\ufffdd\ufffd"
    assert ns.config["productEnvName"] == taken and config_keys(ns)["productEnvName"] == taken
    written = dict(properties.pairs(ns.config_path.read_text()))
    assert written["productEnvName"] == taken

    answer = ns.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"productEnvName=x\xff\x1b[2Jy\n")
    assert answer.code == ResponseCode.NO_PERMISSION and "U+001B" in answer.remark
    assert ns.config["productEnvName"] == taken and ns.state.refusals.counts["remoting", "config_value"] == 1


def test_update_config_refuses_a_body_over_64_kib_unread(ns):
    """The whole configuration is under 4 KiB; a 16 MiB body of newlines held the reactor for seconds."""
    answer = ns.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=true\n" + b"\n" * 65536)
    assert answer.code == ResponseCode.NO_PERMISSION and "over 65536" in answer.remark
    assert ns.config["orderMessageEnable"] is False and ns.state.refusals.counts["remoting", "config_size"] == 1
    assert ns.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=true\n" + b"\n" * 65000).code == 0


def test_update_config_logs_a_bounded_line_however_many_keys_it_sends(ns):
    """Each update was one info line of every key and value sent, known to the configuration or
    not: a body of 2,000 unknown keys (under the 64 KiB limit; any peer's without ACL) was a line of
    63 KB, the log filling faster than the peer sent.  The line is now clipped as the audit
    event is (audit.clipped: 64 keys, 256 characters a value)."""
    body = "orderMessageEnable=true\n" + "".join(f"unknownKey{n}={'v' * 10}\n" for n in range(2000))
    with capturedLogs() as events:
        answer = ns.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=body.encode())
    assert answer.code == ResponseCode.SUCCESS and ns.config["orderMessageEnable"] is True
    (line,) = [formatEvent(e) for e in events if "updateNamesrvConfig from" in formatEvent(e)]
    assert "orderMessageEnable" in line and "1937 more keys" in line and len(line) < 4096, len(line)


def test_update_config_blacklist_from_config(tmp_path):
    ns = Namesrv(tmp_path, "5.3.3", configBlackList="configBlackList;orderMessageEnable")
    answer = ns.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=true\n")
    assert answer.code == ResponseCode.NO_PERMISSION and ns.config["orderMessageEnable"] is False


def test_update_config_applies_and_persists(ns):
    answer = ns.call(RequestCode.UPDATE_NAMESRV_CONFIG,
                     body=b"# tuned\nenableTopicList = false\nproductEnvName=prod\ncustomKey=42\n")
    assert answer.code == ResponseCode.SUCCESS
    assert ns.config["enableTopicList"] is False and ns.config["productEnvName"] == "prod"
    written = dict(line.split("=", 1) for line in ns.config_path.read_text().splitlines())
    # like Java's Configuration.update, keys no config object knows are dropped, not stored
    assert written["productEnvName"] == "prod" and "customKey" not in written
    # but a bindAddress no one set (ours: 127.0.0.1, Java 5.3.3's: 0.0.0.0, which its -c reads from the file)
    answered = config_keys(ns)
    assert written == {key: value for key, value in answered.items() if key != "bindAddress"}
    if ns.profile.topic_list_gates:
        assert ns.call(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "c1"}).remark == "disable"


def test_update_config_changes_route_rules_live(tmp_path):
    ns = Namesrv(tmp_path, "5.3.3")
    ns.register(topics=("T1", "T2", "T3"))
    ns.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"deleteTopicWithBrokerRegistration=true\n")
    ns.register(topics=("T1", "T2"), version=(2, 2))
    assert sorted(ns.routes.topicQueueTable) == ["T1", "T2"]


def test_update_config_without_body_is_a_no_op(ns):
    assert ns.call(RequestCode.UPDATE_NAMESRV_CONFIG).code == ResponseCode.SUCCESS
    assert not ns.config_path.exists()


def _no_negative_retries(values) -> None:
    if values["moduleRetries"] < 0:
        raise ConfigError(f"moduleRetries: {values['moduleRetries']} is out of range (at least 0)")


#: every numeric key of the server's own is guarded (no remote peer changes them): a module's key that
#: UPDATE_NAMESRV_CONFIG may change, as a module's schema adds one, for the checks of a number
NUMBERED_SCHEMA = SERVER_SCHEMA.with_keys((ConfigKey("moduleRetries", 3, OURS),), _no_negative_retries)


def test_update_config_with_a_bad_number(tmp_path):
    ns = Namesrv(tmp_path, schema=NUMBERED_SCHEMA)
    answer = ns.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"moduleRetries=abc\n")
    assert answer.code == ResponseCode.SYSTEM_ERROR and "moduleRetries" in answer.remark
    assert ns.config["moduleRetries"] == 3


def test_update_config_error_leaves_the_config_unchanged(tmp_path):
    ns = Namesrv(tmp_path, schema=NUMBERED_SCHEMA)
    answer = ns.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=true\nmoduleRetries=-1\n")
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert ns.config["orderMessageEnable"] is False  # nothing of a refused update is applied
    assert not ns.config_path.exists()


def test_get_config_lists_the_keys(ns):
    keys = config_keys(ns)
    assert keys["listenPort"] == "9876"
    assert keys["kvConfigPath"] == str(ns.config_path.parent / "kvConfig.json")
    assert keys["orderMessageEnable"] == "false" and keys["productEnvName"] == "center"
    assert ("enableTopicList" in keys) is ns.profile.topic_list_gates
    assert ("returnOrderTopicConfigToBroker" in keys) is ns.profile.v5_bodies
    if ns.profile.sorted_config_text:
        assert list(keys) == sorted(keys)


def test_get_config_lists_config_file_keys(tmp_path):
    path = tmp_path / "namesrv.conf"
    path.write_text("customKey=hello\nenableTopicList=false\nkvConfigPath=%s\ncompatVersion=4.9.8\n"
                    % (tmp_path / "kv.json"))
    config = NamesrvConfig.from_file(str(path), schema=SERVER_SCHEMA)
    clock = task.Clock()
    answer = built.dispatcher(config, clock).dispatch(RemotingCommand.request(RequestCode.GET_NAMESRV_CONFIG), Peer(1))
    keys = dict(line.split("=", 1) for line in answer.body.decode().splitlines())
    assert keys["customKey"] == "hello" and keys["enableTopicList"] == "false"
    assert keys["compatVersion"] == "4.9.8" and keys["configStorePath"] == str(path)


def test_update_config_changes_a_key_only_the_config_file_has(tmp_path):
    """Java's Configuration.update merges every key allConfigs holds, and the -c file's keys are
    in it: such a key changes, is listed and persisted; one nowhere is still dropped."""
    path = tmp_path / "namesrv.conf"
    path.write_text("customKey=hello\nkvConfigPath=%s\n" % (tmp_path / "kv.json"))
    dispatcher = built.dispatcher(NamesrvConfig.from_file(str(path), schema=SERVER_SCHEMA), task.Clock())
    update = RemotingCommand.request(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"customKey=bye\nnowhere=1\n")
    assert dispatcher.dispatch(update, Peer(1)).code == ResponseCode.SUCCESS
    answer = dispatcher.dispatch(RemotingCommand.request(RequestCode.GET_NAMESRV_CONFIG), Peer(1))
    keys = dict(line.split("=", 1) for line in answer.body.decode().splitlines())
    assert keys["customKey"] == "bye" and "nowhere" not in keys
    assert "customKey=bye" in path.read_text() and "nowhere" not in path.read_text()


# -- answers stay fresh: every change shows in the next answer ------------------------------------------------------

def route_of(ns: Namesrv, topic: str = "T1", version: int | None = None):
    answer = ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, version=version)
    return body_json(answer) if answer.code == ResponseCode.SUCCESS else answer.code


def queue_perms(route) -> dict[str, int]:
    return {q["brokerName"]: q["perm"] for q in route["queueDatas"]}


def addrs_of(route) -> dict[str, dict[str, str]]:
    return {b["brokerName"]: b["brokerAddrs"] for b in route["brokerDatas"]}


def test_route_answers_follow_every_change(ns):
    ns.register(topics=("T1", "T2"))
    for version in (V4_9_4, 63):  # both encodings, each asked twice
        assert route_of(ns, version=version) == route_of(ns, version=version)
    assert queue_perms(route_of(ns)) == {"broker-a": 6}
    ns.call(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
    assert queue_perms(route_of(ns)) == {"broker-a": 4}
    assert queue_perms(route_of(ns, version=63)) == {"broker-a": 4}
    ns.call(RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
    assert queue_perms(route_of(ns)) == {"broker-a": 6}
    ns.register(addr=SLAVE, broker_id=1)
    assert addrs_of(route_of(ns)) == {"broker-a": {"0": MASTER, "1": SLAVE}}
    ns.register(name="broker-b", addr=OTHER, topics=("T1", "T3"))
    assert set(addrs_of(route_of(ns))) == {"broker-a", "broker-b"}
    ns.register(topics=(TopicConfig("T1", 2, 2, 6), "T2"), version=(5, 5))
    assert {q["brokerName"]: q["readQueueNums"] for q in route_of(ns)["queueDatas"]} == {"broker-a": 2, "broker-b": 8}
    ns.call(RequestCode.UNREGISTER_BROKER, {"clusterName": "c1", "brokerAddr": SLAVE, "brokerName": "broker-a",
                                            "brokerId": "1"})
    assert addrs_of(route_of(ns))["broker-a"] == {"0": MASTER}
    ns.routes.on_channel_destroy(1)  # every broker registered over channel 1 is gone
    assert route_of(ns) == ResponseCode.TOPIC_NOT_EXIST


def test_route_answers_follow_topic_administration(ns):
    ns.register(topics=("T1", "T2"))
    ns.register(name="broker-c", addr=OTHER, cluster="c2", topics=("T1", "T2"))
    assert set(addrs_of(route_of(ns))) == {"broker-a", "broker-c"}
    ns.call(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "T1", "clusterName": "c2"})
    assert set(addrs_of(route_of(ns))) == {"broker-a"}
    ns.call(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "T1"})
    assert route_of(ns) == ResponseCode.TOPIC_NOT_EXIST
    ns.register(topics=("T1", "T2"), version=(2, 2))
    assert set(addrs_of(route_of(ns))) == {"broker-a"}
    ns.clock.advance(121)
    assert sorted(ns.routes.scan_not_active_broker()) == [1, 1]
    assert route_of(ns) == ResponseCode.TOPIC_NOT_EXIST


def test_route_answers_follow_order_topic_config(ns):
    ns.register()
    ns.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=true\n")
    assert "orderTopicConf" not in route_of(ns)
    ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": NAMESPACE_ORDER_TOPIC_CONFIG, "key": "T1", "value": "a:1"})
    assert route_of(ns)["orderTopicConf"] == "a:1"
    ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": NAMESPACE_ORDER_TOPIC_CONFIG, "key": "T1", "value": "a:2"})
    assert route_of(ns)["orderTopicConf"] == "a:2"
    ns.call(RequestCode.DELETE_KV_CONFIG, {"namespace": NAMESPACE_ORDER_TOPIC_CONFIG, "key": "T1"})
    assert "orderTopicConf" not in route_of(ns)


@pytest.mark.parametrize(("key", "value"), [("T1", "x"), ("T1", "a:x"), ("T1", "a:2147483647"), ("T1", "a:4;;b:4"),
                                          ("T1", ":4"), ("T1", "a\x1b[2J:4"), ("T 1", "a:1"), ("T" * 128, "a:1"),
                                          ("T1", "a:\U0001d7d2")])
def test_an_order_topic_conf_no_producer_could_use_is_refused_and_changes_nothing(ns, key, value):
    """Every Java producer of the topic parses the route's orderTopicConf (split on ';' and ':',
    Integer.parseInt, a MessageQueue a queue): one unsigned put of ``x`` made each producer's route
    update throw (the topic unusable), ``a:2147483647`` made each build 2^31 queues.  Java's NameServer
    stores either; here a value no producer could use, or a key no client looks up, is refused
    (order_topic_conf: a line and a count), and nothing changes."""
    ns.register()
    ns.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=true\n")
    ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": NAMESPACE_ORDER_TOPIC_CONFIG, "key": "T1", "value": "a:1"})
    before = ns.state.kv.get(NAMESPACE_ORDER_TOPIC_CONFIG, key)
    with capturedLogs() as events:
        answer = ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": NAMESPACE_ORDER_TOPIC_CONFIG, "key": key,
                                                     "value": value})
    assert answer.code == ResponseCode.NO_PERMISSION and answer.remark.startswith("putKVConfig refused: ")
    assert ns.state.kv.get(NAMESPACE_ORDER_TOPIC_CONFIG, key) == before
    assert route_of(ns)["orderTopicConf"] == "a:1"
    (line,) = [formatEvent(e) for e in events if e.get("refused") == "order_topic_conf"]
    assert "127.0.0.1:40000" in line and "\x1b" not in line
    assert ns.state.refusals.counts["remoting", "order_topic_conf"] == 1


def test_an_order_topic_conf_producers_parse_is_taken_as_java_takes_it(ns):
    ns.register()
    ns.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=true\n")
    for value in ("broker-a:4;broker-b:4", "a:1;", "a:-3", "a:+5;b:65531", "a:1:2", ";;", "", "a:\u0664"):
        put = {"namespace": NAMESPACE_ORDER_TOPIC_CONFIG, "key": "%RETRY%g|T-1_x", "value": value}
        assert ns.call(RequestCode.PUT_KV_CONFIG, put).code == ResponseCode.SUCCESS, value
    put = {"namespace": "OTHER", "key": "T 1", "value": "x"}  # other namespaces hold anything
    assert ns.call(RequestCode.PUT_KV_CONFIG, put).code == ResponseCode.SUCCESS
    assert ns.state.refusals.counts["remoting", "order_topic_conf"] == 0


def test_5_3_3_route_answers_follow_register_topic_and_acting_master(tmp_path):
    ns = Namesrv(tmp_path, "5.3.3")
    ns.register(addr=SLAVE, broker_id=1, extra={"enableActingMaster": "true"})
    assert addrs_of(route_of(ns)) == {"broker-a": {"1": SLAVE}}
    ns.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"supportActingMaster=true\n")
    assert addrs_of(route_of(ns)) == {"broker-a": {"0": SLAVE}}  # the read-only prime slave acts as master
    ns.register(name="broker-b", addr=OTHER, topics=("T8", "T9"))
    queue = {"perm": 6, "readQueueNums": 1, "writeQueueNums": 1, "topicSysFlag": 0}
    ns.call(RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "T1"},
            fastjson.dumps_bytes({"queueDatas": [{"brokerName": "broker-b", **queue}]}))
    assert set(addrs_of(route_of(ns))) == {"broker-a", "broker-b"}


def test_whole_table_answers_follow_changes(ns):
    def cluster():
        return body_json(ns.call(RequestCode.GET_BROKER_CLUSTER_INFO))

    def all_topics():
        return sorted(body_json(ns.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))["topicList"])

    assert cluster() == {"brokerAddrTable": {}, "clusterAddrTable": {}} and all_topics() == []
    ns.register(topics=("T1", "T2"))
    assert cluster()["clusterAddrTable"] == {"c1": ["broker-a"]} and all_topics() == ["T1", "T2"]
    ns.register(addr=SLAVE, broker_id=1)
    assert cluster()["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"0": MASTER, "1": SLAVE}
    ns.register(name="broker-b", addr=OTHER, cluster="c2", topics=("T3", "T4"))
    assert set(cluster()["clusterAddrTable"]) == {"c1", "c2"} and all_topics() == ["T1", "T2", "T3", "T4"]
    ns.call(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "T3"})
    assert all_topics() == ["T1", "T2", "T4"]
    ns.call(RequestCode.UNREGISTER_BROKER, {"clusterName": "c2", "brokerAddr": OTHER, "brokerName": "broker-b",
                                            "brokerId": "0"})
    assert set(cluster()["clusterAddrTable"]) == {"c1"} and all_topics() == ["T1", "T2"]
    if ns.profile.v5_bodies:
        ns.register(extra={"__ZONE_NAME": "zone-1", "enableActingMaster": "true"}, version=(3, 3))
        broker = cluster()["brokerAddrTable"]["broker-a"]
        assert (broker["zoneName"], broker["enableActingMaster"]) == ("zone-1", True)


def test_route_answer_drops_filter_servers_of_an_unregistered_address(ns):
    ns.register(filters=["10.0.0.1:30000"])
    assert route_of(ns)["filterServerTable"] == {MASTER: ["10.0.0.1:30000"]}
    ns.call(RequestCode.UNREGISTER_BROKER, {"clusterName": "c1", "brokerAddr": MASTER, "brokerName": "other",
                                            "brokerId": "0"})
    assert ns.routes.filterServerTable == {}
    assert route_of(ns)["filterServerTable"] == {}


def test_route_answer_filter_servers_follow_registration(ns):
    ns.register(filters=["10.0.0.1:30000"])
    assert route_of(ns)["filterServerTable"] == {MASTER: ["10.0.0.1:30000"]}
    ns.register(filters=["10.0.0.1:30000", "10.0.0.1:30001"], version=(2, 2))
    assert route_of(ns)["filterServerTable"] == {MASTER: ["10.0.0.1:30000", "10.0.0.1:30001"]}
    ns.register(filters=[], version=(3, 3))
    assert route_of(ns)["filterServerTable"] == {}


def test_inflate_limit_is_the_configured_one(tmp_path):
    ns = Namesrv(tmp_path, inflateMaxLength=1024)
    answer = ns.register(compressed=True, topics=[f"Topic{i:04d}" for i in range(200)])
    assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR,
                                            "compressed RegisterBrokerBody inflates beyond 1024 bytes")
    assert ns.routes.topicQueueTable == {}
    assert ns.register(compressed=True, topics=("T1", "T2")).code == ResponseCode.SUCCESS


#: Java Properties' own escapes in an UPDATE_NAMESRV_CONFIG body: a line continued (a backslash at the
#: line's end, the next line's indent dropped), an escaped backslash before a real line end (two lines),
#: ``#``/``!`` leading a value and a line, ``=``, ``:`` and a space escaped into a key, a key continued,
#: a colon or space as the separator, a last backslash alone
JAVA_ESCAPES = ["productEnvName=x\\\naclEnable=false", "productEnvName=x\\\n  kvConfigPath=/tmp/evil",
                "productEnvName=x\\\\\naclEnable=false", "productEnvName=#not a comment", "productEnvName=!bang",
                "#productEnvName=comment\naclEnable=false", "!productEnvName=comment",
                "productEnvName=ends with backslash\\\\", "productEnvName=a=b:c d", "product\\=EnvName=x",
                "productEnvName\\:x=y", "productEnvName\\ =y", "productEnvName\\\n=split key",
                "productEnvName:colon", "productEnvName value", "  productEnvName  =  padded  ",
                "productEnvName=trailing\\", "orderMessageEnable=true\\\nfalse", "productEnvName=x\\u0041\\=\\:\\#"]


@pytest.mark.parametrize("body", JAVA_ESCAPES)
def test_java_properties_escapes_in_an_update_save_what_was_taken_and_smuggle_no_key(ns, body):
    """Whatever Java's Properties rules make of the body, what is taken is what the saved file reads
    back as (the next start's values), and no key comes of a value: a continued line is one value, a
    key with an escaped separator is a key no setting has (ignored), a line end after an escaped
    backslash is a second key (refused when it is in the black list: nothing taken)."""
    from twisted_namesrv import properties

    answer = ns.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=body.encode())
    taken = dict(ns.config.values)
    if answer.code != ResponseCode.SUCCESS:
        assert answer.remark == "Can not update config in black list." and not ns.config_path.exists()
        return
    saved = properties.load(ns.config_path.read_text("utf-8"))
    assert set(saved) <= set(taken) and "aclEnable" not in saved and saved.get("kvConfigPath") != "/tmp/evil"
    assert {key: str(taken[key]).lower() if isinstance(taken[key], bool) else str(taken[key]) for key in saved} == {
        key: value for key, value in saved.items()}
