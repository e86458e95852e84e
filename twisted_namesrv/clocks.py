"""The server's clocks: the reactor's timers on the monotonic clock, the wall clock for every time
the server stamps or compares with the world, and a steady clock for the brokers' heartbeats.

Twisted schedules ``callLater`` by ``time.time()`` (twisted/twisted#2424, open since 2007): a
clock stepped back an hour (NTP's first sync after a boot with the hardware clock ahead, a VM
restored from a snapshot) holds every timer already scheduled for that hour. For a NameServer
that is the expiry scan: a broker cut off without a FIN, or one that registered after the step
and went silent, kept its routes for the hour, and producers kept sending to it. Java's
``scheduleAtFixedRate`` runs on ``System.nanoTime()``, so its scan goes on. Here too: the reactor
reads ``time.monotonic()`` (Twisted's own workaround, named in twisted/twisted#5552), and the
owners get the reactor through ``WallClockReactor``, whose ``seconds()`` is the wall clock: the
heartbeats' timestamps (compared as Java compares them), events, audit lines, the ages of files,
a signed request's time window. Everything else is the reactor's own.

A broker's heartbeats are stamped on ``WallClockReactor.steady``: the wall clock's reading at the
start, moved on by the monotonic clock. Java stamps them on the wall clock, so a step forward past
their 120 s timeout expired every broker at the next scan (an outage until each registered again,
and an alert), and a step back kept the brokers heard before it for the step plus their timeout;
on the steady clock a step changes neither. Its readings are the wall clock's until a step, then
off by the steps since the start: what shows a heartbeat's time converts it
(``RouteInfoManager.now_ms`` against the wall clock's now).  The ten minutes a departed broker and
its lost topics are kept (departures.py, lost_topics.py: namesrv_brokers_departed,
namesrv_lost_topics and their alerts) are counted on it too, their times shown on the wall clock's now.

Tests give the owners a ``task.Clock`` instead, one clock for both.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from zope.interface import directlyProvides, providedBy

from .state.costly import KeepTimers

#: what a value costly to make (state/costly.py) is timed by in a server: how long it is kept on the
#: monotonic clock, what it cost in the making thread's CPU time (which a descheduled process does not
#: inflate); the pure layer has no clock of its own, the composition root gives it these
PROCESS_KEEP_TIMERS = KeepTimers(clock=time.monotonic, cost=time.thread_time)


class WallClockReactor:
    """The reactor as the server's owners see it: ``seconds()`` the wall clock; every other
    attribute and interface (``callLater``, ``listenTCP``, threads) the reactor's."""

    def __init__(self, reactor: Any) -> None:
        self._reactor = reactor
        directlyProvides(self, providedBy(reactor))  # IReactorThreads, IReactorPluggableNameResolver...
        self._steady_offset = time.time() - time.monotonic()

    @staticmethod
    def seconds() -> float:
        return time.time()

    def steady(self) -> float:
        """The wall clock's reading when this view was made, moved on by the monotonic clock."""
        return time.monotonic() + self._steady_offset

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reactor, name)


def on_monotonic_time(reactor: Any) -> WallClockReactor:
    """Put ``reactor``'s timers on the monotonic clock (once; any call already scheduled moves
    with them, at the same distance) and return it as the owners see it."""
    if isinstance(reactor, WallClockReactor):
        return reactor
    if reactor.seconds is not time.monotonic:
        shift = time.monotonic() - reactor.seconds()
        # every call in the reactor's heap moves, the cancelled ones too (getDelayedCalls leaves them
        # out): one left at a wall-clock time above moved ones would break the heap, and the calls
        # under it would not run; the same shift for all keeps it in order (a task.Clock has a list)
        held = [*getattr(reactor, "_pendingTimedCalls", ()), *getattr(reactor, "_newTimedCalls", ())]
        for call in held or reactor.getDelayedCalls():
            call.time += shift
            call.seconds = time.monotonic
        reactor.seconds = time.monotonic
    return WallClockReactor(reactor)


def underlying(reactor: Any) -> Any:
    """The reactor itself behind an owners' view (what the process's signal handling is set on)."""
    return reactor._reactor if isinstance(reactor, WallClockReactor) else reactor


def since_now(steady: Callable[[], float]) -> Callable[[], float]:
    """Seconds since this call, on ``steady`` (steady_seconds)."""
    start = steady()
    return lambda: steady() - start


def steady_seconds(clock: Any) -> Callable[[], float]:
    """The clock a broker's heartbeats are stamped on: a ``WallClockReactor``'s steady clock, else
    (a test's ``task.Clock``) the clock's own."""
    return clock.steady if isinstance(clock, WallClockReactor) else clock.seconds


def owners_view(reactor: Any = None) -> Any:
    """What an owner is given: without a reactor, the global one with its timers on the monotonic
    clock (a server started for real); a reactor already on it, through ``WallClockReactor`` (a
    test's global reactor, once a server in the same run moved it); anything else as it is (a
    test's ``task.Clock``: one clock for both)."""
    if reactor is None:
        from twisted.internet import reactor as default

        return on_monotonic_time(default)
    if getattr(reactor, "seconds", None) is time.monotonic:
        return WallClockReactor(reactor)
    return reactor
