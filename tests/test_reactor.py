"""The server's reactor (twisted_namesrv/reactor.py): in each turn the clients' ready sockets are
served before the brokers', at most BROKERS_PER_TURN of the brokers'; a read is served outside
the logging context, and everything Twisted does around it still happens (disconnection,
half-close, an exception logged under the socket's name).

Each test runs its own NamesrvReactor instance (not installed) through the real reactor API and
real sockets, turning it by hand: what is asserted is the order of service and what was served,
never a time."""

from __future__ import annotations

import select
import socket
import struct
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from twisted.internet import abstract, error, interfaces, protocol, tcp
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
    assert reactor._sets.in_brokers.keys() == set()  # the broker's socket left the brokers' set with it


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
    assert len(factory.lost) == 5 and reactor._sets.in_brokers.keys() == set()


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


def iterate(reactor: Any) -> None:
    """A whole turn: the delayed calls due (the dispatcher's waiting registrations, its turn's
    count begun again), then the ready sockets."""
    reactor.runUntilCurrent()
    turn(reactor)


def readable(reactor: Any, count: int) -> None:
    """Back once ``count`` of the reactor's accepted sockets have bytes to read (loopback delivers
    a send in the sender's system call, or soon after in the kernel's softirq thread), so that
    what a turn serves does not depend on when the kernel delivered them."""
    poller = select.poll()  # not select(): a descriptor past FD_SETSIZE (a suite's earlier tests) is one too
    for fd, s in reactor._selectables.items():
        if isinstance(s, tcp.Server):
            poller.register(fd, select.POLLIN)
    for _ in range(500):
        if len(poller.poll(10)) >= count:
            return
    raise AssertionError(f"{count} sockets never became readable")


def test_a_turn_serves_at_most_newcomers_per_turn_first_reads_after_the_clients(
        reactor: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A burst of new connections' first reads (brokers' first registrations after a restart) is
    served NEWCOMERS_PER_TURN a turn, in arrival order, after the sockets heard before."""
    monkeypatch.setattr(namesrv_reactor, "NEWCOMERS_PER_TURN", 3)
    factory = Factory()
    clients = connect(reactor, factory, 8)
    clients[0].sendall(b"hello")
    readable(reactor, 1)
    turn(reactor)
    assert factory.served == ["hello"]  # a newcomer's first read: from now on a client heard before
    ready_at_once(clients[1:], [f"first{i}" for i in range(1, 8)])
    clients[0].sendall(b"lookup")
    readable(reactor, 8)
    turn(reactor)
    assert factory.served[1:] == ["lookup", "first1", "first2", "first3"]
    clients[0].sendall(b"lookup again")
    readable(reactor, 5)
    turn(reactor)
    assert factory.served[5:] == ["lookup again", "first4", "first5", "first6"]
    turn(reactor)
    assert factory.served[9:] == ["first7"]
    assert reactor._sets.in_newcomers == set()


def waiting_to_be_accepted(port: int) -> int:
    """The connections the kernel holds for the listening socket on ``port``, not accepted yet (for
    a listening socket, /proc/net/tcp's rx_queue is its accept queue's length)."""
    with open("/proc/net/tcp") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].split(":")[1], 16) == port:  # LISTEN
                return int(fields[4].split(":")[1], 16)
    raise AssertionError(f"no listening socket on port {port}")


def queued(port: int, count: int) -> None:
    """Back once ``count`` connections wait in the accept queue of ``port`` (the kernel completes a
    loopback handshake in the connecting call or soon after), so that what a turn accepts does not
    depend on when it did."""
    for _ in range(500):
        if waiting_to_be_accepted(port) >= count:
            return
        select.select([], [], [], 0.01)
    raise AssertionError(f"{count} connections never waited to be accepted")


def test_a_turn_accepts_at_most_accepts_per_turn_connections_and_serves_a_lookup_among_them(
        reactor: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Connections arriving by the thousand (brokers reconnecting at once) are accepted
    ACCEPTS_PER_TURN a turn, the rest in the turns after: a lookup read in the same turn waits for
    that many accepts, not for all. Before, Twisted's port accepted 100 in its first turn and 20
    more in each turn after one that took as many: 5,000 brokers connecting made turns of 11-13 ms
    of accepts, a lookup's wait (the curve's 5,000-broker step)."""
    monkeypatch.setattr(namesrv_reactor, "ACCEPTS_PER_TURN", 5)
    factory = Factory()
    listening = reactor.listenTCP(0, factory, interface="127.0.0.1")
    port = listening.getHost().port
    client = socket.create_connection(("127.0.0.1", port))
    queued(port, 1)
    turn(reactor)
    client.sendall(b"hello")  # heard: from now on a client's socket
    readable(reactor, 1)
    turn(reactor)
    assert len(factory.made) == 1 and factory.served == ["hello"]
    assert listening.numberAccepts == 1  # Twisted's own count after a turn that accepted one
    burst = [socket.create_connection(("127.0.0.1", port)) for _ in range(12)]
    queued(port, 12)
    client.sendall(b"lookup")
    readable(reactor, 1)
    accepted = []
    for _ in range(4):
        before = len(factory.made)
        turn(reactor)
        accepted.append(len(factory.made) - before)
    assert accepted == [5, 5, 2, 0]
    assert factory.served == ["hello", "lookup"]  # served in the first of those turns, with 5 accepts
    assert waiting_to_be_accepted(port) == 0
    for peer in burst + [client]:
        peer.close()


def test_a_newcomer_that_registers_moves_to_the_brokers_set_and_one_that_closes_leaves(reactor: Any) -> None:
    factory = Factory()
    clients = connect(reactor, factory, 3)
    assert len(reactor._sets.in_newcomers) == 3
    clients[0].sendall(b"register broker0")
    clients[1].sendall(b"lookup")
    clients[2].close()
    readable(reactor, 3)
    for _ in range(3):
        turn(reactor)
    assert sorted(factory.served) == ["broker0", "lookup"] and len(factory.lost) == 1
    broker_fd = factory.made[0].transport.fileno()
    assert reactor._sets.in_brokers.keys() == {broker_fd} and reactor._sets.in_newcomers == set()
    factory.made[1].transport.pauseProducing()  # unwatched and watched again: in the clients' set
    factory.made[1].transport.resumeProducing()
    assert reactor._sets.in_newcomers == set()
    clients[1].sendall(b"lookup again")
    readable(reactor, 1)
    turn(reactor)
    assert factory.served[-1] == "lookup again"


class CountedEpoll:
    """An epoll set whose changes (epoll_ctl: register, modify, unregister) are written down in
    ``calls``, as (the set's name, the change, the descriptor); everything else is the set's."""

    def __init__(self, name: str, inner: Any, calls: list[tuple[str, str, int]]) -> None:
        self.name, self.inner, self.calls = name, inner, calls

    def register(self, fd: int, flags: int) -> None:
        self.calls.append((self.name, "register", fd))
        self.inner.register(fd, flags)

    def modify(self, fd: int, flags: int) -> None:
        self.calls.append((self.name, "modify", fd))
        self.inner.modify(fd, flags)

    def unregister(self, fd: int) -> None:
        self.calls.append((self.name, "unregister", fd))
        self.inner.unregister(fd)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def counted_epoll_ctl(reactor: Any) -> list[tuple[str, str, int]]:
    """From now on, the reactor's epoll_ctl calls on its three sets, written down as they are made."""
    calls: list[tuple[str, str, int]] = []
    sets = reactor._sets
    for name in ("clients", "brokers", "newcomers"):
        setattr(sets, name, CountedEpoll(name, getattr(sets, name), calls))
    return calls


def test_a_newcomers_first_read_moves_it_with_one_epoll_ctl(reactor: Any) -> None:
    """A broker's first registration is its connection's first read: it leaves the newcomers' set
    for the brokers' with one system call (the newcomers' set reported it once only: its entry
    there reports nothing more), a client's for the clients' set likewise; two each before (an
    unregister, then a register): 10,000 epoll_ctl calls in the 5,000-broker first registration."""
    factory = Factory()
    clients = connect(reactor, factory, 2)
    calls = counted_epoll_ctl(reactor)
    clients[0].sendall(b"register broker0")
    clients[1].sendall(b"lookup")
    readable(reactor, 2)
    turn(reactor)
    assert sorted(factory.served) == ["broker0", "lookup"]
    broker_fd, client_fd = (p.transport.fileno() for p in factory.made)
    assert sorted(calls) == [("brokers", "register", broker_fd), ("clients", "register", client_fd)]
    assert reactor._sets.in_brokers.keys() == {broker_fd} and reactor._sets.in_newcomers == set()
    clients[0].sendall(b"heartbeat")
    clients[1].sendall(b"lookup again")
    readable(reactor, 2)
    assert reactor._sets.newcomers.poll(0) == []  # neither reported by the newcomers' set again
    turn(reactor)
    assert sorted(factory.served[2:]) == ["heartbeat", "lookup again"]
    assert len(calls) == 2


class WritingMuch(Recorder):
    """Writes more than a socket's buffer takes in its first read: the rest waits for the socket
    to be writable (Twisted watches it for writing too, while it is still a newcomer)."""

    def dataReceived(self, data: bytes) -> None:
        super().dataReceived(data)
        self.transport.write(b"x" * (32 << 20))


def test_a_newcomer_watched_again_in_its_first_read_leaves_the_newcomers_set(reactor: Any) -> None:
    """A newcomer whose first read left bytes to send is watched again in the newcomers' set (for
    writing): it is removed from it as it moves, so no set but the brokers' reports it again."""
    factory = Factory(WritingMuch)
    clients = connect(reactor, factory, 1)
    calls = counted_epoll_ctl(reactor)
    clients[0].sendall(b"register broker0")
    readable(reactor, 1)
    turn(reactor)
    fd = factory.made[0].transport.fileno()
    assert calls == [("newcomers", "modify", fd), ("newcomers", "unregister", fd), ("brokers", "register", fd)]
    clients[0].setblocking(False)
    try:
        clients[0].recv(1 << 20)  # room to write again: the socket is writable
    except BlockingIOError:
        pass
    assert reactor._sets.newcomers.poll(0) == [] and reactor._sets.in_brokers.keys() == {fd}
    assert [ready for ready, _ in reactor._sets.brokers.poll(0)] == [fd]


def test_a_lookup_waits_for_at_most_newcomers_per_turn_first_registrations(reactor: Any, tmp_path: Any) -> None:
    """The real server on this reactor: 60 brokers' first registrations on new connections, all
    ready at once, and a client heard before sending a lookup whenever a registration is handled
    and none of its lookups waits (as one arriving in the midst of a turn): the registrations
    handled after it came, before its answer, are at most NEWCOMERS_PER_TURN. Before, every ready
    newcomer was read in one turn, AT_ONCE_PER_TURN (16) answered at once and the rest put off to be
    answered that many at the start of the turns after, ahead of the lookup."""
    from tests.support import server_config
    from tests.test_renewal import storm_frames
    from twisted_namesrv.remoting import RemotingCommand, RequestCode
    from twisted_namesrv.service import NamesrvService

    service = NamesrvService.from_config(server_config(tmp_path), reactor=reactor)
    factory = service.factory
    port = reactor.listenTCP(0, factory, interface="127.0.0.1").getHost().port
    client = socket.create_connection(("127.0.0.1", port))
    frames = storm_frames(60, 100)
    brokers = []
    for _ in frames:  # accepted as they come (the listening port's backlog is 50)
        brokers.append(socket.create_connection(("127.0.0.1", port)))
        iterate(reactor)
    for _ in range(50):
        if len(factory.connections) == len(brokers) + 1:
            break
        iterate(reactor)
    lookup = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Storm"}, opaque=1).encode()
    client.sendall(lookup)  # heard before the burst
    readable(reactor, 1)
    iterate(reactor)
    client.settimeout(10)
    assert client.recv(1 << 16)

    handled: list[str] = []
    sent_at: list[int] = []  # the registrations handled when the lookup now waiting was sent
    meanwhile: list[int] = []  # per lookup, the registrations handled from its send to its answer

    def heard(kind: str, info: Any) -> None:
        handled.append(kind)
        if not sent_at:
            client.sendall(lookup)
            sent_at.append(len(handled))
    service.state.routes.listen(heard)
    looking_up = next(iter(factory.connections.values()))  # the client's: accepted first
    write = looking_up._write

    def answered(replies: list[bytes]) -> None:
        if sent_at:
            meanwhile.append(len(handled) - sent_at.pop())
        write(replies)
    looking_up._write = answered
    for broker, frame in zip(brokers, frames, strict=True):
        broker.sendall(frame)
    readable(reactor, len(brokers))
    for _ in range(200):
        if len(handled) == len(brokers) and not sent_at:
            break
        iterate(reactor)
    assert handled == ["registered"] * len(brokers)  # every broker registered, lookups answered between
    assert len(meanwhile) >= len(brokers) // 8
    assert max(meanwhile) <= 8 == namesrv_reactor.NEWCOMERS_PER_TURN, meanwhile
    for broker in brokers:
        broker.settimeout(10)
        assert broker.recv(1 << 16)  # its answer
        broker.close()
    client.close()



def test_a_lookup_waits_for_at_most_brokers_per_turn_heartbeats_of_a_storm(reactor: Any, tmp_path: Any) -> None:
    """The real server on this reactor: 120 registered brokers' heartbeats all ready at once (a storm
    that found the reactor busy), each renewed from memory, and a client heard before sending a
    lookup whenever a heartbeat is renewed and none of its lookups waits (one arriving in the midst
    of a turn, behind the rest of it): the heartbeats renewed after it came, before its answer, are
    at most BROKERS_PER_TURN, and none before it in the turn that reads it. Served in epoll's order
    among the clients' sockets, a lookup waited for every heartbeat ready with it."""
    from tests.test_renewal import storm_frames
    from twisted_namesrv.remoting import RemotingCommand, RequestCode

    count = 120
    service, (client,) = served_connections(reactor, tmp_path, 1)
    looking_up = next(iter(service.factory.connections.values()))
    port = client.getpeername()[1]
    brokers = []
    for _ in range(count):  # accepted as they come (the listening port's backlog is 50)
        brokers.append(socket.create_connection(("127.0.0.1", port)))
        iterate(reactor)
    for _ in range(50):
        if len(service.factory.connections) == count + 1:
            break
        iterate(reactor)
    for broker in brokers:
        broker.settimeout(10)
    for opaque in (1, 1000):  # registered (the answer kept for the connection), then renewed from memory
        for broker, frame in zip(brokers, storm_frames(count, opaque), strict=True):
            broker.sendall(frame)
        readable(reactor, count)
        for _ in range(100):
            iterate(reactor)
            if len(select.select(brokers, [], [], 0)[0]) == count:  # every answer sent
                break
        for broker in brokers:
            assert RemotingCommand.decode(broker.recv(1 << 16)[4:]).code == 0
    assert all(served_after_clients(p.transport) for p in service.factory.connections.values() if p is not looking_up)
    lookup = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Storm"}, opaque=1).encode()
    client.sendall(lookup)  # heard before the storm
    readable(reactor, 1)
    iterate(reactor)
    assert client.recv(1 << 16)

    renewed: list[int] = []  # the storm's heartbeats renewed so far, one entry each
    sent_at: list[int] = []  # the heartbeats renewed when the lookup now waiting was sent
    meanwhile: list[int] = []  # per lookup, the heartbeats renewed from its send to its answer
    routes = service.state.routes
    renew_again = routes.renew_again

    def renewing(kept: Any, channel: Any) -> bool:
        renewed.append(1)
        if not sent_at:
            drained(client)  # the answers so far (a route of 120 brokers: a few fill the socket's buffers)
            client.sendall(lookup)
            sent_at.append(len(renewed))
        return renew_again(kept, channel)
    routes.renew_again = renewing  # type: ignore[method-assign]
    write = looking_up._write

    def answered(replies: list[bytes]) -> None:
        if sent_at:
            meanwhile.append(len(renewed) - sent_at.pop())
        write(replies)
    looking_up._write = answered  # type: ignore[method-assign]
    for broker, frame in zip(brokers, storm_frames(count, 5000), strict=True):
        broker.sendall(frame)
    readable(reactor, count)
    for _ in range(100):
        if len(renewed) == count and not sent_at:
            break
        iterate(reactor)
    assert len(renewed) == count  # every heartbeat renewed from memory, the lookups answered between them
    assert len(meanwhile) >= count // namesrv_reactor.BROKERS_PER_TURN
    assert max(meanwhile) <= namesrv_reactor.BROKERS_PER_TURN == 8, meanwhile
    for broker in brokers:
        answer = RemotingCommand.decode(broker.recv(1 << 16)[4:])
        assert answer.code == 0 and 5000 <= answer.opaque < 5000 + count
        broker.close()
    client.close()

def drained(connection: socket.socket) -> None:
    """Read what ``connection`` has been sent so far, without waiting."""
    while select.select([connection], [], [], 0)[0] and connection.recv(1 << 20):
        pass


#: the Python calls of a reactor turn that answers one lookup from memory (the turn as Twisted's
#: mainLoop runs it: the due calls, the timeout, the poll, the read and the send): 23 before the
#: answer was sent on its socket itself and the turn polled the clients' set itself, 20 before a
#: TCP connection's read was Twisted's written out in the reactor
LOOKUP_TURN_CALLS = 18


def served_connections(reactor: Any, tmp_path: Any, count: int) -> tuple[Any, list[socket.socket]]:
    """A NameServer's service on this reactor and ``count`` connections to it, each accepted."""
    from tests.support import server_config
    from twisted_namesrv.service import NamesrvService

    service = NamesrvService.from_config(server_config(tmp_path), reactor=reactor)
    port = reactor.listenTCP(0, service.factory, interface="127.0.0.1").getHost().port
    connections = [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]
    for _ in range(20):
        if len(service.factory.connections) == count:
            break
        iterate(reactor)
    for connection in connections:
        connection.settimeout(10)
    return service, connections


def heartbeat_kept(reactor: Any, broker: socket.socket) -> None:
    """``broker`` registered, then registered again: its heartbeat's answer kept for the connection."""
    from tests.test_renewal import storm_frames

    for opaque in (1, 2):
        broker.sendall(storm_frames(1, opaque)[0])
        readable(reactor, 1)
        for _ in range(3):
            iterate(reactor)
        assert broker.recv(1 << 16)


def test_a_lookup_answered_from_memory_costs_its_reactor_turn_a_counted_number_of_python_calls(
        reactor: Any, tmp_path: Any) -> None:
    """Every lookup a client sends on its own wakes the reactor for one turn: what that turn costs
    in Python calls (the server's, Twisted's and the standard library's) is held here, counted."""
    from tests.support import python_calls_run
    from tests.test_renewal import storm_frames
    from twisted_namesrv.remoting import RemotingCommand, RequestCode

    service, (broker, client) = served_connections(reactor, tmp_path, 2)
    broker.sendall(storm_frames(1, 1)[0])
    readable(reactor, 1)
    for _ in range(3):
        iterate(reactor)
    assert broker.recv(1 << 16)
    calls = []
    for opaque in range(1, 5):  # the first decoded and kept, the rest answered from memory
        client.sendall(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Storm"},
                                               opaque=opaque).encode())
        readable(reactor, 1)
        calls.append(python_calls_run(lambda: (reactor.runUntilCurrent(), reactor.doIteration(reactor.timeout()))))
        assert RemotingCommand.decode(client.recv(1 << 16)[4:]).code == 0  # SUCCESS, the route
    assert calls[-1] == calls[-2] <= LOOKUP_TURN_CALLS, calls
    broker.close()
    client.close()


#: a turn that renews one broker's heartbeat from memory while a client's lookup answer is kept
#: (the storm's: the probe's): its Python calls (42 while each heartbeat was first looked for among
#: the kept lookups, in its read and again once cut; 37 while its key was looked for through its
#: bytes, not read where its last registration's was: answer_cache.renewal_key_steps; 35 before
#: its key took the split form, whose tail, ``_split_tail``, the first registration's key shares)
HEARTBEAT_TURN_CALLS = 36


def test_a_heartbeat_renewed_from_memory_costs_its_reactor_turn_a_counted_number_of_python_calls(
        reactor: Any, tmp_path: Any) -> None:
    """On a quiet machine every heartbeat of a storm wakes the reactor for a turn of its own: what
    that turn costs in Python calls is held here, counted, with a lookup's answer kept: a broker's
    heartbeat is renewed before anything of it is looked for among the kept lookups."""
    from tests.support import python_calls_run
    from tests.test_renewal import storm_frames
    from twisted_namesrv.remoting import RemotingCommand, RequestCode

    service, (broker, client) = served_connections(reactor, tmp_path, 2)
    heartbeat_kept(reactor, broker)
    for opaque in (1, 2):  # the client's lookup, decoded and kept, then answered from memory
        client.sendall(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Storm"},
                                               opaque=opaque).encode())
        readable(reactor, 1)
        iterate(reactor)
        assert RemotingCommand.decode(client.recv(1 << 16)[4:]).code == 0
    assert service.state.answers.replies
    calls = []
    for opaque in range(3, 6):
        broker.sendall(storm_frames(1, opaque)[0])
        readable(reactor, 1)
        calls.append(python_calls_run(lambda: (reactor.runUntilCurrent(), reactor.doIteration(reactor.timeout()))))
        answer = RemotingCommand.decode(broker.recv(1 << 16)[4:])
        assert (answer.code, answer.opaque) == (0, opaque)
    assert calls[-1] == calls[-2] <= HEARTBEAT_TURN_CALLS, calls
    broker.close()
    client.close()


def test_a_lookup_on_a_brokers_connection_is_answered_as_any(reactor: Any, tmp_path: Any) -> None:
    """A broker's connection is not looked up among the kept lookups (its heartbeats are none):
    a route lookup it sends, again and again, is answered all the same, and its heartbeat after."""
    from tests.test_renewal import storm_frames
    from twisted_namesrv.remoting import RemotingCommand, RequestCode

    service, (broker,) = served_connections(reactor, tmp_path, 1)
    heartbeat_kept(reactor, broker)
    assert service.state.answers.renewals
    lookup = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Storm"}, opaque=10).encode()
    for opaque in (10, 11, 12):
        broker.sendall(lookup.replace(b'"opaque":10', b'"opaque":%d' % opaque) if opaque != 10 else lookup)
        readable(reactor, 1)
        iterate(reactor)
        answer = RemotingCommand.decode(broker.recv(1 << 16)[4:])
        assert (answer.code, answer.opaque) == (0, opaque) and b"127.0.0.1:3000" in bytes(answer.body or b"")
    broker.sendall(storm_frames(1, 13)[0])
    readable(reactor, 1)
    iterate(reactor)
    answer = RemotingCommand.decode(broker.recv(1 << 16)[4:])
    assert (answer.code, answer.opaque) == (0, 13)
    broker.close()


def test_a_turn_reports_at_most_ready_per_poll_clients_and_the_rest_next_turn(
        reactor: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The clients' poll asks room for at most READY_PER_POLL events, whatever the connections
    held: the ready sockets past it are served in the next turn, first, none twice, none left."""
    monkeypatch.setattr(namesrv_reactor, "READY_PER_POLL", 4)
    factory = Factory()
    clients = connect(reactor, factory, 10)
    ready_at_once(clients, [f"hello{i}" for i in range(10)])
    readable(reactor, 10)
    for _ in range(3):  # first reads: newcomers, NEWCOMERS_PER_TURN a turn; then clients heard before
        turn(reactor)
    assert sorted(factory.served) == sorted(f"hello{i}" for i in range(10))
    factory.served.clear()
    ready_at_once(clients, [f"lookup{i}" for i in range(10)])
    readable(reactor, 10)
    served = []
    for _ in range(3):
        turn(reactor)
        served.append(len(factory.served) - sum(served))
    assert served == [4, 4, 2]
    assert sorted(factory.served) == sorted(f"lookup{i}" for i in range(10))


class RoomAsked:
    """An epoll set whose polls write down the events' room each asked for (``maxevents``: what
    Python's ``epoll.poll`` allocates); everything else is the set's."""

    def __init__(self, inner: Any, asked: list[int]) -> None:
        self.inner, self.asked = inner, asked

    def poll(self, timeout: float = -1, maxevents: int = -1) -> list[tuple[int, int]]:
        self.asked.append(maxevents)
        return self.inner.poll(timeout, maxevents)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def storm_turns(tmp_path: Any, idle: int) -> tuple[list[int], list[int]]:
    """On a fresh reactor holding ``idle`` client connections (each looked the storm's topic up
    once), three storm turns, each a broker's heartbeat renewed from memory and the probe's lookup:
    each turn's Python calls, and the events' room its polls of the clients' set asked for."""
    from tests.support import python_calls_run
    from tests.test_renewal import storm_frames
    from twisted_namesrv.remoting import RemotingCommand, RequestCode

    def lookup(opaque: int) -> bytes:
        return RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Storm"}, opaque=opaque).encode()

    r = namesrv_reactor.NamesrvReactor()
    clients: list[socket.socket] = []
    try:
        service, (broker, probe) = served_connections(r, tmp_path, 2)
        clients += [broker, probe]
        port = next(s for s in r.getReaders() if isinstance(s, tcp.Port)).getHost().port
        for _ in range(idle):  # each accepted before the next: within the listening socket's backlog
            clients.append(socket.create_connection(("127.0.0.1", port)))
            while len(service.factory.connections) < len(clients):
                iterate(r)
        heartbeat_kept(r, broker)
        for client in clients[1:]:
            client.sendall(lookup(1))
        for client in clients[1:]:
            answered = select.poll()  # not select(): a descriptor past FD_SETSIZE (a suite's earlier tests)
            answered.register(client.fileno(), select.POLLIN)
            while not answered.poll(0):
                iterate(r)
            assert RemotingCommand.decode(client.recv(1 << 16)[4:]).code == 0
        asked: list[int] = []
        r._sets.clients = RoomAsked(r._sets.clients, asked)
        calls = []
        for opaque in range(3, 6):
            probe.sendall(lookup(opaque))
            broker.sendall(storm_frames(1, opaque)[0])
            readable(r, 2)
            asked.clear()
            calls.append(python_calls_run(lambda: (r.runUntilCurrent(), r.doIteration(r.timeout()))))
            assert (RemotingCommand.decode(broker.recv(1 << 16)[4:]).opaque,
                    RemotingCommand.decode(probe.recv(1 << 16)[4:]).opaque) == (opaque, opaque)
        return calls, asked
    finally:
        for client in clients:
            client.close()
        for selectable in list(r.getReaders()) + list(r.getWriters()):
            r.removeReader(selectable)
            r.removeWriter(selectable)
        r._poller.close()


def test_a_storm_turns_work_does_not_grow_with_the_idle_connections_held(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A storm's turn (a broker's heartbeat renewed from memory and the probe's lookup) costs the
    same Python calls whether 4 or 60 idle client connections are held, and its poll asks room for
    no more events past READY_PER_POLL (16 here, 1,024 in the server): before, the room was one
    event per descriptor watched, allocated and freed every turn, 234 KB at the curve's 19,500
    connections (tools/bench/storm_counts.py counts the real server's storm)."""
    if namesrv_reactor.NamesrvReactor is None:
        pytest.skip("the server's reactor needs epoll")
    monkeypatch.setattr(namesrv_reactor, "READY_PER_POLL", 16)
    few, many = storm_turns(tmp_path / "few", 4), storm_turns(tmp_path / "many", 60)
    assert few[0] == many[0], (few[0], many[0])
    assert max(few[1]) < 16 and many[1] and max(many[1]) == 16, (few[1], many[1])
