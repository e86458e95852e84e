"""Server endpoints found in the capture, and what their own packets say of each: when it took
its first connection, when it went away and came back (a restart), when it stopped, and the
connection attempts it refused while nothing listened.

Evidence by endpoint (docs/capture-report.md): a server is the end of a connection that received
its SYN (the other end opened it), or, for a connection older than the capture, the end that is a
server elsewhere in it (else the end more connections share: a listener is shared, an ephemeral
port is not). A restart of an endpoint needs that endpoint's own evidence: its established
connections closed by the server together (within SERVER_GONE_S), at least one of them busy until
then (a server that closes connections silent for minutes is expiring them, not going away), with
none going on through that moment, then a new connection accepted. Refused attempts (a SYN
answered by a reset, never accepted) alone are never a restart: while the endpoint is down they are
part of the restart; before it first listened, after it stopped, or while it has live connections
(a self-probe of another address, a launch script polling the port) they are counted and told as
information. Between two of its connections, with none open through them, they are its own
evidence of a restart no connection saw (a cluster stopped cleanly, brokers first: nothing open for
the server to close as it went): a kernel resets a SYN only where nothing listens, and it listened
before and after (_unseen_outages).

Pure: the driver runs it over the reading tasks' ConnectionEnds (model/periods.py).
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from spark_analysis.model.periods import NEAR_EXPIRY_S, SERVER_GONE_S, ConnectionEnds, merge_ends

#: 4-tuple (lower, higher) "ip:port" -> how it starts and ends, over every file
Ends = Mapping[tuple[str, str], ConnectionEnds]


def merged_ends(by_file: Mapping[str, Ends]) -> dict[tuple[str, str], ConnectionEnds]:
    """Each 4-tuple's ends over every file (rotated files continue each other's connections)."""
    merged: dict[tuple[str, str], ConnectionEnds] = {}
    for ends in by_file.values():
        merge_ends(merged, ends)
    return merged


def server_sides(ends: Ends) -> dict[tuple[str, str], str]:
    """The server end of each 4-tuple: the end its SYN went to; for a 4-tuple whose SYN was not
    captured, an end that listens elsewhere in the capture, else the end more 4-tuples share."""
    sides: dict[tuple[str, str], str] = {}
    for key, found in ends.items():
        if found.syn_by_lower is not None:
            sides[key] = key[1] if found.syn_by_lower else key[0]
    listeners = set(sides.values())
    shared = Counter(end for key in ends for end in key)
    for key in ends.keys() - sides.keys():
        lower, higher = key
        if (lower in listeners) != (higher in listeners):
            sides[key] = lower if lower in listeners else higher
        else:
            sides[key] = max(key, key=lambda end: (shared[end], -_port(end)))
    return sides


@dataclass
class Outage:
    """The endpoint went away (its established connections closed by it together) at ``down``,
    and took a new connection again at ``up`` (None: not within the capture: it stopped)."""

    down: float
    up: float | None
    closed: int  # established connections it closed as it went away
    refused: int = 0  # attempts refused while it was down
    #: no connection was open as it went: ``down`` is its first refused attempt, the first sign of it
    unseen: bool = False


@dataclass
class EndpointStory:
    """One server endpoint as its packets tell it."""

    endpoint: str
    first: float  # its first segment in the capture
    last: float
    accepted: int = 0  # connections it accepted (a SYN-ACK seen)
    #: of those, the ones that carried no byte either way: a port check (a launch script's poll, a
    #: load balancer's probe), which says nothing of what the server is
    empty: int = 0
    first_accepted: float | None = None
    outages: list[Outage] = field(default_factory=list)
    #: refused attempts not during an outage: (count, first, last, when) with when one of
    #: "before_start" (it had accepted nothing yet), "after_stop", "while_up", "never_listening"
    refused: list[tuple[int, float, float, str]] = field(default_factory=list)

    @property
    def restarts(self) -> list[Outage]:
        return [o for o in self.outages if o.up is not None]

    @property
    def stopped(self) -> Outage | None:
        return self.outages[-1] if self.outages and self.outages[-1].up is None else None

    def run_starts(self) -> tuple[float, ...]:
        """When each run of the server starts as the capture sees it: the first, then each return."""
        return tuple(o.up for o in self.restarts if o.up is not None)

    def went_away(self, t: float) -> Outage | None:
        """The outage whose going-away ``t`` is part of (a close by the server within SERVER_GONE_S)."""
        return next((o for o in self.outages if o.down - SERVER_GONE_S <= t <= o.down + SERVER_GONE_S), None)


@dataclass
class _Connection:
    first: float
    last: float
    close: float | None
    by_server: bool
    busy_until: float | None  # its last segment carrying bytes


def endpoint_stories(ends: Ends, sides: Mapping[tuple[str, str], str] | None = None) -> dict[str, EndpointStory]:
    """Every server endpoint's story (see the module's docstring)."""
    sides = server_sides(ends) if sides is None else sides
    established: dict[str, list[_Connection]] = {}
    refused: dict[str, list[tuple[float, int]]] = {}
    stories: dict[str, EndpointStory] = {}
    for key, found in ends.items():
        server = sides[key]
        story = stories.get(server)
        if story is None:
            story = stories[server] = EndpointStory(server, found.first, found.last)
        story.first, story.last = min(story.first, found.first), max(story.last, found.last)
        refused.setdefault(server, []).extend((t, 1) for t in found.refused_at)
        if found.accepted_at is None and found.syn_by_lower is not None and found.last_payload is None:
            continue  # only refused attempts: never a connection
        first = found.first
        if found.accepted_at is not None:
            story.accepted += 1
            story.empty += found.last_payload is None
            first = found.accepted_at
            story.first_accepted = min(story.first_accepted or first, first)
        by_server = found.first_close is not None and found.close_by_lower == (server == key[0])
        established.setdefault(server, []).append(
            _Connection(first, found.last, found.first_close, by_server, found.last_payload))
    for server, story in stories.items():
        connections = sorted(established.get(server, []), key=lambda c: c.first)
        attempts = sorted(refused.get(server, []))
        story.outages = _outages(connections)
        story.outages = sorted(story.outages + _unseen_outages(connections, attempts, story.outages),
                               key=lambda o: o.down)
        _place_refused(story, attempts, bool(connections))
    return stories


def _outages(connections: list[_Connection]) -> list[Outage]:
    """Where the endpoint went away: a moment no connection spans, after which a new connection
    starts (a restart) or none (it stopped), and the connections that ended last before it (within
    SERVER_GONE_S) were all closed by the server, one of them busy until NEAR_EXPIRY_S before."""
    outages: list[Outage] = []
    by_end = sorted(connections, key=lambda c: c.last)
    lasts = [c.last for c in by_end]
    starts = sorted(c.first for c in connections)
    moments = sorted({c.first for c in connections} | {float("inf")})
    for moment in moments:
        ended = bisect.bisect_left(lasts, moment)
        if not ended or bisect.bisect_left(starts, moment) != ended:
            continue  # nothing before it, or a connection goes on through it
        closes = [c.close for c in by_end[:ended] if c.close is not None]
        if not closes:
            continue
        gone = max(closes) - SERVER_GONE_S
        last_ones = [c for c in by_end[:ended] if c.last >= gone]
        if not all(c.by_server for c in last_ones):
            continue
        if not any(c.busy_until is not None and c.close is not None and c.close - c.busy_until < NEAR_EXPIRY_S
                   for c in last_ones):
            continue  # idle connections closed: the server expiring them, not going away
        down = min(c.close for c in last_ones if c.close is not None)
        if outages and outages[-1].down == down:
            continue
        outages.append(Outage(down, None if moment == float("inf") else moment, len(last_ones)))
    return outages


def _unseen_outages(connections: list[_Connection], attempts: list[tuple[float, int]],
                    outages: list[Outage]) -> list[Outage]:
    """Restarts no connection saw: attempts refused at moments no connection of the endpoint spans,
    after one it took and before the next (nothing listened then; it listened before and after),
    outside the outages its closes told. One per next connection, down at its first refused attempt."""
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


def _place_refused(story: EndpointStory, attempts: list[tuple[float, int]], listened: bool) -> None:
    """Refused attempts during an outage count in it; the others are grouped by when they came."""
    groups: dict[str, list[tuple[float, int]]] = {}
    for t, count in attempts:
        outage = next((o for o in story.outages if o.down <= t and (o.up is None or t < o.up)), None)
        if outage is not None and outage.up is not None:
            outage.refused += count
            continue
        if not listened:
            when = "never_listening"
        elif outage is not None:
            when = "after_stop"
        elif story.first_accepted is not None and t < story.first_accepted:
            when = "before_start"
        else:
            when = "while_up"
        groups.setdefault(when, []).append((t, count))
    story.refused = [(sum(c for _, c in found), found[0][0], found[-1][0], when) for when, found in groups.items()]


def nameserver_endpoints(served: Mapping[tuple[str, int], int], namesrv_codes: Iterable[int]) -> set[str]:
    """The endpoints that were asked a NameServer's own requests (``served``: (server, code) -> count)."""
    codes = set(namesrv_codes)
    return {server for (server, code), count in served.items() if code in codes and count}


def _port(endpoint: str) -> int:
    return int(endpoint.rpartition(":")[2])
