"""The HTTP side's connections on a fake clock (web/connections.py): an idle connection closed after
httpIdleTimeoutSeconds (a refusal when it never sent a whole request, none after a served keep-alive),
a slowloris that trickles its headers closed httpRequestTimeoutSeconds after its first byte however
often it sends, and at httpMaxConnections a new connection takes the place of the one idle longest
(refused when every one is answering). Twisted's defaults were no cap and a 12 h idle timeout."""

from __future__ import annotations

import http.client
import itertools
import socket

import pytest
import pytest_twisted
from twisted.internet import address, task, threads
from twisted.internet.testing import StringTransportWithDisconnection
from twisted.web import resource

from twisted_namesrv.budget import MemoryBudget
from twisted_namesrv.refusals import Refusals
from twisted_namesrv.web.connections import BODY_MAX, PIPELINED_MAX, BoundedChannel, BoundedSite

GET = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"


class Page(resource.Resource):
    isLeaf = True

    def render_GET(self, request) -> bytes:
        return b"page"


class Harness:
    def __init__(self, max_connections: int = 3, idle: float = 30, request: float = 10) -> None:
        self.clock = task.Clock()
        self.refusals = Refusals()
        self.site = BoundedSite(Page(), self.refusals, max_connections, idle, request, reactor=self.clock)
        self.ports = itertools.count(40000)

    def connect(self):
        """A connection as the port makes it; None when the site refuses it."""
        peer = address.IPv4Address("TCP", "10.0.0.9", next(self.ports))
        channel = self.site.buildProtocol(peer)
        if channel is None:
            return None
        transport = StringTransportWithDisconnection(peerAddress=peer)
        transport.protocol = channel
        transport.abortConnection = lambda: self.closed(channel, transport)  # the reactor would call connectionLost
        channel.makeConnection(transport)
        return channel, transport

    @staticmethod
    def closed(channel, transport) -> None:
        transport.aborted = True
        if transport.connected:
            transport.loseConnection()

    def counts(self) -> dict[str, int]:
        return {reason: count for (listener, reason), count in self.refusals.counts.items() if listener == "http"}


def test_an_idle_connection_is_closed_and_refused_only_if_it_never_asked():
    h = Harness()
    (_, silent), (served_channel, served) = h.connect(), h.connect()
    served_channel.dataReceived(GET)
    assert b"page" in served.value()
    h.clock.advance(29.9)
    assert silent.connected and served.connected
    h.clock.advance(0.2)
    assert not silent.connected and not served.connected
    assert h.counts() == {"idle": 1}  # the keep-alive that served its request closed without a refusal
    assert h.site.channels == set()


def test_a_slowloris_is_closed_at_the_request_timeout_however_often_it_sends():
    h = Harness()
    channel, transport = h.connect()
    for byte in GET[:-4]:  # one byte a second: each resets the idle timer, never the request's deadline
        channel.dataReceived(bytes([byte]))
        h.clock.advance(1)
        if not transport.connected:
            break
    assert not transport.connected and h.clock.seconds() == 10
    assert h.counts() == {"request_timeout": 1}
    again, served = h.connect()
    again.dataReceived(GET[:10])
    h.clock.advance(9)
    again.dataReceived(GET[10:])  # whole within its 10 s: served, and the deadline gone
    h.clock.advance(5)
    assert served.connected and b"page" in served.value() and h.counts() == {"request_timeout": 1}
    again.dataReceived(GET)  # the next request on the keep-alive has a deadline of its own
    h.clock.advance(9.9)
    assert served.connected


def test_at_the_cap_a_new_connection_takes_the_place_of_the_one_idle_longest():
    h = Harness(max_connections=3)
    first = h.connect()
    h.clock.advance(1)
    second, third = h.connect(), h.connect()
    h.clock.advance(1)
    first[0].dataReceived(GET)  # first and third sent since: second is the one idle longest
    h.clock.advance(1)
    third[0].dataReceived(b"G")
    fourth = h.connect()
    assert fourth is not None and first[1].connected and not second[1].connected and third[1].connected
    assert len(h.site.channels) == 3 and h.counts() == {"max_connections": 1}


def test_at_the_cap_with_every_connection_answering_a_new_one_is_refused():
    h = Harness(max_connections=2)
    for channel, _ in (h.connect(), h.connect()):
        channel.busy = True  # answering a request (a resource that has not finished)
    assert h.connect() is None
    assert h.counts() == {"max_connections": 1} and len(h.site.channels) == 2


def test_no_limits_when_the_keys_are_0():
    h = Harness(max_connections=0, idle=0, request=0)
    connections = [h.connect() for _ in range(50)]
    connections[0][0].dataReceived(GET[:5])
    h.clock.advance(86_400)
    assert all(transport.connected for _, transport in connections) and h.counts() == {}


@pytest.mark.parametrize(("headers", "status"), [
    (b"Content-Length: 1000000000000\r\n", b"413"), (f"Content-Length: {BODY_MAX + 1}\r\n".encode(), b"413"),
    (b"Transfer-Encoding: chunked\r\n", b"411")])
def test_a_request_body_over_the_limit_is_refused_before_it_is_read(headers, status):
    """Twisted spooled any body of 100 kB or more (or chunked) to a temporary file, on any path and
    before the Host or account was looked at: four connections wrote 3.2 GB to /tmp in 9 s."""
    h = Harness()
    channel, transport = h.connect()
    channel.dataReceived(b"POST /healthz HTTP/1.1\r\nHost: localhost\r\n" + headers + b"\r\n")
    channel.dataReceived(b"x" * 200_000)
    assert transport.value().startswith(b"HTTP/1.1 " + status) and b"page" not in transport.value()
    assert not transport.connected and h.counts() == {"request_body": 1}
    assert all(request.content is None for request in channel.requests)  # nothing spooled to a file


def test_a_small_body_is_read_and_the_request_served():
    h = Harness()
    channel, transport = h.connect()
    channel.dataReceived(b"GET / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n\r\nhello" + GET)
    assert transport.value().count(b"page") == 2 and h.counts() == {}


class Counted(resource.Resource):
    """A 20 KB page (as /metrics is for a small cluster) that counts its renders."""

    isLeaf = True
    renders = 0

    def render_GET(self, request) -> bytes:
        Counted.renders += 1
        return b"m" * 20_000


@pytest_twisted.ensureDeferred
async def test_requests_pipelined_by_a_peer_that_does_not_read_wait_for_it():
    """Pipelined GET lines were all read and answered at once, into memory, while every other peer
    waited (100,000 renders of a 20 KB page; in the attack run health probes timed out and simulated
    brokers were dropped). Now those behind an answer the peer does not read wait until it reads, the
    peer is not read meanwhile, and the rest of the server is answered."""
    from twisted.internet import reactor

    Counted.renders = 0
    site = BoundedSite(Counted(), Refusals(), 128, 30, 10)
    port = reactor.listenTCP(0, site, interface="127.0.0.1")
    pipelined = socket.socket()
    pipelined.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        pipelined.connect(("127.0.0.1", port.getHost().port))
        pipelined.setblocking(False)
        one = b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n"
        sent = 0
        for _ in range(200):  # as much as the socket takes, the reactor running between
            try:
                sent += pipelined.send(one * 500)
            except BlockingIOError:
                pass
            await task.deferLater(reactor, 0.01, lambda: None)
        assert sent > 64 * 1024  # more than one read of requests
        started = reactor.seconds()
        status = await threads.deferToThread(http_status, port.getHost().port)
        assert status == 200 and reactor.seconds() - started < 2
        # answered: what the socket buffers took (the kernel's, a few MB on loopback, and Twisted's 64 KiB), not
        # every request read (before: all 100,000)
        assert Counted.renders < 500, Counted.renders
        held = max(len(channel._buffer) for channel in site.channels)  # the requests held: not all it sent
        assert held <= PIPELINED_MAX + 65536, held
        pipelined.setblocking(True)
        pipelined.settimeout(5)
        assert await threads.deferToThread(read_answers, pipelined, 150)  # reading, the peer gets the rest
        assert Counted.renders >= 150
    finally:
        pipelined.close()
        await port.stopListening()


def http_status(port: int) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", "/metrics")
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def read_answers(connection: socket.socket, count: int) -> bool:
    received = b""
    while received.count(b"HTTP/1.1 200") < count:
        received += connection.recv(1 << 20)
    return True


class Big(resource.Resource):
    isLeaf = True

    def render_GET(self, request) -> bytes:
        return b"m" * (1 << 20)


def unsent(channel) -> int:
    transport = channel.transport
    return len(transport.dataBuffer) - transport.offset + transport._tempDataLen


@pytest_twisted.ensureDeferred
async def test_answers_a_peer_does_not_read_count_against_the_memory_budget(monkeypatch):
    """Each connection held one whole answer it did not read, uncounted: 20 connections asking
    /metrics of 5,000 broker groups (17.6 MB) held 370 MB, httpMaxConnections (128) of them 2.2 GB.
    Now what is written past Twisted's buffer counts against the memory budget with the remoting
    peers', the connections holding the most are closed past it (memory_budget), and what they
    held is let go at once, not after every peer ready in the same turn was answered."""
    from twisted.internet import reactor

    budget, refusals = MemoryBudget(4 << 20), Refusals()
    site = BoundedSite(Big(), refusals, 128, 30, 10, budget=budget)
    dropped: list[int] = []
    over_budget = BoundedChannel.over_budget

    def recorded(channel, held, spent):
        over_budget(channel, held, spent)
        dropped.append(unsent(channel))
    monkeypatch.setattr(BoundedChannel, "over_budget", recorded)
    port = reactor.listenTCP(0, site, interface="127.0.0.1")
    peers = []
    try:
        for _ in range(10):
            peer = socket.socket()
            peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            peer.connect(("127.0.0.1", port.getHost().port))
            peer.sendall(b"GET /big HTTP/1.1\r\nHost: localhost\r\n\r\n")
            peers.append(peer)
        for _ in range(100):
            await task.deferLater(reactor, 0.02, lambda: None)
            if refusals.counts["http", "memory_budget"] >= 6 and len(site.channels) <= 4:
                break
        assert refusals.counts["http", "memory_budget"] >= 6 and dropped and set(dropped) == {0}
        assert budget.held <= budget.limit and len(site.channels) <= 4
        assert sum(map(unsent, site.channels)) <= budget.limit + 4 * 65536 * 4
        assert await threads.deferToThread(http_status, port.getHost().port) == 200  # a reading peer is served
    finally:
        for peer in peers:
            peer.close()
        await port.stopListening()
    for _ in range(50):
        await task.deferLater(reactor, 0.02, lambda: None)
        if not site.channels:
            break
    assert budget.held == 0 and budget.holders == {}


@pytest.mark.parametrize("request_bytes", [
    b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX: " + b"a" * 1_000_000 + b"\r\n\r\n",  # a header of 1 MB
    b"GET /api/topics?" + b"&".join(b"k%d=v" % i for i in range(100_000)) + b" HTTP/1.1\r\n\r\n",  # 100k keys
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",  # HTTP/2's preface (no h2 here)
    b"GET /api/kv\r\n\r\n",  # HTTP/0.9
    b"GET /\x1b[31m HTTP/1.1\r\nHost: localhost\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 600 + b"\r\n",  # more header lines than Twisted takes
])
def test_a_request_twisted_cannot_parse_is_a_refusal(request_bytes):
    """Twisted answers a request it cannot parse 400 and closes: a line of 16 KiB or more (a header
    of 1 MB, a query of 100k keys), too many headers, a request line it cannot read, two lengths.
    Before, that close was silent: no line, no count, so a scanner or a smuggling attempt left no
    trace while every other refusal of the HTTP side is one."""
    h = Harness()
    channel, transport = h.connect()
    channel.dataReceived(request_bytes)
    assert transport.value().startswith(b"HTTP/1.1 400") and not transport.connected
    assert h.counts() == {"bad_request": 1}


def test_a_head_request_writes_no_log_line(monkeypatch):
    """Twisted logged an info line for every HEAD request a resource answered with a body (all of
    ours: they render GET's), the request line inside it: 10,000 ``HEAD /healthz?a…`` of 8 KB from
    one unauthenticated client wrote 76 MB of log in 39 s.  HEAD gets GET's headers, no body, no line."""
    events = []
    from twisted.logger import globalLogPublisher

    globalLogPublisher.addObserver(events.append)
    try:
        h = Harness()
        channel, transport = h.connect()
        channel.dataReceived(b"HEAD /?" + b"a" * 8000 + b" HTTP/1.1\r\nHost: localhost\r\n\r\n")
        channel.dataReceived(GET)
    finally:
        globalLogPublisher.removeObserver(events.append)
    head, get = transport.value().split(b"HTTP/1.1 200")[1:]
    assert b"Content-Length: 4\r\n" in head and head.endswith(b"\r\n\r\n") and get.endswith(b"page")
    assert [event for event in events if "HEAD" in event.get("log_format", "")] == []
    assert h.counts() == {}
