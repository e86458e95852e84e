"""The server's reactor (twisted_namesrv/reactor.py): in each turn the clients' ready sockets are
served before the brokers', at most BROKERS_PER_TURN of the brokers'; a read is served outside
the logging context, and everything Twisted does around it still happens (disconnection,
half-close, an exception logged under the socket's name).

Each test runs its own NamesrvReactor instance (not installed) through the real reactor API and
real sockets, turning it by hand: what is asserted is the order of service and what was served,
never a time."""

from __future__ import annotations

import socket
import struct
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from twisted.internet import abstract, error, interfaces, protocol
from twisted.python import log
from zope.interface import implementer

from twisted_namesrv import reactor as namesrv_reactor
from twisted_namesrv.reactor import serve_after_clients, served_after_clients


class Recorder(protocol.Protocol):
    """Writes down, in the factory's list, the name its client said it is on each read; a client
    that says it registers is a broker (as RemotingProtocol marks a connection in the read that
    keeps its heartbeat answer)."""

    def dataReceived(self, data: bytes) -> None:
        if data.startswith(b"register "):
            serve_after_clients(self.transport)
            data = data[len(b"register "):]
        self.factory.served.append(data.decode())

    def connectionLost(self, reason: Any = protocol.connectionDone) -> None:
        self.factory.lost.append(reason)


@implementer(interfaces.IHalfCloseableProtocol)
class HalfClosing(Recorder):
    def readConnectionLost(self) -> None:
        self.factory.served.append("read side closed")
        self.transport.write(b"still writing")
        self.transport.loseConnection()

    def writeConnectionLost(self) -> None:
        pass


class Failing(Recorder):
    def logPrefix(self) -> str:
        return "FailingPeer"

    def dataReceived(self, data: bytes) -> None:
        raise ValueError("a bug in dataReceived")


class Factory(protocol.Factory):
    def __init__(self, proto: type[protocol.Protocol] = Recorder) -> None:
        self.protocol = proto
        self.served: list[str] = []
        self.lost: list[Any] = []
        self.made: list[protocol.Protocol] = []

    def buildProtocol(self, addr: Any) -> protocol.Protocol | None:
        p = super().buildProtocol(addr)
        self.made.append(p)  # type: ignore[arg-type]
        return p


@pytest.fixture
def reactor() -> Iterator[Any]:
    if namesrv_reactor.NamesrvReactor is None:
        pytest.skip("the server's reactor needs epoll")
    r = namesrv_reactor.NamesrvReactor()
    yield r
    for selectable in list(r.getReaders()) + list(r.getWriters()):
        r.removeReader(selectable)
        r.removeWriter(selectable)
        try:
            selectable.connectionLost(error.ConnectionDone())
        except Exception:
            pass
    r._poller.close()


def turn(reactor: Any) -> None:
    reactor.doIteration(0)


def connect(reactor: Any, factory: Factory, count: int) -> list[socket.socket]:
    """``count`` connections accepted and made (each a protocol in factory.made, in order)."""
    port = reactor.listenTCP(0, factory, interface="127.0.0.1")
    clients = [socket.create_connection(("127.0.0.1", port.getHost().port)) for _ in range(count)]
    for _ in range(20):
        if len(factory.made) == count:
            break
        turn(reactor)
    assert len(factory.made) == count
    return clients


def ready_at_once(clients: list[socket.socket], names: list[str]) -> None:
    for client, name in zip(clients, names, strict=True):
        client.sendall(name.encode())


def registered(reactor: Any, factory: Factory, brokers: list[socket.socket]) -> None:
    """Each of ``brokers`` registers (and is marked in that read)."""
    for index, broker in enumerate(brokers):
        broker.sendall(b"register broker%d" % index)
    for _ in range(5):
        turn(reactor)
    assert sorted(factory.served) == sorted(f"broker{index}" for index in range(len(brokers)))
    factory.served.clear()


def test_the_clients_sockets_are_served_before_the_brokers(reactor: Any) -> None:
    factory = Factory()
    clients = connect(reactor, factory, 6)
    registered(reactor, factory, clients[:4])  # the first four are brokers' (and first in epoll's order)
    names = ["broker0", "broker1", "broker2", "broker3", "lookup4", "lookup5"]
    ready_at_once(clients, names)
    turn(reactor)
    assert factory.served[:2] == ["lookup4", "lookup5"]
    assert sorted(factory.served[2:]) == names[:4]


def test_a_turn_serves_at_most_brokers_per_turn_and_the_rest_next_turn(
        reactor: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(namesrv_reactor, "BROKERS_PER_TURN", 2)
    factory = Factory()
    clients = connect(reactor, factory, 6)
    registered(reactor, factory, clients[:5])
    ready_at_once(clients[:5], [f"broker{i}" for i in range(5)])
    turn(reactor)
    assert len(factory.served) == 2
    clients[5].sendall(b"lookup")  # read in the next turn, ahead of the brokers left from this one
    turn(reactor)
    assert factory.served[2] == "lookup" and len(factory.served) == 5
    turn(reactor)
    assert sorted(factory.served[:2] + factory.served[3:]) == [f"broker{i}" for i in range(5)]


def test_the_mark_reaches_the_socket_under_a_wrapping_transport() -> None:
    descriptor = abstract.FileDescriptor()

    class Wrapper:  # as TLS's TLSMemoryBIOProtocol: the socket's transport is its ``transport``
        transport = descriptor
    assert not served_after_clients(Wrapper())
    serve_after_clients(Wrapper())
    assert served_after_clients(descriptor)
    serve_after_clients(object())  # no socket under it: nothing to mark


def test_a_peer_that_closes_is_lost_after_its_last_bytes_are_read(reactor: Any) -> None:
    factory = Factory()
    clients = connect(reactor, factory, 2)
    registered(reactor, factory, clients[1:])
    clients[0].sendall(b"last words")
    clients[0].close()
    clients[1].sendall(b"broker0")
    clients[1].close()
    for _ in range(5):
        turn(reactor)
    assert sorted(factory.served) == ["broker0", "last words"]
    assert len(factory.lost) == 2 and all(f.check(error.ConnectionDone) for f in factory.lost)
    assert reactor._sets.in_brokers == set()  # the broker's socket left the brokers' set with it


def test_half_close_reaches_a_half_closeable_protocol(reactor: Any) -> None:
    factory = Factory(HalfClosing)
    [client] = connect(reactor, factory, 1)
    client.sendall(b"request")
    client.shutdown(socket.SHUT_WR)
    for _ in range(5):
        turn(reactor)
    assert factory.served == ["request", "read side closed"]
    client.settimeout(5)
    assert client.recv(100) == b"still writing"
    client.close()


def test_an_exception_from_a_read_is_logged_under_the_socket_and_closes_it(reactor: Any) -> None:
    events: list[dict[str, Any]] = []
    log.addObserver(events.append)  # Twisted's legacy log, where the reactor logs it
    try:
        factory = Factory(Failing)
        [client] = connect(reactor, factory, 1)
        client.sendall(b"anything")
        turn(reactor)
    finally:
        log.removeObserver(events.append)
    failures = [e for e in events if e.get("isError") and "failure" in e]
    assert [e["failure"].type for e in failures] == [ValueError]
    assert failures[0]["system"].startswith("FailingPeer,")  # the socket's name, as Twisted logs it
    assert len(factory.lost) == 1
    client.settimeout(5)
    assert client.recv(10) == b""  # closed
    client.close()


def test_writes_the_kernel_did_not_take_are_sent_when_the_socket_is_writable(reactor: Any) -> None:
    factory = Factory()
    [client] = connect(reactor, factory, 1)
    registered(reactor, factory, [client])
    big = b"x" * (8 << 20)
    factory.made[0].transport.write(big)
    client.setblocking(False)
    got = 0
    for _ in range(2000):
        turn(reactor)
        try:
            got += len(client.recv(1 << 20))
        except BlockingIOError:
            pass
        if got == len(big):
            break
    assert got == len(big)
    client.close()


def test_install_leaves_an_installed_reactor_alone() -> None:
    assert "twisted.internet.reactor" in sys.modules  # the tests' own
    assert namesrv_reactor.install() is False


def test_a_connection_is_served_after_the_clients_once_it_keeps_a_brokers_heartbeat_answer(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """RemotingProtocol marks a broker's connection (its registration's answer kept for heartbeats)
    once, and never a client's."""
    from tests.test_renewal import Server, storm_frames
    from twisted_namesrv import server as server_module
    from twisted_namesrv.remoting import RemotingCommand, RequestCode

    marked: list[Any] = []
    monkeypatch.setattr(server_module, "serve_after_clients", marked.append)
    server = Server(tmp_path, True)
    broker, client = server.connect(), server.connect()
    lookup = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Storm"}, opaque=7).encode()
    server.send(client, lookup)
    assert marked == []
    server.send(broker, storm_frames(1, 1)[0])
    assert marked == [broker[1]]
    server.send(broker, storm_frames(1, 2)[0])  # its heartbeat, answered from memory
    for _ in range(3):
        server.send(client, lookup)
    assert marked == [broker[1]] and broker[0].after_clients and not client[0].after_clients


def five_brokers_reset(reactor: Any, monkeypatch: pytest.MonkeyPatch, gone_per_turn: int) -> Factory:
    """Five registered brokers' connections reset at once, BROKERS_PER_TURN 2."""
    monkeypatch.setattr(namesrv_reactor, "BROKERS_PER_TURN", 2)
    monkeypatch.setattr(namesrv_reactor, "BROKERS_GONE_PER_TURN", gone_per_turn)
    factory = Factory()
    clients = connect(reactor, factory, 5)
    registered(reactor, factory, clients)
    for client in clients:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()  # a reset
    return factory


def test_the_brokers_hang_ups_are_all_served_in_the_turn_past_brokers_per_turn(
        reactor: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A mass disconnect's closures leave together (their removals are one batch), as Twisted's."""
    factory = five_brokers_reset(reactor, monkeypatch, 1024)
    turn(reactor)
    assert len(factory.lost) == 5 and reactor._sets.in_brokers == set()


def test_hang_ups_past_brokers_gone_per_turn_wait_for_the_next_turn(
        reactor: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    factory = five_brokers_reset(reactor, monkeypatch, 3)
    turn(reactor)
    assert len(factory.lost) == 3
    turn(reactor)
    assert len(factory.lost) == 5


def test_without_epoll_the_module_imports_and_installs_nothing() -> None:
    """Where there is no epoll (not Linux) the server runs on Twisted's default reactor."""
    import subprocess

    code = ("import select\n"
            "for name in [n for n in dir(select) if n.startswith('EPOLL') or n == 'epoll']:\n"
            "    delattr(select, name)\n"
            "from twisted_namesrv import reactor, server\n"
            "assert reactor.NamesrvReactor is None and reactor.install() is False\n"
            "reactor.serve_after_clients(object())\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
