"""Brokers that left lately, for the status page: the one owner of that list.

A broker that expired, closed its connection, went idle or unregistered leaves brokerLiveTable at
once; the page keeps its last departure for DEPARTED_KEEP_SECONDS (at most DEPARTED_LIMIT of them),
greyed, with why and when it went.  The composition root (service.py) makes it a RouteInfoManager
listener; a broker that registers again is no longer departed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from .events import RouteEvent, broker_key
from .lost_topics import DEPARTURES, KEEP_SECONDS, LIMIT

#: how long a broker that left (expired, closed, idle, unregistered) stays on the status page
DEPARTED_KEEP_SECONDS = KEEP_SECONDS
#: at most this many departed brokers are kept, however fast brokers come and go
DEPARTED_LIMIT = LIMIT


class DepartedBrokers:
    """The last departure of each broker (cluster, name, address) that left in the last
    DEPARTED_KEEP_SECONDS, oldest first."""

    def __init__(self, clock: Callable[[], float], steady: Callable[[], float] | None = None) -> None:
        """``clock``: the wall clock, a departure's time shown; ``steady``: the clock its
        DEPARTED_KEEP_SECONDS are counted on (clocks.py's steady_seconds; by default ``clock``), so
        that a wall clock stepped forward does not forget a crash at once, nor one stepped back keep it."""
        self.clock = clock
        self.steady = steady or clock
        #: each departure with when it left on the steady clock
        self._departed: dict[tuple[Any, Any, Any], tuple[RouteEvent, float]] = {}

    def route_event(self, kind: str, info: dict[str, Any]) -> None:
        """RouteInfoManager's listener: a departure is kept, any other event of the broker ends its
        departure (the event's ``seq`` is the page's list's business: events.py)."""
        departed = self._departed
        departure = kind in DEPARTURES
        if not (departed or departure):  # none kept and none to keep: every first registration ends here
            return
        key = broker_key(info)
        if departed:
            departed.pop(key, None)
        if departure:  # only a departure is kept
            now = self.clock()
            departed[key] = (RouteEvent(0, now, kind, dict(info), 1, now), self.steady())
        if departed:
            self._forget_old()

    def brokers(self) -> list[RouteEvent]:
        """Departures of the last DEPARTED_KEEP_SECONDS (at most DEPARTED_LIMIT), oldest first."""
        self._forget_old()
        offset = self.clock() - self.steady()  # 0 until the wall clock steps: times shown on the wall clock of now
        return [event if event.ts == at + offset else replace(event, ts=at + offset, first_ts=at + offset)
                for event, at in self._departed.values()]

    def _forget_old(self) -> None:
        """Beyond DEPARTED_LIMIT, or older than DEPARTED_KEEP_SECONDS: forgotten."""
        departed, oldest_kept = self._departed, self.steady() - DEPARTED_KEEP_SECONDS
        while departed and (len(departed) > DEPARTED_LIMIT or next(iter(departed.values()))[1] < oldest_kept):
            del departed[next(iter(departed))]
