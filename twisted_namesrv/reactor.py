"""The server's reactor: Twisted's epoll reactor, serving the ready sockets of clients before the
brokers' in each turn, and a read outside Twisted's logging context.

A heartbeat storm makes hundreds of brokers' sockets ready at once; Twisted's ``doPoll`` serves a
turn's ready sockets in epoll's order, so a client's lookup read in that turn waited behind every
heartbeat before it (27-44 µs each: at 5,000 brokers a turn of 75 took 2.3 ms of CPU, on a loaded
machine one took 12-40 ms). Here the brokers' sockets are watched in an epoll set of their own,
which the clients' set watches as one descriptor: a turn serves every ready socket of the
clients' set (clients, ``mqadmin``, the listening ports, the HTTP port; up to ``READY_PER_POLL``,
the rest first in the next turn), then at most
``BROKERS_PER_TURN`` of the brokers' set with something to read or write, in epoll's ready order
(those it leaves stay at the head of that set's ready list for the next turn, and are not reported
again until then), and those that hung up or failed besides, up to ``BROKERS_GONE_PER_TURN``
(a mass disconnect's closures spread 32 a turn cost more than twice the CPU in all: their
removals batch per turn). A lookup read
while a storm is served waits for at most that many heartbeats, not for all of them. A socket
moves to the brokers' set in the read that marks it (``serve_after_clients``: RemotingProtocol
marks a connection once it keeps a broker's heartbeat answer) and leaves it when unregistered.

A connection's first read is a broker's first registration as often as not (every broker's
after a restart of the NameServer, thousands within a heartbeat's period); served in epoll's
order among the clients' sockets, a burst of them made a lookup read in the same turn wait for
all their reads. So an accepted connection waits in a third set, the newcomers', until its first
read, which the clients' set watches as one descriptor too; a turn
serves at most ``NEWCOMERS_PER_TURN`` of them, after every ready socket of the clients' set, those
it leaves at the head of that set's ready list. A newcomer leaves the set in that read: for the
brokers' set when it marked it, else for the clients'. So a lookup on a connection that was heard
before waits for at most that many newcomers' first reads of the turn before, not for a burst of
them (each of which the dispatcher answers at once up to ``dispatch.AT_ONCE_PER_TURN`` a turn).

A listening port accepts at most ``ACCEPTS_PER_TURN`` connections a turn: Twisted's port grows
its own count by 20 each turn that accepted as many, so thousands of peers connecting at once
(the scale curve's 5,000 brokers) made turns of 21, 41, ... 201 accepts and on to 11-13 ms of
CPU; the rest wait in the kernel's backlog for the next turn, the port still ready.

Twisted wraps each ready socket's service in ``log.callWithLogger`` (a context for its legacy log's
``system`` field, 1.4 µs a socket); nothing of this server logs through that context on a read,
so a read of a socket that reported nothing but input is served without it. Anything else (a
write, a hang-up, an error), an exception from a read, and the disconnection that follows run as
Twisted runs them, in the socket's context: the ``Unhandled Error`` line still names the peer.
A selectable's handling is otherwise Twisted's ``_doReadOrWrite``, half-close and TLS included.

``install()`` installs it where epoll exists (``python -m twisted_namesrv``, the ``twisted-namesrv``
command; ``twistd --reactor namesrv-epoll``, as ``tools/run-server.sh`` runs it), else nothing:
Twisted's default reactor is used.
"""

from __future__ import annotations

import errno
import select
import sys
from typing import Any

from twisted.internet import abstract, error, main, tcp
from twisted.python import log

from .lean_transport import PLAIN_READS

try:
    from select import EPOLLERR, EPOLLHUP, EPOLLIN, EPOLLONESHOT, EPOLLOUT

    from twisted.internet.epollreactor import EPollReactor
except ImportError:  # no epoll (not Linux): Twisted's default reactor serves as it does
    EPollReactor = None  # type: ignore[assignment,misc]
    EPOLLERR = EPOLLHUP = EPOLLIN = EPOLLONESHOT = EPOLLOUT = 0

#: the brokers' ready sockets served in one turn at most (a heartbeat renewed from memory is 30-45 µs
#: of CPU: 0.25-0.35 ms in all); the rest wait for the next turn, still ready, so a lookup read in a
#: storm waits for no more than these (tests/test_reactor.py counts them). A fifth of Java's shortest
#: storm wait at 1,000 brokers (3.7 ms) is 0.74 ms, which 32 a turn (1.0-1.4 ms) could pass alone. A
#: turn more is 4 Python calls and two polls that return at once, no wake-up: 96 heartbeats ready at
#: once were 2,737 calls in 12 turns of 8, against 2,701 in 3 turns of 32
BROKERS_PER_TURN = 8

#: the brokers' sockets served in one turn at most, those that hung up or failed included: a mass
#: disconnect's closures (30-50 µs each) as many a turn as Twisted's turns took them, not more
BROKERS_GONE_PER_TURN = 1024

#: the first reads of accepted connections served in one turn at most, after the clients' (a broker's
#: first registration is its connection's first read: 0.3-0.4 ms of CPU each, 1 M instructions);
#: the rest wait for the next turn, still ready, so a lookup waits for no more than these
NEWCOMERS_PER_TURN = 8

#: the connections a listening port accepts in one turn at most (each 18-24 µs of CPU: its
#: transport, protocol and admission, watched in the newcomers' set; 64 about 1.3 ms). Twisted's port
#: accepts up to ``numberAccepts`` a turn, 20 more after each turn that took as many: while 5,000
#: brokers connected at once its turns grew to 11-13 ms of accepts, which a lookup read in the same
#: turn waited for. The rest wait in the kernel's backlog (serverSocketBacklog, 1024), the port
#: still ready, for the next turn
ACCEPTS_PER_TURN = 64

#: the clients' set's ready sockets one turn's poll reports at most (and the events it asks room
#: for: Python's ``epoll.poll`` allocates that many events' room, 12 bytes each, at every poll and
#: frees it after).  Twisted asks for one per descriptor watched: at the curve's 19,500 idle client
#: connections 234 KB a turn, past glibc's 64 KiB threshold at which a free consolidates the heap's
#: fast bins and past its 128 KiB trim threshold, so where that room was the heap's top every turn
#: grew the heap and gave it back (two ``brk`` calls a poll, in a loop of polls alone; none seen in
#: the real server's storms, whose room came from free chunks: docs/benchmarks.md).  Epoll reports a
#: level-triggered socket left over at the head of its ready list in the next poll, so the rest wait
#: a turn, none longer
READY_PER_POLL = 1024

#: a socket's events that say it hung up or failed
_GONE = EPOLLHUP | EPOLLERR

#: the attribute of a socket's descriptor (Twisted's FileDescriptor) that puts it after the others
_AFTER_CLIENTS = "namesrv_after_clients"

#: the attribute of an accepted connection's descriptor once its first read was served
_HEARD = "namesrv_heard"

#: what Twisted's ``_doReadOrWrite`` disconnects a selectable with when its fileno() is -1
_NO_FILEDESC = error.ConnectionFdescWentAway("File descriptor lost")


def serve_after_clients(transport: Any) -> None:
    """Serve this connection's socket after the clients' in each reactor turn (a broker's: its
    heartbeats can wait a turn, a lookup should not). Under another reactor it does nothing."""
    descriptor = _descriptor(transport)
    if descriptor is not None:
        setattr(descriptor, _AFTER_CLIENTS, True)


def served_after_clients(transport: Any) -> bool:
    """Whether ``serve_after_clients`` marked the socket under ``transport``."""
    return bool(getattr(_descriptor(transport), _AFTER_CLIENTS, False))


def _descriptor(transport: Any) -> abstract.FileDescriptor | None:
    """The socket's descriptor under a protocol's transport: the transport itself, or under TLS's
    wrapper (its ``transport``); None when there is none (a test's transport)."""
    while transport is not None and not isinstance(transport, abstract.FileDescriptor):
        transport = getattr(transport, "transport", None)
    return transport


class _Sets:
    """The epoll object as Twisted's EPollReactor uses it (register, modify, unregister, poll,
    fileno, close), over three epoll sets: the clients' (every descriptor but a newcomer starts
    there), the newcomers' (accepted connections until their first read) and the brokers', which
    the clients' set watches as two descriptors more. Polling the newcomers' and the brokers' sets
    apart, a few at a time, takes them in epoll's ready order, those left at the head: none waits
    more than its share of turns, and no turn reports again those it left.

    A newcomer is watched for one report (``EPOLLONESHOT``): once reported, the kernel reports it
    no more, so it leaves the newcomers' set in its first read with one system call (its place in
    the brokers' or the clients' set), not two: every broker's first registration is one, and
    5,000 of them made 10,000 epoll_ctl calls in the phase, 2% of its CPU (``perf``). Its entry
    stays in the newcomers' set, reporting nothing, until the socket is closed (the kernel drops
    it then); one watched again meanwhile (a write waiting: ``modify``) is removed as before."""

    def __init__(self) -> None:
        self.clients = select.epoll(1024)
        self.brokers = select.epoll(1024)
        self.newcomers = select.epoll(1024)
        self.clients.register(self.brokers.fileno(), EPOLLIN)
        self.clients.register(self.newcomers.fileno(), EPOLLIN)
        self.brokers_fd = self.brokers.fileno()
        self.newcomers_fd = self.newcomers.fileno()
        #: the descriptors registered in the brokers' set (a dict's keys: every broker's connection
        #: is one, and a set keeps a table four times its count, 512 KiB at 5,000 brokers against
        #: the dict's 144), and in the newcomers'
        self.in_brokers: dict[int, None] = {}
        self.in_newcomers: set[int] = set()
        #: the newcomers reported since they were last watched (their one report taken: see above)
        self.reported: set[int] = set()

    def register(self, fd: int, flags: int) -> None:
        self.clients.register(fd, flags)

    def register_newcomer(self, fd: int, flags: int) -> None:
        """Watch ``fd``, an accepted connection not read yet, in the newcomers' set, for one report."""
        self.newcomers.register(fd, flags | EPOLLONESHOT)
        self.in_newcomers.add(fd)

    def _set_of(self, fd: int) -> Any:
        if fd in self.in_brokers:
            return self.brokers
        return self.newcomers if fd in self.in_newcomers else self.clients

    def modify(self, fd: int, flags: int) -> None:
        if fd in self.in_newcomers:  # watched again, for one report more
            self.newcomers.modify(fd, flags | EPOLLONESHOT)
            self.reported.discard(fd)
            return
        self._set_of(fd).modify(fd, flags)

    def unregister(self, fd: int) -> None:
        self._set_of(fd).unregister(fd)
        self.in_brokers.pop(fd, None)
        self.in_newcomers.discard(fd)
        self.reported.discard(fd)
        self._emptied()

    def _leave(self, fd: int) -> None:
        """Stop watching ``fd`` where it is: a newcomer reported since it was last watched is
        watched no more already (its entry reports nothing until the socket closes)."""
        if fd in self.reported:
            self.reported.discard(fd)
            self.in_newcomers.discard(fd)
            self._emptied()
        else:
            self.unregister(fd)

    def _emptied(self) -> None:
        """A set left empty made anew: a set keeps the table it grew to, and 5,000 brokers
        connecting at once grew the newcomers' two to 512 KiB each, held after their first reads
        (the brokers' after a mass disconnect likewise)."""
        if not self.in_newcomers:
            self.in_newcomers = set()
        if not self.reported:
            self.reported = set()
        if not self.in_brokers:
            self.in_brokers = {}

    def to_brokers(self, fd: int, flags: int) -> None:
        """Watch ``fd`` (registered for ``flags``) in the brokers' set from now on."""
        self._leave(fd)
        self.brokers.register(fd, flags)
        self.in_brokers[fd] = None

    def heard(self, fd: int, flags: int) -> None:
        """A newcomer was read: watch ``fd`` (registered for ``flags``) in the clients' set from now on."""
        self._leave(fd)
        self.clients.register(fd, flags)

    def poll(self, timeout: float = -1, maxevents: int = -1) -> list[tuple[int, int]]:
        return self.clients.poll(timeout, maxevents)

    def fileno(self) -> int:
        return self.clients.fileno()

    def close(self) -> None:
        self.brokers.close()
        self.newcomers.close()
        self.clients.close()


class Descriptors(dict[int, None]):
    """A set of descriptors as a dict's keys, for Twisted's EPollReactor (``_reads``, ``_writes``),
    which tests ``fd in``, iterates and calls ``add`` and ``remove``: every connection is one of its
    reads, and a set of n ints keeps a table of 4n slots below 50,000 (512 KiB at the curve's 6,000
    connections), a dict one of 1.5n to 3n (288 KiB).  ``add`` and ``remove`` are the dict's own C
    methods (``setdefault`` stores None), so the reactor's paths make no Python call more."""

    add = dict.setdefault
    remove = dict.pop


if EPollReactor is not None:
    class NamesrvReactor(EPollReactor):  # type: ignore[misc,valid-type]
        """EPollReactor whose turn serves the clients' ready sockets first, then at most
        NEWCOMERS_PER_TURN first reads of accepted connections and BROKERS_PER_TURN of the
        brokers' sockets (module docstring)."""

        def __init__(self) -> None:
            super().__init__()
            self._poller.close()
            self._poller = self._sets = _Sets()
            self._reads, self._writes = Descriptors.fromkeys(self._reads), Descriptors.fromkeys(self._writes)
            for fd in self._reads | self._writes:  # what the base registered already: its waker
                self._poller.register(fd, self._flags(fd))

        def _flags(self, fd: int) -> int:
            """What ``fd`` is registered for (Twisted's own record of it)."""
            return (EPOLLIN if fd in self._reads else 0) | (EPOLLOUT if fd in self._writes else 0)

        def _add(self, xer: Any, primary: set[int], other: set[int], selectables: dict[int, Any], event: int,
                 antievent: int) -> None:
            """Twisted's, but an accepted connection not read yet is watched in the newcomers' set."""
            fd = xer.fileno()
            if fd in primary or fd in other or not isinstance(xer, tcp.Server) or getattr(xer, _HEARD, False):
                super()._add(xer, primary, other, selectables, event, antievent)
                return
            self._sets.register_newcomer(fd, event)
            primary.add(fd)
            selectables[fd] = xer

        def doPoll(self, timeout: float | None) -> None:
            sets, selectables, serve = self._sets, self._selectables, self._serve
            try:
                # as Twisted's, at most as many events as descriptors watched (and the two sets), but
                # never room for more than READY_PER_POLL, whatever the connections held
                ready = sets.clients.poll(-1 if timeout is None else timeout,
                                          min(len(selectables) + 2, READY_PER_POLL))
            except OSError as err:
                if err.errno == errno.EINTR:
                    return
                raise
            brokers = newcomers = False
            for fd, event in ready:
                if fd == sets.brokers_fd:
                    brokers = True
                    continue
                if fd == sets.newcomers_fd:
                    newcomers = True
                    continue
                selectable = selectables.get(fd)
                if selectable is None:
                    continue
                serve(selectable, fd, event)
                if getattr(selectable, _AFTER_CLIENTS, False) and selectables.get(fd) is selectable:
                    sets.to_brokers(fd, self._flags(fd))  # marked in this read (or before): moved, once
            if newcomers:
                self._serve_newcomers()
            if brokers:
                self._serve_brokers()

        def _serve_newcomers(self) -> None:
            """At most NEWCOMERS_PER_TURN accepted connections' first reads, in epoll's order; each
            leaves the newcomers' set in it, for the brokers' when the read marked it."""
            sets, selectables, serve = self._sets, self._selectables, self._serve
            for fd, event in sets.newcomers.poll(0, NEWCOMERS_PER_TURN):
                sets.reported.add(fd)  # (watched for one report: see _Sets; made anew when emptied)
                selectable = selectables.get(fd)
                if selectable is None:
                    continue
                setattr(selectable, _HEARD, True)
                serve(selectable, fd, event)
                if fd in sets.in_newcomers and selectables.get(fd) is selectable:  # still watched there
                    if getattr(selectable, _AFTER_CLIENTS, False):
                        sets.to_brokers(fd, self._flags(fd))
                    else:
                        sets.heard(fd, self._flags(fd))

        def _serve_brokers(self) -> None:
            """At most BROKERS_PER_TURN of the brokers' ready sockets with something to read or
            write, in epoll's order; those that hung up or failed as well, uncounted up to
            BROKERS_GONE_PER_TURN in all (a mass disconnect's in as few turns as Twisted's: its
            removals are one batch a turn, as costly spread over a turn each)."""
            poll, selectables, serve = self._sets.brokers.poll, self._selectables, self._serve
            left, room = BROKERS_PER_TURN, BROKERS_GONE_PER_TURN
            while left > 0 and room > 0:
                asked = min(left, room)
                room -= asked
                ready = poll(0, asked)
                for fd, event in ready:
                    selectable = selectables.get(fd)
                    if selectable is not None:
                        serve(selectable, fd, event)
                    if not event & _GONE:
                        left -= 1
                if len(ready) < asked:
                    break  # none left ready

        doIteration = doPoll

        def _serve(self, selectable: Any, fd: int, event: int) -> None:
            """One ready socket: a read alone outside the logging context, all else as Twisted does.
            A TCP connection's read is Twisted's ``tcp.Connection.doRead`` and ``_dataReceived``
            written out here (every lookup's and heartbeat's read passes: two Python calls fewer,
            2.2k instructions of a lookup's 48.8k): up to ``bufferSize`` bytes to the protocol;
            lost when the read fails, done when the peer closed (nothing read), nothing to do when
            there was nothing to read after all."""
            if event != EPOLLIN:
                log.callWithLogger(selectable, self._doReadOrWrite, selectable, fd, event)
                return
            why: BaseException | None
            in_read = False
            try:
                if selectable.fileno() == -1:
                    why = _NO_FILEDESC
                elif type(selectable) in PLAIN_READS:  # Twisted's own read (lean_transport.py), not a subclass's
                    try:
                        data = selectable.socket.recv(selectable.bufferSize)
                    except OSError as exc:
                        data, why = None, None if exc.errno == errno.EWOULDBLOCK else main.CONNECTION_LOST
                    if data:
                        selectable.protocol.dataReceived(data)
                        why = None
                    elif data is not None:
                        why = main.CONNECTION_DONE
                    in_read = True
                else:
                    if isinstance(selectable, tcp.Port):  # a listening port: this turn's share of accepts
                        selectable.numberAccepts = ACCEPTS_PER_TURN
                    why = selectable.doRead()
                    in_read = True
            except BaseException:
                why = sys.exc_info()[1]
                log.callWithLogger(selectable, log.err)  # the failure, named by its socket as Twisted's
            if why:
                log.callWithLogger(selectable, self._disconnectSelectable, selectable, why, in_read)
else:
    NamesrvReactor = None  # type: ignore[assignment,misc]


def install() -> bool:
    """Install NamesrvReactor as Twisted's reactor unless one is installed already or epoll is
    missing (then the reactor is Twisted's choice): whether it was installed."""
    if NamesrvReactor is None or "twisted.internet.reactor" in sys.modules:
        return False
    from twisted.internet.main import installReactor

    installReactor(NamesrvReactor())
    return True
