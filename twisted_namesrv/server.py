"""The remoting protocol: bytes in, frames to the dispatcher, its answers out in one write per
read; one channel id per connection.

It owns what is about the connection: framing, the frame, header and connection limits, idle
timeouts, back-pressure, and holding (counted against the memory budget) the frames that arrive
while one is answered in steps and the answers the peer has not read.
What a frame means is the dispatcher's (dispatch.py): a factory serves one dispatcher, so a
second listener (the controller's: controller/service.py) is a second factory of this same
protocol, with a Dispatcher of its own, bound by the same ``Listener``.  ``Notifier`` is the
other direction: a oneway push to a broker on a connection of its own (both listeners have one)."""

from __future__ import annotations

import errno
import itertools
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from twisted.application import service
from twisted.internet import defer, interfaces, protocol, task
from twisted.internet.error import CannotListenError
from twisted.internet.posixbase import PosixReactorBase
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from . import CannotStart
from .budget import FdBudget, MemoryBudget, count_open_fds, open_file_limit
from .clocks import underlying
from .context import Peer
from .dispatch import Dispatcher, Later
from .lean_transport import LeanPort
from .metrics import Metrics
from .port_holders import held_by
from .reactor import serve_after_clients
from .refusals import LimitLog, Refusals, peer_host, peer_text
from .remoting import FrameDecoder, RemotingDecodeError
from .remoting.foreign import foreign_protocol
from .state.hosts import peer_group

log = Logger()


def send_now(transport: interfaces.ITransport) -> None:
    """Send what was just written now rather than on the reactor's next turn.

    Twisted sends a write once epoll reports the socket writable, one loop iteration later;
    doing it here saves that iteration on every answer (docs/benchmarks.md has the
    one-connection latency figures).  Only for a socket transport that is not closing: a closing one
    must finish through the reactor, which acts on what its doWrite returns."""
    do_write = getattr(transport, "doWrite", None)
    if do_write is not None and not transport.disconnecting:  # type: ignore[attr-defined]
        do_write()


def write_now(transport: interfaces.ITransport, data: bytes) -> None:
    """Write ``data`` and send it now: straight to the socket when nothing is queued before it.

    Through ``transport.write``, every answer registers the socket for writing and unregisters it
    once sent (two epoll_ctl calls and the reactor's bookkeeping, an answer each: a tenth of what a
    broker's heartbeat costs); a socket transport with nothing buffered takes the bytes at once, in
    one ``send`` on its socket (what Twisted's ``writeSomeData`` does, without its two calls and the
    view it cuts of the bytes: every lookup's answer passes here), and only what the kernel did not
    take, or a send that failed, goes the usual way (the reactor then finds the failure and closes
    the connection).  Anything else (TLS, tests, a closing socket, bytes already waiting) goes
    through ``transport.write`` and ``send_now``.  The socket transport's own class must have
    ``writeSomeData``: TLS's wrapper hands unknown attributes to the socket under it, where these
    bytes would go unencrypted."""
    if _nothing_queued(transport):
        try:
            sent = transport.socket.send(data)  # type: ignore[attr-defined]
        except OSError:  # would block, or failed: the usual way finds out which
            sent = 0
        if sent == len(data):
            return
        data = data[sent:]
    transport.write(data)
    send_now(transport)


def _nothing_queued(transport: object) -> bool:
    """Whether a socket transport (Twisted's FileDescriptor whose class sends: ``writeSomeData``)
    is open with no bytes waiting to be sent. Its buffers are Twisted's own attributes, not an
    interface: a Twisted that names them otherwise answers False, and every answer goes through
    ``transport.write`` as before."""
    if not hasattr(type(transport), "writeSomeData"):
        return False
    try:
        return bool(transport.connected and not transport.disconnecting
                    and not transport._writeDisconnected  # type: ignore[attr-defined]
                    and not transport.dataBuffer and not transport._tempDataBuffer)  # type: ignore[attr-defined]
    except AttributeError:
        return False


#: the answers worked out for a peer before they are written: past it, the frames after them wait
#: until the peer has read them (a 64 KiB read of lookups must not become gigabytes of answers)
ANSWER_ROOM = 1 << 20
#: a frame this small waiting for its answer (dispatch.py: a registration past its turn's share,
#: an answer waiting for the controller log) leaves its peer read while nothing else of it is held:
#: thousands of brokers re-registering at once cost no pause and resume each (two epoll_ctl calls
#: and the reactor's bookkeeping, a tenth of a heartbeat's CPU); what the peer sends meanwhile
#: waits behind it, counted, and stops the reading
WAITING_READ = 64 * 1024


@implementer(interfaces.IPushProducer)
class RemotingProtocol(protocol.Protocol):
    """One client or broker connection.  A frame that cannot be decoded closes only this
    connection (as Java's NettyDecoder does); a failing request costs one error answer.

    Every byte held for the peer counts against the memory budget (budget.py), and while it
    holds more than the frame it is sending it is not read: frames that came behind an answer in
    progress (one worked out in steps, or waiting for the controller log) wait whole, and so
    do the frames behind answers it has not read (the protocol is its transport's producer:
    Twisted pauses it when the write buffer fills), so a slow or hostile peer costs a bounded
    buffer, never the others' service; one that stays stuck is closed as idle."""

    factory: RemotingFactory
    #: why the connection went, for the brokers registered over it (RouteInfoManager.on_channel_destroy)
    close_reason = "connection closed"
    #: the answer being worked out in steps (dispatch.py), and the bytes of its frame
    answering: defer.Deferred[bytes | None] | None = None
    answering_size = 0
    #: the bytes held against the memory budget (budget.py): the unfinished frame, the frame being
    #: answered, the frames waiting, the answers the peer has not read
    held = 0
    #: the transport's write buffer is full (it paused this producer), and the bytes written since
    #: it last held no more than Twisted's own allowance (``bufferSize``, 64 KiB: not counted)
    writing_paused = False
    unsent = 0
    #: reading is paused (the transport's pauseProducing) while the peer has anything held
    reading_paused = False
    #: closed for the memory budget: nothing more is held or answered
    dropped = False

    def __init__(self) -> None:
        # What every connection sets as it serves is set here, in one order: every connection's
        # attributes then share one key table, sized for them all when the connection is made.
        # Set as they went, the connections opened before the first had set them all (brokers
        # reconnecting at once after a restart) each took a dict of its own, 464 bytes; with
        # these set here a connection is 185 bytes whatever the order (tracemalloc, 1,000
        # brokers; 243 with every attribute in slots).  The rest stay the class's defaults
        # above until a connection changes them.
        #: frames received and not answered yet: behind ``answering``, or behind answers not yet read;
        #: replaced, never changed in place, so a connection with none holds the one empty tuple (an
        #: empty list each was 0.4 MB of the scale curve's 6,000 connections)
        self.waiting: Sequence[bytes] = ()
        #: the factory's IdleWatch, while the idle timeout is on
        self.idle: IdleWatch | None = None
        #: a frame of it was read: bytes refused after that are no other protocol's first words
        self.spoke = False
        self._in_answer = self._in_write = False
        #: a broker's connection (its heartbeat's answer kept): served after the clients' in a reactor turn
        self.after_clients = False

    def connectionMade(self) -> None:
        factory = self.factory
        if interfaces.ITCPTransport.providedBy(self.transport):
            self.transport.setTcpNoDelay(True)  # as Java does: answers must not wait for delayed ACKs
        self.channel = next(factory.channel_ids)
        peer = self.transport.getPeer()
        # one string for every connection from a host (a socket's peer address is a new one each time)
        self.host = sys.intern(str(getattr(peer, "host", "?")))
        #: the host its place of maxConnectionsPerHost is counted under (None: no such limit)
        self.counted_host = peer_group(self.host) if factory.max_connections_per_host else None
        if self.counted_host is not None:
            factory.per_host[self.counted_host] += 1
        self.peer = Peer(self.channel, peer_text(peer))
        self.decoder = FrameDecoder(factory.max_frame_length, factory.max_header_length)
        factory.connections[self.channel] = self
        factory.metrics.connections_accepted += 1
        self.idle = factory.idle_watch if factory.idle_timeout else None
        if self.idle is not None:
            self.idle.heard(self)
        self.transport.registerProducer(self, True)

    # -- the transport's producer: its write buffer is full, or drained ------------------------
    def pauseProducing(self) -> None:
        """The write buffer is full: stop reading this peer until it reads its answers."""
        self.writing_paused = True
        self._read(False)
        if not self._in_write:  # (a write of ours says so itself, once it knows the send did not drain it)
            self._not_reading_answers()

    def resumeProducing(self) -> None:
        """The write buffer drained: answer what waited for it, then read again."""
        self.writing_paused, self.unsent = False, 0
        if self._in_answer:
            return  # the answering loop goes on by itself
        if self.answering is None and self.waiting:
            waiting, self.waiting = self.waiting, ()
            self._answer(waiting)
        else:
            self._settle()

    def stopProducing(self) -> None:
        """The connection is going away; connectionLost cleans up."""

    def _not_reading_answers(self) -> None:
        self.factory.limit_log(self.host, "write_buffer", "{peer} does not read its answers: not reading it "
                               "until it does", peer=self.peer.address)

    # -- frames in ------------------------------------------------------------------------------
    def dataReceived(self, data: bytes) -> None:
        # the idle watch hears whole frames only, as Java's IdleStateHandler sits behind its frame decoder:
        # a peer trickling a byte of one frame at a time is silent (it held its connection for good).  Heard
        # where frames were cut, twice for a read a lookup's answer began (``heard`` is idempotent): a
        # heartbeat's read runs no line more for it (tests/test_renewal.py counts them)
        busy = self.answering is not None or self.writing_paused or bool(self.waiting)
        if not busy and self.decoder.empty and not self.after_clients:
            # a client's repeated lookups, as they came: answered before (instead of) cutting them (not
            # a broker's reads: heartbeats, which the dispatcher renews before it looks for a lookup)
            replies: list[bytes] = []
            used = self.factory.dispatcher.answer_read(data, replies, ANSWER_ROOM)
            if used:
                self.spoke = True
                if self.idle is not None:
                    self.idle.heard(self)
                if self.factory.dispatcher.count_requests:
                    self.factory.metrics.bytes_received += used
                self._write(replies)
                if used == len(data):
                    if self.writing_paused:
                        self._settle()
                    return
                data = data[used:]
                busy = self.writing_paused
        try:
            frames = self.decoder.feed(data)
        except RemotingDecodeError as exc:
            # the connection's first bytes: those held before this read (feed added ``data`` to them), or
            # ``data`` (none were held); cut anywhere, a probe's "GE" + "T / HTTP/1.1" is still HTTP
            self._reject(exc.reason, str(exc), None if self.spoke else foreign_protocol(self.decoder.pending or data))
            return
        if frames:
            self.spoke = True
            if self.idle is not None:
                self.idle.heard(self)
        if self.factory.dispatcher.count_requests:
            self.factory.metrics.bytes_received += len(data)
        if busy:
            self.waiting = [*self.waiting, *frames]
            self._settle()
        else:
            self._answer(frames)

    def _answer(self, frames: Sequence[bytes], replies: list[bytes] | None = None) -> None:
        """Answer ``frames`` in order after ``replies``, a write per ANSWER_ROOM of answers; one
        answered in steps holds the rest until it is sent, and answers the peer has not read hold
        the rest until it reads them."""
        replies = replies if replies is not None else []
        dispatcher, later = self.factory.dispatcher, None
        self._in_answer = True
        try:
            while True:
                try:
                    outcome = dispatcher.answer(frames, self.peer, replies, ANSWER_ROOM)
                except RemotingDecodeError as exc:
                    self._write(replies)
                    self._reject(exc.reason, str(exc))
                    return
                self._write(replies)
                if isinstance(outcome, Later):
                    later, frames = outcome, outcome.rest
                    break
                if outcome is None or self.dropped:
                    frames = ()
                    break
                frames, replies = outcome.rest, []  # Full: the answers so far filled the room
                if self.writing_paused:
                    break  # the rest waits until the peer reads them (resumeProducing)
        finally:
            self._in_answer = False
        if not self.after_clients and self.channel in dispatcher.answers.renewals:
            self.after_clients = True  # a broker's: its heartbeats wait for the lookups read with them
            serve_after_clients(self.transport)
        self.waiting = frames
        if later is not None:
            self.answering, self.answering_size = later.answer, later.size
            later.answer.addCallbacks(self._answered_in_steps, self._not_answered)
        self._settle()

    def _answered_in_steps(self, reply: bytes | None) -> None:
        self.answering, self.answering_size = None, 0
        waiting, self.waiting = self.waiting, ()
        self._answer(waiting, [] if reply is None else [reply])

    def _not_answered(self, failure: Failure) -> None:
        """Cancelled because the peer went (connectionLost); a frame decoded in a later turn that
        is not a command (dispatch.py: refused as at once); or a bug: then the peer goes."""
        self.answering, self.answering_size = None, 0
        if failure.check(RemotingDecodeError):
            self._reject(failure.value.reason, str(failure.value))
        elif not failure.check(defer.CancelledError, task.TaskStopped):
            log.failure("answering {peer} failed, closing the channel", failure, peer=self.peer.address)
            self.transport.loseConnection()

    def _write(self, replies: list[bytes]) -> None:
        """One write of every answer to one read (the pieces joined: one send, as the ceiling does);
        while the peer has not read it, it is held for the peer."""
        if not replies:
            return
        data = b"".join(replies)
        if self.factory.dispatcher.count_requests:
            self.factory.metrics.bytes_sent += len(data)
        unread_before = self.unsent if self.writing_paused else 0
        self._in_write = True
        try:
            write_now(self.transport, data)
        finally:
            self._in_write = False
        if self.writing_paused:  # the send did not drain it: the peer is not reading as fast
            self.unsent = unread_before + len(data)
            self._not_reading_answers()

    # -- what the peer holds ------------------------------------------------------------------
    def _settle(self) -> None:
        """Hold what this peer holds against the budget (over it, the peers holding the most
        go: maybe this one), and read it only while it holds no more than the frame it sends."""
        if self.dropped:
            return
        held = self.decoder.pending_memory + self.answering_size + self.unsent
        if self.waiting:
            held += sum(map(len, self.waiting))
        if held != self.held:
            self.held = held
            self.factory.budget.hold(self, held)
            if self.dropped:
                return
        self._read(not self.waiting and not self.writing_paused and (self.answering is None or (
            self.answering_size <= WAITING_READ and self.decoder.empty)))

    def _read(self, on: bool) -> None:
        if on == self.reading_paused:
            self.reading_paused = not on
            if on:
                self.transport.resumeProducing()
            else:
                self.transport.pauseProducing()

    def _reject(self, reason: str, detail: str, protocol: str | None = None) -> None:
        """A frame that cannot be a command: counted by ``reason``, logged, the channel closed; a
        peer whose first bytes are another protocol's (``protocol``: remoting/foreign.py) is told
        so in the line, with the factory's word on it (e.g. where the HTTP port is)."""
        if protocol is not None:
            detail += f" ({self.factory.first_bytes(protocol)})"
        self.factory.refuse(reason, self.peer.address, "decode exception, closing the channel: {detail}",
                            detail=detail)
        self.transport.loseConnection()
        self._drop_pending()

    def _drop_pending(self) -> None:
        self.decoder = FrameDecoder(self.factory.max_frame_length, self.factory.max_header_length)  # drop the rest
        self.waiting = ()
        if self.held:
            self.held = 0
            self.factory.budget.hold(self, 0)

    def over_budget(self, held: int, budget: MemoryBudget) -> None:
        """The memory budget is spent and this peer holds the most: it goes."""
        self.held = 0
        self.dropped = True
        self.close_reason = "memory budget: closed holding the most"
        self.factory.refuse("memory_budget", self.peer.address, "closing it: it holds the most ({held} bytes: "
                            "frames received and not answered, answers not read) and peers hold {total} bytes, "
                            "over receiveMemoryBudget ({budget_bytes})",
                            held=held, total=budget.held + held, budget_bytes=budget.limit)
        self.decoder = FrameDecoder(self.factory.max_frame_length, self.factory.max_header_length)
        self.waiting = ()
        self.transport.abortConnection()

    def timeoutConnection(self) -> None:
        self.close_reason = f"idle: no request for {self.factory.idle_timeout} s"
        self.factory.refuse("idle", self.peer.address, "channel idle for {seconds} s, closing it",
                            seconds=self.factory.idle_timeout)
        self.transport.abortConnection()

    def connectionLost(self, reason: object = protocol.connectionDone) -> None:
        if self.idle is not None:
            self.idle.forget(self)
        self.dropped = True  # nothing more is held or answered
        self.waiting = ()
        if self.held:
            self.held = 0
            self.factory.budget.hold(self, 0)
        if self.answering is not None:
            self.answering.cancel()  # a broker that left registers nothing
        if self.factory.connections.pop(self.channel, None) is not None:
            if self.factory.fds is not None:
                self.factory.fds.release()
            self.factory.forget_host(self.counted_host)
        self.factory.dispatcher.channel_closed(self.channel, self.close_reason)


class IdleWatch:
    """Every connection's idle timer as one call: the connections in the order they were last
    heard from (a read moves one to the end), the call due when the first of them has been silent
    for the factory's ``idle_timeout``; each is closed (``timeoutConnection``) exactly then, as by a
    timer of its own.  Twisted's TimeoutMixin gave every connection a DelayedCall and three bound
    methods, about 460 bytes: 2.3 MiB of a 5,000-broker step's RSS, 9 MiB at 19,500 connections."""

    def __init__(self, clock: interfaces.IReactorTime, factory: RemotingFactory) -> None:
        self.clock = clock
        #: when a connection was heard from, on the clock its timer runs on: the reactor's own, the
        #: monotonic one in a real server (a wall clock stepped back would hold every connection for
        #: the step), read as ``time.monotonic`` itself, a C call: every read of every connection
        #: stamps it (through the owners' steady clock, a Python call more a read, whose offset the
        #: timer's distance ``_call_when_due`` works out cancels)
        self.seconds = underlying(clock).seconds
        self.factory = factory
        #: each watched connection and when it was last heard from, the longest silent first
        self.last_heard: dict[RemotingProtocol, float] = {}
        self.call: interfaces.IDelayedCall | None = None

    def heard(self, connection: RemotingProtocol) -> None:
        """``connection`` connected or sent something: silent from now."""
        last_heard = self.last_heard
        last_heard.pop(connection, None)
        last_heard[connection] = self.seconds()
        if self.call is None:
            self._call_when_due()

    def forget(self, connection: RemotingProtocol) -> None:
        """``connection`` went: no longer watched (the call goes with the last one)."""
        self.last_heard.pop(connection, None)
        if not self.last_heard and self.call is not None:
            self.call.cancel()
            self.call = None

    def _call_when_due(self) -> None:
        first = next(iter(self.last_heard.values()))
        self.call = self.clock.callLater(max(0.0, first + self._timeout() - self.seconds()),
                                         self._close_the_silent)

    def _timeout(self) -> float:
        return float(self.factory.idle_timeout or 0)

    def _close_the_silent(self) -> None:
        """Close every connection silent for the timeout, longest silent first; call again when
        the next one will have been (a timeout turned off meanwhile closes none: none is watched)."""
        self.call = None
        timeout, now, last_heard = self._timeout(), self.seconds(), self.last_heard
        if not timeout:
            last_heard.clear()
            return
        while last_heard:
            connection, heard = next(iter(last_heard.items()))
            if heard + timeout > now:  # (so the call for it is due after now)
                break
            del last_heard[connection]
            connection.timeoutConnection()
        if last_heard and self.call is None:
            self._call_when_due()


class RemotingFactory(protocol.Factory):
    """``listener`` names the port in refusals (``remoting``, ``controller``); ``refusals`` and
    ``budget`` are shared by a server's listeners (the composition root's: service.py)."""

    protocol = RemotingProtocol
    #: no "Starting factory <twisted_namesrv.server.RemotingFactory object at 0x7f...>" line at start and
    #: its "Stopping" twin at stop: a Python repr, the second line a new operator read; the port's own
    #: "RemotingFactory starting on 9876" and the boot line say what listens
    noisy = False

    def __init__(self, dispatcher: Dispatcher, clock: interfaces.IReactorTime, max_frame_length: int,
                 idle_timeout: float, refusals: Refusals, budget: MemoryBudget, max_connections: int = 0,
                 max_header_length: int | None = None, listener: str = "remoting",
                 fds: FdBudget | None = None, foreign: Mapping[str, str] | None = None,
                 max_connections_per_host: int = 0) -> None:
        self.dispatcher = dispatcher
        #: what a refusal says of a peer speaking another protocol (remoting/foreign.py), by protocol
        self.foreign = dict(foreign or {})
        self.max_connections = max_connections  # 0: no limit
        #: connections one host (state/hosts.py: peer_group, an IPv6 host's /64) may hold; 0: no limit
        self.max_connections_per_host = max_connections_per_host
        self.per_host: Counter[str] = Counter()  # counted only with that limit
        self.clock = clock
        self.max_frame_length = max_frame_length
        self.max_header_length = max_header_length
        self.idle_timeout = idle_timeout
        self.idle_watch = IdleWatch(clock, self)
        self.connections: dict[int, RemotingProtocol] = {}
        self.limit_log = LimitLog()
        self.refusals = refusals
        self.budget = budget
        self.listener = listener
        #: the descriptors its port admits connections against (Admission), told of each close
        self.fds = fds
        self.channel_ids = itertools.count(1)

    @property
    def metrics(self) -> Metrics:
        return self.dispatcher.metrics

    def buildProtocol(self, addr) -> RemotingProtocol | None:
        """None (the connection is closed at once) when maxConnections are open."""
        if self.refused_full(addr):
            return None
        return super().buildProtocol(addr)

    def refused_full(self, addr: Any, waiting: int = 0) -> bool:
        """Whether maxConnections are open, counting ``waiting`` connections accepted and not handed
        to this factory yet (a TLS port's, before their first byte: tls.py); if so the new one is
        refused (logged, counted) and its descriptor given back: its port closes it."""
        if self.max_connections and len(self.connections) + waiting >= self.max_connections:
            self.refuse("max_connections", peer_text(addr),
                        "maxConnections ({maximum}) are open, closing the connection", maximum=self.max_connections)
        elif self.host_full(addr):
            self.refuse("max_connections_per_host", peer_text(addr),
                        "maxConnectionsPerHost ({maximum}) are open from its host, closing the connection",
                        maximum=self.max_connections_per_host)
        else:
            return False
        if self.fds is not None:
            self.fds.release()  # its port admitted the socket; it closes now
        return True

    def host_full(self, addr: Any) -> bool:
        """Whether ``addr``'s host holds maxConnectionsPerHost connections already (a TLS port's
        from their first byte: until then they count against maxConnections only)."""
        limit = self.max_connections_per_host
        return bool(limit) and self.per_host[peer_group(str(getattr(addr, "host", "?")))] >= limit

    def forget_host(self, host: str | None) -> None:
        """A connection counted under ``host`` closed."""
        if host is not None:
            self.per_host[host] -= 1
            if not self.per_host[host]:
                del self.per_host[host]

    def first_bytes(self, protocol: str) -> str:
        """What a refusal says of a peer whose first bytes are ``protocol``'s (remoting/foreign.py):
        the plain port's decode refusal and the TLS port's not_tls refusal say it alike."""
        return f"its first bytes are {protocol}: {self.foreign.get(protocol, 'not remoting')}"

    def refuse(self, reason: str, peer: str, message: str, **fields: object) -> None:
        """A refused frame, request or connection: counted (namesrv_rejected_total and
        namesrv_refusals_total) and logged with the peer (refusals.py)."""
        self.metrics.reject(reason)
        self.refusals(self.listener, reason, peer, message, rejected=reason, **fields)

    def close_channel(self, channel: int) -> None:
        connection = self.connections.get(channel)
        if connection is not None:
            connection.transport.loseConnection()


@dataclass
class Admission:
    """A listening port's rule for the sockets it accepts: each is kept only while the process's
    descriptor budget (budget.py: FdBudget, fdReserve) leaves the reserve free for the stores; else
    ``make_room()`` may close an idle connection of the same port to take its place (the HTTP side
    does), or the socket is closed at once and refused (``refuse(reason, peer, message, **fields)``:
    logged and counted as ``fd_reserve``).  Applied around whatever the port listens with (TLS
    sniffing included), once per socket."""

    fds: FdBudget
    refuse: Callable[..., None]
    make_room: Callable[[], bool] | None = None
    #: the HTTP port's: it may take the budget's headroom too (FdBudget.headroom)
    probes: bool = False
    #: the port's accepts failing for want of a descriptor (set when it listens)
    failures: AcceptFailures | None = None

    def around(self, factory: protocol.Factory) -> protocol.Factory:
        return _Admitting(factory, self)


class _Admitting(protocol.Factory):
    """``inner`` behind an Admission: only buildProtocol is intercepted, so the protocol it builds
    talks to its transport directly (no wrapper on the path of every read)."""

    def __init__(self, inner: protocol.Factory, admission: Admission) -> None:
        self.inner = inner
        self.admission = admission

    def buildProtocol(self, addr: Any) -> protocol.Protocol | None:
        admission, fds = self.admission, self.admission.fds
        if admission.failures is not None:
            admission.failures.accepted()
        if not fds.admit(admission.probes):
            if admission.make_room is None or not admission.make_room():
                headroom = "" if admission.probes or not fds.headroom else f" and {fds.headroom} more for the HTTP port"
                admission.refuse("fd_reserve", peer_text(addr),
                                 "fewer than {reserve} of {nofile} descriptors (ulimit -n) would stay free for "
                                 "the stores (fdReserve){headroom}, closing the connection", reserve=fds.reserve,
                                 nofile=fds.limit, headroom=headroom)
                return None
            fds.take()  # in the place of the one closed
        return self.inner.buildProtocol(addr)  # type: ignore[no-any-return]

    def doStart(self) -> None:
        self.inner.doStart()

    def doStop(self) -> None:
        self.inner.doStop()

    def logPrefix(self) -> str:
        return self.inner.logPrefix()  # type: ignore[no-any-return]


#: how long a port stops accepting once an accept found no descriptor (AcceptFailures)
ACCEPT_PAUSE_SECONDS = 1.0


class AcceptFailures:
    """A listening port whose accept() finds no descriptor: EMFILE (``ulimit -n`` reached, as when
    ``prlimit`` lowers it under what is open), ENFILE, ENOBUFS, ENOMEM.  Twisted's Port logs ``Could
    not accept new connection`` and returns; the connection waiting in the backlog keeps the port
    readable, so the reactor called it again at once: under ``prlimit --nofile=6`` with two clients
    connecting, 12,000 log lines a second and a busy reactor for as long as the table stayed full
    (the peers gone: their connections wait in the backlog).  While Twisted's reserved descriptor
    lets it accept, it closes the peer instead, three info lines a peer.

    This reads the port's own log events (an ILogObserver put in the place of its logger's): each
    accept that failed so, and each peer Twisted closed for want of a descriptor, is one refusal,
    ``fd_table_full`` (counted; the peer named when known), and the port stops reading for
    ACCEPT_PAUSE_SECONDS, the peers waiting in the backlog; the episode's first a warning with
    ``ulimit -n`` and what is open, its end (the next connection accepted: ``accepted()``) an info
    line with how long and how many accepts failed.
    Every other event of the port goes on to ``publish`` as it would have."""

    #: Twisted's lines of an accept without a descriptor (twisted.internet.tcp._accept)
    FAILED, CLOSED = "Could not accept new connection", "EMFILE recovery: Closed socket from"
    QUIET = ("EMFILE encountered", "Re-reserving EMFILE recovery")

    def __init__(self, name: str, port: Any, clock: interfaces.IReactorTime,
                 refuse: Callable[..., None], publish: Callable[[dict[str, Any]], None],
                 reserve: ReserveFailures | None = None) -> None:
        self.name, self.port, self.clock, self.refuse, self.publish = name, port, clock, refuse, publish
        self.reserve = reserve
        self.since: float | None = None  # when the episode began (None: accepting)
        self.failed_turns = 0
        self.resume: interfaces.IDelayedCall | None = None

    def __call__(self, event: dict[str, Any]) -> None:
        text = str(event.get("log_format", ""))
        if text.startswith(self.FAILED):
            self._failed(str(event.get("acceptError", "?")), "?")
        elif text.startswith(self.CLOSED):
            address = event.get("address")
            peer = f"{address[0]}:{address[1]}" if isinstance(address, tuple) and len(address) >= 2 else "?"
            self._failed("EMFILE", peer)
        elif not text.startswith(self.QUIET):
            self.publish(event)

    def _failed(self, error: str, peer: str) -> None:
        if self.since is None:
            self.since, self.failed_turns = self.clock.seconds(), 0
            log.warn("{listener}: cannot accept connections: {error} (no descriptor for them: ulimit -n {nofile}, "
                     "{open} open); not accepting for {pause:.0f} s at a time until one is free, peers wait in the "
                     "backlog [fd_table_full]", listener=self.name, error=error,
                     nofile=_shown(open_file_limit(), "unlimited"),
                     open=_shown(count_open_fds(), "cannot count: every one"), pause=ACCEPT_PAUSE_SECONDS)
        self.failed_turns += 1
        self.refuse("fd_table_full", peer, "no descriptor for a new connection ({error})", error=error)
        if self.resume is None or not self.resume.active():
            self.port.stopReading()
            self.resume = self.clock.callLater(ACCEPT_PAUSE_SECONDS, self._resume)

    def _resume(self) -> None:
        if self.port.connected and not self.port.disconnecting:
            self.port.startReading()

    def accepted(self) -> None:
        """A connection was accepted: the episode, if one was on, is over."""
        if self.since is not None:
            log.info("{listener}: accepting connections again after {seconds:.1f} s; {turns} accepts found no "
                     "descriptor meanwhile [fd_table_full]", listener=self.name,
                     seconds=self.clock.seconds() - self.since, turns=self.failed_turns)
            self.since = None
            if self.reserve is not None:
                self.reserve.retake()

    def stop(self) -> None:
        if self.resume is not None and self.resume.active():
            self.resume.cancel()


def _shown(value: int | None, none: str) -> str:
    return none if value is None else str(value)


class ReserveFailures:
    """Twisted keeps one descriptor in reserve (``twisted.internet.tcp._reservedFD``, /dev/null
    opened) to accept and close a peer when accept() meets EMFILE, and takes it again at once; in a
    descriptor table still full it cannot, and logs a critical line with a traceback (``Could not
    reserve EMFILE recovery file descriptor.``; ``re-reserve`` for another error) - then never
    tries again but at a port's start, so the next full table finds no reserve.

    This reads the reservation's log events (an ILogObserver in the place of its logger's): a
    failure to take it is one warning line in our words while it stays lost, the accept failures
    it leaves are paused and counted by AcceptFailures (``fd_table_full``); once a port accepts
    again (``retake``: descriptors are free) it is taken again, for the next episode.  Every other
    event of the reservation goes on to ``publish`` as it would have."""

    FAILED = ("Could not reserve EMFILE recovery", "Could not re-reserve EMFILE recovery")

    def __init__(self, reservation: Any, publish: Callable[[dict[str, Any]], None]) -> None:
        self.reservation, self.publish = reservation, publish
        self.lost = False  # a failure to take the reserve was said, and it is not taken since

    def __call__(self, event: dict[str, Any]) -> None:
        if not str(event.get("log_format", "")).startswith(self.FAILED):
            self.publish(event)
            return
        if self.lost:
            return
        self.lost = True
        failure = event.get("log_failure")
        error = failure.getErrorMessage() if isinstance(failure, Failure) else "?"
        log.warn("no descriptor to keep in reserve for a full descriptor table ({error}): accepts that find none "
                 "are paused and counted until one is free [fd_table_full]", error=error)

    def retake(self) -> None:
        """Descriptors are free again: take the reserve again (a failure comes back here, unsaid)."""
        if not self.reservation.available():
            self.reservation.reserve()
        if self.reservation.available():
            self.lost = False


#: the reservation's one watch (the reservation is the process's, shared by every port)
_reserve_watch: list[ReserveFailures] = []


def watch_fd_reserve() -> ReserveFailures | None:
    """Put ReserveFailures between Twisted's descriptor reservation and its logger, once; None where
    Twisted keeps none (Windows) or keeps it otherwise than this reads."""
    if not _reserve_watch:
        from twisted.internet import tcp

        reservation = getattr(tcp, "_reservedFD", None)
        logger = getattr(reservation, "_log", None)
        if not isinstance(logger, Logger) or not hasattr(reservation, "available"):
            return None
        watch = ReserveFailures(reservation, logger.observer)
        reservation._log = Logger(namespace=logger.namespace, observer=watch)  # type: ignore[union-attr]
        _reserve_watch.append(watch)
    return _reserve_watch[0]


class Listener(service.Service):
    """One listening port, a child service named by what it serves (its config key); a port that
    cannot be had raises CannotStart naming it and the cause (a server without what was asked for
    would look healthy to its supervisor).  reactor.listenTCP rather than twisted.internet.endpoints,
    which imports pyOpenSSL (megabytes per process: docs/benchmarks.md) when it is installed."""

    def __init__(self, name: str, factory: protocol.Factory, reactor: interfaces.IReactorTCP, port: int,
                 interface: str, backlog: int = 50, admission: Admission | None = None) -> None:
        self.setName(name)
        self.factory = factory
        self.admission = admission
        self.reactor = reactor
        self.port_number = port
        self.interface = interface
        self.backlog = backlog
        self.port: interfaces.IListeningPort | None = None

    def bind(self) -> None:
        if self.port is not None:
            return
        try:
            factory = self.admission.around(self.factory) if self.admission is not None else self.factory
            if self.admission is not None:
                watch_fd_reserve()  # before the port takes the reserve (its start does)
            reactor = underlying(self.reactor)  # (the reactor behind the owners' view: its listenTCP's)
            if isinstance(reactor, PosixReactorBase):  # listenTCP's own steps, on a port that accepts lean
                lean = LeanPort(self.port_number, factory, self.backlog, self.interface,  # type: ignore[arg-type]
                                reactor)
                lean.startListening()  # (lean_transport.py: fewer objects and strings a connection)
                self.port = lean  # type: ignore[assignment]  # (an IListeningPort by zope's declaration)
            else:  # a test's fake reactor gives its own
                self.port = self.reactor.listenTCP(self.port_number, factory, backlog=self.backlog,
                                                   interface=self.interface)
            if self.admission is not None:
                self._watch_accepts(self.admission)
        except CannotListenError as exc:
            cause = exc.socketError.strerror if isinstance(exc.socketError, OSError) else str(exc.socketError)
            reason = f"cannot listen on {self.interface}:{self.port_number} ({self.name}): {cause}"
            if getattr(exc.socketError, "errno", None) == errno.EADDRINUSE:
                reason += held_by(self.port_number)  # which process: the Java NameServer, a second one of ours
            log.critical("cannot start: {reason}", reason=reason)
            raise CannotStart(reason) from None

    def _watch_accepts(self, admission: Admission) -> None:
        """The port's accept failures read by AcceptFailures: its logger's events go there first."""
        port = self.port
        publish = port._logger.observer  # type: ignore[union-attr]
        admission.failures = AcceptFailures(self.name, port, self.reactor, admission.refuse,  # type: ignore[arg-type]
                                            publish, watch_fd_reserve())
        port._logger = Logger(namespace=port._logger.namespace, observer=admission.failures)  # type: ignore[union-attr]

    def unbind(self) -> defer.Deferred[None] | None:
        if self.admission is not None and self.admission.failures is not None:
            self.admission.failures.stop()
        port, self.port = self.port, None
        return port.stopListening() if port is not None else None  # type: ignore[no-any-return]

    def privilegedStartService(self) -> None:
        self.bind()  # twistd binds here, before it drops privileges (a port below 1024 as root)
        super().privilegedStartService()

    def startService(self) -> None:
        self.bind()  # python -m twisted_namesrv starts without the privileged step
        super().startService()

    def stopService(self) -> defer.Deferred[None] | None:
        super().stopService()
        return self.unbind()


#: pushes in flight at once, every address together (each a connection of its own: a descriptor)
PUSHES_IN_FLIGHT = 256
#: how long a push may take, its connect included, before its connection is dropped
PUSH_SECONDS = 3.0
#: what a push comes to, as namesrv_broker_pushes_total{result} counts it
PUSH_RESULTS = ("sent", "failed", "superseded", "dropped")


class _Push(protocol.Protocol):
    """One push: the frame written once connected, the connection closed after it (aborted when it
    is not gone PUSH_SECONDS later: a peer that never reads); ``done`` when it is gone."""

    def __init__(self, frame: bytes, done: Callable[[], None], clock: interfaces.IReactorTime) -> None:
        self.frame, self.done, self.clock = frame, done, clock
        self.deadline: interfaces.IDelayedCall | None = None

    def connectionMade(self) -> None:
        assert self.transport is not None
        self.transport.write(self.frame)
        self.transport.loseConnection()
        self.deadline = self.clock.callLater(PUSH_SECONDS, self.transport.abortConnection)

    def connectionLost(self, reason: object = protocol.connectionDone) -> None:
        if self.deadline is not None and self.deadline.active():
            self.deadline.cancel()
        self.done()


class Notifier:
    """Pushes a oneway frame to a broker's listen port on a connection of its own, as Java's
    remoting client does for NOTIFY_MIN_BROKER_ID_CHANGE (the NameServer) and
    NOTIFY_BROKER_ROLE_CHANGED (the controller's NotifyService); ``what`` names it in the log.

    The addresses are what brokers registered, so anyone who may register chooses them, and how
    often a push goes (a group's lowest id coming and going, an election).  Java's client keeps one
    channel per address; here at most one connection per address is in flight (a push to an address
    that has one waits for it, the newest replacing one waiting: a broker acts on the latest,
    ``superseded``), at most PUSHES_IN_FLIGHT in all, and each holds a descriptor of the process's
    budget (``fds``: budget.py, fdReserve) from before it opens to its close; past either the push is
    ``dropped``.  Before, every push opened a connection at once: a group of 63 brokers at addresses
    that never answer, its lowest id registered and unregistered in a loop, took all of 1,024
    descriptors in 4 s (KV writes and accepts failed with EMFILE) and wrote 11,000 warning lines.
    A failure or a drop is logged once per address host and reason, and counted (``counts``)."""

    def __init__(self, reactor: interfaces.IReactorTCP, what: str, counts: Counter[str] | None = None,
                 fds: FdBudget | None = None, limit: int = PUSHES_IN_FLIGHT) -> None:
        self.reactor = reactor
        self.what = what
        self.counts: Counter[str] = counts if counts is not None else Counter()
        self.fds = fds
        self.limit = limit
        #: addresses with a push in flight, each with the newer frame waiting for it (None: none)
        self.in_flight: dict[str, bytes | None] = {}
        self.limit_log = LimitLog()

    @property
    def sent(self) -> int:
        return self.counts["sent"]

    @property
    def failed(self) -> int:
        return self.counts["failed"]

    def __call__(self, address: str, frame: bytes) -> None:
        host, _, port = address.rpartition(":")
        if not (port.isascii() and port.isdigit() and 0 < int(port) < 65536 and host):
            self._count_and_log("failed", address, "not host:port")
            return
        if address in self.in_flight:
            if self.in_flight[address] is not None:
                self.counts["superseded"] += 1
            self.in_flight[address] = frame
            return
        if len(self.in_flight) >= self.limit:
            self._count_and_log("dropped", address, f"{self.limit} pushes are in flight (PUSHES_IN_FLIGHT)")
            return
        if self.fds is not None and not self.fds.admit():
            self._count_and_log("dropped", address, f"fewer than {self.fds.reserve} descriptors would stay free for "
                                "the stores (fdReserve)")
            return
        self.in_flight[address] = None
        creator = protocol.ClientCreator(self.reactor, _Push, frame, lambda: self._done(address), self.reactor)
        d = creator.connectTCP(host.strip("[]"), int(port), timeout=PUSH_SECONDS)
        d.addCallbacks(lambda proto: self.counts.update(("sent",)),
                       lambda failure: self._failed(address, failure))

    def _failed(self, address: str, failure: Failure) -> None:
        self._count_and_log("failed", address, failure.getErrorMessage())
        self._done(address)  # no connection: its socket is closed

    def _done(self, address: str) -> None:
        if self.fds is not None:
            self.fds.release()
        waiting = self.in_flight.pop(address, None)
        if waiting is not None:
            self(address, waiting)

    def _count_and_log(self, result: str, address: str, why: str) -> None:
        self.counts[result] += 1
        self.limit_log(peer_host(address), result, "{what} to {addr} {result}: {why}",
                       what=self.what, addr=address, result=result, why=why)
