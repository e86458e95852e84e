"""A value that takes long to make, made again at most so often that making it takes at most a
fifth of the thread that asks for it.

What the HTTP side shows of the routes (the groups' health behind ``/readyz``, ``/metrics``, the
status page and ``/api``; the ``/api/clusters`` document) is made in the reactor's thread by
walking every broker group, and the peers that make it big are not the ones that ask for it:
brokers register unsigned without ACL, and ``/readyz`` is public on every bind. At 20,000 groups
one ``/readyz`` took 0.13-0.6 s of the reactor and one ``/api/clusters`` 0.75-2.5 s, each request
again: a loop of them held every broker and client that long, each time. ``Costly`` keeps what it
made for ``factor`` times what making it cost (CPU time of the making thread, which a descheduled
process does not inflate), so whatever asks in a loop, the making takes at most 1 / (1 + factor) of
that thread. What is cheap to make (under ``keep_from`` seconds: every cluster of a few thousand
groups) is made for each ask, as before, so a small cluster's answers are never old; a big one's
are at most ``factor`` times their cost old (a second at 20,000 groups), capped at ``keep_max``.
Pure: the timers (``KeepTimers``) are injected by the composition root; none defaults to a real clock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, NamedTuple, TypeVar

T = TypeVar("T")

#: a value is kept for this many times what making it cost: its making takes at most a fifth
KEEP_FACTOR = 4.0
#: what is made in less than this (seconds of CPU) is not kept
KEEP_FROM = 0.02
#: never kept longer than this (seconds), whatever it cost
KEEP_MAX = 10.0


class KeepTimers(NamedTuple):
    """What a ``Costly`` measures with: ``clock``, a monotonic clock (seconds), how long a value is
    kept; ``cost``, a CPU timer of the making thread (seconds), what making it cost.  The
    composition root gives the process's (service.py: ``build``), a test its own."""

    clock: Callable[[], float]
    cost: Callable[[], float]


class Costly(Generic[T]):
    """``get()``: what ``make()`` returns, made again once the one kept is ``factor`` times its
    cost old, as ``timers`` measure them."""

    def __init__(self, make: Callable[[], T], timers: KeepTimers, factor: float = KEEP_FACTOR,
                 keep_from: float = KEEP_FROM, keep_max: float = KEEP_MAX) -> None:
        self.make = make
        self.clock, self.cost = timers
        self.factor = factor
        self.keep_from = keep_from
        self.keep_max = keep_max
        self.made = 0  #: how many times it was made (tests count them)
        self._kept: tuple[T, float] | None = None  # the value and until when it is kept (``clock``)

    def get(self) -> T:
        kept = self._kept
        if kept is not None and self.clock() < kept[1]:
            return kept[0]
        self._kept = None
        spent = self.cost()
        value = self.make()
        spent = self.cost() - spent
        self.made += 1
        if spent >= self.keep_from:
            self._kept = (value, self.clock() + min(self.keep_max, spent * self.factor))
        return value

    def forget(self) -> None:
        """The next ``get`` makes it anew."""
        self._kept = None
