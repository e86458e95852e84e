"""The route tables' limits: a registration that would pass maxTopicsPerBroker, maxBrokerGroups,
maxBrokers, maxBrokersPerGroup or maxTopicQueueEntries is refused whole (SYSTEM_ERROR naming the limit, one log line,
one count in namesrv_refusals_total), changing nothing; a table over maxTopicsPerBroker is
refused while its entries are counted, before it is all decoded.  What the limits count is kept as
the tables change, and equals a recount after anything."""

from __future__ import annotations

import copy
import json
import random
import struct
import zlib

import pytest
from twisted.logger import capturedLogs

from tests.test_processor import MASTER, OTHER, SLAVE, Namesrv
from twisted_namesrv.bodies import register
from twisted_namesrv.bodies.register import (
    RegisterBrokerBody,
    RegistrationRefused,
    TopicConfig,
    decode_register_body,
    encode_register_body,
)
from twisted_namesrv.bodies.route import DataVersion, QueueData
from twisted_namesrv.budget import MemoryBudget
from twisted_namesrv.remoting import RequestCode, ResponseCode, fastjson
from twisted_namesrv.remoting.codes import V4_9_8
from twisted_namesrv.state.config import KEYS_BY_NAME, ConfigError, NamesrvConfig
from twisted_namesrv.state.kv import NAMESPACE_ORDER_TOPIC_CONFIG
from twisted_namesrv.state.routes import FILTER_SERVERS_MAX
from twisted_namesrv.state.snapshot import export_routes, import_routes


def tables(ns: Namesrv) -> tuple:
    routes = ns.routes
    return copy.deepcopy((routes.topicQueueTable, routes.brokerAddrTable, routes.clusterAddrTable,
                          routes.brokerLiveTable, routes.filterServerTable, routes.topicQueueMappingInfoTable))


def refused(ns: Namesrv, answer, reason: str, events) -> None:
    """``answer`` is the refusal of ``reason``: its answer, its one line, its count."""
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert answer.remark.startswith("register broker refused: ") and reason_key(reason) in answer.remark
    assert ns.state.refusals.counts["remoting", reason] == 1
    (line,) = [e for e in events if e.get("refused") == reason]
    assert line["log_level"].name == "warn" and line["broker"] and line["why"] in answer.remark


def reason_key(reason: str) -> str:
    """The config key a reason names: max_topics_per_broker -> maxTopicsPerBroker."""
    first, *rest = reason.split("_")
    return first + "".join(word.title() for word in rest)


def names(prefix: str, count: int) -> list[str]:
    return [f"{prefix}{i:05d}" for i in range(count)]


@pytest.mark.parametrize("profile", ["4.9.8", "5.3.3"])
def test_a_new_broker_group_past_max_broker_groups_is_refused_and_changes_nothing(tmp_path, profile):
    ns = Namesrv(tmp_path, profile, maxBrokerGroups=2)
    assert ns.register(name="a", addr="10.0.0.1:1").code == ResponseCode.SUCCESS
    assert ns.register(name="b", addr="10.0.0.2:1").code == ResponseCode.SUCCESS
    before = tables(ns)
    with capturedLogs() as events:
        answer = ns.register(name="c", addr="10.0.0.3:1", topics=("T9", "T8"))
    refused(ns, answer, "max_broker_groups", events)
    assert tables(ns) == before
    assert ns.register(name="a", addr="10.0.0.1:1", topics=("T1", "T2", "T3"), version=(1, 2)).code == 0
    assert ns.register(name="b", addr="10.0.0.4:1", broker_id=1).code == 0  # a new member of a known group


def a_third_member_is_refused(ns, reason: str) -> None:
    """A master and its slave registered, a third member refused for ``reason`` and nothing changed."""
    assert ns.register(addr=MASTER).code == ResponseCode.SUCCESS
    assert ns.register(addr=SLAVE, broker_id=1).code == ResponseCode.SUCCESS
    before = tables(ns)
    with capturedLogs() as events:
        answer = ns.register(addr=OTHER, broker_id=2)
    refused(ns, answer, reason, events)
    assert tables(ns) == before


@pytest.mark.parametrize("profile", ["4.9.8", "5.3.3"])
def test_a_new_broker_past_max_brokers_is_refused_and_changes_nothing(tmp_path, profile):
    ns = Namesrv(tmp_path, profile, maxBrokers=2)
    a_third_member_is_refused(ns, "max_brokers")
    assert ns.register(addr=SLAVE, broker_id=1, version=(1, 2)).code == ResponseCode.SUCCESS


@pytest.mark.parametrize("profile", ["4.9.8", "5.3.3"])
def test_a_new_member_past_max_brokers_per_group_is_refused_and_changes_nothing(tmp_path, profile):
    """Every registration of a member walks its group's addresses: a group of thousands makes
    each cost milliseconds of the reactor."""
    ns = Namesrv(tmp_path, profile, maxBrokersPerGroup=2)
    a_third_member_is_refused(ns, "max_brokers_per_group")
    assert ns.register(addr="10.0.0.9:1", broker_id=1).code == ResponseCode.SUCCESS  # id 1 moves: still two
    assert ns.register(addr=SLAVE, broker_id=0).code == ResponseCode.SUCCESS  # id 0 taken by another address
    assert ns.register(name="other", addr=OTHER).code == ResponseCode.SUCCESS


def test_split_registrations_past_max_topics_per_broker_are_refused_whole(tmp_path):
    """5.x brokers send a big table in pieces (enableSplitRegistration): the group's topics are
    counted in the table, not per registration; a piece that would pass the limit adds none."""
    ns = Namesrv(tmp_path, "5.3.3", maxTopicsPerBroker=100)
    assert ns.register(topics=names("A", 60), version=(1, 1)).code == ResponseCode.SUCCESS
    assert ns.register(name="other", addr=OTHER, topics=names("A", 60)).code == ResponseCode.SUCCESS
    before = tables(ns)
    with capturedLogs() as events:
        answer = ns.register(topics=names("B", 41), version=(1, 2))
    refused(ns, answer, "max_topics_per_broker", events)
    assert "would hold 101 topics" in answer.remark
    assert tables(ns) == before
    assert ns.register(topics=names("B", 40), version=(1, 3)).code == ResponseCode.SUCCESS
    assert ns.routes.topicsOfGroup["broker-a"] == 100
    assert ns.register(topics=names("A", 60), version=(1, 4)).code == ResponseCode.SUCCESS  # nothing new


@pytest.mark.parametrize("profile", ["4.9.8", "5.3.3"])
def test_a_table_past_max_topic_queue_entries_is_refused_whole(tmp_path, profile):
    ns = Namesrv(tmp_path, profile, maxTopicQueueEntries=150)
    assert ns.register(name="a", addr="10.0.0.1:1", topics=names("T", 100)).code == ResponseCode.SUCCESS
    before = tables(ns)
    with capturedLogs() as events:
        answer = ns.register(name="b", addr="10.0.0.2:1", topics=names("T", 51))  # the same topics: 51 entries
    refused(ns, answer, "max_topic_queue_entries", events)
    assert "would hold 151 topic-queue entries" in answer.remark
    assert tables(ns) == before
    assert ns.register(name="b", addr="10.0.0.2:1", topics=names("T", 50)).code == ResponseCode.SUCCESS
    assert ns.routes.queueEntries == 150


def register_topic(ns: Namesrv, topic: str, *groups: str):
    body = json.dumps({"queueDatas": [{"brokerName": group, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
                                       "topicSysFlag": 0} for group in groups]}).encode()
    return ns.call(RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": topic}, body)


def test_register_topic_in_namesrv_is_under_the_limits_too(tmp_path):
    """REGISTER_TOPIC_IN_NAMESRV added (topic, group) entries past maxTopicsPerBroker and
    maxTopicQueueEntries: one small request per entry, unsigned without ACL."""
    ns = Namesrv(tmp_path, "5.3.3", maxTopicsPerBroker=5, maxTopicQueueEntries=7)
    assert ns.register(topics=names("T", 3)).code == ResponseCode.SUCCESS
    assert ns.register(name="b", addr=OTHER, topics=names("T", 3)).code == ResponseCode.SUCCESS
    assert register_topic(ns, "X0", "broker-a").code == ResponseCode.SUCCESS  # 7 entries now, broker-a 4 topics
    before = tables(ns)
    with capturedLogs() as events:
        answer = register_topic(ns, "X1", "broker-a")
    assert answer.code == ResponseCode.SYSTEM_ERROR and "over maxTopicQueueEntries (7)" in answer.remark
    assert tables(ns) == before and ns.state.refusals.counts["remoting", "max_topic_queue_entries"] == 1
    assert [e["topic"] for e in events if e.get("refused") == "max_topic_queue_entries"] == ["X1"]
    ns.config.values["maxTopicQueueEntries"] = 100
    assert register_topic(ns, "X1", "broker-a").code == ResponseCode.SUCCESS
    answer = register_topic(ns, "X2", "b", "broker-a")
    assert answer.code == ResponseCode.SYSTEM_ERROR and "broker group broker-a would hold 6 topics" in answer.remark
    assert "X2" not in ns.routes.topicQueueTable and ns.routes.topicsOfGroup == {"broker-a": 5, "b": 3}
    assert register_topic(ns, "T00000", "broker-a").code == ResponseCode.SUCCESS  # held already: no new entry


def test_register_topic_with_more_queue_datas_than_groups_registered_is_refused_unread(tmp_path, monkeypatch):
    """Java reads every queueData of a REGISTER_TOPIC_IN_NAMESRV and stops storing at the first unknown
    broker group; so did this server, building each in the reactor: one unsigned request of 190,000
    entries in 16 MiB was 380,090 Python calls, 100 now.  More entries than every group registered and
    the unknown one where it stops name a group twice or come after that: refused whole before any is
    read (max_broker_groups: a line, a count)."""
    ns = Namesrv(tmp_path, "5.3.3")
    assert ns.register(topics=names("T", 3)).code == ResponseCode.SUCCESS
    assert ns.register(name="b", addr=OTHER, topics=names("T", 3)).code == ResponseCode.SUCCESS
    read = []
    real = QueueData.from_json
    monkeypatch.setattr(QueueData, "from_json", staticmethod(lambda obj: read.append(obj) or real(obj)))
    before = tables(ns)
    with capturedLogs() as events:
        answer = register_topic(ns, "X0", "broker-a", "b", *(f"g{i}" for i in range(600)))  # within 64 KiB
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert "its 602 queueDatas are more than the 2 broker groups registered and one" in answer.remark
    assert read == [] and tables(ns) == before
    assert ns.state.refusals.counts["remoting", "max_broker_groups"] == 1
    assert [e["topic"] for e in events if e.get("refused") == "max_broker_groups"] == ["X0"]
    # every group and an unknown one (where Java and this server stop; a new topic then gets none): read
    assert register_topic(ns, "X0", "b", "broker-a", "ghost").code == ResponseCode.SUCCESS
    assert "X0" not in ns.routes.topicQueueTable and len(read) == 3
    assert register_topic(ns, "X0", "b", "broker-a").code == ResponseCode.SUCCESS
    assert set(ns.routes.topicQueueTable["X0"]) == {"b", "broker-a"}


@pytest.mark.parametrize("code", [RequestCode.QUERY_DATA_VERSION, RequestCode.REGISTER_TOPIC_IN_NAMESRV])
def test_a_body_decoded_at_once_past_its_bound_is_refused_unread(tmp_path, monkeypatch, code):
    """QUERY_DATA_VERSION's DataVersion and REGISTER_TOPIC_IN_NAMESRV's TopicRouteData are decoded whole
    in the reactor's turn (a Java broker sends under 1 KiB of either). Any peer (without ACL) sent 5 MB
    of fastjson's bare-number keys, {0:1,1:1,...}, read through the json module: 13 s with no answer to
    anyone (a lookup client's probe timed out; load 20, 2 cores), 2 s of CPU for 16 MiB of quoted keys.
    Over BODY_AT_ONCE_MAX it is refused before a byte is decoded (bad_request: a line a host, a count)
    and nothing changes; at the bound it is read as before."""
    from twisted_namesrv.remoting.values import BODY_AT_ONCE_MAX

    ns = Namesrv(tmp_path, "5.3.3")
    assert ns.register(topics=names("T", 3)).code == ResponseCode.SUCCESS
    decoded = []
    real = fastjson.loads
    monkeypatch.setattr(fastjson, "loads", lambda data: (len(data) > 4096 and decoded.append(len(data))) or real(data))
    ext = {"clusterName": "c1", "brokerAddr": MASTER, "brokerName": "broker-a", "brokerId": "0", "topic": "X0"}
    queue = {"brokerName": "broker-a", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "topicSysFlag": 0}

    def body(size: int) -> bytes:
        head = json.dumps({"counter": 2, "timestamp": 1, "queueDatas": [queue]})[:-1].encode() + b', "pad": "'
        return head + b"x" * (size - len(head) - 2) + b'"}'

    before = tables(ns)
    answer = ns.call(code, ext, body(BODY_AT_ONCE_MAX + 1))
    assert answer.code == ResponseCode.SYSTEM_ERROR and f"is over the {BODY_AT_ONCE_MAX} read at once" in answer.remark
    assert decoded == [] and tables(ns) == before
    assert ns.state.refusals.counts["remoting", "bad_request"] == 1
    assert ns.call(code, ext, body(BODY_AT_ONCE_MAX)).code == ResponseCode.SUCCESS and decoded == [BODY_AT_ONCE_MAX]
    if code == RequestCode.REGISTER_TOPIC_IN_NAMESRV:
        assert set(ns.routes.topicQueueTable["X0"]) == {"broker-a"}


def long_name_registration(**fields: str) -> tuple[dict, bytes]:
    """A compressed registration of a few kilobytes whose one long field inflates in the tables (header fields
    are at most headerMaxLength, 64 KiB)."""
    topics = {t: TopicConfig(t) for t in ("T1", "T2", fields.pop("topic", "T3"))}
    mappings = {}
    if "mapping" in fields:
        mappings = {"M": {"topic": "M", "bname": fields.pop("mapping"), "epoch": 1}}
    filters = [fields.pop("filter")] if "filter" in fields else []
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, 1), topics, filters, mappings), True, True)
    ext = {"clusterName": "c1", "brokerAddr": MASTER, "brokerName": "broker-a", "brokerId": "0",
           "haServerAddr": "10.0.0.1:10912", "compressed": "true", **fields}
    return ext, body


@pytest.mark.parametrize("field", ["topic", "mapping", "filter", "brokerName", "clusterName", "brokerAddr",
                                   "haServerAddr"])
def test_a_name_longer_than_max_name_length_is_refused(tmp_path, field):
    """The limits count entries; what one entry holds was unbounded: 51 KB of compressed registration
    kept a topic name of 50 MB, 100 KB a static topic's mapping of 100 MB (for good: Java never removes
    mappings), 240 KB a filterServerList of 50 MB."""
    ns = Namesrv(tmp_path, "5.3.3")
    length = 50_000_000 if field in ("topic", "mapping", "filter") else 60_000
    ext, body = long_name_registration(**{field: "n" * length})
    assert len(body) < 200_000
    with capturedLogs() as events:
        answer = ns.call(RequestCode.REGISTER_BROKER, ext, body)
    refused(ns, answer, "max_name_length", events)
    assert "characters is over maxNameLength (512)" in answer.remark
    assert ns.routes.brokerAddrTable == {} and ns.routes.topicQueueTable == {}
    assert ns.routes.topicQueueMappingInfoTable == {} and ns.routes.filterServerTable == {}
    assert register_topic(ns, "t" * 513, "broker-a").code == ResponseCode.SYSTEM_ERROR


def test_filter_servers_past_the_most_are_refused(tmp_path):
    ns = Namesrv(tmp_path, "4.9.8")
    answer = ns.register(filters=[f"10.0.0.9:{port}" for port in range(FILTER_SERVERS_MAX + 1)])
    assert answer.code == ResponseCode.SYSTEM_ERROR and "lists 9 servers, over the 8" in answer.remark
    assert ns.state.refusals.counts["remoting", "filter_servers"] == 1 and ns.routes.brokerAddrTable == {}
    assert ns.register(filters=[f"10.0.0.9:{port}" for port in range(FILTER_SERVERS_MAX)]).code == ResponseCode.SUCCESS


def test_a_mapping_holds_javas_fields_only_and_counts_its_queues(tmp_path):
    """Java reads a TopicQueueMappingInfo into its bean, dropping any other field; each queue its
    currIdMap maps counts against maxTopicQueueEntries, so no mapping holds more than it counts."""
    ns = Namesrv(tmp_path, "5.3.3", maxTopicQueueEntries=20)
    mapping = {"topic": "S", "bname": "broker-a", "epoch": 3, "totalQueues": 8, "dirty": False, "scope": "__global__",
               "currIdMap": {str(i): i for i in range(8)}, "junk": "x" * 1000, "nested": {"a": [1, 2]}}
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, 1), {t: TopicConfig(t) for t in ("S", "T")},
                                                   topicQueueMappingInfoMap={"S": mapping}), False, True)
    ext = {"clusterName": "c1", "brokerAddr": MASTER, "brokerName": "broker-a", "brokerId": "0"}
    assert ns.call(RequestCode.REGISTER_BROKER, ext, body).code == ResponseCode.SUCCESS
    held = ns.routes.topicQueueMappingInfoTable["S"]["broker-a"]
    assert set(held) == {"topic", "bname", "epoch", "totalQueues", "dirty", "scope", "currIdMap"}
    assert ns.routes.mappingEntries == 9 and ns.routes.queueEntries == 2
    bigger = {**mapping, "bname": "broker-b", "currIdMap": {str(i): i for i in range(9)}}  # 10 more: 21
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, 2), {t: TopicConfig(t) for t in ("S", "T")},
                                                   topicQueueMappingInfoMap={"S": bigger}), False, True)
    with capturedLogs() as events:
        answer = ns.call(RequestCode.REGISTER_BROKER, {**ext, "brokerName": "other", "brokerAddr": OTHER}, body)
    refused(ns, answer, "max_topic_queue_entries", events)
    assert "would hold 23 topic-queue entries" in answer.remark  # 11 + 2 topics of the new group
    bad = {**mapping, "currIdMap": {"0": {"junk": "x"}}}
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, 3), {t: TopicConfig(t) for t in ("S", "T")},
                                                   topicQueueMappingInfoMap={"S": bad}), False, True)
    answer = ns.call(RequestCode.REGISTER_BROKER, ext, body)
    assert answer.code == ResponseCode.SYSTEM_ERROR and "currIdMap maps queue ids" in answer.remark


# -- a table over maxTopicsPerBroker: refused as it is counted, before it is all built -------------------------

def compressed_table(count: int, announced: int | None = None) -> bytes:
    """The 4.9.8 compressed layout with ``count`` topic lines, announcing ``announced`` of them."""
    def chunk(data: bytes) -> bytes:
        return struct.pack(">i", len(data)) + data

    lines = [chunk(f"T{i:07d} 8 8 6 SINGLE_TAG".encode()) for i in range(count)]
    return zlib.compress(chunk(b'{"counter":1,"timestamp":1}') + struct.pack(">i", count if announced is None
                                                                            else announced)
                         + b"".join(lines) + chunk(b"[]"), 9)


def test_a_compressed_table_past_the_limit_is_refused_before_it_is_inflated():
    """Its count comes first: refused from the first bytes inflated, none taken from the budget."""
    budget = MemoryBudget(1 << 30)
    taken: list[int] = []
    budget.take = lambda size: taken.append(size) or True  # type: ignore[method-assign]
    body = compressed_table(200_000)
    assert len(zlib.decompress(body)) > 4 * 1024 * 1024
    with pytest.raises(RegistrationRefused, match=r"lists 200000 topics, over maxTopicsPerBroker \(1000\)"):
        decode_register_body(body, True, V4_9_8, budget=budget, max_topics=1000)
    assert taken == []
    assert len(decode_register_body(body, True, V4_9_8, max_topics=200_000).topicConfigTable) == 200_000


def test_a_compressed_table_whose_count_comes_late_is_refused_before_its_lines_are_decoded(monkeypatch):
    """A dataVersion padded past the first bytes inflated: refused by its count once inflated,
    before any topic is built."""
    built: list[str] = []
    decode_text = TopicConfig.decode_text
    monkeypatch.setattr(TopicConfig, "decode_text", classmethod(lambda cls, text: built.append(text)
                                                                 or decode_text(text)))
    version = b'{"counter":1,"timestamp":1,"pad":"' + b"x" * 100_000 + b'"}'
    lines = b"".join(struct.pack(">i", 24) + f"T{i:07d} 8 8 6 SINGLE_TAG".encode() for i in range(5000))
    body = zlib.compress(struct.pack(">i", len(version)) + version + struct.pack(">i", 5000) + lines
                         + struct.pack(">i", 2) + b"[]")
    with pytest.raises(RegistrationRefused, match="lists 5000 topics"):
        decode_register_body(body, True, V4_9_8, max_topics=1000)
    assert built == []


def test_a_big_json_table_past_the_limit_is_refused_piece_by_piece(monkeypatch):
    """Counted as its pieces decode: refused within a piece of the limit, not after the whole."""
    built: list[int] = []
    decode_piece = register._decode_piece
    monkeypatch.setattr(register, "_decode_piece", lambda body, start, end: (
        lambda piece: built.append(len(piece or ())) or piece)(decode_piece(body, start, end)))
    table = {name: TopicConfig(name, 8, 8, 6) for name in names("J", 40_000)}
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, 1), table), False, False)
    assert len(body) > 8 * register.STEP_BYTES
    with pytest.raises(RegistrationRefused, match="over maxTopicsPerBroker \\(5000\\)"):
        decode_register_body(body, False, V4_9_8, max_topics=5000)
    assert 5000 < sum(built) < 5000 + max(built) + 1 and sum(built) < 10_000


def test_a_big_json_table_that_cannot_be_counted_in_pieces_is_decoded_whole_only_if_it_cannot_pass(monkeypatch):
    monkeypatch.setattr(register, "_decode_typed_in_pieces", lambda *args: iter(()))  # pieces fail: None
    table = {name: TopicConfig(name, 8, 8, 6) for name in names("J", 3000)}
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, 1), table), False, False)
    assert len(body) > register.STEP_BYTES
    with pytest.raises(RegistrationRefused, match="cannot be counted piece by piece"):
        decode_register_body(body, False, V4_9_8, max_topics=2000)
    # no more "{" than the limit (the table's 3000 and the body's own 4 objects): decoded whole
    assert len(decode_register_body(body, False, V4_9_8, max_topics=3004).topicConfigTable) == 3000


def test_a_refused_table_is_answered_logged_and_counted_through_the_handler(tmp_path):
    ns = Namesrv(tmp_path, "4.9.8", maxTopicsPerBroker=10)
    with capturedLogs() as events:
        answer = ns.register(topics=names("T", 11), compressed=True)
    refused(ns, answer, "max_topics_per_broker", events)
    assert ns.routes.brokerAddrTable == {} and ns.routes.topicQueueTable == {}
    assert answer.remark == "register broker refused: its table lists 11 topics, over maxTopicsPerBroker (10)"


# -- what the limits count, kept as the tables change -------------------------------------------------------

def recounted(ns: Namesrv) -> tuple[dict[str, int], int, int]:
    groups: dict[str, int] = {}
    for queues in ns.routes.topicQueueTable.values():
        for name in queues:
            groups[name] = groups.get(name, 0) + 1
    mappings = sum(1 + len(info.get("currIdMap") or {}) for held in ns.routes.topicQueueMappingInfoTable.values()
                   for info in held.values())
    return groups, sum(groups.values()), mappings


@pytest.mark.parametrize("seed", range(6))
def test_the_counts_equal_a_recount_after_any_sequence_of_changes(tmp_path, seed):
    rng = random.Random(seed)
    ns = Namesrv(tmp_path, rng.choice(["4.9.8", "5.3.3"]), deleteTopicWithBrokerRegistration=rng.random() < 0.5)
    groups, topics, counter = ["g0", "g1", "g2", "g3"], names("T", 12), 0
    for _ in range(300):
        action = rng.randrange(8)
        name = rng.choice(groups)
        addr = f"10.0.0.{groups.index(name)}:{rng.choice([1, 2])}"
        if action <= 2:
            counter += 1
            ns.register(name=name, addr=addr, broker_id=0 if addr.endswith(":1") else 1, version=(1, counter),
                        topics=rng.sample(topics, rng.randrange(2, 8)), channel=addr,
                        extra={"enableActingMaster": rng.choice(["true", "false"])})
        elif action == 3:
            ns.routes.unregister_broker("c1", addr, name, rng.choice([0, 1]))
        elif action == 4:
            ns.routes.on_channels_destroy({addr: "connection closed"})
        elif action == 5 and ns.profile.v5_bodies:  # a static topic's mapping (5.x)
            counter += 1
            topic = rng.choice(topics)
            mapping = {"topic": topic, "bname": name, "epoch": 1, "totalQueues": 2, "dirty": False,
                       "currIdMap": {str(i): i for i in range(rng.randrange(3))}}
            body = encode_register_body(RegisterBrokerBody(DataVersion(1, counter), {
                topic: TopicConfig(topic, 8, 8, 6), "Other": TopicConfig("Other", 8, 8, 6)},
                topicQueueMappingInfoMap={topic: mapping}), False, True)
            ns.call(RequestCode.REGISTER_BROKER, {"clusterName": "c1", "brokerAddr": addr, "brokerName": name,
                                                  "brokerId": "0" if addr.endswith(":1") else "1"}, body, channel=addr)
        elif action == 5:
            ns.routes.delete_topic(rng.choice(topics), rng.choice([None, "c1"]))
        elif action == 6:
            ns.routes.register_topic(rng.choice(topics), [QueueData(rng.choice(groups + ["unknown"]), 4, 4, 6, 0)
                                                          for _ in range(rng.randrange(1, 3))])
        else:
            ns.routes.delete_topic(rng.choice(topics), rng.choice([None, "c1"]))
        groups_now, entries, mappings = recounted(ns)
        assert (ns.routes.topicsOfGroup, ns.routes.queueEntries, ns.routes.mappingEntries) == (
            groups_now, entries, mappings)
    assert ns.routes.mappingEntries or not ns.profile.v5_bodies  # the sequence made some
    restored = Namesrv(tmp_path / "restored", ns.profile.name)
    import_routes(restored.routes, export_routes(ns.routes))
    assert (restored.routes.topicsOfGroup, restored.routes.queueEntries) == recounted(ns)[:2]


def test_a_kv_put_past_max_kv_bytes_is_refused_logged_and_counted(tmp_path):
    ns = Namesrv(tmp_path, "5.3.3", maxKvBytes=1000)
    assert ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "a", "value": "v" * 500}).code == 0
    with capturedLogs() as events:
        answer = ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "b", "value": "v" * 500})
    assert answer.code == ResponseCode.SYSTEM_ERROR and "over maxKvBytes (1000)" in answer.remark
    assert ns.state.kv.get("NS", "b") is None and ns.state.refusals.counts["remoting", "max_kv_bytes"] == 1
    (line,) = [e for e in events if e.get("refused") == "max_kv_bytes"]
    assert line["log_level"].name == "warn" and line["key"] == "b"
    assert ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "a", "value": "w" * 500}).code == 0


def test_the_order_topic_config_handed_to_every_broker_is_bounded_on_its_own(tmp_path):
    """5.x answers each broker's registration and heartbeat with the whole ORDER_TOPIC_CONFIG
    namespace.  Before, any peer (no ACL) could put 10,400 order topics within maxKvBytes (8 MiB), and
    every registration answer, to every broker every 30 s, was 8,049,611 bytes.  The namespace is now
    held to maxOrderTopicConfigBytes (1 MiB by default) of its own: a put past it is refused as
    maxKvBytes refuses (max_kv_bytes, nothing changed), so an answer carries at most that."""
    bound = KEYS_BY_NAME["maxOrderTopicConfigBytes"].default
    assert bound == 1 << 20
    entries = {f"T{n:07d}" + "x" * 100: "broker-a:8;" * 60 for n in range(1354)}  # 774 bytes each: 1 MiB
    (tmp_path / "kvConfig.json").write_text(json.dumps({"configTable": {NAMESPACE_ORDER_TOPIC_CONFIG: entries}}))
    ns = Namesrv(tmp_path, "5.3.3")
    size = ns.state.kv.bounded[NAMESPACE_ORDER_TOPIC_CONFIG]
    assert size == len(fastjson.dumps_stored(entries)) <= bound
    put = {"namespace": NAMESPACE_ORDER_TOPIC_CONFIG, "key": "TNext", "value": "broker-a:8;" * 60}
    with capturedLogs() as events:
        answer = ns.call(RequestCode.PUT_KV_CONFIG, put)
    assert answer.code == ResponseCode.SYSTEM_ERROR and "over the 1048576 it may hold" in answer.remark
    assert ns.state.kv.get(NAMESPACE_ORDER_TOPIC_CONFIG, "TNext") is None
    assert [e["refused"] for e in events if "refused" in e] == ["max_kv_bytes"]
    assert len(ns.register().body) < bound + 100
    assert ns.call(RequestCode.PUT_KV_CONFIG, {**put, "namespace": "OTHER"}).code == ResponseCode.SUCCESS


def test_the_order_topic_config_bound_is_a_key_checked_at_start(tmp_path):
    """maxOrderTopicConfigBytes, as the other limits are keys: a cluster with more order topics than
    the default's 17,000 raises it (before, a constant: not served at all); 0 leaves the namespace to
    maxKvBytes alone (a bound over maxKvBytes is never reached: a maxKvBytes lowered below the
    default's 1 MiB starts as before); a value that is no count stops the start."""
    (tmp_path / "small").mkdir(), (tmp_path / "unbound").mkdir()
    ns = Namesrv(tmp_path / "small", "5.3.3", maxOrderTopicConfigBytes=300)
    put = {"namespace": NAMESPACE_ORDER_TOPIC_CONFIG, "key": "T1", "value": "broker-a:8;" * 30}
    answer = ns.call(RequestCode.PUT_KV_CONFIG, put)
    assert answer.code == ResponseCode.SYSTEM_ERROR and "over the 300 it may hold" in answer.remark
    assert ns.call(RequestCode.PUT_KV_CONFIG, {**put, "value": "broker-a:8"}).code == ResponseCode.SUCCESS
    unbound = Namesrv(tmp_path / "unbound", "5.3.3", maxOrderTopicConfigBytes=0, maxKvBytes=2000)
    assert unbound.call(RequestCode.PUT_KV_CONFIG, {**put, "value": "broker-a:8;" * 100}).code == ResponseCode.SUCCESS
    assert NamesrvConfig({"maxKvBytes": 2000})["maxOrderTopicConfigBytes"] == 1 << 20
    with pytest.raises(ConfigError, match=r"maxOrderTopicConfigBytes: -1 is out of range \(at least 0\)"):
        NamesrvConfig({"maxOrderTopicConfigBytes": -1})
