"""What the server counts for ``/metrics`` and the status page.

Counting happens on the request path, the hottest route lookups included, so it is plain ints
and dicts bumped in place; they become Prometheus families only when scraped (``collector``).  No label carries a
topic, broker or client: codes, response codes, event kinds and rejection reasons only.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .lost_topics import DEPARTURES, LostTopics
from .remoting.codes import RequestCode, ResponseCode, code_name

#: upper bounds (seconds) of the server-side latency histogram; the last bucket is +Inf
LATENCY_BUCKETS = (0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                   0.1, 0.25, 1.0)
RECENT_EVENTS = 200
#: how long a broker that left (expired, closed, idle, unregistered) stays on the status page
DEPARTED_KEEP_SECONDS = 600
#: at most this many departed brokers are kept, however fast brokers come and go
DEPARTED_LIMIT = 1000
_ROUTE, _SUCCESS = int(RequestCode.GET_ROUTEINFO_BY_TOPIC), int(ResponseCode.SUCCESS)  # ints hash faster than enums
#: every request code the server does not handle counts under this one: a peer cannot add series
OTHER_CODE = -1
#: every ``reason`` of namesrv_rejected_total and ``event`` of namesrv_broker_events_total, served at 0 from
#: the start so that a rate() alert has a series before the first one happens
REJECT_REASONS = ("frame_length", "header_length", "undecodable", "max_connections", "idle", "memory_budget",
                  "fd_reserve")
ROUTE_EVENT_KINDS = ("registered", "changed", "confirmed", "expired", "closed", "idle", "unregistered", "refused")


class LatencyHistogram:
    """Bucket counts and the sum of one request code's processing times."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.total = 0.0

    def observe(self, seconds: float, times: int = 1) -> None:
        self.counts[bisect_left(LATENCY_BUCKETS, seconds)] += times
        self.total += seconds * times

    def merged(self, other: LatencyHistogram) -> LatencyHistogram:
        both = LatencyHistogram()
        both.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        both.total = self.total + other.total
        return both


@dataclass
class RouteEvent:
    """A broker registered, changed, expired, closed, went idle, unregistered or was refused.
    ``count`` > 1: as many "changed" events of one broker (same topic count) since ``first_ts``."""

    seq: int
    ts: float
    kind: str
    info: dict[str, Any]
    count: int
    first_ts: float

    @property
    def broker_key(self) -> tuple[Any, Any, Any]:
        return self.info.get("cluster"), self.info.get("broker"), self.info.get("addr")


@dataclass
class Metrics:
    """Counters since start.  ``requests`` is keyed by (request code, response code or None for
    oneway); latency is the server's time from a request's bytes to its encoded answer."""

    requests: Counter = field(default_factory=Counter)
    latency: dict[int, LatencyHistogram] = field(default_factory=dict)
    rejected: Counter = field(default_factory=Counter)
    route_events: Counter = field(default_factory=Counter)
    recent_events: deque = field(default_factory=lambda: deque(maxlen=RECENT_EVENTS))
    #: the last departure of each broker (cluster, name, address) that left in the last DEPARTED_KEEP_SECONDS
    departed: dict[tuple[Any, Any, Any], RouteEvent] = field(default_factory=dict)
    #: route events since start: the last one's ``seq``
    events_seen: int = 0
    #: route lookups answered by AnswerCache.replies_from_memory (GET_ROUTEINFO_BY_TOPIC, SUCCESS), kept apart
    #: so the hottest path costs two additions and a bisect; ``requests_by_code`` folds them in
    answered_from_memory_count: int = 0
    memory_latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    bytes_received: int = 0
    bytes_sent: int = 0
    connections_accepted: int = 0
    #: audited requests (audit.py) by (operation, result)
    admin_requests: Counter = field(default_factory=Counter)
    #: saves that failed, so the change was refused (state/store.py), by (store key, errno name)
    store_failures: Counter = field(default_factory=Counter)
    #: reloads of aclAccountsFile that did not load, so the accounts read before stay (service.reload_acl)
    acl_reload_failures: int = 0
    clock: Callable[[], float] = time.time
    #: topics whose last broker left lately (the status page lists them)
    lost_topics: LostTopics = field(init=False)

    def __post_init__(self) -> None:
        self.lost_topics = LostTopics(self.clock, DEPARTED_KEEP_SECONDS, DEPARTED_LIMIT)

    def answered(self, code: int, response_code: int | None, seconds: float, times: int = 1) -> None:
        """``code`` must be one the server handles or OTHER_CODE (Dispatcher folds the others
        into it), so a peer cannot add series."""
        self.requests[code, response_code] += times
        histogram = self.latency.get(code)
        if histogram is None:
            histogram = self.latency[code] = LatencyHistogram()
        histogram.observe(seconds, times)

    def answered_from_memory(self, seconds: float, times: int) -> None:
        self.answered_from_memory_count += times
        latency = self.memory_latency
        latency.counts[bisect_left(LATENCY_BUCKETS, seconds)] += times
        latency.total += seconds * times

    def requests_by_code(self) -> tuple[Counter, dict[int, LatencyHistogram]]:
        """All requests and latencies, those answered from memory included."""
        requests = Counter(self.requests)
        latency = dict(self.latency)
        if self.answered_from_memory_count:
            requests[_ROUTE, _SUCCESS] += self.answered_from_memory_count
            route = latency.get(_ROUTE)
            latency[_ROUTE] = self.memory_latency if route is None else route.merged(self.memory_latency)
        return requests, latency

    def reject(self, reason: str) -> None:
        self.rejected[reason] += 1

    def route_event(self, kind: str, info: dict[str, Any]) -> None:
        """RouteInfoManager's listener: counted, and kept for the status page.  A broker's repeated
        "changed" events (a new data version at each heartbeat) fold into one, so they cannot push
        the departures out of the last RECENT_EVENTS."""
        self.route_events[kind] += 1
        self.events_seen += 1
        now = self.clock()
        event = RouteEvent(self.events_seen, now, kind, dict(info), 1, now)
        if kind == "changed":
            earlier = next((e for e in self.recent_events if e.kind == kind and e.info == event.info), None)
            if earlier is not None:
                self.recent_events.remove(earlier)
                event.count, event.first_ts = earlier.count + 1, earlier.first_ts
        self.recent_events.append(event)
        self.departed.pop(event.broker_key, None)
        if kind in DEPARTURES:
            self.departed[event.broker_key] = event
        self._forget_old_departures()

    def feed_event(self, kind: str, info: dict[str, Any]) -> None:
        """An event for the status page that is no route event (an audited request): kept with the
        route events, numbered in the same sequence, counted elsewhere."""
        self.events_seen += 1
        now = self.clock()
        self.recent_events.append(RouteEvent(self.events_seen, now, kind, dict(info), 1, now))

    def restore_events(self, events: list[RouteEvent]) -> None:
        """The last run's events (event_log.py), oldest first, before this run's: numbered on
        from the last one, so ``/api/events?since=`` stays monotonic across the restart."""
        kept = list(self.recent_events)
        self.recent_events.clear()
        self.recent_events.extend(events[-RECENT_EVENTS:])
        self.recent_events.extend(kept)
        if events:
            self.events_seen = max(self.events_seen, events[-1].seq)

    def departed_brokers(self) -> list[RouteEvent]:
        """Departures of the last DEPARTED_KEEP_SECONDS (at most DEPARTED_LIMIT), oldest first."""
        self._forget_old_departures()
        return list(self.departed.values())

    def _forget_old_departures(self) -> None:
        """Beyond DEPARTED_LIMIT, or older than DEPARTED_KEEP_SECONDS: gone from ``departed``."""
        departed, oldest_kept = self.departed, self.clock() - DEPARTED_KEEP_SECONDS
        while departed and (len(departed) > DEPARTED_LIMIT or next(iter(departed.values())).ts < oldest_kept):
            del departed[next(iter(departed))]


def latency_buckets(histogram: LatencyHistogram) -> Iterator[tuple[str, int]]:
    """Cumulative (le, count) pairs as Prometheus wants them."""
    running = 0
    for bound, count in zip((*LATENCY_BUCKETS, float("inf")), histogram.counts, strict=True):
        running += count
        yield ("+Inf" if bound == float("inf") else repr(bound)), running


def code_labels(code: int) -> list[str]:
    return ["other", "other"] if code == OTHER_CODE else [str(code), code_name(code)]


def request_labels(code: int, response_code: int | None) -> list[str]:
    return [*code_labels(code), "" if response_code is None else str(response_code)]
