"""The peers view (peers.py): given the other NameServers (``-n`` / namesrvAddr, else nsaddrList),
the status API and /metrics say where their routes differ from this one's, with namesrv-admin
compare's own code, and name a peer that cannot be reached.  Real servers on loopback."""

from __future__ import annotations

import json

import pytest_twisted
from twisted.internet import defer, reactor, task, utils
from twisted.logger import capturedLogs, formatEvent

from tests.support import connect, free_port, server_config, start_server
from tests.web.test_health_and_nsaddr import get
from tests.web.test_status_page import chromium, row
from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig, encode_register_body
from twisted_namesrv.bodies.route import DataVersion
from twisted_namesrv.client import _Connecting
from twisted_namesrv.peers import peer_addresses
from twisted_namesrv.remoting import RemotingCommand, RequestCode, ResponseCode
from twisted_namesrv.remoting.codes import V5_3_3
from twisted_namesrv.state.config import NamesrvConfig


@defer.inlineCallbacks
def register(port: int, name: str, topics: tuple[str, ...]):
    client = yield connect(port)
    body = RegisterBrokerBody(DataVersion(1, 1), {t: TopicConfig(t) for t in topics})
    ext = {"clusterName": "c1", "brokerAddr": f"127.0.0.1:{10911 + len(name)}", "brokerName": name, "brokerId": "0"}
    answer = yield client.call(RemotingCommand.request(RequestCode.REGISTER_BROKER, ext,
                                                       encode_register_body(body, False, True), version=V5_3_3))
    assert answer.code == ResponseCode.SUCCESS
    return client


@defer.inlineCallbacks
def compared(service):
    """One comparison after those already running."""
    while True:
        d = service.peers.compare()
        if d is not None:
            yield d
            return service.peers.report
        yield task.deferLater(reactor, 0.05, lambda: None)


@pytest_twisted.inlineCallbacks
def test_the_page_says_where_the_peers_disagree_and_which_cannot_be_reached(tmp_path):
    own_port, peer_port, dead_port = free_port(), free_port(), free_port()
    peer, _ = yield start_server(server_config(tmp_path / "b", listenPort=peer_port))
    listed = f"127.0.0.1:{own_port};127.0.0.1:{peer_port};127.0.0.1:{dead_port}"  # itself, a peer, nobody
    own, _ = yield start_server(server_config(tmp_path / "a", listenPort=own_port, namesrvAddr=listed,
                                              metricsPort=free_port(), peersCompareInterval=600_000))
    web = yield own.web_ready
    base = f"http://127.0.0.1:{web.getHost().port}"
    clients = []
    try:
        clients.append((yield register(own_port, "broker-a", ("TopicTest", "T2"))))
        clients.append((yield register(peer_port, "broker-a", ("TopicTest", "T2"))))
        clients.append((yield register(own_port, "broker-b", ("OnlyHere", "T3"))))  # broker-b missed the peer
        report = yield compared(own)
        assert report.own == f"127.0.0.1:{own_port}" and report.error is None
        answer = json.loads((yield get(base + "/api/peers"))[2])
        peers = {p["addr"]: p for p in answer["peers"]}
        assert list(peers) == [f"127.0.0.1:{peer_port}", f"127.0.0.1:{dead_port}"]  # not itself
        differing = peers[f"127.0.0.1:{peer_port}"]
        assert differing["up"] and differing["differences"] > 0
        assert differing["summary"].startswith(f"2 NameServers differ: 1 broker missing on 127.0.0.1:{peer_port}")
        assert any(line.startswith("topic OnlyHere: present on") for line in differing["lines"]), differing["lines"]
        dead = peers[f"127.0.0.1:{dead_port}"]
        assert not dead["up"] and "refused" in dead["error"].lower()
        dom, _, status = yield utils.getProcessOutputAndValue(chromium(), [
            "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000",
            f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", base + "/"])
        assert status == 0
        _, cells = row(dom.decode(), "data-peer", f"127.0.0.1:{peer_port}")
        assert cells.startswith(f"127.0.0.1:{peer_port} 2 NameServers differ: 1 broker missing on"), cells
        _, cells = row(dom.decode(), "data-peer", f"127.0.0.1:{dead_port}")
        assert "unreachable:" in cells, cells
        _, status_line = row(dom.decode(), "id", "status", "div")
        assert f"other NameServers: 127.0.0.1:{peer_port} differs" in status_line, status_line
        metrics = (yield get(base + "/metrics"))[2].decode()
        assert f'namesrv_peer_up{{peer="127.0.0.1:{peer_port}"}} 1.0' in metrics
        assert f'namesrv_peer_up{{peer="127.0.0.1:{dead_port}"}} 0.0' in metrics
        assert f'namesrv_peer_differences{{peer="127.0.0.1:{peer_port}"}} {float(differing["differences"])}' in metrics

        clients.append((yield register(peer_port, "broker-b", ("OnlyHere", "T3"))))  # now both know broker-b
        report = yield compared(own)
        agreeing = next(r for r in report.results if r.addr == f"127.0.0.1:{peer_port}")
        assert agreeing.differences == 0 and "agree: 2 brokers, 4 topics" in agreeing.summary
    finally:
        for client in clients:
            client.transport.loseConnection()
        yield own.stopService()
        yield peer.stopService()


def test_the_peers_are_namesrv_addr_else_the_nsaddr_list_without_this_server():
    assert peer_addresses(NamesrvConfig({"nsaddrList": "127.0.0.1:9876;10.0.0.2:9876"}), 9876) == ["10.0.0.2:9876"]
    config = NamesrvConfig({"nsaddrList": "x:1", "namesrvAddr": "ns-0.ns:9876;ns-1.ns:9876;ns-1.ns:9876",
                            "advertisedAddress": "ns-0.ns"})
    assert peer_addresses(config, 9876) == ["ns-1.ns:9876"]  # ns-0 is this server; each peer once
    assert peer_addresses(NamesrvConfig(), 9876) == []


@pytest_twisted.inlineCallbacks
def test_the_view_reads_its_peers_under_tls_and_acl_with_no_thread(tmp_path, monkeypatch):
    """Under tls.server.mode=enforcing and aclReadRequired the old view failed (it read its own port
    over plain TCP, unsigned, from a thread, beside the forked snapshot writer).  Now it reads its
    own routes in process and its peers through the Twisted client, over TLS and signed, and no
    thread pool is asked for anything but building its own topic list (apart.py: a CPU job, no socket)."""
    from tests.test_acl import ACCOUNTS
    from tests.test_tls import self_signed

    cert, key = self_signed(tmp_path / "tls")
    accounts = tmp_path / "plain_acl.yml"
    accounts.write_text(ACCOUNTS)
    secured = {"tls.server.mode": "enforcing", "tls.server.certPath": str(cert), "tls.server.keyPath": str(key),
               "tls.server.trustCertPath": str(cert), "aclEnable": True, "aclAccountsFile": str(accounts),
               "aclReadRequired": True}
    asked: list[str] = []
    pool = reactor.getThreadPool()

    class Recorded:
        def callInThreadWithCallback(self, on_result, f, *args, **kwargs):
            asked.append(f.__qualname__)
            return pool.callInThreadWithCallback(on_result, f, *args, **kwargs)
    monkeypatch.setattr(reactor, "getThreadPool", Recorded)
    own_port, peer_port = free_port(), free_port()
    peer, _ = yield start_server(server_config(tmp_path / "b", listenPort=peer_port, **secured))
    own, _ = yield start_server(server_config(tmp_path / "a", listenPort=own_port, metricsPort=free_port(),
                                              namesrvAddr=f"127.0.0.1:{peer_port}", peersCompareInterval=600_000,
                                              **secured))
    try:
        report = yield compared(own)
        assert report.error is None, report.error
        [result] = report.results
        assert result.up and result.differences == 0, result
        assert result.summary == f"127.0.0.1:{own_port}, 127.0.0.1:{peer_port} agree: 0 brokers, 0 topics"
        assert set(asked) <= {"_topic_list.<locals>.begin.<locals>.build"}, asked
    finally:
        yield own.stopService()
        yield peer.stopService()



def test_the_peers_views_connections_write_no_factory_lines_to_the_log():
    """Each comparison connects to each peer: Twisted's "Starting factory <...object at 0x...>" and
    "Stopping factory" lines were 572 of a quiet server's 596 log lines in 25 minutes."""
    with capturedLogs() as events:
        factory = _Connecting("127.0.0.1:9876", defer.Deferred())
        factory.doStart()
        factory.doStop()
    assert [formatEvent(e) for e in events] == []
