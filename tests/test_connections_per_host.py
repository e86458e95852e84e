"""maxConnectionsPerHost: one host holding every place of maxConnections kept every other peer out,
brokers included (checked live: 50 connections each sending a lookup every 3 s). Java's NameServer
has no limit, and clients behind SNAT share an address, so the limit is off by default; set, a
host's connection past it is closed at once, logged and counted, and other hosts come in."""

from __future__ import annotations

from twisted.internet import address, task
from twisted.internet.error import ConnectionDone
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from tests.support import server_config
from twisted_namesrv.service import NamesrvService


class Socket(StringTransport):
    def setTcpNoDelay(self, enabled: bool) -> None:
        """What the remoting protocol sets on a TCP transport."""


def _service(tmp_path, **config) -> NamesrvService:
    return NamesrvService.from_config(server_config(tmp_path, **config), reactor=task.Clock())


def _connect(factory, host: str, port: int, family: str = "IPv4"):
    addr = (address.IPv4Address if family == "IPv4" else address.IPv6Address)("TCP", host, port)
    proto = factory.buildProtocol(addr)
    if proto is not None:
        proto.makeConnection(Socket(peerAddress=addr))
    return proto


def test_a_host_past_its_connections_is_refused_and_others_come_in(tmp_path) -> None:
    service = _service(tmp_path, maxConnections=10, maxConnectionsPerHost=3)
    factory = service.factory
    held = [_connect(factory, "10.0.0.9", port) for port in range(3)]
    assert all(proto is not None for proto in held)
    assert _connect(factory, "10.0.0.9", 99) is None
    assert service.state.refusals.counts["remoting", "max_connections_per_host"] == 1
    assert service.metrics.rejected["max_connections_per_host"] == 1
    assert _connect(factory, "10.0.0.7", 1) is not None  # another host is let in
    # one IPv6 host holds its /64: an address of it is the same host
    v6 = [_connect(factory, f"2001:db8:1:2::{n:x}", 1, "IPv6") for n in range(1, 5)]
    assert [proto is not None for proto in v6] == [True, True, True, False]
    held[0].connectionLost(Failure(ConnectionDone()))  # a place of its host came free
    assert _connect(factory, "10.0.0.9", 100) is not None
    assert _connect(factory, "10.0.0.9", 101) is None
    assert service.state.refusals.counts["remoting", "max_connections_per_host"] == 3


def test_off_by_default_as_in_java(tmp_path) -> None:
    """Clients behind SNAT (a Kubernetes Service, a NAT gateway) arrive from a few addresses."""
    service = _service(tmp_path, maxConnections=0)
    assert service.config["maxConnectionsPerHost"] == 0
    assert all(_connect(service.factory, "10.0.0.9", port) is not None for port in range(200))
    assert not service.factory.per_host  # nothing counted when off
