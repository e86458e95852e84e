"""Accepted connections keep neither Twisted's log prefix nor its repr as strings (lean_transport.py):
both are made when read, as Twisted made them; the server's reactor reads them as Twisted's own
transport (its read path, reactor.py); a host's connections share its string, and the peer's address is
kept as its parts; they cost fewer bytes a connection (tracemalloc)."""

from __future__ import annotations

import socket
import sys
import tracemalloc
from typing import Any

import pytest
from twisted.internet import tcp
from twisted.internet.address import IPv4Address

from tests.test_reactor import Factory, turn
from twisted_namesrv import reactor as namesrv_reactor
from twisted_namesrv.lean_transport import LeanServer
from twisted_namesrv.server import Listener

CONNECTIONS = 200

pytestmark = pytest.mark.skipif(namesrv_reactor.NamesrvReactor is None, reason="the server's reactor needs epoll")


def fresh() -> Any:
    return namesrv_reactor.NamesrvReactor()


def closed(reactor: Any) -> None:
    """The reactor's sockets closed with it: the accepted connections' too, else each test leaves
    CONNECTIONS descriptors open and a later test's select() meets one past FD_SETSIZE."""
    for selectable in list(reactor.getReaders()) + list(reactor.getWriters()):
        reactor.removeReader(selectable)
        reactor.removeWriter(selectable)
        if isinstance(selectable, tcp.Server):
            selectable.socket.close()
    reactor._poller.close()


def accepted(reactor: Any, factory: Factory, transport: type[tcp.Server] | None) -> tuple[Listener, float, list[Any]]:
    """A Listener's port on the server's reactor (its accepts into ``transport``, when given, else
    as Listener has them), CONNECTIONS connections accepted: the listener, the bytes traced a
    connection while they were accepted, the clients."""
    listener = Listener("listenPort", factory, reactor, 0, "127.0.0.1")
    listener.bind()
    if transport is not None:
        listener.port.transport = transport  # type: ignore[union-attr]
    port = listener.port.getHost().port  # type: ignore[union-attr]
    clients: list[socket.socket] = []
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(CONNECTIONS):
            clients.append(socket.create_connection(("127.0.0.1", port)))
            turn(reactor)
        for _ in range(20):
            if len(factory.made) == CONNECTIONS:
                break
            turn(reactor)
        per_connection = (tracemalloc.get_traced_memory()[0] - before) / CONNECTIONS
    finally:
        tracemalloc.stop()
    assert len(factory.made) == CONNECTIONS
    return listener, per_connection, clients


def test_a_listeners_connections_are_lean_and_say_what_twisteds_say() -> None:
    reactor, factory = fresh(), Factory()
    listener, _, clients = accepted(reactor, factory, None)
    try:
        transports = [p.transport for p in factory.made]
        assert {type(t) for t in transports} == {LeanServer}
        first = transports[0]
        assert "logstr" not in vars(first) and "repstr" not in vars(first)
        port = listener.port.getHost().port  # type: ignore[union-attr]
        assert first.logPrefix() == f"Recorder,{first.sessionno},127.0.0.1"
        assert repr(first) == f"<Recorder #{first.sessionno} on {port}>"
        clients[0].sendall(b"hello")
        for _ in range(3):
            turn(reactor)
        assert factory.served == ["hello"]  # read as Twisted's own transport is
    finally:
        for client in clients:
            client.close()
        listener.unbind()
        closed(reactor)


def test_connections_from_one_host_share_its_string() -> None:
    """Each accept gives its peer's address a string of its own; the transports keep the interned
    one (``client``, ``hostname``, what ``getPeer`` answers), one for every connection from a host."""
    reactor, factory = fresh(), Factory()
    listener, _, clients = accepted(reactor, factory, None)
    try:
        transports = [p.transport for p in factory.made]
        first = transports[0]
        assert first.hostname == "127.0.0.1" and first.hostname is sys.intern("127.0.0.1")
        assert all(t.hostname is first.hostname and t.client[0] is first.hostname for t in transports)
        assert first.getPeer().host is first.hostname and first.client[1] == clients[0].getsockname()[1]
        # the address is kept as its parts, not as the accept's tuple: made when read (getPeer reads it)
        assert "client" not in vars(first) and first.client == ("127.0.0.1", first.getPeer().port)
    finally:
        for client in clients:
            client.close()
        listener.unbind()
        closed(reactor)


def test_a_lean_connection_holds_fewer_bytes_than_twisteds() -> None:
    kept = []
    for transport in (tcp.Server, LeanServer):  # each on a reactor of its own, as alike as can be
        own = fresh()
        listener, per_connection, clients = accepted(own, Factory(), transport)
        kept.append(per_connection)
        for client in clients:
            client.close()
        listener.unbind()
        closed(own)
    # its two strings, 150-170 bytes (longer session numbers, longer), its host's and its address's tuple:
    # 210-260 bytes alone, 158 after test_launch_options.py in one process (what the run before left in
    # the heap moves both), so the bound is the two strings'; the shared host is held by its own test above
    assert kept[1] < kept[0] - 120


def _functions_called(work: Any) -> list[str]:
    """The Python functions ``work`` calls (file:name), whoever's: C functions not counted."""
    called: list[str] = []

    def profiled(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            called.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")

    before = sys.getprofile()
    sys.setprofile(profiled)
    try:
        work()
    finally:
        sys.setprofile(before)
    return called


def test_an_accept_converts_no_enum_validates_no_address_and_formats_no_string() -> None:
    """What an accept runs in Python, counted (every broker's connection is one: 91 k instructions
    an accept at the scale curve's 5,000 brokers, 177 lines of Python, before LeanPort): the standard
    library's ``socket.accept`` turned the listening socket's family and type into enums (``enum``'s
    ``__call__`` and ``__new__`` twice), attrs validated the peer's IPv4Address twice, and
    ``tcp.Server.__init__`` formatted two strings LeanServer drops; none of it runs now, and the
    accepted transport, protocol and peer are as before."""
    reactor, factory = fresh(), Factory()
    listener = Listener("listenPort", factory, reactor, 0, "127.0.0.1")
    listener.bind()
    port = listener.port
    assert type(port).__name__ == "LeanPort"
    client = socket.create_connection(("127.0.0.1", port.getHost().port))  # type: ignore[union-attr]
    try:
        called = _functions_called(port.doRead)  # type: ignore[union-attr]
        assert len(factory.made) == 1
        transport = factory.made[0].transport
        assert type(transport) is LeanServer and transport.socket.family == socket.AF_INET
        assert transport.socket.gettimeout() == 0.0  # non-blocking, as Twisted makes it
        peer = transport.getPeer()
        assert (peer.type, peer.host, peer.port) == ("TCP", "127.0.0.1", client.getsockname()[1])
        assert peer == IPv4Address("TCP", "127.0.0.1", client.getsockname()[1])
        assert not [name for name in called if "enum" in name or "validators" in name or "IPv4Address" in name
                    or name.endswith((":_getLogPrefix", ":logstr", ":repstr"))], called
        # Twisted's accept loop (its generator, its log buffer and loggers), the accept, the address, the
        # factory's steps, the transport made and registered, the protocol's connectionMade: 28 calls
        # with this test's factory (42 before, with the enums, the validators and the strings)
        assert len(called) <= 28, called
    finally:
        client.close()
        listener.unbind()
        closed(reactor)
