"""What the server counts for ``/metrics``: requests, latency, bytes, rejections, route events by kind,
failed saves.

Counting happens on the request path, the hottest route lookups included, so it is plain ints
and dicts bumped in place; they become Prometheus families only when scraped (``collector``).  No label carries a
topic, broker or client: codes, response codes, event kinds and rejection reasons only.  What the
status page lists has owners of its own (events.py, departures.py, lost_topics.py; the audit
trail's counts: audit.py), wired by the composition root (service.py).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .remoting.codes import RequestCode, ResponseCode, code_name

#: upper bounds (seconds) of the server-side latency histogram; the last bucket is +Inf
LATENCY_BUCKETS = (0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                   0.1, 0.25, 1.0)
_ROUTE, _SUCCESS = int(RequestCode.GET_ROUTEINFO_BY_TOPIC), int(ResponseCode.SUCCESS)  # ints hash faster than enums
#: every request code the server does not handle counts under this one: a peer cannot add series
OTHER_CODE = -1
#: every ``reason`` of namesrv_rejected_total and ``event`` of namesrv_broker_events_total, served at 0 from
#: the start so that a rate() alert has a series before the first one happens
REJECT_REASONS = ("frame_length", "header_length", "undecodable", "max_connections", "idle", "memory_budget",
                  "fd_reserve", "fd_table_full", "max_connections_per_host")
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
class Metrics:
    """Counters since start.  ``requests`` is keyed by (request code, response code or None for
    oneway); latency is the server's time from a request's bytes to its encoded answer."""

    requests: Counter[tuple[int, int | None]] = field(default_factory=Counter)
    latency: dict[int, LatencyHistogram] = field(default_factory=dict)
    rejected: Counter[str] = field(default_factory=Counter)
    #: route events by kind (namesrv_broker_events_total)
    route_events: Counter[str] = field(default_factory=Counter)
    #: route lookups answered by AnswerCache.replies_from_memory (GET_ROUTEINFO_BY_TOPIC, SUCCESS), kept apart
    #: so the hottest path costs two additions and a bisect; ``requests_by_code`` folds them in
    answered_from_memory_count: int = 0
    memory_latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    bytes_received: int = 0
    bytes_sent: int = 0
    connections_accepted: int = 0
    #: saves that failed, so the change was refused (state/store.py), by (store key, errno name)
    store_failures: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: the periodic stores (topologyPath, eventsPath, routeSnapshotPath) whose last write failed and none
    #: succeeded since, each with its last failure's errno name (namesrv_store_failing): NamesrvStoreNotWritten
    #: ends once the file is written again, and names the error it fails with now
    store_failing: dict[str, str] = field(default_factory=dict)
    #: store files not loaded at start (topologyPath, routeSnapshotPath), by (store key, reason)
    store_load_refusals: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: starts on this data directory, this one included (starts.py: kept in its file across restarts)
    starts: int = 0
    #: those of them after a run that did not stop cleanly (killed, crashed), this one included if so
    unclean_starts: int = 0
    #: reloads of aclAccountsFile that did not load, so the accounts read before stay (service.reload_acl)
    acl_reload_failures: int = 0
    #: log lines its file (or stdout) refused, by errno name: the log writer's own count (logs.LineWriter.lost),
    #: handed over where the server is built (tap.makeService); empty when another observer writes the log
    log_lines_lost: Counter[str] = field(default_factory=Counter)
    #: pushes to brokers (server.py: Notifier) by result: sent, failed, superseded, dropped
    pushes: Counter[str] = field(default_factory=Counter)
    #: WATCHDOG=1s systemd could not be sent (sdnotify.Watchdog: the first of a run is a warning line)
    watchdog_failures: int = 0

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

    def requests_by_code(self) -> tuple[Counter[tuple[int, int | None]], dict[int, LatencyHistogram]]:
        """All requests and latencies, those answered from memory included."""
        requests = Counter(self.requests)
        latency = dict(self.latency)
        if self.answered_from_memory_count:
            requests[_ROUTE, _SUCCESS] += self.answered_from_memory_count
            route = latency.get(_ROUTE)
            latency[_ROUTE] = self.memory_latency if route is None else route.merged(self.memory_latency)
        return requests, latency

    def watchdog_failed(self) -> None:
        self.watchdog_failures += 1

    def reject(self, reason: str) -> None:
        self.rejected[reason] += 1

    def route_event(self, kind: str, info: dict[str, Any]) -> None:
        """RouteInfoManager's listener: counted by kind."""
        self.route_events[kind] += 1


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
