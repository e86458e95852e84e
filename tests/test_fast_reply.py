"""Answers are kept in memory at three levels: route bodies per topic (route_memo), whole-table
bodies (state.memo) and whole route answers around the opaque (fast_reply).  None may ever differ
from encoding from the tables: random sequences of lookups (any opaque, version, key style) mixed
with registrations (each applied as a diff: topics added, changed, left out), order-topic KV
changes, config switches, wipes, topic deletions, unregistrations and expiries give the same bytes
as a reference server that keeps nothing."""

from __future__ import annotations

import random

import pytest
from twisted.internet import task
from twisted.internet.testing import StringTransport

from twisted_namesrv import server
from twisted_namesrv.protocol.register import RegisterBrokerBody, TopicConfig, encode_register_body
from twisted_namesrv.protocol.route import DataVersion
from twisted_namesrv.remoting import RemotingCommand, RequestCode
from twisted_namesrv.service import build_state
from twisted_namesrv.state.config import NamesrvConfig

TOPICS = ["T0", "T1", "T2"]


class Forgetful(dict):
    """A route memo that never keeps anything."""

    def setdefault(self, key, default=None):
        return {} if default is None else default


def connection(tmp_path, name: str, compat: str, fast: bool, **settings):
    config = NamesrvConfig({"compatVersion": compat, "kvConfigPath": str(tmp_path / f"{name}.json"),
                            "configStorePath": str(tmp_path / f"{name}.properties"), **settings})
    clock = task.Clock()
    factory = server.RemotingFactory(build_state(config, clock), clock, 1 << 24, 120, lambda channel: None)
    protocol = factory.buildProtocol(None)
    transport = StringTransport()
    protocol.makeConnection(transport)
    if not fast:
        state = factory.state
        protocol.fast_replies = False
        state.routes.route_memo = Forgetful()
        state.memoized = lambda key, build: build()
    return protocol, transport


def random_request(rng: random.Random, counter: list[int]) -> bytes:
    counter[0] += 1
    opaque = rng.choice([counter[0], 7, 10**9 + counter[0]])
    op = rng.random()
    if op < 0.5:
        ext = {"topic": rng.choice(TOPICS + ["Nope"])}
        if rng.random() < 0.2:
            ext["acceptStandardJsonOnly"] = rng.choice(["true", "false"])
        return RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext, opaque=opaque,
                                       version=rng.choice([63, 409])).encode()
    if op < 0.6:
        names = rng.sample(TOPICS, 2)
        body = encode_register_body(RegisterBrokerBody(DataVersion(1, counter[0]), {
            n: TopicConfig(n, rng.choice([4, 8]), 4, rng.choice([2, 6])) for n in names}), False, False)
        broker = rng.choice(["a", "b"])
        ext = {"brokerName": broker, "brokerAddr": f"127.0.0.1:{ord(broker)}", "clusterName": "c",
               "haServerAddr": "h", "brokerId": "0"}
        return RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body, opaque=opaque, version=409).encode()
    code, ext, body = rng.choice([
        (RequestCode.PUT_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": rng.choice(TOPICS),
                                     "value": f"a:{rng.randint(1, 4)}"}, None),
        (RequestCode.PUT_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": rng.choice(TOPICS),
                                     "value": f"b:{rng.randint(1, 4)}"}, None),
        (RequestCode.DELETE_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": rng.choice(TOPICS)}, None),
        (RequestCode.UPDATE_NAMESRV_CONFIG, None, rng.choice([b"orderMessageEnable=true"] * 2
                                                             + [b"orderMessageEnable=false"])),
        (RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "a"}, None),
        (RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": rng.choice(TOPICS)}, None),
        (RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "a"}, None),
        (RequestCode.UNREGISTER_BROKER, {"brokerName": "b", "brokerAddr": f"127.0.0.1:{ord('b')}",
                                         "clusterName": "c", "brokerId": "0"}, None),
    ])
    return RemotingCommand.request(code, ext, body, opaque=opaque).encode()


@pytest.mark.parametrize(("compat", "settings"), [("4.9.8", {}), ("5.3.3", {}),
                                                  ("5.3.3", {"deleteTopicWithBrokerRegistration": "true"})])
@pytest.mark.parametrize("seed", range(6))
def test_answers_from_memory_equal_answers_from_the_tables(tmp_path, compat: str, settings: dict, seed: int) -> None:
    rng = random.Random(seed)
    fast, fast_out = connection(tmp_path, "fast", compat, fast=True, **settings)
    slow, slow_out = connection(tmp_path, "reference", compat, fast=False, **settings)
    counter = [0]
    for _ in range(300):
        if rng.random() < 0.03:  # every broker's heartbeat times out
            for protocol in (fast, slow):
                protocol.factory.clock.advance(130)
                protocol.factory.state.routes.scan_not_active_broker()
        frame = random_request(rng, counter)
        for protocol in (fast, slow):
            protocol.dataReceived(frame)
        assert fast_out.value() == slow_out.value()
        fast_out.clear()
        slow_out.clear()
    assert fast.factory.state.reply_memo, "the fast path was never used"


def lookup(protocol, transport, opaque: int) -> bytes:
    transport.clear()
    protocol.dataReceived(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T0"},
                                                  opaque=opaque, version=409).encode())
    return transport.value()


def send(protocol, code: int, ext=None, body=None) -> None:
    protocol.dataReceived(RemotingCommand.request(code, ext, body, version=409).encode())


@pytest.mark.parametrize("change", ["put", "delete", "disable", "wipe"])
def test_each_change_reaches_a_repeated_lookup(tmp_path, change: str) -> None:
    protocol, transport = connection(tmp_path, "one", "5.3.3", fast=True)
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, 1), {n: TopicConfig(n, 4, 4, 6) for n in TOPICS}),
                                False, False)
    send(protocol, RequestCode.REGISTER_BROKER, {"brokerName": "a", "brokerAddr": "127.0.0.1:1",
                                                 "clusterName": "c", "haServerAddr": "h", "brokerId": "0"}, body)
    send(protocol, RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=true")
    send(protocol, RequestCode.PUT_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T0", "value": "a:1"})
    assert b'"orderTopicConf":"a:1"' in lookup(protocol, transport, 1)
    assert b'"orderTopicConf":"a:1"' in lookup(protocol, transport, 2)  # served from memory
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
