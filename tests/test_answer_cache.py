"""The answer cache keeps route bodies per topic, whole-table bodies and whole route answer frames
around the opaque (answer_cache.py).  None may ever differ from encoding from the tables: random
sequences of every request the server answers from memory or whose effect an answer shows (lookups
with any opaque, version, key style or zone; cluster info; topic lists, the system one too) mixed with registrations of
masters and slaves, zones, acting-master flags and filter servers, order-topic KV changes, config
switches, wipes, topic registrations and deletions, unregistrations, closed channels and expiry give
the same bytes as a reference server that keeps nothing."""

from __future__ import annotations

import random

import pytest
from twisted.internet import task
from twisted.internet.testing import StringTransport

from tests import built
from twisted_namesrv import server
from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig, encode_register_body
from twisted_namesrv.bodies.route import DataVersion
from twisted_namesrv.dispatch import Dispatcher
from twisted_namesrv.remoting import RemotingCommand, RequestCode, fastjson
from twisted_namesrv.schema import SERVER_SCHEMA
from twisted_namesrv.state import settling
from twisted_namesrv.state.config import NamesrvConfig
from twisted_namesrv.state.routes import RouteChange

TOPICS = ["T0", "T1", "T2"]
BROKERS = ["a", "b"]


def connection(tmp_path, name: str, compat: str, keep: bool, **settings: str):
    config = NamesrvConfig({"compatVersion": compat, "kvConfigPath": str(tmp_path / f"{name}.json"),
                            "configStorePath": str(tmp_path / f"{name}.properties"), **settings}, schema=SERVER_SCHEMA)
    clock = task.Clock()
    factory = built.factory(built.dispatcher(config, clock, keep_answers=keep, count_requests=True), clock, 1 << 24, 0)
    protocol, transport = connect(factory)
    return protocol, transport, clock


def connect(factory: server.RemotingFactory):
    protocol = factory.buildProtocol(None)
    transport = StringTransport()
    protocol.makeConnection(transport)
    return protocol, transport


#: the zones a lookup may be filtered by (5.3.3's; 4.9.8 reads no zone), each kept as its topic's
#: route's variant: the registered ones, one in other letters, one padded, a blank, one of no broker
ZONES = ["z1", "z1", "z2", "Z1", " z1", " ", "nowhere"]


def lookup_request(rng: random.Random, opaque: int, zones: list[str] | None = None) -> RemotingCommand:
    """``zones``: names to filter a quarter of the lookups by (some not in zone mode); else a tenth by z1 or z2."""
    ext = {"topic": rng.choice(TOPICS + ["Nope"])}
    if rng.random() < 0.2:
        ext["acceptStandardJsonOnly"] = rng.choice(["true", "false"])
    if zones is not None:
        if rng.random() < 0.25:
            ext.update({"__ZONE_MODE": rng.choice(["true", "true", "TRUE", "false"]), "__ZONE_NAME": rng.choice(zones)})
    elif rng.random() < 0.1:
        ext.update({"__ZONE_MODE": "true", "__ZONE_NAME": rng.choice(["z1", "z2"])})
    return RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext, opaque=opaque,
                                   version=rng.choice([63, 409, 479]))


def register_request(rng: random.Random, counter: int, opaque: int, v5: bool) -> RemotingCommand:
    names = rng.sample(TOPICS, 2)
    broker, broker_id = rng.choice(BROKERS), rng.choice([0, 0, 1])
    filters = [f"127.0.0.1:{rng.choice([30, 31])}"] if rng.random() < 0.2 else []
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, counter), {
        n: TopicConfig(n, rng.choice([4, 8]), 4, rng.choice([2, 6])) for n in names}, filters), False, v5)
    ext = {"brokerName": broker, "brokerAddr": f"127.0.0.1:{ord(broker) * 10 + broker_id}", "clusterName": "c",
           "haServerAddr": "h", "brokerId": str(broker_id)}
    if v5:
        ext.update({"enableActingMaster": rng.choice(["true", "false"]), "__ZONE_NAME": rng.choice(["z1", "z2"])})
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body, opaque=opaque,
                                   version=479 if v5 else 409)


def other_request(rng: random.Random, opaque: int) -> RemotingCommand:
    topic, broker = rng.choice(TOPICS), rng.choice(BROKERS)
    queue_datas = fastjson.dumps_bytes({"queueDatas": [{"brokerName": broker, "readQueueNums": 2,
                                                        "writeQueueNums": 2, "perm": 6, "topicSysFlag": 0}]})
    code, ext, body = rng.choice([
        (RequestCode.GET_BROKER_CLUSTER_INFO, None, None),
        (RequestCode.GET_BROKER_CLUSTER_INFO, None, None),
        (RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, None, None),
        (RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, None, None),
        (RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "c"}, None),
        (RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS, None, None),
        (RequestCode.PUT_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": topic,
                                     "value": f"{broker}:{rng.randint(1, 4)}"}, None),
        (RequestCode.DELETE_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": topic}, None),
        (RequestCode.UPDATE_NAMESRV_CONFIG, None, rng.choice([b"orderMessageEnable=true"] * 2
                                                             + [b"orderMessageEnable=false"])),
        (RequestCode.UPDATE_NAMESRV_CONFIG, None, rng.choice([b"supportActingMaster=true",
                                                              b"supportActingMaster=false"])),
        (RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": broker}, None),
        (RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": broker}, None),
        (RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": topic}, queue_datas),
        (RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": topic}, None),
        (RequestCode.UNREGISTER_BROKER, {"brokerName": broker, "brokerAddr": f"127.0.0.1:{ord(broker) * 10}",
                                         "clusterName": "c", "brokerId": "0"}, None),
    ])
    return RemotingCommand.request(code, ext, body, opaque=opaque, version=rng.choice([409, 479]))


@pytest.mark.parametrize(("compat", "settings"), [("4.9.8", {}), ("5.3.3", {}),
                                                  ("5.3.3", {"deleteTopicWithBrokerRegistration": "true"})])
@pytest.mark.parametrize("seed", range(6))
def test_answers_from_memory_equal_answers_from_the_tables(tmp_path, monkeypatch, compat: str, settings: dict,
                                                         seed: int) -> None:
    """Registrations are applied as diffs (topics added, changed, left out; with
    deleteTopicWithBrokerRegistration, left-out topics leave): every path must drop what it changed.
    The server that keeps answers also leaves every change as a layer over topicQueueTable, read
    through until something needs the table itself: the answers must not tell."""
    rng = random.Random(seed)
    kept, kept_out, kept_clock = connection(tmp_path, "kept", compat, keep=True, **settings)
    reference, reference_out, reference_clock = connection(tmp_path, "reference", compat, keep=False, **settings)
    # every change a layer over the table, written only when something needs the table itself
    # (state/settling.py); the reference writes them at once
    kept.factory.dispatcher.state.routes.write_at_once = 0
    for name, value in (("WRITE_PER_STEP", 2), ("WALK_PER_STEP", 3), ("REMOVE_PER_STEP", 2)):
        monkeypatch.setattr(settling, name, value)
    for counter in range(1, 500):
        opaque = rng.choice([counter, 7, 10**9 + counter])
        op = rng.random()
        if op < 0.005:  # the connection the brokers registered over closes
            for protocol in (kept, reference):
                protocol.factory.dispatcher.channel_closed(protocol.channel)
            continue
        if op < 0.01:  # every broker's heartbeat times out
            for protocol, clock in ((kept, kept_clock), (reference, reference_clock)):
                clock.advance(200)
                protocol.factory.dispatcher.state.routes.scan_not_active_broker()
            continue
        if op < 0.6:
            request = lookup_request(rng, opaque, ZONES)
        elif op < 0.72:
            request = register_request(rng, counter, opaque, compat == "5.3.3")
        else:
            request = other_request(rng, opaque)
        frame = request.encode()
        for protocol in (kept, reference):
            protocol.dataReceived(frame)
        if rng.random() < 0.3:  # one step of writing what is committed in
            next(kept.factory.dispatcher.state.routes.settle_steps(), None)
        assert kept_out.value() == reference_out.value(), request
        kept_out.clear()
        reference_out.clear()
    assert kept.factory.metrics.answered_from_memory_count > 0, "no answer frame was served from memory"


def lookup(protocol, transport, opaque: int) -> bytes:
    transport.clear()
    protocol.dataReceived(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T0"},
                                                  opaque=opaque, version=409).encode())
    return transport.value()


def twin_lookup(kept, reference, ext: dict[str, str], opaque: int, version: int = 409) -> bytes:
    """One route lookup sent to a server keeping answers and to one keeping none (each a protocol
    and its transport): both answer the same bytes, returned."""
    request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext, opaque=opaque, version=version)
    answers = []
    for protocol, transport in (kept, reference):
        transport.clear()
        protocol.dataReceived(request.encode())
        answers.append(transport.value())
    assert answers[0] == answers[1]
    return answers[0]


def send(protocol, code: int, ext=None, body=None) -> None:
    protocol.dataReceived(RemotingCommand.request(code, ext, body, version=409).encode())


@pytest.mark.parametrize("change", ["put", "delete", "disable", "wipe"])
def test_each_change_reaches_a_repeated_lookup(tmp_path, change: str) -> None:
    protocol, transport, _ = connection(tmp_path, "one", "5.3.3", keep=True)
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, 1), {n: TopicConfig(n, 4, 4, 6) for n in TOPICS}),
                                False, False)
    send(protocol, RequestCode.REGISTER_BROKER, {"brokerName": "a", "brokerAddr": "127.0.0.1:1",
                                                 "clusterName": "c", "haServerAddr": "h", "brokerId": "0"}, body)
    send(protocol, RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=true")
    send(protocol, RequestCode.PUT_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T0", "value": "a:1"})
    assert b'"orderTopicConf":"a:1"' in lookup(protocol, transport, 1)
    assert b'"orderTopicConf":"a:1"' in lookup(protocol, transport, 2)
    assert protocol.factory.dispatcher.state.answers.replies  # the second came from memory
    if change == "put":
        send(protocol, RequestCode.PUT_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T0", "value": "a:2"})
        assert b'"orderTopicConf":"a:2"' in lookup(protocol, transport, 3)
    elif change == "delete":
        send(protocol, RequestCode.DELETE_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T0"})
        assert b"orderTopicConf" not in lookup(protocol, transport, 3)
    elif change == "disable":
        send(protocol, RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=false")
        assert b"orderTopicConf" not in lookup(protocol, transport, 3)
    else:
        send(protocol, RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "a"})
        assert b'"perm":4' in lookup(protocol, transport, 3)


def test_a_change_drops_exactly_what_it_reaches(tmp_path) -> None:
    """A topic's change keeps the other topics' bodies and the cluster info; a broker's change
    keeps the routes not naming it and the topic list."""
    protocol, transport, _ = connection(tmp_path, "one", "4.9.8", keep=True)
    routes = protocol.factory.dispatcher.state.routes
    answers = protocol.factory.dispatcher.state.answers
    assert routes.subscribers == [answers.changed] and not answers.holds()  # nothing kept: nothing collected
    for broker, topics in (("a", ["T0", "T1"]), ("b", ["T2"])):
        body = encode_register_body(RegisterBrokerBody(DataVersion(1, 1), {n: TopicConfig(n) for n in topics}),
                                    False, False)
        send(protocol, RequestCode.REGISTER_BROKER, {"brokerName": broker, "brokerAddr": f"127.0.0.1:{ord(broker)}",
                                                     "clusterName": "c", "haServerAddr": "h", "brokerId": "0"}, body)
    for topic in ("T0", "T1", "T2"):
        send(protocol, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    send(protocol, RequestCode.GET_BROKER_CLUSTER_INFO)
    send(protocol, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    assert answers.holds()
    routes.delete_topic("T0")  # one topic's change
    assert sorted(answers.routes) == ["T1", "T2"]
    assert not answers.tables["topic"] and list(answers.tables["broker"]) == [RequestCode.GET_BROKER_CLUSTER_INFO]
    send(protocol, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    routes.wipe_write_perm_of_broker("a")  # one group's change
    assert sorted(answers.routes) == ["T2"]
    assert list(answers.tables["topic"]) == [RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER]
    assert answers.tables["broker"] == {}
    routes.restore(({}, {}, {}, {}, {}, {}))  # everything changed
    assert answers.routes == {} and answers.tables == {"topic": {}, "broker": {}}
    assert not answers.holds()


def test_a_config_update_drops_every_kept_answer_but_the_header_templates(tmp_path) -> None:
    """UPDATE_NAMESRV_CONFIG may change any answer: routes, tables, frames, the registration answers,
    the pieces those shared and the KV lists all go (the last two were kept); the templates of the
    requests' headers stay (a header's fields are its bytes')."""
    protocol, transport, _ = connection(tmp_path, "one", "5.3.3", keep=True)
    answers = protocol.factory.dispatcher.state.answers
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, 1), {n: TopicConfig(n) for n in TOPICS}),
                                False, False)
    send(protocol, RequestCode.REGISTER_BROKER, {"brokerName": "a", "brokerAddr": "127.0.0.1:1",
                                                 "clusterName": "c", "haServerAddr": "h", "brokerId": "0"}, body)
    lookup(protocol, transport, 1)
    lookup(protocol, transport, 2)
    send(protocol, RequestCode.GET_BROKER_CLUSTER_INFO)
    answers.keep_kv_list("NS", {"k": "v"}, b'{"table":{"k":"v"}}')
    assert answers.routes and answers.replies and answers.tables["broker"] and answers.renewals
    assert answers._pieces and answers.kv_lists and len(answers.headers)
    templates = len(answers.headers)
    send(protocol, RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=true")
    assert not (answers.routes or answers.replies or answers.tables["broker"] or answers.tables["topic"]
                or answers.renewals or answers._pieces or answers.kv_lists)
    assert len(answers.headers) >= templates


GROUPS = ["g0", "g1", "g2", "g3", "g4"]


def group_register_request(rng: random.Random, group: str, broker_id: int, counter: int) -> RemotingCommand:
    names = rng.sample(TOPICS, rng.randint(1, 3))
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, counter), {
        n: TopicConfig(n, rng.choice([4, 8]), 4, 6) for n in names}, []), False, False)
    ext = {"brokerName": group, "brokerAddr": f"127.0.0.1:{GROUPS.index(group) * 10 + broker_id}",
           "clusterName": "c", "haServerAddr": "h", "brokerId": str(broker_id)}
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body, opaque=counter, version=409)


@pytest.mark.parametrize("seed", range(6))
def test_connections_lost_in_one_turn_drop_what_they_reached(tmp_path, seed: int) -> None:
    """A server with a reactor removes the brokers of channels closed in one reactor turn together,
    at the next turn (one scan of the topic table for all the groups they empty): its answers,
    before and after, equal those of a server that keeps nothing."""
    rng = random.Random(seed)
    servers = []
    for name, keep in (("kept", True), ("reference", False)):
        client, out, clock = connection(tmp_path, name, "4.9.8", keep=keep)
        old = client.factory.dispatcher
        client.factory.dispatcher = Dispatcher(old.state, old.metrics, count_requests=True, call_later=clock.callLater)
        servers.append((client, out, clock, {}))
    for counter in range(1, 400):
        op = rng.random()
        if op < 0.1:  # some brokers' connections reset at once; the removal waits for the next turn
            closing = rng.sample(sorted(servers[0][3]), min(len(servers[0][3]), rng.randint(1, 4)))
            next_turn = rng.random() < 0.7  # or lookups first, and more resets in the same turn
            for _, _, clock, brokers in servers:
                for member in closing:
                    brokers.pop(member)[0].connectionLost()
                if next_turn:
                    clock.advance(0)
            continue
        if op < 0.4:
            member = (rng.choice(GROUPS), rng.choice([0, 0, 1]))
            request = group_register_request(rng, *member, counter)
        else:
            request = rng.choice([lookup_request(rng, counter), other_request(rng, counter)])
            member = None
        replies = []
        for client, out, _, brokers in servers:
            if member is None:
                protocol, transport = client, out
            else:
                protocol, transport = brokers.get(member) or brokers.setdefault(member, connect(client.factory))
            transport.clear()
            protocol.dataReceived(request.encode())
            replies.append(transport.value())
        assert replies[0] == replies[1], request
    assert servers[0][0].factory.metrics.answered_from_memory_count > 0


def assert_same_answers(kept, reference, frames: list[bytes]) -> None:
    """``frames`` in one read to both servers (protocol, transport): the same bytes back."""
    for protocol, _ in (kept, reference):
        protocol.dataReceived(b"".join(frames))
    assert kept[1].value() == reference[1].value(), frames
    kept[1].clear()
    reference[1].clear()


@pytest.mark.parametrize("seed", range(4))
def test_pipelined_requests_from_memory_equal_answers_from_the_tables(tmp_path, seed: int) -> None:
    """Several requests in one read, as pipelining clients send them: lookups repeating the one
    before with another opaque (answered from the previous frame's kept answer), other topics,
    versions and key styles in between, changes in the same read: the answers, written once per
    read, equal those of a server that keeps nothing."""
    rng = random.Random(seed)
    kept, kept_out, _ = connection(tmp_path, "kept", "4.9.8", keep=True)
    reference, reference_out, _ = connection(tmp_path, "reference", "4.9.8", keep=False)
    for counter in range(1, 200):
        batch = []
        for position in range(rng.randint(1, 8)):
            opaque = rng.choice([counter * 10 + position, 7, 10**9 + position, 2**31 - 1, 0])
            op = rng.random()
            if op < 0.75:
                repeat = batch and rng.random() < 0.6
                request = RemotingCommand.decode(batch[-1][4:]) if repeat else lookup_request(rng, opaque)
                request.header.opaque = opaque
                request.header.json_layout = None
                if rng.random() < 0.3:  # the same up to the opaque, but not after it (standard JSON or not)
                    request.header.version = rng.choice([395, 409])
            elif op < 0.85:
                request = register_request(rng, counter, opaque, False)
            else:
                request = other_request(rng, opaque)
            batch.append(request.encode())
        assert_same_answers((kept, kept_out), (reference, reference_out), batch)
    assert kept.factory.metrics.answered_from_memory_count > 0


@pytest.mark.parametrize("seed", range(4))
def test_a_block_of_pipelined_repeats_equals_answers_from_the_tables(tmp_path, seed: int) -> None:
    """One client's lookups of one topic, 4 to 40 in a read (spliced as a block): opaques of one
    width or mixed, and one frame's digits made what Java reads otherwise (a leading zero, a
    letter, past int32, a sign) or its bytes after the opaque changed: the answers equal those of a
    server that keeps nothing, and the frames after a refused one are answered as well."""
    rng = random.Random(seed)
    kept, kept_out, _ = connection(tmp_path, "kept", "4.9.8", keep=True)
    reference, reference_out, _ = connection(tmp_path, "reference", "4.9.8", keep=False)
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, 1), {  # each topic its own route
        n: TopicConfig(n, 4 + i, 4 + i, 6) for i, n in enumerate(TOPICS)}), False, False)
    for protocol in (kept, reference):
        send(protocol, RequestCode.REGISTER_BROKER, {"brokerName": "a", "brokerAddr": "127.0.0.1:1",
                                                     "clusterName": "c", "haServerAddr": "h", "brokerId": "0"}, body)
    for _ in range(60):
        topic, width = rng.choice(TOPICS), rng.choice([1, 3, 5, 9, 10])
        frames = []
        for _ in range(rng.randint(4, 40)):
            opaque = rng.randint(10 ** (width - 1) if width > 1 else 0, min(10 ** width - 1, 2**31 - 1))
            if rng.random() < 0.1:
                opaque = rng.randint(1, 10**6)  # another width
            frames.append(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic},
                                                  opaque=opaque, version=409).encode())
        if rng.random() < 0.5:
            spoiled = rng.randrange(len(frames))
            frame = frames[spoiled]
            at = frame.find(b'"opaque":') + len(b'"opaque":')
            end = at
            while frame[end:end + 1].isdigit():
                end += 1
            digits = frame[at:end]
            spoil = rng.choice([b"0" + digits[1:], digits[:-1] + b"x", b"-" + digits[1:], b"9" * len(digits),
                                digits.replace(digits[:1], b"7", 1)])
            frames[spoiled] = frame[:at] + spoil + frame[end:]
        if rng.random() < 0.5:  # the same length, other bytes before or after the opaque
            other = rng.randrange(1, len(frames))
            frames[other] = frames[other].replace(*rng.choice([(b'"version":409', b'"version":408'),
                                                               (topic.encode(), rng.choice(TOPICS).encode())]))
        assert_same_answers((kept, kept_out), (reference, reference_out), frames)
    assert kept.factory.metrics.answered_from_memory_count > 0


def opaque_of(answer: bytes) -> int:
    return RemotingCommand.decode(answer[4:]).opaque


def answers_in(data: bytes) -> list[bytes]:
    """The frames of ``data`` (length prefixes included)."""
    frames, start = [], 0
    while start < len(data):
        end = start + 4 + int.from_bytes(data[start:start + 4], "big")
        frames.append(data[start:end])
        start = end
    return frames


@pytest.mark.parametrize("seed", range(4))
def test_reads_cut_anywhere_equal_answers_from_the_tables(tmp_path, seed: int) -> None:
    """A client's lookups answered from the read as it came (AnswerCache.replies_from_read):
    repeats with one opaque (as load tools send them) or with their own, reads that end inside a
    frame or hold other requests after the repeats, lookups of the same topic with other flags,
    version or key style, and route changes between reads: the bytes back equal those of a
    server that keeps nothing, read for read."""
    rng = random.Random(seed)
    kept, kept_out, _ = connection(tmp_path, "kept", "4.9.8", keep=True)
    reference, reference_out, _ = connection(tmp_path, "reference", "4.9.8", keep=False)
    stream = b""
    for counter in range(1, 150):
        base = lookup_request(rng, 1)
        same_opaque = rng.random() < 0.5
        for position in range(rng.randint(1, 40)):
            op = rng.random()
            if op < 0.85:
                request = RemotingCommand.decode(base.encode()[4:])
                request.header.json_layout = None
                request.header.opaque = 5 if same_opaque else rng.choice([counter * 100 + position, 7, 2**31 - 1])
                if rng.random() < 0.05:  # the same topic, another flag or version
                    request.header.flag = 2
                    request.header.json_layout = None
                if rng.random() < 0.05:
                    request.header.version = 395
            elif op < 0.93:
                request = register_request(rng, counter, position, False)
            else:
                request = other_request(rng, position)
            stream += request.encode()
        cut = rng.randint(len(stream) // 2, len(stream))  # the rest comes with the next read
        data, stream = stream[:cut], stream[cut:]
        for protocol in (kept, reference):
            protocol.dataReceived(data)
        assert kept_out.value() == reference_out.value()
        kept_out.clear()
        reference_out.clear()
    kept_metrics, reference_metrics = kept.factory.metrics, reference.factory.metrics
    assert kept_metrics.answered_from_memory_count > 0
    assert kept_metrics.requests_by_code()[0] == reference_metrics.requests_by_code()[0]
    assert (kept_metrics.bytes_received, kept_metrics.bytes_sent) == (reference_metrics.bytes_received,
                                                                      reference_metrics.bytes_sent)


def test_a_read_of_repeats_gets_each_its_own_opaque_and_no_stale_route(tmp_path) -> None:
    """Each answer to a read of repeated lookups carries its request's opaque, in order, and a
    route change between two such reads is in the second one's answers at once."""
    protocol, transport, _ = connection(tmp_path, "kept", "4.9.8", keep=True)
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, 1), {"T0": TopicConfig("T0", 4, 4, 6)}),
                                False, False)
    register = {"brokerName": "a", "brokerAddr": "127.0.0.1:1", "clusterName": "c", "haServerAddr": "h",
                "brokerId": "0"}
    send(protocol, RequestCode.REGISTER_BROKER, register, body)

    def read(opaques: list[int]) -> list[bytes]:
        transport.clear()
        protocol.dataReceived(b"".join(
            RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T0"}, opaque=o,
                                    version=409).encode() for o in opaques))
        return answers_in(transport.value())

    read([1])  # kept, for opaques of one digit
    read([10])  # and of two
    served = protocol.factory.metrics.answered_from_memory_count
    opaques = [11, 12, 13, 99, 10, 14]
    assert [opaque_of(a) for a in read(opaques)] == opaques
    assert [opaque_of(a) for a in read([3] * 8)] == [3] * 8
    assert protocol.factory.metrics.answered_from_memory_count == served + 14
    before = read([21, 22])
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, 2), {"T0": TopicConfig("T0", 8, 8, 6)}),
                                False, False)
    send(protocol, RequestCode.REGISTER_BROKER, register, body)
    after = read([21, 22])
    assert b'"readQueueNums":4' in before[0] and b'"readQueueNums":8' in after[0]
    assert b'"readQueueNums":8' in after[1]


def held_by_replies(answers) -> int:
    """The bytes the kept answer frames hold of their own: their keys and every bytes object of
    their replies, each once, but the topics' kept route bodies (held by the routes anyway)."""
    bodies = {id(body) for kept in answers.routes.values() for body in kept.bodies.values()}
    seen, held = set(), 0
    for head, replies in answers.replies.items():
        held += len(head)
        for reply in replies:
            for value in vars(reply).values() if hasattr(reply, "__dict__") else (
                    getattr(reply, name) for name in reply.__slots__):
                if isinstance(value, bytes) and id(value) not in bodies and id(value) not in seen:
                    seen.add(id(value))
                    held += len(value)
    return held


def test_the_kept_answer_frames_are_bounded_in_bytes(tmp_path, monkeypatch) -> None:
    """Any peer chooses its lookups' bytes: distinct ones of a topic served by many groups (a big
    route body) each kept a copy of the body, and distinct lookups padded to 60 KB each kept their
    bytes, 65,536 at a time (1,200 tiny lookups of a route of 300 groups held 337 MB in the attack
    run, 6,000 of 60 KB 1.2 GB). Now a kept frame shares its topic's route body, a lookup whose
    header is over KEPT_HEADER_MAX is answered and never kept, and what the frames hold stays
    within MAX_REPLIES_BYTES; every answer is still the tables' own."""
    from twisted_namesrv import answer_cache

    monkeypatch.setattr(answer_cache, "MAX_REPLIES_BYTES", 1 << 20, raising=False)
    protocol, transport, _ = connection(tmp_path, "kept", "4.9.8", keep=True)
    reference, reference_transport, _ = connection(tmp_path, "reference", "4.9.8", keep=False)
    for group in range(60):  # T0 on 60 groups: a route body of about 9 KB
        body = encode_register_body(RegisterBrokerBody(DataVersion(1, 1), {"T0": TopicConfig("T0", 4, 4, 6)}),
                                    False, False)
        for peer in (protocol, reference):
            send(peer, RequestCode.REGISTER_BROKER, {"brokerName": f"g{group}", "brokerAddr": f"127.0.0.1:{group}",
                                                     "clusterName": "c", "haServerAddr": "h", "brokerId": "0"}, body)
    answers = protocol.factory.dispatcher.state.answers

    def both(ext: dict[str, str], opaque: int) -> bytes:
        return twin_lookup((protocol, transport), (reference, reference_transport), ext, opaque)

    assert len(both({"topic": "T0"}, 1)) > 9_000
    both({"topic": "T0"}, 2)
    assert answers.replies
    for n in range(300):  # 300 distinct lookups, each twice: the second from memory
        both({"topic": "T0", "x": str(n)}, 10 + n)
        both({"topic": "T0", "x": str(n)}, 1000 + n)
        assert held_by_replies(answers) <= 1 << 20
    assert not answers.started_over["routes"]
    monkeypatch.setattr(answer_cache, "MAX_REPLIES", len(answers.replies), raising=False)
    before = answers.started_over["replies"]
    both({"topic": "T0", "y": "another start"}, 5000)
    assert answers.started_over["replies"] == before + 1  # namesrv_kept_started_over_total{cache="replies"}
    answers.replies.clear()
    pad = "x" * answer_cache.KEPT_HEADER_MAX
    both({"topic": "T0", "pad": pad}, 3)
    both({"topic": "T0", "pad": pad}, 4)
    assert not answers.replies  # answered, not kept


def held_by_kept_frames(answers) -> int:
    """held_by_replies, and what their stale topics hold for them alone: a frame kept from a topic
    dropped since holds that topic's bodies and answer ends until it is served or starts over."""
    live = {id(kept) for kept in answers.routes.values()}
    stale, held = {}, held_by_replies(answers)
    for replies in answers.replies.values():
        for reply in replies:
            if id(reply.answers) not in live:
                stale[id(reply.answers)] = reply.answers
    rests = {id(reply.rest) for replies in answers.replies.values() for reply in replies}
    for topic in stale.values():
        held += sum(len(body) for body in topic.bodies.values())
        held += sum(len(rest) for rest in topic.rests.values() if id(rest) not in rests)
    return held


def test_answer_ends_made_anew_as_a_route_changes_count_against_the_budget(tmp_path, monkeypatch) -> None:
    """A topic's answer end (its answer header's end and its route body, joined: TopicAnswers.rests)
    was counted nowhere: shared by every frame kept of the topic, it was taken to be bounded by the
    tables.  But each time the route changes (any registration touching the topic) the next lookup
    makes a new one, and every frame kept before holds its old one, and its old bodies, until it
    is served again: 300 distinct lookups of a 9 KB route, each after a change, held 300 ends of 9
    KB past a budget of 1 MiB (5.7 MB at most).  Now each end counts when it is made, a dropped topic
    lets its bodies go, and what the frames hold stays within MAX_REPLIES_BYTES."""
    from twisted_namesrv import answer_cache

    monkeypatch.setattr(answer_cache, "MAX_REPLIES_BYTES", 1 << 20, raising=False)
    protocol, transport, _ = connection(tmp_path, "kept", "4.9.8", keep=True)
    reference, reference_transport, _ = connection(tmp_path, "reference", "4.9.8", keep=False)

    def register(group: int, version: int, queues: int) -> None:
        body = encode_register_body(RegisterBrokerBody(DataVersion(1, version),
                                                       {"T0": TopicConfig("T0", queues, queues, 6)}), False, False)
        for peer in (protocol, reference):
            send(peer, RequestCode.REGISTER_BROKER, {"brokerName": f"g{group}", "brokerAddr": f"127.0.0.1:{group}",
                                                     "clusterName": "c", "haServerAddr": "h", "brokerId": "0"}, body)

    for group in range(60):  # T0 on 60 groups: a route body of about 9 KB
        register(group, 1, 4)
    answers = protocol.factory.dispatcher.state.answers

    def both(ext: dict[str, str], opaque: int) -> bytes:
        return twin_lookup((protocol, transport), (reference, reference_transport), ext, opaque)

    most = 0
    for n in range(300):
        register(0, 2 + n, 4 + n % 2)  # the route changes: T0's kept bodies and end are dropped
        assert len(both({"topic": "T0", "x": str(n)}, 10 + n)) > 9_000
        both({"topic": "T0", "x": str(n)}, 1000 + n)  # from memory
        most = max(most, held_by_kept_frames(answers))
    assert most <= 1 << 20
    assert answers.replies  # kept all along, started over when full


def test_every_clients_kept_frame_of_a_topic_shares_one_answer_end(tmp_path, monkeypatch) -> None:
    """A kept frame's end (its header after the opaque and its body) is joined once per topic and
    variant, and shared by every client's kept frame of it: a pipelined read of lookups joined the
    header's end and the body again at each answer.  Past MAX_RESTS_PER_TOPIC a new end keeps no
    frame (a peer cannot have a topic's body copied more times), and is answered all the same."""
    from twisted_namesrv import answer_cache

    protocol, transport, _ = connection(tmp_path, "kept", "4.9.8", keep=True)
    reference, reference_transport, _ = connection(tmp_path, "reference", "4.9.8", keep=False)
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, 1), {"T0": TopicConfig("T0", 4, 4, 6)}),
                                False, False)
    for peer in (protocol, reference):
        send(peer, RequestCode.REGISTER_BROKER, {"brokerName": "a", "brokerAddr": "127.0.0.1:1", "clusterName": "c",
                                                 "haServerAddr": "h", "brokerId": "0"}, body)
    answers = protocol.factory.dispatcher.state.answers

    def both(version: int, client: str, opaques: list[int]) -> None:
        data = b"".join(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T0", "c": client},
                                                opaque=o, version=version).encode() for o in opaques)
        transport.clear()
        reference_transport.clear()
        protocol.dataReceived(data)
        reference.dataReceived(data)
        assert transport.value() == reference_transport.value()

    for client in ("a", "b", "c"):  # (4.9.4 and later: standard JSON; before: Java's own)
        for version in (409, 317):
            both(version, client, [1])
            both(version, client, [2, 3, 4, 5, 6])  # a block, from memory
    topic = answers.routes["T0"]
    assert len(topic.bodies) == len(topic.rests) == 2
    kept = [reply for replies in answers.replies.values() for reply in replies]
    assert len(kept) == 6 and {id(reply.rest) for reply in kept} == {id(rest) for rest in topic.rests.values()}
    for (variant, tail), rest in topic.rests.items():
        assert rest == tail + topic.bodies[variant]

    monkeypatch.setattr(answer_cache, "MAX_RESTS_PER_TOPIC", 1)
    send(protocol, RequestCode.REGISTER_BROKER, {"brokerName": "a", "brokerAddr": "127.0.0.1:1", "clusterName": "c",
                                                 "haServerAddr": "h", "brokerId": "0"},
         encode_register_body(RegisterBrokerBody(DataVersion(1, 2), {"T0": TopicConfig("T0", 8, 8, 6)}), False, False))
    send(reference, RequestCode.REGISTER_BROKER, {"brokerName": "a", "brokerAddr": "127.0.0.1:1", "clusterName": "c",
                                                  "haServerAddr": "h", "brokerId": "0"},
         encode_register_body(RegisterBrokerBody(DataVersion(1, 2), {"T0": TopicConfig("T0", 8, 8, 6)}), False, False))
    for version in (409, 317):
        both(version, "a", [1])
        both(version, "a", [2, 3, 4, 5, 6])
    topic = answers.routes["T0"]
    assert len(topic.bodies) == 2 and len(topic.rests) == 1
    assert len([reply for replies in answers.replies.values() for reply in replies if reply.answers is topic]) == 1


def test_zones_a_peer_names_leave_the_plain_lookups_their_kept_frames(tmp_path) -> None:
    """A lookup filtered by zone is kept as a variant of its topic's route, its frame too (a
    client's repeats answered from memory); its answer ends have MAX_RESTS_PER_TOPIC of their own,
    so a peer naming zones (any client's choice) takes no room of the plain lookups' frames.  Every
    answer the same bytes as a server's that keeps nothing; a group's change drops them all."""
    from twisted_namesrv.answer_cache import MAX_RESTS_PER_TOPIC

    protocol, transport, _ = connection(tmp_path, "kept", "5.3.3", keep=True)
    reference, reference_transport, _ = connection(tmp_path, "reference", "5.3.3", keep=False)
    kept, other = (protocol, transport), (reference, reference_transport)

    def register(zone: str, counter: int) -> None:
        body = encode_register_body(RegisterBrokerBody(DataVersion(1, counter), {  # (5.3.3 refuses one topic first)
            n: TopicConfig(n, 4, 4, 6) for n in ("T0", "T1")}), False, True)
        ext = {"brokerName": "a", "brokerAddr": "127.0.0.1:1", "clusterName": "c", "haServerAddr": "h",
               "brokerId": "0", "__ZONE_NAME": zone}
        for peer in (protocol, reference):
            peer.dataReceived(RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body, version=479).encode())

    register("z1", 1)
    answers = protocol.factory.dispatcher.state.answers
    opaque = iter(range(10, 100))  # (of one width: a kept frame answers its client's repeats of the same length)
    for zone in [f"z{n}" for n in range(2 * MAX_RESTS_PER_TOPIC)] + ["Z1"]:
        for _ in range(2):
            twin_lookup(kept, other, {"topic": "T0", "__ZONE_MODE": "true", "__ZONE_NAME": zone}, next(opaque), 479)
    topic = answers.routes["T0"]
    assert len(topic.bodies) == 2 * MAX_RESTS_PER_TOPIC + 1 and len(topic.rests) == MAX_RESTS_PER_TOPIC
    for _ in range(2):
        twin_lookup(kept, other, {"topic": "T0"}, next(opaque), 479)
    assert len(topic.rests) == MAX_RESTS_PER_TOPIC + 1
    assert (True, None) in {variant for variant, _ in topic.rests}  # the plain lookup's frame is kept
    served = protocol.factory.metrics.answered_from_memory_count
    twin_lookup(kept, other, {"topic": "T0", "__ZONE_MODE": "true", "__ZONE_NAME": "z1"}, next(opaque), 479)
    assert protocol.factory.metrics.answered_from_memory_count == served + 1
    register("z2", 2)  # the group moves to zone z2: every zone's route of T0 goes
    assert "T0" not in answers.routes
    for zone in ("z1", "z2"):
        ext = {"topic": "T0", "__ZONE_MODE": "true", "__ZONE_NAME": zone}
        answer = twin_lookup(kept, other, ext, next(opaque), 479)
        assert (b'"brokerName":"a"' in answer) == (zone == "z2")


def held_by_routes(answers) -> int:
    """The bytes of every route body held: the kept topics', and those the kept frames still reach
    (a frame of a dropped topic keeps only its rest, which counts against MAX_REPLIES_BYTES)."""
    pieces = {id(piece): len(piece) for kept in answers.routes.values() for piece in kept.bodies.values()}
    pieces.update((id(piece), len(piece)) for kept in answers.replies.values() for reply in kept
                  for piece in reply.answers.bodies.values())
    return sum(pieces.values())


@pytest.mark.parametrize("compat", ["4.9.8", "5.3.3"])
def test_the_kept_route_bodies_are_bounded_in_bytes(tmp_path, monkeypatch, compat: str) -> None:
    """A route body names every group serving its topic, kept per topic and variant (and joined
    once more with its answer header's end for the frames kept): 500 groups registered unsigned on
    the same 2,000 topics (26 MB of tables) and one lookup of each topic in each variant made the
    server keep 780 MB (``tools/memory_peak.py --attacks routes``). Now what they hold stays within
    MAX_ROUTES_BYTES, starting over past it (the frames kept of them with them); every answer is
    still the tables' own, and a body bigger than the bound alone is answered, never kept."""
    from twisted_namesrv import answer_cache

    bound = 60_000
    monkeypatch.setattr(answer_cache, "MAX_ROUTES_BYTES", bound, raising=False)
    protocol, transport, _ = connection(tmp_path, "kept", compat, keep=True)
    reference, reference_transport, _ = connection(tmp_path, "reference", compat, keep=False)
    topics = [f"T{n}" for n in range(40)]
    for group in range(30):  # 40 topics on 30 groups: route bodies of about 4 KB
        body = encode_register_body(RegisterBrokerBody(DataVersion(1, 1), {t: TopicConfig(t, 4, 4, 6) for t in topics}),
                                    False, False)
        for peer in (protocol, reference):
            send(peer, RequestCode.REGISTER_BROKER, {"brokerName": f"g{group}", "brokerAddr": f"127.0.0.1:{group}",
                                                     "clusterName": "c", "haServerAddr": "h", "brokerId": "0"}, body)
    answers = protocol.factory.dispatcher.state.answers

    def both(topic: str, version: int, opaque: int) -> bytes:
        return twin_lookup((protocol, transport), (reference, reference_transport), {"topic": topic}, opaque, version)

    assert len(both("T0", 409, 1)) > 3_000
    opaque = 2
    def zoned(topic: str, zone: str, opaque: int) -> bytes:
        ext = {"topic": topic, "__ZONE_MODE": "true", "__ZONE_NAME": zone}
        return twin_lookup((protocol, transport), (reference, reference_transport), ext, opaque, 479)

    for _ in range(2):
        for version in (409, 317):  # standard JSON, and fastjson's own: two variants of each body
            for topic in topics:
                for _ in range(2):  # the second from memory, when kept
                    both(topic, version, opaque)
                    if compat == "5.3.3":  # each zone a peer names one more body, in the same bytes
                        zoned(topic, f"z{opaque}", opaque)
                        zoned(topic, "", opaque)  # (no broker in the zone, or none named: the whole route)
                    opaque += 1
                    assert held_by_routes(answers) <= bound
    assert answers.routes and answers.replies
    assert answers.routes_bytes == sum(kept.size for kept in answers.routes.values())
    assert answers.started_over["routes"] > 0  # namesrv_kept_started_over_total{cache="routes"}
    monkeypatch.setattr(answer_cache, "MAX_ROUTES_BYTES", 2_000, raising=False)
    answers.changed(RouteChange(everything=True))
    both("T0", 409, opaque)
    both("T0", 409, opaque + 1)
    assert not answers.routes and held_by_routes(answers) == 0  # bigger than the bound: never kept


@pytest.mark.parametrize("mapped", [False, True], ids=["4.9.8", "5.x"])
def test_a_frame_read_where_the_last_one_was_keys_as_read_through(mapped):
    """``renewal_key_steps`` with the kept frame's shape (a heartbeat of its length, read where its
    spans were) against reading it through, for every frame one byte away from the kept one (each
    byte made a digit, a quote, a comma, a brace or a letter): the shaped reading gives the kept
    key only when reading through gives it too, at the same spans; and whenever reading through
    finds the same spans and the same digest, so does the shaped reading.  A frame's spans are its
    opaque, its bodyCrc32 and a 5.x body's mappingDataVersion."""
    from twisted_namesrv.answer_cache import _renewal_key
    from twisted_namesrv.remoting.crc import crc32_masked

    body = RegisterBrokerBody(DataVersion(1700000000000, 1), {"A": TopicConfig("A", 8, 8, 6)})
    if mapped:
        body.mappingDataVersion = DataVersion(1700000000123, 7)
    encoded = encode_register_body(body, False, mapped)
    ext = {"brokerName": "g", "brokerAddr": "127.0.0.1:10911", "clusterName": "c", "haServerAddr": "h",
           "brokerId": "0", "bodyCrc32": str(crc32_masked(encoded))}
    frame = RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, encoded, opaque=4321, version=409).encode()[4:]
    kept = _renewal_key(frame)
    assert kept is not None and kept.same_crc is not mapped
    renewed = 0
    for at in range(4, len(frame)):
        for byte in b'07", }x':
            changed = frame[:at] + bytes([byte]) + frame[at + 1:]
            shaped, through = _renewal_key(changed, None, kept.shape), _renewal_key(changed)
            shaped_same = shaped is not None and shaped.digest == kept.digest
            through_same = through is not None and through.digest == kept.digest and through.shape == kept.shape
            assert shaped_same == through_same, (at, bytes([byte]), changed)
            if shaped_same:
                assert (shaped.at, shaped.digits, shaped.crc, shaped.body) == (through.at, through.digits, through.crc,
                                                                             through.body)
                renewed += 1
    assert renewed > 0  # (the spans' own digits, changed: the same registration)
