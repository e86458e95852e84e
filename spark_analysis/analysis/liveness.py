"""Per-broker liveness from the decoded broker events: the rows of brokers.csv, what the findings
say of each broker and what the report plots of it.

A broker stays alive at the NameServer through REGISTER_BROKER requests that are not refused,
QUERY_DATA_VERSION (brokers with forceRegister=false send it every 30 s instead of registering)
and BROKER_HEARTBEAT (5.x); intervals and gaps are measured between those, within a capture
period only (nothing is known of a broker while nothing was captured), and not across an
UNREGISTER_BROKER (a broker that said goodbye is not silent). A broker last heard more than the
expiry before its period's end is silent until that end (an open gap). Brokers are told apart by
their brokerAddr header field.

A shuffle brings each broker's events to one task, which walks them in time order once (a broker
has a few thousand a day) and emits one row: its brokers.csv columns and, as JSON, its gaps,
CRC failures, refusals, topic-count drops, data versions going backwards, id changes, intervals
counted in buckets and heartbeats and topic counts per time bin. The driver collects those rows in
one job, with time bins only where the report may plot them: a task keeps the bins of its first
PLOTTED_BROKERS in the report's order, which include all it has of the brokers plotted.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spark_analysis.analysis.replay import ALIVE, CLOSED, EXPIRED, UNREGISTERED, Stay
from spark_analysis.decode.rows import CAPTURE_MISSED, CONNECTION_CLOSED
from spark_analysis.model.periods import (
    EXPIRY_SECONDS,
    INTERVAL_BUCKET_S,
    INTERVAL_RANGE_S,
    NEAR_EXPIRY_S,
    TimeBins,
    role,
)
from spark_analysis.model.sessions import FileSpans, files_within
from twisted_namesrv.remoting import RequestCode

_LAST_BUCKET = INTERVAL_RANGE_S // INTERVAL_BUCKET_S


@dataclass
class Liveness:
    """What the driver holds: one row per broker address sorted by address (brokers.csv columns
    plus ``details``, parsed), the time bins, and the tallies the rows' tasks passed on."""

    brokers: list[dict[str, Any]]
    time_bins: TimeBins
    tallies: list[bytes]
    #: what the stays of a session tell together (analysis/replay.py: fail-overs, moves, ...)
    stories: list[dict[str, Any]] = field(default_factory=list)

    def only_at(self, nameservers: set[str]) -> None:
        """Keep the brokers and stories of NameServer endpoints (a controller hears heartbeats too)."""
        self.brokers = [b for b in self.brokers if b["server"] in nameservers]
        self.stories = [s for s in self.stories if s["server"] in nameservers]

    def registered(self) -> list[dict[str, Any]]:
        """brokers.csv: the addresses that registered."""
        return [broker for broker in self.brokers if broker["registrations"]]


def plot_order(broker: dict[str, Any]) -> tuple[Any, ...]:
    """The report plots brokers that registered, with gaps first, then by cluster, name, id and address."""
    return (not broker["registrations"], broker["ended"] not in (ALIVE, "unregistered"),
            not (broker["would_expire"] or broker["near_expiry"]), broker["cluster"] or "",
            broker["broker_name"] or "",
            broker["broker_id"] if broker["broker_id"] is not None else -1, broker["broker_addr"])


class _Walk:
    """One broker's events walked in time order."""

    def __init__(self, time_bins: TimeBins, observed_until: float | None = None) -> None:
        self.time_bins = time_bins
        self.observed_until = observed_until  # the end of the stay's session's observation
        self.intervals: list[float] = []
        self.gaps: list[dict[str, Any]] = []
        self.previous_alive: float | None = None
        self.previous_period = 0  # the capture period of previous_alive
        self.trailing: list[float] = []  # silences open at a period's end, whatever their length
        self.missed: list[tuple[float, float, int]] = []  # (since, until, bytes) the capture missed (CAPTURE_MISSED)

    def alive(self, t: float, period: int) -> None:
        """A sign of life at ``t``, in capture period ``period`` (TimeBins.period_of)."""
        previous = self.previous_alive
        if previous is not None:
            if self.previous_period == period:
                self.interval(previous, t, False)
            else:
                self.silent_until_period_end()
        self.previous_alive, self.previous_period = t, period

    def interval(self, start: float, end: float, open_: bool) -> None:
        seconds = end - start
        if not open_:
            self.intervals.append(seconds)
        if seconds > NEAR_EXPIRY_S:  # past the expiry too: the replay expires none over bytes it missed
            missed = self.missed_within(start, end)
            held = {} if missed or open_ else self.missed_in(start, end)  # a silence partly the capture's
            self.gaps.append({"from": start, "to": end, "seconds": seconds,
                              "expired": seconds > EXPIRY_SECONDS and not (missed or held), "open": open_,
                              **missed, **held})

    def missed_in(self, start: float, end: float) -> dict[str, int]:
        """``missed_in``: the bytes the broker's connection carried within [start, end] that the capture
        missed, where they leave a stretch of it over NEAR_EXPIRY_S (the broker was silent that long for
        certain; whether they held a heartbeat is unknown, so the replay expired it at none of them)."""
        count = sum(count for since, until, count in self.missed if start <= since and until <= end)
        return {"missed_in": count} if count else {}

    def missed_within(self, start: float, end: float) -> dict[str, int]:
        """``missed``: the bytes the broker's connection carried within [start, end] that the capture
        missed, where they leave no stretch of it over NEAR_EXPIRY_S outside the times they were sent
        in (each between the chunks captured either side of it): such a silence is the capture's, not
        the broker's. Else an empty dict: the broker was silent (a 185 s silence ended by a
        registration the capture kept part of is still the broker's)."""
        heard, longest, missed = start, 0.0, 0
        for since, until, count in sorted(self.missed):
            if start <= since and until <= end:
                longest, heard, missed = max(longest, since - heard), max(heard, until), missed + count
        if not missed or max(longest, end - heard) > NEAR_EXPIRY_S:
            return {}
        return {"missed": missed}

    def silent_until_period_end(self) -> float | None:
        """A broker still registered when its period ended is silent till then: that silence
        counts in max_gap_s, and over NEAR_EXPIRY_S it is a gap (open). Returns its length."""
        seconds = None
        if self.previous_alive is not None:
            end = self.observed_until
            if end is None:
                end = self.time_bins.ends[self.time_bins.period_of(self.previous_alive)]
            seconds = max(end - self.previous_alive, 0.0)
            self.trailing.append(seconds)
            self.interval(self.previous_alive, end, True)
        self.previous_alive = None
        return seconds


def broker_summary(stay: Stay, time_bins: TimeBins, files: FileSpans = (), observed_until: float | None = None
                   ) -> dict[str, Any]:
    """One broker stay's brokers.csv columns and details, from its events (schema.EVENT_ROWS as
    dicts) and how the NameServer's replay says it ended (analysis/replay.py).

    Names, cluster, id and version: the last its requests gave; ``registrations``: its
    REGISTER_BROKER requests, refused or not; body sizes: of those; topic counts: what the
    NameServer held for its group over the stay, by the replay (replay.Stay.topics: the broker
    name's queues in the server's tables, after deletions and restarts too), and their drops (with
    the topics that left); data versions going backwards: of accepted registrations;
    ``ended``: how its stay ended (replay.ALIVE ... replay.REFUSED); ``clients``: the client ends its
    registrations came from (findings.began_mid_stream: whose connections a capture began within).
    ``observed_until``: when the captures that observed its server ended (Sessions.end_of; else
    its capture period's end): a broker alive at the end is silent until then."""
    events = stay.events
    walk, registered, refused, crc_failures, bins = _walk(events, time_bins, observed_until, stay.topics)
    trailing = walk.silent_until_period_end() if stay.end == ALIVE else None
    if stay.end == EXPIRED and stay.ended_at is not None and stay.silence_s is not None:
        walk.gaps.append({"from": stay.ended_at - stay.silence_s, "to": stay.ended_at, "seconds": stay.silence_s,
                          "expired": True, "open": False})  # the silence the server ended
        walk.trailing.append(stay.silence_s)
    version = next((e["version_name"] for e in reversed(events) if e["version_name"] is not None), None)
    registrations = [e for e in events if e["code"] == RequestCode.REGISTER_BROKER]
    requests = [e for e in events if e["code"] not in (CONNECTION_CLOSED, CAPTURE_MISSED)] or events
    return {
        "session": stay.session, "server": stay.server,
        "input": files_within(files, events[0]["t"], events[-1]["t"]),
        "cluster": stay.cluster, "broker_name": stay.broker_name, "broker_id": stay.broker_id,
        "role": role(stay.broker_id), "broker_addr": stay.broker_addr, "version": version,
        "first_seen": requests[0]["t"], "last_seen": requests[-1]["t"], "registrations": len(registrations),
        "refused_registrations": len(refused), "crc_failures": len(crc_failures),
        **_intervals(walk), "near_expiry": sum(not (gap["expired"] or gap.get("missed")) for gap in walk.gaps),
        "would_expire": int(stay.end == EXPIRED), **_bodies(registrations, stay.topics),
        "unregistered": stay.end == UNREGISTERED, "ended": stay.end,
        "connection_closes": int(stay.end == CLOSED), "ended_at": stay.ended_at, "silence_s": stay.silence_s,
        "ids": [{"broker_id": i, "role": role(i), "from": t} for i, t in stay.ids],
        "gaps": walk.gaps, "crc_failure_times": crc_failures,
        "closes": [{"t": stay.ended_at, "how": stay.closed}] if stay.end == CLOSED else [],
        "refused": refused, "closed": stay.closed,
        "clients": sorted({e["client"] for e in registrations if e["client"] is not None}),
        "last_alive": stay.last_alive if registered else None,
        "trailing_s": trailing, "registered_again": stay.back,
        "maybe_back_as": [{"broker": name, "t": t} for name, t in stay.maybe_back_as],
        "topic_drops": stay.topic_drops,
        "version_backwards": _drops(registered, "data_version_counter", "data_version_ts"),
        "interval_buckets": _buckets(walk.intervals),
        "bins": {"bin": sorted(bins), "heartbeats": [bins[index][0] for index in sorted(bins)],
                 "topics": [bins[index][1] for index in sorted(bins)]},
    }


_Walked = tuple["_Walk", list[dict[str, Any]], list[dict[str, Any]], list[float], dict[int, list[Any]]]


def _walk(events: list[dict[str, Any]], time_bins: TimeBins, observed_until: float | None = None,
          topics: Sequence[tuple[float, int]] = ()) -> _Walked:
    """A stay's signs of life walked in time order: intervals and gaps, accepted and refused
    registrations, CRC failures, and heartbeats and topics held (``topics``: replay.Stay.topics)
    per time bin."""
    changes = [t for t, _ in topics]
    walk = _Walk(time_bins, observed_until)
    registered: list[dict[str, Any]] = []
    refused: list[dict[str, Any]] = []
    crc_failures: list[float] = []
    bins: dict[int, list[Any]] = {}
    starts, period, since, until = time_bins.starts, 0, math.inf, -math.inf  # [since, until): period's times
    of_in, alive = time_bins.of_in, walk.alive
    for event in events:
        t, code = event["t"], event["code"]
        if code == CONNECTION_CLOSED:
            walk.previous_alive = None
            continue
        if code == CAPTURE_MISSED:
            walk.missed.append((event["missed_since"], t, event["missed"]))
            continue
        if not since <= t < until:  # a period's events follow each other: searched once per period
            period = time_bins.period_of(t)
            since = starts[period] if period else -math.inf
            until = starts[period + 1] if period + 1 < len(starts) else math.inf
        index = of_in(period, t)
        cell = bins.get(index)
        if cell is None:
            cell = bins[index] = [0, None]
        if code == RequestCode.REGISTER_BROKER:
            if event["crc_ok"] is False:
                crc_failures.append(t)
            if event["response_code"]:
                refused.append({"t": t, "response_code": event["response_code"],
                                "crc_failure": event["crc_ok"] is False})
            else:
                registered.append(event)
                at = bisect.bisect_right(changes, t) - 1
                if at >= 0:
                    cell[1] = max(cell[1] or 0, topics[at][1])
        elif code == RequestCode.UNREGISTER_BROKER:
            walk.previous_alive = None
        if event["alive"]:
            cell[0] += 1
            alive(t, period)
    return walk, registered, refused, crc_failures, bins


def _intervals(walk: _Walk) -> dict[str, Any]:
    percentiles = np.percentile(walk.intervals, [50, 90, 99]).tolist() if walk.intervals else [None] * 3
    return {"interval_p50_s": percentiles[0], "interval_p90_s": percentiles[1], "interval_p99_s": percentiles[2],
            "max_gap_s": max(walk.intervals + walk.trailing, default=None)}


def _bodies(registrations: list[dict[str, Any]], held: list[tuple[float, int]]) -> dict[str, Any]:
    sizes = [e["body_len"] for e in registrations if e["body_len"] is not None]
    compressed = {e["compressed"] for e in registrations if e["compressed"] is not None}
    topics = [count for _, count in held]
    return {"body_len_min": min(sizes, default=None), "body_len_median": float(np.median(sizes)) if sizes else None,
            "body_len_max": max(sizes, default=None),
            "compressed": "mixed" if len(compressed) > 1 else str(compressed.pop()).lower() if compressed else None,
            "topic_count_first": topics[0] if topics else None, "topic_count_last": topics[-1] if topics else None,
            "topic_count_max": max(topics, default=None)}


def _buckets(intervals: list[float]) -> list[int]:
    buckets = [0] * (_LAST_BUCKET + 1)
    for interval in intervals:
        buckets[min(int(interval // INTERVAL_BUCKET_S), _LAST_BUCKET)] += 1
    return buckets


def _drops(registrations: list[dict[str, Any]], key: str, *also: str) -> list[dict[str, Any]]:
    """Where ``key`` of accepted registrations went down from one to the next (with ``also``)."""
    drops = []
    previous = None
    for event in registrations:
        if event[key] is None:
            continue
        if previous is not None and event[key] < previous[key]:
            drops.append({"t": event["t"], "from": previous[key], "to": event[key],
                          **{f"{name}_from": previous[name] for name in also},
                          **{f"{name}_to": event[name] for name in also}})
        previous = event
    return drops
