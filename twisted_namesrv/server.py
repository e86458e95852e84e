"""The remoting protocol: frames in, dispatch, frames out; one channel id per connection."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from time import perf_counter

from twisted.internet import interfaces, protocol
from twisted.logger import Logger
from twisted.protocols.policies import TimeoutMixin
from zope.interface import implementer

from .metrics import OTHER_CODE, Metrics
from .processor import HANDLERS, NamesrvState, Peer, answer
from .remoting import FrameDecoder, RemotingCommand, RemotingDecodeError
from .remoting.frame import check_header_length
from .replies import fast_reply, remember_reply

log = Logger()


class LimitLog:
    """Each peer host's first hit of each limit is a warning; later ones are debug events (and
    counted in the metrics), so a peer looping on bad frames or connections cannot flood the log."""

    CAPACITY = 10_000  # (host, reason) pairs remembered; forgotten all at once when full

    def __init__(self) -> None:
        self._seen: set[tuple[str, str]] = set()

    def __call__(self, host: str, reason: str, message: str, **fields: object) -> None:
        key = (host, reason)
        if key in self._seen:
            log.debug(message, limit=reason, **fields)
            return
        if len(self._seen) >= self.CAPACITY:
            self._seen.clear()
        self._seen.add(key)
        log.warn(message + " (further hits of this limit from {host} are counted, not logged)", limit=reason,
                 host=host, **fields)


def send_now(transport: interfaces.ITransport) -> None:
    """Send what was just written now rather than on the reactor's next turn.

    Twisted sends a write once epoll reports the socket writable, one loop iteration later;
    doing it here saves that iteration on every answer (at one connection in flight: p50 85 ->
    77 us, p99 135 -> 105 us).  Only for a socket transport that is not closing: a closing one
    must finish through the reactor, which acts on what its doWrite returns."""
    do_write = getattr(transport, "doWrite", None)
    if do_write is not None and not transport.disconnecting:  # type: ignore[attr-defined]
        do_write()


@implementer(interfaces.IPushProducer)
class RemotingProtocol(protocol.Protocol, TimeoutMixin):
    """One client or broker connection.  A frame that cannot be decoded closes only this
    connection (as Java's NettyDecoder does); a failing request costs one error answer.

    It is its transport's producer: when a peer does not read its answers and the write buffer
    fills, the server stops reading that peer's requests until it does, so a slow peer costs a
    bounded buffer, never the others' service; one that stays stuck is closed as idle."""

    factory: RemotingFactory
    #: why the connection went, for the brokers registered over it (RouteInfoManager.on_channel_destroy)
    close_reason = "connection closed"
    #: answer repeated route lookups from memory (replies.fast_reply); off only to compare
    fast_replies = True

    def connectionMade(self) -> None:
        factory = self.factory
        if interfaces.ITCPTransport.providedBy(self.transport):
            self.transport.setTcpNoDelay(True)  # as Java does: answers must not wait for delayed ACKs
        self.channel = next(factory.channel_ids)
        peer = self.transport.getPeer()
        self.host = str(getattr(peer, "host", "?"))
        self.peer = Peer(self.channel, f"{self.host}:{getattr(peer, 'port', '?')}")
        self.decoder = FrameDecoder(factory.max_frame_length)
        factory.connections[self.channel] = self
        factory.metrics.connections_accepted += 1
        self.callLater = factory.clock.callLater  # TimeoutMixin honours this: a fake clock in tests
        self.setTimeout(factory.idle_timeout or None)
        self.transport.registerProducer(self, True)

    def pauseProducing(self) -> None:
        """The write buffer is full: stop reading this peer until it reads its answers."""
        self.factory.limit_log(self.host, "write_buffer", "{peer} does not read its answers: not reading it "
                               "until it does", peer=self.peer.address)
        self.transport.pauseProducing()

    def resumeProducing(self) -> None:
        self.transport.resumeProducing()

    def stopProducing(self) -> None:
        """The connection is going away; connectionLost cleans up."""

    def dataReceived(self, data: bytes) -> None:
        # request metrics only when someone can read them (--metrics-port): the clock reads and
        # counting cost ~4 % of route lookups/s
        metrics = self.factory.metrics if self.factory.count_requests else None
        started = perf_counter() if metrics else 0.0
        self.resetTimeout()
        try:
            frames = self.decoder.feed(data)
        except RemotingDecodeError as exc:
            self._reject(exc.reason, str(exc))
            return
        replies = []
        state = self.factory.state
        max_header = self.factory.max_header_length
        from_memory = 0
        decoded_seconds = 0.0
        for frame in frames:
            reply = fast_reply(state, frame) if self.fast_replies else None
            if reply is not None:
                replies.append(reply)
                from_memory += 1
                continue
            begun = perf_counter() if metrics else 0.0
            try:
                if max_header is not None:
                    check_header_length(frame, max_header)
                request = RemotingCommand.decode(frame)
            except RemotingDecodeError as exc:
                self._reject(exc.reason, str(exc))
                break
            if request.is_response:
                continue  # answers to our own oneway notifications; nothing waits for them
            answered = answer(state, request, self.peer)
            if answered is not None:
                response, encoded = answered
                replies.append(encoded)
                remember_reply(state, frame, request, response, encoded)
            if metrics:
                seconds = perf_counter() - begun
                decoded_seconds += seconds
                code = request.code if request.code in HANDLERS else OTHER_CODE
                metrics.answered(code, None if answered is None else answered[0].code, seconds)
        if metrics:
            metrics.bytes_received += len(data)
            metrics.bytes_sent += sum(map(len, replies))
            if from_memory:  # they share what the batch took beyond the decoded requests
                metrics.answered_from_memory((perf_counter() - started - decoded_seconds) / from_memory, from_memory)
        if replies:
            self.transport.writeSequence(replies)
            send_now(self.transport)

    def _reject(self, reason: str, detail: str) -> None:
        """A frame that cannot be a command: counted by ``reason``, logged, the channel closed."""
        self.factory.metrics.reject(reason)
        self.factory.limit_log(self.host, reason, "decode exception from {peer}, closing the channel: {detail}",
                               peer=self.peer.address, detail=detail, rejected=reason)
        self.transport.loseConnection()
        self.decoder = FrameDecoder(self.factory.max_frame_length)  # drop what is buffered

    def timeoutConnection(self) -> None:
        self.close_reason = f"idle: no request for {self.factory.idle_timeout} s"
        self.factory.metrics.reject("idle")
        self.factory.limit_log(self.host, "idle", "channel {peer} idle for {seconds} s, closing it",
                               peer=self.peer.address, seconds=self.factory.idle_timeout)
        self.transport.abortConnection()

    def connectionLost(self, reason: object = protocol.connectionDone) -> None:
        self.setTimeout(None)
        self.factory.connections.pop(self.channel, None)
        self.factory.on_channel_closed(self.channel, self.close_reason)


class RemotingFactory(protocol.Factory):
    protocol = RemotingProtocol

    def __init__(self, state: NamesrvState, clock: interfaces.IReactorTime, max_frame_length: int,
                 idle_timeout: float, on_channel_closed: Callable[[int, str], None], max_connections: int = 0,
                 metrics: Metrics | None = None, max_header_length: int | None = None) -> None:
        self.state = state
        self.max_connections = max_connections  # 0: no limit
        self.clock = clock
        self.max_frame_length = max_frame_length
        self.max_header_length = max_header_length
        self.idle_timeout = idle_timeout
        self.on_channel_closed = on_channel_closed
        self.connections: dict[int, RemotingProtocol] = {}
        self.metrics = metrics or Metrics(clock=clock.seconds)
        #: count and time every request (metrics are served); rejections and events are always counted
        self.count_requests = False
        self.limit_log = LimitLog()
        self.channel_ids = itertools.count(1)

    def buildProtocol(self, addr) -> RemotingProtocol | None:
        """None (the connection is closed at once) when maxConnections are open."""
        if self.max_connections and len(self.connections) >= self.max_connections:
            self.metrics.reject("max_connections")
            host = str(getattr(addr, "host", addr))
            self.limit_log(host, "max_connections", "refusing a connection from {peer}: maxConnections ({maximum}) "
                           "are open", peer=host, maximum=self.max_connections)
            return None
        return super().buildProtocol(addr)

    def close_channel(self, channel: int) -> None:
        connection = self.connections.get(channel)
        if connection is not None:
            connection.transport.loseConnection()
