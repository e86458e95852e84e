"""RemotingProtocol / RemotingFactory over a StringTransport, with a task.Clock for the idle timer."""

from __future__ import annotations

import functools
import itertools
import struct
import time

import pytest
from twisted.internet import address, task
from twisted.internet.testing import StringTransportWithDisconnection

from tests import built
from tests.support import python_calls_run
from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig, encode_register_body
from twisted_namesrv.bodies.route import DataVersion
from twisted_namesrv.clocks import WallClockReactor, on_monotonic_time
from twisted_namesrv.context import NamesrvState
from twisted_namesrv.dispatch import Dispatcher
from twisted_namesrv.metrics import Metrics
from twisted_namesrv.remoting import (
    RESPONSE_FLAG,
    FrameDecoder,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from twisted_namesrv.remoting.codes import V5_3_3
from twisted_namesrv.remoting.crc import crc32_masked
from twisted_namesrv.remoting.header import Header
from twisted_namesrv.schema import SERVER_SCHEMA
from twisted_namesrv.server import send_now, write_now
from twisted_namesrv.state.config import NamesrvConfig

IDLE = 120
MASTER = "10.0.0.1:10911"
_opaques = itertools.count(1)


class RecordingDispatcher(Dispatcher):
    """Remembers the channels reported closed, with the reason."""

    def __init__(self, state: NamesrvState, metrics: Metrics) -> None:
        super().__init__(state, metrics)
        self.closed: list[tuple[int, str]] = []

    def channel_closed(self, channel, reason: str = "connection closed") -> None:
        self.closed.append((channel, reason))
        super().channel_closed(channel, reason)


class Harness:
    def __init__(self, tmp_path, profile: str = "5.3.3", idle: float = IDLE, max_frame: int = 16 * 1024 * 1024):
        config = NamesrvConfig({"compatVersion": profile, "kvConfigPath": str(tmp_path / "kv.json"),
                                "configStorePath": str(tmp_path / "ns.properties")}, schema=SERVER_SCHEMA)
        self.clock = task.Clock()
        self.clock.advance(1_000)
        self.dispatcher = built.dispatcher(config, self.clock, cls=RecordingDispatcher)
        self.state: NamesrvState = self.dispatcher.state
        self.factory = built.factory(self.dispatcher, self.clock, max_frame, idle)

    @property
    def closed(self) -> list[tuple[int, str]]:
        return self.dispatcher.closed

    def connect(self, port: int = 40000):
        proto = self.factory.buildProtocol(address.IPv4Address("TCP", "127.0.0.1", port))
        transport = StringTransportWithDisconnection(peerAddress=address.IPv4Address("TCP", "127.0.0.1", port))
        transport.protocol = proto
        proto.makeConnection(transport)
        return proto, transport


def request(code: int, ext: dict | None = None, body: bytes | None = None, **kwargs) -> RemotingCommand:
    kwargs.setdefault("version", V5_3_3)
    return RemotingCommand.request(code, ext, body, opaque=next(_opaques), **kwargs)


def register_frame(addr: str = MASTER, name: str = "broker-a", topics=("T1", "T2")) -> RemotingCommand:
    payload = encode_register_body(
        RegisterBrokerBody(DataVersion(1, 1), {t: TopicConfig(t) for t in topics}), False, True)
    ext = {"clusterName": "c1", "brokerAddr": addr, "brokerName": name, "brokerId": "0",
           "bodyCrc32": str(crc32_masked(payload))}
    return request(RequestCode.REGISTER_BROKER, ext, payload)


def answers(transport) -> list[RemotingCommand]:
    frames = FrameDecoder(1 << 31).feed(transport.value())
    transport.clear()
    return [RemotingCommand.decode(f) for f in frames]


def route_request(topic: str = "T1") -> RemotingCommand:
    return request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})


@pytest.fixture
def harness(tmp_path) -> Harness:
    return Harness(tmp_path)


def test_the_listener_writes_no_factory_lines_with_a_python_repr(harness):
    """A start's second line was Twisted's "Starting factory <twisted_namesrv.server.RemotingFactory
    object at 0x7f...>" (and a stop's "Stopping factory <...>"): a repr for the operator to read."""
    from twisted.logger import capturedLogs, formatEvent

    with capturedLogs() as events:
        harness.factory.doStart()
        harness.factory.doStop()
    assert [formatEvent(e) for e in events] == []


# -- framing -------------------------------------------------------------------------------------------

def test_a_request_gets_its_answer(harness):
    proto, transport = harness.connect()
    req = route_request("nope")
    proto.dataReceived(req.encode())
    [answer] = answers(transport)
    assert answer.opaque == req.opaque and answer.is_response
    assert answer.code == ResponseCode.TOPIC_NOT_EXIST
    assert transport.connected


def test_frames_split_across_many_writes(harness):
    proto, transport = harness.connect()
    reqs = [register_frame(), route_request("T1"), route_request("T2")]
    data = b"".join(r.encode() for r in reqs)
    for i in range(len(data)):
        proto.dataReceived(data[i:i + 1])
        if i < len(reqs[0].encode()) - 1:
            assert transport.value() == b""  # nothing until the first frame is whole
    got = answers(transport)
    assert [a.opaque for a in got] == [r.opaque for r in reqs]
    assert [a.code for a in got] == [ResponseCode.SUCCESS] * 3


def test_several_frames_in_one_write_and_a_trailing_partial_frame(harness):
    proto, transport = harness.connect()
    reqs = [register_frame(), route_request("T1"), route_request("nope")]
    tail = route_request("T2").encode()
    proto.dataReceived(b"".join(r.encode() for r in reqs) + tail[:7])
    got = answers(transport)
    assert [(a.opaque, a.code) for a in got] == [(reqs[0].opaque, 0), (reqs[1].opaque, 0), (reqs[2].opaque, 17)]
    proto.dataReceived(tail[7:])
    [last] = answers(transport)
    assert last.code == ResponseCode.SUCCESS


def test_a_connection_with_no_frames_waiting_holds_no_list_of_its_own(harness):
    """``waiting`` is replaced, never changed in place: with nothing waiting it is the one empty
    tuple, not an empty list a connection (6,000 of them at the curve's 5,000-broker step)."""
    broker, broker_transport = harness.connect(40001)
    client, client_transport = harness.connect(40002)
    broker.dataReceived(register_frame().encode())
    client.dataReceived(route_request("T1").encode())
    assert [a.code for a in answers(broker_transport) + answers(client_transport)] == [ResponseCode.SUCCESS] * 2
    assert broker.waiting == () and broker.waiting is client.waiting
    client.pauseProducing()  # the peer does not read its answers: what it sends meanwhile waits
    lookups = [route_request("T1"), route_request("T2")]
    client.dataReceived(b"".join(r.encode() for r in lookups))
    client.dataReceived(route_request("nope").encode())
    assert len(client.waiting) == 3 and answers(client_transport) == []
    client.resumeProducing()
    assert [a.code for a in answers(client_transport)] == [ResponseCode.SUCCESS] * 2 + [ResponseCode.TOPIC_NOT_EXIST]
    assert client.waiting == () and client.waiting is broker.waiting


def test_binary_header_requests(tmp_path):
    for profile, expected in (("4.9.8", SerializeType.ROCKETMQ), ("5.3.3", SerializeType.JSON)):
        harness = Harness(tmp_path / profile, profile)
        proto, transport = harness.connect()
        proto.dataReceived(request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
                                   serialize_type=SerializeType.ROCKETMQ).encode())
        [answer] = answers(transport)
        assert answer.code == ResponseCode.SUCCESS and answer.serialize_type == expected


def test_oneway_request_is_not_answered(harness):
    proto, transport = harness.connect()
    proto.dataReceived(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}, oneway=True).encode())
    assert transport.value() == b"" and transport.connected


def test_a_response_frame_is_ignored(harness):
    proto, transport = harness.connect()
    response = RemotingCommand(Header(code=0, opaque=77, flag=RESPONSE_FLAG))
    proto.dataReceived(response.encode())
    assert transport.value() == b"" and transport.connected
    req = route_request("nope")
    proto.dataReceived(req.encode())
    assert [a.opaque for a in answers(transport)] == [req.opaque]


# -- bad input closes only that connection -------------------------------------------------------------------

def json_frame(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


@pytest.mark.parametrize("data", [
    json_frame(b"this is not json"),
    json_frame(b'["a list"]'),
    struct.pack(">i", 32 * 1024 * 1024),  # the length word alone is enough
    struct.pack(">i", -1),
    struct.pack(">i", -(1 << 31)),
    struct.pack(">ii", 4 + 2, (9 << 24) | 2) + b"{}",  # unknown serialize type
    struct.pack(">ii", 4, 100),  # header longer than the frame
], ids=["non-json", "json-list", "32MiB", "minus-one", "min-int", "type-9", "short-header"])
def test_undecodable_input_closes_the_connection(harness, data):
    proto, transport = harness.connect()
    other, other_transport = harness.connect(40001)
    other.dataReceived(register_frame().encode())
    answers(other_transport)
    proto.dataReceived(data)
    assert not transport.connected
    assert transport.value() == b""
    assert (proto.channel, "connection closed") in harness.closed
    assert other_transport.connected  # the other connection and its broker are untouched
    assert "broker-a" in harness.state.routes.brokerAddrTable


def test_good_frames_before_a_bad_one_are_answered(harness):
    proto, transport = harness.connect()
    good = route_request("nope")
    proto.dataReceived(good.encode() + json_frame(b"garbage{"))
    assert [a.opaque for a in answers(transport)] == [good.opaque]
    assert not transport.connected


def test_frame_limit_is_the_configured_one(tmp_path):
    harness = Harness(tmp_path, max_frame=1024)
    proto, transport = harness.connect()
    proto.dataReceived(route_request("x" * 2000).encode()[:4])
    assert not transport.connected


# -- connection lifecycle ---------------------------------------------------------------------------------

def test_connection_lost_removes_its_brokers_at_once(harness):
    proto, transport = harness.connect()
    keeper, keeper_transport = harness.connect(40001)
    proto.dataReceived(register_frame(MASTER, "broker-a").encode())
    proto.dataReceived(register_frame("10.0.0.9:10911", "broker-b", ("T3", "T4")).encode())
    keeper.dataReceived(register_frame("10.0.1.1:10911", "broker-c", ("T1", "T5")).encode())
    assert [a.code for a in answers(transport)] == [0, 0]
    transport.loseConnection()
    assert harness.closed == [(proto.channel, "connection closed")]
    assert set(harness.state.routes.brokerAddrTable) == {"broker-c"}
    assert sorted(harness.state.routes.topicQueueTable) == ["T1", "T5"]
    assert proto.channel not in harness.factory.connections
    assert keeper.channel in harness.factory.connections


def test_each_connection_gets_its_own_channel_id(harness):
    first, _ = harness.connect()
    second, _ = harness.connect(40001)
    assert first.channel != second.channel
    assert harness.factory.connections == {first.channel: first, second.channel: second}


def test_idle_connection_is_closed_and_its_brokers_removed(harness):
    proto, transport = harness.connect()
    proto.dataReceived(register_frame().encode())
    harness.clock.advance(IDLE - 0.5)
    assert transport.connected
    proto.dataReceived(route_request().encode())  # activity restarts the idle timer
    harness.clock.advance(IDLE - 0.5)
    assert transport.connected and "broker-a" in harness.state.routes.brokerAddrTable
    harness.clock.advance(0.5)
    assert not transport.connected
    assert harness.closed == [(proto.channel, "idle: no request for 120 s")]
    assert harness.state.routes.brokerAddrTable == {} and harness.state.routes.brokerLiveTable == {}
    assert harness.clock.getDelayedCalls() == []


def test_a_frame_trickled_a_byte_at_a_time_does_not_keep_its_connection_from_idling(harness):
    """Java's NameServer puts its IdleStateHandler behind its frame decoder (NettyRemotingServer, 4.9.8
    and 5.3.3), so only whole frames (and its own writes) keep a channel from idling: a peer sending one
    byte of a frame every minute is closed 120 s after its last whole frame.  Here every read stamped
    the idle watch, so such a peer held its connection, a slot of maxConnections, for good (10,000 of
    them, 10 KB a minute, kept every broker out while they lasted)."""
    proto, transport = harness.connect()
    proto.dataReceived(route_request().encode())
    frame = route_request("T2").encode()
    for at in range(len(frame) - 1):  # every byte but the last, one every 50 s
        harness.clock.advance(50.0)
        if not transport.connected:
            break
        proto.dataReceived(frame[at:at + 1])
    assert not transport.connected and at == 2  # closed at 120 s, after two bytes
    assert harness.closed == [(proto.channel, "idle: no request for 120 s")]
    assert harness.factory.refusals.counts["remoting", "idle"] == 1


def test_whole_frames_keep_a_connection_from_idling_however_they_are_cut(harness):
    proto, transport = harness.connect()
    frame = route_request().encode()
    for _ in range(5):
        harness.clock.advance(IDLE - 1)
        proto.dataReceived(frame[:10])  # a frame begun: silent still
        harness.clock.advance(0.5)
        proto.dataReceived(frame[10:])  # and ended: heard
    assert transport.connected
    harness.clock.advance(IDLE)
    assert not transport.connected


def test_idle_timer_is_cancelled_when_the_connection_goes(harness):
    proto, transport = harness.connect()
    assert len(harness.clock.getDelayedCalls()) == 1
    transport.loseConnection()
    assert harness.clock.getDelayedCalls() == []


def test_every_connection_closes_when_idle_on_one_timer(harness):
    """Three connections, each closed exactly when it has been silent for the timeout, whatever
    the others did, with one call pending for all of them (not a timer each: 460 bytes a connection)."""
    quiet, quiet_transport = harness.connect(40001)
    harness.clock.advance(10)
    chatty, chatty_transport = harness.connect(40002)
    harness.clock.advance(10)
    late, late_transport = harness.connect(40003)
    assert len(harness.clock.getDelayedCalls()) == 1
    harness.clock.advance(IDLE - 30)
    chatty.dataReceived(route_request().encode())  # at IDLE - 10: silent from now
    harness.clock.advance(10 - 0.001)
    assert quiet_transport.connected
    harness.clock.advance(0.001)  # IDLE after it connected
    assert (quiet_transport.connected, chatty_transport.connected, late_transport.connected) == (False, True, True)
    harness.clock.advance(20)  # IDLE after the last one connected
    assert (chatty_transport.connected, late_transport.connected) == (True, False)
    harness.clock.advance(IDLE - 30)
    assert not chatty_transport.connected
    assert [reason for _, reason in harness.closed] == ["idle: no request for 120 s"] * 3
    assert harness.clock.getDelayedCalls() == []


def test_a_read_stamps_the_idle_watch_with_the_reactors_own_clock(tmp_path):
    """Every read of every connection stamps its idle watch: in a server (its reactor on the
    monotonic clock, seen by the owners through clocks.WallClockReactor) with ``time.monotonic``
    itself, a C call, no Python call but ``heard``'s (through the owners' steady clock it was two
    a read, a first registration's and a lookup's alike); the timer, on the reactor's clock, is
    due when it was."""
    clock = task.Clock()
    view = on_monotonic_time(clock)
    assert isinstance(view, WallClockReactor)
    factory = built.factory(built.dispatcher(NamesrvConfig({"kvConfigPath": str(tmp_path / "kv.json"),
                                                            "configStorePath": str(tmp_path / "ns.properties")},
                                                           schema=SERVER_SCHEMA), view), view, 1 << 20, IDLE)
    watch = factory.idle_watch
    assert watch.seconds is time.monotonic
    proto = factory.buildProtocol(address.IPv4Address("TCP", "127.0.0.1", 40000))
    watch.heard(proto)  # (connected: the one call is scheduled)
    assert python_calls_run(functools.partial(watch.heard, proto)) == 1  # a read
    (call,) = clock.getDelayedCalls()
    assert IDLE - 1 < call.getTime() - time.monotonic() <= IDLE


def test_idle_timeout_zero_disables_it(tmp_path):
    harness = Harness(tmp_path, idle=0)
    proto, transport = harness.connect()
    assert harness.clock.getDelayedCalls() == []
    harness.clock.advance(10 * IDLE)
    assert transport.connected


def test_close_channel_closes_that_connection(harness):
    proto, transport = harness.connect()
    other, other_transport = harness.connect(40001)
    harness.factory.close_channel(proto.channel)
    harness.factory.close_channel(12345)  # unknown: nothing happens
    assert not transport.connected and other_transport.connected


class _SocketLike:
    """What send_now needs of a socket transport: doWrite and the disconnecting flag."""

    def __init__(self, disconnecting: bool) -> None:
        self.disconnecting = disconnecting
        self.flushed = 0

    def doWrite(self) -> None:
        self.flushed += 1


@pytest.mark.parametrize(("disconnecting", "flushed"), [(False, 1), (True, 0)])
def test_answers_are_sent_at_once_unless_the_socket_is_closing(disconnecting: bool, flushed: int) -> None:
    transport = _SocketLike(disconnecting)
    send_now(transport)
    assert transport.flushed == flushed
    send_now(StringTransportWithDisconnection())  # no doWrite (TLS, tests): the reactor sends


class _Socket:
    """A socket whose ``send`` takes ``takes`` bytes a call, or fails (raises, as a socket does)."""

    def __init__(self, transport: _SocketTransport) -> None:
        self.transport = transport

    def send(self, data: bytes) -> int:
        takes = self.transport.takes
        if isinstance(takes, Exception):
            raise takes
        taken = len(data) if takes is None else min(takes, len(data))
        self.transport.sent.append(bytes(data[:taken]))
        return taken


class _SocketTransport(StringTransportWithDisconnection):
    """What write_now needs of a socket transport (tcp.Connection's names): its class's
    ``writeSomeData`` (the mark of one) and its ``socket``, whose ``send`` takes ``takes`` bytes a
    call, or fails (an OSError)."""

    dataBuffer = b""
    _writeDisconnected = False

    def __init__(self, takes: int | Exception | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.takes = takes
        self.sent: list[bytes] = []
        self.written: list[bytes] = []
        self._tempDataBuffer: list[bytes] = []
        self.socket = _Socket(self)

    def writeSomeData(self, data: bytes) -> int:
        raise AssertionError("write_now sends on the socket itself")

    def write(self, data: bytes) -> None:
        self.written.append(data)
        super().write(data)


def test_an_answer_goes_straight_to_a_socket_with_nothing_queued(harness):
    """A broker's heartbeat answered over a socket transport with nothing buffered is sent by its
    socket's ``send`` alone: not through ``transport.write``, which registers the socket for writing
    and unregisters it once sent (two epoll_ctl calls an answer, on the old code every answer's)."""
    proto = harness.factory.buildProtocol(address.IPv4Address("TCP", "127.0.0.1", 40000))
    transport = _SocketTransport()
    transport.protocol = proto
    proto.makeConnection(transport)
    proto.dataReceived(register_frame().encode())
    assert transport.written == [] and len(transport.sent) == 1
    assert RemotingCommand.decode(transport.sent[0][4:]).code == ResponseCode.SUCCESS


@pytest.mark.parametrize("takes", [10, ConnectionError("gone")])
def test_what_the_socket_does_not_take_goes_through_the_transport(takes) -> None:
    """What the kernel did not take, or all of it after a failed send, is written the usual way
    (the reactor sends the rest, or finds the failure and closes the connection); bytes already
    queued keep their place: the next answer goes behind them."""
    transport = _SocketTransport(takes)
    write_now(transport, b"0123456789abcdef")
    assert b"".join(transport.sent + transport.written) == b"0123456789abcdef" if takes == 10 else (
        transport.written == [b"0123456789abcdef"])
    queued = _SocketTransport()
    queued._tempDataBuffer.append(b"before")
    write_now(queued, b"after")
    assert queued.sent == [] and queued.written == [b"after"]


def test_a_socket_transport_whose_buffers_are_named_otherwise_is_written_the_usual_way() -> None:
    """write_now reads Twisted's FileDescriptor buffers by their private names: a Twisted that
    renamed them raised AttributeError on every answer; now the answer goes through ``write``."""

    class Renamed(_SocketTransport):
        def __getattribute__(self, name: str):  # type: ignore[no-untyped-def]
            if name in ("dataBuffer", "_tempDataBuffer"):
                raise AttributeError(name)
            return super().__getattribute__(name)

    transport = Renamed()
    write_now(transport, b"answer")
    assert transport.sent == [] and transport.written == [b"answer"]


def test_an_answer_over_tls_is_never_written_to_the_socket_under_it() -> None:
    """TLS's wrapper (a ProtocolWrapper) hands attributes it lacks to the socket transport under
    it: write_now must not take that socket transport's socket for the wrapper's (the bytes would go
    out unencrypted), only a transport whose own class has ``writeSomeData``."""
    socket = _SocketTransport()

    class Wrapper:
        def __init__(self) -> None:
            self.transport, self.written = socket, []

        def write(self, data: bytes) -> None:
            self.written.append(data)

        def __getattr__(self, name: str):
            return getattr(self.transport, name)
    tls = Wrapper()
    write_now(tls, b"answer")  # type: ignore[arg-type]
    assert tls.written == [b"answer"] and socket.sent == []


def test_a_registration_over_16_mib_needs_a_raised_frame_limit(tmp_path):
    frame = register_frame(topics=[f"BigRegistrationTopic{i:06d}" for i in range(110_000)]).encode()
    assert len(frame) > 16 << 20
    default, raised = Harness(tmp_path), Harness(tmp_path, max_frame=32 << 20)
    proto, transport = default.connect()
    proto.dataReceived(frame)
    assert not transport.connected and default.state.routes.topicQueueTable == {}
    proto, transport = raised.connect()
    proto.dataReceived(frame)
    assert [a.code for a in answers(transport)] == [ResponseCode.SUCCESS]
    assert len(raised.state.routes.topicQueueTable) == 110_000


def test_a_broker_vanishing_mid_registration_changes_nothing_for_others(harness):
    other, other_transport = harness.connect(40001)
    other.dataReceived(register_frame("10.0.1.1:10911", "broker-b", ("T3", "T4")).encode())
    before = (dict(harness.state.routes.topicQueueTable), dict(harness.state.routes.brokerAddrTable))
    proto, transport = harness.connect()
    frame = register_frame(MASTER, "broker-a", ("T1", "T2")).encode()
    proto.dataReceived(frame[:len(frame) // 2])  # half a registration, then the broker is gone
    transport.loseConnection()
    assert (harness.state.routes.topicQueueTable, harness.state.routes.brokerAddrTable) == before
    other.dataReceived(route_request("T3").encode())
    assert [a.code for a in answers(other_transport)] == [ResponseCode.SUCCESS, ResponseCode.SUCCESS]
