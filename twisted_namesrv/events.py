"""The status page's recent events: broker events and the audit trail, numbered in one sequence.

The one owner of ``/api/events``' list.  The composition root (service.py) hands it every route
event (``route_event``, a RouteInfoManager listener) and the audit trail its events
(``feed_event``); ``event_log.py`` writes it to the data directory and restores it at start
(``restore``).  A broker's repeated "changed" events (a new data version at each heartbeat) fold
into one, so they cannot push the departures out of the last RECENT_EVENTS.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: events kept for the page (and written by event_log.py)
RECENT_EVENTS = 200


@dataclass
class RouteEvent:
    """A broker registered, changed, expired, closed, went idle, unregistered or was refused (or
    an audited request).  ``count`` > 1: as many "changed" events of one broker (same topic count)
    since ``first_ts``."""

    seq: int
    ts: float
    kind: str
    info: dict[str, Any]
    count: int
    first_ts: float

    @property
    def broker_key(self) -> tuple[Any, Any, Any]:
        return self.info.get("cluster"), self.info.get("broker"), self.info.get("addr")


class RecentEvents:
    """The last RECENT_EVENTS events, oldest first, and the sequence number of the last one."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.recent: deque[RouteEvent] = deque(maxlen=RECENT_EVENTS)
        #: events since start (and before it, once restored): the last one's ``seq``
        self.seen = 0

    def route_event(self, kind: str, info: dict[str, Any]) -> None:
        """RouteInfoManager's listener: kept, a repeated "changed" folded into the one before."""
        self.seen += 1
        now = self.clock()
        event = RouteEvent(self.seen, now, kind, dict(info), 1, now)
        if kind == "changed":
            earlier = next((e for e in self.recent if e.kind == kind and e.info == event.info), None)
            if earlier is not None:
                self.recent.remove(earlier)
                event.count, event.first_ts = earlier.count + 1, earlier.first_ts
        self.recent.append(event)

    def feed_event(self, kind: str, info: dict[str, Any]) -> None:
        """An event that is no route event (an audited request, a restart): kept with the route
        events, numbered in the same sequence."""
        self.seen += 1
        now = self.clock()
        self.recent.append(RouteEvent(self.seen, now, kind, dict(info), 1, now))

    def restore(self, events: list[RouteEvent]) -> None:
        """The last run's events (event_log.py), oldest first, before this run's: numbered on
        from the last one, so ``/api/events?since=`` stays monotonic across the restart."""
        kept = list(self.recent)
        self.recent.clear()
        self.recent.extend(events[-RECENT_EVENTS:])
        self.recent.extend(kept)
        if events:
            self.seen = max(self.seen, events[-1].seq)
