"""A peer that does not read its answers costs a bounded buffer and never the others' service;
connections beyond maxConnections are closed at once."""

from __future__ import annotations

import pytest_twisted
from twisted.internet import reactor

from tests.interop.broker_double import BrokerDouble
from tests.replay.test_replay import wait_until
from tests.support import TIMEOUT, connect, server_config, start_server
from twisted_namesrv.remoting import RemotingCommand, RequestCode, ResponseCode

LOOKUPS = 20_000  # ~5 MB of answers: far more than socket buffers and the server's write buffer hold


def lookup(opaque: int) -> bytes:
    return RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicTest"},
                                   opaque=opaque, version=409).encode()


@pytest_twisted.inlineCallbacks
def test_a_peer_that_does_not_read_is_paused_and_others_are_served(tmp_path):
    service, port = yield start_server(server_config(tmp_path))
    broker = BrokerDouble(reactor)
    slow = good = None
    try:
        yield broker.start(port)
        slow = yield connect(port)
        slow.transport.pauseProducing()  # stop reading our answers
        slow.send(b"".join(lookup(i) for i in range(1, LOOKUPS + 1)))
        local = f"127.0.0.1:{slow.transport.getHost().port}"

        def server_side():
            return next(p for p in service.factory.connections.values() if p.peer.address == local)

        yield wait_until(lambda: server_side().transport.producerPaused, "the server to stop reading the slow peer")
        buffered = len(server_side().transport.dataBuffer) + server_side().transport._tempDataLen
        assert buffered < 1024 * 1024, f"{buffered} bytes of answers buffered for a peer that does not read"
        good = yield connect(port)
        answer = yield good.call(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                         {"topic": "TopicTest"}, opaque=7, version=409))
        assert answer.code == ResponseCode.SUCCESS
        slow.transport.resumeProducing()  # reads again: every request is answered
        yield wait_until(lambda: len(slow.received) + len(slow.waiting) >= LOOKUPS, "all answers")
        assert sorted(slow.received) == list(range(1, LOOKUPS + 1))
    finally:
        for client in (slow, good):
            if client is not None:
                client.transport.loseConnection()
        yield broker.stop()
        yield service.stopService()


@pytest_twisted.inlineCallbacks
def test_connections_beyond_the_limit_are_closed(tmp_path):
    service, port = yield start_server(server_config(tmp_path, maxConnections=2))
    clients = []
    try:
        clients = [(yield connect(port)), (yield connect(port))]
        extra = yield connect(port)
        yield extra.closed.addTimeout(TIMEOUT, reactor)
        answer = yield clients[0].call(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, opaque=3))
        assert answer.code == ResponseCode.SUCCESS
    finally:
        for client in clients:
            client.transport.loseConnection()
        yield service.stopService()
