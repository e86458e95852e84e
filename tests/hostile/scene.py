"""The stage of the hostile-input tests: a real in-process NameServer on an ephemeral
127.0.0.1 port with one broker registered over its own connection, a well-behaved client that
keeps checking its answers, raw connections for the hostile bytes, and a record of every error
the server logged.

"State did not change" is checked by comparing, before and after, the answers that show the
whole state: cluster info (106), the routes of the broker's topics (105), the topic list (206),
the KV namespace (219) and the configuration (319).
"""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass, field

from twisted.internet import defer, protocol, reactor
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.logger import globalLogPublisher

from tests.support import TIMEOUT, RemotingClient, connect, server_config, start_server
from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig, encode_register_body
from twisted_namesrv.bodies.route import DataVersion
from twisted_namesrv.remoting import FrameDecoder, RemotingCommand, RequestCode, ResponseCode, SerializeType
from twisted_namesrv.remoting.codes import V5_3_3
from twisted_namesrv.remoting.crc import crc32_masked
from twisted_namesrv.remoting.frame import encode_frame

CLUSTER = "c1"
BROKER = "broker-a"
BROKER_ADDR = "127.0.0.1:10911"
TOPICS = ("T1", "T2")
NAMESPACE = "NS"
CLOSE_TIMEOUT = 5  # seconds the server has to close a connection that sent garbage

_opaques = itertools.count(1000)


def next_opaque() -> int:
    return next(_opaques)


def request(code: int, ext: dict | None = None, body: bytes | None = None, **kwargs) -> RemotingCommand:
    kwargs.setdefault("version", V5_3_3)
    kwargs.setdefault("opaque", next_opaque())
    return RemotingCommand.request(code, ext, body, **kwargs)


def register_body(topics=TOPICS, compressed: bool = False) -> bytes:
    return encode_register_body(RegisterBrokerBody(DataVersion(1, 1), {t: TopicConfig(t) for t in topics}),
                                compressed, True)


def register_ext(body: bytes | None, name: str = BROKER, addr: str = BROKER_ADDR, broker_id: str = "0",
                 compressed: bool = False, **extra: str) -> dict[str, str]:
    ext = {"clusterName": CLUSTER, "brokerAddr": addr, "brokerName": name, "brokerId": broker_id,
           "haServerAddr": addr.rsplit(":", 1)[0] + ":10912", "compressed": "true" if compressed else "false",
           "bodyCrc32": str(crc32_masked(body))}
    ext.update(extra)
    return ext


def register_request(body: bytes | None = None, **kwargs) -> RemotingCommand:
    body = register_body() if body is None else body
    return request(RequestCode.REGISTER_BROKER, register_ext(body, **kwargs), body)


def json_frame(header: bytes, body: bytes | None = None) -> bytes:
    """A whole frame (length prefix included) around a JSON header given as raw bytes."""
    return encode_frame(SerializeType.JSON, header, body)


def patch(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


class RawClient(protocol.Protocol):
    """A connection that writes whatever it is given and keeps everything the server sends."""

    def __init__(self) -> None:
        self.data = b""
        self.closed: defer.Deferred = defer.Deferred()
        self.is_closed = False

    def connectionMade(self) -> None:
        self.transport.setTcpNoDelay(True)

    def dataReceived(self, data: bytes) -> None:
        self.data += data

    def connectionLost(self, reason: object = None) -> None:
        self.is_closed = True
        self.closed.callback(None)

    def answers(self) -> list[RemotingCommand]:
        return [RemotingCommand.decode(f) for f in FrameDecoder(1 << 31).feed(self.data)]

    async def settled(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Wait until the server closed this connection or sent at least one whole answer."""
        deadline = reactor.seconds() + timeout
        while not self.is_closed and not self.answers():
            assert reactor.seconds() < deadline, "the server neither answered nor closed the connection"
            await sleep(0.005)


def raw_connect(port: int) -> defer.Deferred:
    return connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", port), RawClient())


def sleep(seconds: float) -> defer.Deferred:
    d: defer.Deferred = defer.Deferred()
    reactor.callLater(seconds, d.callback, None)
    return d


@dataclass
class Snapshot:
    """The answers that together show the server's whole state."""

    answers: dict[str, tuple[int, str | None, bytes | None]] = field(default_factory=dict)


class Scene:
    """Server, registered broker, good client; ``await Scene.start(tmp_path)``, then ``stop()``."""

    def __init__(self) -> None:
        self.service = None
        self.port = 0
        self.broker: RemotingClient | None = None
        self.good: RemotingClient | None = None
        self.clients: list[protocol.Protocol] = []
        #: Twisted log events carrying a failure: exceptions that escaped the protocol
        self.unhandled: list[dict] = []
        self.expected: Snapshot | None = None

    @classmethod
    async def start(cls, tmp_path, **config) -> Scene:
        scene = cls()
        globalLogPublisher.addObserver(scene._observe)
        scene.service, scene.port = await start_server(server_config(tmp_path, **config))
        scene.broker = await scene.connect()
        answer = await scene.broker.call(register_request())
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        scene.good = await scene.connect()
        put = request(RequestCode.PUT_KV_CONFIG, {"namespace": NAMESPACE, "key": "k", "value": "v"})
        assert (await scene.good.call(put)).code == ResponseCode.SUCCESS
        scene.expected = await scene.snapshot()
        assert scene.expected.answers["route T1"][0] == ResponseCode.SUCCESS
        return scene

    def _observe(self, event: dict) -> None:
        if event.get("log_failure") is not None or event.get("isError"):
            self.unhandled.append(event)

    def unhandled_text(self) -> str:
        out = []
        for event in self.unhandled:
            failure = event.get("log_failure") or event.get("failure")
            out.append(failure.getTraceback() if failure is not None else repr(event))
        return "\n".join(out)

    async def connect(self) -> RemotingClient:
        client = await connect(self.port)
        self.clients.append(client)
        return client

    async def raw(self) -> RawClient:
        client = await raw_connect(self.port)
        self.clients.append(client)
        return client

    async def snapshot(self, client: RemotingClient | None = None) -> Snapshot:
        client = client or self.good
        asks = {
            "cluster info": request(RequestCode.GET_BROKER_CLUSTER_INFO),
            "topic list": request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER),
            "kv list": request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": NAMESPACE}),
            "config": request(RequestCode.GET_NAMESRV_CONFIG),
        }
        for topic in TOPICS:
            asks[f"route {topic}"] = request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        snapshot = Snapshot()
        for name, ask in asks.items():
            answer = await client.call(ask)
            snapshot.answers[name] = (answer.code, answer.remark, answer.body)
        return snapshot

    async def assert_unchanged(self) -> None:
        """The state is what it was after setup, the good client (and a brand-new one) still
        get correct answers, the broker's connection is still open, and nothing escaped."""
        assert self.good is not None and self.broker is not None and self.expected is not None
        now = await self.snapshot()
        for name, expected in self.expected.answers.items():
            assert now.answers[name] == expected, f"{name} changed: {now.answers[name]!r} != {expected!r}"
        fresh = await self.connect()
        assert (await self.snapshot(fresh)).answers == self.expected.answers
        assert not self.broker.closed.called, "the registered broker's connection was closed"
        self.assert_no_unhandled()

    def assert_no_unhandled(self) -> None:
        assert not self.unhandled, f"exceptions escaped the server's protocol:\n{self.unhandled_text()}"

    async def send_expect_close(self, data: bytes | list[bytes]) -> RawClient:
        """Send bytes (or several writes) on a new connection; the server must close it."""
        client = await self.raw()
        for chunk in [data] if isinstance(data, bytes) else data:
            client.transport.write(chunk)
        await client.closed.addTimeout(CLOSE_TIMEOUT, reactor)
        return client

    async def send_expect_answer(self, command: RemotingCommand | bytes, opaque: int | None = None
                                 ) -> RemotingCommand:
        """Send a request on a new connection and return its answer; the connection must stay
        usable (a second request on it is answered)."""
        client = await self.connect()
        if isinstance(command, RemotingCommand):
            opaque = command.opaque
            command = command.encode()
        client.send(command)
        answer = await client.answer(opaque)
        ping = request(RequestCode.GET_KV_CONFIG, {"namespace": NAMESPACE, "key": "k"})
        assert (await client.call(ping)).code == ResponseCode.SUCCESS
        return answer

    async def stop(self) -> None:
        globalLogPublisher.removeObserver(self._observe)
        for client in self.clients:
            if client.transport is not None and not client.transport.disconnected:
                client.transport.loseConnection()
        waits = [c.closed for c in self.clients if not c.closed.called]
        if waits:
            await defer.DeferredList(waits).addTimeout(TIMEOUT, reactor)
        if self.service is not None:
            await self.service.stopService()
