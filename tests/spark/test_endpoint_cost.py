"""An endpoint's story (model/endpoints.py) in O(n log n) of its connections and refused attempts:
the rule walked every connection ended before each moment, and every outage and connection for
each refused attempt, so a capture of 100,000 one-packet connections to one port (27 MB: a port
scan, or a probe a second for a day) held the report's driver for hours. The stories are the
rule's as first written (kept here as the reference), on generated connections."""

from __future__ import annotations

import bisect
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from spark_analysis.model import endpoints
from spark_analysis.model.endpoints import Outage, _Connection, endpoint_stories
from spark_analysis.model.periods import NEAR_EXPIRY_S, SERVER_GONE_S, ConnectionEnds

SERVER = "10.0.0.2:9876"


def reference_outages(connections: list[_Connection]) -> list[Outage]:
    outages: list[Outage] = []
    by_end = sorted(connections, key=lambda c: c.last)
    lasts = [c.last for c in by_end]
    starts = sorted(c.first for c in connections)
    moments = sorted({c.first for c in connections} | {float("inf")})
    for moment in moments:
        ended = bisect.bisect_left(lasts, moment)
        if not ended or bisect.bisect_left(starts, moment) != ended:
            continue
        closes = [c.close for c in by_end[:ended] if c.close is not None]
        if not closes:
            continue
        gone = max(closes) - SERVER_GONE_S
        last_ones = [c for c in by_end[:ended] if c.last >= gone]
        if not all(c.by_server for c in last_ones):
            continue
        if not any(c.busy_until is not None and c.close is not None and c.close - c.busy_until < NEAR_EXPIRY_S
                   for c in last_ones):
            continue
        down = min(c.close for c in last_ones if c.close is not None)
        if outages and outages[-1].down == down:
            continue
        outages.append(Outage(down, None if moment == float("inf") else moment, len(last_ones)))
    return outages


def reference_unseen(connections: list[_Connection], attempts: list[tuple[float, int]],
                     outages: list[Outage]) -> list[Outage]:
    starts = sorted(c.first for c in connections)
    found: dict[float, Outage] = {}
    for t, _count in attempts:
        if any(o.down <= t and (o.up is None or t < o.up) for o in outages):
            continue
        after = bisect.bisect_right(starts, t)
        if not after or after == len(starts) or any(c.first <= t <= c.last for c in connections):
            continue
        found.setdefault(starts[after], Outage(t, starts[after], 0, unseen=True))
    return list(found.values())


def reference_place(story, attempts: list[tuple[float, int]], listened: bool) -> None:
    groups: dict[str, list[tuple[float, int]]] = {}
    for t, count in attempts:
        outage = next((o for o in story.outages if o.down <= t and (o.up is None or t < o.up)), None)
        if outage is not None and outage.up is not None:
            outage.refused += count
            continue
        groups.setdefault(endpoints.refused_when(story, t, outage, listened), []).append((t, count))
    story.refused = [(sum(c for _, c in found), found[0][0], found[-1][0], when) for when, found in groups.items()]


_times = st.integers(0, 60).map(float)


@st.composite
def _ends(draw) -> dict:
    ends = {}
    for port in range(draw(st.integers(0, 14))):
        first = draw(_times)
        last = first + draw(st.integers(0, 20))
        close = draw(st.one_of(st.none(), st.integers(0, int(last - first)).map(lambda d, f=first: f + d)))
        busy = draw(st.one_of(st.none(), st.integers(0, int(last - first)).map(lambda d, f=first: f + d)))
        accepted = draw(st.booleans())
        ends[(f"10.0.0.1:{40000 + port}", SERVER)] = ConnectionEnds(
            first, True, last, close is not None, close, draw(st.booleans()), True,
            first if accepted else None, tuple(draw(st.lists(_times, max_size=3))), busy)
    return ends


@settings(max_examples=400, deadline=None)
@given(_ends())
def test_the_stories_are_the_rule_s_as_first_written(ends: dict) -> None:
    made = endpoint_stories(ends)
    kept = (endpoints._outages, endpoints._unseen_outages, endpoints._place_refused)
    try:
        endpoints._outages, endpoints._unseen_outages, endpoints._place_refused = (
            reference_outages, reference_unseen, reference_place)
        expected = endpoint_stories(ends)
    finally:
        endpoints._outages, endpoints._unseen_outages, endpoints._place_refused = kept
    assert made == expected


class _Counted(_Connection):
    """A connection that counts how often its close is read: the work per connection."""

    reads = 0

    def __getattribute__(self, name: str):
        if name == "close":
            _Counted.reads += 1
        return object.__getattribute__(self, name)


def test_many_one_packet_connections_are_each_looked_at_a_few_times() -> None:
    """2,000 connections of one packet each, none spanning another (a port scan): the rule read
    each one's close once for every moment after it, 2 M reads; a few per connection now."""
    connections = [_Counted(float(n), float(n), None, False, None) for n in range(2000)]
    _Counted.reads = 0
    assert endpoints._outages(connections) == []
    assert _Counted.reads <= 5 * len(connections), _Counted.reads
    closed = [replace(c, close=c.last, by_server=True, busy_until=c.last) for c in connections]
    _Counted.reads = 0
    made = endpoints._outages(closed)  # each closed by the server, busy to its close: an outage a moment
    assert _Counted.reads <= 5 * len(closed), _Counted.reads
    assert made == reference_outages(closed) and len(made) > 1000
