"""A remoting client on Twisted: the project's codec (``FrameDecoder``, ``RemotingCommand``) over a
Twisted protocol, for the server's own requests to other NameServers (the peers view: peers.py).

One connection per NameServer, opened on first use; requests are matched to their answers by
opaque, each with a deadline on the reactor's clock; a frame no request waits for (a NameServer
sends none) ends the connection.  TLS, when asked for, is Twisted's (``TLSMemoryBIOFactory`` around the
same factory, the peer's certificate checked); with ``credentials`` every request is signed as
mqadmin's ACL hook signs it (state/acl.py: ``signed``), as the admin client does.  Failures are the
admin client's errors (``TransportError``, ``ResponseError``), so one comparison code reads both.
No thread: the reactor does the waiting.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from twisted.internet import defer, interfaces, protocol
from twisted.python.failure import Failure

from .admin.client import TransportError, parse_address
from .remoting import FrameDecoder, RemotingCommand, RemotingDecodeError
from .remoting.codes import V4_9_8, code_name
from .state.acl import signed

_OPAQUES = itertools.count(1)
#: the longest header a NameServer's answer may have (the server's own ``headerMaxLength`` default:
#: an answer's header is its code, remark and a few fields); a longer one is no NameServer's
HEADER_MAX = 65536
#: what wraps the connection's factory for TLS (tls.py: connect_with); None: plain TCP
TlsWrap = Callable[[str, protocol.ClientFactory], protocol.ClientFactory]


class ClientProtocol(protocol.Protocol):
    """Frames out, answers back by opaque; a connection that ends fails every request still waiting."""

    def __init__(self, addr: str) -> None:
        self.addr = addr
        self._decoder = FrameDecoder(max_header_length=HEADER_MAX)
        self._waiting: dict[int, defer.Deferred[RemotingCommand]] = {}
        self.lost: Failure | None = None

    def request(self, command: RemotingCommand) -> defer.Deferred[RemotingCommand]:
        if self.lost is not None:
            return defer.fail(self.lost)
        def cancel(_: defer.Deferred[RemotingCommand]) -> None:
            self._waiting.pop(command.opaque, None)

        answer: defer.Deferred[RemotingCommand] = defer.Deferred(cancel)
        self._waiting[command.opaque] = answer
        assert self.transport is not None
        self.transport.write(command.encode())
        return answer

    def dataReceived(self, data: bytes) -> None:
        """Each frame decoded in turn and handed to the request it answers.  A frame no request
        waits for (a request, or an answer to an opaque not asked or given up on, whose connection
        was closed) is no NameServer's: the connection ends there, nothing after it decoded.
        Skipped, a peer of ``namesrvAddr`` that lied (or another program on its port) could send
        them without end, each decoded on the reactor's thread: 4 MB headers in a loop took half
        of a lookup client's answers while the view waited for its own (3 s, every comparison)."""
        if self.lost is not None:  # refused: whatever was read with it is not looked at
            return
        for frame in self._decoder_frames(data):
            try:
                command = RemotingCommand.decode(frame)
            except RemotingDecodeError as exc:
                self._refuse(f"undecodable answer: {exc}")
                return
            waiting = self._waiting.pop(command.opaque, None) if command.is_response else None
            if waiting is None:
                kind = f"an answer to opaque {command.opaque}, which no request waits for" if command.is_response \
                    else f"a request (code {command.code})"
                self._refuse(f"sent {kind}")
                return
            waiting.callback(command)

    def _decoder_frames(self, data: bytes) -> list[bytes]:
        try:
            return self._decoder.feed(data)
        except RemotingDecodeError as exc:
            self._refuse(f"undecodable answer: {exc}")
            return []

    def _refuse(self, why: str) -> None:
        self._fail(TransportError(f"{self.addr}: {why} (is that a RocketMQ NameServer's port?)"))
        assert self.transport is not None
        self.transport.loseConnection()

    def connectionLost(self, reason: Failure = protocol.connectionDone) -> None:
        self._fail(TransportError(f"{self.addr} closed the connection: {reason.getErrorMessage()}"))

    def _fail(self, error: TransportError) -> None:
        self.lost = Failure(error)
        waiting, self._waiting = self._waiting, {}
        for answer in waiting.values():
            answer.errback(Failure(error))


class _Connecting(protocol.ClientFactory):
    #: no "Starting factory"/"Stopping factory" info line per connection: the peers view connects to each
    #: peer at every comparison, which wrote two such lines per peer every peersCompareInterval (572 of
    #: a quiet server's 596 lines in 25 minutes, comparing with a Java NameServer every 5 s)
    noisy = False

    def __init__(self, addr: str, connected: defer.Deferred[ClientProtocol]) -> None:
        self.addr = addr
        self.connected = connected

    def buildProtocol(self, addr: Any) -> ClientProtocol:
        made = ClientProtocol(self.addr)
        made.factory = self
        original = made.connectionMade

        def ready() -> None:
            original()
            if not self.connected.called:
                self.connected.callback(made)
        made.connectionMade = ready  # type: ignore[method-assign]
        return made

    def clientConnectionFailed(self, connector: Any, reason: Failure) -> None:
        if not self.connected.called:
            self.connected.errback(Failure(TransportError(f"connect to {self.addr} failed: "
                                                          f"{reason.getErrorMessage()}")))


class RemotingClient:
    """One NameServer, connected on first use and kept open for the following requests."""

    def __init__(self, addr: str, reactor: Any, timeout: float, tls: TlsWrap | None = None,
                 credentials: tuple[str, str] | None = None) -> None:
        self.addr = addr
        self.host, self.port = parse_address(addr)
        self.reactor = reactor
        self.timeout = timeout
        self.tls = tls
        self.credentials = credentials
        self._protocol: ClientProtocol | None = None
        self._connector: interfaces.IConnector | None = None

    def call(self, code: int, ext: dict[str, str] | None = None, body: bytes | None = None,
             version: int = V4_9_8) -> defer.Deferred[RemotingCommand]:
        """One request, answered whatever its code; TransportError when no answer comes in time."""
        if self.credentials:
            ext = signed({k: v for k, v in (ext or {}).items() if v is not None}, *self.credentials, body)
        command = RemotingCommand.request(code, ext, body, opaque=next(_OPAQUES), version=version, language="JAVA")
        answer = self._connected().addCallback(lambda connection: connection.request(command))

        def late(failure: Failure) -> Failure:
            if failure.check(defer.TimeoutError):
                self.close()
                return Failure(TransportError(f"{self.addr}: no answer to {code_name(code)} within "
                                              f"{self.timeout:g} s"))
            return failure
        return answer.addTimeout(self.timeout, self.reactor).addErrback(late)

    def _connected(self) -> defer.Deferred[ClientProtocol]:
        if self._protocol is not None and self._protocol.lost is None:
            return defer.succeed(self._protocol)
        connected: defer.Deferred[ClientProtocol] = defer.Deferred(lambda d: self.close())
        factory: protocol.ClientFactory = _Connecting(self.addr, connected)
        if self.tls is not None:
            factory = self.tls(self.host, factory)
        self._connector = self.reactor.connectTCP(self.host, self.port, factory, timeout=self.timeout)

        def keep(made: ClientProtocol) -> ClientProtocol:
            self._protocol = made
            return made
        return connected.addCallback(keep)

    def close(self) -> None:
        if self._connector is not None:
            connector, self._connector, self._protocol = self._connector, None, None
            connector.disconnect()
