"""The HTTP side's connections, bounded apart from the remoting port's: at most
``httpMaxConnections`` at once, an idle one closed after ``httpIdleTimeoutSeconds``, and a request
whose line, headers and body have not all arrived ``httpRequestTimeoutSeconds`` after its first byte
closed too (a slowloris that trickles headers resets no idle timer here).

Twisted's own default is one idle timeout of 12 hours and no cap: 300 idle connections under
``ulimit -n 256`` took every descriptor, so remoting accepts, KV writes (EMFILE) and /healthz failed.
With the cap reached, or the process's descriptor reserve short (budget.py: FdBudget, applied by the
port: server.py's Admission), a new connection takes the place of the one idle longest
(``make_room``): browsers and Prometheus reconnect without a word, and the kubelet's probe gets in
past idle peers; with none idle it is refused. Every close for these limits is a refusal, logged and
counted on the ``http`` listener: ``max_connections``, ``idle`` (a connection closed before it sent
one whole request), ``request_timeout``, ``bad_request`` (one Twisted cannot parse, answered 400); a
keep-alive connection that served its requests and went quiet is closed without one (that is how
HTTP connections end). Requests pipelined behind one whose answer the peer does not read wait until
it does (``pauseProducing``), so one connection holds at most its transport's buffer, one answer and
64 KiB of requests read ahead (PIPELINED_MAX), and costs no more than that in CPU. What it holds
beyond Twisted's own write buffer -- an answer the peer does not read -- counts against the server's
memory budget (budget.py, ``receiveMemoryBudget``) with the remoting peers': over it, the peers
holding the most are closed first (``memory_budget``).
Before, 20 connections each asking ``/metrics`` of 5,000 broker groups (17.6 MB) and reading
nothing held 370 MB, and ``httpMaxConnections`` (128) of them would have held 2.2 GB.
"""

from __future__ import annotations

from typing import Any

from twisted.internet import interfaces
from twisted.protocols import basic
from twisted.python import failure
from twisted.web import http, resource, server

from ..budget import FdBudget, MemoryBudget
from ..refusals import Refusals, peer_text

#: bytes of requests read but not yet answered past which a connection is not read (pipelining)
PIPELINED_MAX = 64 * 1024
#: the largest request body taken (every path is a GET that reads none; Twisted keeps a body of 100 kB
#: or more, or a chunked one, in a temporary file, without limit)
BODY_MAX = 16 * 1024


class BoundedChannel(http.HTTPChannel):
    """One HTTP connection under its site's limits."""

    site: BoundedSite
    #: whether a whole request arrived on this connection (then an idle close is no refusal)
    served = False
    #: a request is being answered: never the one closed to make room
    busy = False
    #: the clock's time of the last bytes received
    last_active = 0.0
    _request_deadline: interfaces.IDelayedCall | None = None
    #: the transport's write buffer is full (it paused this producer), and the bytes of answers written
    #: since it last was not, held against the memory budget (Twisted's own 64 KiB are not counted)
    writing_paused = False
    unsent = 0
    #: closed for the memory budget: nothing more is held
    dropped = False

    def connectionMade(self) -> None:
        super().connectionMade()
        self.last_active = self.site.reactor.seconds()
        self.site.channels.add(self)

    def dataReceived(self, data: bytes) -> None:
        self.last_active = self.site.reactor.seconds()
        if self._request_deadline is None and not self.busy and self.site.request_timeout:
            self._request_deadline = self.callLater(self.site.request_timeout, self._request_too_slow)
        super().dataReceived(data)

    def allHeadersReceived(self) -> None:
        """A request announcing a body over BODY_MAX, or a chunked one (of no announced length), is
        refused before a byte of it is read: Twisted would spool it to a temporary file, any method,
        any path, before the Host or the account is looked at (four connections wrote 3.2 GB to /tmp
        in 9 s, until the request timeout cut them)."""
        if self.length is None or self.length > BODY_MAX:
            status = b"411 Length Required" if self.length is None else b"413 Content Too Large"
            self.site.refuse("request_body", self, "a request body {size} (at most {most} bytes are taken), closing "
                             "the connection", size="of no announced length (chunked)" if self.length is None
                             else f"of {self.length} bytes", most=BODY_MAX)
            self.transport.write(b"HTTP/1.1 " + status + b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            self._cancel_deadline()
            self.dataReceived = self.rawDataReceived = self.lineReceived = _ignored  # type: ignore[method-assign]
            self.setRawMode()
            self.loseConnection()
            return
        super().allHeadersReceived()

    def lineLengthExceeded(self, line: bytes) -> None:
        """A request line or header line of 16 KiB or more (Twisted's MAX_LENGTH: a header of 1 MB, a
        query of 100k keys): Twisted closed the connection without a word."""
        self._respondToBadRequestAndDisconnect()

    def _respondToBadRequestAndDisconnect(self) -> None:
        """A request Twisted cannot parse (its line, a header, too many headers, two lengths, a length
        and a chunked body) is answered 400 and closed by Twisted, and is a refusal here
        (``bad_request``); nothing more of the connection is read."""
        self.site.refuse("bad_request", self, "a request that does not parse as HTTP/1.1 (a line of {most} bytes "
                         "or more, more than {lines} header lines, a bad request line or header), answered 400, "
                         "closing the connection", most=self.MAX_LENGTH, lines=self.maxHeaders)
        self._cancel_deadline()
        self.dataReceived = self.rawDataReceived = self.lineReceived = _ignored  # type: ignore[method-assign]
        super()._respondToBadRequestAndDisconnect()

    def allContentReceived(self) -> None:
        self._cancel_deadline()
        self.served = self.busy = True
        super().allContentReceived()

    def requestDone(self, request: http.Request) -> None:
        self.busy = False
        super().requestDone(request)

    def write(self, data: bytes) -> None:
        super().write(data)
        self._written(len(data))

    def writeSequence(self, iovec: list[bytes]) -> None:  # type: ignore[override]
        super().writeSequence(iovec)
        self._written(sum(map(len, iovec)))

    def _written(self, size: int) -> None:
        """An answer's bytes went to the transport: while its buffer is full, they are held for the
        peer, against the memory budget (over it, the peers holding the most go: maybe this one)."""
        if self.writing_paused and not self.dropped and self.site.budget is not None:
            self.unsent += size
            self.site.budget.hold(self, self.unsent)

    def over_budget(self, held: int, budget: MemoryBudget) -> None:
        """The memory budget is spent and this peer holds the most: it goes."""
        self.unsent, self.dropped = 0, True
        self.site.refuse("memory_budget", self, "closing the connection: it holds the most ({held} bytes of answers "
                         "it does not read) and peers hold {total} bytes, over receiveMemoryBudget ({budget_bytes})",
                         held=held, total=budget.held + held, budget_bytes=budget.limit)
        self.transport.abortConnection()
        _drop_unsent(self.transport)

    def _release(self) -> None:
        if self.unsent and self.site.budget is not None:
            self.unsent = 0
            self.site.budget.hold(self, 0)

    def pauseProducing(self) -> None:
        """The transport's buffer is full: the peer does not read its answers.  Twisted stops reading
        it, but goes on answering the requests it already read, pipelined behind this one, at once
        and into memory: 64 KiB of ``GET /metrics`` lines were 1,500 answers rendered in one turn of
        the reactor while every other peer waited.  ``paused`` stops LineReceiver taking them out of
        what was read until the peer reads again, and the peer is not read either (Twisted goes on
        reading it when the answer that filled the buffer was written while being answered)."""
        super().pauseProducing()
        self.writing_paused = self.paused = True
        self._networkProducer.pauseProducing()

    def resumeProducing(self) -> None:
        """The peer read its answers: answer what waited; while more than PIPELINED_MAX of it is still
        unanswered, read no more of the peer (Twisted would, 64 KiB a time, without end)."""
        super().resumeProducing()
        self.writing_paused = self.paused = False
        self._release()
        basic.LineReceiver.dataReceived(self, b"")  # the requests that waited, if any
        if len(self._buffer) > PIPELINED_MAX and self.connected:
            self._networkProducer.pauseProducing()
    def _request_too_slow(self) -> None:
        self._request_deadline = None
        self.site.refuse("request_timeout", self, "a request not received whole {seconds} s after its first byte "
                         "(httpRequestTimeoutSeconds), closing the connection", seconds=self.site.request_timeout)
        self.transport.abortConnection()

    def timeoutConnection(self) -> None:
        """Idle for httpIdleTimeoutSeconds: a refusal when it never sent a whole request."""
        if not self.served:
            self.site.refuse("idle", self, "no request for {seconds} s (httpIdleTimeoutSeconds), closing the "
                             "connection", seconds=self.timeOut)
            self.transport.abortConnection()
            return
        if self.abortTimeout is not None:
            self._abortingCall = self.callLater(self.abortTimeout, self.transport.abortConnection)
        self.loseConnection()

    def _cancel_deadline(self) -> None:
        if self._request_deadline is not None:
            if self._request_deadline.active():
                self._request_deadline.cancel()
            self._request_deadline = None

    def connectionLost(self, reason: Any) -> None:
        self._cancel_deadline()
        self.dropped = True
        self._release()
        self.site.channels.discard(self)
        if self.site.fds is not None:
            self.site.fds.release()
        super().connectionLost(reason)


class HeadRequest(server.Request):
    """A request whose HEAD is answered with GET's headers (Content-Length included) and no body,
    without a log line: Twisted logs one at info for every HEAD a resource answers with a body (all of
    ours render GET's), the request line in it, and any peer may send them to the public paths (10,000
    ``HEAD /healthz?a…`` of 8 KB from one client wrote 76 MB of log in 39 s)."""

    def render(self, resrc: resource.IResource) -> None:
        super().render(_Headless(resrc) if self.method == b"HEAD" else resrc)

    def _handleStar(self) -> None:
        """``OPTIONS *`` (any method with the target ``*``) goes through the site's root, the Gate
        (web/auth.py), as every request does: Twisted answered it 200 (405 for other methods) before
        any resource, so under ACL it needed no account, and neither the Host check nor Cache-Control
        applied; the Gate answers it once its checks pass (auth.ServerWide)."""
        try:
            self.render(self.site.getResourceFor(self))
        except BaseException:
            self.processingFailed(failure.Failure())


class _Headless(resource.Resource):
    """``inner`` rendered for a HEAD: its body's length said, the body left out (Twisted writes none)."""

    def __init__(self, inner: Any) -> None:  # an IResource (whose zope methods take no self, to mypy)
        super().__init__()
        self.inner = inner

    def render(self, request: server.Request) -> Any:
        body = self.inner.render(request)
        if isinstance(body, bytes) and body:
            request.setHeader(b"Content-Length", b"%d" % len(body))
            return b""
        return body


class BoundedSite(server.Site):
    """A Site whose connections are BoundedChannels, counted and capped."""

    protocol = BoundedChannel
    requestFactory = HeadRequest

    def __init__(self, root: resource.Resource, refusals: Refusals, max_connections: int = 0,
                 idle_timeout: float = 0, request_timeout: float = 0, reactor: Any = None,
                 fds: FdBudget | None = None, budget: MemoryBudget | None = None) -> None:
        super().__init__(root, timeout=idle_timeout or None, reactor=reactor)
        #: the server's memory budget (budget.py), which answers the peers do not read count against
        self.budget = budget
        self.refusals = refusals
        #: the descriptors the port admits connections against (server.py: Admission), told of each close
        self.fds = fds
        self.max_connections = max_connections  # 0: no limit
        self.request_timeout = request_timeout  # 0: none
        self.channels: set[BoundedChannel] = set()

    def buildProtocol(self, addr: Any) -> Any:
        if self.max_connections and len(self.channels) >= self.max_connections and not self.make_room():
            self.refusals("http", "max_connections", peer_text(addr), "httpMaxConnections ({maximum}) are open, none "
                          "idle: closing the connection", maximum=self.max_connections)
            if self.fds is not None:
                self.fds.release()  # its port admitted the socket; it closes now
            return None
        return super().buildProtocol(addr)

    def make_room(self) -> bool:
        """Close the connection idle longest (none answering a request) for a new one; False when
        every connection is answering one."""
        idle = [channel for channel in self.channels if not channel.busy]
        if not idle:
            return False
        oldest = min(idle, key=lambda channel: channel.last_active)
        self.refuse("max_connections", oldest, "closing the connection idle longest ({seconds:.0f} s) to make room "
                    "for a new one (httpMaxConnections {maximum}, or the descriptor reserve)",
                    seconds=self.reactor.seconds() - oldest.last_active, maximum=self.max_connections)
        self.channels.discard(oldest)
        oldest.transport.abortConnection()
        return True

    def refuse(self, reason: str, channel: BoundedChannel, message: str, **fields: object) -> None:
        self.refusals("http", reason, peer_text(channel.transport.getPeer()), message, **fields)


def _drop_unsent(transport: Any) -> None:
    """Let go of what an aborted transport still buffers, now: Twisted keeps it until the connection's
    close is handled, after every other peer ready in the same turn of the reactor was served (100
    connections asking ``/metrics`` at once held every answer, 1 GB, though the budget closed them)."""
    if hasattr(transport, "_tempDataBuffer") and hasattr(transport, "dataBuffer"):  # abstract.FileDescriptor's
        transport._tempDataBuffer, transport._tempDataLen = [], 0
        transport.dataBuffer, transport.offset = b"", 0


def _ignored(data: bytes) -> None:
    """What a connection being closed for its request's body does with what it still receives."""
