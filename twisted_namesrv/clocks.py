"""The server's two clocks: the reactor's timers on the monotonic clock, and the wall clock for
every time the server stamps or compares with the world.

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

Tests give the owners a ``task.Clock`` instead, one clock for both.
"""

from __future__ import annotations

import time
from typing import Any

from zope.interface import directlyProvides, providedBy


class WallClockReactor:
    """The reactor as the server's owners see it: ``seconds()`` the wall clock; every other
    attribute and interface (``callLater``, ``listenTCP``, threads) the reactor's."""

    def __init__(self, reactor: Any) -> None:
        self._reactor = reactor
        directlyProvides(self, providedBy(reactor))  # IReactorThreads, IReactorPluggableNameResolver...

    @staticmethod
    def seconds() -> float:
        return time.time()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reactor, name)


def on_monotonic_time(reactor: Any) -> WallClockReactor:
    """Put ``reactor``'s timers on the monotonic clock (once; any call already scheduled moves
    with them, at the same distance) and return it as the owners see it."""
    if isinstance(reactor, WallClockReactor):
        return reactor
    if reactor.seconds is not time.monotonic:
        shift = time.monotonic() - reactor.seconds()
        for call in reactor.getDelayedCalls():  # the same shift for all: the reactor's heap stays in order
            call.time += shift
            call.seconds = time.monotonic
        reactor.seconds = time.monotonic
    return WallClockReactor(reactor)


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
