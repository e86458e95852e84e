"""Pushes to brokers (server.py: Notifier): at most one connection per address and PUSHES_IN_FLIGHT in
all, each holding a descriptor of the process's budget, however often a peer makes them go.  A
group's lowest id registered and unregistered in a loop, its 63 members at addresses that never
answer, took every descriptor of 1,024 in 4 s and wrote 11,000 warning lines."""

from __future__ import annotations

from collections import Counter

from twisted.internet.error import ConnectionRefusedError
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure

from twisted_namesrv.budget import FdBudget
from twisted_namesrv.server import PUSH_SECONDS, PUSHES_IN_FLIGHT, Notifier


def connects(reactor: MemoryReactorClock) -> list[tuple[str, int]]:
    return [(host, port) for host, port, *_ in reactor.tcpClients]


def fail(reactor: MemoryReactorClock, index: int) -> None:
    _, _, factory, _, _ = reactor.tcpClients[index]
    factory.clientConnectionFailed(reactor.connectors[index], Failure(ConnectionRefusedError()))
    reactor.advance(0)  # ClientCreator fails its Deferred on the next turn


def test_one_connection_per_address_the_newest_frame_waiting_for_it():
    reactor = MemoryReactorClock()
    pushes = Notifier(reactor, "notify min broker id change")
    for round_ in range(100):
        for member in range(1, 64):
            pushes(f"10.9.0.{member}:10911", f"frame {round_}".encode())
    assert len(reactor.tcpClients) == 63  # before: 6,300 connections at once
    assert pushes.counts["superseded"] == 63 * 98
    fail(reactor, 0)  # the first connection fails: the newest frame waiting for its address goes next
    assert connects(reactor)[-1] == ("10.9.0.1", 10911) and len(reactor.tcpClients) == 64
    _, _, factory, _, _ = reactor.tcpClients[-1]
    proto = factory.buildProtocol(None)
    transport = StringTransport()
    proto.makeConnection(transport)
    assert transport.value() == b"frame 99" and transport.disconnecting
    proto.connectionLost(None)
    assert "10.9.0.1:10911" not in pushes.in_flight and pushes.counts["failed"] == 1


def test_pushes_in_flight_are_capped_and_each_holds_a_descriptor():
    reactor = MemoryReactorClock()
    fds = FdBudget(1024, 64, lambda: 20, reactor.seconds)
    pushes = Notifier(reactor, "notify broker role change", Counter(), fds)
    for number in range(PUSHES_IN_FLIGHT + 50):
        pushes(f"10.9.{number // 250}.{number % 250}:10911", b"frame")
    assert len(reactor.tcpClients) == PUSHES_IN_FLIGHT and pushes.counts["dropped"] == 50
    assert fds.admitted == PUSHES_IN_FLIGHT
    for index in range(10):
        fail(reactor, index)
    assert fds.admitted == PUSHES_IN_FLIGHT - 10


def test_a_push_is_dropped_when_the_descriptor_reserve_is_short():
    reactor = MemoryReactorClock()
    fds = FdBudget(256, 64, lambda: 150, reactor.seconds)  # 107 free as counted, 64 kept: room for 43 more
    pushes = Notifier(reactor, "notify min broker id change", fds=fds)
    for number in range(100):
        pushes(f"10.9.0.{number}:10911", b"frame")
    assert len(reactor.tcpClients) == 43 and pushes.counts["dropped"] == 57


def test_a_peer_that_never_reads_is_cut_off():
    reactor = MemoryReactorClock()
    pushes = Notifier(reactor, "notify min broker id change")
    pushes("10.9.0.1:10911", b"frame")
    _, _, factory, _, _ = reactor.tcpClients[0]
    proto = factory.buildProtocol(None)
    transport = StringTransport()
    proto.makeConnection(transport)
    reactor.advance(PUSH_SECONDS)
    assert transport.disconnected  # aborted: its write never drained
