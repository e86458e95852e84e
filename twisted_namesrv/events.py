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
        return broker_key(self.info)


def broker_key(info: dict[str, Any]) -> tuple[Any, Any, Any]:
    """What tells a route event's broker from another: its (cluster, name, address)."""
    return info.get("cluster"), info.get("broker"), info.get("addr")


class RecentEvents:
    """The last RECENT_EVENTS events, oldest first, and the sequence number of the last one."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.recent: deque[RouteEvent] = deque(maxlen=RECENT_EVENTS)
        #: events since start (and before it, once restored): the last one's ``seq``
        self.seen = 0
        #: the "changed" events in ``recent`` by their info (``_fold_key``), the oldest of alike
        #: ones: a new one finds the one it folds into without comparing it with every event kept
        #: (with thousands of brokers a registration's "changed" compared 200 infos, 11 us)
        self._changed: dict[frozenset[tuple[str, Any]], RouteEvent] = {}

    def route_event(self, kind: str, info: dict[str, Any]) -> None:
        """RouteInfoManager's listener: kept, a repeated "changed" folded into the one before."""
        self.seen += 1
        now = self.clock()
        event = RouteEvent(self.seen, now, kind, dict(info), 1, now)
        if kind == "changed":
            key = _fold_key(event.info)
            if key is None:  # a value that cannot be a key: looked for among all
                earlier = next((e for e in self.recent if e.kind == kind and e.info == event.info), None)
            else:
                earlier = self._changed.pop(key, None)
                self._changed[key] = event
            if earlier is not None:
                self._drop(earlier)
                event.count, event.first_ts = earlier.count + 1, earlier.first_ts
        self._append(event)

    def feed_event(self, kind: str, info: dict[str, Any]) -> None:
        """An event that is no route event (an audited request, a restart): kept with the route
        events, numbered in the same sequence."""
        self.seen += 1
        now = self.clock()
        self._append(RouteEvent(self.seen, now, kind, dict(info), 1, now))

    def _append(self, event: RouteEvent) -> None:
        """``event`` kept as the newest; the oldest, if it goes, out of the index too."""
        if len(self.recent) == RECENT_EVENTS:
            self._unindex(self.recent[0])
        self.recent.append(event)

    def _unindex(self, event: RouteEvent) -> None:
        if event.kind == "changed":
            key = _fold_key(event.info)
            if key is not None and self._changed.get(key) is event:
                del self._changed[key]

    def _drop(self, event: RouteEvent) -> None:
        """``event`` out of ``recent``, found by identity from the newest end (where a broker's
        last "changed" mostly is)."""
        recent = self.recent
        for back in range(1, len(recent) + 1):
            if recent[-back] is event:
                del recent[-back]
                return

    def restore(self, events: list[RouteEvent]) -> None:
        """The last run's events (event_log.py), oldest first, before this run's: numbered on
        from the last one, so ``/api/events?since=`` stays monotonic across the restart."""
        kept = list(self.recent)
        self.recent.clear()
        self.recent.extend(events[-RECENT_EVENTS:])
        self.recent.extend(kept)
        self._changed = {}
        for event in self.recent:
            key = _fold_key(event.info) if event.kind == "changed" else None
            if key is not None:
                self._changed.setdefault(key, event)
        if events:
            self.seen = max(self.seen, events[-1].seq)


def _fold_key(info: dict[str, Any]) -> frozenset[tuple[str, Any]] | None:
    """What tells a "changed" event's info from another's (equal as the dicts are), or None when
    a value cannot be part of a key."""
    try:
        return frozenset(info.items())
    except TypeError:
        return None
