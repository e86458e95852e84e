"""A minimal RocketMQ broker double for the interop tests: the only fake in them.

It stands in for the broker, never for the NameServer.  It listens on 127.0.0.1 (ephemeral
port), registers itself with OUR NameServer exactly as a broker does (REGISTER_BROKER with a
RegisterBrokerBody and a masked CRC, over a connection it keeps open, because the NameServer
drops a broker whose registration channel closes), so a client's route for TopicTest really
comes from our server.  It then answers what a producer sends a broker:

- SEND_MESSAGE (10, long extFields names) and SEND_MESSAGE_V2 (310, short names a..m): a
  JSON SUCCESS with extFields msgId / queueId / queueOffset (the C++ clients crash on a send
  response without extFields);
- HEART_BEAT (34), UNREGISTER_CLIENT (35) and anything else: SUCCESS with empty extFields;
- oneway requests get no answer, responses are ignored.

Every request is recorded (``requests``) so tests can check what arrived.  Frames are cut,
decoded and encoded only with the project's codec (``twisted_namesrv.remoting``).
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

from twisted.internet import defer, protocol
from twisted.logger import Logger

from tests.support import connect
from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig, encode_register_body
from twisted_namesrv.bodies.route import DataVersion
from twisted_namesrv.remoting import FrameDecoder, RemotingCommand, RemotingDecodeError, RequestCode, ResponseCode
from twisted_namesrv.remoting.codes import V4_9_8, V5_0_0
from twisted_namesrv.remoting.crc import crc32_masked
from twisted_namesrv.state.acl import signed

log = Logger()

HOST = "127.0.0.1"
SEND_CODES = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2)
#: SendMessageRequestHeaderV2's one-letter names, in order, and the SendMessageRequestHeader
#: fields they stand for
V2_FIELDS = dict(zip("abcdefghijklm", (
    "producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag", "bornTimestamp",
    "flag", "properties", "reconsumeTimes", "unitMode", "maxReconsumeTimes", "batch"), strict=True))


def send_fields(code: int, ext: dict[str, str | None]) -> dict[str, str | None]:
    """A send's header in SendMessageRequestHeader's long names, whichever form came."""
    if code == RequestCode.SEND_MESSAGE_V2:
        return {long: ext.get(short) for short, long in V2_FIELDS.items()}
    return dict(ext)


@dataclass
class Received:
    """One request as the double saw it."""

    code: int
    ext: dict[str, str | None]
    body: bytes | None
    version: int
    language: str | None
    oneway: bool
    peer: str

    @property
    def send_fields(self) -> dict[str, str | None]:
        return send_fields(self.code, self.ext)


@dataclass
class StoredMessage:
    topic: str | None
    queue_id: int
    queue_offset: int
    msg_id: str
    body: bytes | None


class BrokerProtocol(protocol.Protocol):
    factory: BrokerDouble

    def connectionMade(self) -> None:
        peer = self.transport.getPeer()
        self.peer = f"{peer.host}:{peer.port}"
        self.decoder = FrameDecoder()
        self.factory.connections.append(self)

    def dataReceived(self, data: bytes) -> None:
        try:
            frames = self.decoder.feed(data)
            for frame in frames:
                self._handle(RemotingCommand.decode(frame))
        except RemotingDecodeError as exc:
            self.factory.errors.append(f"{self.peer}: {exc}")
            self.transport.loseConnection()

    def _handle(self, request: RemotingCommand) -> None:
        if request.is_response:
            return
        double = self.factory
        double.requests.append(Received(request.code, dict(request.ext), request.body, request.version,
                                        request.header.language, request.is_oneway, self.peer))
        response = double.answer(request)
        if not request.is_oneway:
            self.transport.write(response.encode())

    def connectionLost(self, reason: object = protocol.connectionDone) -> None:
        if self in self.factory.connections:
            self.factory.connections.remove(self)


class BrokerDouble(protocol.Factory):
    """``yield double.start(namesrv_port)`` listens and registers; ``yield double.stop()``."""

    protocol = BrokerProtocol

    def __init__(self, reactor, broker_name: str = "broker-a", cluster: str = "DefaultCluster",
                 topics: dict[str, int] | None = None, version: int = V4_9_8, broker_id: int = 0,
                 credentials: tuple[str, str] | None = None) -> None:
        self.reactor = reactor
        self.credentials = credentials  # (accessKey, secretKey): sign registrations for an ACL
        self.broker_id = broker_id
        self.broker_name = broker_name
        self.cluster = cluster
        self.topics = {"TopicTest": 4, "TBW102": 8} if topics is None else topics
        self.version = version
        self.requests: list[Received] = []
        self.messages: list[StoredMessage] = []
        self.errors: list[str] = []
        self.connections: list[BrokerProtocol] = []
        self.registrations: list[RemotingCommand] = []  # our NameServer's answers to REGISTER_BROKER
        self.port = None
        self.listen_port = 0  # kept after stop(), for assertions
        self.namesrv_link = None
        self._queue_offsets: dict[tuple[str | None, int], int] = {}
        self._commit_offset = 0

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def addr(self) -> str:
        return f"{HOST}:{self.listen_port}"

    @defer.inlineCallbacks
    def start(self, namesrv_port: int):
        """Listen, then register with the NameServer on ``namesrv_port``; the registration
        answer (SUCCESS checked by the caller) is returned."""
        self.port = self.reactor.listenTCP(0, self, interface=HOST)
        self.listen_port = self.port.getHost().port
        answer = yield self.register(namesrv_port)
        return answer

    @defer.inlineCallbacks
    def register(self, namesrv_port: int):
        if self.namesrv_link is None:
            self.namesrv_link = yield connect(namesrv_port)
        request = self.register_request(opaque=len(self.registrations) + 1)
        answer = yield self.namesrv_link.call(request)
        self.registrations.append(answer)
        return answer

    def register_request(self, opaque: int) -> RemotingCommand:
        """REGISTER_BROKER as BrokerOuterAPI.registerBroker writes it (uncompressed body)."""
        v5 = self.version >= V5_0_0
        table = {name: TopicConfig(name, queues, queues) for name, queues in self.topics.items()}
        data_version = DataVersion(timestamp=int(self.reactor.seconds() * 1000), counter=1)
        body = encode_register_body(RegisterBrokerBody(data_version, table), compressed=False, v5=v5)
        ext = {"brokerName": self.broker_name, "brokerAddr": self.addr, "clusterName": self.cluster,
               "haServerAddr": f"{HOST}:{self.listen_port + 1}", "brokerId": str(self.broker_id),
               "compressed": "false", "bodyCrc32": str(crc32_masked(body))}
        if v5:
            ext.update({"heartbeatTimeoutMillis": "120000", "enableActingMaster": "false"})
        if self.credentials:
            ext = signed(ext, *self.credentials, body)
        return RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body, opaque=opaque, version=self.version)

    @defer.inlineCallbacks
    def stop(self):
        for connection in list(self.connections):
            connection.transport.abortConnection()
        if self.namesrv_link is not None:
            link, self.namesrv_link = self.namesrv_link, None
            link.transport.loseConnection()
            yield link.closed
        if self.port is not None:
            port, self.port = self.port, None
            yield port.stopListening()

    # -- answers ---------------------------------------------------------------------------
    def answer(self, request: RemotingCommand) -> RemotingCommand:
        if request.code in SEND_CODES:
            return self._store(request)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, ext={}, version=self.version)

    def _store(self, request: RemotingCommand) -> RemotingCommand:
        fields = send_fields(request.code, request.ext)
        topic = fields.get("topic")
        try:
            queue_id = int(fields.get("queueId") or 0)
        except ValueError:
            queue_id = 0
        offset = self._queue_offsets.get((topic, queue_id), 0)
        self._queue_offsets[(topic, queue_id)] = offset + 1
        msg_id = self.offset_msg_id(self._commit_offset)
        self._commit_offset += 100 + len(request.body or b"")
        self.messages.append(StoredMessage(topic, queue_id, offset, msg_id, request.body))
        ext = {"msgId": msg_id, "queueId": str(queue_id), "queueOffset": str(offset)}
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, ext=ext, version=self.version)

    def offset_msg_id(self, commit_offset: int) -> str:
        """MessageDecoder.createMessageId: IPv4, port, commit-log offset as 32 upper-case hex."""
        return (socket.inet_aton(HOST) + struct.pack(">iq", self.listen_port, commit_offset)).hex().upper()

    # -- what tests look at ----------------------------------------------------------------
    def sends(self, topic: str | None = None) -> list[Received]:
        return [r for r in self.requests
                if r.code in SEND_CODES and (topic is None or r.send_fields.get("topic") == topic)]

    def codes(self) -> list[int]:
        return [r.code for r in self.requests]
