"""HousekeepingService: the periodic scanNotActiveBroker on a task.Clock, and channel events."""

from __future__ import annotations

import itertools

import pytest
from twisted.internet import address, task
from twisted.internet.testing import StringTransportWithDisconnection

from tests import built
from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig, encode_register_body
from twisted_namesrv.bodies.route import DataVersion
from twisted_namesrv.housekeeping import HousekeepingService
from twisted_namesrv.remoting import RemotingCommand, RequestCode, ResponseCode
from twisted_namesrv.remoting.codes import V5_3_3
from twisted_namesrv.schema import SERVER_SCHEMA
from twisted_namesrv.service import NamesrvService
from twisted_namesrv.state.config import NamesrvConfig

START = 1_000.0
MASTER, OTHER = "10.0.0.1:10911", "10.0.1.1:10911"
_opaques = itertools.count(1)


def config(tmp_path, profile: str = "5.3.3", **values) -> NamesrvConfig:
    base = {"compatVersion": profile, "kvConfigPath": str(tmp_path / "kv.json"),
            "configStorePath": str(tmp_path / "ns.properties")}
    base.update(values)
    return NamesrvConfig(base, schema=SERVER_SCHEMA)


class World:
    """State, server factory and housekeeping on one fake clock, wired as NamesrvService wires them;
    the idle timeout is off so that only the scan removes brokers."""

    def __init__(self, tmp_path, profile: str = "5.3.3", interval: float = 5.0, idle: float = 0) -> None:
        self.clock = task.Clock()
        self.clock.advance(START)
        self.dispatcher = built.dispatcher(config(tmp_path, profile), self.clock)
        self.state = self.dispatcher.state
        self.routes = self.state.routes
        self.factory = built.factory(self.dispatcher, self.clock, 16 << 20, idle)
        self.housekeeping = HousekeepingService(self.routes, self.factory, self.clock, interval)
        self.housekeeping.startService()

    def connect(self, port: int = 40000):
        peer = address.IPv4Address("TCP", "127.0.0.1", port)
        proto = self.factory.buildProtocol(peer)
        transport = StringTransportWithDisconnection(peerAddress=peer)
        transport.protocol = proto
        proto.makeConnection(transport)
        return proto, transport

    def until(self, seconds_since_start: float) -> None:
        """Advance second by second, so every timer due on the way fires in order."""
        while self.clock.seconds() < START + seconds_since_start:
            self.clock.advance(min(1.0, START + seconds_since_start - self.clock.seconds()))


def register_request(addr: str = MASTER, name: str = "broker-a", version=(1, 1), extra=None) -> RemotingCommand:
    """broker-a's REGISTER_BROKER with topics T1 and T2."""
    payload = encode_register_body(
        RegisterBrokerBody(DataVersion(*version), {t: TopicConfig(t) for t in ("T1", "T2")}), False, True)
    ext = {"clusterName": "c1", "brokerAddr": addr, "brokerName": name, "brokerId": "0", **(extra or {})}
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, payload, opaque=next(_opaques), version=V5_3_3)


def register(proto, transport, addr: str = MASTER, name: str = "broker-a", version=(1, 1), extra=None) -> None:
    proto.dataReceived(register_request(addr, name, version, extra).encode())
    assert b'"code":0' in transport.value()
    transport.clear()


@pytest.mark.parametrize("profile,interval", [("4.9.8", 10.0), ("5.3.3", 5.0)])
def test_silent_broker_expires_after_120_s_and_its_channel_is_closed(tmp_path, profile, interval):
    world = World(tmp_path, profile, interval)
    proto, transport = world.connect()
    register(proto, transport)
    world.until(120)  # a scan runs exactly at +120 s: not yet past the timeout
    assert "broker-a" in world.routes.brokerAddrTable and transport.connected
    world.until(120 + interval)
    assert world.routes.brokerAddrTable == {} and world.routes.topicQueueTable == {}
    assert world.routes.brokerLiveTable == {} and world.routes.clusterAddrTable == {}
    assert not transport.connected
    assert proto.channel not in world.factory.connections


def test_a_broker_that_keeps_registering_never_expires(tmp_path):
    world = World(tmp_path)
    proto, transport = world.connect()
    register(proto, transport)
    for t in range(30, 601, 30):
        world.until(t)
        register(proto, transport)
    world.until(700)
    assert "broker-a" in world.routes.brokerAddrTable and transport.connected
    world.until(721 + 5)
    assert "broker-a" not in world.routes.brokerAddrTable and not transport.connected


def test_other_traffic_is_no_heartbeat(tmp_path):
    world = World(tmp_path)
    proto, transport = world.connect()
    register(proto, transport)
    for t in range(20, 121, 20):
        world.until(t)
        proto.dataReceived(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"},
                                                   opaque=next(_opaques)).encode())
    world.until(125)
    assert world.routes.brokerAddrTable == {} and not transport.connected


def test_only_the_expired_broker_goes(tmp_path):
    world = World(tmp_path)
    silent, silent_transport = world.connect()
    chatty, chatty_transport = world.connect(40001)
    register(silent, silent_transport, MASTER, "broker-a")
    register(chatty, chatty_transport, OTHER, "broker-b")
    for t in (60, 120):
        world.until(t)
        heartbeat = RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, {"clusterName": "c1", "brokerAddr": OTHER,
                                            "brokerName": "broker-b"}, opaque=next(_opaques), oneway=True)
        chatty.dataReceived(heartbeat.encode())
    world.until(125)
    assert set(world.routes.brokerAddrTable) == {"broker-b"}
    assert not silent_transport.connected and chatty_transport.connected


def test_5_3_3_heartbeat_timeout_millis_is_used_by_the_scan(tmp_path):
    world = World(tmp_path, "5.3.3", 5.0)
    proto, transport = world.connect()
    register(proto, transport, extra={"heartbeatTimeoutMillis": "10000"})
    world.until(10)
    assert "broker-a" in world.routes.brokerAddrTable
    world.until(15)
    assert world.routes.brokerAddrTable == {} and not transport.connected


def test_idle_connection_close_removes_the_broker_before_the_scan(tmp_path):
    world = World(tmp_path, idle=30)
    proto, transport = world.connect()
    register(proto, transport)
    world.until(30)
    assert not transport.connected and world.routes.brokerAddrTable == {}


def test_channel_closed_removes_the_brokers_of_that_channel(tmp_path):
    world = World(tmp_path)
    proto, transport = world.connect()
    register(proto, transport)
    world.dispatcher.channel_closed(proto.channel + 100)
    assert "broker-a" in world.routes.brokerAddrTable
    transport.loseConnection()
    assert world.routes.brokerAddrTable == {}


def test_stop_service_stops_the_scan(tmp_path):
    world = World(tmp_path)
    assert len(world.clock.getDelayedCalls()) == 1
    world.housekeeping.stopService()
    assert world.clock.getDelayedCalls() == []
    world.housekeeping.stopService()  # twice is harmless
    proto, transport = world.connect()
    register(proto, transport)
    world.until(500)
    assert "broker-a" in world.routes.brokerAddrTable  # no scan any more


@pytest.mark.parametrize("profile,values,interval", [
    ("4.9.8", {}, 10.0), ("5.3.3", {}, 5.0), ("5.3.3", {"scanNotActiveBrokerInterval": 2000}, 2.0),
    ("4.9.8", {"scanNotActiveBrokerInterval": 2000}, 10.0)])
def test_service_scan_interval(tmp_path, profile, values, interval):
    clock = task.Clock()
    service = NamesrvService.from_config(config(tmp_path, profile, **values), reactor=clock)
    assert service.housekeeping.interval == interval
    assert service.factory.idle_timeout == 120
    service.housekeeping.startService()
    assert [c.getTime() for c in clock.getDelayedCalls()] == [interval]
    service.housekeeping.stopService()


def test_expiry_is_answered_as_unknown_afterwards(tmp_path):
    world = World(tmp_path)
    proto, transport = world.connect()
    register(proto, transport)
    client, client_transport = world.connect(40001)
    world.until(125)
    client.dataReceived(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"},
                                                opaque=99).encode())
    answer = RemotingCommand.decode(client_transport.value()[4:])
    assert answer.code == ResponseCode.TOPIC_NOT_EXIST
